package features

import (
	"fmt"
	"math"

	"github.com/linearize/linearize/onnx"
)

// tagLara is the stream tag of LARA's proposal noise; it is far from the
// small tags of features.go so that a new tag there cannot collide.
const tagLara = 0x4c

// MaxLaraSamples bounds landmarks × samples per landmark.
const MaxLaraSamples = 1 << 20

// LaraNoise samples the frozen proposal noise of LaraAttention for one
// layer: a float32 tensor [1, landmarks·samples, d] of N(0, sigma²)
// entries, shared by the heads (row c·samples + s is sample s of landmark
// c). The result depends only on (seed, layer, landmarks, samples, d,
// sigma).
func LaraNoise(seed uint64, layer, landmarks, samples, d int, sigma float64) (*onnx.Tensor, error) {
	if landmarks < 1 || samples < 1 || d < 1 || layer < 0 {
		return nil, fmt.Errorf("features: LARA noise needs landmarks, samples and d ≥ 1 and layer ≥ 0, got landmarks=%d samples=%d d=%d layer=%d", landmarks, samples, d, layer)
	}
	if !(sigma >= 0) || math.IsInf(sigma, 0) {
		return nil, fmt.Errorf("features: LARA noise sigma %g must be finite and non-negative", sigma)
	}
	if landmarks > MaxLaraSamples/samples || landmarks*samples > (1<<30)/d {
		return nil, fmt.Errorf("features: LARA noise of %d landmarks × %d samples × %d is too large", landmarks, samples, d)
	}
	r := landmarks * samples
	rng := stream(seed, tagLara, layer, 0)
	data := make([]float32, r*d)
	for i := range data {
		data[i] = float32(rng.NormFloat64() * sigma)
	}
	return onnx.NewFloat([]int{1, r, d}, data), nil
}
