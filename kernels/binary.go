package kernels

import (
	"cmp"
	"errors"
	"math"

	"github.com/linearize/linearize/onnx"
)

// Binary and variadic elementwise ops with numpy broadcasting.

type integer interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64
}

type float interface{ ~float32 | ~float64 }

type number interface{ integer | float }

// The arithmetic of Add, Sub, Mul and Div, and (see numeric.arith) of Mod
// and BitShift.
const (
	opAdd = iota
	opSub
	opMul
	opDiv
	opMod  // remainder with the divisor's sign, like Python's %
	opFmod // remainder with the dividend's sign, like C's fmod
	opShl
	opShr
)

// arithVec returns the run function of +, −, × or ÷ with the loops written
// out, so the compiler sees no call per element.
func arithVec[T number](op int) vec2[T, T] {
	return func(dst []T, a []T, sa int, b []T, sb int) {
		n := len(dst)
		switch {
		case sa == 1 && sb == 1:
			arithVecVec(op, dst, a[:n], b[:n])
		case sa == 1:
			arithVecScalar(op, dst, a[:n], b[0])
		case sb == 1:
			arithScalarVec(op, dst, a[0], b[:n])
		default:
			v := arithScalar(op, a[0], b[0])
			for i := range dst {
				dst[i] = v
			}
		}
	}
}

// arithVecVec sets dst[i] = a[i] op b[i].
func arithVecVec[T number](op int, dst, a, b []T) {
	switch op {
	case opAdd:
		for i := range dst {
			dst[i] = a[i] + b[i]
		}
	case opSub:
		for i := range dst {
			dst[i] = a[i] - b[i]
		}
	case opMul:
		for i := range dst {
			dst[i] = a[i] * b[i]
		}
	case opDiv:
		for i := range dst {
			dst[i] = a[i] / b[i]
		}
	}
}

// arithVecScalar sets dst[i] = a[i] op y.
func arithVecScalar[T number](op int, dst, a []T, y T) {
	switch op {
	case opAdd:
		for i := range dst {
			dst[i] = a[i] + y
		}
	case opSub:
		for i := range dst {
			dst[i] = a[i] - y
		}
	case opMul:
		for i := range dst {
			dst[i] = a[i] * y
		}
	case opDiv:
		for i := range dst {
			dst[i] = a[i] / y
		}
	}
}

// arithScalarVec sets dst[i] = x op b[i].
func arithScalarVec[T number](op int, dst []T, x T, b []T) {
	switch op {
	case opAdd:
		for i := range dst {
			dst[i] = x + b[i]
		}
	case opSub:
		for i := range dst {
			dst[i] = x - b[i]
		}
	case opMul:
		for i := range dst {
			dst[i] = x * b[i]
		}
	case opDiv:
		for i := range dst {
			dst[i] = x / b[i]
		}
	}
}

// arithScalar returns x op y.
func arithScalar[T number](op int, x, y T) T {
	var v T
	switch op {
	case opAdd:
		v = x + y
	case opSub:
		v = x - y
	case opMul:
		v = x * y
	case opDiv:
		v = x / y
	}
	return v
}

func arithT[T number](p *plan2, a, b *onnx.Tensor, op int, threads int) any {
	return apply2p(p, a.Data.([]T), b.Data.([]T), arithVec[T](op), threads)
}

// intArithT computes op on integer tensors a and b broadcast by p:
// +, −, × and ÷ (refusing division by zero, which would panic, before
// any work), the remainders of Mod and the shifts of BitShift.
func intArithT[T integer](p *plan2, a, b *onnx.Tensor, op int, threads int) (any, error) {
	x, y := a.Data.([]T), b.Data.([]T)
	switch op {
	case opDiv:
		for _, v := range y {
			if v == 0 {
				return nil, errIntDivZero
			}
		}
	case opMod, opFmod:
		fmod := op == opFmod
		return apply2(p, x, y, elementwise(func(u, v T) T { return modInt(u, v, fmod) })), nil
	case opShl:
		return apply2(p, x, y, elementwise(func(u, v T) T { return u << v })), nil
	case opShr:
		return apply2(p, x, y, elementwise(func(u, v T) T { return u >> v })), nil
	}
	return arithT[T](p, a, b, op, threads), nil
}

var errIntDivZero = errors.New("integer division by zero")

func arith(op int) Kernel {
	return func(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
		a, b, err := ctx.twoInputs(in)
		if err != nil {
			return nil, err
		}
		if a.DType == onnx.Float16 || a.DType == onnx.BFloat16 {
			return viaFloat32(ctx, in, arith(op))
		}
		p, err := ctx.plan2(a.Shape, b.Shape, a.DType)
		if err != nil {
			return nil, err
		}
		n, err := ctx.numericFor(a.DType, numbers)
		if err != nil {
			return nil, err
		}
		out, err := n.arith(p, a, b, op, ctx.threads())
		if err != nil {
			return nil, ctx.errf("%v", err)
		}
		return []*onnx.Tensor{{DType: a.DType, Shape: p.Out, Data: out}}, nil
	}
}

