package onnx

import (
	"fmt"
	"math"

	"github.com/linearize/linearize/onnx/onnxpb"
)

// MaxTensorElements bounds the element count of any tensor decoded from a
// model or file, so that a hostile shape cannot make the decoder allocate
// without limit. 1<<32 float32 elements is 16 GiB.
const MaxTensorElements = 1 << 32

// DecodeTensor converts a TensorProto to a Tensor. The data may sit in
// raw_data (little-endian) or in the typed field for the type; its size
// must match the shape exactly. External data must have been resolved first
// (Load does that). The error names the tensor.
func DecodeTensor(tp *onnxpb.TensorProto) (*Tensor, error) {
	shape, n, err := checkProto(tp)
	if err != nil {
		return nil, err
	}
	dt := DataType(tp.GetDataType())
	t := &Tensor{DType: dt, Shape: shape}
	if tp.RawData != nil && dt != String {
		t.Data = decodeRaw(dt, tp.GetRawData(), n)
	} else {
		t.Data = typedData(tp, dt, n)
	}
	return t, nil
}

// checkProto returns the shape of tp and its element count after the
// checks DecodeTensor and DecodeRows make: tp is present, its data is
// loaded and not segmented, its shape is valid, and raw_data (or the
// typed field of its type) holds exactly the values the shape needs.
func checkProto(tp *onnxpb.TensorProto) (shape []int, n int, err error) {
	if tp == nil {
		return nil, 0, fmt.Errorf("onnx: missing tensor")
	}
	fail := func(format string, a ...any) ([]int, int, error) {
		return nil, 0, fmt.Errorf("onnx: tensor %q: %s", tp.GetName(), fmt.Sprintf(format, a...))
	}
	if tp.GetDataLocation() == onnxpb.TensorProto_EXTERNAL {
		return fail("external data not loaded")
	}
	if tp.Segment != nil {
		return fail("segmented tensors are not supported")
	}
	shape, n, bad := protoShape(tp.GetDims())
	if bad != "" {
		return fail("%s", bad)
	}
	dt := DataType(tp.GetDataType())
	if tp.RawData != nil && dt != String {
		es := ElemSize(dt)
		if es == 0 {
			return fail("unsupported element type %s", TypeName(dt))
		}
		if raw := tp.GetRawData(); len(raw) != n*es {
			return fail("raw_data has %d bytes, shape %v of %s needs %d", len(raw), shape, TypeName(dt), n*es)
		}
		return shape, n, nil
	}
	have, ok := typedLen(tp, dt)
	if !ok {
		return fail("unsupported element type %s", TypeName(dt))
	}
	if have != n {
		return fail("%d values, shape %v needs %d", have, shape, n)
	}
	return shape, n, nil
}

// DecodeRows decodes the rows of tp (its slices along the first axis)
// that rows lists, in that order, and no others: the result has shape
// [len(rows), dims[1:]...]. It reads the few rows of an embedding table
// that a lookup needs where decoding the whole table would cost its size.
// tp is checked as DecodeTensor checks it, and every row must lie in
// [0, dims[0]).
func DecodeRows(tp *onnxpb.TensorProto, rows []int) (*Tensor, error) {
	shape, _, err := checkProto(tp)
	if err != nil {
		return nil, err
	}
	if len(shape) == 0 {
		return nil, fmt.Errorf("onnx: tensor %q: a scalar has no rows", tp.GetName())
	}
	for _, r := range rows {
		if r < 0 || r >= shape[0] {
			return nil, fmt.Errorf("onnx: tensor %q: row %d is outside [0, %d)", tp.GetName(), r, shape[0])
		}
	}
	per := NumElements(shape[1:])
	dt := DataType(tp.GetDataType())
	sub := &onnxpb.TensorProto{Name: tp.Name, DataType: tp.DataType, Dims: append([]int64{int64(len(rows))}, tp.Dims[1:]...)}
	switch {
	case tp.RawData != nil && dt != String:
		sub.RawData = pickRows(tp.GetRawData(), rows, per*ElemSize(dt))
	case dt == Float:
		sub.FloatData = pickRows(tp.FloatData, rows, per)
	case dt == Double:
		sub.DoubleData = pickRows(tp.DoubleData, rows, per)
	case dt == Int64:
		sub.Int64Data = pickRows(tp.Int64Data, rows, per)
	case dt == Uint32 || dt == Uint64:
		sub.Uint64Data = pickRows(tp.Uint64Data, rows, per)
	case dt == String:
		sub.StringData = pickRows(tp.StringData, rows, per)
	default:
		sub.Int32Data = pickRows(tp.Int32Data, rows, per)
	}
	return DecodeTensor(sub)
}

