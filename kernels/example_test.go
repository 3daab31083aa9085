package kernels_test

import (
	"fmt"

	"github.com/linearize/linearize/kernels"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// Running one kernel directly: Add broadcasts a bias over the rows of a
// matrix.
func ExampleLookup() {
	add, err := kernels.Lookup("", "Add", 17)
	if err != nil {
		fmt.Println(err)
		return
	}
	op := "Add"
	ctx := &kernels.Context{Node: &onnxpb.NodeProto{OpType: &op}, Opset: 17}
	x := onnx.NewFloat([]int{2, 3}, []float32{1, 2, 3, 4, 5, 6})
	b := onnx.NewFloat([]int{3}, []float32{10, 20, 30})
	out, err := add(ctx, []*onnx.Tensor{x, b})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(out[0].Shape, out[0].Floats())

	// An op the native backend does not implement is an error.
	_, err = kernels.Lookup("", "RoiAlign", 17)
	fmt.Println(err)
	// Output:
	// [2 3] [11 22 33 14 25 36]
	// kernels: op RoiAlign (domain ai.onnx, opset 17) is not supported by the native backend
}
