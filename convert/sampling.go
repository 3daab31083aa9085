package convert

import (
	"github.com/linearize/linearize/features"
	"github.com/linearize/linearize/onnx"
)

// sampleOmega draws ω for one layer from package features (deterministic
// from the seed and the layer index).
func sampleOmega(o PerformerOptions, layer, heads, d int) (*onnx.Tensor, error) {
	return features.Omega(o.Seed, layer, heads, o.Features, d, features.OmegaOptions{Kind: o.Omega, Norms: o.Norms, PerHead: o.PerHead})
}

// sampleProjections draws E and F for one layer from package features.
// With sharing "kv" and "layerwise" F is E (one initializer); with
// "layerwise" it does not depend on the layer and the rewrite adds it once.
func sampleProjections(o LinformerOptions, layer, heads int) (e, f *onnx.Tensor, err error) {
	return features.Projection(o.Seed, layer, heads, o.K, o.MaxLen, features.ProjOptions{Share: o.Share})
}
