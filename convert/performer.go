package convert

import (
	"fmt"

	"github.com/linearize/linearize/features"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

// PerformerOptions configures ToPerformer. Its zero value is what
// `convert performer` writes with no flags: 256 orthogonal features with
// χ norms, the positive kernel, centred queries and keys, and the feature
// map chosen from the other options (FAVOR++ without calibration Moments,
// asymmetric FAVOR# with them). Plain FAVOR+ (what finetune's Performer
// fit trains) is FeatureMap ops.FeaturesFavorPlus with Center CenterOff.
// Resolved gives the values a conversion uses; the Report records them.
type PerformerOptions struct {
	Features int                 // M random features per head (default 256)
	Seed     uint64              // ω is deterministic from Seed and the layer index
	Omega    features.Kind       // features.Orthogonal (default) or features.IID
	Norms    features.Norms      // row norms: features.NormsChi (default), NormsSqrtD or NormsQMC
	Kernel   ops.PerformerKernel // "positive" (FAVOR+, default) or "trig"
	// Chunk is the chunk length of the causal Performer's function body
	// (default 64), used when the converted blocks are causal (see
	// causal.go).
	Chunk int
	// Layers selects blocks by their Detect layer index; nil means all.
	Layers []int
	// PerHead samples an independent ω for every head ([H,M,D]) instead
	// of one shared by the heads of a layer ([1,M,D]).
	PerHead bool
	// Omegas, when set, supplies ω for a layer instead of sampling it
	// (shape [H or 1, M, D]).
	Omegas func(layer, heads, headDim int) (*onnx.Tensor, error)
	// Positions, when MaxPositions > 0, first grows the absolute position
	// table (ExtendPositions) so the model accepts longer inputs.
	Positions ExtendOptions
	// Center says whether queries and keys are centred over each
	// sequence's valid tokens at run time (exact; the op's center=1):
	// CenterAuto (the zero value) centres with the positive kernel and
	// not with trig; CenterOn with trig is an error.
	Center Centring
	// FeatureMap is the positive kernel's feature map: "favor+" (FAVOR+),
	// "favor++" (optimal positive features, A per sequence at run time),
	// "sderf" or "aderf" (FAVOR# dense-exponential features, frozen from
	// Moments). "" (auto, the default) is "aderf" when Moments are given
	// and Balance is off, "favor++" otherwise, and "favor+" for the trig
	// kernel.
	FeatureMap ops.FeatureMap
	// Balance adds the per-head linear balance T (queries ·T, keys ·T⁻ᵀ;
	// exact) fitted from Moments by features.FitBalance (geometric-mean
	// balance). "sderf" and "aderf" always carry their own (a rotation,
	// and a rotation after the geometric-mean balance).
	Balance bool
	// Moments holds each layer's calibration statistics (keyed by the
	// Detect layer index), needed by Balance, "sderf" and "aderf";
	// finetune.PerformerMoments computes them from calibration inputs.
	// Their Centered must equal Centered().
	Moments map[int]*features.Moments
}

// Centring says whether a Performer centres queries and keys.
type Centring string

// The centrings of PerformerOptions.Center.
const (
	CenterAuto Centring = ""    // centred with the positive kernel, not with trig
	CenterOn   Centring = "on"  // centred (positive kernel only)
	CenterOff  Centring = "off" // not centred
)

// DefaultPerformerFeatures is ToPerformer's number of random features M
// per head when PerformerOptions.Features is 0.
const DefaultPerformerFeatures = 256

// Resolved returns o with every default filled in: the options ToPerformer
// converts with (before any causal fallback, see causal.go). It does not
// check them; ToPerformer does.
func (o PerformerOptions) Resolved() PerformerOptions {
	if o.Features == 0 {
		o.Features = DefaultPerformerFeatures
	}
	if o.Chunk == 0 {
		o.Chunk = ops.DefaultChunk
	}
	if o.Omega == "" {
		o.Omega = features.Orthogonal
	}
	if o.Norms == "" {
		o.Norms = features.NormsChi
	}
	if o.Kernel == "" {
		o.Kernel = ops.KernelPositive
	}
	trig := o.Kernel == ops.KernelTrig
	if o.Center == CenterAuto {
		o.Center = CenterOn
		if trig {
			o.Center = CenterOff
		}
	}
	if o.FeatureMap == "" {
		switch {
		case trig:
			o.FeatureMap = ops.FeaturesFavorPlus
		case o.Moments != nil && !o.Balance:
			o.FeatureMap = ops.FeaturesADERF
		default:
			o.FeatureMap = ops.FeaturesFavorPP
		}
	}
	return o
}

// Centered reports whether ToPerformer with these options centres queries
// and keys: the centring finetune.MomentOptions.Center must match.
func (o PerformerOptions) Centered() bool {
	return o.Resolved().Center == CenterOn
}

// ToPerformer returns a copy of m in which every convertible attention core
// (of the selected layers) is a PerformerAttention node with frozen random
// features. m is not modified. When no block is converted the error wraps
// ErrNothingConverted (with the report, which says why).
func ToPerformer(m *onnxpb.ModelProto, o PerformerOptions) (*onnxpb.ModelProto, *Report, error) {
	o = o.Resolved()
	if err := o.check(); err != nil {
		return nil, nil, err
	}
	fit, err := performerFit(o)
	if err != nil {
		return nil, nil, err
	}
	causal := newCausalPlan(o)
	rw := &rewriter{op: ops.PerformerOp, layers: o.Layers, positions: o.Positions, causal: causal}
	rw.report.Options = ReportOptions{Seed: o.Seed, Features: o.Features, Omega: o.Omega, Norms: o.Norms, Kernel: o.Kernel, PerHead: o.PerHead,
		Center: o.Centered(), Balance: o.Balance, FeatureMap: o.FeatureMap}
	rw.core = func(b *Block, q, k, v, bias string) (*onnxpb.NodeProto, error) {
		var omega *onnx.Tensor
		var err error
		if o.Omegas != nil {
			omega, err = o.Omegas(b.Layer, b.Heads, b.HeadDim)
		} else {
			omega, err = sampleOmega(o, b.Layer, b.Heads, b.HeadDim)
		}
		if err != nil {
			return nil, err
		}
		if len(omega.Shape) != 3 || omega.Shape[2] != b.HeadDim || (omega.Shape[0] != 1 && omega.Shape[0] != b.Heads) {
			return nil, fmt.Errorf("omega has shape %v, want [1 or %d, M, %d]", omega.Shape, b.Heads, b.HeadDim)
		}
		name, err := rw.addInit(fmt.Sprintf("linearize/layer%d/omega", b.Layer), omega)
		if err != nil {
			return nil, err
		}
		inputs := []string{q, k, v, name, bias}
		if causal.on {
			return ops.NewPerformerNode(rw.names.Name(fmt.Sprintf("linearize/layer%d/PerformerAttention", b.Layer)),
				inputs, rw.names.Name(fmt.Sprintf("linearize/layer%d/attn", b.Layer)), causal.attrs(b)), nil
		}
		if fit != "" {
			extra, err := rw.performerBalance(o, fit, b)
			if err != nil {
				return nil, err
			}
			inputs = append(inputs, extra...)
		}
		node := ops.NewPerformerNode(rw.names.Name(fmt.Sprintf("linearize/layer%d/PerformerAttention", b.Layer)),
			inputs, rw.names.Name(fmt.Sprintf("linearize/layer%d/attn", b.Layer)),
			ops.PerformerAttrs{Scale: float32(b.Scale), Kernel: o.Kernel, Center: o.Centered(), Features: o.FeatureMap})
		return node, nil
	}
	variant := ops.PerformerVariant{Kernel: o.Kernel, Center: o.Centered(), Balance: fit != "", Features: o.FeatureMap}
	rw.function = func(opset int64) (*onnxpb.FunctionProto, error) {
		if causal.on {
			return causal.function(opset)
		}
		return ops.PerformerFunctionFor(variant, opset)
	}
	return rw.run(m)
}

// check checks the scalar options of the resolved o.
func (o PerformerOptions) check() error {
	if o.Features < 1 {
		return optionError("performer", "Features", fmt.Sprintf("%d must be positive", o.Features))
	}
	if o.Features > MaxFeatures {
		return optionError("performer", "Features", fmt.Sprintf("%d exceeds %d", o.Features, MaxFeatures))
	}
	if o.Omega != features.Orthogonal && o.Omega != features.IID {
		return optionError("performer", "Omega", fmt.Sprintf("%q: want orthogonal or iid", o.Omega))
	}
	if o.Norms != features.NormsChi && o.Norms != features.NormsSqrtD && o.Norms != features.NormsQMC {
		return optionError("performer", "Norms", fmt.Sprintf("%q: want chi, sqrt-d or qmc", o.Norms))
	}
	if o.Kernel != ops.KernelPositive && o.Kernel != ops.KernelTrig {
		return optionError("performer", "Kernel", fmt.Sprintf("%q: want positive or trig", o.Kernel))
	}
	if o.Chunk < 1 || o.Chunk > ops.MaxChunk {
		return optionError("performer", "Chunk", fmt.Sprintf("%d: want 1..%d", o.Chunk, ops.MaxChunk))
	}
	if o.Center != CenterOn && o.Center != CenterOff {
		return optionError("performer", "Center", fmt.Sprintf("%q: want on, off or auto (empty)", o.Center))
	}
	return nil
}

// performerFit checks the variant options of the resolved o and returns
// the kind of balance to fit ("" for none).
func performerFit(o PerformerOptions) (features.BalanceKind, error) {
	var fit features.BalanceKind
	switch o.FeatureMap {
	case ops.FeaturesFavorPlus, ops.FeaturesFavorPP:
		if o.Balance {
			fit = features.BalanceGeoMean
		}
	case ops.FeaturesSDERF, ops.FeaturesADERF:
		fit = features.BalanceKind(o.FeatureMap)
		if o.Balance {
			return "", optionError("performer", "Balance", fmt.Sprintf("is for favor+ and favor++: feature map %s carries its own balance", o.FeatureMap))
		}
	default:
		return "", optionError("performer", "FeatureMap", fmt.Sprintf("%q: want favor+, favor++, sderf or aderf", o.FeatureMap))
	}
	if (o.Center == CenterOn || fit != "" || o.FeatureMap != ops.FeaturesFavorPlus) && o.Kernel != ops.KernelPositive {
		return "", optionError("performer", "Kernel", fmt.Sprintf("%q: center, balance and feature map %s need the positive kernel", o.Kernel, o.FeatureMap))
	}
	if fit != "" && o.Moments == nil {
		return "", optionError("performer", "Moments", fmt.Sprintf("missing: %s needs calibration moments (finetune.PerformerMoments)", fit))
	}
	return fit, nil
}

// performerBalance fits block b's balance (and DERF parameters) from its
// calibration moments and adds them as initializers; it returns the extra
// node inputs balance_q, balance_k (and derf_a).
func (rw *rewriter) performerBalance(o PerformerOptions, kind features.BalanceKind, b *Block) ([]string, error) {
	mo := o.Moments[b.Layer]
	if mo == nil {
		return nil, fmt.Errorf("no calibration moments for layer %d", b.Layer)
	}
	if mo.Heads != b.Heads || mo.Dim != b.HeadDim || mo.Centered != o.Centered() {
		return nil, fmt.Errorf("calibration moments of %d heads × %d (centred %v) for a block of %d × %d (center %v)", mo.Heads, mo.Dim, mo.Centered, b.Heads, b.HeadDim, o.Centered())
	}
	fit, err := features.FitBalance(mo, kind)
	if err != nil {
		return nil, err
	}
	h, d := b.Heads, b.HeadDim
	base := fmt.Sprintf("linearize/layer%d/", b.Layer)
	tq, err := rw.addInit(base+"balance_q", onnx.NewFloat([]int{h, d, d}, fit.BalanceQ))
	if err != nil {
		return nil, err
	}
	tk := tq
	if kind != features.BalanceSDERF { // a rotation is its own inverse transpose
		if tk, err = rw.addInit(base+"balance_k", onnx.NewFloat([]int{h, d, d}, fit.BalanceK)); err != nil {
			return nil, err
		}
	}
	out := []string{tq, tk}
	if fit.A != nil {
		a, err := rw.addInit(base+"derf_a", onnx.NewFloat([]int{h, 1, d}, fit.A))
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// NeedsMoments reports whether ToPerformer with these options needs
// calibration Moments: a fitted Balance or FAVOR# ("sderf", "aderf")
// features asked for by name. (The automatic feature map uses Moments
// when they are given and does not need them.)
func (o PerformerOptions) NeedsMoments() bool {
	return o.Balance || o.FeatureMap == ops.FeaturesSDERF || o.FeatureMap == ops.FeaturesADERF
}

// Performer is the cost-model form of ToPerformer.
const Performer Form = "performer"

// performerConversion is ToPerformer in the registry (registry.go).
var performerConversion = Conversion{
	Name:         string(Performer),
	BenchDefault: true,
	Op:           ops.PerformerOp,
	Sizes: []Size{{Flag: "features", Option: "Features", Usage: "Performer random features M (convert performer's default)", Default: DefaultPerformerFeatures,
		field: func(c *CostModel) *int { return &c.Features }}},
	bench: func(m *onnxpb.ModelProto, s Sizes, seed uint64) (*onnxpb.ModelProto, *Report, error) {
		return ToPerformer(m, PerformerOptions{Features: s["features"], Seed: seed})
	},
	describe: func(ro ReportOptions) string {
		s := fmt.Sprintf("M = %d, %s features, kernel %s", ro.Features, ro.FeatureMap, ro.Kernel)
		if ro.Center {
			s += ", centred"
		}
		return s
	},
	cost: conversionCost{
		layer:      performerCost,
		fromReport: func(c *CostModel, ro ReportOptions) { c.Features = ro.Features },
		header:     func(c CostModel) string { return fmt.Sprintf("Performer M = %d", c.Features) },
		note: func(c CostModel) string {
			return fmt.Sprintf(" (cores equal at 2M + M/d = %d)", 2*c.Features+c.Features/c.Dims.HeadDim)
		},
	},
}

// performerCost prices PerformerAttention with M = c.Features:
//
//	core         4·n·M·h + 2·n·M·H    φ(Q), φ(K) (Ω·x), φ(K)ᵀV, φ(Q)·(φ(K)ᵀV),
//	                                  and the normaliser φ(K)ᵀ1, φ(Q)·z
//	elementwise  6·H·n·M + 3·n·h + 4·H·n·(d+1)
//	             keys: ReduceMax, Sub, Exp over [M,n]; queries: Softmax
//	             (3 passes) over [n,M]; K masked (Where), K⊙K and its sum
//	             over [n,d]; [K, offset] Concat and its Transpose, [V,1]
//	             and [Q,1] Concat over [n,d+1]
//
// (the plain FAVOR+ positive function body of ops/performer.go).
func performerCost(c CostModel, n int, lc *LayerCost) {
	N, h, H, D, M := int64(n), int64(c.Dims.Hidden), int64(c.Dims.Heads), int64(c.Dims.HeadDim), int64(c.Features)
	lc.Core = 4*N*M*h + 2*N*M*H
	lc.Exps = 2 * H * N * M
	lc.Elementwise = 6*H*N*M + 3*N*h + 4*H*N*(D+1)
	lc.keep(4*H*N*M, "features H·n·M")
}
