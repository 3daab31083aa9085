package convert

import (
	"fmt"
	"math"
	"strings"

	"github.com/linearize/linearize/internal/graphfacts"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

type matcher struct {
	// Facts are the graph facts the patterns are checked against.
	*graphfacts.Facts
	// linear is set by matchSoftmax when the Softmax it refused is the
	// core of linear attention (keys projected along the sequence, as in
	// an inlined LinformerAttention): what that op is.
	linear string
	// probe evaluates length-only values (sliding-window bands); nil
	// where the matcher reads a function body alone.
	probe *prober
}

// biasTerm is one thing added to (or masking) the scores.
type biasTerm struct {
	node  *onnxpb.NodeProto // the Add or Where
	value string            // additive bias value, or the Where condition
	// factor is the scale applied to the scores after this term, so the
	// bias seen by the softmax is factor·value.
	factor float64
	where  bool
	// For Where terms: the masked value and whether the scores pass where
	// the condition is true.
	fill         float64
	scoresOnTrue bool
	kind         BiasKind
	keyValue     string // [B,1,1,S] value to build the key bias from
	// rebuildWhere: the additive bias is this Where(cond, a, b) of
	// constants with cond broadcast over queries; the key bias is the
	// same Where on keyValue (the unexpanded condition).
	rebuildWhere *onnxpb.NodeProto
	// sliceKey: keyValue is constant along the head and query axes but
	// not of size one there; the rewrite takes index 0 of those axes.
	sliceKey bool
	// keyRank: the rank of keyValue when the rewrite lifts it to
	// [B,1,1,S] (liftRanks): 1 to 3 for single-head scores [B,Sq,Sk], 3
	// for a mask [B,1,S] on [B,H,S,S] scores; 0 when it is rank 4.
	keyRank int
	// view: the rank of the scores the term is added to when a reshape
	// of the scores was passed before it (state.view), 0 if none was.
	view int
}

// foldedTerm reports whether bias term bt of folded core c is added to
// the folded scores [B·H,Sq,Sk] (classifyFolded reads it), not to a
// [B,H,Sq,Sk] view of them.
func (c *coreMatch) foldedTerm(bt *biasTerm) bool {
	switch {
	case bt.view != 0:
		return bt.view == 3
	case c.first != 0:
		return c.first == 3 // the softmax's scores
	}
	return true
}

// maskThreshold: the linear-attention ops treat a key whose bias is at or
// below this value as padding (ops/linear_function.go).
const maskThreshold = -1e4

// maskedFill is the value a Where term gives masked keys, as the ops need
// it: the fill the softmax sees (fill·factor) when that is padding, else
// the fill as written (a padding fill stays padding when a scale after it
// shrinks it, as for an additive mask; see coreBias).
func (bt *biasTerm) maskedFill() float64 {
	if f := bt.fill * bt.factor; f <= maskThreshold {
		return f
	}
	return bt.fill
}

// coreMatch is a matched unfused core.
type coreMatch struct {
	softmax, qk, av *onnxpb.NodeProto
	nodes           []*onnxpb.NodeProto
	q, k, v         string
	// qPerm, kPerm, vPerm take the graph value to [B,H,S,D]; outPerm
	// takes [B,H,S,Dv] to the layout of av's output. nil is identity.
	qPerm, kPerm, vPerm, outPerm []int
	scale                        float64
	// qPre, kPre are the factors applied to Q and K before the head split
	// (or rotary embeddings), already in q and k; scale includes them.
	qPre, kPre float64
	biases     []biasTerm
	form       []string
	shapeUses  []*onnxpb.NodeProto
	// folded: Q, K, V and the scores hold the heads folded into the
	// batch, [B·H,S,D] (DeBERTa's bmm, torch's multi_head_attention);
	// first: the rank of the softmax's scores when a reshape of the
	// scores makes them (state.first), 0 if none does.
	folded bool
	first  int
	// single: one head and no head axis, Q, K, V [B,S,D] as projected
	// (singlehead.go).
	single bool
}

type state struct {
	scale  float64
	nodes  []*onnxpb.NodeProto
	biases []biasTerm
	form   []string
	// folded: the walk passed a reshape between [B,H,S,S] and the
	// [B·H,S,S] of a batched product (heads folded into the batch).
	folded bool
	// view: the rank of the scores below the last reshape of the scores
	// the walk passed (3: folded, 4: viewed [B,H,S,S]), 0 before any;
	// first: the rank the first one reshapes to (the softmax's).
	view, first int
}

func (s state) with(n *onnxpb.NodeProto) state {
	s.nodes = append(append([]*onnxpb.NodeProto{}, s.nodes...), n)
	return s
}

// reshaped is s past n, a reshape of the scores from rank from (3: heads
// folded into the batch, 4: [B,H,S,S]) to rank to, the first rank when
// none is set yet.
func (s state) reshaped(n *onnxpb.NodeProto, from, to int) state {
	s = s.with(n)
	s.folded, s.view = true, from
	if s.first == 0 {
		s.first = to
	}
	return s
}

func (s state) addForm(f string) state {
	s.form = append(append([]string{}, s.form...), f)
	return s
}

// Stages of a match, in the order a candidate passes them; a failure at a
// later stage got further (the tracer reports it, not the last one).
const (
	stageProbs   = iota // from the Softmax forward to the product with V
	stageScores         // back along the scores: a node with no role in any form
	stageCheck          // back along the scores: a node with a role whose check failed
	stageProduct        // the Q·Kᵀ product found; its operands or V do not fit
	stageCore           // a whole core matched; a check on it failed
	stageLinear         // a whole core of linear attention (refused as such)
)

// tracer keeps, for one Softmax, the failure that got furthest: the
// latest stage, then the most nodes matched; the first one on ties.
type tracer struct {
	rank   int
	msg    string
	linear string // what the furthest failure found, if linear attention
	set    bool
}

func (tr *tracer) fail(stage, nodes int, msg string) {
	r := stage*100000 + nodes
	if tr.set && r <= tr.rank {
		return
	}
	tr.rank, tr.msg, tr.linear, tr.set = r, msg, "", true
}

// matchSoftmax matches the core around a Softmax or says why it is not
// one: the failure of the candidate that got furthest.
func (mt *matcher) matchSoftmax(sm *onnxpb.NodeProto) (*Block, string) {
	mt.linear = ""
	// Axis: from opset 13 the softmax is along axis (default -1); before,
	// the input is flattened to 2-D at axis (default 1), which is the last
	// axis of a rank-4 score tensor only for axis 3 or -1.
	def := int64(-1)
	if mt.Opset > 0 && mt.Opset < 13 {
		def = 1
	}
	axis := onnx.AttrInt(sm, "axis", def)
	if axis != -1 && axis != 3 {
		return nil, fmt.Sprintf("Softmax axis %d (opset %d) is not the key axis of [B,H,S,S] scores", axis, mt.Opset)
	}
	// Forward: probabilities → (Cast, IsNaN guard, Identity, Dropout) → ·V.
	p := sm.Output[0]
	st := state{scale: 1}.with(sm)
	av, st, reason := mt.followProbs(p, st)
	if av == nil {
		return nil, reason
	}
	// Backward: every reading of the scores, until one whole core passes.
	tr := &tracer{}
	var found *Block
	mt.walkScores(inp(sm, 0), st, tr, func(c *coreMatch) bool {
		c.softmax, c.av = sm, av
		if err := mt.matchV(c, p); err != "" {
			tr.fail(stageProduct, len(c.nodes), err)
			return false
		}
		for _, x := range []struct {
			name, v string
			perm    []int
		}{{"keys", c.k, c.kPerm}, {"values", c.v, c.vPerm}} {
			if n := mt.seqProjection(x.v, x.perm); n != nil {
				tr.fail(stageLinear, len(c.nodes), fmt.Sprintf("the %s are projected along the sequence by %s %s (a constant left operand): this is linear attention already (a LinformerAttention, e.g. inlined by onnxruntime), not softmax attention over the tokens", x.name, n.GetOpType(), nodeName(n)))
				tr.linear = "inlined " + ops.LinformerOp
				return false
			}
		}
		b, reason := mt.finish(c)
		if b == nil {
			tr.fail(stageCore, len(c.nodes), reason)
			return false
		}
		found = b
		return true
	})
	if found == nil {
		mt.linear = tr.linear
		return nil, tr.msg
	}
	return found, ""
}

// seqProjection returns the MatMul that makes v's sequence axis (v taken
// to [B,H,S,D] by perm, through Transposes) as the rows of a constant left
// operand, E·K: keys or values mixed along the sequence, as Linformer
// does; nil otherwise. A projection of the features (x·W, or a
// channels-first W·x whose rows are channels) is not one.
func (mt *matcher) seqProjection(v string, perm []int) *onnxpb.NodeProto {
	s := 2 // the sequence axis of the current value
	if len(perm) == 4 {
		s = perm[2]
	}
	for i := 0; i < 6; i++ {
		n := mt.Ix.Producer[v]
		if n == nil || !defaultDomain(n) {
			return nil
		}
		switch n.GetOpType() {
		case "Transpose":
			p := onnx.AttrInts(n, "perm")
			if len(p) != 4 || !isPerm(p) {
				return nil
			}
			s = int(p[s])
			v = inp(n, 0)
			continue
		case "Identity", "Cast":
			v = inp(n, 0)
			continue
		case "MatMul":
			if s == 2 && mt.ConstDerived(inp(n, 0)) && !mt.ConstDerived(inp(n, 1)) {
				return n
			}
		}
		return nil
	}
	return nil
}

// stripScale follows Mul/Div by scalar constants back from v.
func (mt *matcher) stripScale(v string) (string, float64, []*onnxpb.NodeProto) {
	scale := 1.0
	var nodes []*onnxpb.NodeProto
	for i := 0; i < 4; i++ {
		n := mt.Ix.Producer[v]
		if n == nil || !defaultDomain(n) {
			break
		}
		if n.GetOpType() == "Div" {
			if c, ok := mt.Scalar(inp(n, 1)); ok && c != 0 {
				scale /= c
				nodes = append(nodes, n)
				v = inp(n, 0)
				continue
			}
		}
		if n.GetOpType() == "Mul" {
			if c, ok := mt.Scalar(inp(n, 1)); ok {
				scale *= c
				nodes = append(nodes, n)
				v = inp(n, 0)
				continue
			}
			if c, ok := mt.Scalar(inp(n, 0)); ok {
				scale *= c
				nodes = append(nodes, n)
				v = inp(n, 1)
				continue
			}
		}
		break
	}
	return v, scale, nodes
}

// permFor returns the positions in from of the letters of to.
func permFor(from, to string) ([]int, bool) {
	if len(from) != len(to) {
		return nil, false
	}
	p := make([]int, len(to))
	for i, r := range to {
		j := strings.IndexRune(from, r)
		if j < 0 {
			return nil, false
		}
		p[i] = j
	}
	return p, true
}

func nilIfIdentity(p []int) []int {
	for i, v := range p {
		if v != i {
			return p
		}
	}
	return nil
}

// matchV reads V and the output layout from the product with V.
func (mt *matcher) matchV(c *coreMatch, p string) string {
	av := c.av
	switch av.GetOpType() {
	case "MatMul":
		c.v = inp(av, 1)
		return ""
	case "Einsum":
		a, b, out, ok := graphfacts.EinsumEq(av)
		if !ok || len(a) != 4 || len(b) != 4 || len(out) != 4 {
			return fmt.Sprintf("Einsum %s (P·V) equation is not a rank-4 two-operand product", nodeName(av))
		}
		// a is the probabilities [B,H,Sq,Sk]; contracted: a[3].
		bi, hi, qi, ki := a[0], a[1], a[2], a[3]
		var e byte
		for i := 0; i < len(b); i++ {
			if !strings.ContainsRune(a, rune(b[i])) {
				e = b[i]
			}
		}
		if e == 0 || strings.ContainsRune(out, rune(ki)) {
			return fmt.Sprintf("Einsum %s does not contract the key index of the probabilities", nodeName(av))
		}
		vp, ok1 := permFor(b, string([]byte{bi, hi, ki, e}))
		op, ok2 := permFor(string([]byte{bi, hi, qi, e}), out)
		if !ok1 || !ok2 {
			return fmt.Sprintf("Einsum %s equation %q is not P·V", nodeName(av), onnx.AttrString(av, "equation", ""))
		}
		c.v = inp(av, 1)
		c.vPerm, c.outPerm = nilIfIdentity(vp), nilIfIdentity(op)
		c.form = append(c.form, "einsum-v")
		return ""
	}
	return "unsupported product with V"
}

// checkLayout follows v back through Transposes (and scalar scales,
// rotary embeddings, the key/value heads repeated for grouped-query
// attention and copies of one input (CopyOf), which keep the [B,H,S,D]
// layout) to a rank-4 Reshape (the head split, [B,S,H,D]) and checks that
// v, taken to [B,H,S,D] by perm, is that split transposed by [0,2,1,3].
// When no head split is found the layout cannot be checked and is
// accepted. The split's layout is read by the headSplits table; forms
// name it and what was passed for Block.Form.
func (mt *matcher) checkLayout(name, v string, perm []int) (msg string, kperms []string, forms []string) {
	comp := []int{0, 1, 2, 3} // v axis i = current value's axis comp[i]
	var seen, compact []string
	for step := 0; step < 10; step++ {
		n := mt.Ix.Producer[v]
		if n == nil || !defaultDomain(n) {
			return "", nil, forms
		}
		if x, form := mt.layoutKeeping(n); x != "" {
			v, forms = x, append(forms, form)
			continue
		}
		if x := mt.CopyOf(v); x != "" {
			// A copy of one input keeps its layout: torch.cat of one
			// tensor (a TorchScript export's cache update with no past),
			// a tensor of a torch.stack selected again, a Concat whose
			// other inputs are empty (graphfacts' copy rules).
			v = x
			continue
		}
		switch n.GetOpType() {
		case "Transpose":
			p := onnx.AttrInts(n, "perm")
			if len(p) != 4 || !isPerm(p) {
				return "", nil, forms
			}
			next := make([]int, 4)
			for i := range comp {
				next[i] = int(p[comp[i]])
			}
			comp = next
			seen = append([]string{fmt.Sprint(p)}, seen...) // graph order
			compact = append([]string{fmt.Sprintf("%d%d%d%d", p[0], p[1], p[2], p[3])}, compact...)
			v = inp(n, 0)
			continue
		case "Mul", "Div":
			if _, ok := mt.Scalar(inp(n, 1)); ok {
				v = inp(n, 0)
				continue
			}
			if _, ok := mt.Scalar(inp(n, 0)); ok && n.GetOpType() == "Mul" {
				v = inp(n, 1)
				continue
			}
			return "", nil, forms
		case "QuantizeLinear", "DequantizeLinear":
			// A QDQ pair (quantize_static) keeps the layout.
			v = inp(n, 0)
			continue
		case "Reshape":
			if s := mt.ShapeValue(inp(n, 1)); len(s) != 4 {
				return "", nil, forms
			}
			p := perm
			if p == nil {
				p = []int{0, 1, 2, 3}
			}
			hs := mt.headSplitOf(n)
			// want[i]: the axis of the split that axis i of [B,H,S,D] is.
			want := make([]int, 4)
			for i := range want {
				want[i] = strings.IndexByte(hs.layout, "BHSD"[i])
			}
			for i := range want {
				if comp[p[i]] != want[i] {
					need := fmt.Sprint(want)
					if name == "K" && perm != nil && perm[2] == 3 && perm[3] == 2 {
						kt := []int{want[0], want[1], want[3], want[2]}
						need = fmt.Sprint(kt) + " (Kᵀ)"
					}
					if len(seen) == 0 {
						return fmt.Sprintf("%s is its head split %s untransposed; the attention product needs perm %s", name, hs.name, need), nil, nil
					}
					return fmt.Sprintf("%s is transposed by perm %s from its head split %s; the attention product needs %s", name, strings.Join(seen, " then "), hs.name, need), nil, nil
				}
			}
			if hs.form != "" {
				forms = append(forms, hs.form)
			}
			return "", compact, forms
		}
		return "", nil, forms
	}
	return "", nil, forms
}

func dedup(s []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}

// pastState reports whether v is a concatenation with a graph input (past
// key/value).
func (mt *matcher) pastState(v string) bool {
	ix := mt.Ix
	for i := 0; i < 4; i++ {
		n := ix.Producer[v]
		if n == nil {
			return false
		}
		switch n.GetOpType() {
		case "Transpose", "Identity", "Cast":
			v = inp(n, 0)
			continue
		case "Concat":
			for _, in := range n.Input {
				if mt.reachesInput(in, 4) {
					return true
				}
			}
		}
		return false
	}
	return false
}

func (mt *matcher) reachesInput(v string, depth int) bool {
	if mt.Ix.GraphInputs[v] {
		return true
	}
	if depth == 0 {
		return false
	}
	n := mt.Ix.Producer[v]
	if n == nil {
		return false
	}
	switch n.GetOpType() {
	case "Gather", "Transpose", "Identity", "Cast", "Squeeze", "Unsqueeze", "Split", "Slice":
		return mt.reachesInput(inp(n, 0), depth-1)
	}
	return false
}

// queryFree reports whether v, added to [B,H,S,S] scores, has size one on
// the head and query axes (so it is a per-key bias [B,1,1,S]).
func queryFree(s []int64) bool {
	return len(s) == 4 && s[1] == 1 && s[2] == 1
}

// perKey reports whether v has shape [B,1,1,S]: by construction from a
// [B,S] mask, or by its dims (Facts.Dims: proved, or declared where
// nothing proves them; a declaration a proof contradicts is ignored, and
// a symbolic declared dim does not stop the construction from being read).
func (mt *matcher) perKey(v string, depth int) bool {
	if depth > 12 {
		return false
	}
	if mt.perKeyBuilt(v, depth) {
		return true
	}
	d := mt.Dims(v)
	return len(d) == 4 && d[1] == 1 && d[2] == 1
}

// perKeyBuilt reports whether v is built as [B,1,1,S] from a [B,S] mask.
func (mt *matcher) perKeyBuilt(v string, depth int) bool {
	ix := mt.Ix
	if _, isConst := constant(ix, v); isConst {
		if t, ok := constant(ix, v); ok && len(t.Shape) == 4 && t.Shape[1] == 1 && t.Shape[2] == 1 {
			return true
		}
		return false
	}
	n := ix.Producer[v]
	if n == nil || !defaultDomain(n) {
		return false
	}
	switch n.GetOpType() {
	case "Unsqueeze":
		return mt.keyUnsqueezed(n)
	case "Reshape":
		s := mt.ShapeValue(inp(n, 1))
		return len(s) == 4 && s[1] == 1 && s[2] == 1
	case "Cast", "Identity", "Neg", "Not", "Sub", "Mul", "Add", "Div", "Equal", "Less", "Greater", "Slice", "Where", "Sqrt", "Reciprocal",
		"QuantizeLinear", "DequantizeLinear":
		ins := n.Input
		if n.GetOpType() == "Slice" && len(ins) > 1 {
			ins = ins[:1]
		}
		any := false
		for _, in := range ins {
			if in == "" {
				continue
			}
			if t, ok := constant(ix, in); ok && t.Len() == 1 {
				continue
			}
			if !mt.perKey(in, depth+1) {
				return false
			}
			any = true
		}
		return any
	}
	return false
}

// keyUnsqueezed reports whether Unsqueeze n makes [B,1,1,S] of [B,S]:
// axes [1,2], or axis 2 of an Unsqueeze at axis 1.
func (mt *matcher) keyUnsqueezed(n *onnxpb.NodeProto) bool {
	axes := func(n *onnxpb.NodeProto) []int64 {
		if a := onnx.AttrInts(n, "axes"); a != nil {
			return a
		}
		a, _ := intsOf(mt.Ix, inp(n, 1))
		return a
	}
	a := axes(n)
	if len(a) == 2 && a[0] == 1 && a[1] == 2 {
		return true
	}
	p := mt.Ix.Producer[inp(n, 0)]
	if len(a) != 1 || a[0] != 2 || p == nil || p.GetOpType() != "Unsqueeze" {
		return false
	}
	pa := axes(p)
	return len(pa) == 1 && pa[0] == 1
}

// causal looks for the marks of a causal mask in the subgraph behind v: a
// Trilu, a Range compared with Less/Greater, or a triangular constant.
func (mt *matcher) causal(v string) bool {
	hasRange, hasCompare := false, false
	found := mt.walkBack(v, 64, func(x string, n *onnxpb.NodeProto) (bool, bool) {
		if t, ok := constant(mt.Ix, x); ok {
			return triangular(t), false
		}
		if n == nil {
			return false, false
		}
		switch n.GetOpType() {
		case "Trilu":
			return true, false
		case "Range":
			hasRange = true
		case "Less", "Greater", "LessOrEqual", "GreaterOrEqual":
			// A comparison of two index vectors (q_idx vs kv_idx); a
			// comparison with a constant (kv_idx ≥ 0) is not causal.
			if len(n.Input) == 2 && mt.FromRange(inp(n, 0)) && mt.FromRange(inp(n, 1)) {
				hasCompare = true
			}
		}
		return false, true
	})
	return found || hasRange && hasCompare
}

// slidingWindow reports whether v is built from the distance |i − j|
// between two index vectors (Abs of a Sub of Range-derived values) compared
// with a bound: the band mask of local (sliding-window) attention,
// ModernBERT's local layers.
func (mt *matcher) slidingWindow(v string) bool {
	return mt.walkBack(v, 64, func(_ string, n *onnxpb.NodeProto) (bool, bool) {
		if n == nil || !defaultDomain(n) {
			return false, false
		}
		if n.GetOpType() == "Abs" {
			if d := mt.Ix.Producer[inp(n, 0)]; d != nil && d.GetOpType() == "Sub" && mt.FromRange(inp(d, 0)) && mt.FromRange(inp(d, 1)) {
				return true, false
			}
		}
		return false, true
	})
}

// walkBack visits v and the values behind it, breadth first, each once and
// at most limit of them, with their producers (nil for graph inputs and
// initializers). It reports true as soon as visit finds what it looks for;
// it walks on into a node's inputs when visit says so, but never into a
// Shape's or Size's, which say nothing of their input's values.
func (mt *matcher) walkBack(v string, limit int, visit func(x string, n *onnxpb.NodeProto) (found, descend bool)) bool {
	seen := map[string]bool{}
	queue := []string{v}
	for steps := 0; len(queue) > 0 && steps < limit; steps++ {
		x := queue[0]
		queue = queue[1:]
		if seen[x] {
			continue
		}
		seen[x] = true
		n := mt.Ix.Producer[x]
		found, descend := visit(x, n)
		if found {
			return true
		}
		if !descend || n == nil {
			continue
		}
		if op := n.GetOpType(); op == "Shape" || op == "Size" {
			continue
		}
		queue = append(queue, onnx.NodeInputs(n)...)
	}
	return false
}

// triangular reports whether t's last two dims form a square matrix with
// zeros strictly on one side of the diagonal and nonzeros on the other.
func triangular(t *onnx.Tensor) bool {
	r := len(t.Shape)
	if r < 2 || t.Shape[r-1] != t.Shape[r-2] || t.Shape[r-1] < 2 || t.Len() > 1<<22 {
		return false
	}
	vals, err := t.AsFloat64s() // booleans as 0 and 1
	if err != nil {
		return false
	}
	n := t.Shape[r-1]
	diag := vals[0]
	lowerSame, upperSame := true, true
	upper, lower := math.NaN(), math.NaN()
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			x := vals[i*n+j]
			switch {
			case j > i:
				if math.IsNaN(upper) {
					upper = x
				} else if x != upper {
					upperSame = false
				}
			case j < i:
				if math.IsNaN(lower) {
					lower = x
				} else if x != lower {
					lowerSame = false
				}
			}
		}
	}
	_ = diag
	return upperSame && lowerSame && upper != lower
}
