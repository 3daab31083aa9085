package convert

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/linearize/linearize/internal/graphfacts"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// The exporter forms of an attention core, as data. A core is
//
//	probs = Softmax(scores) → [probs forms] → product with V
//	scores ← [score forms]* ← Q·Kᵀ [product forms]
//
// and one engine (followProbs forward, walkScores backwards, with
// backtracking over every reading a form allows) runs the tables; the
// checks on a whole core are in finish. A new exporter form is a new row.

// formQDQ names the cores whose scores or probabilities pass through
// QuantizeLinear/DequantizeLinear pairs (quantize_static, QDQ format).
const formQDQ = "qdq"

// maxShift is the largest constant added to every score that is read as
// a shift the softmax ignores: float32 scores near it are rounded by
// about 1e-3 (what a legacy −10000 mask on a model without padding does).
const maxShift = 1e4

// reading is one way to read a node on the score path: the operand the
// scores continue from and the state after the node.
type reading struct {
	scores string
	st     state
}

// scoreForm reads one node on the score path, walking back from the
// Softmax. read returns the readings the form allows; a non-empty why says
// the node has the op but fails the form's check (that is traced); no
// readings and no why means the form does not apply.
type scoreForm struct {
	op   string
	form string // added to Block.Form for every reading ("" adds none)
	read func(mt *matcher, n *onnxpb.NodeProto, st state) (rs []reading, why string)
}

var scoreForms = []scoreForm{
	// The same number added to every score (a mask built for inputs with
	// no padding): the softmax does not see it. A number so large that it
	// swamps the scores in float32 (|c| > maxShift: every key masked)
	// leaves the original a uniform average; that is refused.
	{"Add", "add-const", func(mt *matcher, n *onnxpb.NodeProto, st state) ([]reading, string) {
		var rs []reading
		for i := 0; i < 2; i++ {
			c, ok := mt.Uniform(inp(n, 1-i))
			if !ok {
				continue
			}
			if math.IsNaN(c) || math.Abs(c*st.scale) > maxShift {
				return nil, fmt.Sprintf("Add %s adds %g to every score: every key is masked", nodeName(n), c)
			}
			rs = append(rs, reading{inp(n, i), st.with(n)})
		}
		return rs, ""
	}},
	// scores + bias: an additive mask or position bias (classified by
	// finish); either operand may be the scores.
	{"Add", "add-bias", func(mt *matcher, n *onnxpb.NodeProto, st state) ([]reading, string) {
		var rs []reading
		for i := 0; i < 2; i++ {
			if _, ok := mt.Uniform(inp(n, 1-i)); ok {
				continue
			}
			s2 := st.with(n)
			s2.biases = append(append([]biasTerm{}, st.biases...), biasTerm{node: n, value: inp(n, 1-i), factor: st.scale, view: st.view})
			rs = append(rs, reading{inp(n, i), s2})
		}
		return rs, ""
	}},
	// scores − c: a shift, as add-const.
	{"Sub", "sub-const", func(mt *matcher, n *onnxpb.NodeProto, st state) ([]reading, string) {
		c, ok := mt.Uniform(inp(n, 1))
		if !ok {
			return nil, ""
		}
		if math.IsNaN(c) || math.Abs(c*st.scale) > maxShift {
			return nil, fmt.Sprintf("Sub %s subtracts %g from every score: every key is masked", nodeName(n), c)
		}
		return []reading{{inp(n, 0), st.with(n)}}, ""
	}},
	// scores − bias (Funnel: scores − INF·(1 − mask)): a bias term the
	// softmax sees negated (factor −scale). Only the scores may be the
	// first operand; bias − scores would negate them.
	{"Sub", "sub-bias", func(mt *matcher, n *onnxpb.NodeProto, st state) ([]reading, string) {
		if _, ok := mt.Uniform(inp(n, 1)); ok {
			return nil, "" // sub-const
		}
		s2 := st.with(n)
		s2.biases = append(append([]biasTerm{}, st.biases...), biasTerm{node: n, value: inp(n, 1), factor: -st.scale, view: st.view})
		return []reading{{inp(n, 0), s2}}, ""
	}},
	// Where(cond, scores, fill) with a condition true (or false)
	// everywhere, as a vision model without padding writes its mask: one
	// branch everywhere.
	{"Where", "where-constant-condition", func(mt *matcher, n *onnxpb.NodeProto, st state) ([]reading, string) {
		c, ok := mt.Uniform(inp(n, 0))
		if !ok || len(n.Input) != 3 {
			return nil, ""
		}
		sel := 1
		if c == 0 {
			sel = 2
		}
		if _, isConst := mt.Uniform(inp(n, sel)); isConst {
			return nil, fmt.Sprintf("Where %s selects the constant %s everywhere: every score is masked", nodeName(n), inp(n, sel))
		}
		return []reading{{inp(n, sel), st.with(n)}}, ""
	}},
	// Where(mask, fill, scores) or Where(cond, scores, fill): a mask that
	// replaces masked scores by a constant.
	{"Where", "where-mask", func(mt *matcher, n *onnxpb.NodeProto, st state) ([]reading, string) {
		if len(n.Input) != 3 {
			return nil, fmt.Sprintf("malformed Where %s", nodeName(n))
		}
		if _, ok := mt.Uniform(inp(n, 0)); ok {
			return nil, "" // where-constant-condition
		}
		var rs []reading
		for i := 1; i <= 2; i++ {
			fill, ok := mt.Uniform(inp(n, 3-i))
			if !ok {
				continue
			}
			s2 := st.with(n)
			s2.biases = append(append([]biasTerm{}, st.biases...), biasTerm{node: n, value: inp(n, 0), factor: st.scale, where: true, fill: fill, scoresOnTrue: i == 1, view: st.view})
			rs = append(rs, reading{inp(n, i), s2})
		}
		if len(rs) == 0 {
			return nil, fmt.Sprintf("Where %s selects between two non-constant values", nodeName(n))
		}
		return rs, ""
	}},
	// scores / c.
	{"Div", "div-scale", func(mt *matcher, n *onnxpb.NodeProto, st state) ([]reading, string) {
		c, ok := mt.Scalar(inp(n, 1))
		if !ok || c == 0 {
			return nil, fmt.Sprintf("Div %s divides the scores by a non-constant or zero", nodeName(n))
		}
		s2 := st.with(n)
		s2.scale = st.scale / c
		return []reading{{inp(n, 0), s2}}, ""
	}},
	// scores · c, either operand.
	{"Mul", "mul-scale", func(mt *matcher, n *onnxpb.NodeProto, st state) ([]reading, string) {
		var rs []reading
		for i := 0; i < 2; i++ {
			c, ok := mt.Scalar(inp(n, 1-i))
			if !ok {
				continue
			}
			s2 := st.with(n)
			s2.scale = st.scale * c
			rs = append(rs, reading{inp(n, i), s2})
		}
		if len(rs) == 0 {
			return nil, fmt.Sprintf("Mul %s multiplies the scores by a non-constant", nodeName(n))
		}
		return rs, ""
	}},
	{"Identity", "", func(mt *matcher, n *onnxpb.NodeProto, st state) ([]reading, string) {
		return []reading{{inp(n, 0), st.with(n)}}, ""
	}},
	// The scores of a batched product [B·H,S,S] viewed as [B,H,S,S] for
	// the mask and the softmax (DeBERTa): the heads are folded into the
	// batch below this reshape.
	{"Reshape", formFolded, func(mt *matcher, n *onnxpb.NodeProto, st state) ([]reading, string) {
		if len(mt.ShapeValue(inp(n, 1))) != 4 {
			if len(mt.ShapeValue(inp(n, 1))) == 3 {
				return nil, "" // the next form's
			}
			return nil, fmt.Sprintf("Reshape %s of the scores is not to [B,H,S,S] or [B·H,S,S]", nodeName(n))
		}
		if d := mt.Dims(inp(n, 0)); d != nil && len(d) != 3 {
			return nil, fmt.Sprintf("Reshape %s of the scores is from rank %d, not [B·H,S,S]", nodeName(n), len(d))
		}
		s2 := st.with(n)
		s2.folded, s2.view = true, 3
		if s2.first == 0 {
			s2.first = 4
		}
		return []reading{{inp(n, 0), s2}}, ""
	}},
	// The scores viewed [B,H,S,S] for the mask and folded back to
	// [B·H,S,S] for the softmax (fairseq's MultiheadAttention:
	// w.view(B,H,T,S).masked_fill(...).view(B·H,T,S)): below this
	// reshape the terms are added to the [B,H,S,S] view.
	{"Reshape", formFolded, func(mt *matcher, n *onnxpb.NodeProto, st state) ([]reading, string) {
		if len(mt.ShapeValue(inp(n, 1))) != 3 {
			return nil, ""
		}
		if d := mt.Dims(inp(n, 0)); len(d) != 4 {
			return nil, fmt.Sprintf("Reshape %s of the scores to rank 3 is not from [B,H,S,S]", nodeName(n))
		}
		s2 := st.with(n)
		s2.folded, s2.view = true, 4
		if s2.first == 0 {
			s2.first = 3
		}
		return []reading{{inp(n, 0), s2}}, ""
	}},
	// DequantizeLinear(QuantizeLinear(scores)): the QDQ pair
	// quantize_static writes on every tensor. The scores continue from
	// the pair's input; the rewrite computes in float.
	{"DequantizeLinear", formQDQ, func(mt *matcher, n *onnxpb.NodeProto, st state) ([]reading, string) {
		q := mt.Ix.Producer[inp(n, 0)]
		if q == nil || q.GetOpType() != "QuantizeLinear" || !defaultDomain(q) {
			return nil, fmt.Sprintf("DequantizeLinear %s of the scores does not dequantize a QuantizeLinear", nodeName(n))
		}
		return []reading{{inp(q, 0), st.with(n).with(q)}}, ""
	}},
	// softmax(x, dtype=float32): the scores cast to a float type.
	{"Cast", "cast-scores", func(mt *matcher, n *onnxpb.NodeProto, st state) ([]reading, string) {
		if !graphfacts.FloatCast(n) {
			return nil, fmt.Sprintf("Cast %s turns the scores into %s, not a float type", nodeName(n), onnx.DataType(onnx.AttrInt(n, "to", 0)))
		}
		return []reading{{inp(n, 0), st.with(n)}}, ""
	}},
}

