package kernels

import (
	"math"

	"github.com/linearize/linearize/onnx"
)

// Ops that generate or scan sequences: Range, CumSum, Trilu, NonZero,
// OneHot.

func rangeT[T number](start, limit, delta T) []T {
	f := math.Max(math.Ceil((float64(limit)-float64(start))/float64(delta)), 0)
	if !(f <= MaxElements) {
		return nil
	}
	n := int(f)
	out := make([]T, n)
	v := start
	for i := range out {
		out[i] = v
		v += delta
	}
	return out
}

func rangeOp(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 3, 3); err != nil {
		return nil, err
	}
	dt := in[0].DType
	for i, t := range in {
		if t.Len() != 1 || t.DType != dt {
			return nil, ctx.errf("input %d must be a scalar of type %s, got %s", i, onnx.TypeName(dt), t)
		}
	}
	if err := ctx.rangeBudget(in, dt); err != nil {
		return nil, err
	}
	n, err := ctx.numericFor(dt, dtypesOf(onnx.Float, onnx.Double, onnx.Int16, onnx.Int32, onnx.Int64))
	if err != nil {
		return nil, err
	}
	return n.rangeOf(ctx, dt, in)
}

// rangeTensor is the Range output of type dt from start to limit by delta.
func rangeTensor[T number](ctx *Context, dt onnx.DataType, start, limit, delta T) ([]*onnx.Tensor, error) {
	if delta == 0 {
		return nil, ctx.errf("delta is 0")
	}
	r := rangeT(start, limit, delta)
	if r == nil {
		return nil, ctx.errf("range has more than %d elements", MaxElements)
	}
	return []*onnx.Tensor{{DType: dt, Shape: []int{len(r)}, Data: r}}, nil
}

func cumSumT[T number](x []T, outer, d, inner int, exclusive, reverse bool) []T {
	out := make([]T, len(x))
	for o := range outer {
		for i := range inner {
			base := o*d*inner + i
			var acc T
			for jj := range d {
				j := jj
				if reverse {
					j = d - 1 - jj
				}
				p := base + j*inner
				if exclusive {
					out[p] = acc
					acc += x[p]
				} else {
					acc += x[p]
					out[p] = acc
				}
			}
		}
	}
	return out
}

func cumSum(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	x, av, err := ctx.dataAndInts(in, "axis")
	if err != nil {
		return nil, err
	}
	if len(av) != 1 {
		return nil, ctx.errf("axis must be a scalar")
	}
	axis, err := ctx.normAxis(av[0], len(x.Shape))
	if err != nil {
		return nil, err
	}
	outer, d, inner := prod(x.Shape[:axis]), x.Shape[axis], prod(x.Shape[axis+1:])
	ex, rev := ctx.attrInt("exclusive", 0) != 0, ctx.attrInt("reverse", 0) != 0
	n, err := ctx.numericFor(x.DType, dtypesOf(onnx.Float, onnx.Double, onnx.Int32, onnx.Int64, onnx.Uint32, onnx.Uint64))
	if err != nil {
		return nil, err
	}
	data := n.cumSum(x.Data, outer, d, inner, ex, rev)
	return []*onnx.Tensor{{DType: x.DType, Shape: cloneShape(x.Shape), Data: data}}, nil
}

func trilu(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 1, 2); err != nil {
		return nil, err
	}
	x := in[0]
	r := len(x.Shape)
	if r < 2 {
		return nil, ctx.errf("input must have rank ≥ 2, got %v", x.Shape)
	}
	k := int64(0)
	if t := opt(in, 1); t != nil {
		v, err := ctx.intsInput(t, "k")
		if err != nil {
			return nil, err
		}
		if len(v) != 1 {
			return nil, ctx.errf("k must be a scalar")
		}
		k = v[0]
	}
	upper := ctx.attrInt("upper", 1) != 0
	rows, cols := x.Shape[r-2], x.Shape[r-1]
	keep := make([]bool, x.Len())
	for i := range keep {
		c := int64(i % cols)
		row := int64((i / cols) % max(rows, 1))
		if upper {
			keep[i] = c-row >= k
		} else {
			keep[i] = c-row <= k
		}
	}
	out, err := ctx.newTensor(x.DType, x.Shape)
	if err != nil {
		return nil, err
	}
	// Start from x and zero what is not kept.
	if err := ctx.run(out, x, walk{Shape: []int{x.Len()}, SrcStrides: []int{1}, DstStrides: []int{1}}); err != nil {
		return nil, err
	}
	zero, err := ctx.newTensor(x.DType, x.Shape)
	if err != nil {
		return nil, err
	}
	if err := selectInto(out, zero, keep); err != nil {
		return nil, ctx.errf("%v", err)
	}
	return []*onnx.Tensor{out}, nil
}

func nonZero(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 1, 1); err != nil {
		return nil, err
	}
	x := in[0]
	v, err := x.AsFloat64s()
	if err != nil {
		return nil, ctx.errf("%v", err)
	}
	r := len(x.Shape)
	xs := stridesOf(x.Shape)
	var hits []int
	for i, e := range v {
		if e != 0 {
			hits = append(hits, i)
		}
	}
	out := make([]int64, r*len(hits))
	for j, i := range hits {
		for k := range r {
			out[k*len(hits)+j] = int64((i / xs[k]) % x.Shape[k])
		}
	}
	return []*onnx.Tensor{onnx.NewInt64([]int{r, len(hits)}, out)}, nil
}

func oneHot(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 3, 3); err != nil {
		return nil, err
	}
	idx, err := in[0].AsFloat64s()
	if err != nil {
		return nil, ctx.errf("indices: %v", err)
	}
	dv, err := in[1].AsFloat64s()
	if err != nil || len(dv) != 1 {
		return nil, ctx.errf("depth must be a numeric scalar")
	}
	depth := int(dv[0])
	if depth <= 0 {
		return nil, ctx.errf("depth must be positive, got %v", dv[0])
	}
	vals := in[2]
	if vals.Len() != 2 {
		return nil, ctx.errf("values must have two elements, got %v", vals.Shape)
	}
	r := len(in[0].Shape) + 1
	axis, err := ctx.normAxis(ctx.attrInt("axis", -1), r)
	if err != nil {
		return nil, err
	}
	shape := append(append(cloneShape(in[0].Shape[:axis]), depth), in[0].Shape[axis:]...)
	out, err := ctx.newTensor(vals.DType, shape)
	if err != nil {
		return nil, err
	}
	// Fill with off, then write on at each hot position.
	ws := make([]int, len(shape))
	if err := ctx.run(out, vals, walk{Shape: shape, SrcStrides: ws, DstStrides: stridesOf(shape)}); err != nil {
		return nil, err
	}
	inner := prod(in[0].Shape[axis:])
	for i, f := range idx {
		j := int(f)
		if j < 0 {
			j += depth
		}
		if j < 0 || j >= depth {
			continue
		}
		o, p := i/inner, i%inner
		dst := (o*depth+j)*inner + p
		if err := ctx.run(out, vals, walk{Shape: []int{}, SrcOff: 1, DstOff: dst}); err != nil {
			return nil, err
		}
	}
	return []*onnx.Tensor{out}, nil
}
