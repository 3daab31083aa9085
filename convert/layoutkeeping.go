package convert

import (
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// layoutKeeper is a node between a head split and the attention product
// that keeps the [B,H,S,D] layout of its input: the layout walk
// (checkLayout) goes on from the value it returns. form names it in
// Block.Form.
type layoutKeeper struct {
	form string
	read func(mt *matcher, n *onnxpb.NodeProto) string
}

var layoutKeepers = []layoutKeeper{
	// Rotary embeddings x·cos + rotate_half(x)·sin (Llama, Qwen, RoFormer,
	// GPT-NeoX): elementwise over [B,H,S,D].
	{"rotary", func(mt *matcher, n *onnxpb.NodeProto) string {
		if n.GetOpType() != "Add" {
			return ""
		}
		return mt.RotaryInput(n)
	}},
	// Grouped-query attention: each key/value head repeated for the query
	// heads that share it, HF's repeat_kv:
	// Reshape(Expand(Unsqueeze(x, 2), [B,Hkv,n,S,D]), [B,Hkv·n,S,D]).
	{"gqa", (*matcher).repeatedKV},
}

// layoutKeeping returns the value n keeps the layout of, and the form it
// is, or "" when n is no layout keeper.
func (mt *matcher) layoutKeeping(n *onnxpb.NodeProto) (string, string) {
	for _, k := range layoutKeepers {
		if x := k.read(mt, n); x != "" {
			return x, k.form
		}
	}
	return "", ""
}

// repeatedKV returns x when n is repeat_kv of a rank-4 x: the heads
// (axis 1) repeated n times each, by an Unsqueeze at axis 2, an Expand
// along it and a Reshape merging it into the heads; "" otherwise.
func (mt *matcher) repeatedKV(n *onnxpb.NodeProto) string {
	if n.GetOpType() != "Reshape" {
		return ""
	}
	e := mt.Ix.Producer[inp(n, 0)]
	if e == nil || e.GetOpType() != "Expand" || !defaultDomain(e) {
		return ""
	}
	u := mt.Ix.Producer[inp(e, 0)]
	if u == nil || u.GetOpType() != "Unsqueeze" || !defaultDomain(u) {
		return ""
	}
	axes := onnx.AttrInts(u, "axes")
	if axes == nil {
		axes, _ = intsOf(mt.Ix, inp(u, 1))
	}
	x := inp(u, 0)
	if len(axes) != 1 || (axes[0] != 2 && axes[0] != -3) || len(mt.Dims(x)) != 4 {
		return ""
	}
	// The Reshape merges axes 1 and 2 of [B,Hkv,n,S,D] into the heads:
	// the product Hkv·n and the head size are proved, and the head size
	// kept.
	e5, out := mt.ShapeValue(inp(e, 1)), mt.Dims(n.Output[0])
	if len(e5) != 5 || len(out) != 4 || e5[1] <= 0 || e5[2] <= 0 || e5[4] <= 0 ||
		out[1] != e5[1]*e5[2] || out[3] != e5[4] {
		return ""
	}
	if in := mt.Dims(x); in[1] > 0 && in[1] != e5[1] || in[3] > 0 && in[3] != e5[4] {
		return ""
	}
	return x
}
