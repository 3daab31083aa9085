package convert

import (
	"math"
	"math/rand/v2"

	"github.com/linearize/linearize/onnx"
)

// sampleOmega draws ω for one layer. TEMPORARY until package features
// lands: iid Gaussian rows with sqrt-d norms.
func sampleOmega(o PerformerOptions, layer, heads, d int) (*onnx.Tensor, error) {
	h := 1
	if o.PerHead {
		h = heads
	}
	r := rand.New(rand.NewPCG(o.Seed, uint64(layer)))
	data := make([]float32, h*o.Features*d)
	for i := range data {
		data[i] = float32(r.NormFloat64())
	}
	return onnx.NewFloat([]int{h, o.Features, d}, data), nil
}

// sampleProjections draws E and F for one layer. TEMPORARY until package
// features lands.
func sampleProjections(o LinformerOptions, layer, heads int) (e, f *onnx.Tensor, err error) {
	h := heads
	if o.Share != "none" {
		h = 1
	}
	r := rand.New(rand.NewPCG(o.Seed, uint64(layer)))
	gen := func() *onnx.Tensor {
		data := make([]float32, h*o.K*o.MaxLen)
		s := 1 / math.Sqrt(float64(o.K))
		for i := range data {
			data[i] = float32(r.NormFloat64() * s)
		}
		return onnx.NewFloat([]int{h, o.K, o.MaxLen}, data)
	}
	e = gen()
	if o.Share == "kv" || o.Share == "layerwise" {
		return e, e, nil
	}
	return e, gen(), nil
}