// productForm reads the node that makes the scores from Q and K: a core
// candidate, or why the node is not one.
type productForm struct {
	op   string
	read func(mt *matcher, n *onnxpb.NodeProto, st state) (*coreMatch, string)
}

var productForms = []productForm{
	// Q·Kᵀ with K held transposed ([B,H,D,S]); scalar factors on either
	// operand (pre-scaled Q, the split √scale of SDPA exports) are part
	// of the score scale.
	{"MatMul", func(mt *matcher, n *onnxpb.NodeProto, st state) (*coreMatch, string) {
		c := &coreMatch{qk: n, scale: st.scale, folded: st.folded, first: st.first}
		q, sq, qn := mt.stripScale(inp(n, 0))
		k, sk, kn := mt.stripScale(inp(n, 1))
		c.q, c.k = q, k
		c.kPerm = []int{0, 1, 3, 2}
		c.scale *= sq * sk
		c.nodes = append(append(st.with(n).nodes, qn...), kn...)
		c.biases = append([]biasTerm(nil), st.biases...)
		c.form = append([]string{"matmul"}, st.form...)
		if sq != 1 {
			c.form = append(c.form, "scaled-q")
		}
		if sk != 1 {
			c.form = append(c.form, "scaled-k")
		}
		return c, ""
	}},
	// Einsum giving [B,H,S,S] from Q and K in any layout (keras/tf2onnx
	// write K first).
	{"Einsum", (*matcher).einsumQK},
}

// walkScores walks the score expression backwards from v, trying every
// reading the forms allow and calling done for each complete core; done
// returns true to stop. Failures go to tr.
func (mt *matcher) walkScores(v string, st state, tr *tracer, done func(*coreMatch) bool) bool {
	fail := func(stage int, msg string) bool {
		tr.fail(stage, len(st.nodes), msg)
		return false
	}
	n := mt.Ix.Producer[v]
	if n == nil {
		return fail(stageScores, fmt.Sprintf("scores %q are not computed in the graph (no producer)", v))
	}
	if !defaultDomain(n) {
		return fail(stageScores, fmt.Sprintf("scores come from %s:%s %s", n.GetDomain(), n.GetOpType(), nodeName(n)))
	}
	known := false
	for _, pf := range productForms {
		if pf.op != n.GetOpType() {
			continue
		}
		known = true
		c, why := pf.read(mt, n, st)
		if c == nil {
			fail(stageProduct, why)
			continue
		}
		if done(c) {
			return true
		}
	}
	for _, f := range scoreForms {
		if f.op != n.GetOpType() {
			continue
		}
		known = true
		rs, why := f.read(mt, n, st)
		if why != "" {
			fail(stageCheck, why)
		}
		for _, r := range rs {
			if f.form != "" {
				r.st = r.st.addForm(f.form)
			}
			if mt.walkScores(r.scores, r.st, tr, done) {
				return true
			}
		}
	}
	if !known {
		return fail(stageScores, fmt.Sprintf("scores come from %s %s, not a Q·Kᵀ product", n.GetOpType(), nodeName(n)))
	}
	return false
}

// probsForm reads the consumers of the probabilities, walking forward
// from the Softmax: the next value (a pass-through) or the product with V
// (the end), or why not; ok false means the form does not apply.
type probsForm struct {
	form string
	read func(mt *matcher, p string, cs []*onnxpb.NodeProto) (next string, nodes []*onnxpb.NodeProto, av *onnxpb.NodeProto, why string, ok bool)
}

