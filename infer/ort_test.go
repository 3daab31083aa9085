package infer

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

const nodeTestDir = "/usr/share/libonnx-testdata/data/node"

func needORT(t *testing.T) {
	t.Helper()
	if err := ORTAvailable(); err != nil {
		t.Skipf("onnxruntime unavailable (run scripts/setup.sh): %v", err)
	}
}

// loadNodeTest reads an ONNX conformance node test: the model and the
// inputs/outputs of test_data_set_0, matched to the graph's inputs and
// outputs by position.
func loadNodeTest(t *testing.T, name string) (*onnxpb.ModelProto, []*onnx.Tensor, []*onnx.Tensor) {
	t.Helper()
	dir := filepath.Join(nodeTestDir, name)
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("ONNX conformance data missing (run scripts/setup.sh to install libonnx-testdata): %v", err)
	}
	m, err := onnx.Load(filepath.Join(dir, "model.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	read := func(prefix string) []*onnx.Tensor {
		var ts []*onnx.Tensor
		for i := 0; ; i++ {
			p := filepath.Join(dir, "test_data_set_0", fmt.Sprintf("%s_%d.pb", prefix, i))
			if _, err := os.Stat(p); err != nil {
				return ts
			}
			_, x, err := onnx.ReadTensorProtoFile(p)
			if err != nil {
				t.Fatal(err)
			}
			ts = append(ts, x)
		}
	}
	return m, read("input"), read("output")
}

// closeTo compares two tensors element by element with the tolerance the
// ONNX backend tests use (rtol 1e-3, atol 1e-7), widened a little for
// float32 round-off. kernels/conformance_test.go has its own, stricter
// checker (float16 tolerances, exact integers); test helpers cannot be
// shared across packages.
func closeTo(got, want *onnx.Tensor, rtol, atol float64) error {
	if got.DType != want.DType {
		return fmt.Errorf("dtype %s, want %s", onnx.TypeName(got.DType), onnx.TypeName(want.DType))
	}
	if fmt.Sprint(got.Shape) != fmt.Sprint(want.Shape) && !(len(got.Shape) == 0 && len(want.Shape) == 0) {
		return fmt.Errorf("shape %v, want %v", got.Shape, want.Shape)
	}
	g, err := got.AsFloat64s()
	if err != nil {
		return err
	}
	w, err := want.AsFloat64s()
	if err != nil {
		return err
	}
	if len(g) != len(w) {
		return fmt.Errorf("%d elements, want %d", len(g), len(w))
	}
	for i := range g {
		if math.IsNaN(w[i]) && math.IsNaN(g[i]) {
			continue
		}
		if math.Abs(g[i]-w[i]) > atol+rtol*math.Abs(w[i]) {
			return fmt.Errorf("element %d = %v, want %v", i, g[i], w[i])
		}
	}
	return nil
}

func TestORTNodeConformance(t *testing.T) {
	needORT(t)
	tests := []struct {
		name string
		why  string
	}{
		{"test_relu", "float32"},
		{"test_matmul_2d", "float32 matmul"},
		{"test_softmax_axis_0", "float32"},
		{"test_gather_0", "int64 indices input"},
		{"test_argmax_default_axis_example", "int64 output"},
		{"test_equal", "bool output"},
		{"test_and2d", "bool inputs"},
		{"test_where_example", "bool condition input"},
		{"test_cast_FLOAT_to_DOUBLE", "float64 output"},
		{"test_cast_FLOAT_to_FLOAT16", "float16 output (workaround)"},
		{"test_cast_FLOAT16_to_FLOAT", "float16 input"},
		{"test_cast_FLOAT_to_BFLOAT16", "bfloat16 output (workaround)"},
		{"test_quantizelinear", "uint8 output"},
		{"test_max_int8", "int8 inputs and output"},
		{"test_add_uint8", "uint8 inputs and output"},
		{"test_dequantizelinear", "uint8 input, rank-0 scale"},
		{"test_size", "rank-0 int64 output (workaround)"},
		{"test_range_int32_type_negative_delta", "rank-0 int32 inputs"},
		{"test_constant", "zero-input model (workaround)"},
		{"test_constantofshape_int_shape_zero", "zero-element output"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, ins, outs := loadNodeTest(t, tc.name)
			s, err := NewORTSession(m, Options{Threads: 1})
			if err != nil {
				t.Fatalf("%s: %v", tc.why, err)
			}
			defer s.Close()
			feed := map[string]*onnx.Tensor{}
			for i, v := range s.Inputs() {
				feed[v.Name] = ins[i]
			}
			got, err := s.Run(feed)
			if err != nil {
				t.Fatalf("%s: %v", tc.why, err)
			}
			if tc.name == "test_constant" && len(s.Inputs()) != 0 {
				t.Fatalf("test_constant has %d inputs, the test wants a zero-input model", len(s.Inputs()))
			}
			for i, v := range s.Outputs() {
				want, rtol := outs[i], 1e-3
				if want.DType == onnx.Uint16 && got[v.Name].DType == onnx.BFloat16 {
					// The conformance data stores bfloat16 as uint16 bits;
					// ONNX and onnxruntime may round differently, so allow
					// one bfloat16 ulp.
					want = &onnx.Tensor{DType: onnx.BFloat16, Shape: want.Shape, Data: want.Data}
					rtol = 1.0 / 128
				}
				if len(want.Shape) == 0 && len(got[v.Name].Shape) != 0 {
					t.Errorf("%s: output %s has shape %v, want a scalar", tc.why, v.Name, got[v.Name].Shape)
				}
				if err := closeTo(got[v.Name], want, rtol, 1e-6); err != nil {
					t.Errorf("%s: output %s: %v", tc.why, v.Name, err)
				}
			}
		})
	}
}

