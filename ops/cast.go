package ops

import (
	"github.com/linearize/linearize/onnx"
)

func init() {
	Register("", "Cast", 6, castOp)
	Register("", "CastLike", 15, castLike)
}

func castOp(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 1, 1); err != nil {
		return nil, err
	}
	if !ctx.hasAttr("to") {
		return nil, ctx.errf("missing attribute to")
	}
	to := onnx.DataType(ctx.attrInt("to", 0))
	out, err := castTensor(in[0], to)
	if err != nil {
		return nil, ctx.errf("%v", err)
	}
	return []*onnx.Tensor{out}, nil
}

func castLike(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 2, 2); err != nil {
		return nil, err
	}
	out, err := castTensor(in[0], in[1].DType)
	if err != nil {
		return nil, ctx.errf("%v", err)
	}
	return []*onnx.Tensor{out}, nil
}

func fromF64[T number](src []float64) []T {
	out := make([]T, len(src))
	for i, v := range src {
		out[i] = T(v)
	}
	return out
}

func fromI64[T number](src []int64) []T {
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
	res := &onnx.Tensor{DType: to, Shape: cloneShape(t.Shape)}
	if isFloat(t.DType) {
		var f []float64
		if d, ok := t.Data.([]float32); ok && to == onnx.Float16 {
			res.Data = mapSlice(d, onnx.FloatToHalf)
			return res, nil
		}
		if d, ok := t.Data.([]float32); ok && to == onnx.BFloat16 {
			res.Data = mapSlice(d, onnx.FloatToBFloat16)
			return res, nil
		}
		f, err := t.AsFloat64s()
		if err != nil {
			return nil, err
		}
		switch to {
		case onnx.Float:
			res.Data = fromF64[float32](f)
		case onnx.Double:
			res.Data = f
		case onnx.Float16:
			res.Data = mapSlice(f, func(v float64) uint16 { return onnx.FloatToHalf(float32(v)) })
		case onnx.BFloat16:
			res.Data = mapSlice(f, func(v float64) uint16 { return onnx.FloatToBFloat16(float32(v)) })
		case onnx.Bool:
			res.Data = mapSlice(f, func(v float64) bool { return v != 0 })
		case onnx.Int8:
			res.Data = fromF64[int8](f)
		case onnx.Uint8:
			res.Data = fromF64[uint8](f)
		case onnx.Int16:
			res.Data = fromF64[int16](f)
		case onnx.Uint16:
			res.Data = fromF64[uint16](f)
		case onnx.Int32:
			res.Data = fromF64[int32](f)
		case onnx.Uint32:
			res.Data = fromF64[uint32](f)
		case onnx.Int64:
			res.Data = fromF64[int64](f)
		case onnx.Uint64:
			res.Data = fromF64[uint64](f)
		default:
			return nil, fmtErr("cast to %s is not supported", onnx.TypeName(to))
		}
		return res, nil
	}
	n, err := t.AsInt64s()
	if err != nil {
		return nil, err
	}
	switch to {
	case onnx.Float:
		res.Data = fromI64[float32](n)
	case onnx.Double:
		res.Data = fromI64[float64](n)
	case onnx.Float16:
		res.Data = mapSlice(n, func(v int64) uint16 { return onnx.FloatToHalf(float32(v)) })
	case onnx.BFloat16:
		res.Data = mapSlice(n, func(v int64) uint16 { return onnx.FloatToBFloat16(float32(v)) })
	case onnx.Bool:
		res.Data = mapSlice(n, func(v int64) bool { return v != 0 })
	case onnx.Int8:
		res.Data = fromI64[int8](n)
	case onnx.Uint8:
		res.Data = fromI64[uint8](n)
	case onnx.Int16:
		res.Data = fromI64[int16](n)
	case onnx.Uint16:
		res.Data = fromI64[uint16](n)
	case onnx.Int32:
		res.Data = fromI64[int32](n)
	case onnx.Uint32:
		res.Data = fromI64[uint32](n)
	case onnx.Int64:
		res.Data = n
		if t.DType == onnx.Int64 {
			res.Data = append([]int64(nil), n...)
		}
	case onnx.Uint64:
		res.Data = fromI64[uint64](n)
	default:
		return nil, fmtErr("cast to %s is not supported", onnx.TypeName(to))
	}
	return res, nil
}
