package convert

import (
	"errors"
	"fmt"
	"strings"

	"github.com/linearize/linearize/features"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
	"google.golang.org/protobuf/proto"
)

// PerformerOptions configures ToPerformer.
type PerformerOptions struct {
	Features int            // M random features per head (default 256)
	Seed     uint64         // ω is deterministic from Seed and the layer index
	Omega    features.Kind  // features.Orthogonal (default) or features.IID
	Norms    features.Norms // row norms: features.NormsChi (default), NormsSqrtD or NormsQMC
	Kernel   string         // "positive" (FAVOR+, default) or "trig"
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
	// Center centres queries and keys over each sequence's valid tokens
	// at run time (exact; the op's center=1).
	Center bool
	// FeatureMap is the positive kernel's feature map: "favor+" (FAVOR+,
	// default), "favor++" (optimal positive features, A per sequence at
	// run time), "sderf" or "aderf" (FAVOR# dense-exponential features,
	// frozen from Moments).
	FeatureMap string
	// Balance adds the per-head linear balance T (queries ·T, keys ·T⁻ᵀ;
	// exact) fitted from Moments by features.FitBalance (geometric-mean
	// balance). "sderf" and "aderf" always carry their own (a rotation,
	// and a rotation after the geometric-mean balance).
	Balance bool
	// Moments holds each layer's calibration statistics (keyed by the
	// Detect layer index), needed by Balance, "sderf" and "aderf";
	// finetune.PerformerMoments computes them from calibration inputs.
	// Their Centered must equal Center.
	Moments map[int]*features.Moments
}

// LinformerOptions configures ToLinformer.
type LinformerOptions struct {
	K      int            // projected length k (default 128)
	MaxLen int            // N, the longest sequence the projections accept (default 512)
	Share  features.Share // features.ShareNone, ShareHeadwise (default), ShareKV or ShareLayerwise
	Seed   uint64
	Layers []int
	// Projections, when set, supplies E and F for a layer instead of
	// sampling them (shapes [H or 1, k, N]; f may equal e).
	Projections func(layer, heads int) (e, f *onnx.Tensor, err error)
	// Positions, when MaxPositions > 0, first grows the absolute position
	// table (ExtendPositions); MaxLen then defaults to MaxPositions.
	Positions ExtendOptions
	// Init chooses E and F: "gaussian" (default: E, F ~ N(0, 1/k), frozen
	// initializers) or "pool": E = F = means over K contiguous segments of
	// each sequence's valid tokens, computed at run time from its actual
	// length, each pooled key scoring q·k̄_c + log |S_c|. A pooled
	// Linformer is written as a LocalPooledAttention node without the
	// local part (ToLocalPooled with NoLocal); it has no maximum length,
	// so MaxLen, Share, Seed and Projections do not apply.
	Init string
	// Sinks, with Init "pool", are the tokens kept exact: "first,last"
	// (default), "first", "last" or "none".
	Sinks string
}

// ReportOptions are the options a conversion ran with, as the report
// (and --json) gives them: the fields of the op that was written; the
// others are zero and left out of the JSON.
type ReportOptions struct {
	Seed uint64 `json:"seed"`
	// Performer.
	Features   int            `json:"features,omitempty"`
	Omega      features.Kind  `json:"omega,omitempty"`
	Norms      features.Norms `json:"norms,omitempty"`
	Kernel     string         `json:"kernel,omitempty"`
	PerHead    bool           `json:"per_head,omitempty"`
	Center     bool           `json:"center,omitempty"`
	Balance    bool           `json:"balance,omitempty"`
	FeatureMap string         `json:"feature_map,omitempty"`
	Causal     bool           `json:"causal,omitempty"`
	Chunk      int            `json:"chunk,omitempty"`
	// Linformer (Gaussian E/F).
	K      int            `json:"k,omitempty"`
	MaxLen int            `json:"max_len,omitempty"`
	Share  features.Share `json:"share,omitempty"`
	// Local+pooled (and the pooled Linformer).
	Block    int    `json:"block,omitempty"`
	Segments int    `json:"segments,omitempty"`
	Sinks    string `json:"sinks,omitempty"`
	// LARA.
	Landmarks int     `json:"landmarks,omitempty"`
	Samples   int     `json:"samples,omitempty"`
	Sigma     float64 `json:"sigma,omitempty"`
}