// tinyModel builds y = Neg(Relu(x)) with s = ReduceSum(x) (rank 0) and
// h = Cast(x, float16); neither intermediate has a declared type.
func tinyModel() *onnxpb.ModelProto {
	str := func(s string) *string { return &s }
	node := func(op string, in, out []string, attrs ...*onnxpb.AttributeProto) *onnxpb.NodeProto {
		return &onnxpb.NodeProto{OpType: str(op), Name: str(out[0] + "_node"), Input: in, Output: out, Attribute: attrs}
	}
	ir, ver := int64(8), int64(17)
	zero := int64(0)
	kd := &onnxpb.AttributeProto{Name: str("keepdims"), Type: onnxpb.AttributeProto_INT.Enum(), I: &zero}
	to := int64(onnx.Float16)
	toAttr := &onnxpb.AttributeProto{Name: str("to"), Type: onnxpb.AttributeProto_INT.Enum(), I: &to}
	return &onnxpb.ModelProto{
		IrVersion:   &ir,
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: str(""), Version: &ver}},
		Graph: &onnxpb.GraphProto{
			Name: str("tiny"),
			Node: []*onnxpb.NodeProto{
				node("Relu", []string{"x"}, []string{"a"}),
				node("Neg", []string{"a"}, []string{"y"}),
				node("ReduceSum", []string{"x"}, []string{"s"}, kd),
				node("Cast", []string{"a"}, []string{"h"}, toAttr),
			},
			Input:  []*onnxpb.ValueInfoProto{onnx.MakeValueInfo("x", onnx.Float, []onnx.Dim{{Value: -1, Param: "n"}, {Value: 3}})},
			Output: []*onnxpb.ValueInfoProto{onnx.MakeValueInfo("y", onnx.Float, []onnx.Dim{{Value: -1, Param: "n"}, {Value: 3}})},
		},
	}
}

