package onnx

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/linearize/linearize/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// equalTensors compares type, shape and data exactly (NaNs compare by bits
// because they are stored as bits in float16 and compared with == otherwise;
// the test data holds no NaN in float32/float64).
func equalTensors(a, b *Tensor) bool {
	if a.DType != b.DType || fmt.Sprint(a.Shape) != fmt.Sprint(b.Shape) {
		return false
	}
	return reflect.DeepEqual(a.Data, b.Data)
}

// sampleTensors returns a seeded tensor of every fixed-size dtype, with the
// extreme values of each integer type.
func sampleTensors(seed uint64) []*Tensor {
	r := rand.New(rand.NewPCG(seed, 1))
	shape := []int{2, 3}
	n := 6
	f32 := make([]float32, n)
	f64 := make([]float64, n)
	for i := range f32 {
		f32[i] = float32(r.NormFloat64())
		f64[i] = r.NormFloat64()
	}
	f32[0] = float32(math.Inf(-1))
	h := make([]uint16, n)
	for i := range h {
		h[i] = uint16(r.Uint32())
	}
	return []*Tensor{
		{Float, shape, f32},
		{Double, shape, f64},
		{Float16, shape, h},
		{BFloat16, shape, append([]uint16(nil), h...)},
		{Int8, shape, []int8{math.MinInt8, -1, 0, 1, 7, math.MaxInt8}},
		{Uint8, shape, []uint8{0, 1, 2, 128, 200, math.MaxUint8}},
		{Int16, shape, []int16{math.MinInt16, -1, 0, 1, 300, math.MaxInt16}},
		{Uint16, shape, []uint16{0, 1, 2, 40000, 50000, math.MaxUint16}},
		{Int32, shape, []int32{math.MinInt32, -1, 0, 1, 1 << 20, math.MaxInt32}},
		{Uint32, shape, []uint32{0, 1, 2, 1 << 31, 3e9, math.MaxUint32}},
		{Int64, shape, []int64{math.MinInt64, -1, 0, 1, 1 << 40, math.MaxInt64}},
		{Uint64, shape, []uint64{0, 1, 2, 1 << 63, 1e19, math.MaxUint64}},
		{Bool, shape, []bool{true, false, false, true, true, false}},
		{Float, nil, []float32{3.5}},    // rank 0
		{Int64, []int{0, 4}, []int64{}}, // empty
		{Bool, []int{1}, []bool{true}},  // rank 1
		{Double, []int{1, 1, 1}, []float64{math.Copysign(0, -1)}},
	}
}

// leBytes is an independent little-endian encoding via encoding/binary.
func leBytes(t *Tensor) []byte {
	var buf bytes.Buffer
	binary.Write(&buf, binary.LittleEndian, t.Data)
	return buf.Bytes()
}

// toInt32s converts the small integers of d to the int32 the spec stores them
// as.
func toInt32s[T int8 | uint8 | int16 | uint16](d []T) []int32 {
	var out []int32
	for _, v := range d {
		out = append(out, int32(v))
	}
	return out
}

// typedProto fills the typed field the ONNX spec names for each dtype.
func typedProto(name string, t *Tensor) *onnxpb.TensorProto {
	tp := &onnxpb.TensorProto{Name: proto.String(name), DataType: proto.Int32(int32(t.DType))}
	for _, d := range t.Shape {
		tp.Dims = append(tp.Dims, int64(d))
	}
	switch d := t.Data.(type) {
	case []float32:
		tp.FloatData = d
	case []float64:
		tp.DoubleData = d
	case []int64:
		tp.Int64Data = d
	case []uint64:
		tp.Uint64Data = d
	case []uint32:
		for _, v := range d {
			tp.Uint64Data = append(tp.Uint64Data, uint64(v))
		}
	case []int32:
		tp.Int32Data = d
	case []int16:
		tp.Int32Data = toInt32s(d)
	case []int8:
		tp.Int32Data = toInt32s(d)
	case []uint8:
		tp.Int32Data = toInt32s(d)
	case []uint16:
		tp.Int32Data = toInt32s(d)
	case []bool:
		for _, v := range d {
			x := int32(0)
			if v {
				x = 1
			}
			tp.Int32Data = append(tp.Int32Data, x)
		}
	}
	return tp
}

