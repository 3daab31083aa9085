package convert

import (
	"fmt"

	"github.com/linearize/linearize/features"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

// LinformerOptions configures ToLinformer. The zero value is what
// `convert linformer` does without flags: the pooled Linformer, k = 128
// segments, the first and last tokens kept exact.
type LinformerOptions struct {
	// Init chooses E and F: "pool" (the default, also "") or "gaussian".
	// Pool: E = F = means over K contiguous segments of each sequence's
	// valid tokens, computed at run time from its actual length, each
	// pooled key scoring q·k̄_c + log |S_c| (LinformerAttention's pooled
	// mode: segments = K, E and F absent); it has no maximum length and
	// samples nothing. Gaussian: E, F ~ N(0, 1/k), frozen initializers.
	Init string
	K    int // projected length k, the segments with Init pool (default 128)
	// Sinks, with Init pool, are the tokens kept exact (unset:
	// DefaultSinks).
	Sinks Sinks
	// With Init gaussian only (setting MaxLen, Share or Projections with
	// Init pool is an error; Seed is then unused):
	MaxLen int            // N, the longest sequence the projections accept (default 512)
	Share  features.Share // features.ShareNone, ShareHeadwise (default), ShareKV or ShareLayerwise
	Seed   uint64
	// Projections, when set, supplies E and F for a layer instead of
	// sampling them (shapes [H or 1, k, N]; f may equal e).
	Projections func(layer, heads int) (e, f *onnx.Tensor, err error)
	Layers      []int
	// Positions, when MaxPositions > 0, first grows the absolute position
	// table (ExtendPositions); MaxLen then defaults to MaxPositions.
	Positions ExtendOptions
}

// Linformer initialisations (LinformerOptions.Init).
const (
	LinformerPool     = "pool"
	LinformerGaussian = "gaussian"
)

// DefaultLinformerK is the k of a LinformerOptions without K.
const DefaultLinformerK = 128

// ToLinformer returns a copy of m in which every convertible attention core
// (of the selected layers) is a LinformerAttention node: in the pooled
// mode (Init pool, the default) with segments = K and no projections, or
// with projections E, F as initializers (Init gaussian). m is not
// modified. When no block is converted the error wraps
// ErrNothingConverted (with the report, which says why).
func ToLinformer(m *onnxpb.ModelProto, o LinformerOptions) (*onnxpb.ModelProto, *Report, error) {
	if o.K == 0 {
		o.K = DefaultLinformerK
	}
	switch o.Init {
	case "", LinformerPool:
		return toPooledLinformer(m, o)
	case LinformerGaussian:
	default:
		return nil, nil, optionError("linformer", "Init", fmt.Sprintf("%q: want pool or gaussian", o.Init))
	}
	if o.Sinks != 0 {
		return nil, nil, optionError("linformer", "Sinks", "applies to Init pool only (the Gaussian projections keep no token exact)")
	}
	if o.MaxLen == 0 {
		o.MaxLen = 512
		if o.Positions.MaxPositions > 0 {
			o.MaxLen = o.Positions.MaxPositions
		}
	}
	if o.Share == "" {
		o.Share = features.ShareHeadwise
	}
	if o.K < 1 {
		return nil, nil, optionError("linformer", "K", fmt.Sprintf("%d must be positive", o.K))
	}
	if o.MaxLen < 1 {
		return nil, nil, optionError("linformer", "MaxLen", fmt.Sprintf("%d must be positive", o.MaxLen))
	}
	if int64(o.K)*int64(o.MaxLen) > MaxProjection {
		return nil, nil, optionError("linformer", "MaxLen", fmt.Sprintf("%d × k %d exceeds %d elements per projection", o.MaxLen, o.K, MaxProjection))
	}
	switch o.Share {
	case features.ShareNone, features.ShareHeadwise, features.ShareKV, features.ShareLayerwise:
	default:
		return nil, nil, optionError("linformer", "Share", fmt.Sprintf("%q: want none, headwise, kv or layerwise", o.Share))
	}
	rw := &rewriter{op: ops.LinformerOp, layers: o.Layers, positions: o.Positions}
	rw.report.Options = ReportOptions{Seed: o.Seed, K: o.K, MaxLen: o.MaxLen, Share: o.Share}
	shared := map[string]string{} // layerwise: one E per (heads) shape
	rw.core = func(b *Block, q, k, v, bias string) (*onnxpb.NodeProto, error) {
		var en, fn string
		if key := fmt.Sprint(b.Heads); o.Share == features.ShareLayerwise && o.Projections == nil && shared[key] != "" {
			en, fn = shared[key], shared[key]
		} else {
			var e, f *onnx.Tensor
			var err error
			if o.Projections != nil {
				e, f, err = o.Projections(b.Layer, b.Heads)
			} else {
				e, f, err = sampleProjections(o, b.Layer, b.Heads)
			}
			if err != nil {
				return nil, err
			}
			for _, t := range []*onnx.Tensor{e, f} {
				if t != nil && (len(t.Shape) != 3 || (t.Shape[0] != 1 && t.Shape[0] != b.Heads)) {
					return nil, fmt.Errorf("projection has shape %v, want [1 or %d, k, N]", t.Shape, b.Heads)
				}
			}
			if en, err = rw.addInit(fmt.Sprintf("linearize/layer%d/E", b.Layer), e); err != nil {
				return nil, err
			}
			fn = en
			if f != nil && f != e {
				if fn, err = rw.addInit(fmt.Sprintf("linearize/layer%d/F", b.Layer), f); err != nil {
					return nil, err
				}
			}
			if o.Share == features.ShareLayerwise {
				shared[key] = en
			}
		}
		node := ops.NewLinformerNode(rw.names.Name(fmt.Sprintf("linearize/layer%d/LinformerAttention", b.Layer)),
			[]string{q, k, v, en, fn, bias}, rw.names.Name(fmt.Sprintf("linearize/layer%d/attn", b.Layer)),
			ops.LinformerAttrs{Scale: float32(b.Scale)})
		return node, nil
	}
	rw.function = func(opset int64) (*onnxpb.FunctionProto, error) { return ops.LinformerFunction(opset) }
	return rw.run(m)
}

// toPooledLinformer is ToLinformer with Init pool.
func toPooledLinformer(m *onnxpb.ModelProto, o LinformerOptions) (*onnxpb.ModelProto, *Report, error) {
	for _, f := range []struct {
		name string
		set  bool
	}{{"MaxLen", o.MaxLen != 0}, {"Share", o.Share != ""}, {"Projections", o.Projections != nil}} {
		if f.set {
			return nil, nil, optionError("linformer", f.name, "applies to Init gaussian only (Init pool projects onto run-time segment means)")
		}
	}
	if o.K < 1 || o.K > ops.MaxSegments {
		return nil, nil, optionError("linformer", "K", fmt.Sprintf("%d: want 1..%d segments", o.K, ops.MaxSegments))
	}
	o.Sinks = o.Sinks.Or(DefaultSinks)
	if err := o.Sinks.check("linformer"); err != nil {
		return nil, nil, err
	}
	a := ops.LinformerAttrs{Segments: o.K, SinkFirst: o.Sinks.First(), SinkLast: o.Sinks.Last()}
	rw := &rewriter{op: ops.LinformerOp, layers: o.Layers, positions: o.Positions}
	rw.report.Options = ReportOptions{K: o.K, Segments: o.K, Sinks: sinksOf(a.SinkFirst, a.SinkLast)}
	rw.core = func(b *Block, q, k, v, bias string) (*onnxpb.NodeProto, error) {
		na := a
		na.Scale = float32(b.Scale)
		return ops.NewLinformerNode(rw.names.Name(fmt.Sprintf("linearize/layer%d/LinformerAttention", b.Layer)),
			[]string{q, k, v, "", "", bias}, rw.names.Name(fmt.Sprintf("linearize/layer%d/attn", b.Layer)), na), nil
	}
	rw.function = func(opset int64) (*onnxpb.FunctionProto, error) { return ops.LinformerFunctionFor(opset, a) }
	return rw.run(m)
}

// Linformer is the cost-model form of ToLinformer.
const Linformer Form = "linformer"

// linformerConversion is ToLinformer in the registry (registry.go).
var linformerConversion = Conversion{
	Name:         string(Linformer),
	BenchDefault: true,
	Op:           ops.LinformerOp,
	Sizes: []Size{{Flag: "k", Option: "K", Usage: "Linformer projected length k (convert linformer's default)", Default: DefaultLinformerK,
		field: func(c *CostModel) *int { return &c.K }}},
	bench: func(m *onnxpb.ModelProto, s Sizes, seed uint64) (*onnxpb.ModelProto, *Report, error) {
		return ToLinformer(m, LinformerOptions{K: s["k"], Seed: seed})
	},
	describe: func(ro ReportOptions) string {
		if ro.MaxLen > 0 {
			return fmt.Sprintf("k = %d, N = %d", linformerK(ro), ro.MaxLen)
		}
		return fmt.Sprintf("k = %d pooled segments, sinks %s", linformerK(ro), ro.Sinks)
	},
	cost: conversionCost{
		layer:      linformerCost,
		fromReport: func(c *CostModel, ro ReportOptions) { c.K = linformerK(ro) },
		header:     func(c CostModel) string { return fmt.Sprintf("Linformer k = %d", c.K) },
		note:       func(c CostModel) string { return fmt.Sprintf(" (cores equal at 2k = %d)", 2*c.K) },
	},
}

// linformerK is the k a Linformer conversion reports: K, or the segments
// of a pooled Linformer written as a local+pooled node without the local
// part.
func linformerK(ro ReportOptions) int {
	if ro.K > 0 {
		return ro.K
	}
	return ro.Segments
}

// linformerCost prices LinformerAttention with Gaussian E/F of k =
// c.K rows:
//
//	core         4·n·k·h                E·K, F·V, Q·Kpᵀ, P·Vp
//	elementwise  4·H·n·k + 2·n·k + 2·n·h
//	             scale Mul and Softmax over the [n,k] scores; E and F
//	             ([1,k,N], shared by the heads as LinformerOptions'
//	             default) sliced to n columns; K and V masked (Where)
//
// (the function body of ops/linformer.go).
func linformerCost(c CostModel, n int, lc *LayerCost) {
	N, h, H, K := int64(n), int64(c.Dims.Hidden), int64(c.Dims.Heads), int64(c.K)
	lc.Core = 4 * N * K * h
	lc.Exps = H * N * K
	lc.Elementwise = 4*H*N*K + 2*N*K + 2*N*h
	lc.keep(4*H*N*K, "scores H·n·k")
}