var probsForms = []probsForm{
	// Where(IsNaN(p), 0, p), the guard SDPA-era exports add.
	{"", func(mt *matcher, p string, cs []*onnxpb.NodeProto) (string, []*onnxpb.NodeProto, *onnxpb.NodeProto, string, bool) {
		if len(cs) != 2 {
			return "", nil, nil, "", false
		}
		var isnan, where *onnxpb.NodeProto
		for _, c := range cs {
			switch c.GetOpType() {
			case "IsNaN":
				isnan = c
			case "Where":
				where = c
			}
		}
		if isnan == nil || where == nil || inp(where, 0) != isnan.Output[0] || len(mt.Ix.Consumers[isnan.Output[0]]) != 1 || len(where.Output) == 0 {
			return "", nil, nil, "", false
		}
		return where.Output[0], []*onnxpb.NodeProto{isnan, where}, nil, "", true
	}},
	// Identity, and Dropout whose mask output is unused.
	{"", func(mt *matcher, p string, cs []*onnxpb.NodeProto) (string, []*onnxpb.NodeProto, *onnxpb.NodeProto, string, bool) {
		if len(cs) != 1 || (cs[0].GetOpType() != "Identity" && cs[0].GetOpType() != "Dropout") {
			return "", nil, nil, "", false
		}
		c := cs[0]
		if len(c.Output) > 1 && c.Output[1] != "" && len(mt.Ix.Consumers[c.Output[1]]) > 0 {
			return "", nil, nil, "dropout mask of the probabilities is used", true
		}
		return c.Output[0], []*onnxpb.NodeProto{c}, nil, "", true
	}},
	// The probabilities [B,H,S,S] viewed as [B·H,S,S] for a batched
	// product with V (DeBERTa's bmm).
	{formFolded, func(mt *matcher, p string, cs []*onnxpb.NodeProto) (string, []*onnxpb.NodeProto, *onnxpb.NodeProto, string, bool) {
		if len(cs) != 1 || cs[0].GetOpType() != "Reshape" || !defaultDomain(cs[0]) || inp(cs[0], 0) != p || len(mt.ShapeValue(inp(cs[0], 1))) != 3 {
			return "", nil, nil, "", false
		}
		return cs[0].Output[0], []*onnxpb.NodeProto{cs[0]}, nil, "", true
	}},
	// The probabilities quantized and dequantized (quantize_static's QDQ
	// pair before the product with V).
	{formQDQ, func(mt *matcher, p string, cs []*onnxpb.NodeProto) (string, []*onnxpb.NodeProto, *onnxpb.NodeProto, string, bool) {
		if len(cs) != 1 || cs[0].GetOpType() != "QuantizeLinear" || !defaultDomain(cs[0]) || inp(cs[0], 0) != p {
			return "", nil, nil, "", false
		}
		dq := mt.Ix.Consumers[cs[0].Output[0]]
		if len(dq) != 1 || dq[0].GetOpType() != "DequantizeLinear" || !defaultDomain(dq[0]) || inp(dq[0], 0) != cs[0].Output[0] {
			return "", nil, nil, fmt.Sprintf("QuantizeLinear %s of the probabilities is not dequantized once", nodeName(cs[0])), true
		}
		return dq[0].Output[0], []*onnxpb.NodeProto{cs[0], dq[0]}, nil, "", true
	}},
	// softmax(x, dtype=float32).to(dtype): the probabilities cast back.
	{"cast-probs", func(mt *matcher, p string, cs []*onnxpb.NodeProto) (string, []*onnxpb.NodeProto, *onnxpb.NodeProto, string, bool) {
		if len(cs) != 1 || !graphfacts.FloatCast(cs[0]) || !defaultDomain(cs[0]) {
			return "", nil, nil, "", false
		}
		return cs[0].Output[0], []*onnxpb.NodeProto{cs[0]}, nil, "", true
	}},
	// The product P·V (MatMul, or Einsum read by matchV).
	{"", func(mt *matcher, p string, cs []*onnxpb.NodeProto) (string, []*onnxpb.NodeProto, *onnxpb.NodeProto, string, bool) {
		if len(cs) != 1 || (cs[0].GetOpType() != "MatMul" && cs[0].GetOpType() != "Einsum") {
			return "", nil, nil, "", false
		}
		c := cs[0]
		if inp(c, 0) != p {
			return "", nil, nil, fmt.Sprintf("%s %s takes the probabilities as its second operand (P·V wanted)", c.GetOpType(), nodeName(c)), true
		}
		return "", nil, c, "", true
	}},
}

// followProbs follows the softmax output through the probs forms to the
// product with V.
func (mt *matcher) followProbs(p string, st state) (*onnxpb.NodeProto, state, string) {
	for step := 0; step < 6; step++ {
		if mt.Ix.GraphOutputs[p] {
			return nil, st, fmt.Sprintf("attention probabilities %q are a graph output", p)
		}
		// Shape and Size read only the shape (x.size(-1) for a view).
		var cs []*onnxpb.NodeProto
		for _, c := range mt.Ix.Consumers[p] {
			if op := c.GetOpType(); defaultDomain(c) && (op == "Shape" || op == "Size") {
				continue
			}
			cs = append(cs, c)
		}
		if len(cs) == 0 {
			return nil, st, fmt.Sprintf("attention probabilities %q are not used", p)
		}
		applied := false
		for _, f := range probsForms {
			next, nodes, av, why, ok := f.read(mt, p, cs)
			if !ok {
				continue
			}
			if why != "" {
				return nil, st, why
			}
			if av != nil {
				return av, st, ""
			}
			for _, n := range nodes {
				st = st.with(n)
			}
			if f.form != "" {
				st = st.addForm(f.form)
			}
			if f.form == formFolded {
				st.folded = true
			}
			p, applied = next, true
			break
		}
		if applied {
			continue
		}
		if len(cs) != 1 {
			return nil, st, fmt.Sprintf("attention probabilities %q have %d consumers; want one product with V", p, len(cs))
		}
		return nil, st, fmt.Sprintf("probabilities feed %s %s, not a MatMul with V", cs[0].GetOpType(), nodeName(cs[0]))
	}
	return nil, st, "too many nodes between Softmax and the product with V"
}

// einsumQK reads an Einsum that gives [B,H,S_q,S_k] scores.
func (mt *matcher) einsumQK(n *onnxpb.NodeProto, st state) (*coreMatch, string) {
	a, b, out, ok := graphfacts.EinsumEq(n)
	if !ok || len(out) != 4 || len(a) != 4 || len(b) != 4 {
		return nil, fmt.Sprintf("Einsum %s equation %q is not a rank-4 two-operand product", nodeName(n), onnx.AttrString(n, "equation", ""))
	}
	// Scores layout [B,H,S_q,S_k]: the query index is out[2], the key index
	// out[3]; the contracted index is in both operands and not in out.
	bi, hi, qi, ki := out[0], out[1], out[2], out[3]
	var d rune = -1
	for _, r := range a {
		if strings.ContainsRune(b, r) && !strings.ContainsRune(out, r) {
			d = r
		}
	}
	if d < 0 {
		return nil, fmt.Sprintf("Einsum %s contracts no index", nodeName(n))
	}
	qv, kv, ql, kl := inp(n, 0), inp(n, 1), a, b
	swapped := false
	if strings.ContainsRune(a, rune(ki)) && strings.ContainsRune(b, rune(qi)) {
		qv, kv, ql, kl = kv, qv, kl, ql
		swapped = true
	}
	qp, ok1 := permFor(ql, string([]byte{bi, hi, qi})+string(d))
	kp, ok2 := permFor(kl, string([]byte{bi, hi, ki})+string(d))
	if !ok1 || !ok2 {
		return nil, fmt.Sprintf("Einsum %s equation %q does not give [B,H,S,S] scores from Q and K", nodeName(n), onnx.AttrString(n, "equation", ""))
	}
	c := &coreMatch{qk: n, scale: st.scale}
	q, sq, qn := mt.stripScale(qv)
	k, sk, kn := mt.stripScale(kv)
	c.q, c.k, c.scale = q, k, c.scale*sq*sk
	c.qPerm, c.kPerm = nilIfIdentity(qp), nilIfIdentity(kp)
	c.nodes = append(append(st.with(n).nodes, qn...), kn...)
	c.biases = append([]biasTerm(nil), st.biases...)
	c.form = append([]string{"einsum"}, st.form...)
	if swapped {
		c.form = append(c.form, "swapped-qk")
	}
	return c, ""
}

// headSplit is a layout a rank-4 Reshape splits the heads into (its axes
// named by B, H, S, D), with when it applies, judged from the value
// reshaped; the first row that applies is the split's layout.
type headSplit struct {
	name    string
	layout  string
	form    string // added to Block.Form ("" adds none)
	applies func(mt *matcher, reshape *onnxpb.NodeProto) bool
}

var headSplits = []headSplit{
	// Channels-first [B,C,S] from a pointwise Conv projection
	// (SqueezeBERT): C split into heads, [B,H,D,S]; Q and V are then
	// transposed by [0,1,3,2] and K is used as it is (already Kᵀ).
	{"[B,H,D,S] (channels-first)", "BHDS", "channels-first", func(mt *matcher, n *onnxpb.NodeProto) bool {
		return mt.ChannelsFirst(inp(n, 0))
	}},
	// Token-major [B,S,H·D]: [B,S,H,D].
	{"[B,S,H,D]", "BSHD", "", func(*matcher, *onnxpb.NodeProto) bool { return true }},
}

