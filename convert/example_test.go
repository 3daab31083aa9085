package convert_test

import (
	"fmt"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/models"
	"github.com/linearize/linearize/ops"
)

// Detect finds the attention blocks of a BERT graph; ToPerformer replaces
// them by PerformerAttention ops with frozen random features.
func Example() {
	cfg := models.Config{Vocab: 50, Hidden: 16, Heads: 4, Layers: 2, Intermediate: 32,
		MaxPositions: 16, TypeVocab: 2, Opset: 17, Seed: 1}
	m, err := models.BERT(cfg)
	if err != nil {
		panic(err)
	}
	d, err := convert.Detect(m)
	if err != nil {
		panic(err)
	}
	for _, b := range d.Blocks {
		fmt.Printf("block %d: %d heads × %d, scale %.3g, bias %s, convertible %v\n", b.Layer, b.Heads, b.HeadDim, b.Scale, b.Bias, b.Convertible)
	}
	pm, rep, err := convert.ToPerformer(m, convert.PerformerOptions{Features: 32, Seed: 1, FeatureMap: ops.FeaturesFavorPlus, Center: convert.CenterOff})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%d converted, %d parameters added, %d functions in the model\n", len(rep.Converted), rep.Params, len(pm.Functions))
	// Output:
	// block 0: 4 heads × 4, scale 0.5, bias per-key, convertible true
	// block 1: 4 heads × 4, scale 0.5, bias per-key, convertible true
	// 2 converted, 256 parameters added, 1 functions in the model
}