// viaFloat32 runs k on float16/bfloat16 inputs widened to float32 and
// narrows float outputs back to the half type (HalfWidened).
func viaFloat32(ctx *Context, in []*onnx.Tensor, k Kernel) ([]*onnx.Tensor, error) {
	return HalfWidened(k)(ctx, in)
}

func toFloat32(t *onnx.Tensor) *onnx.Tensor {
	src := t.Data.([]uint16)
	d := make([]float32, len(src))
	for i, v := range src {
		if t.DType == onnx.Float16 {
			d[i] = onnx.HalfToFloat(v)
		} else {
			d[i] = onnx.BFloat16ToFloat(v)
		}
	}
	return &onnx.Tensor{DType: onnx.Float, Shape: t.Shape, Data: d}
}

func fromFloat32(t *onnx.Tensor, dt onnx.DataType) *onnx.Tensor {
	src := t.Floats()
	d := make([]uint16, len(src))
	for i, v := range src {
		if dt == onnx.Float16 {
			d[i] = onnx.FloatToHalf(v)
		} else {
			d[i] = onnx.FloatToBFloat16(v)
		}
	}
	return &onnx.Tensor{DType: dt, Shape: t.Shape, Data: d}
}

func pow(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 2, 2); err != nil {
		return nil, err
	}
	x, y := in[0], in[1]
	if x.DType == onnx.Float16 || x.DType == onnx.BFloat16 || y.DType == onnx.Float16 || y.DType == onnx.BFloat16 {
		return viaFloat32(ctx, in, pow)
	}
	p, err := ctx.plan2(x.Shape, y.Shape, x.DType)
	if err != nil {
		return nil, err
	}
	ys, err := y.AsFloat64s()
	if err != nil {
		return nil, ctx.errf("exponent: %v", err)
	}
	switch xd := x.Data.(type) {
	case []float32:
		// Common exponents get exact float32 arithmetic.
		f := func(a float32, e float64) float32 {
			switch e {
			case 2:
				return a * a
			case 1:
				return a
			case 0.5:
				return float32(math.Sqrt(float64(a)))
			}
			return float32(math.Pow(float64(a), e))
		}
		return powOut(p, xd, ys, f, x.DType), nil
	case []float64:
		return powOut(p, xd, ys, func(a float64, e float64) float64 { return math.Pow(a, e) }, x.DType), nil
	case []int32:
		return powOut(p, xd, ys, func(a int32, e float64) int32 { return int32(math.Pow(float64(a), e)) }, x.DType), nil
	case []int64:
		return powOut(p, xd, ys, func(a int64, e float64) int64 { return int64(math.Pow(float64(a), e)) }, x.DType), nil
	}
	return nil, ctx.errf("unsupported base type %s", onnx.TypeName(x.DType))
}

func powOut[T any](p *plan2, x []T, ys []float64, f func(T, float64) T, dt onnx.DataType) []*onnx.Tensor {
	out := make([]T, p.N)
	n := p.Inner
	p.runs(func(o, ao, bo int) {
		for i := 0; i < n; i++ {
			out[o+i] = f(x[ao+i*p.SA], ys[bo+i*p.SB])
		}
	})
	return []*onnx.Tensor{{DType: dt, Shape: p.Out, Data: out}}
}

func prelu(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	x, s, err := ctx.twoInputs(in)
	if err != nil {
		return nil, err
	}
	p, err := ctx.plan2(x.Shape, s.Shape, x.DType)
	if err != nil {
		return nil, err
	}
	var out any
	switch x.DType {
	case onnx.Float:
		out = apply2(p, x.Floats(), s.Floats(), elementwise(func(a, b float32) float32 {
			if a < 0 {
				return a * b
			}
			return a
		}))
	case onnx.Double:
		out = apply2(p, x.Data.([]float64), s.Data.([]float64), elementwise(func(a, b float64) float64 {
			if a < 0 {
				return a * b
			}
			return a
		}))
	default:
		return nil, ctx.errf("unsupported type %s", onnx.TypeName(x.DType))
	}
	return []*onnx.Tensor{{DType: x.DType, Shape: p.Out, Data: out}}, nil
}

func cmpT[T cmp.Ordered](p *plan2, a, b *onnx.Tensor, pred func(int) bool) []bool {
	return apply2(p, a.Data.([]T), b.Data.([]T), elementwise(func(x, y T) bool {
		if x != x || y != y { // every relation with NaN is false
			return false
		}
		return pred(cmp.Compare(x, y))
	}))
}