func TestTensorEncodeDecode(t *testing.T) {
	for _, want := range sampleTensors(1) {
		name := want.String()
		t.Run(name, func(t *testing.T) {
			tp, err := EncodeTensor("x", want)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(tp.RawData, leBytes(want)) {
				t.Errorf("raw_data differs from the little-endian encoding")
			}
			got, err := DecodeTensor(tp)
			if err != nil {
				t.Fatal(err)
			}
			if !equalTensors(got, want) {
				t.Errorf("raw round trip: got %v %v, want %v", got, got.Data, want.Data)
			}
			got, err = DecodeTensor(typedProto("x", want))
			if err != nil {
				t.Fatal(err)
			}
			if !equalTensors(got, want) {
				t.Errorf("typed decode: got %v %v, want %v", got, got.Data, want.Data)
			}
		})
	}
}

func TestTensorDecodeErrors(t *testing.T) {
	f := NewFloat([]int{2, 2}, []float32{1, 2, 3, 4})
	short, _ := EncodeTensor("weights.0", f)
	short.RawData = short.RawData[:15]
	typed := typedProto("bias", f)
	typed.FloatData = typed.FloatData[:3]
	neg, _ := EncodeTensor("neg", f)
	neg.Dims = []int64{-1, 4}
	huge, _ := EncodeTensor("huge", f)
	huge.Dims = []int64{1 << 30, 1 << 30, 1 << 30}
	unk, _ := EncodeTensor("odd", f)
	unk.DataType = proto.Int32(99)
	ext, _ := EncodeTensor("ext", f)
	ext.DataLocation = onnxpb.TensorProto_EXTERNAL.Enum()
	cases := []struct {
		tp   *onnxpb.TensorProto
		want string
	}{
		{short, `"weights.0"`},
		{typed, `"bias"`},
		{neg, `"neg"`},
		{huge, `"huge"`},
		{unk, `"odd"`},
		{ext, `"ext"`},
	}
	for _, c := range cases {
		_, err := DecodeTensor(c.tp)
		if err == nil {
			t.Errorf("%s: decoded", c.want)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %q does not name tensor %s", err, c.want)
		}
	}
	if _, err := EncodeTensor("bad", NewFloat([]int{3}, []float32{1})); err == nil {
		t.Error("EncodeTensor accepted data shorter than the shape")
	}
}

func TestNPYRoundTrip(t *testing.T) {
	dir := t.TempDir()
	for i, want := range sampleTensors(2) {
		if want.DType == BFloat16 {
			continue // numpy has no bfloat16
		}
		p := filepath.Join(dir, fmt.Sprintf("t%d.npy", i))
		if err := WriteNPY(p, want); err != nil {
			t.Fatalf("%v: %v", want, err)
		}
		got, err := ReadNPY(p)
		if err != nil {
			t.Fatalf("%v: %v", want, err)
		}
		if !equalTensors(got, want) {
			t.Errorf("npy round trip of %v: got %v %v", want, got, got.Data)
		}
		got, err = ReadTensorFile(p)
		if err != nil || !equalTensors(got, want) {
			t.Errorf("ReadTensorFile(%s) = %v, %v", p, got, err)
		}
		pb := filepath.Join(dir, fmt.Sprintf("t%d.pb", i))
		if err := WriteTensorProtoFile(pb, "input", want); err != nil {
			t.Fatal(err)
		}
		name, got, err := ReadTensorProtoFile(pb)
		if err != nil || name != "input" || !equalTensors(got, want) {
			t.Errorf("TensorProto file round trip of %v: %q %v %v", want, name, got, err)
		}
	}
}

