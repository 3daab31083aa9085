package graphfacts

import (
	"math"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// CopyOf returns the value v is a copy of: the input of v's producer
// whose values v has, element for element and axis for axis, when the
// producer's copy rule (rules.go) proves that it only passes that input
// on; "" otherwise. The rules: a Gather of one tensor of a torch.stack
// (stackCopy) and a Concat whose other inputs are empty (concatCopy).
func (f *Facts) CopyOf(v string) string { return f.copyOf(v, 0) }

func (f *Facts) copyOf(v string, depth int) string {
	if v == "" || depth > MaxDepth {
		return ""
	}
	n := f.Ix.Producer[v]
	if r := rulesOf(n).copies; r != nil {
		return r(f, n, v, depth)
	}
	return ""
}

// stackCopy is the copy rule of a Gather: x_i from
// Gather(Concat(Unsqueeze(x_0, a), …, Unsqueeze(x_k, a); axis a), i; axis a)
// with i a constant scalar index: torch.stack((x_0, …, x_k), dim=a)
// selected at i along a (NomicBERT's qkv = stack((q_rot, k_rot, v)),
// then qkv[:, :, 0]). Each input of the Concat is one slice along a, so
// index i is input i, and the Gather drops the axis the Unsqueeze added.
func (f *Facts) stackCopy(n *onnxpb.NodeProto, _ string, depth int) string {
	c := f.Ix.Producer[Input(n, 0)]
	if c == nil || c.GetOpType() != "Concat" || !DefaultDomain(c) || len(c.Input) == 0 {
		return ""
	}
	idx := Input(n, 1)
	if d := f.dims(idx, depth+1); d == nil || len(d) != 0 {
		return "" // an index of shape [1] keeps the axis: not x_i
	}
	i, ok := f.scalar(idx, depth+1)
	if !ok || i != math.Trunc(i) {
		return ""
	}
	// r is the stack's rank, needed only to count negative axes from
	// the end: an Unsqueeze's axes count in its output, which is r.
	rd := f.dims(Input(n, 0), depth+1)
	if rd == nil {
		rd = f.dims(c.Input[0], depth+1)
	}
	r := int64(len(rd))
	axis := func(a int64) int64 {
		if a < 0 {
			if r == 0 {
				return -1
			}
			a += r
		}
		return a
	}
	a := axis(onnx.AttrInt(n, "axis", 0))
	if a < 0 || axis(onnx.AttrInt(c, "axis", 0)) != a {
		return ""
	}
	for _, in := range c.Input {
		u := f.Ix.Producer[in]
		if u == nil || u.GetOpType() != "Unsqueeze" || !DefaultDomain(u) || Input(u, 0) == "" {
			return ""
		}
		if ax := axesOf(f.Ix, u); len(ax) != 1 || axis(ax[0]) != a {
			return ""
		}
	}
	k := int(i)
	if k < 0 {
		k += len(c.Input)
	}
	if k < 0 || k >= len(c.Input) {
		return ""
	}
	return Input(f.Ix.Producer[c.Input[k]], 0)
}

// concatCopy is the copy rule of a Concat: its one input that is not
// proved empty along the axis: torch.cat of one tensor (a TorchScript
// export's cache update with no past), or NomicBERT's apply_rotary_emb,
// cat((rotated x[..., :ro_dim], x[..., ro_dim:])) with ro_dim the whole
// head, whose tail is a Slice of zero length.
func (f *Facts) concatCopy(n *onnxpb.NodeProto, _ string, depth int) string {
	if len(n.Input) == 1 {
		return Input(n, 0)
	}
	axis := onnx.AttrInt(n, "axis", 0)
	keep := ""
	for _, in := range n.Input {
		if f.emptyAlong(in, axis, depth+1) {
			continue
		}
		if keep != "" {
			return ""
		}
		keep = in
	}
	return keep
}

// emptyAlong reports whether v is proved to have size 0 along axis: by
// its producer or its constant value, not by a declared shape alone.
func (f *Facts) emptyAlong(v string, axis int64, depth int) bool {
	if v == "" || depth > MaxDepth {
		return false
	}
	d, suffix := f.provedDims(v, f.declaredDims(v), depth)
	if axis < 0 {
		axis += int64(len(d))
	} else if suffix {
		return false // only the trailing axes are proved: the rank is a guess
	}
	return axis >= 0 && axis < int64(len(d)) && d[axis] == 0
}