// headSplitOf returns the layout of the head split reshape n.
func (mt *matcher) headSplitOf(n *onnxpb.NodeProto) headSplit {
	for _, hs := range headSplits {
		if hs.applies(mt, n) {
			return hs
		}
	}
	return headSplits[len(headSplits)-1]
}

// coreCheck checks a whole matched core, in table order, filling the
// block it builds. A check that fails returns why: the candidate is then
// no core (the tracer keeps the reason). A check may instead refuse the
// block (Convertible false with a Reason): it is found, not converted; a
// later refusal's reason replaces an earlier one.
type coreCheck struct {
	name  string
	check func(mt *matcher, c *coreMatch, b *Block) string
}

var coreChecks = []coreCheck{
	{"self-contained", checkContained},
	{"layouts", checkLayouts},
	{"folded-heads", checkFolded},
	{"scale", checkScale},
	{"projections", findProjections},
	{"heads", checkHeads},
	{"bias", checkBias},
	{"self-attention", checkSelfAttention},
	{"past-state", checkPastState},
	{"one-key-bias", checkOneKeyBias},
	{"folded-output", checkFoldedOutput},
}

// finish runs the core checks and returns the block, or why the
// candidate is no core.
func (mt *matcher) finish(c *coreMatch) (*Block, string) {
	b := &Block{core: c, Q: c.q, K: c.k, V: c.v, Output: c.av.Output[0], Bias: BiasNone, Convertible: true}
	for _, ck := range coreChecks {
		if why := ck.check(mt, c, b); why != "" {
			return nil, why
		}
	}
	b.Form = "unfused:" + strings.Join(dedup(c.form), "+")
	return b, ""
}

// checkContained: every value inside the core stays inside it (a rewrite
// removes them), except for its shape.
func checkContained(mt *matcher, c *coreMatch, b *Block) string {
	inside := map[*onnxpb.NodeProto]bool{c.av: true}
	for _, n := range c.nodes {
		inside[n] = true
	}
	for _, n := range c.nodes {
		for _, o := range n.Output {
			if o == "" {
				continue
			}
			if mt.Ix.GraphOutputs[o] {
				return fmt.Sprintf("internal value %q of the core is a graph output; a rewrite would change it", o)
			}
			for _, u := range mt.Ix.Consumers[o] {
				if !inside[u] && (u.GetOpType() == "Shape" || u.GetOpType() == "Size") {
					// Only the shape escapes; it is unchanged by a rewrite
					// (the producer is then kept alive for it).
					c.shapeUses = append(c.shapeUses, u)
					continue
				}
				if !inside[u] {
					return fmt.Sprintf("internal value %q of the core is also used by %s %s", o, u.GetOpType(), nodeName(u))
				}
			}
		}
	}
	seen := map[*onnxpb.NodeProto]bool{}
	for _, n := range append(c.nodes, c.av) {
		if !seen[n] {
			seen[n] = true
			b.Nodes = append(b.Nodes, nodeName(n))
		}
	}
	return ""
}

// checkLayouts: each of Q, K, V comes from its head split [B,S,H,D] by
// the transposes that make it [B,H,S,D] (K: [B,H,D,S] for MatMul).
func checkLayouts(mt *matcher, c *coreMatch, b *Block) string {
	for _, x := range []struct {
		name, v string
		perm    []int
	}{{"Q", c.q, c.qPerm}, {"K", c.k, c.kPerm}, {"V", c.v, c.vPerm}} {
		msg, perms, forms := mt.checkLayout(x.name, x.v, x.perm)
		if msg != "" {
			return msg
		}
		c.form = append(c.form, forms...)
		if x.name == "K" && len(perms) > 0 {
			c.form = append(c.form, "k-perm"+strings.Join(perms, ","))
		}
	}
	return ""
}

// formFolded names the forms of a core whose heads are folded into the
// batch; a probs form of that name also marks the walk's state folded.
const formFolded = "folded-heads"

// checkFolded: a product of rank-3 operands [B·H,S,D] (the heads folded
// into the batch, as DeBERTa's bmm, BLOOM, fairseq and torch's
// multi_head_attention_forward write it) is found; K is read from Kᵀ
// [B·H,D,S]. Its terms added to the folded scores are read by
// classifyFolded, and checkFoldedOutput decides whether it converts.
func checkFolded(mt *matcher, c *coreMatch, b *Block) string {
	if mt.singleHead(c) {
		c.single = true
		c.kPerm = []int{0, 2, 1} // Kᵀ [B,D,S] → [B,S,D]
		c.form = append(c.form, formSingleHead)
		return ""
	}
	if !c.folded {
		for _, v := range []string{c.q, c.k, c.v} {
			if len(mt.Dims(v)) == 3 {
				c.folded = true
			}
		}
	}
	if !c.folded {
		return ""
	}
	for _, v := range []string{c.q, c.k, c.v} {
		if d := mt.Dims(v); d != nil && len(d) != 3 {
			return fmt.Sprintf("the scores are [B·H,S,S] but %q has rank %d, not a [B·H,S,D] operand", v, len(d))
		}
	}
	c.form = append(c.form, formFolded)
	if c.qk.GetOpType() == "MatMul" {
		c.kPerm = []int{0, 2, 1} // Kᵀ [B·H,D,S] → [B·H,S,D]
	}
	return ""
}

// reasonFolded refuses a folded core whose output is not unfolded.
const reasonFolded = "heads folded into the batch ([B·H,S,D] operands of a batched MatMul) and the output [B·H,S,Dv] not unfolded by a reshape to [B,H,S,Dv] or a transpose to [S,B·H,Dv] that a reshape reads: the linear-attention ops take and give [B,H,S,D]"

// checkFoldedOutput: a convertible core whose heads are folded into the
// batch is rewritten as the op over the unfolded operands (liftRanks
// views [B·H,S,D] as [B,H,S,D]); its output [B,H,S,Dv] replaces the node
// that unfolds the product's [B·H,S,Dv] (unfoldedOutput), which joins
// the core. A core whose output is not unfolded so is refused.
func checkFoldedOutput(mt *matcher, c *coreMatch, b *Block) string {
	if !c.folded || !b.Convertible {
		return ""
	}
	ext, perm := mt.unfoldedOutput(c, b)
	if ext == nil {
		b.Convertible, b.Reason = false, reasonFolded
		return ""
	}
	c.nodes = append(c.nodes, c.av)
	c.av, c.outPerm = ext, perm
	b.Output = ext.Output[0]
	b.Nodes = append(b.Nodes, nodeName(ext))
	return ""
}

// unfoldedOutput returns the one consumer of a folded core's product
// [B·H,Sq,Dv] that unfolds it, and the perm that takes the op's
// [B,H,Sq,Dv] to that consumer's output: a Reshape to [B,H,Sq,Dv]
// (DeBERTa's, BLOOM's context.view(B,H,S,D)), nil perm; or the Transpose
// [1,0,2] to [Sq,B·H,Dv] of torch's multi_head_attention_forward and
// fairseq, read only by Reshapes (which see the same elements in
// [Sq,B,H,Dv]), perm [2,0,1,3]. nil when there is none.
func (mt *matcher) unfoldedOutput(c *coreMatch, b *Block) (*onnxpb.NodeProto, []int) {
	o := c.av.Output[0]
	cs := mt.Ix.Consumers[o]
	if mt.Ix.GraphOutputs[o] || len(cs) != 1 || !defaultDomain(cs[0]) || len(cs[0].Output) != 1 || mt.Ix.GraphOutputs[cs[0].Output[0]] {
		return nil, nil
	}
	n := cs[0]
	switch n.GetOpType() {
	case "Reshape":
		s, d := mt.ShapeValue(inp(n, 1)), mt.Dims(n.Output[0])
		if len(s) == 4 && len(d) == 4 && d[1] == int64(b.Heads) && (d[3] < 0 || d[3] == mt.valueWidth(c)) {
			return n, nil
		}
	case "Transpose":
		p := onnx.AttrInts(n, "perm")
		if len(p) != 3 || p[0] != 1 || p[1] != 0 || p[2] != 2 {
			return nil, nil
		}
		users := mt.Ix.Consumers[n.Output[0]]
		if len(users) == 0 {
			return nil, nil
		}
		for _, u := range users {
			if u.GetOpType() != "Reshape" || !defaultDomain(u) || inp(u, 0) != n.Output[0] {
				return nil, nil
			}
			s := mt.ShapeValue(inp(u, 1))
			if s == nil || slices.Contains(s, 0) {
				return nil, nil // a 0 would copy an axis of the rank-4 value
			}
		}
		return n, []int{2, 0, 1, 3}
	}
	return nil, nil
}

