package convert

import (
	"fmt"
	"math"
	"strings"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

type matcher struct {
	ix     *onnx.Index
	opset  int64
	shapes map[string][]int64
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
	biases                       []biasTerm
	form                         []string
	shapeUses                    []*onnxpb.NodeProto
}

type state struct {
	scale  float64
	nodes  []*onnxpb.NodeProto
	biases []biasTerm
	form   []string
}

func (s state) with(n *onnxpb.NodeProto) state {
	s.nodes = append(append([]*onnxpb.NodeProto{}, s.nodes...), n)
	return s
}

func (s state) addForm(f string) state {
	s.form = append(append([]string{}, s.form...), f)
	return s
}

// matchSoftmax matches the core around a Softmax or says why it is not
// one.
func (mt *matcher) matchSoftmax(sm *onnxpb.NodeProto) (*Block, string) {
	// Axis: from opset 13 the softmax is along axis (default -1); before,
	// the input is flattened to 2-D at axis (default 1), which is the last
	// axis of a rank-4 score tensor only for axis 3 or -1.
	def := int64(-1)
	if mt.opset > 0 && mt.opset < 13 {
		def = 1
	}
	axis := onnx.AttrInt(sm, "axis", def)
	if axis != -1 && axis != 3 {
		return nil, fmt.Sprintf("Softmax axis %d (opset %d) is not the key axis of [B,H,S,S] scores", axis, mt.opset)
	}
	// Forward: probabilities → (IsNaN guard, Identity, Dropout) → ·V.
	p := sm.Output[0]
	st := state{scale: 1}.with(sm)
	av, st, reason := mt.followProbs(p, st)
	if av == nil {
		return nil, reason
	}
	// Backward: scores.
	var best string
	var found *coreMatch
	mt.scores(inp(sm, 0), st, func(c *coreMatch) bool {
		found = c
		return true
	}, &best)
	if found == nil {
		return nil, best
	}
	c := found
	c.softmax = sm
	c.av = av
	// V from the AV product.
	if err := mt.matchV(c, p); err != "" {
		return nil, err
	}
	return mt.finish(c)
}

// followProbs follows the softmax output through guards to the product
// with V.
func (mt *matcher) followProbs(p string, st state) (*onnxpb.NodeProto, state, string) {
	ix := mt.ix
	for step := 0; step < 4; step++ {
		if ix.GraphOutputs[p] {
			return nil, st, fmt.Sprintf("attention probabilities %q are a graph output", p)
		}
		cs := ix.Consumers[p]
		if len(cs) == 0 {
			return nil, st, fmt.Sprintf("attention probabilities %q are not used", p)
		}
		// Where(IsNaN(p), 0, p) guard: consumers are IsNaN and Where.
		if len(cs) == 2 {
			var isnan, where *onnxpb.NodeProto
			for _, c := range cs {
				switch c.GetOpType() {
				case "IsNaN":
					isnan = c
				case "Where":
					where = c
				}
			}
			if isnan != nil && where != nil && where.Input[0] == isnan.Output[0] && len(ix.Consumers[isnan.Output[0]]) == 1 {
				st = st.with(isnan).with(where)
				p = where.Output[0]
				continue
			}
		}
		if len(cs) != 1 {
			return nil, st, fmt.Sprintf("attention probabilities %q have %d consumers; want one product with V", p, len(cs))
		}
		c := cs[0]
		switch c.GetOpType() {
		case "Identity", "Dropout":
			if len(c.Output) > 1 && c.Output[1] != "" && len(ix.Consumers[c.Output[1]]) > 0 {
				return nil, st, "dropout mask of the probabilities is used"
			}
			st = st.with(c)
			p = c.Output[0]
			continue
		case "MatMul", "Einsum":
			if inp(c, 0) != p {
				return nil, st, fmt.Sprintf("%s %s takes the probabilities as its second operand (P·V wanted)", c.GetOpType(), nodeName(c))
			}
			return c, st, ""
		default:
			return nil, st, fmt.Sprintf("probabilities feed %s %s, not a MatMul with V", c.GetOpType(), nodeName(c))
		}
	}
	return nil, st, "too many nodes between Softmax and the product with V"
}

// scores walks the score expression backwards from v, calling done for
// each complete match; done returns true to stop. best collects the
// reason of the failure that got furthest.
func (mt *matcher) scores(v string, st state, done func(*coreMatch) bool, best *string) bool {
	ix := mt.ix
	fail := func(format string, a ...any) bool {
		msg := fmt.Sprintf(format, a...)
		if *best == "" || len(st.nodes) >= strings.Count(*best, "\x00") {
			*best = msg
		}
		return false
	}
	n := ix.Producer[v]
	if n == nil {
		return fail("scores %q are not computed in the graph (no producer)", v)
	}
	if !defaultDomain(n) {
		return fail("scores come from %s:%s %s", n.GetDomain(), n.GetOpType(), nodeName(n))
	}
	switch n.GetOpType() {
	case "Add":
		for i := 0; i < 2; i++ {
			bt := biasTerm{node: n, value: inp(n, 1-i), factor: st.scale}
			s2 := st.with(n).addForm("add-bias")
			s2.biases = append(append([]biasTerm{}, st.biases...), bt)
			if mt.scores(inp(n, i), s2, done, best) {
				return true
			}
		}
		return false
	case "Where":
		if len(n.Input) != 3 {
			return fail("malformed Where %s", nodeName(n))
		}
		for i := 1; i <= 2; i++ {
			other := inp(n, 3-i)
			fill, ok := scalarOf(ix, other)
			if !ok {
				continue
			}
			bt := biasTerm{node: n, value: inp(n, 0), factor: 1, where: true, fill: fill, scoresOnTrue: i == 1}
			s2 := st.with(n).addForm("where-mask")
			s2.biases = append(append([]biasTerm{}, st.biases...), bt)
			if mt.scores(inp(n, i), s2, done, best) {
				return true
			}
		}
		return fail("Where %s selects between two non-constant values", nodeName(n))
	case "Div":
		c, ok := scalarOf(ix, inp(n, 1))
		if !ok || c == 0 {
			return fail("Div %s divides the scores by a non-constant or zero", nodeName(n))
		}
		s2 := st.with(n).addForm("div-scale")
		s2.scale = st.scale / c
		return mt.scores(inp(n, 0), s2, done, best)
	case "Mul":
		for i := 0; i < 2; i++ {
			c, ok := scalarOf(ix, inp(n, 1-i))
			if !ok {
				continue
			}
			s2 := st.with(n).addForm("mul-scale")
			s2.scale = st.scale * c
			if mt.scores(inp(n, i), s2, done, best) {
				return true
			}
		}
		return fail("Mul %s multiplies the scores by a non-constant", nodeName(n))
	case "Identity", "Cast":
		return mt.scores(inp(n, 0), st.with(n), done, best)
	case "MatMul":
		c := &coreMatch{qk: n, scale: st.scale}
		s2 := st.with(n)
		q, sq, qn := mt.stripScale(inp(n, 0))
		k, sk, kn := mt.stripScale(inp(n, 1))
		c.q, c.k = q, k
		c.kPerm = []int{0, 1, 3, 2}
		c.scale *= sq * sk
		c.nodes = append(append(s2.nodes, qn...), kn...)
		c.biases = st.biases
		c.form = append([]string{"matmul"}, st.form...)
		if sq != 1 {
			c.form = append(c.form, "scaled-q")
		}
		if sk != 1 {
			c.form = append(c.form, "scaled-k")
		}
		return done(c)
	case "Einsum":
		return mt.einsumQK(n, st, done, fail)
	}
	return fail("scores come from %s %s, not a Q·Kᵀ product", n.GetOpType(), nodeName(n))
}

// stripScale follows Mul/Div by scalar constants back from v.
func (mt *matcher) stripScale(v string) (string, float64, []*onnxpb.NodeProto) {
	scale := 1.0
	var nodes []*onnxpb.NodeProto
	for i := 0; i < 4; i++ {
		n := mt.ix.Producer[v]
		if n == nil || !defaultDomain(n) {
			break
		}
		if n.GetOpType() == "Div" {
			if c, ok := scalarOf(mt.ix, inp(n, 1)); ok && c != 0 {
				scale /= c
				nodes = append(nodes, n)
				v = inp(n, 0)
				continue
			}
		}
		if n.GetOpType() == "Mul" {
			if c, ok := scalarOf(mt.ix, inp(n, 1)); ok {
				scale *= c
				nodes = append(nodes, n)
				v = inp(n, 0)
				continue
			}
			if c, ok := scalarOf(mt.ix, inp(n, 0)); ok {
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

// einsumEq parses "ab,cd->ef" with two operands.
func einsumEq(n *onnxpb.NodeProto) (a, b, out string, ok bool) {
	eq := strings.ReplaceAll(onnx.AttrString(n, "equation", ""), " ", "")
	lhs, rhs, found := strings.Cut(eq, "->")
	if !found || strings.Contains(eq, ".") {
		return "", "", "", false
	}
	ops := strings.Split(lhs, ",")
	if len(ops) != 2 || len(n.Input) != 2 {
		return "", "", "", false
	}
	return ops[0], ops[1], rhs, true
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

func (mt *matcher) einsumQK(n *onnxpb.NodeProto, st state, done func(*coreMatch) bool, fail func(string, ...any) bool) bool {
	a, b, out, ok := einsumEq(n)
	if !ok || len(out) != 4 || len(a) != 4 || len(b) != 4 {
		return fail("Einsum %s equation %q is not a rank-4 two-operand product", nodeName(n), onnx.AttrString(n, "equation", ""))
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
		return fail("Einsum %s contracts no index", nodeName(n))
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
		return fail("Einsum %s equation %q does not give [B,H,S,S] scores from Q and K", nodeName(n), onnx.AttrString(n, "equation", ""))
	}
	c := &coreMatch{qk: n, scale: st.scale}
	q, sq, qn := mt.stripScale(qv)
	k, sk, kn := mt.stripScale(kv)
	c.q, c.k, c.scale = q, k, c.scale*sq*sk
	c.qPerm, c.kPerm = nilIfIdentity(qp), nilIfIdentity(kp)
	s2 := st.with(n)
	c.nodes = append(append(s2.nodes, qn...), kn...)
	c.biases = st.biases
	c.form = append([]string{"einsum"}, st.form...)
	if swapped {
		c.form = append(c.form, "swapped-qk")
	}
	return done(c)
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
		a, b, out, ok := einsumEq(av)
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

// finish checks the matched core, classifies its bias and fills a Block.
func (mt *matcher) finish(c *coreMatch) (*Block, string) {
	ix := mt.ix
	// Every value inside the core must stay inside it.
	inside := map[*onnxpb.NodeProto]bool{c.av: true}
	for _, n := range c.nodes {
		inside[n] = true
	}
	for n := range inside {
		if n == c.av {
			continue
		}
		for _, o := range n.Output {
			if o == "" {
				continue
			}
			if ix.GraphOutputs[o] {
				return nil, fmt.Sprintf("internal value %q of the core is a graph output; a rewrite would change it", o)
			}
			for _, u := range ix.Consumers[o] {
				if !inside[u] && (u.GetOpType() == "Shape" || u.GetOpType() == "Size") {
					// Only the shape escapes; it is unchanged by a rewrite
					// (the producer is then kept alive for it).
					c.shapeUses = append(c.shapeUses, u)
					continue
				}
				if !inside[u] {
					return nil, fmt.Sprintf("internal value %q of the core is also used by %s %s", o, u.GetOpType(), nodeName(u))
				}
			}
		}
	}
	// Layouts: each of Q, K, V must come from its head split [B,S,H,D]
	// by the transposes that make it [B,H,S,D] (K: [B,H,D,S] for MatMul).
	for _, x := range []struct {
		name, v string
		perm    []int
	}{{"Q", c.q, c.qPerm}, {"K", c.k, c.kPerm}, {"V", c.v, c.vPerm}} {
		msg, perms := mt.checkLayout(x.name, x.v, x.perm)
		if msg != "" {
			return nil, msg
		}
		if x.name == "K" && len(perms) > 0 {
			c.form = append(c.form, "k-perm"+strings.Join(perms, ","))
		}
	}
	if math.IsNaN(c.scale) || math.IsInf(c.scale, 0) {
		return nil, "the score scale is not a finite number"
	}
	b := &Block{core: c, Scale: c.scale, Q: c.q, K: c.k, V: c.v, Output: c.av.Output[0], Bias: BiasNone, Convertible: true}
	seen := map[*onnxpb.NodeProto]bool{}
	for _, n := range append(c.nodes, c.av) {
		if !seen[n] {
			seen[n] = true
			b.Nodes = append(b.Nodes, nodeName(n))
		}
	}
	// Heads and head dim from the shapes of Q (graph layout → [B,H,S,D]).
	qd := mt.dims(c.q, 0)
	if c.qPerm != nil && qd != nil {
		qd = permute(qd, c.qPerm)
	}
	kd := mt.dims(c.k, 0)
	kp := c.kPerm
	if kp != nil && kd != nil {
		kd = permute(kd, kp)
	}
	h, d := int64(-1), int64(-1)
	if len(qd) == 4 {
		h, d = qd[1], qd[3]
	}
	if len(kd) == 4 {
		if h <= 0 {
			h = kd[1]
		}
		if d <= 0 {
			d = kd[3]
		}
	}
	// Complete from the projection width (hidden = H·D).
	hidden := mt.projWidth(c.q, 0)
	if hidden <= 0 {
		hidden = mt.projWidth(c.k, 0)
	}
	if h > 0 && d <= 0 && hidden > 0 && hidden%h == 0 {
		d = hidden / h
	}
	if d > 0 && h <= 0 && hidden > 0 && hidden%d == 0 {
		h = hidden / d
	}
	b.Heads, b.HeadDim = int(h), int(d)
	if h > 0 && d > 0 && hidden > 0 && h*d != hidden {
		return nil, fmt.Sprintf("heads·head_dim = %d·%d ≠ projection width %d", h, d, hidden)
	}
	if h <= 0 || d <= 0 {
		b.Convertible = false
		b.Reason = "number of heads or head size not known from constants or shapes"
	}
	// Bias.
	for i := range c.biases {
		bt := &c.biases[i]
		bt.kind, bt.keyValue = mt.classifyBias(bt)
		if bt.kind == BiasPerKey && !queryFree(mt.usize(bt.keyValue, 0)) {
			bt.sliceKey = true
		}
		switch {
		case bt.kind == BiasCausal:
			b.Bias, b.Causal = BiasCausal, true
		case bt.kind == BiasPerQueryKey && b.Bias != BiasCausal:
			b.Bias = BiasPerQueryKey
		case bt.kind == BiasPerKey && b.Bias == BiasNone:
			b.Bias = BiasPerKey
			b.BiasValue = bt.value
		}
		if bt.where {
			if bt.kind == BiasPerKey && bt.fill > -1e4 {
				b.Convertible = false
				b.Reason = fmt.Sprintf("Where %s fills masked scores with %g, not a large negative value; it is not an additive mask", nodeName(bt.node), bt.fill)
			}
		}
	}
	perKey := 0
	for _, bt := range c.biases {
		if bt.kind == BiasPerKey {
			perKey++
		}
	}
	switch b.Bias {
	case BiasCausal:
		b.Convertible = false
		b.Reason = "causal (triangular) mask: a bidirectional linear attention would let tokens see the future"
	case BiasPerQueryKey:
		b.Convertible = false
		b.Reason = "bias depends on query and key position; only a per-key bias [B,1,1,S] is exact under linear attention"
	}
	if mt.pastState(c.k) || mt.pastState(c.v) {
		b.Convertible = false
		b.Reason = "keys/values are concatenated with past state (incremental decoding)"
		if b.Causal {
			b.Reason = "causal with past key/value state (incremental decoding): " + "a bidirectional op cannot replace it"
		}
	}
	if b.Convertible && perKey > 1 {
		b.Convertible = false
		b.Reason = "more than one per-key bias term"
	}
	b.Form = "unfused:" + strings.Join(dedup(c.form), "+")
	return b, ""
}

// isPerm reports whether p is a permutation of 0..len(p)-1.
func isPerm(p []int64) bool {
	seen := make([]bool, len(p))
	for _, x := range p {
		if x < 0 || x >= int64(len(p)) || seen[x] {
			return false
		}
		seen[x] = true
	}
	return true
}

// checkLayout follows v back through Transposes (and scalar scales) to a
// rank-4 Reshape (the head split, [B,S,H,D]) and checks that v, taken to
// [B,H,S,D] by perm, is that split transposed by [0,2,1,3]. When no head
// split is found the layout cannot be checked and is accepted.
func (mt *matcher) checkLayout(name, v string, perm []int) (string, []string) {
	comp := []int{0, 1, 2, 3} // v axis i = current value's axis comp[i]
	var seen, compact []string
	for step := 0; step < 8; step++ {
		n := mt.ix.Producer[v]
		if n == nil || !defaultDomain(n) {
			return "", nil
		}
		switch n.GetOpType() {
		case "Transpose":
			p := onnx.AttrInts(n, "perm")
			if len(p) != 4 || !isPerm(p) {
				return "", nil
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
			if _, ok := scalarOf(mt.ix, inp(n, 1)); ok {
				v = inp(n, 0)
				continue
			}
			if _, ok := scalarOf(mt.ix, inp(n, 0)); ok && n.GetOpType() == "Mul" {
				v = inp(n, 1)
				continue
			}
			return "", nil
		case "Reshape":
			if s := mt.shapeValue(inp(n, 1), 0); len(s) != 4 {
				return "", nil
			}
			p := perm
			if p == nil {
				p = []int{0, 1, 2, 3}
			}
			want := []int{0, 2, 1, 3}
			for i := range want {
				if comp[p[i]] != want[i] {
					need := "[0 2 1 3]"
					if name == "K" && perm != nil && perm[2] == 3 && perm[3] == 2 {
						need = "[0 2 3 1] (Kᵀ)"
					}
					return fmt.Sprintf("%s is transposed by perm %s from its head split [B,S,H,D]; the attention product needs %s", name, strings.Join(seen, " then "), need), nil
				}
			}
			return "", compact
		}
		return "", nil
	}
	return "", nil
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

// permute returns d reordered by p, or nil when p is not a permutation of
// d's axes (a malformed perm attribute).
func permute(d []int64, p []int) []int64 {
	if len(d) != len(p) {
		return nil
	}
	out := make([]int64, len(p))
	seen := make([]bool, len(p))
	for i, j := range p {
		if j < 0 || j >= len(d) || seen[j] {
			return nil
		}
		seen[j] = true
		out[i] = d[j]
	}
	return out
}

// dims returns what is known of v's shape (−1 unknown), nil if not even
// the rank is known.
func (mt *matcher) dims(v string, depth int) []int64 {
	ix := mt.ix
	if depth > 8 {
		return nil
	}
	if vi, ok := ix.ValueInfo[v]; ok {
		if _, sh, ok := onnx.TensorType(vi); ok && sh != nil {
			out := make([]int64, len(sh))
			for i, d := range sh {
				out[i] = d.Value
			}
			return out
		}
	}
	if t, ok := ix.Initializers[v]; ok {
		return append([]int64{}, t.Dims...)
	}
	n := ix.Producer[v]
	if n == nil || !defaultDomain(n) {
		return nil
	}
	switch n.GetOpType() {
	case "Transpose":
		in := mt.dims(inp(n, 0), depth+1)
		p := onnx.AttrInts(n, "perm")
		if in == nil || len(p) != len(in) {
			return nil
		}
		ip := make([]int, len(p))
		for i, x := range p {
			ip[i] = int(x)
		}
		return permute(in, ip)
	case "Reshape":
		s := mt.shapeValue(inp(n, 1), depth+1)
		if s == nil {
			return nil
		}
		in := mt.dims(inp(n, 0), depth+1)
		out := make([]int64, len(s))
		for i, x := range s {
			switch {
			case x == 0 && in != nil && i < len(in):
				out[i] = in[i]
			case x <= 0:
				out[i] = -1
			default:
				out[i] = x
			}
		}
		return out
	case "Einsum":
		// A projection with a constant weight (keras/tf2onnx
		// "abc,cde->abde"): output sizes from the weight's letters.
		a, b, out, ok := einsumEq(n)
		if !ok {
			return nil
		}
		size := map[rune]int64{}
		for i, eq := range []string{a, b} {
			if t, ok := ix.Initializers[inp(n, i)]; ok && len(t.Dims) == len(eq) {
				for j, r := range eq {
					size[r] = t.Dims[j]
				}
			}
		}
		d := make([]int64, len(out))
		for i, r := range out {
			if v, ok := size[r]; ok {
				d[i] = v
			} else {
				d[i] = -1
			}
		}
		return d
	case "Mul", "Div", "Add", "Sub", "Identity", "Cast", "Dropout":
		var best []int64
		for _, in := range n.Input {
			if in == "" {
				continue
			}
			if _, isConst := constant(ix, in); isConst {
				continue
			}
			d := mt.dims(in, depth+1)
			if len(d) > len(best) {
				best = d
			}
		}
		return best
	}
	return nil
}

// shapeValue returns a shape tensor's entries (−1 where unknown): a
// constant, a Cast of one, or a Concat of single-element pieces.
func (mt *matcher) shapeValue(v string, depth int) []int64 {
	if depth > 10 {
		return nil
	}
	if s, ok := intsOf(mt.ix, v); ok {
		return s
	}
	n := mt.ix.Producer[v]
	if n == nil || !defaultDomain(n) {
		return nil
	}
	switch n.GetOpType() {
	case "Cast", "Identity":
		return mt.shapeValue(inp(n, 0), depth+1)
	case "Concat":
		var out []int64
		for _, in := range n.Input {
			if s, ok := intsOf(mt.ix, in); ok {
				out = append(out, s...)
				continue
			}
			// A dynamic piece: assume one element (Unsqueeze of a scalar).
			out = append(out, -1)
		}
		return out
	}
	return nil
}

// projWidth finds the output width of the projection feeding v: back
// through Transpose/Reshape/Add/scale to a MatMul, Gemm or Einsum with a
// constant weight.
func (mt *matcher) projWidth(v string, depth int) int64 {
	ix := mt.ix
	if depth > 10 {
		return -1
	}
	n := ix.Producer[v]
	if n == nil || !defaultDomain(n) {
		return -1
	}
	switch n.GetOpType() {
	case "Transpose", "Reshape", "Identity", "Cast":
		return mt.projWidth(inp(n, 0), depth+1)
	case "Add", "Mul", "Div":
		for _, in := range n.Input {
			if _, isConst := constant(ix, in); isConst {
				continue
			}
			if w := mt.projWidth(in, depth+1); w > 0 {
				return w
			}
		}
	case "Split":
		split := onnx.AttrInts(n, "split")
		if split == nil && len(n.Input) > 1 {
			split, _ = intsOf(ix, inp(n, 1))
		}
		for i, o := range n.Output {
			if o == v && i < len(split) {
				return split[i]
			}
		}
	case "Einsum":
		if t, ok := ix.Initializers[inp(n, 1)]; ok && len(t.Dims) == 3 {
			return t.Dims[1] * t.Dims[2]
		}
	case "MatMul", "Gemm":
		if t, ok := ix.Initializers[inp(n, 1)]; ok && len(t.Dims) == 2 {
			if n.GetOpType() == "Gemm" && onnx.AttrInt(n, "transB", 0) == 1 {
				return t.Dims[0]
			}
			return t.Dims[1]
		}
	}
	return -1
}

// pastState reports whether v is a concatenation with a graph input (past
// key/value).
func (mt *matcher) pastState(v string) bool {
	ix := mt.ix
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
	if mt.ix.GraphInputs[v] {
		return true
	}
	if depth == 0 {
		return false
	}
	n := mt.ix.Producer[v]
	if n == nil {
		return false
	}
	switch n.GetOpType() {
	case "Gather", "Transpose", "Identity", "Cast", "Squeeze", "Unsqueeze", "Split", "Slice":
		return mt.reachesInput(inp(n, 0), depth-1)
	}
	return false
}

// classifyBias decides the kind of one bias term and, for a per-key one,
// the value of shape [B,1,1,S] to build the op's key bias from.
func (mt *matcher) classifyBias(bt *biasTerm) (BiasKind, string) {
	if mt.causal(bt.value) {
		return BiasCausal, ""
	}
	v := bt.value
	if bt.where {
		// DistilBERT: Where(Expand(Reshape(mask==0)), ...): the Expand's
		// input holds the per-key condition.
		if n := mt.ix.Producer[v]; n != nil && n.GetOpType() == "Expand" {
			v = inp(n, 0)
		}
		if mt.perKey(v, 0) || queryFree(mt.bshape(v)) {
			return BiasPerKey, v
		}
		return BiasPerQueryKey, ""
	}
	if mt.perKey(v, 0) || queryFree(mt.bshape(v)) {
		return BiasPerKey, v
	}
	// HF transformers ≥ 4.48: bias = Where(Expand(mask[B,1,1,S]), 0, min):
	// the values are per key, broadcast over queries; the rewrite rebuilds
	// the Where on the unexpanded condition.
	if n := mt.ix.Producer[v]; n != nil && n.GetOpType() == "Where" && defaultDomain(n) {
		c := inp(n, 0)
		if e := mt.ix.Producer[c]; e != nil && e.GetOpType() == "Expand" {
			c = inp(e, 0)
		}
		_, okA := scalarOf(mt.ix, inp(n, 1))
		_, okB := scalarOf(mt.ix, inp(n, 2))
		if okA && okB && queryFree(mt.bshape(c)) {
			bt.rebuildWhere = n
			return BiasPerKey, c
		}
	}
	return BiasPerQueryKey, ""
}

// perKey reports whether v has shape [B,1,1,S] (by declared shape or by
// construction from a [B,S] mask).
func (mt *matcher) perKey(v string, depth int) bool {
	ix := mt.ix
	if depth > 12 {
		return false
	}
	if vi, ok := ix.ValueInfo[v]; ok {
		if _, sh, ok := onnx.TensorType(vi); ok && sh != nil {
			if len(sh) == 4 && sh[1].Value == 1 && sh[2].Value == 1 {
				return true
			}
			if len(sh) == 4 && (sh[2].Value > 1 || sh[2].Param != "") {
				return false
			}
		}
	}
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
	axes := func() []int64 {
		if a := onnx.AttrInts(n, "axes"); a != nil {
			return a
		}
		if len(n.Input) > 1 {
			a, _ := intsOf(ix, inp(n, 1))
			return a
		}
		return nil
	}
	switch n.GetOpType() {
	case "Unsqueeze":
		a := axes()
		if len(a) == 2 && a[0] == 1 && a[1] == 2 {
			return true
		}
		if len(a) == 1 && a[0] == 2 {
			if p := ix.Producer[inp(n, 0)]; p != nil && p.GetOpType() == "Unsqueeze" {
				pa := onnx.AttrInts(p, "axes")
				if pa == nil && len(p.Input) > 1 {
					pa, _ = intsOf(ix, inp(p, 1))
				}
				return len(pa) == 1 && pa[0] == 1
			}
		}
		return false
	case "Reshape":
		s := mt.shapeValue(inp(n, 1), 0)
		return len(s) == 4 && s[1] == 1 && s[2] == 1
	case "Cast", "Identity", "Neg", "Not", "Sub", "Mul", "Add", "Div", "Equal", "Less", "Greater", "Slice", "Where", "Sqrt", "Reciprocal":
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

// causal looks for the marks of a causal mask in the subgraph behind v: a
// Trilu, a Range compared with Less/Greater, or a triangular constant.
func (mt *matcher) causal(v string) bool {
	ix := mt.ix
	seen := map[string]bool{}
	queue := []string{v}
	hasRange, hasCompare := false, false
	for steps := 0; len(queue) > 0 && steps < 64; steps++ {
		x := queue[0]
		queue = queue[1:]
		if seen[x] {
			continue
		}
		seen[x] = true
		if t, ok := constant(ix, x); ok {
			if triangular(t) {
				return true
			}
			continue
		}
		n := ix.Producer[x]
		if n == nil {
			continue
		}
		switch n.GetOpType() {
		case "Trilu":
			return true
		case "Range":
			hasRange = true
		case "Less", "Greater", "LessOrEqual", "GreaterOrEqual":
			// A comparison of two index vectors (q_idx vs kv_idx); a
			// comparison with a constant (kv_idx ≥ 0) is not causal.
			if len(n.Input) == 2 && mt.fromRange(inp(n, 0), 0) && mt.fromRange(inp(n, 1), 0) {
				hasCompare = true
			}
		case "Shape", "Size":
			continue // the size of a tensor says nothing about its mask
		}
		for _, in := range onnx.NodeInputs(n) {
			queue = append(queue, in)
		}
	}
	return hasRange && hasCompare
}

// triangular reports whether t's last two dims form a square matrix with
// zeros strictly on one side of the diagonal and nonzeros on the other.
func triangular(t *onnx.Tensor) bool {
	r := len(t.Shape)
	if r < 2 || t.Shape[r-1] != t.Shape[r-2] || t.Shape[r-1] < 2 || t.Len() > 1<<22 {
		return false
	}
	vals, err := t.AsFloat64s()
	if err != nil {
		if bs := t.Bools(); bs != nil {
			vals = make([]float64, len(bs))
			for i, b := range bs {
				if b {
					vals[i] = 1
				}
			}
		} else {
			return false
		}
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
