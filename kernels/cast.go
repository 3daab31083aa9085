package kernels

import (
	"github.com/linearize/linearize/onnx"
)

func castOp(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 1, 1); err != nil {
		return nil, err
	}
	if !ctx.hasAttr("to") {
		return nil, ctx.errf("missing attribute to")
	}
	return ctx.cast(in[0], onnx.DataType(ctx.attrInt("to", 0)))
}

func castLike(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 2, 2); err != nil {
		return nil, err
	}
	return ctx.cast(in[0], in[1].DType)
}

// cast is the output of Cast and CastLike: x converted to type to.
func (ctx *Context) cast(x *onnx.Tensor, to onnx.DataType) ([]*onnx.Tensor, error) {
	out, err := castTensor(x, to)
	if err != nil {
		return nil, ctx.errf("%v", err)
	}
	return []*onnx.Tensor{out}, nil
}

// convertSlice converts every value of src to T, as Go's conversion does
// (floats to integers truncate toward zero).
func convertSlice[T, S number](src []S) []T {
	out := make([]T, len(src))
	for i, v := range src {
		out[i] = T(v)
	}
	return out
}

// castTensor converts t to element type to: floats to integers truncate
// toward zero, anything nonzero is true, float16 rounds to nearest even.
// Strings are not supported.
func castTensor(t *onnx.Tensor, to onnx.DataType) (*onnx.Tensor, error) {
	if t.DType == to {
		return view(t, cloneShape(t.Shape)), nil
	}
	if t.DType == onnx.String || to == onnx.String {
		return nil, fmtErr("cast between %s and %s is not supported", onnx.TypeName(t.DType), onnx.TypeName(to))
	}
	var data any
	var err error
	if onnx.IsFloat(t.DType) {
		data, err = castFloats(t, to)
	} else {
		data, err = castIntegers(t, to)
	}
	if err != nil {
		return nil, err
	}
	return &onnx.Tensor{DType: to, Shape: cloneShape(t.Shape), Data: data}, nil
}

// castFloats converts the values of a float tensor to type to: float32 to
// a half type directly, the others through float64.
func castFloats(t *onnx.Tensor, to onnx.DataType) (any, error) {
	if d, ok := t.Data.([]float32); ok {
		switch to {
		case onnx.Float16:
			return mapSlice(d, onnx.FloatToHalf), nil
		case onnx.BFloat16:
			return mapSlice(d, onnx.FloatToBFloat16), nil
		}
	}
	f, err := t.AsFloat64s()
	if err != nil {
		return nil, err
	}
	return castValues(f, to)
}

// castIntegers converts the values of an integer or bool tensor to type
// to through int64.
func castIntegers(t *onnx.Tensor, to onnx.DataType) (any, error) {
	n, err := t.AsInt64s()
	if err != nil {
		return nil, err
	}
	return castValues(n, to)
}

// castValues converts float64 or int64 values to the data of type to (v
// itself when it has that type).
func castValues[S float64 | int64](v []S, to onnx.DataType) (any, error) {
	switch to {
	case onnx.Float16:
		return mapSlice(v, func(x S) uint16 { return onnx.FloatToHalf(float32(x)) }), nil
	case onnx.BFloat16:
		return mapSlice(v, func(x S) uint16 { return onnx.FloatToBFloat16(float32(x)) }), nil
	case onnx.Bool:
		return mapSlice(v, func(x S) bool { return x != 0 }), nil
	}
	if n := numericOf(to, numbers); n != nil {
		return n.convert(v), nil
	}
	return nil, fmtErr("cast to %s is not supported", onnx.TypeName(to))
}