// Report says what a conversion did.
type Report struct {
	Op        string        `json:"op"`
	Blocks    int           `json:"blocks"`
	Converted []BlockReport `json:"converted"`
	Skipped   []BlockReport `json:"skipped"`
	Params    int64         `json:"params_added"`
	Bytes     int64         `json:"bytes_added"`
	Options   ReportOptions `json:"options"`
	// Positions reports the position-table extension, if any.
	Positions *ExtendReport `json:"positions,omitempty"`
	// Notes say what the conversion decided beyond the options (such as
	// converting causal blocks with the causal Performer).
	Notes []string `json:"notes,omitempty"`
}

// BlockReport is one block in a Report.
type BlockReport struct {
	Layer   int      `json:"layer"`
	Form    string   `json:"form"`
	Heads   int      `json:"heads"`
	HeadDim int      `json:"head_dim"`
	Scale   float64  `json:"scale"`
	Bias    BiasKind `json:"bias"`
	Node    string   `json:"node,omitempty"`
	Reason  string   `json:"reason,omitempty"`
	// Causal: the block is causal (a decoder's); converted ones use the
	// causal Performer (causal=1).
	Causal bool `json:"causal,omitempty"`
}

// Bounds on the options, so that a mistyped flag is an error rather than
// an allocation of many gigabytes per layer.
const (
	MaxFeatures   = 1 << 16 // random features M per head
	MaxProjection = 1 << 26 // k·N elements of one Linformer projection
)

// ToPerformer returns a copy of m in which every convertible attention core
// (of the selected layers) is a PerformerAttention node with frozen random
// features. m is not modified. When no block is converted the error wraps
// ErrNothingConverted (with the report, which says why).
func ToPerformer(m *onnxpb.ModelProto, o PerformerOptions) (*onnxpb.ModelProto, *Report, error) {
	if o.Features == 0 {
		o.Features = 256
	}
	if o.Features < 1 {
		return nil, nil, optionError("performer", "Features", fmt.Sprintf("%d must be positive", o.Features))
	}
	if o.Features > MaxFeatures {
		return nil, nil, optionError("performer", "Features", fmt.Sprintf("%d exceeds %d", o.Features, MaxFeatures))
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
	if o.Omega != features.Orthogonal && o.Omega != features.IID {
		return nil, nil, optionError("performer", "Omega", fmt.Sprintf("%q: want orthogonal or iid", o.Omega))
	}
	if o.Norms != features.NormsChi && o.Norms != features.NormsSqrtD && o.Norms != features.NormsQMC {
		return nil, nil, optionError("performer", "Norms", fmt.Sprintf("%q: want chi, sqrt-d or qmc", o.Norms))
	}
	if o.Kernel != ops.KernelPositive && o.Kernel != ops.KernelTrig {
		return nil, nil, optionError("performer", "Kernel", fmt.Sprintf("%q: want positive or trig", o.Kernel))
	}
	if o.Chunk < 0 || o.Chunk > ops.MaxChunk {
		return nil, nil, optionError("performer", "Chunk", fmt.Sprintf("%d: want 1..%d", o.Chunk, ops.MaxChunk))
	}
	fit, err := performerFit(&o)
	if err != nil {
		return nil, nil, err
	}
	causal := newCausalPlan(o)
	rw := &rewriter{op: ops.PerformerOp, layers: o.Layers, positions: o.Positions, causal: causal}
	rw.report.Options = ReportOptions{Seed: o.Seed, Features: o.Features, Omega: o.Omega, Norms: o.Norms, Kernel: o.Kernel, PerHead: o.PerHead,
		Center: o.Center, Balance: o.Balance, FeatureMap: o.FeatureMap}
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
			ops.PerformerAttrs{Scale: float32(b.Scale), Kernel: o.Kernel, Center: o.Center, Features: o.FeatureMap})
		return node, nil
	}
	variant := ops.PerformerVariant{Kernel: o.Kernel, Center: o.Center, Balance: fit != "", Features: o.FeatureMap}
	rw.function = func(opset int64) (*onnxpb.FunctionProto, error) {
		if causal.on {
			return causal.function(opset)
		}
		return ops.PerformerFunctionFor(variant, opset)
	}
	return rw.run(m)
}

