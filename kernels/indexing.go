package kernels

import (
	"slices"
	"sort"

	"github.com/linearize/linearize/onnx"
)

// Index-driven ops: GatherND, ScatterND, ScatterElements, TopK, Compress.

// ndIndex validates the index tuples of GatherND/ScatterND: it returns,
// per tuple (in order), the element offset of the addressed slice within
// data, and the slice size.
func (ctx *Context) ndIndex(data []int, it *onnx.Tensor, batch int) (offs []int, slice int, err error) {
	idx, err := ctx.intsInput(it, "indices")
	if err != nil {
		return nil, 0, err
	}
	q := len(it.Shape)
	if q < 1 || batch < 0 || batch >= q || batch > len(data) {
		return nil, 0, ctx.errf("indices of shape %v do not fit batch_dims %d", it.Shape, batch)
	}
	last := it.Shape[q-1]
	if batch+last > len(data) {
		return nil, 0, ctx.errf("index tuples of length %d exceed data rank %d", last, len(data))
	}
	for k := range batch {
		if it.Shape[k] != data[k] {
			return nil, 0, ctx.errf("batch dimension %d differs: indices %v, data %v", k, it.Shape, data)
		}
	}
	ds := stridesOf(data)
	slice = prod(data[batch+last:])
	perBatch := prod(it.Shape[batch : q-1])
	blk := prod(data[batch:])
	ntup := prod(it.Shape[:q-1])
	offs = make([]int, ntup)
	for j := range ntup {
		off := (j / max(perBatch, 1)) * blk
		for k := range last {
			v := idx[j*last+k]
			d := int64(data[batch+k])
			if v < -d || v >= d {
				return nil, 0, ctx.errf("index %d out of range for dimension %d of size %d", v, batch+k, d)
			}
			if v < 0 {
				v += d
			}
			off += int(v) * ds[batch+k]
		}
		offs[j] = off
	}
	return offs, slice, nil
}

func gatherND(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 2, 2); err != nil {
		return nil, err
	}
	x, it := in[0], in[1]
	b := int(ctx.attrInt("batch_dims", 0))
	offs, slice, err := ctx.ndIndex(x.Shape, it, b)
	if err != nil {
		return nil, err
	}
	q := len(it.Shape)
	shape := append(cloneShape(it.Shape[:q-1]), x.Shape[b+it.Shape[q-1]:]...)
	out, err := ctx.newTensor(x.DType, shape)
	if err != nil {
		return nil, err
	}
	for j, off := range offs {
		if err := ctx.run(out, x, walk{Shape: []int{slice}, SrcOff: off, SrcStrides: []int{1}, DstOff: j * slice, DstStrides: []int{1}}); err != nil {
			return nil, err
		}
	}
	return []*onnx.Tensor{out}, nil
}

// reduceInto combines src into dst elementwise: dst = dst ⊕ src.
func reduceInto[T number](dst, src []T, how string) {
	for i, v := range src {
		switch how {
		case "add":
			dst[i] += v
		case "mul":
			dst[i] *= v
		case "max":
			dst[i] = max(dst[i], v)
		case "min":
			dst[i] = min(dst[i], v)
		}
	}
}

// scatterRun writes n elements of upd (from uo) into out (at oo), replacing
// or reducing.
func (ctx *Context) scatterRun(out, upd *onnx.Tensor, oo, uo, n int, how string) error {
	if how == "none" {
		return ctx.run(out, upd, walk{Shape: []int{n}, SrcOff: uo, SrcStrides: []int{1}, DstOff: oo, DstStrides: []int{1}})
	}
	switch d := out.Data.(type) {
	case []float32:
		reduceInto(d[oo:oo+n], upd.Floats()[uo:uo+n], how)
	case []float64:
		reduceInto(d[oo:oo+n], upd.Data.([]float64)[uo:uo+n], how)
	case []int32:
		reduceInto(d[oo:oo+n], upd.Data.([]int32)[uo:uo+n], how)
	case []int64:
		reduceInto(d[oo:oo+n], upd.Int64s()[uo:uo+n], how)
	default:
		return ctx.errf("reduction %q is not supported for %s", how, onnx.TypeName(out.DType))
	}
	return nil
}

// scatterArgs reads a scatter op's data, indices and updates, and its
// reduction attribute.
func (ctx *Context) scatterArgs(in []*onnx.Tensor) (x, indices, updates *onnx.Tensor, reduction string, err error) {
	if err := ctx.checkInputs(in, 3, 3); err != nil {
		return nil, nil, nil, "", err
	}
	how := ctx.attrString("reduction", "none")
	switch how {
	case "none", "add", "mul", "max", "min":
		return in[0], in[1], in[2], how, nil
	}
	return nil, nil, nil, "", ctx.errf("unsupported reduction %q", how)
}

func scatterND(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	x, it, upd, how, err := ctx.scatterArgs(in)
	if err != nil {
		return nil, err
	}
	if upd.DType != x.DType {
		return nil, ctx.errf("updates are %s, data %s", onnx.TypeName(upd.DType), onnx.TypeName(x.DType))
	}
	offs, slice, err := ctx.ndIndex(x.Shape, it, 0)
	if err != nil {
		return nil, err
	}
	q := len(it.Shape)
	want := append(cloneShape(it.Shape[:q-1]), x.Shape[it.Shape[q-1]:]...)
	if !slices.Equal(upd.Shape, want) {
		return nil, ctx.errf("updates shape %v, want %v", upd.Shape, want)
	}
	out := x.Clone()
	for j, off := range offs {
		if err := ctx.scatterRun(out, upd, off, j*slice, slice, how); err != nil {
			return nil, err
		}
	}
	return []*onnx.Tensor{out}, nil
}