// valueWidth is V's head size of a folded core ([B·H,S,Dv]), −1 unknown.
func (mt *matcher) valueWidth(c *coreMatch) int64 {
	if d := mt.Dims(c.v); len(d) == 3 && d[2] > 0 {
		return d[2]
	}
	return -1
}

// checkScale: the score scale is every factor on the path, including one
// applied to Q (or K) before the head split or rotary embeddings
// (q_proj(x)·scaling), and is a finite nonzero number.
func checkScale(mt *matcher, c *coreMatch, b *Block) string {
	c.qPre, c.kPre = mt.PreScale(c.q), mt.PreScale(c.k)
	switch {
	case c.qPre != 1 && c.kPre != 1:
		c.form = append(c.form, "prescaled-qk")
	case c.qPre != 1:
		c.form = append(c.form, "prescaled-q")
	case c.kPre != 1:
		c.form = append(c.form, "prescaled-k")
	}
	c.scale *= c.qPre * c.kPre
	if math.IsNaN(c.scale) || math.IsInf(c.scale, 0) || c.qPre == 0 || c.kPre == 0 {
		return "the score scale is not a finite nonzero number"
	}
	b.Scale = c.scale
	return ""
}

// findProjections records what the block reads: the projections of Q, K
// and V, and its output after the head merge.
func findProjections(mt *matcher, c *coreMatch, b *Block) string {
	for _, x := range []struct {
		v   string
		dst **Projection
	}{{c.q, &b.QProj}, {c.k, &b.KProj}, {c.v, &b.VProj}} {
		if p, ok := mt.ProjectionOf(x.v); ok {
			*x.dst = &p
		}
	}
	b.Merged = mt.Merged(c.av.Output[0])
	return ""
}

// checkHeads: the number of heads and the head size, from the shapes of Q
// and K (graph layout → [B,H,S,D]) and the projection width H·D.
func checkHeads(mt *matcher, c *coreMatch, b *Block) string {
	if c.single {
		return singleHeadDims(mt, c, b)
	}
	qd := mt.Dims(c.q)
	if c.qPerm != nil && qd != nil {
		qd = graphfacts.Permute(qd, c.qPerm)
	}
	kd := mt.Dims(c.k)
	if c.kPerm != nil && kd != nil {
		kd = graphfacts.Permute(kd, c.kPerm)
	}
	h, d := int64(-1), int64(-1)
	if len(qd) == 4 {
		h, d = qd[1], qd[3]
	}
	if c.folded {
		h, d = mt.foldedHeads(c, h, d)
	}
	if len(kd) == 4 {
		if h <= 0 {
			h = kd[1]
		}
		if d <= 0 {
			d = kd[3]
		}
	}
	hidden := mt.ProjWidth(c.q)
	if hidden <= 0 {
		hidden = mt.ProjWidth(c.k)
	}
	if h > 0 && d <= 0 && hidden > 0 && hidden%h == 0 {
		d = hidden / h
	}
	if d > 0 && h <= 0 && hidden > 0 && hidden%d == 0 {
		h = hidden / d
	}
	if h <= 0 && b.Merged != c.av.Output[0] {
		h = mt.mergedHeads(c, b)
	}
	b.Heads, b.HeadDim = int(h), int(d)
	if h > 0 && d > 0 && hidden > 0 && h*d != hidden {
		return fmt.Sprintf("heads·head_dim = %d·%d ≠ projection width %d", h, d, hidden)
	}
	if h <= 0 || d <= 0 {
		b.Convertible = false
		b.Reason = "number of heads or head size not known from constants or shapes"
	}
	return ""
}

// foldedHeads reads the heads h and head size d of a core whose heads are
// folded into the batch, [B·H,S,D] (those already known kept): the head
// size is Q's (or V's) last axis, and the head split [B,S,H,D] the folded
// operand was viewed from, or the view that folds it, gives the heads.
func (mt *matcher) foldedHeads(c *coreMatch, h, d int64) (int64, int64) {
	for _, v := range []string{c.q, c.v} {
		if x := mt.Dims(v); len(x) == 3 && x[2] > 0 && d <= 0 {
			d = x[2]
		}
	}
	if sd := mt.splitDims(c.q); len(sd) == 4 {
		if sd[2] > 0 {
			h = sd[2]
		}
		if d <= 0 && sd[3] > 0 {
			d = sd[3]
		}
	}
	if h <= 0 {
		h = mt.foldedHeadCount(c.q)
	}
	return h, d
}

// mergedHeads reads the heads of a head split that leaves their count to
// the reshape (ModernBERT's packed qkv.view(B, S, 3, -1, D)): the merged
// output [B,S,H·Dv] (or the rows of the weight that reads it) over V's
// head size Dv; −1 if unknown.
func (mt *matcher) mergedHeads(c *coreMatch, b *Block) int64 {
	vd := mt.Dims(c.v)
	if c.vPerm != nil && vd != nil {
		vd = graphfacts.Permute(vd, c.vPerm)
	}
	width := int64(-1)
	if md := mt.Dims(b.Merged); len(md) == 3 {
		width = md[2]
	}
	if width <= 0 {
		// merged·Wo contracts the merged width with Wo's rows.
		width = mt.InputWidth(b.Merged)
	}
	if len(vd) == 4 && width > 0 && vd[3] > 0 && width%vd[3] == 0 {
		return width / vd[3]
	}
	return -1
}

// splitDims returns the dims of the token-major head split [B,S,H,D]
// behind v (a rank-4 Reshape reached back through Transposes, Reshapes
// and scalar factors), or nil.
func (mt *matcher) splitDims(v string) []int64 {
	for i := 0; i < 8; i++ {
		n := mt.Ix.Producer[v]
		if n == nil || !defaultDomain(n) {
			return nil
		}
		switch n.GetOpType() {
		case "Reshape":
			if d := mt.Dims(n.Output[0]); len(d) == 4 && mt.headSplitOf(n).layout == "BSHD" {
				return d
			}
		case "Transpose", "Identity":
		case "Mul", "Div":
			if _, ok := mt.Scalar(inp(n, 1)); !ok {
				return nil
			}
		default:
			return nil
		}
		v = inp(n, 0)
	}
	return nil
}