// pickRows returns the rows of d (each per values long) that rows lists,
// one after another.
func pickRows[T any](d []T, rows []int, per int) []T {
	out := make([]T, 0, len(rows)*per)
	for _, r := range rows {
		out = append(out, d[r*per:(r+1)*per]...)
	}
	return out
}

// protoShape returns the shape dims give and its element count, or what
// is wrong with them: a negative dimension, or more than
// MaxTensorElements elements.
func protoShape(dims []int64) (shape []int, n int, bad string) {
	shape = make([]int, len(dims))
	n = 1
	for i, d := range dims {
		if d < 0 || d > MaxTensorElements {
			return nil, 0, fmt.Sprintf("invalid dimension %d", d)
		}
		shape[i] = int(d)
		if d != 0 && n > MaxTensorElements/int(d) {
			return nil, 0, fmt.Sprintf("shape %v exceeds %d elements", dims, MaxTensorElements)
		}
		n *= int(d)
	}
	return shape, n, ""
}

// typedLen returns the number of values in the typed field that holds
// elements of type dt, or ok = false for a type without one.
func typedLen(tp *onnxpb.TensorProto, dt DataType) (have int, ok bool) {
	switch dt {
	case Float:
		return len(tp.FloatData), true
	case Double:
		return len(tp.DoubleData), true
	case Int64:
		return len(tp.Int64Data), true
	case Uint32, Uint64:
		return len(tp.Uint64Data), true
	case Int32, Int16, Int8, Uint16, Uint8, Bool, Float16, BFloat16:
		return len(tp.Int32Data), true
	case String:
		return len(tp.StringData), true
	}
	return 0, false
}

// typedData copies the n values of the typed field of tp (typedLen says
// it holds n) into a slice of dt's Go type.
func typedData(tp *onnxpb.TensorProto, dt DataType, n int) any {
	switch dt {
	case Float:
		return append([]float32{}, tp.FloatData...)
	case Double:
		return append([]float64{}, tp.DoubleData...)
	case Int64:
		return append([]int64{}, tp.Int64Data...)
	case Uint64:
		return append([]uint64{}, tp.Uint64Data...)
	case Uint32:
		return convert[uint32](tp.Uint64Data)
	case Int32:
		return append([]int32{}, tp.Int32Data...)
	case Int16:
		return convert[int16](tp.Int32Data)
	case Int8:
		return convert[int8](tp.Int32Data)
	case Uint16, Float16, BFloat16:
		return convert[uint16](tp.Int32Data)
	case Uint8:
		return convert[uint8](tp.Int32Data)
	case Bool:
		d := make([]bool, n)
		for i, v := range tp.Int32Data {
			d[i] = v != 0
		}
		return d
	case String:
		d := make([]string, n)
		for i, v := range tp.StringData {
			d[i] = string(v)
		}
		return d
	}
	return nil
}

// DecodeRaw returns the tensor of type dt and the given shape whose data
// are the little-endian bytes raw, as raw_data holds them (a bool is
// true for any byte but 0). raw must hold the bytes the shape needs,
// exactly.
func DecodeRaw(dt DataType, shape []int, raw []byte) (*Tensor, error) {
	n := NumElements(shape)
	if n < 0 {
		return nil, fmt.Errorf("onnx: invalid shape %v", shape)
	}
	if n > MaxTensorElements {
		return nil, fmt.Errorf("onnx: shape %v exceeds %d elements", shape, int64(MaxTensorElements))
	}
	es := ElemSize(dt)
	if es == 0 {
		return nil, fmt.Errorf("onnx: unsupported element type %s", TypeName(dt))
	}
	if len(raw) != n*es {
		return nil, fmt.Errorf("onnx: %d bytes, shape %v of %s needs %d", len(raw), shape, TypeName(dt), n*es)
	}
	return &Tensor{DType: dt, Shape: append([]int(nil), shape...), Data: decodeRaw(dt, raw, n)}, nil
}

