package kernels

import (
	"math"

	"github.com/linearize/linearize/onnx"
)

// Reductions over axes, and ArgMax/ArgMin.

func init() {
	for _, k := range []string{"Sum", "Mean", "Max", "Min", "Prod", "L1", "L2", "LogSum", "LogSumExp", "SumSquare"} {
		from := int64(18) // opset from which axes is an input
		if k == "Sum" {
			from = 13
		}
		Register("", "Reduce"+k, 1, reduceKernel(k, from))
	}
	Register("", "ArgMax", 1, argKernel(true))
	Register("", "ArgMin", 1, argKernel(false))
}

// reduceLayout permutes x so the reduced axes come last and returns the
// data as rows: K rows of R elements.
func (ctx *Context) reduceLayout(x *onnx.Tensor, red []bool) (*onnx.Tensor, int, int, error) {
	r := len(x.Shape)
	K, R := 1, 1
	trailing := true
	seenRed := false
	for k := range r {
		if red[k] {
			R *= x.Shape[k]
			seenRed = true
		} else {
			K *= x.Shape[k]
			if seenRed && x.Shape[k] != 1 {
				trailing = false
			}
		}
	}
	if trailing {
		return x, K, R, nil
	}
	xs := stridesOf(x.Shape)
	var shape, src []int
	for _, want := range []bool{false, true} {
		for k := range r {
			if red[k] == want {
				shape = append(shape, x.Shape[k])
				src = append(src, xs[k])
			}
		}
	}
	y, err := ctx.newTensor(x.DType, shape)
	if err != nil {
		return nil, 0, 0, err
	}
	return y, K, R, ctx.run(y, x, walk{Shape: shape, SrcStrides: src, DstStrides: stridesOf(shape)})
}

// extreme returns the maximum (isMax) or the minimum of row, or its first
// NaN.
func extreme[T number](row []T, isMax bool) T {
	m := row[0]
	for _, e := range row {
		if e != e {
			return e
		}
		if (isMax && e > m) || (!isMax && e < m) {
			m = e
		}
	}
	return m
}

// accumulate returns, in A, the product (Prod), the sum of absolute
// values (L1) or of squares (L2, SumSquare), or else the sum of row.
func accumulate[A int64 | float64, T number](row []T, kind string) A {
	var v A
	switch kind {
	case "Prod":
		v = 1
		for _, e := range row {
			v *= A(e)
		}
	case "L1":
		for _, e := range row {
			v += max(A(e), -A(e))
		}
	case "L2", "SumSquare":
		for _, e := range row {
			v += A(e) * A(e)
		}
	default:
		for _, e := range row {
			v += A(e)
		}
	}
	return v
}

func reduceFloat[T float](x []T, K, R int, kind string) []T {
	out := make([]T, K)
	for i := range K {
		row := x[i*R : i*R+R]
		var v float64
		switch kind {
		case "Max", "Min":
			out[i] = extreme(row, kind == "Max")
			continue
		case "LogSumExp":
			m := math.Inf(-1)
			for _, e := range row {
				m = max(m, float64(e))
			}
			if math.IsInf(m, 0) {
				v = m
				break
			}
			for _, e := range row {
				v += math.Exp(float64(e) - m)
			}
			v = m + math.Log(v)
		default:
			v = accumulate[float64](row, kind)
		}
		switch kind {
		case "Mean":
			v /= float64(R)
		case "LogSum":
			v = math.Log(v)
		case "L2":
			v = math.Sqrt(v)
		}
		out[i] = T(v)
	}
	return out
}

func reduceInt[T integer](x []T, K, R int, kind string) []T {
	out := make([]T, K)
	for i := range K {
		row := x[i*R : i*R+R]
		switch kind {
		case "Max", "Min":
			out[i] = extreme(row, kind == "Max")
		case "Mean":
			out[i] = T(accumulate[int64](row, kind) / int64(R))
		case "Sum", "Prod", "L1", "SumSquare":
			out[i] = T(accumulate[int64](row, kind))
		default: // L2, LogSum, LogSumExp: through float64
			f := make([]float64, len(row))
			for j, e := range row {
				f[j] = float64(e)
			}
			out[i] = T(math.Round(reduceFloat(f, 1, R, kind)[0]))
		}
	}
	return out
}

