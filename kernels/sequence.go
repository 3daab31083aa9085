package kernels

import (
	"math"

	"github.com/linearize/linearize/onnx"
)

// Ops that generate or scan sequences: Range, CumSum, Trilu, NonZero,
// OneHot.

func init() {
	Register("", "Range", 11, rangeOp)
	Register("", "CumSum", 11, cumSum)
	Register("", "Trilu", 14, trilu)
	Register("", "NonZero", 9, nonZero)
	Register("", "OneHot", 9, oneHot)
}

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
	var data any
	switch dt {
	case onnx.Float:
		s, l, d := in[0].Floats()[0], in[1].Floats()[0], in[2].Floats()[0]
		if d == 0 {
			return nil, ctx.errf("delta is 0")
		}
		data = rangeT(s, l, d)
	case onnx.Double:
		s, l, d := in[0].Data.([]float64)[0], in[1].Data.([]float64)[0], in[2].Data.([]float64)[0]
		if d == 0 {
			return nil, ctx.errf("delta is 0")
		}
		data = rangeT(s, l, d)
	case onnx.Int16, onnx.Int32, onnx.Int64:
		v := make([]int64, 3)
		for i, t := range in {
			x, _ := t.AsInt64s()
			v[i] = x[0]
		}
		if v[2] == 0 {
			return nil, ctx.errf("delta is 0")
		}
		r := rangeT(v[0], v[1], v[2])
		if r == nil {
			return nil, ctx.errf("range has more than %d elements", MaxElements)
		}
		switch dt {
		case onnx.Int16:
			data = convertSlice[int16](r)
		case onnx.Int32:
			data = convertSlice[int32](r)
		default:
			data = r
		}
	default:
		return nil, ctx.errf("unsupported type %s", onnx.TypeName(dt))
	}
	t := &onnx.Tensor{DType: dt, Data: data}
	t.Shape = []int{dataLenOf(data)}
	if rangeTooLong(data) {
		return nil, ctx.errf("range has more than %d elements", MaxElements)
	}
	return []*onnx.Tensor{t}, nil
}

func dataLenOf(v any) int {
	switch d := v.(type) {
	case []float32:
		return len(d)
	case []float64:
		return len(d)
	case []int16:
		return len(d)
	case []int32:
		return len(d)
	case []int64:
		return len(d)
	}
	return 0
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
	if err := ctx.checkInputs(in, 2, 2); err != nil {
		return nil, err
	}
	x := in[0]
	av, err := ctx.intsInput(in[1], "axis")
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
	var data any
	// One case per dtype, like argT's switch in reduce.go (see intArith
	// in binary.go).
	switch v := x.Data.(type) {
	case []float32:
		data = cumSumT(v, outer, d, inner, ex, rev)
	case []float64:
		data = cumSumT(v, outer, d, inner, ex, rev)
	case []int32:
		data = cumSumT(v, outer, d, inner, ex, rev)
	case []int64:
		data = cumSumT(v, outer, d, inner, ex, rev)
	case []uint32:
		data = cumSumT(v, outer, d, inner, ex, rev)
	case []uint64:
		data = cumSumT(v, outer, d, inner, ex, rev)
	default:
		return nil, ctx.errf("unsupported type %s", onnx.TypeName(x.DType))
	}
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
	if err := selectInto(out.Data, zero.Data, keep); err != nil {
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

// rangeTooLong reports a nil slice from rangeT (which stands for a range
// longer than MaxElements; an empty range is a non-nil empty slice).
func rangeTooLong(v any) bool {
	switch d := v.(type) {
	case []float32:
		return d == nil
	case []float64:
		return d == nil
	case []int16:
		return d == nil
	case []int32:
		return d == nil
	case []int64:
		return d == nil
	}
	return false
}
