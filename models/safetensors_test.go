package models

import (
	"bytes"
	"encoding/binary"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/linearize/linearize/onnx"
)

// TestReadSafetensors reads a file written by the reference safetensors
// library (testdata/realmodel/safetensors_fixture.py) and checks every
// value against the closed-form pattern the script wrote.
func TestReadSafetensors(t *testing.T) {
	ts, err := ReadSafetensors(filepath.Join("..", "testdata", "realmodel", "small.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		dt    onnx.DataType
		shape []int
	}{
		"f32.matrix": {onnx.Float, []int{3, 5}}, "f64.vector": {onnx.Double, []int{4}},
		"f16.cube": {onnx.Float16, []int{2, 2, 3}}, "i64.ids": {onnx.Int64, []int{1, 6}},
		"i32.scalar": {onnx.Int32, []int{}}, "u8.bytes": {onnx.Uint8, []int{9}},
		"bool.mask": {onnx.Bool, []int{2, 4}}, "f32.empty": {onnx.Float, []int{0, 3}},
	}
	if len(ts) != len(want) {
		t.Fatalf("%d tensors, want %d", len(ts), len(want))
	}
	for name, w := range want {
		x, ok := ts[name]
		if !ok {
			t.Errorf("%s missing", name)
			continue
		}
		if x.DType != w.dt || !slices.Equal(x.Shape, w.shape) {
			t.Errorf("%s: %s%v, want %s%v", name, onnx.TypeName(x.DType), x.Shape, onnx.TypeName(w.dt), w.shape)
			continue
		}
		if err := x.Check(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		for i := 0; i < x.Len(); i++ {
			fl := float64(i%7) - 3 + float64(i)/8
			var got, exp float64
			switch d := x.Data.(type) {
			case []float32:
				got, exp = float64(d[i]), float64(float32(fl))
			case []float64:
				got, exp = d[i], fl
			case []uint16:
				f, _ := ToFloat32(x)
				got, exp = float64(f.Floats()[i]), fl // exact in float16 for these values
			case []int64:
				got, exp = float64(d[i]), float64(i%7-3)
			case []int32:
				got, exp = float64(d[i]), float64(i%7-3)
			case []uint8:
				got, exp = float64(d[i]), float64(i%7)
			case []bool:
				got, exp = b2f(d[i]), b2f(i%3 == 0)
			}
			if got != exp {
				t.Errorf("%s[%d] = %v, want %v", name, i, got, exp)
			}
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// build writes a safetensors stream from a header and data.
func build(header string, data []byte) []byte {
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, uint64(len(header)))
	b.WriteString(header)
	b.Write(data)
	return b.Bytes()
}

func TestSafetensorsRejects(t *testing.T) {
	four := make([]byte, 8)
	binary.LittleEndian.PutUint32(four, math.Float32bits(1.5))
	for _, c := range []struct {
		name, want string
		file       []byte
	}{
		{"short", "too short", []byte{1, 2}},
		{"header too long", "header length", build(`{}`, nil)[:9]},
		{"bad json", "header JSON", build(`{"a":`, nil)},
		{"dtype", "unsupported dtype", build(`{"a":{"dtype":"F8","shape":[1],"data_offsets":[0,1]}}`, four)},
		{"size mismatch", "want 8", build(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, four)},
		{"past end", "outside", build(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}`, four)},
		{"negative shape", "invalid shape", build(`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, four)},
		{"huge shape", "invalid shape", build(`{"a":{"dtype":"F64","shape":[4611686018427387904,4],"data_offsets":[0,8]}}`, four)},
		{"overlap", "overlaps", build(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}}`, four)},
		{"bad bool", "bool byte", build(`{"a":{"dtype":"BOOL","shape":[1],"data_offsets":[0,1]}}`, []byte{7})},
	} {
		_, err := DecodeSafetensors(bytes.NewReader(c.file), int64(len(c.file)))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to mention %q", c.name, err, c.want)
		}
	}
	ok := build(`{"__metadata__":{"k":"v"},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, append(make([]byte, 4), four[:4]...))
	ts, err := DecodeSafetensors(bytes.NewReader(ok), int64(len(ok)))
	if err != nil || ts["a"].Floats()[0] != 1.5 {
		t.Errorf("gap before the tensor: %v %v", ts, err)
	}
	if _, err := ReadSafetensors(filepath.Join(t.TempDir(), "none.safetensors")); err == nil || !strings.HasPrefix(err.Error(), "models:") {
		t.Errorf("missing file: err = %v", err)
	}
}

// FuzzDecodeSafetensors: arbitrary bytes never panic, and whatever decodes
// is consistent with its shape.
func FuzzDecodeSafetensors(f *testing.F) {
	f.Add(build(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, []byte{0, 0, 192, 63}))
	f.Add(build(`{"__metadata__":{},"b":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}}`, []byte{0, 1}))
	f.Add([]byte{255, 255, 255, 255, 255, 255, 255, 255})
	f.Fuzz(func(t *testing.T, data []byte) {
		ts, err := DecodeSafetensors(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return
		}
		for name, x := range ts {
			if err := x.Check(); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
	})
}
