package kernels

import (
	"math"

	"github.com/linearize/linearize/onnx"
)

// Per-element-type dispatch. Go cannot pass a generic function as a value,
// so each kernel family that runs typed loops is a method of the generic
// types below (elemsT for any element, num for numbers, with floatNum and
// intNum where floats and whole numbers differ), and the list of types
// stands once, in numerics and elemsOf. A kernel looks its element type up
// once per tensor and calls the method, which runs the loops of that type:
// no call per element.

// elems is what the data-movement kernels do for one element type; dst and
// src are tensor data of that type.
type elems interface {
	// walk runs the strided copy w from src to dst.
	walk(dst, src any, w walk)
	// selectFrom sets dst[i] = src[i] wherever keep[i] is false.
	selectFrom(dst, src any, keep []bool)
	// gather sets dst[i] = src[idx[i]].
	gather(dst, src any, idx []int)
}

// numeric is what the numeric kernels do for one element type: elems, and
// arithmetic, comparison, reductions, scans and conversion, on tensor data
// of that type (the any arguments and results).
type numeric interface {
	elems
	// arith is a op b broadcast by p (see intArithT; floats take
	// opAdd to opDiv and opFmod).
	arith(p *plan2, a, b *onnx.Tensor, op, threads int) (any, error)
	// compare is pred(cmp.Compare(a, b)) broadcast by p.
	compare(p *plan2, a, b *onnx.Tensor, pred func(int) bool) []bool
	// fold is Max, Min, Sum or Mean of in (see foldT).
	fold(ctx *Context, op string, in []*onnx.Tensor) (*onnx.Tensor, error)
	// reduceRows reduces each of the K rows of R elements of x.
	reduceRows(x any, K, R int, kind string) any
	// argIndex is ArgMax (isMax) or ArgMin of x (see argT).
	argIndex(x any, outer, d, inner int, isMax, last bool) []int64
	// cumSum is CumSum of x (see cumSumT).
	cumSum(x any, outer, d, inner int, exclusive, reverse bool) any
	// einsum is einsumLoop.
	einsum(sp *einsumSpec, in []*onnx.Tensor, size map[rune]int, shape []int) any
	// convert converts []float64 or []int64 values as Go's conversion
	// does; values of this type are returned as they are.
	convert(v any) any
	// rangeOf is Range of the scalars in (see rangeTensor).
	rangeOf(ctx *Context, dt onnx.DataType, in []*onnx.Tensor) ([]*onnx.Tensor, error)
}

type elemsT[T any] struct{}

func (elemsT[T]) walk(dst, src any, w walk) { walkT(dst.([]T), src.([]T), w) }

func (elemsT[T]) selectFrom(dst, src any, keep []bool) {
	d, s := dst.([]T), src.([]T)
	for i, k := range keep {
		if !k {
			d[i] = s[i]
		}
	}
}

func (elemsT[T]) gather(dst, src any, idx []int) {
	d, s := dst.([]T), src.([]T)
	for i, j := range idx {
		d[i] = s[j]
	}
}

type num[T number] struct{ elemsT[T] }

func (num[T]) compare(p *plan2, a, b *onnx.Tensor, pred func(int) bool) []bool {
	return cmpT[T](p, a, b, pred)
}

func (num[T]) fold(ctx *Context, op string, in []*onnx.Tensor) (*onnx.Tensor, error) {
	return foldT[T](ctx, op, in)
}

func (num[T]) argIndex(x any, outer, d, inner int, isMax, last bool) []int64 {
	return argT(x.([]T), outer, d, inner, isMax, last)
}

func (num[T]) cumSum(x any, outer, d, inner int, exclusive, reverse bool) any {
	return cumSumT(x.([]T), outer, d, inner, exclusive, reverse)
}

func (num[T]) einsum(sp *einsumSpec, in []*onnx.Tensor, size map[rune]int, shape []int) any {
	return einsumLoop[T](sp, in, size, shape)
}

