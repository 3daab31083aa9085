package onnx

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/linearize/linearize/onnx/onnxpb"
)

// DataType is an ONNX element type (TensorProto.DataType).
type DataType = onnxpb.TensorProto_DataType

// The element types linearize computes with.
const (
	Undefined = onnxpb.TensorProto_UNDEFINED
	Float     = onnxpb.TensorProto_FLOAT
	Double    = onnxpb.TensorProto_DOUBLE
	Float16   = onnxpb.TensorProto_FLOAT16
	BFloat16  = onnxpb.TensorProto_BFLOAT16
	Int8      = onnxpb.TensorProto_INT8
	Uint8     = onnxpb.TensorProto_UINT8
	Int16     = onnxpb.TensorProto_INT16
	Uint16    = onnxpb.TensorProto_UINT16
	Int32     = onnxpb.TensorProto_INT32
	Uint32    = onnxpb.TensorProto_UINT32
	Int64     = onnxpb.TensorProto_INT64
	Uint64    = onnxpb.TensorProto_UINT64
	Bool      = onnxpb.TensorProto_BOOL
	String    = onnxpb.TensorProto_STRING
)

// Tensor is a dense row-major tensor. Data holds a slice whose Go type is
// fixed by DType:
//
//	Float []float32, Double []float64, Float16 and BFloat16 []uint16 (bits),
//	Int8 []int8, Uint8 []uint8, Int16 []int16, Uint16 []uint16,
//	Int32 []int32, Uint32 []uint32, Int64 []int64, Uint64 []uint64,
//	Bool []bool, String []string.
//
// A rank-0 tensor has a nil or empty Shape and one element.
type Tensor struct {
	DType DataType
	Shape []int
	Data  any
}

// NewFloat returns a float32 tensor of the given shape that uses data.
func NewFloat(shape []int, data []float32) *Tensor {
	return &Tensor{DType: Float, Shape: shape, Data: data}
}

// NewInt64 returns an int64 tensor of the given shape that uses data.
func NewInt64(shape []int, data []int64) *Tensor {
	return &Tensor{DType: Int64, Shape: shape, Data: data}
}

// NumElements returns the product of shape, or -1 if a dimension is negative
// or the product overflows.
func NumElements(shape []int) int {
	n := 1
	for _, d := range shape {
		if d < 0 {
			return -1
		}
		if d != 0 && n > math.MaxInt/d {
			return -1
		}
		n *= d
	}
	return n
}

// Len returns the number of elements the shape describes.
func (t *Tensor) Len() int { return NumElements(t.Shape) }

// Floats returns the float32 data, or nil if the tensor is not Float.
func (t *Tensor) Floats() []float32 { v, _ := t.Data.([]float32); return v }

// Int64s returns the int64 data, or nil if the tensor is not Int64.
func (t *Tensor) Int64s() []int64 { v, _ := t.Data.([]int64); return v }

// Bools returns the bool data, or nil if the tensor is not Bool.
func (t *Tensor) Bools() []bool { v, _ := t.Data.([]bool); return v }

