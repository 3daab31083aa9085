package convert

import (
	"fmt"

	"github.com/linearize/linearize/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// Single-head attention. A decoder's dot-product attention (Luong style,
// a pointer network, a TTS aligner) has no head axis: Q, K and V are the
// projections' own [B,S,D] outputs, the scores [B,Sq,Sk], and a padding
// mask of the keys is [B,1,Sk] (or [Sk], [1,Sk]): per key, since it has
// size one on the query axis. Detect reads such a core as one head of
// size D (rank-3 operands that come from no head split are not heads
// folded into the batch), and the rewrite lifts Q, K, V and the key bias
// to [B,1,S,D] and [B,1,1,Sk] for the op and drops the head axis of its
// output.

const formSingleHead = "single-head"

// singleHead reports whether c's Q, K and V are rank-3 outputs of their
// projections with no reshape on the way (no head split).
func (mt *matcher) singleHead(c *coreMatch) bool {
	if c.folded || c.qk.GetOpType() != "MatMul" {
		return false
	}
	for _, v := range []string{c.q, c.k, c.v} {
		if len(mt.Dims(v)) != 3 || !mt.Unsplit(v) {
			return false
		}
	}
	return true
}

// singleHeadDims sets the heads (1) and the head size of a single-head
// core: Q's last axis, or its projection's width.
func singleHeadDims(mt *matcher, c *coreMatch, b *Block) string {
	d := int64(-1)
	if x := mt.Dims(c.q); len(x) == 3 && x[2] > 0 {
		d = x[2]
	} else if w := mt.ProjWidth(c.q); w > 0 {
		d = w
	}
	b.Heads, b.HeadDim = 1, int(d)
	if d <= 0 {
		b.Convertible = false
		b.Reason = "head size of single-head attention not known from constants or shapes"
	}
	return ""
}

// queryFree3 reports whether a bias of broadcast shape s (1 where it does
// not vary) added to [B,Sq,Sk] scores is constant along the queries: rank
// at most 3 and one on the query axis (a rank-1 bias has no query axis).
func queryFree3(s []int64) bool {
	r := len(s)
	return r >= 1 && r <= 3 && (r == 1 || s[r-2] == 1)
}

// classifySingle reads a bias term of single-head ([B,Sq,Sk]) scores: a
// causal mask, a per-key one (through an Expand to the scores' shape), or
// one that depends on query and key position.
func (mt *matcher) classifySingle(bt *biasTerm) (BiasKind, string) {
	if mt.causal(bt.value) {
		return BiasCausal, ""
	}
	v := bt.value
	if n := mt.Ix.Producer[v]; n != nil && n.GetOpType() == "Expand" && defaultDomain(n) && queryFree3(mt.Broadcast(inp(n, 0))) {
		v = inp(n, 0)
	}
	if queryFree3(mt.Broadcast(v)) && queryFree3(mt.Units(v)) {
		bt.keyRank = len(mt.Units(v))
		return BiasPerKey, v
	}
	return BiasPerQueryKey, ""
}

// liftRanks gives the op the [B,1,S,D] operands of a single-head core,
// the [B,H,S,D] operands of a core whose heads are folded into the batch
// ([B·H,S,D] viewed so; its output replaces the node that unfolds the
// product, checkFoldedOutput), and the [B,1,1,Sk] key bias of a core
// whose per-key bias has a lower rank (single-head scores, or a [B,1,S]
// mask: keyRank) (rewriteCore).
func (rw *rewriter) liftRanks(b *Block, q, k, v, bias, base string, out *[]*onnxpb.NodeProto) (string, string, string, string) {
	lift := func(x, name string, axes ...int64) string {
		n := rw.unsqueeze(x, base+"/"+name, axes...)
		*out = append(*out, n)
		return n.Output[0]
	}
	if b.core.single {
		q, k, v = lift(q, "q", 1), lift(k, "k", 1), lift(v, "v", 1)
	}
	if b.core.folded {
		// [B·H,S,D] viewed [B,H,S,D]: Reshape to (−1, H, S, D), the
		// sizes S and D read from the operand.
		heads := rw.intsConst(fmt.Sprintf("folded_heads_%d", b.Heads), -1, int64(b.Heads))
		unfold := func(x, name string) string {
			base := base + "/" + name + "_unfold"
			shp := rw.node("Shape", base, []string{x})
			sd := rw.node("Slice", base, []string{shp.Output[0], rw.intsConst("one1", 1), rw.intsConst("three1", 3), rw.intsConst("zero1", 0)})
			cat := rw.node("Concat", base, []string{heads, sd.Output[0]}, intAttr("axis", 0))
			r := rw.node("Reshape", base, []string{x, cat.Output[0]})
			*out = append(*out, shp, sd, cat, r)
			return r.Output[0]
		}
		q, k, v = unfold(q, "q"), unfold(k, "k"), unfold(v, "v")
	}
	for _, bt := range b.core.biases {
		if bt.kind != BiasPerKey {
			continue
		}
		// A rank-3 bias [B,1,Sk] gains the head axis; a shorter one is
		// broadcast from the left: its missing leading axes are ones.
		switch bt.keyRank {
		case 3:
			bias = lift(bias, "key_bias", 1)
		case 2:
			bias = lift(bias, "key_bias", 0, 1)
		case 1:
			bias = lift(bias, "key_bias", 0, 1, 2)
		}
		break
	}
	return q, k, v, bias
}

// singleHeadOutput drops the head axis of the op's output [B,1,Sq,Dv],
// writing the core's output [B,Sq,Dv].
func (rw *rewriter) singleHeadOutput(node *onnxpb.NodeProto, output, base string) *onnxpb.NodeProto {
	n := rw.squeeze(node.Output[0], base+"/out", 1)
	n.Output[0] = output
	return n
}

// unsqueeze builds Unsqueeze(x, axes) at the model's opset (axes an
// attribute before 13, an input from 13).
func (rw *rewriter) unsqueeze(x, base string, axes ...int64) *onnxpb.NodeProto {
	return rw.axesNode("Unsqueeze", x, base, axes)
}

func (rw *rewriter) squeeze(x, base string, axes ...int64) *onnxpb.NodeProto {
	return rw.axesNode("Squeeze", x, base, axes)
}

func (rw *rewriter) axesNode(op, x, base string, axes []int64) *onnxpb.NodeProto {
	if rw.opset > 0 && rw.opset < 13 {
		return rw.node(op, base, []string{x}, &onnxpb.AttributeProto{Name: proto.String("axes"), Type: onnxpb.AttributeProto_INTS.Enum(), Ints: axes})
	}
	name := "axes"
	for _, a := range axes {
		name += fmt.Sprintf("_%d", a)
	}
	return rw.node(op, base, []string{x, rw.intsConst(name, axes...)})
}
