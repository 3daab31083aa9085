package graphfacts

import (
	"math"
	"sort"
	"strings"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// Dims returns what is known of v's shape (−1 unknown), nil if not even
// the rank is known.
func (f *Facts) Dims(v string) []int64 { return f.dims(v, 0) }

func (f *Facts) dims(v string, depth int) []int64 {
	if depth > MaxDepth {
		return nil
	}
	if f.dimsDone[v] {
		return f.dimsMemo[v]
	}
	d := f.dimsWalk(v, depth)
	f.dimsDone[v], f.dimsMemo[v] = true, d
	return d
}

// dimsWalk reconciles what the graph proves of v's dims (its producer
// applied to what is known of its inputs, an initializer's or Constant's
// shape) with what value_info, graph inputs or outputs declare of it: a
// proved size always wins; a declared one fills only axes nothing proves,
// and a declaration that contradicts a proof (another rank, another
// number on a proved axis) is ignored altogether and recorded
// (Overruled). A symbolic or unknown declared dim never hides a proof.
func (f *Facts) dimsWalk(v string, depth int) []int64 {
	declared := f.declaredDims(v)
	proved, suffix := f.provedDims(v, declared, depth)
	switch {
	case proved == nil:
		return declared
	case declared == nil && suffix:
		// Only the trailing axes are proved and nothing declares the
		// rank: the rank is a guess (the largest known input's), which a
		// Reshape must not copy axes from (rankGuessed).
		f.guessed[v] = true
		return proved
	case declared == nil:
		return proved
	}
	// suffix: only the trailing axes are proved (an elementwise op one
	// of whose inputs has an unknown rank, broadcasting from the right).
	off := len(declared) - len(proved)
	contradicts := off < 0 || (!suffix && off != 0)
	for i := 0; !contradicts && i < len(proved); i++ {
		if d := declared[off+i]; proved[i] > 0 && d > 0 && d != proved[i] {
			contradicts = true
		}
	}
	if contradicts {
		f.overruled[v] = Overruling{Value: v, Declared: declared, Proved: proved}
		return proved
	}
	out := append([]int64(nil), declared...)
	for i, x := range proved {
		if x > 0 {
			out[off+i] = x
		}
	}
	return out
}

// rankGuessed reports whether v's dims (computed already) prove only its
// trailing axes and their rank is a guess: an elementwise op with an
// input of unknown rank, and no declaration.
func (f *Facts) rankGuessed(v string) bool { return f.guessed[v] }

// Overruling is a declared shape (value_info, a graph input's or
// output's type) that contradicts the dims the graph proves, and that
// the facts therefore ignore.
type Overruling struct {
	Value    string  `json:"value"`
	Declared []int64 `json:"declared"` // −1: symbolic or unknown
	Proved   []int64 `json:"proved"`   // −1: not proved
}

// Overruled lists the declared shapes ignored so far because a proof
// contradicts them, sorted by value name. Dims are computed lazily, so
// these are the declarations of the values a caller asked about (and of
// those their proofs read).
func (f *Facts) Overruled() []Overruling {
	out := make([]Overruling, 0, len(f.overruled))
	for _, o := range f.overruled {
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Value < out[j].Value })
	return out
}

// declaredDims returns v's declared shape (−1 for a symbolic or unknown
// dim), nil if none is declared.
func (f *Facts) declaredDims(v string) []int64 {
	vi, ok := f.Ix.ValueInfo[v]
	if !ok {
		return nil
	}
	_, sh, ok := onnx.TensorType(vi)
	if !ok || sh == nil {
		return nil
	}
	out := make([]int64, len(sh))
	for i, d := range sh {
		out[i] = d.Value
		if d.Value < 0 {
			out[i] = -1
		}
	}
	return out
}

// provedDims computes v's dims from its producer (or its initializer or
// Constant value), −1 where not proved; nil if not even the rank is. With
// suffix, only the trailing axes are proved: the rank may be larger.
// declared (may be nil) lends its rank to a proof that knows the sizes of
// some axes but not the rank (a MatMul by a constant weight).
func (f *Facts) provedDims(v string, declared []int64, depth int) (d []int64, suffix bool) {
	if t, ok := f.Ix.Initializers[v]; ok {
		return append([]int64{}, t.Dims...), false
	}
	if t, ok := Constant(f.Ix, v); ok {
		out := make([]int64, len(t.Shape))
		for i, x := range t.Shape {
			out[i] = int64(x)
		}
		return out, false
	}
	n := f.Ix.Producer[v]
	if r := rulesOf(n).dims; r != nil {
		return r(f, n, v, declared, depth)
	}
	return nil, false
}

// firstDims is provedDims for an op whose output 0 has input 0's shape
// (its other outputs are unknown: LayerNormalization's mean, Dropout's
// mask).
func (f *Facts) firstDims(n *onnxpb.NodeProto, v string, _ []int64, depth int) ([]int64, bool) {
	if len(n.Output) == 0 || n.Output[0] != v {
		return nil, false
	}
	d := f.dims(Input(n, 0), depth+1)
	return d, f.rankGuessed(Input(n, 0))
}

// convDims is the shape of a Conv's output [N, M, spatial...]: the batch
// of the input, the output channels of a constant weight [M, C/g, k...],
// the spatial sizes of the input when every kernel size, stride and
// dilation is 1 and nothing is padded (else unknown).
func (f *Facts) convDims(n *onnxpb.NodeProto, _ string, _ []int64, depth int) ([]int64, bool) {
	in := f.dims(Input(n, 0), depth+1)
	if len(in) < 3 || f.rankGuessed(Input(n, 0)) {
		return nil, false
	}
	out := make([]int64, len(in))
	for i := range out {
		out[i] = -1
	}
	out[0] = in[0]
	w, ok := Constant(f.Ix, Input(n, 1))
	if ok && len(w.Shape) == len(in) {
		out[1] = int64(w.Shape[0])
	}
	unit := ok && len(w.Shape) == len(in) && onnx.AttrString(n, "auto_pad", "NOTSET") != "SAME_UPPER" && onnx.AttrString(n, "auto_pad", "NOTSET") != "SAME_LOWER"
	for i := 2; unit && i < len(w.Shape); i++ {
		unit = w.Shape[i] == 1
	}
	for _, a := range []string{"strides", "dilations", "pads"} {
		for _, x := range onnx.AttrInts(n, a) {
			if a == "pads" && x != 0 || a != "pads" && x != 1 {
				unit = false
			}
		}
	}
	if unit {
		copy(out[2:], in[2:])
	}
	return out, false
}

// concatDims is the shape of a Concat's output: its inputs' (of one rank)
// with the sizes along the axis added; one input passes its dims on
// (torch.cat of a one-element list, as a TorchScript export writes a
// cache update with no past).
func (f *Facts) concatDims(n *onnxpb.NodeProto, _ string, _ []int64, depth int) ([]int64, bool) {
	if len(n.Input) == 1 {
		return f.dims(Input(n, 0), depth+1), f.rankGuessed(Input(n, 0))
	}
	var out []int64
	for i, in := range n.Input {
		d := f.dims(in, depth+1)
		if d == nil || f.rankGuessed(in) || i > 0 && len(d) != len(out) {
			return nil, false
		}
		if i == 0 {
			out = append([]int64(nil), d...)
			continue
		}
		axis := onnx.AttrInt(n, "axis", 0)
		if axis < 0 {
			axis += int64(len(d))
		}
		if axis < 0 || axis >= int64(len(d)) {
			return nil, false
		}
		for j := range d {
			switch {
			case int64(j) == axis && out[j] >= 0 && d[j] >= 0:
				out[j] += d[j]
			case int64(j) == axis:
				out[j] = -1
			case out[j] <= 0:
				out[j] = d[j]
			}
		}
	}
	return out, false
}