// foldedHeadCount reads H from the view that folds the heads into the
// batch (torch's multi_head_attention_forward: q.view(S, B·H, D)): the
// rank-3 Reshape behind v with a shape entry B·H written Mul(size, H)
// for a constant H. −1 if none.
func (mt *matcher) foldedHeadCount(v string) int64 {
	for i := 0; i < 8; i++ {
		n := mt.Ix.Producer[v]
		if n == nil || !defaultDomain(n) {
			return -1
		}
		switch n.GetOpType() {
		case "Reshape":
			shape := mt.Ix.Producer[inp(n, 1)]
			if shape == nil || shape.GetOpType() != "Concat" || len(shape.Input) != 3 {
				return -1
			}
			for _, piece := range shape.Input {
				m := mt.Ix.Producer[piece]
				for m != nil && (m.GetOpType() == "Unsqueeze" || m.GetOpType() == "Cast") {
					m = mt.Ix.Producer[inp(m, 0)]
				}
				if m == nil || m.GetOpType() != "Mul" {
					continue
				}
				for j := 0; j < 2; j++ {
					if c, ok := mt.Scalar(inp(m, j)); ok && c >= 1 && c == math.Trunc(c) {
						if _, dyn := mt.Scalar(inp(m, 1-j)); !dyn {
							return int64(c)
						}
					}
				}
			}
			return -1
		case "Transpose", "Identity":
		case "Mul", "Div":
			if _, ok := mt.Scalar(inp(n, 1)); !ok {
				return -1
			}
		default:
			return -1
		}
		v = inp(n, 0)
	}
	return -1
}

// checkBias classifies every bias term (see biasForms); a causal or
// per-query-key bias, or a Where that does not mask, refuses the block.
func checkBias(mt *matcher, c *coreMatch, b *Block) string {
	for i := range c.biases {
		bt := &c.biases[i]
		// A mask quantized and dequantized (quantize_static's QDQ pair)
		// is read, and rebuilt by the rewrite, as the float mask.
		bt.value = mt.FloatSource(bt.value)
		switch {
		case c.single:
			bt.kind, bt.keyValue = mt.classifySingle(bt)
		case c.folded && c.foldedTerm(bt):
			bt.kind, bt.keyValue = mt.classifyFolded(bt)
		default:
			bt.kind, bt.keyValue = mt.classifyBias(bt)
		}
		if bt.kind == BiasPerKey && bt.keyRank == 3 && !c.single {
			c.form = append(c.form, "rank3-mask")
		}
		if bt.kind == BiasPerKey && bt.keyRank == 0 && !queryFree(mt.Units(bt.keyValue)) {
			bt.sliceKey = true
		}
		switch {
		case bt.kind == BiasCausal:
			b.Bias, b.Causal = BiasCausal, true
		case bt.kind == BiasPerQueryKey && b.Bias != BiasCausal:
			b.Bias = BiasPerQueryKey
		case bt.kind == BiasPerKey && b.Bias == BiasNone:
			b.Bias = BiasPerKey
			b.BiasValue, b.BiasFactor = bt.value, bt.factor
		}
		if bt.where && bt.kind == BiasPerKey && bt.maskedFill() > maskThreshold {
			b.Convertible = false
			b.Reason = fmt.Sprintf("Where %s fills masked scores with %g, not a large negative value; it is not an additive mask", nodeName(bt.node), bt.fill)
		}
		if !bt.where && bt.kind == BiasPerKey && bt.factor < 0 {
			// scores − m (sub-bias): the rewrite builds an added key bias
			// from m itself, and decides padding by m ≤ −1e4.
			b.Convertible = false
			b.Reason = fmt.Sprintf("per-key mask subtracted from the scores by %s %s: the ops take a key bias that is added, and the rewrite does not negate it", bt.node.GetOpType(), nodeName(bt.node))
		}
	}
	if (b.Bias == BiasPerQueryKey || b.Bias == BiasCausal) && b.Convertible {
		mt.readWindow(c, b)
		if b.Window != nil {
			return ""
		}
	}
	switch b.Bias {
	case BiasCausal:
		b.causalOnly = b.Convertible // the causal Performer may take it (causal.go)
		b.Convertible = false
		b.Reason = reasonCausalMask
		for _, bt := range c.biases {
			if bt.kind == BiasPerQueryKey {
				// A causal mask and a bias by query and key position
				// (ALiBi): the causal Performer cannot take it either.
				b.causalOnly = false
				b.Reason = reasonCausalMask + "; also " + mt.queryKeyReason(c) + "bias depends on query and key position; only a per-key bias [B,1,1,S] is exact under linear attention"
				break
			}
		}
	case BiasPerQueryKey:
		b.Convertible = false
		b.Reason = "bias depends on query and key position; only a per-key bias [B,1,1,S] is exact under linear attention"
		b.Reason = mt.queryKeyReason(c) + b.Reason
	}
	return ""
}

// poolingOps mix positions along the sequence: queries or keys computed
// through one are fewer than the tokens (pooled queries, landmarks).
var poolingOps = map[string]bool{"ReduceMean": true, "AveragePool": true, "MaxPool": true, "ReduceMax": true, "ReduceSum": true}

// checkSelfAttention: queries and keys must be the tokens' own, or the
// queries another sequence's tokens. Queries or keys pooled along the
// sequence (Funnel's pooled queries, Nyströmformer's landmark means) are
// no tokens: that refuses the block (an earlier refusal keeps its reason,
// this one is added). Queries projected from another value than the keys
// are cross-attention (T5's EncDecAttention, a decoder reading its
// encoder): the block is marked Cross, which Performer and Linformer
// convert and the self-attention ops refuse (SelfAttentionOnly).
func checkSelfAttention(mt *matcher, c *coreMatch, b *Block) string {
	why := ""
	for _, x := range []struct{ role, v string }{{"queries", c.q}, {"keys", c.k}} {
		if n := mt.pooledFrom(x.v); n != nil {
			why = fmt.Sprintf("not self-attention: the %s are pooled along the sequence by %s %s (pooled queries or landmarks), so the query and key lengths differ", x.role, n.GetOpType(), nodeName(n))
			break
		}
	}
	if why == "" && b.QProj != nil && b.KProj != nil && mt.layoutSource(b.QProj.Input) != mt.layoutSource(b.KProj.Input) {
		b.Cross = true
		c.form = append(c.form, "cross-attention")
	}
	if why == "" {
		return ""
	}
	if !b.Convertible && b.Reason != "" {
		b.Reason += "; also " + why
	} else {
		b.Convertible, b.Reason = false, why
	}
	return ""
}

// layoutSource follows v back through the ops that only lay its values
// out (Reshape, Transpose, Identity, Squeeze, Unsqueeze, float Casts,
// quantizers) to
// the value they come from: tf2onnx reshapes the hidden states once per
// projection, which is still one sequence.
func (mt *matcher) layoutSource(v string) string {
	for i := 0; i < 8; i++ {
		v = mt.FloatSource(v) // quantized and dequantized: the same values
		n := mt.Ix.Producer[v]
		if n == nil || !defaultDomain(n) {
			return v
		}
		switch op := n.GetOpType(); {
		case op == "Reshape" || op == "Transpose" || op == "Identity" || op == "Squeeze" || op == "Unsqueeze" || graphfacts.FloatCast(n):
			v = inp(n, 0)
		default:
			return v
		}
	}
	return v
}

// pooledFrom returns the pooling node v is computed through: on the way
// back from v to its projection (head split, factors, a constant bias,
// rotary embeddings), or, past a projection, through the selections
// (Slice, Squeeze, Concat, ...) that lead from the projection's input to
// a pooling op. nil if none.
func (mt *matcher) pooledFrom(v string) *onnxpb.NodeProto {
	projected := false
	for i := 0; i < graphfacts.MaxDepth; i++ {
		n := mt.Ix.Producer[v]
		if n == nil || !defaultDomain(n) {
			return nil
		}
		op := n.GetOpType()
		switch {
		case poolingOps[op]:
			return n
		case selectsFrom(n):
			v = inp(n, 0)
			continue
		case op == "Concat":
			return mt.pooledInConcat(n)
		case projected:
			return nil // past the projection only selections are followed
		}
		next, projection := mt.towardProjection(n)
		if next == "" {
			return nil
		}
		v, projected = next, projection
	}
	return nil
}