func decodeRaw(dt DataType, raw []byte, n int) any {
	switch dt {
	case Float:
		d := make([]float32, n)
		for i := range d {
			d[i] = math.Float32frombits(le.Uint32(raw[4*i:]))
		}
		return d
	case Double:
		d := make([]float64, n)
		for i := range d {
			d[i] = math.Float64frombits(le.Uint64(raw[8*i:]))
		}
		return d
	case Int64:
		d := make([]int64, n)
		for i := range d {
			d[i] = int64(le.Uint64(raw[8*i:]))
		}
		return d
	case Uint64:
		d := make([]uint64, n)
		for i := range d {
			d[i] = le.Uint64(raw[8*i:])
		}
		return d
	case Int32:
		d := make([]int32, n)
		for i := range d {
			d[i] = int32(le.Uint32(raw[4*i:]))
		}
		return d
	case Uint32:
		d := make([]uint32, n)
		for i := range d {
			d[i] = le.Uint32(raw[4*i:])
		}
		return d
	case Int16:
		d := make([]int16, n)
		for i := range d {
			d[i] = int16(le.Uint16(raw[2*i:]))
		}
		return d
	case Uint16, Float16, BFloat16:
		d := make([]uint16, n)
		for i := range d {
			d[i] = le.Uint16(raw[2*i:])
		}
		return d
	case Int8:
		d := make([]int8, n)
		for i := range d {
			d[i] = int8(raw[i])
		}
		return d
	case Uint8:
		return append([]uint8{}, raw...)
	case Bool:
		d := make([]bool, n)
		for i := range d {
			d[i] = raw[i] != 0
		}
		return d
	}
	return nil
}

// EncodeTensor converts t to a TensorProto named name, with the data in
// raw_data (little-endian) for fixed-size types and in string_data for
// strings. It fails if the data does not match the type and shape.
func EncodeTensor(name string, t *Tensor) (*onnxpb.TensorProto, error) {
	if err := t.Check(); err != nil {
		return nil, fmt.Errorf("onnx: encoding %q: %w", name, err)
	}
	tp := &onnxpb.TensorProto{Name: &name}
	dt := int32(t.DType)
	tp.DataType = &dt
	tp.Dims = make([]int64, len(t.Shape))
	for i, d := range t.Shape {
		tp.Dims[i] = int64(d)
	}
	if t.DType == String {
		for _, s := range t.Data.([]string) {
			tp.StringData = append(tp.StringData, []byte(s))
		}
		return tp, nil
	}
	tp.RawData = EncodeRaw(t)
	return tp, nil
}

// EncodeRaw returns the little-endian bytes of a fixed-size tensor's data.
func EncodeRaw(t *Tensor) []byte {
	es := ElemSize(t.DType)
	n := dataLen(t.Data)
	raw := make([]byte, n*es)
	switch d := t.Data.(type) {
	case []float32:
		for i, v := range d {
			le.PutUint32(raw[4*i:], math.Float32bits(v))
		}
	case []float64:
		for i, v := range d {
			le.PutUint64(raw[8*i:], math.Float64bits(v))
		}
	case []int64:
		for i, v := range d {
			le.PutUint64(raw[8*i:], uint64(v))
		}
	case []uint64:
		for i, v := range d {
			le.PutUint64(raw[8*i:], v)
		}
	case []int32:
		for i, v := range d {
			le.PutUint32(raw[4*i:], uint32(v))
		}
	case []uint32:
		for i, v := range d {
			le.PutUint32(raw[4*i:], v)
		}
	case []int16:
		for i, v := range d {
			le.PutUint16(raw[2*i:], uint16(v))
		}
	case []uint16:
		for i, v := range d {
			le.PutUint16(raw[2*i:], v)
		}
	case []int8:
		for i, v := range d {
			raw[i] = byte(v)
		}
	case []uint8:
		copy(raw, d)
	case []bool:
		for i, v := range d {
			if v {
				raw[i] = 1
			}
		}
	}
	return raw
}