// gatherDims is data[..., idx, ...]: the indices' dims replace the axis.
func (f *Facts) gatherDims(n *onnxpb.NodeProto, _ string, _ []int64, depth int) ([]int64, bool) {
	data, idx := f.dims(Input(n, 0), depth+1), f.dims(Input(n, 1), depth+1)
	axis := onnx.AttrInt(n, "axis", 0)
	if data == nil || idx == nil || axis < -int64(len(data)) || axis >= int64(len(data)) {
		return nil, false
	}
	if axis < 0 {
		axis += int64(len(data))
	}
	out := append(append(append([]int64{}, data[:axis]...), idx...), data[axis+1:]...)
	return out, false
}

// shapeDims is a Shape's output: [rank], or the length of the start:end
// range (opset ≥ 15).
func (f *Facts) shapeDims(n *onnxpb.NodeProto, _ string, _ []int64, depth int) ([]int64, bool) {
	x := f.dims(Input(n, 0), depth+1)
	if x == nil {
		return nil, false
	}
	r := int64(len(x))
	start, end := clampIndex(onnx.AttrInt(n, "start", 0), r), clampIndex(onnx.AttrInt(n, "end", r), r)
	return []int64{max(0, end-start)}, false
}

// matmulDims is a MatMul's output (productDims).
func (f *Facts) matmulDims(n *onnxpb.NodeProto, _ string, declared []int64, depth int) ([]int64, bool) {
	return f.productDims(Input(n, 0), Input(n, 1), declared, depth), false
}

// gemmDims is a Gemm's output: [M, N] of its (transposed) operands.
func (f *Facts) gemmDims(n *onnxpb.NodeProto, _ string, _ []int64, depth int) ([]int64, bool) {
	a, b := f.dims(Input(n, 0), depth+1), f.dims(Input(n, 1), depth+1)
	if len(a) != 2 || len(b) != 2 {
		return nil, false
	}
	m, k := a[0], b[1]
	if onnx.AttrInt(n, "transA", 0) == 1 {
		m = a[1]
	}
	if onnx.AttrInt(n, "transB", 0) == 1 {
		k = b[0]
	}
	return []int64{m, k}, false
}

// clampIndex is an index of a Shape or Slice range: counted from the end
// when negative, then clamped to [0, r].
func clampIndex(i, r int64) int64 {
	if i < 0 {
		i += r
	}
	return min(max(i, 0), r)
}

// sliceDims is the shape of a Slice's output: its input's dims, cut along
// the sliced axes where the input's size and the starts, ends and steps
// are constants (−1 on a sliced axis otherwise).
func (f *Facts) sliceDims(n *onnxpb.NodeProto, _ string, _ []int64, depth int) ([]int64, bool) {
	in := f.dims(Input(n, 0), depth+1)
	if in == nil {
		return nil, false
	}
	return f.slicedDims(n, in, depth), false
}

// slicedDims is sliceDims of an input with dims in; a start or end may be
// folded from sizes and constants (sliceBound).
func (f *Facts) slicedDims(n *onnxpb.NodeProto, in []int64, depth int) []int64 {
	r := int64(len(in))
	out := append([]int64(nil), in...)
	var starts, ends, axes, steps []int64
	okS, okE, okA := true, true, true
	if len(n.Input) < 3 { // opset < 10: attributes
		starts, ends, axes = onnx.AttrInts(n, "starts"), onnx.AttrInts(n, "ends"), onnx.AttrInts(n, "axes")
		okS, okE = starts != nil, ends != nil
	} else {
		if Input(n, 3) != "" {
			axes, okA = Ints(f.Ix, Input(n, 3))
		}
		one := okA && len(axes) == 1
		starts, okS = f.sliceBound(Input(n, 1), one, depth)
		ends, okE = f.sliceBound(Input(n, 2), one, depth)
		if Input(n, 4) != "" {
			var okSt bool
			if steps, okSt = Ints(f.Ix, Input(n, 4)); !okSt {
				okS = false
			}
		}
	}
	if !okA {
		for i := range out {
			out[i] = -1 // which axes are cut is not known
		}
		return out
	}
	if axes == nil {
		k := max(len(starts), len(ends))
		for i := 0; i < k; i++ {
			axes = append(axes, int64(i))
		}
	}
	for i, a := range axes {
		if a < -r || a >= r {
			return nil
		}
		if a < 0 {
			a += r
		}
		dim := in[a]
		if !okS || !okE || i >= len(starts) || i >= len(ends) || dim <= 0 {
			out[a] = -1
			continue
		}
		step := int64(1)
		if i < len(steps) {
			step = steps[i]
		}
		st, en := starts[i], ends[i]
		if st < 0 {
			st += dim
		}
		if en < 0 {
			en += dim
		}
		switch {
		case step > 0:
			st, en = min(max(st, 0), dim), min(max(en, 0), dim)
			out[a] = max(0, (en-st+step-1)/step)
		case step < 0:
			st, en = min(max(st, 0), dim-1), min(max(en, -1), dim-1)
			out[a] = max(0, (st-en-step-1)/(-step))
		default:
			return nil // step 0: malformed
		}
	}
	return out
}

// sliceBound reads a Slice's starts or ends: a constant or, when the
// Slice cuts one axis (one, a constant axes of one entry, so the bound has
// one entry too), a value folded from sizes and constants (x[...,
// ro_dim:] with ro_dim = 2·cos.size(−1), NomicBERT's apply_rotary_emb).
func (f *Facts) sliceBound(v string, one bool, depth int) ([]int64, bool) {
	if s, ok := Ints(f.Ix, v); ok {
		return s, true
	}
	if !one {
		return nil, false
	}
	if c, ok := f.scalar(v, depth+1); ok && c == math.Trunc(c) && math.Abs(c) < 1<<53 {
		return []int64{int64(c)}, true
	}
	return nil, false
}

// broadcastDims is the shape of an elementwise op's output: its inputs'
// dims broadcast (from the right). An axis is proved when an input proves
// a size other than 1 there, or when every input proves 1. When an input's
// rank is unknown only the trailing axes are proved (suffix), and a 1 is
// not (the unknown input may be larger there).
func (f *Facts) broadcastDims(n *onnxpb.NodeProto, _ string, _ []int64, depth int) (out []int64, suffix bool) {
	var ins [][]int64
	for _, in := range n.Input {
		if in == "" {
			continue
		}
		d := f.dims(in, depth+1)
		if d == nil || f.rankGuessed(in) {
			suffix = true
		}
		if d == nil {
			continue
		}
		ins = append(ins, d)
	}
	return broadcastOf(ins, suffix)
}

// expandDims is the shape of an Expand's output: its input broadcast
// against the shape's entries (a 1 keeps the input's size).
func (f *Facts) expandDims(n *onnxpb.NodeProto, _ string, _ []int64, depth int) ([]int64, bool) {
	in, s := f.dims(Input(n, 0), depth+1), f.shapeValue(Input(n, 1), depth+1)
	if in == nil || s == nil || f.rankGuessed(Input(n, 0)) {
		return nil, false
	}
	return broadcastOf([][]int64{in, s}, false)
}

