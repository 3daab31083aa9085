package convert

import (
	"fmt"
	"math"

	"github.com/linearize/linearize/features"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

// DefaultLaraLandmarks is ToLARA's landmark count C when none is given:
// the count the fidelity study measured best (all-MiniLM-L6-v2, 512-token
// documents: C = 256 kept 0.841 mean-pooled cosine zero-shot, C = 64 only
// 0.711); see the README's fidelity table.
const DefaultLaraLandmarks = 256

// LaraOptions configures ToLARA.
type LaraOptions struct {
	// Landmarks is C, the number of landmarks (segment means of Q and K
	// at run time) and of Gaussian proposals centred at them (default
	// DefaultLaraLandmarks).
	Landmarks int
	// Samples is the number of frozen samples per proposal (default 1):
	// the op draws Landmarks·Samples ω per head.
	Samples int
	// Sigma is the standard deviation of the proposals' noise (default 1,
	// the paper's unit-covariance proposals; negative is an error).
	Sigma float64
	// Seed selects the noise (with the layer index).
	Seed uint64
	// Layers selects blocks by their Detect layer index; nil means all.
	Layers []int
	// Positions, when MaxPositions > 0, first grows the absolute position
	// table (ExtendPositions) so the model accepts longer inputs.
	Positions ExtendOptions
}

func (o LaraOptions) resolve() (LaraOptions, error) {
	if o.Landmarks == 0 {
		o.Landmarks = DefaultLaraLandmarks
	}
	if o.Samples == 0 {
		o.Samples = 1
	}
	if o.Sigma == 0 {
		o.Sigma = 1
	}
	if o.Landmarks < 1 || o.Landmarks > ops.MaxLandmarks {
		return o, optionError("lara", "Landmarks", fmt.Sprintf("%d: want 1..%d", o.Landmarks, ops.MaxLandmarks))
	}
	if o.Samples < 1 || o.Landmarks > features.MaxLaraSamples/o.Samples {
		return o, optionError("lara", "Samples", fmt.Sprintf("%d per landmark: want 1..%d in all", o.Samples, features.MaxLaraSamples))
	}
	if !(o.Sigma > 0) || math.IsInf(o.Sigma, 0) {
		return o, optionError("lara", "Sigma", fmt.Sprintf("%g must be positive and finite", o.Sigma))
	}
	return o, nil
}

// ToLARA returns a copy of m in which every convertible attention core (of
// the selected layers) is a LaraAttention node: LARA randomized attention
// (Zheng et al., ICML 2022) with C landmarks computed from each sequence's
// valid tokens at run time and the proposals' noise, N(0, σ²) of shape
// [1, C·Samples, D], frozen per layer as an initializer drawn from
// (Seed, layer), so the converted model is deterministic. m is not
// modified.
func ToLARA(m *onnxpb.ModelProto, o LaraOptions) (*onnxpb.ModelProto, *Report, error) {
	o, err := o.resolve()
	if err != nil {
		return nil, nil, err
	}
	a := ops.LaraAttrs{Landmarks: o.Landmarks}
	rw := &rewriter{op: ops.LaraOp, layers: o.Layers, positions: o.Positions}
	rw.report.Options = ReportOptions{Seed: o.Seed, Landmarks: o.Landmarks, Samples: o.Samples, Sigma: o.Sigma}
	rw.core = func(b *Block, q, k, v, bias string) (*onnxpb.NodeProto, error) {
		if !(b.Scale > 0) {
			return nil, fmt.Errorf("score scale %g is not positive: LARA works on √scale·q and √scale·k", b.Scale)
		}
		noise, err := features.LaraNoise(o.Seed, b.Layer, o.Landmarks, o.Samples, b.HeadDim, o.Sigma)
		if err != nil {
			return nil, err
		}
		name, err := rw.addInit(fmt.Sprintf("linearize/layer%d/lara_noise", b.Layer), noise)
		if err != nil {
			return nil, err
		}
		na := a
		na.Scale = float32(b.Scale)
		return ops.NewLaraNode(rw.names.Name(fmt.Sprintf("linearize/layer%d/LaraAttention", b.Layer)),
			[]string{q, k, v, name, bias}, rw.names.Name(fmt.Sprintf("linearize/layer%d/attn", b.Layer)), na), nil
	}
	rw.function = func(opset int64) (*onnxpb.FunctionProto, error) { return ops.LaraFunction(opset, a) }
	return rw.run(m)
}

// Lara is the cost-model form of ToLARA.
const Lara Form = "lara"

// laraConversion is ToLARA in the registry (registry.go).
var laraConversion = Conversion{
	Name: string(Lara),
	Op:   ops.LaraOp,
	Sizes: []Size{{Flag: "landmarks", Option: "Landmarks", Usage: "LARA landmarks C, one sample each (convert lara's default)", Default: DefaultLaraLandmarks,
		field: func(c *CostModel) *int { return &c.Landmarks }}},
	bench: func(m *onnxpb.ModelProto, s Sizes, seed uint64) (*onnxpb.ModelProto, *Report, error) {
		return ToLARA(m, LaraOptions{Landmarks: s["landmarks"], Seed: seed})
	},
	describe: func(ro ReportOptions) string {
		return fmt.Sprintf("C = %d, %d sample(s) each", ro.Landmarks, ro.Samples)
	},
	cost: conversionCost{
		layer:  laraCost,
		priced: func(c CostModel) bool { return c.Landmarks > 0 },
		defaults: func(c *CostModel) {
			if c.Samples == 0 {
				c.Samples = 1
			}
		},
		fromReport: func(c *CostModel, ro ReportOptions) { c.Landmarks, c.Samples = ro.Landmarks, ro.Samples },
		header: func(c CostModel) string {
			return fmt.Sprintf("LARA C = %d × %d samples", c.Landmarks, max(c.Samples, 1))
		},
	},
}

// laraCost prices LaraAttention with C = c.Landmarks landmarks and R =
// C·c.Samples proposals:
//
//	core         n·h·(4R + 3C) + R·C·h  ω·K̃ and the weighted values per
//	                                    sample, ω·Q̃, the query-landmark
//	                                    affinities, the one-hot landmark
//	                                    means of Q and K; the proposals'
//	                                    densities at every sample (R·C)
//	elementwise  19·H·n·R + 5·H·n·C + 9·n·C + 7·n·h (approximate: the key
//	             and query weights, their exps and normalisations over
//	             [n,R], the affinity softmax over [n,C], the one-hot
//	             landmark means)
func laraCost(c CostModel, n int, lc *LayerCost) {
	N, h, H := int64(n), int64(c.Dims.Hidden), int64(c.Dims.Heads)
	C := int64(c.Landmarks)
	R := C * int64(max(c.Samples, 1))
	lc.Core = N*h*(4*R+3*C) + R*C*h
	lc.Exps = H*N*(3*R+C) + H*R*C
	lc.Elementwise = 19*H*N*R + 5*H*N*C + 9*N*C + 7*N*h
	lc.keep(4*H*N*R, "samples H·n·R")
}
