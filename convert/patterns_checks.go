package convert

import (
	"fmt"
	"math"
	"strings"

	"github.com/linearize/linearize/internal/graphfacts"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// The checks finish runs on a matched core (coreChecks), in order: the
// core is contained, its layouts are known, its scale is read, its
// projections found, and it is self-attention.

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