func reduceKernel(kind string, axesInputFrom int64) Kernel {
	var k Kernel
	k = func(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
		if out, done, err := ctx.halfPrologue(in, 1, 2, k); done {
			return out, err
		}
		x := in[0]
		red, err := ctx.reducedAxes(in, axesInputFrom)
		if err != nil {
			return nil, err
		}
		if red == nil { // no axes, and noop_with_empty_axes
			return []*onnx.Tensor{view(x, cloneShape(x.Shape))}, nil
		}
		shape := reducedShape(x.Shape, red, ctx.attrInt("keepdims", 1) != 0)
		y, K, R, err := ctx.reduceLayout(x, red)
		if err != nil {
			return nil, err
		}
		if R == 0 && K > 0 {
			return ctx.emptyReduction(x.DType, shape, K, kind)
		}
		n, err := ctx.numericFor(x.DType, reduceTypes)
		if err != nil {
			return nil, err
		}
		return []*onnx.Tensor{{DType: x.DType, Shape: shape, Data: n.reduceRows(y.Data, K, R, kind)}}, nil
	}
	return k
}

// reducedAxes marks the axes of in[0] a reduction reduces: those of the
// axes input (from opset axesInputFrom) or attribute, or all when none
// are given; nil (and no error) when none are given and
// noop_with_empty_axes is set.
func (ctx *Context) reducedAxes(in []*onnx.Tensor, axesInputFrom int64) ([]bool, error) {
	r := len(in[0].Shape)
	axes, _, err := ctx.axesArg(in, 1, axesInputFrom)
	if err != nil {
		return nil, err
	}
	red := make([]bool, r)
	if len(axes) == 0 {
		if ctx.attrInt("noop_with_empty_axes", 0) != 0 {
			return nil, nil
		}
		for i := range red {
			red[i] = true
		}
	}
	for _, a := range axes {
		k, err := ctx.normAxis(a, r)
		if err != nil {
			return nil, err
		}
		red[k] = true
	}
	return red, nil
}

// reducedShape is the shape of a reduction of shape over the axes red:
// without them, or with them as 1 when keep is set.
func reducedShape(shape []int, red []bool, keep bool) []int {
	out := []int{}
	for k, d := range shape {
		if !red[k] {
			out = append(out, d)
		} else if keep {
			out = append(out, 1)
		}
	}
	return out
}

// emptyReduction returns the reduction of K empty rows: the identity of
// the reduction (0, 1 for Prod, −∞ for Max, LogSum and LogSumExp, +∞ for
// Min) in every element.
func (ctx *Context) emptyReduction(dt onnx.DataType, shape []int, K int, kind string) ([]*onnx.Tensor, error) {
	out, err := ctx.newTensor(dt, shape)
	if err != nil {
		return nil, err
	}
	var v float64
	switch kind {
	case "Prod":
		v = 1
	case "Max", "LogSum", "LogSumExp":
		v = math.Inf(-1)
	case "Min":
		v = math.Inf(1)
	}
	if v != 0 {
		for i := range K {
			setFloat(out, i, v)
		}
	}
	return []*onnx.Tensor{out}, nil
}

// reduceTypes are the types Reduce* take (halves are widened first).
var reduceTypes = dtypesOf(onnx.Float, onnx.Double, onnx.Int32, onnx.Int64, onnx.Int8, onnx.Uint8, onnx.Uint32, onnx.Uint64)

func argT[T number](x []T, outer, d, inner int, isMax, last bool) []int64 {
	out := make([]int64, outer*inner)
	for o := range outer {
		for i := range inner {
			base := o*d*inner + i
			best, bi := x[base], 0
			for j := 1; j < d; j++ {
				v := x[base+j*inner]
				better := (isMax && v > best) || (!isMax && v < best)
				if better || (last && v == best) {
					best, bi = v, j
				}
			}
			out[o*inner+i] = int64(bi)
		}
	}
	return out
}

func argKernel(isMax bool) Kernel {
	var k Kernel
	k = func(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
		if err := ctx.checkInputs(in, 1, 1); err != nil {
			return nil, err
		}
		x := in[0]
		if x.DType == onnx.Float16 || x.DType == onnx.BFloat16 {
			return k(ctx, []*onnx.Tensor{toFloat32(x)})
		}
		r := len(x.Shape)
		axis, err := ctx.normAxis(ctx.attrInt("axis", 0), r)
		if err != nil {
			return nil, err
		}
		d := x.Shape[axis]
		if d == 0 {
			return nil, ctx.errf("cannot take the arg of an empty axis")
		}
		outer, inner := prod(x.Shape[:axis]), prod(x.Shape[axis+1:])
		last := ctx.attrInt("select_last_index", 0) != 0
		n, err := ctx.numericFor(x.DType, dtypesOf(onnx.Float, onnx.Double, onnx.Int32, onnx.Int64, onnx.Int8, onnx.Uint8))
		if err != nil {
			return nil, err
		}
		data := n.argIndex(x.Data, outer, d, inner, isMax, last)
		shape := cloneShape(x.Shape)
		if ctx.attrInt("keepdims", 1) != 0 {
			shape[axis] = 1
		} else {
			shape = append(shape[:axis], shape[axis+1:]...)
		}
		return []*onnx.Tensor{onnx.NewInt64(shape, data)}, nil
	}
	return k
}
