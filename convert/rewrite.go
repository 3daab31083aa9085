package convert

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/linearize/linearize/features"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
	"google.golang.org/protobuf/proto"
)

// ReportOptions are the options a conversion ran with, as the report
// (and --json) gives them: the fields of the op that was written; the
// others are zero and left out of the JSON.
type ReportOptions struct {
	Seed uint64 `json:"seed"`
	// Performer.
	Features   int                 `json:"features,omitempty"`
	Omega      features.Kind       `json:"omega,omitempty"`
	Norms      features.Norms      `json:"norms,omitempty"`
	Kernel     ops.PerformerKernel `json:"kernel,omitempty"`
	PerHead    bool                `json:"per_head,omitempty"`
	Center     bool                `json:"center,omitempty"`
	Balance    bool                `json:"balance,omitempty"`
	FeatureMap ops.FeatureMap      `json:"feature_map,omitempty"`
	Causal     bool                `json:"causal,omitempty"`
	Chunk      int                 `json:"chunk,omitempty"`
	// Linformer (Gaussian E/F).
	K      int            `json:"k,omitempty"`
	MaxLen int            `json:"max_len,omitempty"`
	Share  features.Share `json:"share,omitempty"`
	// Local+pooled (and the pooled Linformer).
	Block    int   `json:"block,omitempty"`
	Segments int   `json:"segments,omitempty"`
	Sinks    Sinks `json:"sinks,omitempty"`
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
	// Window is the band of the sliding-window blocks converted into
	// WindowAttention, if any.
	Window *Window `json:"window,omitempty"`
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
	// Window: a sliding-window block, converted exactly into
	// WindowAttention (Op) whatever the conversion's own op.
	Window *Window `json:"window,omitempty"`
	Op     string  `json:"op,omitempty"`
}

// Bounds on the options, so that a mistyped flag is an error rather than
// an allocation of many gigabytes per layer.
const (
	MaxFeatures   = 1 << 16 // random features M per head
	MaxProjection = 1 << 26 // k·N elements of one Linformer projection
)

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
	// win is the window plan: sliding-window blocks become
	// WindowAttention in every conversion (window.go).
	win windowPlan
	// alibi is the ALiBi plan of an op that keeps it.
	alibi alibiPlan
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
	if err := rw.convertBlocks(det, want); err != nil {
		return nil, nil, err
	}
	if len(rw.report.Converted) == 0 {
		return nil, &rw.report, nothingConverted(det, rw.report.Skipped)
	}
	rw.splice()
	if len(rw.report.Converted) == 0 {
		return nil, &rw.report, nothingConverted(det, rw.report.Skipped)
	}
	if rw.mainConverted() {
		if err := rw.importFunction(m, rw.function, rw.fnType); err != nil {
			return nil, nil, err
		}
	}
	if rw.win.used {
		if err := rw.importFunction(m, rw.win.function, rw.win.fnType); err != nil {
			return nil, nil, err
		}
	}
	return m, &rw.report, nil
}

// skipReason says why block b is not converted ("" when it is).
func (rw *rewriter) skipReason(b *Block, want map[int]bool) string {
	if len(want) > 0 && !want[b.Layer] {
		return "not selected by --layers"
	}
	if b.Window != nil {
		return rw.win.skipReason(rw, b)
	}
	if rw.core == nil {
		return rw.win.globalReason(b)
	}
	switch {
	case b.Alibi != nil:
		if !rw.alibi.ok {
			return b.Reason
		}
	case !b.Convertible && !rw.causal.converts(b):
		return rw.causal.reason(b)
	}
	if why := rw.precision(b); why != "" {
		return why
	}
	if why := SelfAttentionOnly(rw.op, b); why != "" {
		return why
	}
	return rw.alibi.admit(rw.op, b)
}

// alibiPlan is what a conversion whose op keeps ALiBi (local-pooled)
// does with ALiBi blocks: their slopes are built into the op's one
// function body, so the blocks converted share one set of slopes (or
// none): the first converted block sets it.
type alibiPlan struct {
	ok     bool // the op keeps ALiBi
	set    bool
	slopes []float32
}

// admit says why block b cannot share the op's body ("" when it can),
// and records the first block's slopes.
func (p *alibiPlan) admit(op string, b *Block) string {
	if !p.ok {
		return ""
	}
	if p.set && !slices.Equal(p.slopes, b.Alibi) {
		return fmt.Sprintf("ALiBi slopes %s differ from the blocks converted before it (%s): a model holds one %s body", slopesText(b.Alibi), slopesText(p.slopes), op)
	}
	p.set, p.slopes = true, b.Alibi
	return ""
}