func TestORTExpose(t *testing.T) {
	needORT(t)
	m := tinyModel()
	before, err := onnx.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open("ort", m, Options{Expose: []string{"a", "s", "h", "x"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	after, err := onnx.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	if string(before) != string(after) {
		t.Error("NewORTSession modified the caller's model")
	}
	x := onnx.NewFloat([]int{2, 3}, []float32{-1, 2, -3, 4.5, 0, -0.25})
	got, err := s.Run(map[string]*onnx.Tensor{"x": x}, "y", "a", "s", "h", "x")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got["x"].Floats()) != fmt.Sprint(x.Floats()) {
		t.Errorf("exposed graph input x = %v, want %v", got["x"].Floats(), x.Floats())
	}
	// Closed-form expectations.
	var sum float64
	relu := make([]float32, 6)
	for i, v := range x.Floats() {
		sum += float64(v)
		relu[i] = max(v, 0)
	}
	for i, v := range got["a"].Floats() {
		if v != relu[i] || got["y"].Floats()[i] != -relu[i] {
			t.Fatalf("a/y at %d: %v/%v, want %v/%v", i, v, got["y"].Floats()[i], relu[i], -relu[i])
		}
	}
	if sh := got["s"].Shape; len(sh) != 0 || math.Abs(float64(got["s"].Floats()[0])-sum) > 1e-6 {
		t.Errorf("s = %v%v, want scalar %v", got["s"].Floats(), sh, sum)
	}
	h := got["h"]
	if h.DType != onnx.Float16 || fmt.Sprint(h.Shape) != "[2 3]" {
		t.Fatalf("h is %s, want float16[2 3]", h)
	}
	for i, b := range h.Data.([]uint16) {
		if onnx.HalfToFloat(b) != relu[i] { // all values are exact in float16
			t.Errorf("h[%d] = %v, want %v", i, onnx.HalfToFloat(b), relu[i])
		}
	}
	if _, err := s.Run(map[string]*onnx.Tensor{"x": x}, "nope"); err == nil {
		t.Error("Run accepted an unknown output name")
	}
}

func TestORTBadInputs(t *testing.T) {
	needORT(t)
	s, err := NewORTSession(tinyModel(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cases := []struct {
		name string
		feed map[string]*onnx.Tensor
	}{
		{"missing", map[string]*onnx.Tensor{}},
		{"unknown name", map[string]*onnx.Tensor{"x": onnx.NewFloat([]int{1, 3}, make([]float32, 3)), "z": onnx.NewFloat([]int{1}, []float32{0})}},
		{"wrong dtype", map[string]*onnx.Tensor{"x": onnx.NewInt64([]int{1, 3}, make([]int64, 3))}},
		{"wrong fixed dim", map[string]*onnx.Tensor{"x": onnx.NewFloat([]int{1, 4}, make([]float32, 4))}},
		{"wrong rank", map[string]*onnx.Tensor{"x": onnx.NewFloat([]int{3}, make([]float32, 3))}},
		{"data/shape mismatch", map[string]*onnx.Tensor{"x": onnx.NewFloat([]int{2, 3}, make([]float32, 5))}},
	}
	for _, c := range cases {
		_, err := s.Run(c.feed)
		if err == nil {
			t.Errorf("%s: Run succeeded", c.name)
			continue
		}
		t.Logf("%s: %v", c.name, err)
	}
	if _, err := Open("no-such-backend", tinyModel(), Options{}); err == nil {
		t.Error("Open accepted an unknown backend")
	}
	if _, err := Open("ort", tinyModel(), Options{Expose: []string{"ghost"}}); err == nil {
		t.Error("Expose accepted a value the graph lacks")
	}
}

func TestLibraryPathEnv(t *testing.T) {
	t.Setenv(LibraryEnv, filepath.Join(t.TempDir(), "missing.so"))
	_, err := LibraryPath()
	if err == nil || !strings.Contains(err.Error(), "scripts/setup.sh") {
		t.Errorf("LibraryPath with a missing override: %v, want an error naming scripts/setup.sh", err)
	}
	lib := filepath.Join(t.TempDir(), "libonnxruntime.so.1")
	os.WriteFile(lib, []byte("x"), 0o644)
	t.Setenv(LibraryEnv, lib)
	if p, err := LibraryPath(); err != nil || p != lib {
		t.Errorf("LibraryPath = %q, %v; want %q", p, err, lib)
	}
}

func TestFindRepoRoot(t *testing.T) {
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "go.mod"), []byte("module x\n"), 0o644)
	os.MkdirAll(filepath.Join(root, ".tools", "lib"), 0o755)
	deep := filepath.Join(root, "a", "b")
	os.MkdirAll(deep, 0o755)
	if got, ok := findRepoRoot(deep); !ok || got != root {
		t.Errorf("findRepoRoot(%s) = %q, %v; want %q", deep, got, ok, root)
	}
	if _, ok := findRepoRoot(t.TempDir()); ok {
		t.Error("findRepoRoot found a root in an empty temp dir")
	}
}

// TestORTConcurrent opens and runs sessions from several goroutines: the
// environment is initialized once and sessions run in parallel.
func TestORTConcurrent(t *testing.T) {
	needORT(t)
	shared, err := NewORTSession(tinyModel(), Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer shared.Close()
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		go func(g int) {
			s := shared
			if g%2 == 0 { // half open their own session
				own, err := NewORTSession(tinyModel(), Options{Threads: 1})
				if err != nil {
					errs <- err
					return
				}
				defer own.Close()
				s = own
			}
			x := onnx.NewFloat([]int{1, 3}, []float32{float32(g), -1, 2})
			out, err := s.Run(map[string]*onnx.Tensor{"x": x})
			if err == nil {
				if y := out["y"].Floats(); y[0] != -float32(g) || y[1] != 0 || y[2] != -2 {
					err = fmt.Errorf("goroutine %d: y = %v", g, y)
				}
			}
			errs <- err
		}(g)
	}
	for g := 0; g < 8; g++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
