package convert

import (
	"github.com/linearize/linearize/internal/graphfacts"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

// Inlined linear attention. onnxruntime inlines model-local functions
// when it optimizes a model (and saves it so with optimized_model_filepath
// or its transformers optimizer), as convert's own inliner does: an
// ai.linearize node becomes its function body in the main graph. The
// bodies' node names and doc strings do not survive onnxruntime's inliner
// (it names nodes "" and values "_inlfunc_<op>_..."), so the bodies are
// recognised by their structure, each by a part no softmax attention has:
//
//   - PerformerAttention, positive kernel: a Softmax (the query weights
//     over the features) multiplied by Div(Slice(X), Slice(X)) (through a
//     Mul): values and normaliser sliced from one product with [V, 1] (a
//     softmax attention's values are never divided by a slice of their own
//     product); the trig kernel's output, and the positive kernel's of
//     earlier versions: Div(Slice(X), Add(Relu(Slice(X)), ε)), numerator
//     and denominator sliced from one product with [V, 1] (a softmax
//     normalises by a sum, never a Relu);
//   - LocalPooledAttention: the output Div(x, Sum(..., c)) with a tiny
//     positive constant c (the floor of the shared softmax denominator),
//     in a graph that also assigns keys to segments by a one-hot
//     Equal(Floor(...), [0, 1, ..., k−1]);
//   - HedgehogAttention: the output Div(x, Where(Greater(d, ·), d, ·))
//     (the denominator d replaced where it is not positive), in a graph
//     that also builds features as Concat(MatMul(...), Neg(MatMul(...)))
//     (the ±(xW) of the learned feature map);
//   - LinformerAttention: a Softmax whose scores are a product with keys
//     projected along the sequence, MatMul(Slice(E), ·) with E a constant
//     [H, k, N] sliced along its last axis (onnxruntime may fuse the scale
//     and transpose into a com.microsoft FusedMatMul, which the softmax
//     matcher does not read).
//
// markInlined records every body found as linear attention (the model is
// converted already) and drops any block whose Softmax lies in one, so a
// converted model is never offered for conversion again.

// inlinedOp is one inlined linear-attention body: the op it defines and
// the node that anchors it (its output node, or its Softmax).
type inlinedOp struct {
	op     string
	anchor *onnxpb.NodeProto
}

// markInlined adds the inlined linear-attention bodies of g to d.Linear
// and removes blocks anchored inside them.
func (d *Detection) markInlined(g *onnxpb.GraphProto, ix *onnx.Index) {
	found := findInlined(g, ix)
	if len(found) == 0 {
		return
	}
	have := map[string]bool{}
	for _, l := range d.Linear {
		have[l.Node] = true
	}
	inside := map[string]bool{}
	for _, f := range found {
		name := nodeName(f.anchor)
		inside[name] = true
		if !have[name] {
			d.Linear = append(d.Linear, LinearNode{Node: name, Op: "inlined " + f.op})
			have[name] = true
		}
	}
	var keep []*Block
	for _, b := range d.Blocks {
		drop := false
		for _, n := range b.Nodes {
			drop = drop || inside[n]
		}
		if !drop {
			keep = append(keep, b)
		}
	}
	d.Blocks = keep
}

// findInlined returns the inlined linear-attention bodies of g in graph
// order.
func findInlined(g *onnxpb.GraphProto, ix *onnx.Index) []inlinedOp {
	if g == nil {
		return nil
	}
	segments := false
	for _, n := range g.Node {
		if isSegmentOneHot(ix, n) {
			segments = true
			break
		}
	}
	hedgehog := false
	for _, n := range g.Node {
		if isSignedFeatures(ix, n) {
			hedgehog = true
			break
		}
	}
	var out []inlinedOp
	for _, n := range g.Node {
		switch {
		case isPerformerOutput(ix, n), isPerformerSoftmax(ix, n):
			out = append(out, inlinedOp{ops.PerformerOp, n})
		case segments && isLocalPooledOutput(ix, n):
			out = append(out, inlinedOp{ops.LocalPooledOp, n})
		case hedgehog && isHedgehogOutput(ix, n):
			out = append(out, inlinedOp{ops.HedgehogOp, n})
		case isLinformerSoftmax(ix, n):
			out = append(out, inlinedOp{ops.LinformerOp, n})
		}
	}
	return out
}

// producer returns the default-domain node of type op that produces v,
// looking through Identity, or nil.
func producer(ix *onnx.Index, v, op string) *onnxpb.NodeProto {
	for i := 0; i < 4; i++ {
		n := ix.Producer[v]
		if n == nil || !defaultDomain(n) {
			return nil
		}
		if n.GetOpType() == op {
			return n
		}
		if n.GetOpType() != "Identity" || len(n.Input) == 0 {
			return nil
		}
		v = n.Input[0]
	}
	return nil
}

// divisor returns the node of type op (producer) that produces the divisor
// of n when n is a default-domain Div, or nil.
func divisor(ix *onnx.Index, n *onnxpb.NodeProto, op string) *onnxpb.NodeProto {
	if n.GetOpType() != "Div" || !defaultDomain(n) || len(n.Input) != 2 {
		return nil
	}
	return producer(ix, n.Input[1], op)
}

// isPerformerOutput matches Div(Slice(X), Add(Relu(Slice(X)), ε)).
func isPerformerOutput(ix *onnx.Index, n *onnxpb.NodeProto) bool {
	if n.GetOpType() != "Div" || !defaultDomain(n) || len(n.Input) != 2 {
		return false
	}
	num := producer(ix, n.Input[0], "Slice")
	add := producer(ix, n.Input[1], "Add")
	if num == nil || add == nil || len(add.Input) != 2 || len(num.Input) == 0 {
		return false
	}
	for i := 0; i < 2; i++ {
		relu := producer(ix, add.Input[i], "Relu")
		if relu == nil || len(relu.Input) == 0 {
			continue
		}
		den := producer(ix, relu.Input[0], "Slice")
		if den != nil && len(den.Input) > 0 && den.Input[0] == num.Input[0] {
			return true
		}
	}
	return false
}

// isPerformerSoftmax matches a Softmax consumed by MatMul(·, W) with W =
// Div(Slice(X), Slice(X)), or W = Mul of such a Div and anything.
func isPerformerSoftmax(ix *onnx.Index, n *onnxpb.NodeProto) bool {
	if n.GetOpType() != "Softmax" || !defaultDomain(n) || len(n.Output) == 0 {
		return false
	}
	meanOfProduct := func(v string) bool {
		div := producer(ix, v, "Div")
		if div == nil || len(div.Input) != 2 {
			return false
		}
		num, den := producer(ix, div.Input[0], "Slice"), producer(ix, div.Input[1], "Slice")
		return num != nil && den != nil && len(num.Input) > 0 && len(den.Input) > 0 && num.Input[0] == den.Input[0]
	}
	for _, c := range ix.Consumers[n.Output[0]] {
		if c.GetOpType() != "MatMul" || !defaultDomain(c) || len(c.Input) != 2 || c.Input[0] != n.Output[0] {
			continue
		}
		if meanOfProduct(c.Input[1]) {
			return true
		}
		if mul := producer(ix, c.Input[1], "Mul"); mul != nil {
			for _, in := range mul.Input {
				if meanOfProduct(in) {
					return true
				}
			}
		}
	}
	return false
}

// isLocalPooledOutput matches Div(x, Sum(..., c)) with a constant
// 0 < c ≤ 1e-20.
func isLocalPooledOutput(ix *onnx.Index, n *onnxpb.NodeProto) bool {
	sum := divisor(ix, n, "Sum")
	if sum == nil {
		return false
	}
	for _, in := range sum.Input {
		if c, ok := constFloats(ix, in); ok && len(c) == 1 && c[0] > 0 && c[0] <= 1e-20 {
			return true
		}
	}
	return false
}

// isHedgehogOutput matches Div(x, Where(Greater(d, c), d, e)).
func isHedgehogOutput(ix *onnx.Index, n *onnxpb.NodeProto) bool {
	w := divisor(ix, n, "Where")
	if w == nil || len(w.Input) != 3 {
		return false
	}
	gt := producer(ix, w.Input[0], "Greater")
	return gt != nil && len(gt.Input) == 2 && gt.Input[0] == w.Input[1]
}

// isSignedFeatures matches Concat(p, Neg(p)) with p a MatMul's output.
func isSignedFeatures(ix *onnx.Index, n *onnxpb.NodeProto) bool {
	if n.GetOpType() != "Concat" || !defaultDomain(n) || len(n.Input) != 2 {
		return false
	}
	neg := producer(ix, n.Input[1], "Neg")
	return neg != nil && len(neg.Input) == 1 && neg.Input[0] == n.Input[0] && producer(ix, n.Input[0], "MatMul") != nil
}

// isSegmentOneHot matches Equal(seg, [0, 1, ..., k−1]) (either operand
// order) with seg computed by a Floor, through Transpose, Reshape,
// Unsqueeze, Squeeze and Identity nodes.
func isSegmentOneHot(ix *onnx.Index, n *onnxpb.NodeProto) bool {
	if n.GetOpType() != "Equal" || !defaultDomain(n) || len(n.Input) != 2 {
		return false
	}
	for i := 0; i < 2; i++ {
		c, ok := constFloats(ix, n.Input[1-i])
		if !ok || len(c) == 0 {
			continue
		}
		ramp := true
		for j, v := range c {
			ramp = ramp && v == float64(j)
		}
		if ramp && fromFloor(ix, n.Input[i]) {
			return true
		}
	}
	return false
}

// fromFloor reports whether v is a Floor's output moved by shape-only
// nodes.
func fromFloor(ix *onnx.Index, v string) bool {
	for i := 0; i < 6; i++ {
		p := ix.Producer[v]
		if p == nil || !defaultDomain(p) || len(p.Input) == 0 {
			return false
		}
		switch p.GetOpType() {
		case "Floor":
			return true
		case "Transpose", "Reshape", "Unsqueeze", "Squeeze", "Identity":
			v = p.Input[0]
		default:
			return false
		}
	}
	return false
}

// isLinformerSoftmax matches a Softmax whose scores come, within a few
// products, scalings and transposes, from MatMul(Slice(E), ·): keys
// projected along the sequence by a constant [H, k, N] sliced along
// axis 2.
func isLinformerSoftmax(ix *onnx.Index, n *onnxpb.NodeProto) bool {
	if n.GetOpType() != "Softmax" || !defaultDomain(n) || len(n.Input) == 0 {
		return false
	}
	seen := map[string]bool{}
	var walk func(v string, depth int) bool
	walk = func(v string, depth int) bool {
		p := ix.Producer[v]
		if p == nil || depth > 5 || seen[v] {
			return false
		}
		seen[v] = true
		op := p.GetOpType()
		if op == "MatMul" && defaultDomain(p) && len(p.Input) == 2 && isSeqProjection(ix, p.Input[0]) {
			return true
		}
		switch {
		case defaultDomain(p) && (op == "MatMul" || op == "Mul" || op == "Div" || op == "Add" || op == "Transpose" || op == "Identity" || op == "Where"),
			p.GetDomain() == "com.microsoft" && op == "FusedMatMul":
			for _, in := range p.Input {
				if in != "" && walk(in, depth+1) {
					return true
				}
			}
		}
		return false
	}
	return walk(n.Input[0], 0)
}

// isSeqProjection reports whether v is Slice(E, ...) along axis 2 (or −1)
// of a constant rank-3 E.
func isSeqProjection(ix *onnx.Index, v string) bool {
	s := producer(ix, v, "Slice")
	if s == nil || len(s.Input) < 4 {
		return false
	}
	// Read the dimensions only: E can be hundreds of megabytes.
	var dims []int64
	if e, ok := ix.Initializers[s.Input[0]]; ok {
		dims = e.Dims
	} else if c := ix.Producer[s.Input[0]]; c != nil && c.GetOpType() == "Constant" && defaultDomain(c) {
		for _, a := range c.Attribute {
			if a.GetName() == "value" && a.T != nil {
				dims = a.T.Dims
			}
		}
	}
	if len(dims) != 3 {
		return false
	}
	axes, ok := graphfacts.Ints(ix, s.Input[3])
	return ok && len(axes) == 1 && (axes[0] == 2 || axes[0] == -1)
}

// constFloats returns the values of a small constant (initializer or
// Constant node, at most 1<<16 elements: the ones matched here are
// scalars or k segment ids) as float64s.
func constFloats(ix *onnx.Index, name string) ([]float64, bool) {
	var dims []int64
	if tp, ok := ix.Initializers[name]; ok {
		dims = tp.Dims
	} else if c := ix.Producer[name]; c != nil && c.GetOpType() == "Constant" {
		for _, a := range c.Attribute {
			if a.T != nil {
				dims = a.T.Dims
			}
		}
	}
	size := int64(1)
	for _, v := range dims {
		if v < 0 || v > 1<<16 {
			return nil, false
		}
		size *= v
		if size > 1<<16 {
			return nil, false
		}
	}
	t, ok := graphfacts.Constant(ix, name)
	if !ok {
		return nil, false
	}
	v, err := t.AsFloat64s()
	if err != nil {
		return nil, false
	}
	return v, true
}