// selectsFrom reports whether n passes on, or selects part of, its first
// input: a layout op, a float Cast, Slice or Gather.
func selectsFrom(n *onnxpb.NodeProto) bool {
	switch n.GetOpType() {
	case "Transpose", "Reshape", "Identity", "Squeeze", "Unsqueeze", "Slice", "Gather":
		return true
	}
	return graphfacts.FloatCast(n)
}

// pooledInConcat returns the pooling node one of the inputs of Concat n
// is computed through (Funnel keeps the [CLS] token apart: concat(cls,
// pooled)), or nil.
func (mt *matcher) pooledInConcat(n *onnxpb.NodeProto) *onnxpb.NodeProto {
	for _, in := range n.Input {
		if p := mt.Ix.Producer[in]; p != nil && (poolingOps[p.GetOpType()] || p.GetOpType() == "Squeeze" || p.GetOpType() == "Slice") {
			if q := mt.pooledFrom(in); q != nil {
				return q
			}
		}
	}
	return nil
}

// towardProjection steps back over n on the way to a projection: a
// projection by a constant weight (reported), a constant factor or bias,
// or rotary embeddings lead to the value they apply to. next is "" when
// n is none of these.
func (mt *matcher) towardProjection(n *onnxpb.NodeProto) (next string, projection bool) {
	switch op := n.GetOpType(); op {
	case "MatMul", "Gemm", "Einsum", "Conv":
		if op == "Conv" && !mt.Pointwise(n) || !mt.ConstDerived(inp(n, 1)) {
			return "", false
		}
		return inp(n, 0), true
	case "Add", "Mul", "Div":
		if x := mt.RotaryInput(n); op == "Add" && x != "" {
			return x, false
		}
		c0, c1 := mt.ConstDerived(inp(n, 0)), mt.ConstDerived(inp(n, 1))
		switch {
		case c1 && !c0:
			return inp(n, 0), false
		case c0 && !c1 && op != "Div":
			return inp(n, 1), false
		}
	}
	return "", false
}

// queryKeyBias names a kind of per-query-key bias, for the refusal: the
// first row any of the block's per-query-key terms matches prefixes the
// reason with its text.
type queryKeyBias struct {
	name   string
	match  func(mt *matcher, v string) bool
	reason string
}

var queryKeyBiases = []queryKeyBias{
	// DeBERTa: Q·(position keys)ᵀ and (position queries)·Kᵀ products,
	// gathered by relative distance (GatherElements), added to the scores.
	{"disentangled", func(mt *matcher, v string) bool {
		return mt.biasReaches(v, func(n *onnxpb.NodeProto) bool {
			if n.GetOpType() != "GatherElements" {
				return false
			}
			p := mt.Ix.Producer[inp(n, 0)]
			for p != nil && (p.GetOpType() == "Transpose" || p.GetOpType() == "Reshape") {
				p = mt.Ix.Producer[inp(p, 0)]
			}
			return p != nil && p.GetOpType() == "MatMul"
		})
	}, "disentangled attention (DeBERTa's relative-position terms c2p and p2c: content·position products gathered by relative distance i−j and added to the scores, which also depend on the query's content): "},
	// WavLM: a bucketed relative-position bias times a per-query gate,
	// sigmoid of a projection of the hidden states.
	// (The dynamo exporter folds the buckets of a fixed length into a
	// constant: the gate, a Sigmoid of non-constant values, is the mark.)
	{"gated", func(mt *matcher, v string) bool {
		return mt.biasReaches(v, func(n *onnxpb.NodeProto) bool {
			return n.GetOpType() == "Sigmoid" && !mt.ConstDerived(inp(n, 0))
		})
	}, "gated relative position bias (WavLM: a relative-position bias by distance bucket, scaled per query by a sigmoid gate of the hidden states, added to the scores): "},
	// T5, MPNet: a learned bias per relative-distance bucket, looked up
	// (Gather from a constant [buckets, heads] table) by indices built
	// from positions (Range).
	{"relative-position", func(mt *matcher, v string) bool {
		return mt.biasReaches(v, func(n *onnxpb.NodeProto) bool {
			return n.GetOpType() == "Gather" && mt.ConstDerived(inp(n, 0)) && len(mt.Dims(inp(n, 0))) == 2 &&
				mt.biasReaches(inp(n, 1), func(r *onnxpb.NodeProto) bool { return r.GetOpType() == "Range" })
		})
	}, "relative position bias (a learned bias per relative-distance bucket, looked up from query and key positions): "},
	// ALiBi (BLOOM, MPT, Falcon): per-head slopes m_h (a constant of
	// several values) times token positions (a Range, or the cumulative
	// sum of the padding mask), added to the scores: with the causal
	// mask the softmax sees −m_h·(i−j).
	{"alibi", func(mt *matcher, v string) bool {
		return mt.biasReaches(v, func(n *onnxpb.NodeProto) bool {
			if n.GetOpType() != "Mul" {
				return false
			}
			for i := 0; i < 2; i++ {
				if mt.slopes(inp(n, i)) && mt.biasReaches(inp(n, 1-i), func(p *onnxpb.NodeProto) bool {
					return p.GetOpType() == "Range" || p.GetOpType() == "CumSum"
				}) {
					return true
				}
			}
			return false
		})
	}, "ALiBi (attention with linear biases: a per-head linear distance bias −m_h·|i−j|, slopes m_h times token positions, added to the scores): "},
	// ModernBERT's local layers: a band mask |i−j| ≤ w.
	{"sliding-window", (*matcher).slidingWindow,
		"sliding-window (local) attention: each query sees only the keys within a band |i−j| ≤ w of it; "},
}

// slopes reports whether v is a constant of several distinct positive
// values (ALiBi's per-head slopes, 2^(−8h/H)).
func (mt *matcher) slopes(v string) bool {
	t, ok := constant(mt.Ix, v)
	if !ok || t.Len() < 2 || t.Len() > 1024 {
		return false
	}
	vals, err := t.AsFloat64s()
	if err != nil {
		return false
	}
	distinct := map[float64]bool{}
	for _, x := range vals {
		if !(x > 0) || math.IsInf(x, 0) {
			return false
		}
		distinct[x] = true
	}
	return len(distinct) > 1
}

// queryKeyReason returns the text of the first queryKeyBiases row a
// per-query-key term of c matches, or "".
func (mt *matcher) queryKeyReason(c *coreMatch) string {
	for _, row := range queryKeyBiases {
		for _, bt := range c.biases {
			if bt.kind == BiasPerQueryKey && row.match(mt, bt.value) {
				return row.reason
			}
		}
	}
	return ""
}

// biasReaches reports whether a node satisfying is computes part of v:
// a bounded walk back over the producers of v (not into Shape or Size,
// which say nothing of the values).
func (mt *matcher) biasReaches(v string, is func(*onnxpb.NodeProto) bool) bool {
	return mt.walkBack(v, 256, func(_ string, n *onnxpb.NodeProto) (bool, bool) {
		if n == nil || !defaultDomain(n) {
			return false, false
		}
		return is(n), true
	})
}

// checkPastState: keys or values concatenated with a graph input (past
// key/value state of incremental decoding) refuse the block.
func checkPastState(mt *matcher, c *coreMatch, b *Block) string {
	if mt.pastState(c.k) || mt.pastState(c.v) {
		b.Convertible = false
		b.Reason = "keys/values are concatenated with past state (incremental decoding)"
		if b.Causal {
			b.Reason = "causal with past key/value state (incremental decoding): a bidirectional op cannot replace it"
		}
	}
	return ""
}

// checkOneKeyBias: the ops take one per-key bias.
func checkOneKeyBias(mt *matcher, c *coreMatch, b *Block) string {
	n := 0
	for _, bt := range c.biases {
		if bt.kind == BiasPerKey {
			n++
		}
	}
	if b.Convertible && n > 1 {
		b.Convertible = false
		b.Reason = "more than one per-key bias term"
	}
	return ""
}