// TestNPYByHand decodes a file laid out by hand from the .npy format
// specification (version 1.0, '<i8', shape (2, 2)).
func TestNPYByHand(t *testing.T) {
	header := "{'descr': '<i8', 'fortran_order': False, 'shape': (2, 2), }"
	for (10+len(header)+1)%64 != 0 {
		header += " "
	}
	header += "\n"
	var b bytes.Buffer
	b.WriteString("\x93NUMPY\x01\x00")
	binary.Write(&b, binary.LittleEndian, uint16(len(header)))
	b.WriteString(header)
	binary.Write(&b, binary.LittleEndian, []int64{1, -2, 3, 1 << 40})
	got, err := DecodeNPY(b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	want := NewInt64([]int{2, 2}, []int64{1, -2, 3, 1 << 40})
	if !equalTensors(got, want) {
		t.Errorf("got %v %v, want %v", got, got.Data, want.Data)
	}
	bad := map[string][]byte{
		"truncated body": b.Bytes()[:b.Len()-3],
		"fortran":        bytes.Replace(b.Bytes(), []byte("False"), []byte("True "), 1),
		"big-endian":     bytes.Replace(b.Bytes(), []byte("<i8"), []byte(">i8"), 1),
		"not npy":        []byte("hello world, not numpy"),
	}
	for name, data := range bad {
		if _, err := DecodeNPY(data); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

func TestFloat16ClosedForm(t *testing.T) {
	cases := []struct {
		bits uint16
		f    float32
	}{
		{0x0000, 0},
		{0x8000, float32(math.Copysign(0, -1))},
		{0x3c00, 1},
		{0xc000, -2},
		{0x3800, 0.5},
		{0x7bff, 65504},                       // largest finite
		{0x0400, float32(math.Ldexp(1, -14))}, // smallest normal
		{0x0001, float32(math.Ldexp(1, -24))}, // smallest subnormal
		{0x03ff, float32(math.Ldexp(1023, -24))},
		{0x7c00, float32(math.Inf(1))},
		{0xfc00, float32(math.Inf(-1))},
		{0x3555, (1 + 341.0/1024) / 4}, // 1/3 rounded to 11 bits
	}
	for _, c := range cases {
		if got := HalfToFloat(c.bits); got != c.f || math.Signbit(float64(got)) != math.Signbit(float64(c.f)) {
			t.Errorf("HalfToFloat(%#04x) = %v, want %v", c.bits, got, c.f)
		}
		if got := FloatToHalf(c.f); got != c.bits {
			t.Errorf("FloatToHalf(%v) = %#04x, want %#04x", c.f, got, c.bits)
		}
	}
	if !math.IsNaN(float64(HalfToFloat(0x7e00))) {
		t.Error("HalfToFloat(0x7e00) is not NaN")
	}
	if h := FloatToHalf(float32(math.NaN())); h&0x7c00 != 0x7c00 || h&0x3ff == 0 {
		t.Errorf("FloatToHalf(NaN) = %#04x, not a NaN", h)
	}
	// Rounding to nearest, ties to even.
	rounding := []struct {
		f    float32
		bits uint16
	}{
		{1.0 / 3.0, 0x3555},
		{0.1, 0x2e66},
		{2049, 0x6800},  // tie between 2048 and 2050: even is 2048
		{2051, 0x6802},  // tie between 2050 and 2052: even is 2052
		{65519, 0x7bff}, // below the midpoint to infinity
		{65520, 0x7c00}, // the midpoint rounds to infinity
		{1e6, 0x7c00},
		{float32(math.Ldexp(1, -25)), 0x0000}, // tie with 0: even
		{float32(math.Ldexp(3, -26)), 0x0001}, // above the tie
		{float32(math.Ldexp(3, -25)), 0x0002}, // 1.5 ulp ties to 2
		{float32(math.Ldexp(1, -30)), 0x0000},
	}
	for _, c := range rounding {
		if got := FloatToHalf(c.f); got != c.bits {
			t.Errorf("FloatToHalf(%v) = %#04x, want %#04x", c.f, got, c.bits)
		}
	}
	// Every finite half converts to float32 and back unchanged, and the
	// float32 value equals the closed form (-1)^s 2^(e-15) (1 + m/1024).
	for b := 0; b < 1<<16; b++ {
		h := uint16(b)
		e, m := int(h>>10)&0x1f, float64(h&0x3ff)
		if e == 0x1f {
			continue
		}
		var want float64
		if e == 0 {
			want = math.Ldexp(m, -24)
		} else {
			want = math.Ldexp(1+m/1024, e-15)
		}
		if h&0x8000 != 0 {
			want = -want
		}
		f := HalfToFloat(h)
		if float64(f) != want {
			t.Fatalf("HalfToFloat(%#04x) = %v, want %v", h, f, want)
		}
		if FloatToHalf(f) != h {
			t.Fatalf("FloatToHalf(HalfToFloat(%#04x)) = %#04x", h, FloatToHalf(f))
		}
	}
}

// TestAsFloat32s checks the float32 view of each kind of numeric tensor
// against values known in closed form: halves widen exactly, integers up
// to 2^24 are exact and beyond round to even, float64 rounds to nearest.
func TestAsFloat32s(t *testing.T) {
	cases := []struct {
		name string
		in   *Tensor
		want []float32
	}{
		{"float32 copied", NewFloat([]int{2}, []float32{1.5, -0.25}), []float32{1.5, -0.25}},
		{"float16 exact", &Tensor{DType: Float16, Shape: []int{3}, Data: []uint16{0x3c00, 0xc000, 0x3555}}, []float32{1, -2, 0.333251953125}},
		{"bfloat16 exact", &Tensor{DType: BFloat16, Shape: []int{2}, Data: []uint16{0x3f80, 0x4049}}, []float32{1, 3.140625}},
		{"float64 rounded", &Tensor{DType: Double, Shape: []int{2}, Data: []float64{0.1, 1 + 0x1p-30}}, []float32{0.1, 1}},
		{"int64 past 2^24", &Tensor{DType: Int64, Shape: []int{3}, Data: []int64{1 << 24, 1<<24 + 1, 1<<24 + 3}}, []float32{1 << 24, 1 << 24, 1<<24 + 4}},
		{"uint8", &Tensor{DType: Uint8, Shape: []int{2}, Data: []uint8{0, 255}}, []float32{0, 255}},
		{"bool", &Tensor{DType: Bool, Shape: []int{2}, Data: []bool{true, false}}, []float32{1, 0}},
	}
	for _, c := range cases {
		got, err := c.in.AsFloat32s()
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
	src := []float32{1, 2}
	got, _ := NewFloat([]int{2}, src).AsFloat32s()
	got[0] = 7
	if src[0] != 1 {
		t.Error("AsFloat32s shares the float32 data it should copy")
	}
	if _, err := (&Tensor{DType: String, Shape: []int{1}, Data: []string{"a"}}).AsFloat32s(); err == nil {
		t.Error("a string tensor gave no error")
	}
}

// TestDecodeRows: the rows DecodeRows reads, from raw_data and from the
// typed fields, are the rows of the whole tensor DecodeTensor reads, in
// the order asked, repeats included.
func TestDecodeRows(t *testing.T) {
	for _, whole := range sampleTensors(2) {
		if len(whole.Shape) == 0 {
			continue
		}
		per := NumElements(whole.Shape[1:])
		for _, rows := range [][]int{{0}, {whole.Shape[0] - 1, 0, whole.Shape[0] - 1}, {}} {
			if whole.Shape[0] == 0 && len(rows) > 0 {
				continue
			}
			want := &Tensor{DType: whole.DType, Shape: append([]int{len(rows)}, whole.Shape[1:]...)}
			all := reflect.ValueOf(whole.Data)
			picked := reflect.MakeSlice(all.Type(), 0, len(rows)*per)
			for _, r := range rows {
				picked = reflect.AppendSlice(picked, all.Slice(r*per, (r+1)*per))
			}
			want.Data = picked.Interface()
			raw, err := EncodeTensor("x", whole)
			if err != nil {
				t.Fatal(err)
			}
			for form, tp := range map[string]*onnxpb.TensorProto{"raw": raw, "typed": typedProto("x", whole)} {
				got, err := DecodeRows(tp, rows)
				if err != nil {
					t.Errorf("%v %s rows %v: %v", whole, form, rows, err)
					continue
				}
				if !equalTensors(got, want) {
					t.Errorf("%v %s rows %v: got %v %v, want %v", whole, form, rows, got, got.Data, want.Data)
				}
			}
		}
	}
	tp, err := EncodeTensor("table", NewFloat([]int{3, 2}, make([]float32, 6)))
	if err != nil {
		t.Fatal(err)
	}
	short := proto.Clone(tp).(*onnxpb.TensorProto)
	short.RawData = short.RawData[:20]
	scalar, _ := EncodeTensor("s", NewFloat(nil, []float32{1}))
	for _, c := range []struct {
		name string
		tp   *onnxpb.TensorProto
		rows []int
		want string
	}{
		{"row past the end", tp, []int{3}, `tensor "table": row 3 is outside [0, 3)`},
		{"negative row", tp, []int{-1}, `row -1 is outside`},
		{"short raw_data", short, []int{0}, "raw_data has 20 bytes"},
		{"scalar", scalar, []int{0}, "a scalar has no rows"},
		{"nil", nil, nil, "missing tensor"},
	} {
		if _, err := DecodeRows(c.tp, c.rows); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
		}
	}
}

// TestIsFloat: the four floating types, and no integer, bool or string
// type.
func TestIsFloat(t *testing.T) {
	for dt, want := range map[DataType]bool{Float: true, Double: true, Float16: true, BFloat16: true,
		Int64: false, Int32: false, Int8: false, Uint8: false, Bool: false, String: false} {
		if IsFloat(dt) != want {
			t.Errorf("IsFloat(%v) = %v, want %v", dt, !want, want)
		}
	}
}