// AsInt64s returns the values of an integer or boolean tensor widened to
// int64 (a copy, except for Int64 tensors). It fails for other types.
func (t *Tensor) AsInt64s() ([]int64, error) {
	switch d := t.Data.(type) {
	case []int64:
		return d, nil
	case []int32:
		return convert[int64](d), nil
	case []int16:
		return convert[int64](d), nil
	case []int8:
		return convert[int64](d), nil
	case []uint8:
		return convert[int64](d), nil
	case []uint16:
		if t.DType == Uint16 {
			return convert[int64](d), nil
		}
	case []uint32:
		return convert[int64](d), nil
	case []uint64:
		return convert[int64](d), nil
	case []bool:
		out := make([]int64, len(d))
		for i, v := range d {
			if v {
				out[i] = 1
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("onnx: tensor of type %v is not an integer tensor", t.DType)
}

// AsFloat64s returns the values of any numeric tensor as float64 (a copy).
func (t *Tensor) AsFloat64s() ([]float64, error) {
	switch d := t.Data.(type) {
	case []float32:
		return convert[float64](d), nil
	case []float64:
		return append([]float64(nil), d...), nil
	case []uint16:
		if t.DType == Float16 || t.DType == BFloat16 {
			out := make([]float64, len(d))
			for i, v := range d {
				if t.DType == Float16 {
					out[i] = float64(HalfToFloat(v))
				} else {
					out[i] = float64(BFloat16ToFloat(v))
				}
			}
			return out, nil
		}
	}
	ints, err := t.AsInt64s()
	if err != nil {
		return nil, fmt.Errorf("onnx: tensor of type %v is not numeric", t.DType)
	}
	return convert[float64](ints), nil
}

// AsFloat32s returns the values of any numeric tensor as float32 (a
// copy): float16, bfloat16 and integers of up to 24 bits widen exactly;
// float64 and wider integers round to the nearest float32.
func (t *Tensor) AsFloat32s() ([]float32, error) {
	if d, ok := t.Data.([]float32); ok {
		return append([]float32(nil), d...), nil
	}
	wide, err := t.AsFloat64s()
	if err != nil {
		return nil, err
	}
	return convert[float32](wide), nil
}

// number is the set of Go element types of the numeric DataTypes.
type number interface {
	int8 | int16 | int32 | int64 | uint8 | uint16 | uint32 | uint64 | float32 | float64
}

// convert returns a copy of d with each value converted to U.
func convert[U, T number](d []T) []U {
	out := make([]U, len(d))
	for i, v := range d {
		out[i] = U(v)
	}
	return out
}

// Clone returns a deep copy of t.
func (t *Tensor) Clone() *Tensor {
	c := &Tensor{DType: t.DType, Shape: append([]int(nil), t.Shape...)}
	if d := sliceOfData(t.Data); d != nil {
		c.Data = d.clone(t.Data)
	}
	return c
}

// String returns a short description such as "float32[2 3]".
func (t *Tensor) String() string { return fmt.Sprintf("%s%v", TypeName(t.DType), t.Shape) }

// IsFloat reports whether dt is a floating type: float32, float64,
// float16 or bfloat16.
func IsFloat(dt DataType) bool {
	switch dt {
	case Float, Double, Float16, BFloat16:
		return true
	}
	return false
}

// ElemSize returns the byte size of one element in raw_data, or 0 for types
// without a fixed size (STRING, UNDEFINED, unknown).
func ElemSize(dt DataType) int {
	switch dt {
	case Float, Int32, Uint32:
		return 4
	case Double, Int64, Uint64:
		return 8
	case Float16, BFloat16, Int16, Uint16:
		return 2
	case Int8, Uint8, Bool:
		return 1
	}
	return 0
}

// QuantRange returns the saturation range [lo, hi] of a quantized integer
// type (int8, uint8, int16, uint16), as QuantizeLinear saturates to it;
// ok is false for any other type.
func QuantRange(dt DataType) (lo, hi float64, ok bool) {
	switch dt {
	case Int8:
		return math.MinInt8, math.MaxInt8, true
	case Uint8:
		return 0, math.MaxUint8, true
	case Int16:
		return math.MinInt16, math.MaxInt16, true
	case Uint16:
		return 0, math.MaxUint16, true
	}
	return 0, 0, false
}

// TypeName returns the numpy-style name of dt ("float32", "int64", ...).
func TypeName(dt DataType) string {
	if e := elemOf(dt); e != nil {
		return e.name
	}
	return fmt.Sprintf("type(%d)", int32(dt))
}

// elemType is an element type linearize computes with: its DataType, its
// numpy-style name and the Go type of its data slice (see Tensor).
type elemType struct {
	dt   DataType
	name string
	data dataSlice
}

var elemTypes = []elemType{
	{Float, "float32", sliceOf[float32]{}},
	{Double, "float64", sliceOf[float64]{}},
	{Float16, "float16", sliceOf[uint16]{}},
	{BFloat16, "bfloat16", sliceOf[uint16]{}},
	{Int8, "int8", sliceOf[int8]{}},
	{Uint8, "uint8", sliceOf[uint8]{}},
	{Int16, "int16", sliceOf[int16]{}},
	{Uint16, "uint16", sliceOf[uint16]{}},
	{Int32, "int32", sliceOf[int32]{}},
	{Uint32, "uint32", sliceOf[uint32]{}},
	{Int64, "int64", sliceOf[int64]{}},
	{Uint64, "uint64", sliceOf[uint64]{}},
	{Bool, "bool", sliceOf[bool]{}},
	{String, "string", sliceOf[string]{}},
}

// elemOf returns the entry of dt in elemTypes, or nil.
func elemOf(dt DataType) *elemType {
	for i := range elemTypes {
		if elemTypes[i].dt == dt {
			return &elemTypes[i]
		}
	}
	return nil
}

// dataSlice is what needs no conversion of the slices of one Go element
// type: Data is a typed slice (see Tensor), and a type assertion reaches
// it without reflect.
type dataSlice interface {
	zeros(n int) any
	// len is len(data), or -1 when data is not a slice of this type.
	len(data any) int
	clone(data any) any
}

type sliceOf[T any] struct{}

func (sliceOf[T]) zeros(n int) any { return make([]T, n) }

func (sliceOf[T]) len(data any) int {
	if d, ok := data.([]T); ok {
		return len(d)
	}
	return -1
}

func (sliceOf[T]) clone(data any) any { return append([]T(nil), data.([]T)...) }

// sliceOfData returns the dataSlice of data's type, or nil for a type
// that no DataType has.
func sliceOfData(data any) dataSlice {
	for _, e := range elemTypes {
		if e.data.len(data) >= 0 {
			return e.data
		}
	}
	return nil
}

// NewZeros returns a zero-filled tensor of type dt and the given shape.
func NewZeros(dt DataType, shape []int) (*Tensor, error) {
	n := NumElements(shape)
	if n < 0 {
		return nil, fmt.Errorf("onnx: invalid shape %v", shape)
	}
	if n > MaxTensorElements {
		return nil, fmt.Errorf("onnx: shape %v exceeds %d elements", shape, int64(MaxTensorElements))
	}
	t := &Tensor{DType: dt, Shape: append([]int(nil), shape...)}
	e := elemOf(dt)
	if e == nil {
		return nil, fmt.Errorf("onnx: unsupported element type %v", dt)
	}
	t.Data = e.data.zeros(n)
	return t, nil
}

// dataLen returns len(t.Data) for any supported slice type, or -1.
func dataLen(v any) int {
	if d := sliceOfData(v); d != nil {
		return d.len(v)
	}
	return -1
}

// Check reports whether the data slice matches DType and Shape.
func (t *Tensor) Check() error {
	n := t.Len()
	if n < 0 {
		return fmt.Errorf("onnx: tensor %v: invalid shape", t.Shape)
	}
	want, err := NewZeros(t.DType, nil)
	if err != nil {
		return err
	}
	if fmt.Sprintf("%T", want.Data) != fmt.Sprintf("%T", t.Data) {
		return fmt.Errorf("onnx: tensor of type %s holds %T", TypeName(t.DType), t.Data)
	}
	if l := dataLen(t.Data); l != n {
		return fmt.Errorf("onnx: tensor %s has %d elements, shape wants %d", t, l, n)
	}
	return nil
}

// HalfToFloat converts IEEE 754 half-precision bits to float32.
func HalfToFloat(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0 && mant == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal
		for mant&0x400 == 0 {
			mant <<= 1
			exp--
		}
		exp++
		mant &= 0x3ff
		return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
	case exp == 0x1f:
		return math.Float32frombits(sign | 0xff<<23 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
}

// FloatToHalf converts a float32 to IEEE 754 half-precision bits, rounding
// to nearest even.
func FloatToHalf(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 {
			return sign
		}
		mant |= 0x800000
		shift := uint32(14 - e)
		half := uint32(1) << (shift - 1)
		r := mant >> shift
		rem := mant & (1<<shift - 1)
		if rem > half || (rem == half && r&1 == 1) {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++
	}
	return sign | uint16(r)
}

// BFloat16ToFloat converts bfloat16 bits to float32.
func BFloat16ToFloat(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// FloatToBFloat16 rounds a float32 to bfloat16 bits, nearest even (NaN
// stays a quiet NaN).
func FloatToBFloat16(f float32) uint16 {
	b := math.Float32bits(f)
	if f != f {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

var le = binary.LittleEndian