// convertBlocks rewrites every selected convertible block of det and
// records each block in the report.
func (rw *rewriter) convertBlocks(det *Detection, want map[int]bool) error {
	for _, b := range det.Blocks {
		br := BlockReport{Layer: b.Layer, Form: b.Form, Heads: b.Heads, HeadDim: b.HeadDim, Scale: b.Scale, Bias: b.Bias, Causal: b.Causal}
		if why := rw.skipReason(b, want); why != "" {
			br.Reason = why
			rw.report.Skipped = append(rw.report.Skipped, br)
			continue
		}
		if b.Window != nil {
			br.Window, br.Op = b.Window, ops.WindowOp
		}
		var node *onnxpb.NodeProto
		var err error
		switch {
		case b.Window != nil:
			node, err = rw.rewriteWindow(b)
		case b.core != nil:
			node, err = rw.rewriteCore(b, rw.op, rw.core)
		default:
			node, err = rw.rewriteFused(b)
		}
		if err != nil {
			return fmt.Errorf("convert: layer %d: %w", b.Layer, err)
		}
		br.Node = node.GetName()
		rw.report.Converted = append(rw.report.Converted, br)
	}
	return nil
}

// splice puts the new nodes in place of the nodes they replace, removes
// the dead nodes, and moves a converted block whose output reaches no
// graph output (dropped with the dead nodes) to the report's skipped.
func (rw *rewriter) splice() {
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
}

// importFunction adds an op's function body (function, typed dt) to m,
// at an opset the bodies can be built at (upgrading m's when it is older).
func (rw *rewriter) importFunction(m *onnxpb.ModelProto, function func(opset int64) (*onnxpb.FunctionProto, error), dt onnx.DataType) error {
	if o := onnx.OpsetVersion(m, ""); o > rw.opset {
		rw.opset = o // upgraded for an earlier function
	}
	fopset := rw.opset
	if fopset < ops.MinFunctionOpset {
		// onnxruntime runs a model-local function at the model's own
		// opset, so the model must import one the bodies can be built at.
		if err := upgradeOpset(m, ops.MinFunctionOpset); err != nil {
			return fmt.Errorf("convert: %w", err)
		}
		fopset = ops.MinFunctionOpset
	}
	if fopset > ops.MaxFunctionOpset {
		fopset = ops.MaxFunctionOpset
	}
	fn, err := function(fopset)
	if err == nil {
		fn, err = ops.TypedFunction(fn, dt)
	}
	if err != nil {
		return fmt.Errorf("convert: %w", err)
	}
	if err := ops.ImportFunction(m, fn); err != nil {
		return fmt.Errorf("convert: %w", err)
	}
	return nil
}

// addInit adds t as an initializer under a fresh name based on base.
func (rw *rewriter) addInit(base string, t *onnx.Tensor) (string, error) {
	name, err := rw.addInitNoCount(base, t)
	if err != nil {
		return "", err
	}
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
	dt, why := rw.blockType(b)
	if why != "" {
		return why
	}
	if rw.fnType != 0 && dt != rw.fnType {
		return fmt.Sprintf("it computes in %s while the blocks converted before it compute in %s (a model holds one precision of each op)", onnx.TypeName(dt), onnx.TypeName(rw.fnType))
	}
	rw.dtype, rw.fnType = dt, dt
	return ""
}

// blockType returns the element type b computes in, or why the linear
// ops cannot take it.
func (rw *rewriter) blockType(b *Block) (onnx.DataType, string) {
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
		return 0, fmt.Sprintf("its queries are %s; the linear ops take float32, float16 or bfloat16", onnx.TypeName(dt))
	}
	return dt, ""
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

// rewriteCore replaces an unfused core by the node core builds for op.
func (rw *rewriter) rewriteCore(b *Block, op string, core func(b *Block, q, k, v, bias string) (*onnxpb.NodeProto, error)) (*onnxpb.NodeProto, error) {
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
		if op == ops.PerformerOp {
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
	node, err := core(b, q, k, v, bias)
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
		if b.Window != nil {
			causal = fmt.Sprintf("  window %s: %s, exact", b.Window, b.Op)
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