// performerFit checks the variant options of o (setting FeatureMap's
// default) and returns the kind of balance to fit ("" for none).
func performerFit(o *PerformerOptions) (string, error) {
	if o.FeatureMap == "" {
		o.FeatureMap = ops.FeaturesFavorPlus
	}
	fit := ""
	switch o.FeatureMap {
	case ops.FeaturesFavorPlus, ops.FeaturesFavorPP:
		if o.Balance {
			fit = features.BalanceGeoMean
		}
	case ops.FeaturesSDERF, ops.FeaturesADERF:
		fit = o.FeatureMap
		if o.Balance {
			return "", optionError("performer", "Balance", fmt.Sprintf("is for favor+ and favor++: feature map %s carries its own balance", o.FeatureMap))
		}
	default:
		return "", optionError("performer", "FeatureMap", fmt.Sprintf("%q: want favor+, favor++, sderf or aderf", o.FeatureMap))
	}
	if (o.Center || fit != "" || o.FeatureMap != ops.FeaturesFavorPlus) && o.Kernel != ops.KernelPositive {
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
func (rw *rewriter) performerBalance(o PerformerOptions, kind string, b *Block) ([]string, error) {
	mo := o.Moments[b.Layer]
	if mo == nil {
		return nil, fmt.Errorf("no calibration moments for layer %d", b.Layer)
	}
	if mo.Heads != b.Heads || mo.Dim != b.HeadDim || mo.Centered != o.Center {
		return nil, fmt.Errorf("calibration moments of %d heads × %d (centred %v) for a block of %d × %d (center %v)", mo.Heads, mo.Dim, mo.Centered, b.Heads, b.HeadDim, o.Center)
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

// ToLinformer returns a copy of m in which every convertible attention core
// (of the selected layers) is a LinformerAttention node with projections
// E, F as initializers. m is not modified. When no block is converted the
// error wraps ErrNothingConverted (with the report, which says why).
func ToLinformer(m *onnxpb.ModelProto, o LinformerOptions) (*onnxpb.ModelProto, *Report, error) {
	if o.K == 0 {
		o.K = 128
	}
	switch o.Init {
	case "", "gaussian":
	case "pool":
		if o.K < 1 {
			return nil, nil, optionError("linformer", "K", fmt.Sprintf("%d must be positive", o.K))
		}
		return ToLocalPooled(m, LocalPooledOptions{NoLocal: true, Segments: o.K, Sinks: o.Sinks, Layers: o.Layers, Positions: o.Positions})
	default:
		return nil, nil, optionError("linformer", "Init", fmt.Sprintf("%q: want gaussian or pool", o.Init))
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

// rewriter holds the state of one conversion.
type rewriter struct {
	op        string
	layers    []int
	positions ExtendOptions
	core      func(b *Block, q, k, v, bias string) (*onnxpb.NodeProto, error)
	function  func(opset int64) (*onnxpb.FunctionProto, error)
	// causal, for Performer, converts causal blocks (causal.go); nil for
	// the ops without a causal mode.
	causal *causalPlan

	m      *onnxpb.ModelProto
	g      *onnxpb.GraphProto
	ix     *onnx.Index
	names  *onnx.Namer
	opset  int64
	report Report
	consts map[string]string
	// types finds element types; dtype is the precision of the block being
	// rewritten (float32, float16 or bfloat16) and fnType that of the
	// first block converted, which the op's function body is built for.
	types         *elemTypes
	dtype, fnType onnx.DataType
	// insert maps a node to the nodes that replace it (in order).
	insert map[*onnxpb.NodeProto][]*onnxpb.NodeProto
}

func (rw *rewriter) run(m0 *onnxpb.ModelProto) (out *onnxpb.ModelProto, rep *Report, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, rep, err = nil, nil, fmt.Errorf("convert: malformed graph: %v", r)
		}
	}()
	if m0 == nil || m0.Graph == nil {
		return nil, nil, errors.New("convert: model has no graph")
	}
	m := onnx.CloneShared(m0) // weights shared, never written in place
	if rw.positions.MaxPositions > 0 {
		ext, rep, err := ExtendPositions(m, rw.positions)
		if err != nil {
			return nil, nil, err
		}
		m = ext
		rw.report.Positions = rep
	}
	det, analysed, err := detect(m)
	if err != nil {
		return nil, nil, err
	}
	m = analysed
	rw.m, rw.g = m, m.Graph
	rw.ix = onnx.NewIndex(m.Graph)
	rw.names = onnx.NewNamer(m.Graph)
	rw.opset = onnx.OpsetVersion(m, "")
	rw.consts = map[string]string{}
	rw.types = newElemTypes(rw.ix)
	rw.insert = map[*onnxpb.NodeProto][]*onnxpb.NodeProto{}
	rw.report.Op = rw.op
	rw.report.Blocks = det.Count()
	rw.report.Converted = []BlockReport{}
	rw.report.Skipped = []BlockReport{}
	if det.AlreadyConverted() {
		return nil, &rw.report, fmt.Errorf("%w: the model is converted already: %s", ErrNothingConverted, linearSummary(det.Linear))
	}
	want := map[int]bool{}
	for _, l := range rw.layers {
		if l < 0 || l >= det.Count() {
			return nil, nil, fmt.Errorf("convert: layer %d selected, but the model has %d attention blocks (0..%d)", l, det.Count(), det.Count()-1)
		}
		want[l] = true
	}
	rw.causal.prepare(rw, det, want)
	converted := 0
	for _, b := range det.Blocks {
		br := BlockReport{Layer: b.Layer, Form: b.Form, Heads: b.Heads, HeadDim: b.HeadDim, Scale: b.Scale, Bias: b.Bias, Causal: b.Causal}
		if len(want) > 0 && !want[b.Layer] {
			br.Reason = "not selected by --layers"
			rw.report.Skipped = append(rw.report.Skipped, br)
			continue
		}
		if !b.Convertible && !rw.causal.converts(b) {
			br.Reason = rw.causal.reason(b)
			rw.report.Skipped = append(rw.report.Skipped, br)
			continue
		}
		if why := rw.precision(b); why != "" {
			br.Reason = why
			rw.report.Skipped = append(rw.report.Skipped, br)
			continue
		}
		if why := SelfAttentionOnly(rw.op, b); why != "" {
			br.Reason = why
			rw.report.Skipped = append(rw.report.Skipped, br)
			continue
		}
		var node *onnxpb.NodeProto
		if b.core != nil {
			node, err = rw.rewriteCore(b)
		} else {
			node, err = rw.rewriteFused(b)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("convert: layer %d: %w", b.Layer, err)
		}
		br.Node = node.GetName()
		rw.report.Converted = append(rw.report.Converted, br)
		converted++
	}
	if converted == 0 {
		return nil, &rw.report, nothingConverted(det, rw.report.Skipped)
	}
	// Splice the new nodes in place of the nodes they replace.
	var nodes []*onnxpb.NodeProto
	for _, n := range rw.g.Node {
		if repl, ok := rw.insert[n]; ok {
			nodes = append(nodes, repl...)
			continue
		}
		nodes = append(nodes, n)
	}
	rw.g.Node = nodes
	onnx.RemoveDeadNodes(rw.g)
	// A block whose output reaches no graph output is dropped with the
	// dead nodes; the report must not count it as converted.
	live := map[string]bool{}
	for _, n := range rw.g.Node {
		live[n.GetName()] = true
	}
	kept := rw.report.Converted[:0]
	for _, br := range rw.report.Converted {
		if live[br.Node] {
			kept = append(kept, br)
			continue
		}
		br.Reason = "its output reaches no graph output (removed as dead code)"
		br.Node = ""
		rw.report.Skipped = append(rw.report.Skipped, br)
	}
	rw.report.Converted = kept
	if len(kept) == 0 {
		return nil, &rw.report, nothingConverted(det, rw.report.Skipped)
	}
	fopset := rw.opset
	if fopset < ops.MinFunctionOpset {
		// onnxruntime runs a model-local function at the model's own
		// opset, so the model must import one the bodies can be built at.
		if err := upgradeOpset(m, ops.MinFunctionOpset); err != nil {
			return nil, nil, fmt.Errorf("convert: %w", err)
		}
		fopset = ops.MinFunctionOpset
	}
	if fopset > ops.MaxFunctionOpset {
		fopset = ops.MaxFunctionOpset
	}
	fn, err := rw.function(fopset)
	if err == nil {
		fn, err = ops.TypedFunction(fn, rw.fnType)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("convert: %w", err)
	}
	if err := ops.ImportFunction(m, fn); err != nil {
		return nil, nil, fmt.Errorf("convert: %w", err)
	}
	return m, &rw.report, nil
}

// addInit adds t as an initializer under a fresh name based on base.
func (rw *rewriter) addInit(base string, t *onnx.Tensor) (string, error) {
	name := rw.names.Name(base)
	tp, err := onnx.EncodeTensor(name, t)
	if err != nil {
		return "", err
	}
	rw.g.Initializer = append(rw.g.Initializer, tp)
	rw.report.Params += int64(t.Len())
	rw.report.Bytes += int64(t.Len() * onnx.ElemSize(t.DType))
	return name, nil
}

// constant returns an initializer holding a small constant (shared).
func (rw *rewriter) constant(base string, t *onnx.Tensor) string {
	key := fmt.Sprintf("%v%v%v", t.DType, t.Shape, t.Data)
	if n, ok := rw.consts[key]; ok {
		return n
	}
	name := rw.names.Name("linearize/" + base)
	tp, err := onnx.EncodeTensor(name, t)
	if err != nil {
		panic(err) // only called with well-formed literals
	}
	rw.g.Initializer = append(rw.g.Initializer, tp)
	rw.consts[key] = name
	return name
}

// floatConst returns a constant of the block's precision.
func (rw *rewriter) floatConst(base string, shape []int, v ...float32) string {
	return rw.constant(base, narrow(onnx.NewFloat(shape, v), rw.dtype))
}

// precision sets rw.dtype to the element type b computes in, or says why
// b is not converted: the ops take float32, float16 and bfloat16, and one
// model holds one precision of each op's function.
func (rw *rewriter) precision(b *Block) string {
	q := ""
	switch {
	case b.core != nil:
		q = b.core.q
	case b.fused != nil:
		q = b.fused.input
	}
	dt := rw.types.of(q)
	if dt == 0 {
		dt = onnx.Float // nothing tells: the common case
	}
	if !ops.Floating(dt) {
		return fmt.Sprintf("its queries are %s; the linear ops take float32, float16 or bfloat16", onnx.TypeName(dt))
	}
	if rw.fnType != 0 && dt != rw.fnType {
		return fmt.Sprintf("it computes in %s while the blocks converted before it compute in %s (a model holds one precision of each op)", onnx.TypeName(dt), onnx.TypeName(rw.fnType))
	}
	rw.dtype, rw.fnType = dt, dt
	return ""
}

// narrow returns a float32 tensor t in dt (float32, float16 or bfloat16),
// values beyond dt's range clamped to its largest finite number so that a
// "−∞" mask fill stays finite.
func narrow(t *onnx.Tensor, dt onnx.DataType) *onnx.Tensor {
	if dt != onnx.Float16 && dt != onnx.BFloat16 {
		return t
	}
	limit := float32(65504)
	if dt == onnx.BFloat16 {
		limit = 3.3895314e38
	}
	src := t.Floats()
	d := make([]uint16, len(src))
	for i, x := range src {
		x = min(max(x, -limit), limit)
		if dt == onnx.Float16 {
			d[i] = onnx.FloatToHalf(x)
		} else {
			d[i] = onnx.FloatToBFloat16(x)
		}
	}
	return &onnx.Tensor{DType: dt, Shape: t.Shape, Data: d}
}

func (rw *rewriter) intsConst(base string, v ...int64) string {
	return rw.constant(base, onnx.NewInt64([]int{len(v)}, v))
}

// node builds a default-domain node with a fresh output.
func (rw *rewriter) node(op, base string, inputs []string, attrs ...*onnxpb.AttributeProto) *onnxpb.NodeProto {
	out := rw.names.Name(base + "/" + op)
	return &onnxpb.NodeProto{Name: proto.String(rw.names.Name(base + "/" + op + "_node")), OpType: proto.String(op), Input: inputs, Output: []string{out}, Attribute: attrs}
}

func permAttr(p []int) *onnxpb.AttributeProto {
	ints := make([]int64, len(p))
	for i, v := range p {
		ints[i] = int64(v)
	}
	return &onnxpb.AttributeProto{Name: proto.String("perm"), Type: onnxpb.AttributeProto_INTS.Enum(), Ints: ints}
}

// toBHSD returns v in [B,H,S,D] layout given the perm from v's layout,
// folding into a Transpose that produced v when there is one.
func (rw *rewriter) toBHSD(v string, perm []int, base string, out *[]*onnxpb.NodeProto) string {
	if perm == nil {
		return v
	}
	src := v
	if p := rw.ix.Producer[v]; p != nil && p.GetOpType() == "Transpose" && defaultDomain(p) && inp(p, 0) != "" {
		pp := onnx.AttrInts(p, "perm")
		if len(pp) == len(perm) && isPerm(pp) {
			comp := make([]int, len(perm))
			for i, j := range perm {
				comp[i] = int(pp[j])
			}
			src, perm = p.Input[0], nilIfIdentity(comp)
			if perm == nil {
				return src
			}
		}
	}
	n := rw.node("Transpose", base, []string{src}, permAttr(perm))
	*out = append(*out, n)
	return n.Output[0]
}

// rewriteCore replaces an unfused core.
func (rw *rewriter) rewriteCore(b *Block) (*onnxpb.NodeProto, error) {
	c := b.core
	base := fmt.Sprintf("linearize/layer%d", b.Layer)
	var pre []*onnxpb.NodeProto
	q := rw.toBHSD(c.q, c.qPerm, base+"/q", &pre)
	k := rw.toBHSD(c.k, c.kPerm, base+"/k", &pre)
	v := rw.toBHSD(c.v, c.vPerm, base+"/v", &pre)
	bias, err := rw.coreBias(b, base, &pre)
	if err != nil {
		return nil, err
	}
	q, k, v, bias = rw.liftRanks(b, q, k, v, bias, base, &pre)
	if c.qPre != 1 || c.kPre != 1 {
		// Q (or K) was scaled before its head split. Performer's
		// estimator needs the whole scale as its attribute (it splits it
		// evenly, √scale on each side), so the factor is taken back out
		// of the operand; the exact ops take the operand as it is with
		// the rest of the scale, which keeps their products bit for bit.
		if rw.op == ops.PerformerOp {
			unscale := func(x string, f float64, name string) string {
				if f == 1 {
					return x
				}
				n := rw.node("Mul", base+"/"+name, []string{x, rw.floatConst(name+"_unscale", []int{}, float32(1/f))})
				pre = append(pre, n)
				return n.Output[0]
			}
			q, k = unscale(q, c.qPre, "q"), unscale(k, c.kPre, "k")
		} else {
			bc := *b
			bc.Scale = b.Scale / (c.qPre * c.kPre)
			b = &bc
		}
	}
	node, err := rw.core(b, q, k, v, bias)
	if err != nil {
		return nil, err
	}
	pre = append(pre, node)
	if c.single {
		pre = append(pre, rw.singleHeadOutput(node, c.av.Output[0], base))
	} else if c.outPerm != nil {
		t := rw.node("Transpose", base+"/out", []string{node.Output[0]}, permAttr(c.outPerm))
		t.Output[0] = c.av.Output[0]
		pre = append(pre, t)
	} else {
		node.Output[0] = c.av.Output[0]
	}
	rw.insert[c.av] = pre
	return node, nil
}

// coreBias builds the [B,1,1,S] key bias of an unfused core.
func (rw *rewriter) coreBias(b *Block, base string, out *[]*onnxpb.NodeProto) (string, error) {
	if b.Causal {
		return rw.causalKeyBias(b, base, out)
	}
	for _, bt := range b.core.biases {
		if bt.kind != BiasPerKey {
			continue
		}
		if bt.sliceKey {
			n := rw.node("Slice", base+"/key_bias", []string{bt.keyValue, rw.intsConst("zeros2", 0, 0), rw.intsConst("ones2", 1, 1), rw.intsConst("axes12", 1, 2)})
			*out = append(*out, n)
			bt.keyValue = n.Output[0]
		}
		if bt.where {
			zero := rw.floatConst("zero", []int{}, 0)
			fill := rw.floatConst("mask_fill", []int{}, float32(bt.maskedFill()))
			in := []string{bt.keyValue, fill, zero}
			if bt.scoresOnTrue {
				in = []string{bt.keyValue, zero, fill}
			}
			n := rw.node("Where", base+"/key_bias", in)
			*out = append(*out, n)
			return n.Output[0], nil
		}
		v := bt.keyValue
		if w := bt.rebuildWhere; w != nil {
			n := rw.node("Where", base+"/key_bias", []string{v, w.Input[1], w.Input[2]})
			*out = append(*out, n)
			v = n.Output[0]
		}
		if bt.factor != 1 {
			// The softmax sees factor·v. Performer needs exactly that on
			// the keys it attends to; both ops decide padding by
			// bias ≤ maskThreshold, which a scale after the mask
			// ((QKᵀ + mask)/√d: −10000 → −1250) would undo. So keys whose
			// unscaled mask is padding keep the unscaled value (the
			// softmax gives them ≈ 0 weight either way), and every other
			// key gets the scaled bias:
			//   key_bias = Where(v > maskThreshold, factor·v, v).
			scaled := rw.node("Mul", base+"/key_bias", []string{v, rw.floatConst("bias_factor", []int{}, float32(bt.factor))})
			valid := rw.node("Greater", base+"/key_bias", []string{v, rw.floatConst("mask_threshold", []int{}, maskThreshold)})
			sel := rw.node("Where", base+"/key_bias", []string{valid.Output[0], scaled.Output[0], v})
			*out = append(*out, scaled, valid, sel)
			v = sel.Output[0]
		}
		return v, nil
	}
	return rw.floatConst("zero_key_bias", []int{1, 1, 1, 1}, 0), nil
}

// rewriteFused unpacks a com.microsoft Attention / MultiHeadAttention into
// projections feeding the new op.
func (rw *rewriter) rewriteFused(b *Block) (*onnxpb.NodeProto, error) {
	fm := b.fused
	n := fm.node
	base := fmt.Sprintf("linearize/layer%d", b.Layer)
	var nodes []*onnxpb.NodeProto
	h := int64(b.Heads)
	var qIn, kIn, vIn string
	var bq, bk, bv string
	biasName := optInput(n, 2)
	if fm.mha {
		biasName = optInput(n, 3)
	}
	var biasVals *onnx.Tensor
	if biasName != "" {
		t, ok := constant(rw.ix, biasName)
		if !ok || !ops.Floating(t.DType) || t.Len() != int(2*fm.qSize+fm.vSize) {
			return nil, fmt.Errorf("bias %q of %s is not a float constant of length %d", biasName, nodeName(n), 2*fm.qSize+fm.vSize)
		}
		biasVals = t
	}
	sliceBias := func(name string, from, to int64) string {
		if biasVals == nil {
			return ""
		}
		s, _ := rw.addInitNoCount(base+"/"+name, sliceCols(biasVals, 1, int(from), int(to)))
		return s
	}
	if fm.mha {
		qIn, kIn, vIn = n.Input[0], n.Input[1], n.Input[2]
	} else if fm.quantized() {
		var err error
		if qIn, kIn, vIn, err = rw.quantizedProjections(fm, base, &nodes); err != nil {
			return nil, err
		}
	} else {
		wt, ok := constant(rw.ix, n.Input[1])
		if !ok || !ops.Floating(wt.DType) || len(wt.Shape) != 2 {
			return nil, fmt.Errorf("weights %q of %s are not a 2-D float constant", n.Input[1], nodeName(n))
		}
		sliceW := func(name string, from, to int64) string {
			s, _ := rw.addInitNoCount(base+"/"+name, sliceCols(wt, wt.Shape[0], int(from), int(to)))
			return s
		}
		x := n.Input[0]
		wq := sliceW("Wq", 0, fm.qSize)
		wk := sliceW("Wk", fm.qSize, 2*fm.qSize)
		wv := sliceW("Wv", 2*fm.qSize, 2*fm.qSize+fm.vSize)
		mm := func(w, name string) string {
			nd := rw.node("MatMul", base+"/"+name, []string{x, w})
			nodes = append(nodes, nd)
			return nd.Output[0]
		}
		qIn, kIn, vIn = mm(wq, "q"), mm(wk, "k"), mm(wv, "v")
	}
	bq = sliceBias("bq", 0, fm.qSize)
	bk = sliceBias("bk", fm.qSize, 2*fm.qSize)
	bv = sliceBias("bv", 2*fm.qSize, 2*fm.qSize+fm.vSize)
	split := func(x, bias, name string, width int64) string {
		if bias != "" {
			a := rw.node("Add", base+"/"+name, []string{x, bias})
			nodes = append(nodes, a)
			x = a.Output[0]
		}
		r := rw.node("Reshape", base+"/"+name, []string{x, rw.intsConst("shape_heads", 0, 0, h, width/h)})
		t := rw.node("Transpose", base+"/"+name, []string{r.Output[0]}, permAttr([]int{0, 2, 1, 3}))
		nodes = append(nodes, r, t)
		return t.Output[0]
	}
	q := split(qIn, bq, "q", fm.qSize)
	k := split(kIn, bk, "k", fm.qSize)
	v := split(vIn, bv, "v", fm.vSize)
	bias, err := rw.fusedBias(b, fm, n.Input[0], base, &nodes)
	if err != nil {
		return nil, err
	}
	core, err := rw.core(b, q, k, v, bias)
	if err != nil {
		return nil, err
	}
	t := rw.node("Transpose", base+"/out", []string{core.Output[0]}, permAttr([]int{0, 2, 1, 3}))
	r := rw.node("Reshape", base+"/out", []string{t.Output[0], rw.intsConst("shape_merge", 0, 0, fm.vSize)})
	r.Output[0] = n.Output[0]
	nodes = append(nodes, core, t, r)
	rw.insert[n] = nodes
	return core, nil
}

// addInitNoCount adds an initializer that re-packs existing weights (not
// counted as added parameters: the fused original goes away).
func (rw *rewriter) addInitNoCount(base string, t *onnx.Tensor) (string, error) {
	name := rw.names.Name(base)
	tp, err := onnx.EncodeTensor(name, t)
	if err != nil {
		return "", err
	}
	rw.g.Initializer = append(rw.g.Initializer, tp)
	return name, nil
}

// fusedBias turns a fused node's mask into a [B,1,1,S] additive bias.
func (rw *rewriter) fusedBias(b *Block, fm *fusedMatch, x, base string, out *[]*onnxpb.NodeProto) (string, error) {
	add := func(nd *onnxpb.NodeProto) string { *out = append(*out, nd); return nd.Output[0] }
	filter := float32(fm.maskFilter)
	switch fm.mask {
	case maskNone:
		return rw.floatConst("zero_key_bias", []int{1, 1, 1, 1}, 0), nil
	case maskRaw2D:
		m := add(rw.node("Cast", base+"/mask", []string{fm.maskValue}, castTo(rw.dtype)))
		inv := add(rw.node("Sub", base+"/mask", []string{rw.floatConst("one", []int{}, 1), m}))
		bias := add(rw.node("Mul", base+"/mask", []string{inv, rw.floatConst("mask_filter", []int{}, filter)}))
		return add(rw.node("Reshape", base+"/mask", []string{bias, rw.intsConst("shape_key_bias", 0, 1, 1, -1)})), nil
	case maskLengths:
		// valid[b, j] = j < length[b], j over the sequence length of x.
		shape := add(rw.node("Shape", base+"/mask", []string{x}))
		s := add(rw.node("Gather", base+"/mask", []string{shape, rw.constant("one_scalar", onnx.NewInt64([]int{}, []int64{1}))}, intAttr("axis", 0)))
		rng := add(rw.node("Range", base+"/mask", []string{rw.constant("zero_scalar", onnx.NewInt64([]int{}, []int64{0})), s, rw.constant("one_scalar", onnx.NewInt64([]int{}, []int64{1}))}))
		row := add(rw.node("Reshape", base+"/mask", []string{rng, rw.intsConst("shape_row", 1, -1)}))
		l64 := add(rw.node("Cast", base+"/mask", []string{fm.maskValue}, castTo(onnx.Int64)))
		col := add(rw.node("Reshape", base+"/mask", []string{l64, rw.intsConst("shape_col", -1, 1)}))
		valid := add(rw.node("Less", base+"/mask", []string{row, col}))
		bias := add(rw.node("Where", base+"/mask", []string{valid, rw.floatConst("zero", []int{}, 0), rw.floatConst("mask_filter", []int{}, filter)}))
		return add(rw.node("Reshape", base+"/mask", []string{bias, rw.intsConst("shape_key_bias", 0, 1, 1, -1)})), nil
	}
	return "", fmt.Errorf("unsupported mask form of %s", nodeName(fm.node))
}

// sliceCols returns columns [from,to) of t seen as rows×cols (a vector
// is one row), in t's own element type: packed float16 weights stay
// float16, int8 weights int8.
func sliceCols(t *onnx.Tensor, rows, from, to int) *onnx.Tensor {
	cols, width := t.Len()/rows, to-from
	shape := []int{rows, width}
	if len(t.Shape) == 1 {
		shape = []int{width}
	}
	switch src := t.Data.(type) {
	case []float32:
		return &onnx.Tensor{DType: t.DType, Shape: shape, Data: colsOf(src, rows, cols, from, to)}
	case []uint16:
		return &onnx.Tensor{DType: t.DType, Shape: shape, Data: colsOf(src, rows, cols, from, to)}
	case []int8:
		return &onnx.Tensor{DType: t.DType, Shape: shape, Data: colsOf(src, rows, cols, from, to)}
	case []uint8:
		return &onnx.Tensor{DType: t.DType, Shape: shape, Data: colsOf(src, rows, cols, from, to)}
	}
	panic("convert: sliceCols of a tensor that is not float32, 16-bit float or 8-bit integer")
}

func colsOf[T any](src []T, rows, cols, from, to int) []T {
	width := to - from
	d := make([]T, rows*width)
	for r := 0; r < rows; r++ {
		copy(d[r*width:(r+1)*width], src[r*cols+from:r*cols+to])
	}
	return d
}

func castTo(dt onnx.DataType) *onnxpb.AttributeProto { return intAttr("to", int64(dt)) }

func intAttr(name string, v int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(v)}
}

// Text formats the report for people.
func (r *Report) Text() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s: %d attention blocks, %d converted, %d skipped; %d parameters added (%s)\n",
		r.Op, r.Blocks, len(r.Converted), len(r.Skipped), r.Params, byteCount(r.Bytes))
	if r.Positions != nil {
		fmt.Fprintf(&sb, "%s\n", r.Positions)
	}
	for _, b := range r.Converted {
		causal := ""
		if b.Causal {
			causal = "  causal: causal=1 (prefix sums)"
		}
		fmt.Fprintf(&sb, "  converted %2d  %s  heads %d × %d  scale %.6g  bias %s%s\n", b.Layer, b.Form, b.Heads, b.HeadDim, b.Scale, b.Bias, causal)
	}
	for _, b := range r.Skipped {
		fmt.Fprintf(&sb, "  skipped   %2d  %s: %s\n", b.Layer, b.Form, b.Reason)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&sb, "  note: %s\n", n)
	}
	return sb.String()
}

func byteCount(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