// biasForm reads one term added to (or masking) the scores: the kind of
// bias it is and, for a per-key one, the value of shape [B,1,1,S] (or one
// constant along heads and queries) the op's key bias is built from. ok
// false means the form does not apply; a term no form reads depends on
// query and key position.
type biasForm struct {
	name  string
	where bool // reads Where-mask conditions (true) or additive biases
	read  func(mt *matcher, bt *biasTerm) (kind BiasKind, key string, ok bool)
}

var biasForms = []biasForm{
	// A triangular mask (Trilu, a triangular constant, Range indices
	// compared): causal, for either kind of term.
	{"causal", false, readCausal},
	{"causal", true, readCausal},
	// DistilBERT: Where(Expand(Reshape(mask == 0)), min, scores): the
	// Expand's input holds the per-key condition.
	// XLM (TorchScript) casts the expanded condition to bool:
	// Where(Cast(Expand(Reshape(mask == 0))), min, scores).
	{"expanded-condition", true, func(mt *matcher, bt *biasTerm) (BiasKind, string, bool) {
		if x := mt.unexpanded(bt.value, true); x != "" && mt.isPerKey(x) {
			return BiasPerKey, x, true
		}
		return "", "", false
	}},
	{"per-key-condition", true, func(mt *matcher, bt *biasTerm) (BiasKind, string, bool) {
		if mt.isPerKey(bt.value) {
			return BiasPerKey, bt.value, true
		}
		return "", "", false
	}},
	// A per-key bias expanded to the score shape (bias.expand_as(scores),
	// Expand to [B,H,S,S]): the unexpanded value is the key bias, so the
	// rewrite does not keep the scores alive for their shape.
	{"expanded-per-key", false, func(mt *matcher, bt *biasTerm) (BiasKind, string, bool) {
		if x := mt.unexpanded(bt.value, false); x != "" && mt.isPerKey(x) {
			return BiasPerKey, x, true
		}
		return "", "", false
	}},
	// (1 − m)·c from a [B,S] mask, or any value constant along heads and
	// queries.
	{"per-key", false, func(mt *matcher, bt *biasTerm) (BiasKind, string, bool) {
		if mt.isPerKey(bt.value) {
			return BiasPerKey, bt.value, true
		}
		return "", "", false
	}},
	// A rank-3 mask [B,1,S] (mask.unsqueeze(1): one unit axis missing),
	// directly or expanded to [B,1,S,S], for either kind of term. From
	// the right its batch axis meets the scores' heads, so the graph runs
	// as written at batch 1 (a TorchScript export traced there), where it
	// is per key; the rewrite lifts it to [B,1,1,S].
	{"rank3-per-key", false, readRank3PerKey},
	{"rank3-per-key", true, readRank3PerKey},
	// HF transformers ≥ 4.48: bias = Where(Expand(mask[B,1,1,S]), 0, min):
	// the values are per key, broadcast over queries; the rewrite rebuilds
	// the Where on the unexpanded condition.
	{"where-of-constants", false, func(mt *matcher, bt *biasTerm) (BiasKind, string, bool) {
		n := mt.Ix.Producer[bt.value]
		if n == nil || n.GetOpType() != "Where" || !defaultDomain(n) {
			return "", "", false
		}
		c := inp(n, 0)
		if e := mt.Ix.Producer[c]; e != nil && e.GetOpType() == "Expand" {
			c = inp(e, 0)
		}
		_, okA := mt.Scalar(inp(n, 1))
		_, okB := mt.Scalar(inp(n, 2))
		if okA && okB && queryFree(mt.Broadcast(c)) {
			bt.rebuildWhere = n
			return BiasPerKey, c, true
		}
		return "", "", false
	}},
}

// unexpanded returns x when v is Expand(x) (for a condition, through a
// Cast to bool of a bool x, as the rewrite rebuilds the Where on x), ""
// otherwise.
func (mt *matcher) unexpanded(v string, cond bool) string {
	n := mt.Ix.Producer[v]
	cast := false
	if cond && n != nil && n.GetOpType() == "Cast" && defaultDomain(n) && onnx.AttrInt(n, "to", 0) == int64(onnx.Bool) {
		n, cast = mt.Ix.Producer[inp(n, 0)], true
	}
	if n == nil || n.GetOpType() != "Expand" || !defaultDomain(n) {
		return ""
	}
	x := inp(n, 0)
	if cast && newElemTypes(mt.Ix).of(x) != onnx.Bool {
		return ""
	}
	return x
}

// classifyFolded reads a bias term added to scores whose heads are folded
// into the batch, [B·H,Sq,Sk]: a causal mask; a per-key one when it is a
// [B,1,1,S] value expanded over the heads and folded the same way
// (torch's multi_head_attention_forward: key_padding_mask.view(B,1,1,S)
// .expand(-1,H,-1,-1).reshape(B·H,1,S), scalar factors allowed, which
// the term's factor takes); anything else depends on the head, or on
// query and key position.
func (mt *matcher) classifyFolded(bt *biasTerm) (BiasKind, string) {
	if mt.causal(bt.value) {
		return BiasCausal, ""
	}
	v, f, _ := mt.stripScale(bt.value)
	for i := 0; i < 4; i++ {
		n := mt.Ix.Producer[v]
		if n == nil || !defaultDomain(n) {
			break
		}
		if op := n.GetOpType(); op == "Identity" || graphfacts.FloatCast(n) {
			v = inp(n, 0)
			continue
		}
		break
	}
	r := mt.Ix.Producer[v]
	if r == nil || r.GetOpType() != "Reshape" || !defaultDomain(r) || len(mt.ShapeValue(inp(r, 1))) != 3 {
		return BiasPerQueryKey, ""
	}
	x := mt.unexpanded(inp(r, 0), false)
	if x == "" || !mt.isPerKey(x) {
		return BiasPerQueryKey, ""
	}
	// The reshape folds the batch and head axes of [B,H,q,S] together:
	// its query axis is the value's.
	d, out := mt.Dims(inp(r, 0)), mt.Dims(r.Output[0])
	if len(d) != 4 || len(out) != 3 || !(out[1] == 1 || d[2] > 0 && out[1] == d[2]) {
		return BiasPerQueryKey, ""
	}
	bt.factor *= f
	return BiasPerKey, x
}

func readRank3PerKey(mt *matcher, bt *biasTerm) (BiasKind, string, bool) {
	v := bt.value
	if n := mt.Ix.Producer[v]; n != nil && n.GetOpType() == "Expand" && defaultDomain(n) {
		v = inp(n, 0)
	}
	if u, bc := mt.Units(v), mt.Broadcast(v); len(u) == 3 && len(bc) == 3 && queryFree3(u) && queryFree3(bc) {
		bt.keyRank = 3
		return BiasPerKey, v, true
	}
	return "", "", false
}

func readCausal(mt *matcher, bt *biasTerm) (BiasKind, string, bool) {
	if mt.causal(bt.value) {
		return BiasCausal, "", true
	}
	return "", "", false
}

// isPerKey reports whether v is a per-key bias or condition: [B,1,1,S] by
// construction, or constant along the head and query axes.
func (mt *matcher) isPerKey(v string) bool {
	return mt.perKey(v, 0) || queryFree(mt.Broadcast(v))
}

// classifyBias reads one bias term with the first bias form that applies.
func (mt *matcher) classifyBias(bt *biasTerm) (BiasKind, string) {
	for _, f := range biasForms {
		if f.where != bt.where {
			continue
		}
		if kind, key, ok := f.read(mt, bt); ok {
			return kind, key
		}
	}
	return BiasPerQueryKey, ""
}
