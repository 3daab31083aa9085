package convert_test

import (
	"fmt"
	"path/filepath"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/onnx"
)

// ExtendPositions scales a rotary encoder's frequencies so that it reads
// four times the length it was trained for: here a small ModernBERT
// trained for 32 tokens, whose global layers (blocks 0 and 2) get NTK
// scaling computed from each input's length, while the frequencies only
// its sliding-window layer reads are kept. ContextLimit then reads the
// new length from the model's metadata.
func ExampleExtendPositions_rotary() {
	m, err := onnx.Load(filepath.Join("..", "testdata", "rope", "base.onnx"))
	if err != nil {
		panic(err)
	}
	ext, rep, err := convert.ExtendPositions(m, convert.ExtendOptions{MaxPositions: 128, Trained: 32, Method: convert.RotaryDynamic})
	if err != nil {
		panic(err)
	}
	for _, r := range rep.Rotary {
		fmt.Printf("θ %.0f, %d dims, blocks %v, scaled %v\n", r.Base, r.Dims, r.Layers, r.Scaled)
	}
	lim, err := convert.ContextLimit(ext, "")
	if err != nil {
		panic(err)
	}
	fmt.Println(lim.Tokens, lim.Kind)
	// Output:
	// θ 160000, 8 dims, blocks [0 2], scaled true
	// θ 10000, 8 dims, blocks [1], scaled false
	// 128 metadata
}
