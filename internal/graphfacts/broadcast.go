package graphfacts

import (
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// Broadcast shapes: what a bias matcher needs to know of a value's shape
// is its rank and which axes have size 1, or along which axes its values
// do not vary. Broadcast and Units compute that for the ops exporters
// build masks from (HF transformers ≥ 4.48 builds masks from Range
// indices, Gather on the flattened mask, And, Expand and Where). Each
// entry is 1 (size one, or no variation), or −1 (anything else or
// unknown).

// Broadcast returns, per axis of v, 1 where v's values do not vary along
// the axis (a size-one axis, or one that Expand or ConstantOfShape made)
// and −1 where they may; nil if unknown. Only the rank and size-one axes
// of a shape input (Shape(y) of Reshape/Expand/ConstantOfShape) are taken
// from y, computed in shape mode (usize).
func (f *Facts) Broadcast(v string) []int64 { return f.bshapeMode(v, 0, false) }

// Units returns v's rank and size-one axes (1; −1 other or unknown): its
// shape as far as broadcasting needs it; nil if not even the rank is known.
func (f *Facts) Units(v string) []int64 { return f.bshapeMode(v, 0, true) }

func (f *Facts) usize(v string, depth int) []int64 { return f.bshapeMode(v, depth, true) }

func UnitDims(d []int64) []int64 {
	out := make([]int64, len(d))
	for i, x := range d {
		if x == 1 {
			out[i] = 1
		} else {
			out[i] = -1
		}
	}
	return out
}

// BroadcastDims broadcasts unit masks (1, −1 other or unknown; nil
// unknown rank). broadcastShapes in kernels/broadcast.go broadcasts real
// sizes and rejects mismatches; this one only tracks size-one axes.
func BroadcastDims(shapes ...[]int64) []int64 {
	r := 0
	for _, s := range shapes {
		if s == nil {
			return nil
		}
		if len(s) > r {
			r = len(s)
		}
	}
	out := make([]int64, r)
	for i := range out {
		out[i] = 1
	}
	for _, s := range shapes {
		off := r - len(s)
		for i, x := range s {
			if x != 1 {
				out[off+i] = -1
			}
		}
	}
	return out
}

func (f *Facts) bshapeMode(v string, depth int, shapeMode bool) (res []int64) {
	memo := f.bcast
	if shapeMode {
		memo = f.units
	}
	if s, ok := memo[v]; ok {
		return s
	}
	if depth > MaxDepth {
		return nil
	}
	defer func() { memo[v] = res }()
	if t, ok := Constant(f.Ix, v); ok {
		if _, same := f.Uniform(v); same && !shapeMode {
			// All elements equal: the values vary along no axis (an
			// all-true [1,1,S,1] guard and-ed into a per-key mask).
			out := make([]int64, len(t.Shape))
			for i := range out {
				out[i] = 1
			}
			return out
		}
		d := make([]int64, len(t.Shape))
		for i, x := range t.Shape {
			d[i] = int64(x)
		}
		return UnitDims(d)
	}
	n := f.Ix.Producer[v]
	if n == nil || !DefaultDomain(n) {
		return f.declaredUnits(v)
	}
	// The op analysis knows more than a declared shape (symbolic dims that
	// are 1, axes a value is constant along); the declaration is the
	// fallback.
	defer func() {
		if res == nil {
			res = f.declaredUnits(v)
		}
	}()
	in := func(i int) []int64 {
		if i >= len(n.Input) || Input(n, i) == "" {
			return nil
		}
		return f.bshapeMode(Input(n, i), depth+1, shapeMode)
	}
	if r := rulesOf(n).units; r != nil {
		return r(f, n, in, depth, shapeMode)
	}
	return nil
}

// varyingUnits: a vector that varies (Range, Shape, NonZero).
func (f *Facts) varyingUnits(*onnxpb.NodeProto, func(int) []int64, int, bool) []int64 {
	return []int64{-1}
}

// firstUnits: input 0's (an elementwise op of one input, a Slice).
func (f *Facts) firstUnits(_ *onnxpb.NodeProto, in func(int) []int64, _ int, _ bool) []int64 {
	return in(0)
}

// broadcastUnits: the inputs' broadcast together (an elementwise op).
func (f *Facts) broadcastUnits(n *onnxpb.NodeProto, in func(int) []int64, _ int, _ bool) []int64 {
	var ss [][]int64
	for i := range n.Input {
		ss = append(ss, in(i))
	}
	return BroadcastDims(ss...)
}

// unsqueezeUnits: new axes of size one.
func (f *Facts) unsqueezeUnits(n *onnxpb.NodeProto, in func(int) []int64, depth int, shapeMode bool) []int64 {
	x, axes := in(0), axesOf(f.Ix, n)
	if x == nil || axes == nil {
		return nil
	}
	r := len(x) + len(axes)
	out := make([]int64, r)
	isNew := make([]bool, r)
	for _, a := range axes {
		if a < 0 {
			a += int64(r)
		}
		if a < 0 || a >= int64(r) {
			return nil
		}
		isNew[a] = true
	}
	j := 0
	for i := range out {
		if isNew[i] {
			out[i] = 1
		} else {
			out[i] = x[j]
			j++
		}
	}
	return out
}

// squeezeUnits: the squeezed axes dropped.
func (f *Facts) squeezeUnits(n *onnxpb.NodeProto, in func(int) []int64, depth int, shapeMode bool) []int64 {
	x, axes := in(0), axesOf(f.Ix, n)
	if x == nil || axes == nil {
		return nil
	}
	drop := map[int64]bool{}
	for _, a := range axes {
		if a < 0 {
			a += int64(len(x))
		}
		drop[a] = true
	}
	var out []int64
	for i, d := range x {
		if !drop[int64(i)] {
			out = append(out, d)
		}
	}
	return out
}

// gatherUnits: the indices' axes in place of the gathered axis.
func (f *Facts) gatherUnits(n *onnxpb.NodeProto, in func(int) []int64, depth int, shapeMode bool) []int64 {
	data, idx := in(0), in(1)
	if data == nil || idx == nil {
		return nil
	}
	axis := int(onnx.AttrInt(n, "axis", 0))
	if axis < 0 {
		axis += len(data)
	}
	if axis < 0 || axis >= len(data) {
		return nil
	}
	out := append(append(append([]int64{}, data[:axis]...), idx...), data[axis+1:]...)
	return out
}

// flattenUnits: the axes before and from axis merged into two.
func (f *Facts) flattenUnits(n *onnxpb.NodeProto, in func(int) []int64, depth int, shapeMode bool) []int64 {
	x := in(0)
	if x == nil {
		return nil
	}
	axis := int(onnx.AttrInt(n, "axis", 1))
	if axis < 0 {
		axis += len(x)
	}
	out := []int64{1, 1}
	for i, d := range x {
		if d != 1 {
			out[boolIndex(i >= axis)] = -1
		}
	}
	return out
}

// compareUnits: a comparison, all true or all false along every axis
// when a Range is compared with a bound it is beyond (HF masks and-in
// such checks along the query axis).
func (f *Facts) compareUnits(n *onnxpb.NodeProto, in func(int) []int64, depth int, shapeMode bool) []int64 {
	// Range(start, n, delta>0) ≥ c with start ≥ c (> c) is all true,
	// and < c all false: HF masks and-in such checks along the query
	// axis (opset 11 exports write ≥ as Not(Less)).
	if !shapeMode && len(n.Input) == 2 {
		if c, ok := f.Scalar(Input(n, 1)); ok && f.rangeAtLeast(Input(n, 0), c, n.GetOpType() == "Greater") {
			x := in(0)
			if x == nil {
				return nil
			}
			out := make([]int64, len(x))
			for i := range out {
				out[i] = 1
			}
			return out
		}
	}
	return BroadcastDims(in(0), in(1))
}

// shapedUnits: Reshape, ConstantOfShape and Expand take their shape
// tensor's units; an Expand's values vary only where its input does.
func (f *Facts) shapedUnits(n *onnxpb.NodeProto, in func(int) []int64, depth int, shapeMode bool) []int64 {
	si := 1
	if n.GetOpType() == "ConstantOfShape" {
		si = 0
	}
	target := f.shapeUnits(Input(n, si), depth+1)
	if target == nil {
		return nil
	}
	out := UnitDims(target)
	switch n.GetOpType() {
	case "Reshape":
		x := f.usize(Input(n, 0), depth+1)
		for i, t := range target {
			if t == 0 && x != nil && i < len(x) {
				out[i] = x[i]
			}
		}
	case "ConstantOfShape":
		if !shapeMode {
			for i := range out {
				out[i] = 1 // one value everywhere
			}
		}
	case "Expand":
		if !shapeMode {
			// Values vary only where the input varies.
			x := in(0)
			if x == nil || len(x) > len(out) {
				return nil
			}
			res := make([]int64, len(out))
			for i := range res {
				res[i] = 1
			}
			copy(res[len(out)-len(x):], x)
			return res
		}
		return BroadcastDims(in(0), out)
	}
	return out
}

// concatUnits: the inputs broadcast, varying along the concatenated axis.
func (f *Facts) concatUnits(n *onnxpb.NodeProto, in func(int) []int64, depth int, shapeMode bool) []int64 {
	var ss [][]int64
	r := -1
	for i := range n.Input {
		x := in(i)
		if x == nil || (r >= 0 && len(x) != r) {
			return nil
		}
		r = len(x)
		ss = append(ss, x)
	}
	if r <= 0 {
		return nil
	}
	axis := int(onnx.AttrInt(n, "axis", 0))
	if axis < 0 {
		axis += r
	}
	if axis < 0 || axis >= r {
		return nil
	}
	out := BroadcastDims(ss...)
	if len(ss) > 1 {
		out[axis] = -1
	}
	return out
}

func (f *Facts) gatherNDUnits(n *onnxpb.NodeProto, in func(int) []int64, depth int, shapeMode bool) []int64 {
	// Output = indices.shape[:-1] + data.shape[batch_dims+last:].
	data, idx := in(0), in(1)
	if data == nil || len(idx) < 1 || onnx.AttrInt(n, "batch_dims", 0) != 0 {
		return nil
	}
	last := f.usize(Input(n, 1), depth+1)
	if len(last) != len(idx) {
		return nil
	}
	// The depth of each index tuple must be known: it is the size of
	// the last axis, read from the Concat that built it.
	k := f.tupleLen(Input(n, 1))
	if k <= 0 || k > len(data) {
		return nil
	}
	return append(append([]int64{}, idx[:len(idx)-1]...), data[k:]...)
}

// transposeUnits: the input's units permuted.
func (f *Facts) transposeUnits(n *onnxpb.NodeProto, in func(int) []int64, depth int, shapeMode bool) []int64 {
	x := in(0)
	p := onnx.AttrInts(n, "perm")
	if x == nil {
		return nil
	}
	if p == nil {
		out := make([]int64, len(x))
		for i := range x {
			out[i] = x[len(x)-1-i]
		}
		return out
	}
	ip := make([]int, len(p))
	for i, v := range p {
		ip[i] = int(v)
	}
	return Permute(x, ip)
}

func boolIndex(b bool) int {
	if b {
		return 1
	}
	return 0
}

// shapeUnits returns the entries of a shape tensor (1 where the size is
// one, −1 unknown, 0 "copy" for Reshape), built from constants, Shape(y)
// (y's shape-mode axes) and Concat of such pieces. It walks like
// shapeValue (values.go), which gives sizes rather than units and reads
// Concat's dynamic pieces differently.
func (f *Facts) shapeUnits(v string, depth int) []int64 {
	if depth > MaxDepth {
		return nil
	}
	if s, ok := Ints(f.Ix, v); ok {
		return s
	}
	n := f.Ix.Producer[v]
	if n == nil || !DefaultDomain(n) {
		return nil
	}
	switch n.GetOpType() {
	case "Shape":
		x := f.usize(Input(n, 0), depth+1)
		if x == nil {
			return nil
		}
		r := int64(len(x))
		lo, hi := onnx.AttrInt(n, "start", 0), onnx.AttrInt(n, "end", r)
		if lo < 0 {
			lo += r
		}
		if hi < 0 {
			hi += r
		}
		lo, hi = max(0, min(lo, r)), max(0, min(hi, r))
		if lo > hi {
			return nil
		}
		return x[lo:hi]
	case "Cast", "Identity":
		return f.shapeUnits(Input(n, 0), depth+1)
	case "Concat":
		var out []int64
		for _, in := range n.Input {
			p := f.shapeUnits(in, depth+1)
			if p == nil {
				// A dynamic scalar piece (Unsqueeze of a dim).
				if q := f.Ix.Producer[in]; q != nil && q.GetOpType() == "Unsqueeze" {
					p = []int64{-1}
				} else {
					return nil
				}
			}
			out = append(out, p...)
		}
		return out
	}
	return nil
}

// rangeAtLeast reports whether v is an Unsqueeze/Reshape/Cast of
// Range(start, limit, delta) with constant start ≥ c (> c if strict) and
// delta > 0.
func (f *Facts) rangeAtLeast(v string, c float64, strict bool) bool {
	for i := 0; i < 8; i++ {
		n := f.Ix.Producer[v]
		if n == nil || !DefaultDomain(n) {
			return false
		}
		switch n.GetOpType() {
		case "Unsqueeze", "Reshape", "Cast", "Identity":
			v = Input(n, 0)
			continue
		case "Range":
			s, ok1 := f.Scalar(Input(n, 0))
			d, ok2 := f.Scalar(Input(n, 2))
			if !ok1 || !ok2 || d <= 0 {
				return false
			}
			if strict {
				return s > c
			}
			return s >= c
		}
		return false
	}
	return false
}

// tupleLen returns the size of the last axis of an index tensor built by
// Concat along the last axis of Unsqueeze(·, −1) pieces, or −1.
func (f *Facts) tupleLen(v string) int {
	n := f.Ix.Producer[v]
	if n == nil || n.GetOpType() != "Concat" {
		if t, ok := Constant(f.Ix, v); ok && len(t.Shape) > 0 {
			return t.Shape[len(t.Shape)-1]
		}
		return -1
	}
	x := f.usize(v, 0)
	if x == nil {
		return -1
	}
	axis := int(onnx.AttrInt(n, "axis", 0))
	if axis != -1 && axis != len(x)-1 {
		return -1
	}
	total := 0
	for _, in := range n.Input {
		s := f.usize(in, 0)
		if len(s) != len(x) || s[len(s)-1] != 1 {
			return -1
		}
		total++
	}
	return total
}

// declaredUnits returns the size-one axes of v's declared shape.
func (f *Facts) declaredUnits(v string) []int64 {
	if vi, ok := f.Ix.ValueInfo[v]; ok {
		if _, sh, ok := onnx.TensorType(vi); ok && sh != nil {
			d := make([]int64, len(sh))
			for i, x := range sh {
				d[i] = x.Value
			}
			return UnitDims(d)
		}
	}
	return nil
}

// FromRange reports whether v is computed from a Range (an index vector).
func (f *Facts) FromRange(v string) bool { return f.fromRange(v, 0) }

func (f *Facts) fromRange(v string, depth int) bool {
	if depth > MaxDepth {
		return false
	}
	return cached(f.ranges, v, func() bool { return f.fromRangeWalk(v, depth) })
}

func (f *Facts) fromRangeWalk(v string, depth int) bool {
	n := f.Ix.Producer[v]
	if n == nil {
		return false
	}
	switch n.GetOpType() {
	case "Range":
		return true
	case "Shape", "Size", "Constant", "ConstantOfShape":
		return false
	}
	for _, in := range n.Input {
		if in != "" && f.fromRange(in, depth+1) {
			return true
		}
	}
	return false
}
