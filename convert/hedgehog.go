package convert

import (
	"fmt"
	"math"

	"github.com/linearize/linearize/features"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

// HedgehogOptions configures ToHedgehog.
type HedgehogOptions struct {
	// Features is F: each head's learned map has 2F features,
	// exp(±(x·W) + bias − norm·‖x‖²). Zero is the head size.
	Features int
	// Block is b: each query attends exactly to the keys of its block of b
	// positions and of the Reach blocks on either side, and to the rest
	// through the learned features, in one normaliser (default
	// DefaultBlock).
	// Linear drops the exact part: pure linear attention with a state of
	// fixed size per head (Block and Reach are then ignored).
	Block  int
	Reach  int // blocks on each side attended exactly (default 1; ops.NoReach: 0)
	Linear bool
	// Seed draws the initial maps (see ToHedgehog).
	Seed uint64
	// Layers selects blocks by their Detect layer index; nil means all.
	Layers []int
	// Positions, when MaxPositions > 0, first grows the absolute position
	// table (ExtendPositions) so the model accepts longer inputs.
	Positions ExtendOptions
}

// InitDamping is ρ, the factor between the initial maps and unbiased
// FAVOR+ features (see ToHedgehog): on six heads of all-MiniLM-L6-v2's
// first layer, 300 steps of attention transfer from ρ = 0.3 end at a
// mean held-out relative error of 0.154, from ρ = 1 at 0.200.
const InitDamping = 0.3

// MaxHedgehogFeatures bounds HedgehogOptions.Features.
const MaxHedgehogFeatures = 1 << 12

// attrs resolves the defaults and checks the options.
func (o HedgehogOptions) attrs() (ops.HedgehogAttrs, error) {
	if o.Features < 0 || o.Features > MaxHedgehogFeatures {
		return ops.HedgehogAttrs{}, optionError("hedgehog", "Features", fmt.Sprintf("%d: want 1..%d (0: the head size)", o.Features, MaxHedgehogFeatures))
	}
	if o.Linear {
		return ops.HedgehogAttrs{}, nil
	}
	if o.Block == 0 {
		o.Block = DefaultBlock
	}
	switch o.Reach {
	case 0:
		o.Reach = 1
	case ops.NoReach:
		o.Reach = 0
	}
	if o.Block < 1 || o.Block > ops.MaxLocalBlock {
		return ops.HedgehogAttrs{}, optionError("hedgehog", "Block", fmt.Sprintf("%d: want 1..%d", o.Block, ops.MaxLocalBlock))
	}
	if o.Reach < 0 || o.Reach > ops.MaxReach {
		return ops.HedgehogAttrs{}, optionError("hedgehog", "Reach", fmt.Sprintf("%d: want 0..%d", o.Reach, ops.MaxReach))
	}
	return ops.HedgehogAttrs{Block: o.Block, Reach: o.Reach}, nil
}

// ToHedgehog returns a copy of m in which every convertible attention core
// (of the selected layers) is a HedgehogAttention node: exact attention to
// the keys near each query (unless o.Linear) and learned feature-map
// attention to the others, in one normaliser. Each head's maps start as
// damped hyperbolic FAVOR+ random features drawn from o.Seed:
// W = ρ·√scale·Ωᵀ with orthogonal Gaussian Ω, norm ρ²·scale/2, bias
// −½·log 2F, which estimates exp(ρ²·scale·q·k) — the softmax kernel at a
// higher temperature (ρ = InitDamping; ρ = 1 would be the unbiased
// FAVOR+ estimate, whose variance on a pretrained model's large logits
// training does not recover from). finetune.Transfer then trains the
// maps on calibration text, which is what makes the conversion faithful.
// m is not modified.
func ToHedgehog(m *onnxpb.ModelProto, o HedgehogOptions) (*onnxpb.ModelProto, *Report, error) {
	a, err := o.attrs()
	if err != nil {
		return nil, nil, err
	}
	return hedgehogRewriter(a, o.Features, o.Seed, o.Layers, o.Positions).run(m)
}

// hedgehogRewriter rewrites the selected blocks into HedgehogAttention
// nodes with attributes a and maps of f features (0: the head size)
// drawn from seed (ToHedgehog, ToLong with Learned).
func hedgehogRewriter(a ops.HedgehogAttrs, f int, seed uint64, layers []int, positions ExtendOptions) *rewriter {
	rw := &rewriter{op: ops.HedgehogOp, layers: layers, positions: positions}
	rw.report.Options = ReportOptions{Seed: seed, Features: f, Block: a.Block}
	rw.core = func(b *Block, q, k, v, bias string) (*onnxpb.NodeProto, error) {
		f := f
		if f == 0 {
			f = b.HeadDim
		}
		params, err := hedgehogInit(seed, b.Layer, b.Heads, b.HeadDim, f, b.Scale)
		if err != nil {
			return nil, err
		}
		inputs := []string{q, k, v, bias}
		base := fmt.Sprintf("linearize/layer%d/", b.Layer)
		for _, p := range []struct {
			name string
			t    *onnx.Tensor
		}{{"q_weight", params.QWeight}, {"q_bias", params.QBias}, {"q_norm", params.QNorm}, {"k_weight", params.KWeight}, {"k_bias", params.KBias}, {"k_norm", params.KNorm}} {
			name, err := rw.addInit(base+p.name, p.t)
			if err != nil {
				return nil, err
			}
			inputs = append(inputs, name)
		}
		na := a
		na.Scale = float32(b.Scale)
		return ops.NewHedgehogNode(rw.names.Name(base+"HedgehogAttention"), inputs, rw.names.Name(base+"attn"), na), nil
	}
	rw.function = func(opset int64) (*onnxpb.FunctionProto, error) { return ops.HedgehogFunction(opset, a) }
	return rw
}

// hedgehogInit draws the initial maps of one layer: per head, hyperbolic
// FAVOR+ features for queries and keys alike (see ToHedgehog).
func hedgehogInit(seed uint64, layer, heads, d, f int, scale float64) (ops.HedgehogParams, error) {
	omega, err := features.Omega(seed, layer, heads, f, d, features.OmegaOptions{Kind: features.Orthogonal, Norms: features.NormsChi, PerHead: true})
	if err != nil {
		return ops.HedgehogParams{}, err
	}
	om := omega.Floats() // [H, F, D]
	w := make([]float32, heads*d*f)
	rs := InitDamping * math.Sqrt(scale)
	for h := 0; h < heads; h++ {
		for i := 0; i < f; i++ {
			for c := 0; c < d; c++ {
				w[(h*d+c)*f+i] = float32(rs * float64(om[(h*f+i)*d+c]))
			}
		}
	}
	bias := make([]float32, heads*2*f)
	for i := range bias {
		bias[i] = float32(-0.5 * math.Log(float64(2*f)))
	}
	norm := make([]float32, heads)
	for i := range norm {
		norm[i] = float32(InitDamping * InitDamping * scale / 2)
	}
	t := func(shape []int, x []float32) *onnx.Tensor { return onnx.NewFloat(shape, append([]float32(nil), x...)) }
	return ops.HedgehogParams{
		QWeight: t([]int{heads, d, f}, w), QBias: t([]int{heads, 2 * f}, bias), QNorm: t([]int{heads}, norm),
		KWeight: t([]int{heads, d, f}, w), KBias: t([]int{heads, 2 * f}, bias), KNorm: t([]int{heads}, norm),
	}, nil
}

// Hedgehog is the cost-model form of ToHedgehog.
const Hedgehog Form = "hedgehog"

// hedgehogConversion is ToHedgehog in the registry (registry.go). Its
// bench variant has untrained maps: training changes the maps' values,
// not the work a benchmark measures.
var hedgehogConversion = Conversion{
	Name: string(Hedgehog),
	Op:   ops.HedgehogOp,
	Sizes: []Size{blockSize, {Flag: "map-features", Option: "Features", Usage: "hedgehog features F per map (2F per head; 0: the head size), with the window of --block",
		ZeroMeans: "the head size", Max: MaxHedgehogFeatures, field: func(c *CostModel) *int { return &c.MapFeatures }}},
	bench: func(m *onnxpb.ModelProto, s Sizes, seed uint64) (*onnxpb.ModelProto, *Report, error) {
		return ToHedgehog(m, HedgehogOptions{Block: s.of(blockSize), Features: s["map-features"], Seed: seed})
	},
	describe: func(ro ReportOptions) string { return fmt.Sprintf("b = %d, untrained maps", ro.Block) },
	cost: conversionCost{
		layer:  hedgehogCost,
		priced: func(c CostModel) bool { return c.MapFeatures > 0 },
		defaults: func(c *CostModel) {
			if c.MapFeatures == 0 {
				c.MapFeatures = c.Dims.HeadDim
			}
		},
		fromReport: func(c *CostModel, ro ReportOptions) {
			c.MapFeatures = ro.Features
			if c.MapFeatures == 0 {
				c.MapFeatures = c.Dims.HeadDim
			}
		},
		note: func(c CostModel) string {
			d := c.Dims.HeadDim
			return fmt.Sprintf(" (cores equal at 3b + F·(3 + 2/d) = %d)", 3*c.Block+c.MapFeatures*(3*d+2)/d)
		},
	},
}

// hedgehogCost prices HedgehogAttention with the window of b = c.Block
// (reach 1) and F = c.MapFeatures (2F features per head):
//
//	core         n·h·(6b + 2F) + 2·n·H·2F·(d+1)  the local part as
//	             local+pooled's, the maps' features and their prefix
//	             products with [V, 1]
//	elementwise  5·H·n·3b + 6·H·n·2F + 4·n·h
func hedgehogCost(c CostModel, n int, lc *LayerCost) {
	N, h, H, D := int64(n), int64(c.Dims.Hidden), int64(c.Dims.Heads), int64(c.Dims.HeadDim)
	b, F2 := int64(c.Block), 2*int64(c.MapFeatures)
	lc.Core = N*h*(6*b+F2) + 2*N*H*F2*(D+1)
	lc.Exps = H * N * (3*b + 2*F2)
	lc.Elementwise = 5*H*N*3*b + 6*H*N*F2 + 4*N*h
	lc.keep(4*H*N*3*b, "local scores H·n·3b")
	lc.keep(4*H*N*F2, "features H·n·2F")
}