func scatterElements(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	x, it, upd, how, err := ctx.scatterArgs(in)
	if err != nil {
		return nil, err
	}
	idx, err := ctx.intsInput(it, "indices")
	if err != nil {
		return nil, err
	}
	r := len(x.Shape)
	if upd.DType != x.DType || !slices.Equal(upd.Shape, it.Shape) || len(it.Shape) != r {
		return nil, ctx.errf("updates %s and indices %v must match in shape, with data's rank and type (%s)", upd, it.Shape, x)
	}
	axis, err := ctx.normAxis(ctx.attrInt("axis", 0), r)
	if err != nil {
		return nil, err
	}
	for k := range r {
		if k != axis && it.Shape[k] > x.Shape[k] {
			return nil, ctx.errf("indices shape %v exceeds data shape %v", it.Shape, x.Shape)
		}
	}
	out := x.Clone()
	xs := stridesOf(x.Shape)
	d := x.Shape[axis]
	pos := make([]int, r)
	for i, v := range idx {
		a, err := ctx.axisIndex(v, axis, d)
		if err != nil {
			return nil, err
		}
		dst := 0
		for k := range r {
			p := pos[k]
			if k == axis {
				p = a
			}
			dst += p * xs[k]
		}
		if err := ctx.scatterRun(out, upd, dst, i, 1, how); err != nil {
			return nil, err
		}
		nextIndex(pos, it.Shape)
	}
	return []*onnx.Tensor{out}, nil
}

func topK(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	x, kv, err := ctx.dataAndInts(in, "K")
	if err != nil {
		return nil, err
	}
	if len(kv) != 1 {
		return nil, ctx.errf("K must have one element")
	}
	r := len(x.Shape)
	axis, err := ctx.normAxis(ctx.attrInt("axis", -1), r)
	if err != nil {
		return nil, err
	}
	d := x.Shape[axis]
	k := int(kv[0])
	if k < 0 || k > d {
		return nil, ctx.errf("K=%d out of range for axis of size %d", k, d)
	}
	largest := ctx.attrInt("largest", 1) != 0
	vals, err := x.AsFloat64s()
	if err != nil || x.DType == onnx.Bool {
		return nil, ctx.errf("input must be numeric, got %s", x)
	}
	outer, inner := prod(x.Shape[:axis]), prod(x.Shape[axis+1:])
	shape := cloneShape(x.Shape)
	shape[axis] = k
	values, err := ctx.newTensor(x.DType, shape)
	if err != nil {
		return nil, err
	}
	indices := make([]int64, prod(shape))
	order := make([]int, d)
	for o := range outer {
		for i := range inner {
			base := o*d*inner + i
			for j := range order {
				order[j] = j
			}
			// Ties keep the lower index first.
			sort.SliceStable(order, func(a, b int) bool {
				va, vb := vals[base+order[a]*inner], vals[base+order[b]*inner]
				if largest {
					return va > vb
				}
				return va < vb
			})
			for j := range k {
				p := (o*k+j)*inner + i
				indices[p] = int64(order[j])
				if err := ctx.run(values, x, walk{Shape: []int{}, SrcOff: base + order[j]*inner, DstOff: p}); err != nil {
					return nil, err
				}
			}
		}
	}
	return []*onnx.Tensor{values, onnx.NewInt64(cloneShape(shape), indices)}, nil
}

func compress(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 2, 2); err != nil {
		return nil, err
	}
	x, c := in[0], in[1]
	if c.DType != onnx.Bool || len(c.Shape) != 1 {
		return nil, ctx.errf("condition must be a 1-D bool tensor, got %s", c)
	}
	cond := c.Bools()
	src := x
	axis := 0
	if ctx.hasAttr("axis") {
		a, err := ctx.normAxis(ctx.attrInt("axis", 0), len(x.Shape))
		if err != nil {
			return nil, err
		}
		axis = a
	} else {
		src = view(x, []int{x.Len()})
	}
	d := src.Shape[axis]
	if len(cond) > d {
		return nil, ctx.errf("condition has %d elements, axis has %d", len(cond), d)
	}
	outer, inner := prod(src.Shape[:axis]), prod(src.Shape[axis+1:])
	var keep []int
	for j, b := range cond {
		if b {
			keep = append(keep, j)
		}
	}
	shape := cloneShape(src.Shape)
	shape[axis] = len(keep)
	out, err := ctx.newTensor(x.DType, shape)
	if err != nil {
		return nil, err
	}
	for n, j := range keep {
		w := walk{Shape: []int{outer, inner}, SrcOff: j * inner, SrcStrides: []int{d * inner, 1}, DstOff: n * inner, DstStrides: []int{len(keep) * inner, 1}}
		if err := ctx.run(out, src, w); err != nil {
			return nil, err
		}
	}
	return []*onnx.Tensor{out}, nil
}
