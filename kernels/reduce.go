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

func reduceFloat[T float](x []T, K, R int, kind string) []T {
	out := make([]T, K)
	for i := range K {
		row := x[i*R : i*R+R]
		var v float64
		switch kind {
		case "Max", "Min":
			m := row[0]
			for _, e := range row {
				if e != e {
					m = e
					break
				}
				if (kind == "Max" && e > m) || (kind == "Min" && e < m) {
					m = e
				}
			}
			out[i] = m
			continue
		case "Sum", "Mean", "LogSum":
			for _, e := range row {
				v += float64(e)
			}
			if kind == "Mean" {
				v /= float64(R)
			} else if kind == "LogSum" {
				v = math.Log(v)
			}
		case "Prod":
			v = 1
			for _, e := range row {
				v *= float64(e)
			}
		case "L1":
			for _, e := range row {
				v += math.Abs(float64(e))
			}
		case "L2", "SumSquare":
			for _, e := range row {
				v += float64(e) * float64(e)
			}
			if kind == "L2" {
				v = math.Sqrt(v)
			}
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
		}
		out[i] = T(v)
	}
	return out
}

func reduceInt[T integer](x []T, K, R int, kind string) []T {
	out := make([]T, K)
	for i := range K {
		row := x[i*R : i*R+R]
		var v int64
		switch kind {
		case "Max", "Min":
			m := row[0]
			for _, e := range row {
				if (kind == "Max" && e > m) || (kind == "Min" && e < m) {
					m = e
				}
			}
			out[i] = m
			continue
		case "Sum", "Mean":
			for _, e := range row {
				v += int64(e)
			}
			if kind == "Mean" {
				v /= int64(R)
			}
		case "Prod":
			v = 1
			for _, e := range row {
				v *= int64(e)
			}
		case "L1":
			for _, e := range row {
				v += max(int64(e), -int64(e))
			}
		case "SumSquare":
			for _, e := range row {
				v += int64(e) * int64(e)
			}
		default: // L2, LogSum, LogSumExp: through float64
			f := make([]float64, len(row))
			for j, e := range row {
				f[j] = float64(e)
			}
			out[i] = T(math.Round(reduceFloat(f, 1, R, kind)[0]))
			continue
		}
		out[i] = T(v)
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
		data, ok := reduceRows(y, K, R, kind)
		if !ok {
			return nil, ctx.errf("unsupported type %s", onnx.TypeName(x.DType))
		}
		return []*onnx.Tensor{{DType: x.DType, Shape: shape, Data: data}}, nil
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

// reduceRows reduces each of the K rows of R elements of y; ok is false
// for an unsupported type. One case per dtype, as in intArith in
// binary.go.
func reduceRows(y *onnx.Tensor, K, R int, kind string) (data any, ok bool) {
	switch d := y.Data.(type) {
	case []float32:
		return reduceFloat(d, K, R, kind), true
	case []float64:
		return reduceFloat(d, K, R, kind), true
	case []int32:
		return reduceInt(d, K, R, kind), true
	case []int64:
		return reduceInt(d, K, R, kind), true
	case []int8:
		return reduceInt(d, K, R, kind), true
	case []uint8:
		return reduceInt(d, K, R, kind), true
	case []uint32:
		return reduceInt(d, K, R, kind), true
	case []uint64:
		return reduceInt(d, K, R, kind), true
	}
	return nil, false
}

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
		var data []int64
		switch v := x.Data.(type) {
		case []float32:
			data = argT(v, outer, d, inner, isMax, last)
		case []float64:
			data = argT(v, outer, d, inner, isMax, last)
		case []int32:
			data = argT(v, outer, d, inner, isMax, last)
		case []int64:
			data = argT(v, outer, d, inner, isMax, last)
		case []int8:
			data = argT(v, outer, d, inner, isMax, last)
		case []uint8:
			data = argT(v, outer, d, inner, isMax, last)
		default:
			return nil, ctx.errf("unsupported type %s", onnx.TypeName(x.DType))
		}
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
