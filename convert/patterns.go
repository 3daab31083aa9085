package convert

import (
	"fmt"
	"iter"
	"math"
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
// checks on a whole core are in finish (patterns_checks.go), those of its
// heads in patterns_heads.go and of its additive terms in
// patterns_bias.go. The engine's state and tracer are in match.go. A new
// exporter form is a new row.

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

// constOperands yields, for each order of the two operands of n, the
// index i of the operand that may be the scores and the constant c that
// value reads from the other one, skipping the orders where it reads none.
func constOperands(n *onnxpb.NodeProto, value func(v string) (float64, bool)) iter.Seq2[int, float64] {
	return func(yield func(int, float64) bool) {
		for i := 0; i < 2; i++ {
			if c, ok := value(inp(n, 1-i)); ok && !yield(i, c) {
				return
			}
		}
	}
}

var scoreForms = []scoreForm{
	// The same number added to every score (a mask built for inputs with
	// no padding): the softmax does not see it. A number so large that it
	// swamps the scores in float32 (|c| > maxShift: every key masked)
	// leaves the original a uniform average; that is refused.
	{"Add", "add-const", func(mt *matcher, n *onnxpb.NodeProto, st state) ([]reading, string) {
		var rs []reading
		for i, c := range constOperands(n, mt.Uniform) {
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
		for i, c := range constOperands(n, mt.Scalar) {
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
		return []reading{{inp(n, 0), st.reshaped(n, 3, 4)}}, ""
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
		return []reading{{inp(n, 0), st.reshaped(n, 4, 3)}}, ""
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