// compare builds Equal/Less/Greater/...; pred tells from cmp.Compare's
// result whether the relation holds. eq allows bool and string inputs.
func compare(pred func(int) bool, eq bool) Kernel {
	var k Kernel
	k = func(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
		a, b, err := ctx.twoInputs(in)
		if err != nil {
			return nil, err
		}
		if a.DType == onnx.Float16 || a.DType == onnx.BFloat16 {
			return k(ctx, []*onnx.Tensor{toFloat32(a), toFloat32(b)})
		}
		p, err := ctx.plan2(a.Shape, b.Shape, onnx.Bool)
		if err != nil {
			return nil, err
		}
		var out []bool
		switch a.DType {
		case onnx.String:
			if !eq {
				return nil, ctx.errf("strings are not ordered")
			}
			out = cmpT[string](p, a, b, pred)
		case onnx.Bool:
			if !eq {
				return nil, ctx.errf("bools are not ordered")
			}
			out = apply2(p, a.Bools(), b.Bools(), elementwise(func(x, y bool) bool { return x == y }))
		default:
			n, err := ctx.numericFor(a.DType, numbers)
			if err != nil {
				return nil, err
			}
			out = n.compare(p, a, b, pred)
		}
		return []*onnx.Tensor{{DType: onnx.Bool, Shape: p.Out, Data: out}}, nil
	}
	return k
}

func logic(f func(x, y bool) bool) Kernel {
	return func(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
		if err := ctx.checkInputs(in, 2, 2); err != nil {
			return nil, err
		}
		a, b := in[0], in[1]
		if a.DType != onnx.Bool || b.DType != onnx.Bool {
			return nil, ctx.errf("inputs must be bool, got %s and %s", a, b)
		}
		p, err := ctx.plan2(a.Shape, b.Shape, onnx.Bool)
		if err != nil {
			return nil, err
		}
		return []*onnx.Tensor{{DType: onnx.Bool, Shape: p.Out, Data: apply2(p, a.Bools(), b.Bools(), elementwise(f))}}, nil
	}
}

func maxNaN[T number](x, y T) T {
	if x != x || x > y {
		return x
	}
	return y
}

func minNaN[T number](x, y T) T {
	if x != x || x < y {
		return x
	}
	return y
}

func foldT[T number](ctx *Context, op string, in []*onnx.Tensor) (*onnx.Tensor, error) {
	acc := in[0]
	for _, t := range in[1:] {
		p, err := ctx.plan2(acc.Shape, t.Shape, acc.DType)
		if err != nil {
			return nil, err
		}
		a, b := acc.Data.([]T), t.Data.([]T)
		var out []T
		switch op {
		case "Max":
			out = apply2(p, a, b, elementwise(maxNaN[T]))
		case "Min":
			out = apply2(p, a, b, elementwise(minNaN[T]))
		default:
			out = apply2(p, a, b, arithVec[T](opAdd))
		}
		acc = &onnx.Tensor{DType: acc.DType, Shape: p.Out, Data: out}
	}
	if len(in) == 1 {
		acc = acc.Clone()
	}
	if op == "Mean" {
		d := acc.Data.([]T)
		n := T(len(in))
		for i := range d {
			d[i] /= n
		}
	}
	return acc, nil
}

func variadic(op string) Kernel {
	var k Kernel
	k = func(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
		dt, err := ctx.sameTypeInputs(in)
		if err != nil {
			return nil, err
		}
		if dt == onnx.Float16 || dt == onnx.BFloat16 {
			return viaFloat32(ctx, in, k)
		}
		n, err := ctx.numericFor(dt, numbers)
		if err != nil {
			return nil, err
		}
		return oneOutput(n.fold(ctx, op, in))
	}
	return k
}

func where(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 3, 3); err != nil {
		return nil, err
	}
	c, x, y := in[0], in[1], in[2]
	if c.DType != onnx.Bool {
		return nil, ctx.errf("condition must be bool, got %s", c)
	}
	if x.DType != y.DType {
		return nil, ctx.errf("input types differ: %s and %s", x, y)
	}
	shape, err := broadcastShapes(c.Shape, x.Shape, y.Shape)
	if err != nil {
		return nil, ctx.errf("%v", err)
	}
	if err := ctx.budget("output", x.DType, shape); err != nil {
		return nil, err
	}
	cb, err := broadcastTo(c, shape)
	if err != nil {
		return nil, ctx.errf("%v", err)
	}
	// out starts as x broadcast, then the false positions take y.
	out, err := ctx.newTensor(x.DType, shape)
	if err != nil {
		return nil, err
	}
	w := walk{Shape: shape, SrcStrides: bstrides(x.Shape, shape), DstStrides: stridesOf(shape)}
	if err := ctx.run(out, x, w); err != nil {
		return nil, err
	}
	yb, err := broadcastTo(y, shape)
	if err != nil {
		return nil, ctx.errf("%v", err)
	}
	mask := cb.Bools()
	if err := selectInto(out, yb, mask); err != nil {
		return nil, ctx.errf("%v", err)
	}
	return []*onnx.Tensor{out}, nil
}

// selectInto sets dst[i] = src[i] wherever keep[i] is false; dst and src
// have the same type.
func selectInto(dst, src *onnx.Tensor, keep []bool) error {
	e, err := elemsFor(dst)
	if err == nil {
		e.selectFrom(dst.Data, src.Data, keep)
	}
	return err
}