func (num[T]) convert(v any) any {
	switch s := v.(type) {
	case []T:
		return s
	case []float64:
		return convertSlice[T](s)
	}
	return convertSlice[T](v.([]int64))
}

func (num[T]) rangeOf(ctx *Context, dt onnx.DataType, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	return rangeTensor(ctx, dt, in[0].Data.([]T)[0], in[1].Data.([]T)[0], in[2].Data.([]T)[0])
}

type floatNum[T float] struct{ num[T] }

func (floatNum[T]) arith(p *plan2, a, b *onnx.Tensor, op, threads int) (any, error) {
	if op == opFmod {
		return apply2(p, a.Data.([]T), b.Data.([]T), elementwise(func(x, y T) T { return T(math.Mod(float64(x), float64(y))) })), nil
	}
	return arithT[T](p, a, b, op, threads), nil
}

func (floatNum[T]) reduceRows(x any, K, R int, kind string) any {
	return reduceFloat(x.([]T), K, R, kind)
}

type intNum[T integer] struct{ num[T] }

func (intNum[T]) arith(p *plan2, a, b *onnx.Tensor, op, threads int) (any, error) {
	return intArithT[T](p, a, b, op, threads)
}

func (intNum[T]) reduceRows(x any, K, R int, kind string) any {
	return reduceInt(x.([]T), K, R, kind)
}

// numerics holds the numeric of each number type.
var numerics = [...]numeric{
	onnx.Float:  floatNum[float32]{},
	onnx.Double: floatNum[float64]{},
	onnx.Int8:   intNum[int8]{},
	onnx.Int16:  intNum[int16]{},
	onnx.Int32:  intNum[int32]{},
	onnx.Int64:  intNum[int64]{},
	onnx.Uint8:  intNum[uint8]{},
	onnx.Uint16: intNum[uint16]{},
	onnx.Uint32: intNum[uint32]{},
	onnx.Uint64: intNum[uint64]{},
}

// dtypes is a set of element types.
type dtypes uint64

func dtypesOf(dts ...onnx.DataType) dtypes {
	var s dtypes
	for _, dt := range dts {
		s |= 1 << dt
	}
	return s
}

func (s dtypes) has(dt onnx.DataType) bool { return dt >= 0 && dt < 64 && s&(1<<dt) != 0 }

// The number types, and the whole-number ones.
var (
	integers = dtypesOf(onnx.Int8, onnx.Int16, onnx.Int32, onnx.Int64, onnx.Uint8, onnx.Uint16, onnx.Uint32, onnx.Uint64)
	numbers  = integers | dtypesOf(onnx.Float, onnx.Double)
)

// numericOf returns the numeric of dt, or nil when dt is not in set (a
// subset of numbers: the types the kernel takes).
func numericOf(dt onnx.DataType, set dtypes) numeric {
	if !set.has(dt) {
		return nil
	}
	return numerics[dt]
}

// numericFor is numericOf with the error of a kernel for a type not in set.
func (ctx *Context) numericFor(dt onnx.DataType, set dtypes) (numeric, error) {
	if n := numericOf(dt, set); n != nil {
		return n, nil
	}
	return nil, ctx.errf("unsupported type %s", onnx.TypeName(dt))
}

// elemsOf returns the elems of dt: a number, bool, string or half type
// (which moves as uint16); nil for any other type.
func elemsOf(dt onnx.DataType) elems {
	switch dt {
	case onnx.Bool:
		return elemsT[bool]{}
	case onnx.String:
		return elemsT[string]{}
	case onnx.Float16, onnx.BFloat16:
		return elemsT[uint16]{}
	}
	return numericOf(dt, numbers)
}

// elemsFor is elemsOf for tensor t, with an error for an unsupported type.
func elemsFor(t *onnx.Tensor) (elems, error) {
	if e := elemsOf(t.DType); e != nil {
		return e, nil
	}
	return nil, fmtErr("unsupported data %T", t.Data)
}