// broadcastOf is the broadcast of the known dims ins (−1 unknown); with
// suffix, some input's rank is not known.
func broadcastOf(ins [][]int64, suffix bool) (out []int64, _ bool) {
	if len(ins) == 0 {
		return nil, false
	}
	r := 0
	for _, d := range ins {
		r = max(r, len(d))
	}
	out = make([]int64, r)
	for i := range out {
		size, unknown := int64(-1), 0
		for _, d := range ins {
			j := i - (r - len(d))
			switch {
			case j < 0 || d[j] == 1: // a missing leading axis broadcasts as 1
			case d[j] <= 0:
				unknown++
			case size > 0 && size != d[j]:
				return nil, false // malformed: sizes that do not broadcast
			default:
				size = d[j]
			}
		}
		switch {
		case size > 0:
			out[i] = size
		case unknown == 0 && !suffix:
			out[i] = 1
		default:
			out[i] = -1
		}
	}
	return out, suffix
}

// productDims is the shape of the matrix product of x and y (MatMul, or
// an integer product of their quantized values): the operands' batch axes
// broadcast and [M, K]·[K, N] → [M, N]. When only the right operand is
// known and is a matrix (a constant weight), N is proved and the rank is
// the declared one.
func (f *Facts) productDims(x, y string, declared []int64, depth int) []int64 {
	a, b := f.dims(x, depth+1), f.dims(y, depth+1)
	if len(b) < 2 || (a != nil && len(a) < 2) {
		return nil // a vector operand: rare in attention, not worked out
	}
	if a == nil {
		if len(b) != 2 || len(declared) < 2 {
			return nil
		}
		out := make([]int64, len(declared))
		for i := range out {
			out[i] = -1
		}
		out[len(out)-1] = b[1]
		return out
	}
	r := max(len(a), len(b))
	out := make([]int64, r)
	for i := 0; i < r-2; i++ {
		size, unknown := int64(-1), 0
		for _, d := range [][]int64{a, b} {
			j := i - (r - len(d))
			switch {
			case j < 0 || d[j] == 1:
			case d[j] <= 0:
				unknown++
			case size > 0 && size != d[j]:
				return nil
			default:
				size = d[j]
			}
		}
		switch {
		case size > 0:
			out[i] = size
		case unknown == 0:
			out[i] = 1
		default:
			out[i] = -1
		}
	}
	out[r-2], out[r-1] = a[len(a)-2], b[len(b)-1]
	return out
}

// transposeDims is the shape of a Transpose's output.
func (f *Facts) transposeDims(n *onnxpb.NodeProto, _ string, _ []int64, depth int) ([]int64, bool) {
	in := f.dims(Input(n, 0), depth+1)
	p := onnx.AttrInts(n, "perm")
	if in == nil || len(p) != len(in) {
		return nil, false
	}
	ip := make([]int, len(p))
	for i, x := range p {
		ip[i] = int(x)
	}
	return Permute(in, ip), false
}

// reshapeDims is the shape of a Reshape's output: its target's entries
// (0 copying the input's axis), the literal −1 solved (solveReshape); nil
// when the target's length rests on a guess no declared rank confirms.
func (f *Facts) reshapeDims(n *onnxpb.NodeProto, _ string, declared []int64, depth int) ([]int64, bool) {
	s, exact := f.shapeValueLen(Input(n, 1), depth+1, true)
	if s == nil || (!exact && (declared == nil || len(declared) != len(s))) {
		// The rank rests on a guess (a shape piece of unknown length
		// taken as one element) that no declared rank confirms.
		return nil, false
	}
	in := f.dims(Input(n, 0), depth+1)
	if f.rankGuessed(Input(n, 0)) {
		in = nil // its axes are not known by position
	}
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
	f.solveReshape(n, out, in, depth)
	return out, false
}

// einsumDims is the shape of a projection by an Einsum with a constant
// weight (keras/tf2onnx "abc,cde->abde"): sizes from the weight's letters
// (an initializer's or a Constant's: NomicBERT's outer product "i,j->ij"
// of positions and the constant inverse frequencies).
func (f *Facts) einsumDims(n *onnxpb.NodeProto, _ string, _ []int64, _ int) ([]int64, bool) {
	a, b, out, ok := EinsumEq(n)
	if !ok {
		return nil, false
	}
	size := map[rune]int64{}
	for i, eq := range []string{a, b} {
		var dims []int64
		if t, ok := f.Ix.Initializers[Input(n, i)]; ok {
			dims = t.Dims
		} else if t, ok := Constant(f.Ix, Input(n, i)); ok {
			for _, x := range t.Shape {
				dims = append(dims, int64(x))
			}
		}
		if len(dims) == len(eq) {
			for j, r := range eq {
				size[r] = dims[j]
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
	return d, false
}

// splitOutDims is the shape of output v of a Split: a packed projection
// split into Q, K, V (ModernBERT's Wqkv viewed [B,S,3,H,D] and split along
// the 3); the split axis takes this output's size.
func (f *Facts) splitOutDims(n *onnxpb.NodeProto, v string, _ []int64, depth int) ([]int64, bool) {
	in := f.dims(Input(n, 0), depth+1)
	axis := onnx.AttrInt(n, "axis", 0)
	if in == nil || axis < -int64(len(in)) || axis >= int64(len(in)) {
		return nil, false
	}
	if axis < 0 {
		axis += int64(len(in))
	}
	split := onnx.AttrInts(n, "split")
	if split == nil && len(n.Input) > 1 {
		split, _ = Ints(f.Ix, Input(n, 1))
	}
	out := append([]int64(nil), in...)
	out[axis] = -1
	for i, o := range n.Output {
		if o == v && i < len(split) {
			out[axis] = split[i]
		}
	}
	if split == nil && in[axis] > 0 && len(n.Output) > 0 && in[axis]%int64(len(n.Output)) == 0 {
		out[axis] = in[axis] / int64(len(n.Output))
	}
	return out, false
}

// squeezeDims is the shape of a Squeeze's or Unsqueeze's output.
func (f *Facts) squeezeDims(n *onnxpb.NodeProto, _ string, _ []int64, depth int) ([]int64, bool) {
	in := f.dims(Input(n, 0), depth+1)
	axes := axesOf(f.Ix, n)
	if in == nil || axes == nil {
		return nil, false
	}
	rank := len(in) - len(axes)
	if n.GetOpType() == "Unsqueeze" {
		rank = len(in) + len(axes)
	}
	if rank < 0 {
		return nil, false
	}
	marked := map[int]bool{}
	for _, a := range axes {
		r := len(in) // Squeeze: axes index the input
		if n.GetOpType() == "Unsqueeze" {
			r = rank // Unsqueeze: axes index the output
		}
		if a < -int64(r) || a >= int64(r) {
			return nil, false
		}
		if a < 0 {
			a += int64(r)
		}
		marked[int(a)] = true
	}
	out := make([]int64, 0, rank)
	if n.GetOpType() == "Squeeze" {
		for i, d := range in {
			if !marked[i] {
				out = append(out, d)
			} else if d > 1 {
				return nil, false // not a size-one axis: malformed
			}
		}
		return out, false
	}
	j := 0
	for i := 0; i < rank; i++ {
		if marked[i] {
			out = append(out, 1)
			continue
		}
		if j >= len(in) {
			return nil, false
		}
		out = append(out, in[j])
		j++
	}
	return out, false
}

// ShapeValue returns a shape tensor's entries (−1 where unknown): a
// constant, a Cast of one, or a Concat of single-element pieces.
func (f *Facts) ShapeValue(v string) []int64 { return f.shapeValue(v, 0) }

func (f *Facts) shapeValue(v string, depth int) []int64 {
	s, _ := f.shapeValueLen(v, depth, false)
	return s
}

// shapeValueLen is shapeValue; exact is false when its length rests on
// the guess that a dynamic Concat piece has one element. With expand, a
// piece known to have k ≠ 1 elements (Shape(x)[a:b]) is k unknown
// entries; without, it is one, as ShapeValue has always read it (the
// matcher's head-split walk relies on that reading; see the report of
// the change that added expand).
func (f *Facts) shapeValueLen(v string, depth int, expand bool) (s []int64, exact bool) {
	if depth > MaxDepth {
		return nil, false
	}
	if s, ok := Ints(f.Ix, v); ok {
		return s, true
	}
	n := f.Ix.Producer[v]
	if n == nil || !DefaultDomain(n) {
		return nil, false
	}
	switch n.GetOpType() {
	case "Cast", "Identity":
		return f.shapeValueLen(Input(n, 0), depth+1, expand)
	case "Reshape", "Squeeze", "Unsqueeze":
		// A shape flattened or viewed as one axis (torch's
		// shape.view(-1) before an Expand): the same entries.
		if d := f.dims(n.Output[0], depth+1); len(d) == 1 {
			return f.shapeValueLen(Input(n, 0), depth+1, expand)
		}
		return nil, false
	case "Where":
		return f.expandShapeValue(n, depth, expand)
	case "Concat":
		var out []int64
		exact = true
		for _, in := range n.Input {
			if s, ok := Ints(f.Ix, in); ok {
				out = append(out, s...)
				continue
			}
			// A dynamic piece of k elements (Shape(x)[a:b]) is k unknown
			// entries when expanding; otherwise it is taken as one element
			// (an Unsqueeze of a scalar), known when it is a known
			// dimension of a value (x.size(i)).
			if pd := f.dims(in, depth+1); len(pd) != 1 || pd[0] != 1 {
				if !expand || len(pd) != 1 || pd[0] < 0 {
					// An Unsqueeze of a size (torch's shape pieces) is
					// one element; anything else of unknown length
					// leaves the length a guess.
					exact = exact && pd == nil && f.unsqueezedScalar(in)
				} else {
					for i := int64(0); i < pd[0]; i++ {
						out = append(out, -1)
					}
					continue
				}
			}
			d := int64(-1)
			if src, axis, ok := f.sizeOf(in, depth+1); ok {
				if sd := f.dims(src, depth+1); axis >= 0 && axis < len(sd) && sd[axis] > 0 {
					d = sd[axis]
				}
			} else if c, ok := f.scalar(in, depth+1); ok && c == math.Trunc(c) && c >= -1 && c < 1<<40 {
				// A size computed from known sizes and constants
				// (repeat_kv's num_key_value_heads·n_rep as
				// Mul(x.size(1), n_rep)).
				d = int64(c)
			}
			out = append(out, d)
		}
		return out, exact
	}
	return nil, false
}

// expandShapeValue reads the shape torch's TorchScript exporter gives an
// Expand, Where(Equal(s, −1), ones, s): the entries of s, with those equal
// to the compared constant (−1, "keep this size") replaced by the other
// branch's uniform value (1, which Expand broadcasts the same way).
func (f *Facts) expandShapeValue(n *onnxpb.NodeProto, depth int, expand bool) ([]int64, bool) {
	eq := f.Ix.Producer[Input(n, 0)]
	if eq == nil || eq.GetOpType() != "Equal" || !DefaultDomain(eq) || len(n.Input) != 3 {
		return nil, false
	}
	for sel := 1; sel <= 2; sel++ {
		s := Input(n, sel)
		var c float64
		var ok bool
		switch {
		case f.sameInts(s, Input(eq, 0)):
			c, ok = f.uniform(Input(eq, 1), depth+1)
		case f.sameInts(s, Input(eq, 1)):
			c, ok = f.uniform(Input(eq, 0), depth+1)
		}
		if !ok {
			continue
		}
		other, ok := f.uniform(Input(n, 3-sel), depth+1)
		if !ok {
			continue
		}
		vals, exact := f.shapeValueLen(s, depth+1, expand)
		if vals == nil {
			return nil, false
		}
		// An entry of s takes the other branch where the condition holds
		// (s the false branch) or fails (s the true branch); an unknown
		// entry (−1 of a dynamic piece) stays unknown.
		_, literal := Ints(f.Ix, s) // every entry known, −1 included
		out := append([]int64(nil), vals...)
		for i, x := range out {
			if (x >= 0 || literal) && (x == int64(c)) == (sel == 2) {
				out[i] = int64(other)
			}
		}
		return out, exact
	}
	return nil, false
}

// sameInts reports whether a and b are one value, or constants of equal
// integer entries (the TorchScript exporter writes the shape compared
// and the shape selected as two Constant nodes).
func (f *Facts) sameInts(a, b string) bool {
	if a == b {
		return true
	}
	x, ok1 := Ints(f.Ix, a)
	y, ok2 := Ints(f.Ix, b)
	if !ok1 || !ok2 || len(x) != len(y) {
		return false
	}
	for i := range x {
		if x[i] != y[i] {
			return false
		}
	}
	return true
}

// unsqueezedScalar reports whether v is Unsqueeze(x) with one axis of an
// x that is a size (x.size(i), a Gather of a shape with a scalar index):
// one element.
func (f *Facts) unsqueezedScalar(v string) bool {
	n := f.Ix.Producer[v]
	if n == nil || n.GetOpType() != "Unsqueeze" || !DefaultDomain(n) || len(axesOf(f.Ix, n)) != 1 {
		return false
	}
	g := f.Ix.Producer[Input(n, 0)]
	if g == nil || g.GetOpType() != "Gather" {
		return false
	}
	idx, ok := Constant(f.Ix, Input(g, 1))
	return ok && len(idx.Shape) == 0
}

// sizeOf reads a one-element shape piece that is a dimension of a value,
// x.size(i): Gather(Shape(x), i), through Unsqueeze, Squeeze, Cast and
// Identity. It returns x and i (a negative i counted from the end when x's
// rank is known).
func (f *Facts) sizeOf(v string, depth int) (src string, axis int, ok bool) {
	for ; depth <= MaxDepth; depth++ {
		n := f.Ix.Producer[v]
		if n == nil || !DefaultDomain(n) {
			return "", 0, false
		}
		switch n.GetOpType() {
		case "Unsqueeze", "Squeeze", "Cast", "Identity":
			v = Input(n, 0)
			continue
		case "Reshape":
			// A size viewed as a scalar or one element (paddle2onnx's
			// stack of shape pieces: Reshape(size, []) then Unsqueeze).
			if s := f.shapeValue(Input(n, 1), depth+1); len(s) > 1 || len(s) == 1 && s[0] != 1 && s[0] != -1 {
				return "", 0, false
			}
			v = Input(n, 0)
			continue
		case "Gather", "Slice":
			sh := f.Ix.Producer[Input(n, 0)]
			for sh != nil && sh.GetOpType() == "Identity" && DefaultDomain(sh) {
				sh = f.Ix.Producer[Input(sh, 0)]
			}
			idx, isInt := Ints(f.Ix, Input(n, 1))
			if n.GetOpType() == "Slice" {
				// Shape(x)[i:i+1] (x.size(-1) is written Shape[-1:]).
				end, okEnd := Ints(f.Ix, Input(n, 2))
				if !okEnd || len(end) != 1 || len(idx) != 1 || (Input(n, 4) != "" && !isAll(f.Ix, Input(n, 4), 1)) ||
					(end[0] != idx[0]+1 && !(idx[0] == -1 && end[0] >= 1<<31-1)) {
					return "", 0, false
				}
			} else if onnx.AttrInt(n, "axis", 0) != 0 {
				return "", 0, false
			}
			if sh == nil || sh.GetOpType() != "Shape" || !isInt || len(idx) != 1 {
				return "", 0, false
			}
			if onnx.AttrInt(sh, "start", 0) != 0 {
				return "", 0, false
			}
			x := Input(sh, 0)
			i := int(idx[0])
			if i < 0 {
				d := f.dims(x, depth+1)
				if d == nil {
					return "", 0, false
				}
				i += len(d)
			}
			return x, i, true
		}
		return "", 0, false
	}
	return "", 0, false
}

// lastAxisWidth returns the size of v's last axis when v is a
// projection's output x·W (+ b, times scalars) with W constant [K, N]:
// N; −1 otherwise (a layout op in between may have moved the axis). A
// quantized projection (quant.go) counts as one.
func (f *Facts) lastAxisWidth(v string) int64 {
	for i := 0; i < MaxDepth; i++ {
		n := f.Ix.Producer[v]
		if IsQuantizedMatMul(n) || isQuantizer(n) {
			w, _ := f.quantWidth(n, 0)
			return w
		}
		if n == nil || !DefaultDomain(n) {
			return -1
		}
		switch op := n.GetOpType(); {
		case op == "Identity" || FloatCast(n):
			v = Input(n, 0)
		case f.rescaled(n) != "":
			v = f.rescaled(n)
		case op == "Add" || op == "Mul" || op == "Div":
			c0, c1 := f.ConstDerived(Input(n, 0)), f.ConstDerived(Input(n, 1))
			switch {
			case c1 && !c0:
				v = Input(n, 0)
			case c0 && !c1:
				v = Input(n, 1)
			default:
				return -1
			}
		case op == "MatMul" || (op == "Gemm" && onnx.AttrInt(n, "transA", 0) == 0):
			d := f.weightDims(Input(n, 1))
			if len(d) != 2 {
				return -1
			}
			if op == "Gemm" && onnx.AttrInt(n, "transB", 0) == 1 {
				return d[0]
			}
			return d[1]
		default:
			return -1
		}
	}
	return -1
}

// isAll reports whether v is a constant of integers that all equal x.
func isAll(ix *onnx.Index, v string, x int64) bool {
	s, ok := Ints(ix, v)
	if !ok {
		return false
	}
	for _, y := range s {
		if y != x {
			return false
		}
	}
	return true
}

// solveReshape fills the one unknown entry of a Reshape's output dims
// out when it is the shape's literal −1 and every other entry is known
// or a copy of an input axis (x.size(i) of the reshaped x, or 0):
// −1 = (product of the input axes not copied) / (product of the known
// output entries not copied). When the input's dims are unknown but its
// last axis is known (a projection's output x·W), the copies of its
// leading axes make the reshape a split of the last axis, as a head
// split view(B, S, H, −1) is.
func (f *Facts) solveReshape(n *onnxpb.NodeProto, out, in []int64, depth int) {
	copied, literal, ok := f.reshapeCopies(n, len(out), depth)
	if !ok {
		return
	}
	// An entry that is a size of the input (Shape(x)[a]) is its size.
	for i, a := range copied {
		if out[i] <= 0 && a >= 0 && a < len(in) && in[a] > 0 {
			out[i] = in[a]
		}
	}
	unknown := -1
	for i, x := range out {
		if _, ok := copied[i]; ok || x > 0 {
			continue
		}
		if unknown >= 0 || !literal[i] {
			return
		}
		unknown = i
	}
	if unknown < 0 {
		return
	}
	if in == nil {
		// Only the width known: a split of the last axis keeps the
		// leading axes 0..k−1 as they are.
		w := f.lastAxisWidth(Input(n, 0))
		if w <= 0 {
			return
		}
		k := 0
		for i := 0; i < len(out); i++ {
			if a, ok := copied[i]; ok && a == i {
				k++
				continue
			}
			break
		}
		if len(copied) != k || k == 0 {
			return
		}
		in = make([]int64, k+1)
		for i := range in {
			in[i] = -1
		}
		in[k] = w
	}
	used := map[int]bool{}
	for _, a := range copied {
		if a < 0 || a >= len(in) || used[a] {
			return
		}
		used[a] = true
	}
	num, den := int64(1), int64(1)
	for a, d := range in {
		if used[a] {
			continue
		}
		if d <= 0 {
			return
		}
		num *= d
	}
	for i, d := range out {
		if _, ok := copied[i]; ok || i == unknown {
			continue
		}
		den *= d
	}
	if den > 0 && num%den == 0 {
		out[unknown] = num / den
	}
}

// reshapeCopies reads a Reshape's target of r entries: which entries copy
// an axis of the reshaped input (0 in a constant target, x.size(i), or
// the axes a..b−1 of Shape(x)[a:b], a piece of several entries) and which
// are the literal −1. ok is false when the target is neither a constant
// nor a Concat of such pieces and constants adding up to r entries.
// sameLeadingAxis reports whether axis of src is axis of v: v is src, or
// a projection of it by a constant weight [in, out] (x·W, with a constant
// bias or factor) that keeps every axis but the last. transformers 5
// splits the heads by view(*hidden_states.shape[:-1], -1, D), reading
// the sizes from the projection's input.
func (f *Facts) sameLeadingAxis(src, v string, axis int) bool {
	for i := 0; i < 6; i++ {
		if v == src {
			return true
		}
		n := f.Ix.Producer[v]
		if n == nil || !DefaultDomain(n) {
			return false
		}
		switch n.GetOpType() {
		case "Cast", "Identity":
			v = Input(n, 0)
		case "Add", "Mul", "Sub", "Div":
			switch {
			case f.constDerived(Input(n, 1), 0) && !f.constDerived(Input(n, 0), 0):
				v = Input(n, 0)
			case f.constDerived(Input(n, 0), 0) && !f.constDerived(Input(n, 1), 0) && n.GetOpType() != "Div" && n.GetOpType() != "Sub":
				v = Input(n, 1)
			default:
				return false
			}
		case "MatMul":
			w := f.dims(Input(n, 1), 0)
			x := f.dims(Input(n, 0), 0)
			if len(w) != 2 || !f.constDerived(Input(n, 1), 0) || axis < 0 || len(x) < 2 || axis >= len(x)-1 {
				return false
			}
			v = Input(n, 0)
		default:
			return false
		}
	}
	return false
}

func (f *Facts) reshapeCopies(n *onnxpb.NodeProto, r, depth int) (copied map[int]int, literal map[int]bool, ok bool) {
	copied, literal = map[int]int{}, map[int]bool{}
	add := func(at int, c []int64) {
		for j, x := range c {
			literal[at+j] = x == -1
			if x == 0 {
				copied[at+j] = at + j
			}
		}
	}
	if lit, isConst := Ints(f.Ix, Input(n, 1)); isConst {
		add(0, lit)
		return copied, literal, len(lit) == r
	}
	shape := f.Ix.Producer[Input(n, 1)]
	if shape == nil || shape.GetOpType() != "Concat" {
		return nil, nil, false
	}
	at := 0
	for _, piece := range shape.Input {
		if c, isConst := Ints(f.Ix, piece); isConst {
			add(at, c)
			at += len(c)
			continue
		}
		if src, axis, ok := f.sizeOf(piece, depth+1); ok {
			if f.sameLeadingAxis(src, Input(n, 0), axis) {
				copied[at] = axis
			}
			at++
			continue
		}
		src, lo, hi, ok := f.shapeRange(piece, depth+1)
		if !ok {
			at++ // taken as one unknown entry (an Unsqueeze of a size)
			continue
		}
		for a := lo; a < hi; a++ {
			if src == Input(n, 0) {
				copied[at] = a
			}
			at++
		}
	}
	return copied, literal, at == r
}

// shapeRange reads a shape piece that is several dimensions of a value,
// Shape(x)[lo:hi]: Shape with start/end, or a Slice of Shape(x) along
// axis 0 with step 1, its bounds resolved with x's rank.
func (f *Facts) shapeRange(v string, depth int) (src string, lo, hi int, ok bool) {
	n := f.Ix.Producer[v]
	if n == nil || !DefaultDomain(n) {
		return "", 0, 0, false
	}
	starts, ends := []int64{0}, []int64{math.MaxInt64}
	if n.GetOpType() == "Slice" && len(n.Input) >= 3 {
		var okS, okE bool
		starts, okS = Ints(f.Ix, Input(n, 1))
		ends, okE = Ints(f.Ix, Input(n, 2))
		if !okS || !okE || len(starts) != 1 || len(ends) != 1 || (Input(n, 3) != "" && !isAll(f.Ix, Input(n, 3), 0)) || (Input(n, 4) != "" && !isAll(f.Ix, Input(n, 4), 1)) {
			return "", 0, 0, false
		}
		n = f.Ix.Producer[Input(n, 0)]
	}
	if n == nil || n.GetOpType() != "Shape" || !DefaultDomain(n) {
		return "", 0, 0, false
	}
	src = Input(n, 0)
	d := f.dims(src, depth+1)
	if d == nil {
		return "", 0, 0, false
	}
	r := int64(len(d))
	s0, e0 := clampIndex(onnx.AttrInt(n, "start", 0), r), clampIndex(onnx.AttrInt(n, "end", r), r)
	lo64, hi64 := s0+clampIndex(starts[0], e0-s0), s0+clampIndex(ends[0], e0-s0)
	return src, int(lo64), int(max(lo64, hi64)), true
}

// ProjWidth finds the output width of the projection feeding v: back
// through Transpose/Reshape/Add/scale to a MatMul, Gemm or Einsum with a
// constant weight.
func (f *Facts) ProjWidth(v string) int64 { return f.projWidth(v, 0) }

func (f *Facts) projWidth(v string, depth int) int64 {
	if depth > MaxDepth {
		return -1
	}
	return cached(f.widths, v, func() int64 { return f.projWidthWalk(v, depth) })
}

func (f *Facts) projWidthWalk(v string, depth int) int64 {
	n := f.Ix.Producer[v]
	if r := rulesOf(n).width; r != nil {
		return r(f, n, v, depth)
	}
	return -1
}

// firstWidth is the width input 0 comes with (a layout op or a Cast).
func (f *Facts) firstWidth(n *onnxpb.NodeProto, _ string, depth int) int64 {
	return f.projWidth(Input(n, 0), depth+1)
}

// operandWidth is the width of the first operand that is not a constant
// and has one (a bias or a factor applied to a projection's output).
func (f *Facts) operandWidth(n *onnxpb.NodeProto, _ string, depth int) int64 {
	for _, in := range n.Input {
		if _, isConst := Constant(f.Ix, in); isConst {
			continue
		}
		if w := f.projWidth(in, depth+1); w > 0 {
			return w
		}
	}
	return -1
}

// splitWidth is the size of the part v of a Split.
func (f *Facts) splitWidth(n *onnxpb.NodeProto, v string, _ int) int64 {
	split := onnx.AttrInts(n, "split")
	if split == nil && len(n.Input) > 1 {
		split, _ = Ints(f.Ix, Input(n, 1))
	}
	for i, o := range n.Output {
		if o == v && i < len(split) {
			return split[i]
		}
	}
	return -1
}

// einsumWidth is the width of a projection by an Einsum with a constant
// [D, H, d] weight: H·d.
func (f *Facts) einsumWidth(n *onnxpb.NodeProto, _ string, _ int) int64 {
	if d := f.weightDims(Input(n, 1)); len(d) == 3 {
		return d[1] * d[2]
	}
	return -1
}

// convWidth is the output channels of a width-1 convolution over
// channels-first [B,C,S] (SqueezeBERT's Conv1d projections).
func (f *Facts) convWidth(n *onnxpb.NodeProto, _ string, _ int) int64 {
	if d := f.weightDims(Input(n, 1)); len(d) == 3 && d[2] == 1 {
		return d[0]
	}
	return -1
}

// productWidth is N of a MatMul or Gemm by a constant [K, N] weight
// ([N, K] for Gemm transB=1).
func (f *Facts) productWidth(n *onnxpb.NodeProto, _ string, _ int) int64 {
	if d := f.weightDims(Input(n, 1)); len(d) == 2 {
		if n.GetOpType() == "Gemm" && onnx.AttrInt(n, "transB", 0) == 1 {
			return d[0]
		}
		return d[1]
	}
	return -1
}

// InputWidth returns the last dimension of v known from the projection
// that reads it: v's only consumer (Shape/Size aside) is a MatMul by a
// constant weight [K, N] (K is then v's width), or a Gemm, or an integer
// product of v quantized (quant.go); −1 otherwise.
func (f *Facts) InputWidth(v string) int64 {
	user := f.onlyUser(v)
	for i := 0; i < 4 && isQuantizer(user) && Input(user, 0) == v && len(user.Output) > 0; i++ {
		v = user.Output[0]
		user = f.onlyUser(v)
	}
	if user == nil || Input(user, 0) != v {
		return -1
	}
	if _, w, ok := matmulOperands(user); ok {
		if d := f.weightDims(w); len(d) == 2 {
			return d[0]
		}
		return -1
	}
	if !DefaultDomain(user) {
		return -1
	}
	d := f.weightDims(Input(user, 1))
	switch {
	case len(d) != 2:
		return -1
	case user.GetOpType() == "Gemm" && onnx.AttrInt(user, "transA", 0) == 0:
		if onnx.AttrInt(user, "transB", 0) == 1 {
			return d[1]
		}
		return d[0]
	}
	return -1
}

// onlyUser returns the one node that reads v besides Shape and Size
// (which read only its shape), nil if there is none or more than one.
func (f *Facts) onlyUser(v string) *onnxpb.NodeProto {
	var user *onnxpb.NodeProto
	for _, c := range f.Ix.Consumers[v] {
		if op := c.GetOpType(); DefaultDomain(c) && (op == "Shape" || op == "Size") {
			continue
		}
		if user != nil {
			return nil
		}
		user = c
	}
	return user
}

// WeightDims is weightDims: the dims of a product's weight operand v,
// constant or computed from constants and inputs that carry no tokens;
// nil for an activation.
func (f *Facts) WeightDims(v string) []int64 { return f.weightDims(v) }

// weightDims returns the dims of a constant weight, also one passed
// through Identity nodes (as TorchScript exports weights shared by several
// layers, ALBERT's) or dequantized (DequantizeLinear of an integer
// weight), or of a weight the graph computes from constants and inputs
// that carry no tokens when its dims are proved (weightDerived: a base
// weight plus LoRA adapters chosen by a task id); nil if v is not one.
func (f *Facts) weightDims(v string) []int64 {
	if d := f.constWeightDims(v); d != nil {
		return d
	}
	if !f.weightDerived(v, 0) {
		return nil
	}
	d := f.Dims(v)
	for _, x := range d {
		if x <= 0 {
			return nil
		}
	}
	return d
}

// constWeightDims is weightDims of a constant weight.
func (f *Facts) constWeightDims(v string) []int64 {
	for i := 0; i < MaxDepth; i++ {
		if t, ok := f.Ix.Initializers[v]; ok {
			return t.Dims
		}
		if t, ok := Constant(f.Ix, v); ok {
			d := make([]int64, len(t.Shape))
			for j, x := range t.Shape {
				d[j] = int64(x)
			}
			return d
		}
		// Identity, and DequantizeLinear: a quantized weight (QDQ or
		// weight-only quantization) has the float weight's shape.
		n := f.Ix.Producer[v]
		if n == nil || !(DefaultDomain(n) && n.GetOpType() == "Identity" || isQuantizer(n) && n.GetOpType() == "DequantizeLinear") {
			return nil
		}
		v = Input(n, 0)
	}
	return nil
}

// PreScale returns the product of the constant factors applied to v on
// its way from its projection: back through the head split (Transpose,
// Reshape), float Casts, Mul/Div by scalars, constant biases, rotary
// embeddings (x·cos + rotate_half(x)·sin, linear in x) and copies
// (CopyOf), stopping at anything else.
func (f *Facts) PreScale(v string) float64 {
	scale := 1.0
	for i := 0; i < MaxDepth; i++ {
		if x := f.CopyOf(v); x != "" {
			v = x
			continue
		}
		n := f.Ix.Producer[v]
		if n == nil || !DefaultDomain(n) {
			break
		}
		switch op := n.GetOpType(); {
		case op == "Transpose" || op == "Reshape" || op == "Identity" || FloatCast(n) || isQuantizer(n):
			v = Input(n, 0)
			continue
		case op == "Div":
			if c, ok := f.Scalar(Input(n, 1)); ok && c != 0 {
				scale /= c
				v = Input(n, 0)
				continue
			}
		case op == "Mul":
			if c, ok := f.Scalar(Input(n, 1)); ok {
				scale *= c
				v = Input(n, 0)
				continue
			}
			if c, ok := f.Scalar(Input(n, 0)); ok {
				scale *= c
				v = Input(n, 1)
				continue
			}
		case op == "Add":
			if x := f.RotaryInput(n); x != "" {
				v = x
				continue
			}
			// x·s + c with c constant (Funnel's q·s + r_w_bias·s): the
			// factor is taken through the constant bias, (x + c/s)·s.
			c0, c1 := f.ConstDerived(Input(n, 0)), f.ConstDerived(Input(n, 1))
			if c0 != c1 {
				v = Input(n, map[bool]int{true: 1, false: 0}[c0])
				continue
			}
		}
		break
	}
	return scale
}

// RotaryInput returns x when n is Add(Mul(x, cos), Mul(r, sin)) (in any
// operand order) with r = rotate_half(x): x's halves swapped and one
// negated, by Slice/Split, Neg, Concat (and Reshape/Unsqueeze/Gather for
// interleaved pairs); "" otherwise.
func (f *Facts) RotaryInput(n *onnxpb.NodeProto) string {
	var muls [2]*onnxpb.NodeProto
	for i := 0; i < 2; i++ {
		m := f.Ix.Producer[Input(n, i)]
		if m == nil || m.GetOpType() != "Mul" || !DefaultDomain(m) {
			return ""
		}
		muls[i] = m
	}
	for a := 0; a < 2; a++ {
		for xi := 0; xi < 2; xi++ {
			x := Input(muls[a], xi)
			for ri := 0; ri < 2; ri++ {
				r := Input(muls[1-a], ri)
				if x == "" || r == x || Input(muls[a], 1-xi) == x || Input(muls[1-a], 1-ri) == x {
					continue
				}
				if neg, ok := f.rotatedFrom(r, x, 0); ok && neg {
					return x
				}
			}
		}
	}
	return ""
}

// rotatedFrom reports whether v is built from x by moving its elements
// (Slice, Split, Concat, Reshape, Unsqueeze, Squeeze, Gather, Transpose,
// float Casts) and negating some (Neg), and whether a Neg was seen.
func (f *Facts) rotatedFrom(v, x string, depth int) (neg, ok bool) {
	if v == x {
		return false, true
	}
	if depth > MaxDepth {
		return false, false
	}
	n := f.Ix.Producer[v]
	if n == nil || !DefaultDomain(n) {
		return false, false
	}
	switch n.GetOpType() {
	case "Neg":
		_, ok := f.rotatedFrom(Input(n, 0), x, depth+1)
		return true, ok
	case "Slice", "Split", "Reshape", "Unsqueeze", "Squeeze", "Gather", "Transpose", "Identity":
		return f.rotatedFrom(Input(n, 0), x, depth+1)
	case "Cast":
		if FloatCast(n) {
			return f.rotatedFrom(Input(n, 0), x, depth+1)
		}
	case "Concat":
		any := false
		for _, in := range n.Input {
			ng, ok := f.rotatedFrom(in, x, depth+1)
			if !ok {
				return false, false
			}
			any = any || ng
		}
		return any, len(n.Input) > 0
	}
	return false, false
}

// EinsumEq parses the equation "ab,cd->ef" of a two-operand Einsum.
func EinsumEq(n *onnxpb.NodeProto) (a, b, out string, ok bool) {
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

// Projection is a linear projection X·W (+ B) found behind a value.
type Projection struct {
	Node   string `json:"node"`           // the MatMul, Gemm or Einsum
	Input  string `json:"input"`          // X
	Weight string `json:"weight"`         // W, a constant
	Bias   string `json:"bias,omitempty"` // B, a constant, if added
	// Transposed: W is held [out, in] (Gemm transB=1).
	Transposed bool `json:"transposed,omitempty"`
	// Packed: the value is one part of the projection's output, split
	// off it (a packed QKV projection, ModernBERT's Wqkv): W and B are
	// shared with the other parts.
	Packed bool `json:"packed,omitempty"`
	// Conv: the projection is a width-1 Conv over a channels-first input
	// [B,C,S] (SqueezeBERT): W is [out, in/groups, 1], the output is
	// [B,out,S].
	Conv bool `json:"conv,omitempty"`
	// Quantized names the quantized form of the projection: the integer
	// product (MatMulInteger, QLinearMatMul, MatMulIntegerToFloat,
	// DynamicQuantizeMatMul, MatMulNBits), whose Weight is the integer
	// or packed weight, or "QDQ" for a MatMul whose operands are
	// dequantized (Weight is then the DequantizeLinear output). Input is
	// the float value the product quantizes. "" for a float projection.
	Quantized string `json:"quantized,omitempty"`
}

// ProjectionOf walks back from v through the head split (Transpose,
// Reshape), Identity, float Casts, Mul/Div by scalars, rotary embeddings,
// copies (CopyOf: a torch.stack's tensor selected again, a Concat whose
// other inputs are empty) and quantizers to an Add of a constant bias and
// a MatMul, Gemm or Einsum by a constant weight, or a quantized product
// (quant.go): the projection v is computed from. ok is false when v does
// not come from one.
func (f *Facts) ProjectionOf(v string) (p Projection, ok bool) {
	p, _, ok = f.projectionWalk(v)
	return p, ok
}

// Unsplit reports whether v is its projection's output without a reshape
// on the way (no head split, no part cut off a packed projection): the
// operand of single-head attention, [B,S,D] as projected.
func (f *Facts) Unsplit(v string) bool {
	_, reshaped, ok := f.projectionWalk(v)
	return ok && !reshaped
}

// projectionWalk is ProjectionOf; reshaped says whether the walk passed a
// Reshape, Squeeze, Split or Slice.
func (f *Facts) projectionWalk(v string) (p Projection, reshaped, ok bool) {
	for i := 0; i < MaxDepth; i++ {
		if x := f.CopyOf(v); x != "" {
			// A copy of one input (CopyOf): the values pass unchanged.
			v = x
			continue
		}
		n := f.Ix.Producer[v]
		if IsQuantizedMatMul(n) {
			p, ok = f.quantProjection(n, p)
			return p, reshaped, ok
		}
		if n == nil || !DefaultDomain(n) && !isQuantizer(n) {
			return p, reshaped, false
		}
		switch n.GetOpType() {
		case "Reshape", "Squeeze", "Unsqueeze", "Split", "Slice", "Gather":
			reshaped = true
		}
		next, end, ok := f.projectionStep(n, &p)
		if end {
			return p, reshaped, ok
		}
		v = next
	}
	return p, reshaped, false
}

// projectionStep is one step of ProjectionOf's walk at node n: the value
// to go on from, or end with whether p is now the projection.
func (f *Facts) projectionStep(n *onnxpb.NodeProto, p *Projection) (next string, end, ok bool) {
	switch op := n.GetOpType(); {
	case op == "Transpose" || op == "Reshape" || op == "Identity" || op == "Squeeze" || op == "Unsqueeze" || FloatCast(n) || isQuantizer(n):
		return Input(n, 0), false, false
	case op == "Split" || (op == "Slice" || op == "Gather") && f.constSliceArgs(n):
		// A part of a packed projection: split, sliced or gathered
		// (paddle2onnx's qkv[0]) at constant positions.
		p.Packed = true
		return Input(n, 0), false, false
	case f.rescaled(n) != "":
		return f.rescaled(n), false, false
	case op == "Mul" || op == "Div":
		if _, ok := f.Scalar(Input(n, 1)); ok {
			return Input(n, 0), false, false
		}
		if _, ok := f.Scalar(Input(n, 0)); ok && op == "Mul" {
			return Input(n, 1), false, false
		}
	case op == "Add":
		if x := f.RotaryInput(n); x != "" {
			return x, false, false
		}
		for i := 0; i < 2; i++ {
			// x + 0: paddle's scale op (x·s + bias, bias 0) as
			// paddle2onnx writes it.
			if z, ok := f.Uniform(Input(n, 1-i)); ok && z == 0 && f.oneElement(Input(n, 1-i)) {
				return Input(n, i), false, false
			}
		}
		c0, c1 := f.ConstDerived(Input(n, 0)), f.ConstDerived(Input(n, 1))
		if p.Bias != "" || c0 == c1 {
			return "", true, false
		}
		if c1 {
			p.Bias = Input(n, 1)
			return Input(n, 0), false, false
		}
		p.Bias = Input(n, 0)
		return Input(n, 1), false, false
	case op == "MatMul" || op == "Gemm" || op == "Einsum" || (op == "Conv" && f.Pointwise(n)):
		return "", true, f.projectionAt(n, p)
	}
	return "", true, false
}

// projectionAt fills p from the product n, X·W (+ B) with W constant
// (Gemm and Conv may add B themselves), and reports whether n is one.
func (f *Facts) projectionAt(n *onnxpb.NodeProto, p *Projection) bool {
	op := n.GetOpType()
	x, w := Input(n, 0), Input(n, 1)
	if !f.ConstDerived(w) || f.ConstDerived(x) {
		return false
	}
	if (op == "Gemm" || op == "Conv") && Input(n, 2) != "" {
		if p.Bias != "" {
			return false
		}
		p.Bias = Input(n, 2)
	}
	p.Node, p.Input, p.Weight = n.GetName(), f.FloatSource(x), w
	p.Transposed = op == "Gemm" && onnx.AttrInt(n, "transB", 0) == 1
	p.Conv = op == "Conv"
	if d := f.Ix.Producer[w]; p.Input != x || isQuantizer(d) {
		p.Quantized = "QDQ"
	}
	if p.Node == "" && len(n.Output) > 0 {
		p.Node = op + "(" + n.Output[0] + ")"
	}
	return true
}

// Pointwise reports whether n is a Conv with a width-1 kernel over one
// spatial axis (no padding, stride or dilation): a linear projection of
// each position of a channels-first [B,C,S] input, as SqueezeBERT's
// Conv1d projections are.
func (f *Facts) Pointwise(n *onnxpb.NodeProto) bool {
	if n == nil || n.GetOpType() != "Conv" || !DefaultDomain(n) {
		return false
	}
	if d := f.weightDims(Input(n, 1)); len(d) != 3 || d[2] != 1 {
		return false
	}
	for _, a := range []string{"strides", "dilations"} {
		for _, x := range onnx.AttrInts(n, a) {
			if x != 1 {
				return false
			}
		}
	}
	for _, x := range onnx.AttrInts(n, "pads") {
		if x != 0 {
			return false
		}
	}
	return true
}

// ChannelsFirst reports whether v is the output of a pointwise Conv
// projection (through a bias Add, scalar factors, Identity and float
// Casts): [B,C,S], channels before the sequence. Its walk is
// lastAxisWidth's, with other ends, and c/x is refused: not a scale factor.
func (f *Facts) ChannelsFirst(v string) bool {
	for i := 0; i < MaxDepth; i++ {
		n := f.Ix.Producer[v]
		if n == nil || !DefaultDomain(n) {
			return false
		}
		switch op := n.GetOpType(); {
		case op == "Conv":
			return f.Pointwise(n)
		case op == "Identity" || FloatCast(n):
			v = Input(n, 0)
		case op == "Add" || op == "Mul" || op == "Div":
			c0, c1 := f.ConstDerived(Input(n, 0)), f.ConstDerived(Input(n, 1))
			switch {
			case c1 && !c0:
				v = Input(n, 0)
			case c0 && !c1 && op != "Div":
				v = Input(n, 1)
			default:
				return false
			}
		default:
			return false
		}
	}
	return false
}

// constSliceArgs reports whether a Slice's starts, ends, axes and steps
// (a Gather's indices) are all computed from constants (it cuts a fixed
// part of its input).
func (f *Facts) constSliceArgs(n *onnxpb.NodeProto) bool {
	if n.GetOpType() == "Gather" {
		return f.ConstDerived(Input(n, 1))
	}
	if len(n.Input) < 3 {
		return len(onnx.AttrInts(n, "starts")) > 0 // opset < 10: attributes
	}
	for _, in := range n.Input[1:] {
		if in != "" && !f.ConstDerived(in) {
			return false
		}
	}
	return true
}

// Merged follows v forward through Transposes and Reshapes that are its
// only consumer (besides Shape/Size, which read only its shape): the head
// merge after an attention core, [B,H,S,D] → [B,S,H·D]. It returns the
// last value reached.
func (f *Facts) Merged(v string) string { return MergedValue(f.Ix, v) }

// MergedValue is Facts.Merged over the graph ix indexes: the one place
// that defines an attention block's output in token layout, which convert
// records as Block.Merged and which finetune and compare use to pair a
// converted (ai.linearize) node with the original block it replaced.
func MergedValue(ix *onnx.Index, v string) string {
	if ix == nil {
		return v
	}
	for i := 0; i < MaxDepth; i++ {
		if ix.GraphOutputs[v] {
			return v
		}
		var next *onnxpb.NodeProto
		for _, c := range ix.Consumers[v] {
			if op := c.GetOpType(); DefaultDomain(c) && (op == "Shape" || op == "Size") {
				continue
			}
			if next != nil {
				return v
			}
			next = c
		}
		// Transposes and Reshapes, and the QDQ pairs quantize_static
		// writes between them.
		if next == nil || !DefaultDomain(next) || (next.GetOpType() != "Transpose" && next.GetOpType() != "Reshape" && !isQuantizer(next)) || len(next.Output) != 1 {
			return v
		}
		v = next.Output[0]
	}
	return v
}
