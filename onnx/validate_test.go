package onnx_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

func sp(s string) *string { return &s }
func ip(i int32) *int32   { return &i }
func i64p(i int64) *int64 { return &i }

// tinyModel is Y = MatMul(X, W) + B with a valid structure; the cases below
// break it one way each.
func tinyModel() *onnxpb.ModelProto {
	w, _ := onnx.EncodeTensor("W", onnx.NewFloat([]int{2, 2}, []float32{1, 2, 3, 4}))
	b, _ := onnx.EncodeTensor("B", onnx.NewFloat([]int{2}, []float32{1, 1}))
	return &onnxpb.ModelProto{
		IrVersion:   i64p(8),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: sp(""), Version: i64p(17)}},
		Graph: &onnxpb.GraphProto{
			Name: sp("g"),
			Node: []*onnxpb.NodeProto{
				{Name: sp("mm"), OpType: sp("MatMul"), Input: []string{"X", "W"}, Output: []string{"T"}},
				{Name: sp("add"), OpType: sp("Add"), Input: []string{"T", "B"}, Output: []string{"Y"}},
			},
			Initializer: []*onnxpb.TensorProto{w, b},
			Input:       []*onnxpb.ValueInfoProto{onnx.MakeValueInfo("X", onnx.Float, []onnx.Dim{{Value: 1}, {Value: 2}})},
			Output:      []*onnxpb.ValueInfoProto{onnx.MakeValueInfo("Y", onnx.Float, []onnx.Dim{{Value: 1}, {Value: 2}})},
		},
	}
}

func TestValidateRejectsEachClass(t *testing.T) {
	cases := []struct {
		name   string
		break_ func(m *onnxpb.ModelProto)
		want   string // substring of the error
	}{
		{"cycle", func(m *onnxpb.ModelProto) {
			m.Graph.Node[0].Input[0] = "Y" // mm reads add's output, add reads mm's
		}, "cycle"},
		{"dangling input", func(m *onnxpb.ModelProto) {
			m.Graph.Node[1].Input[1] = "nowhere"
		}, `node "add" (Add): input "nowhere"`},
		{"missing initializer", func(m *onnxpb.ModelProto) {
			m.Graph.Initializer = m.Graph.Initializer[:1]
		}, `input "B"`},
		{"duplicate output", func(m *onnxpb.ModelProto) {
			m.Graph.Node[1].Output[0] = "T"
			m.Graph.Output[0].Name = sp("T")
		}, `output "T" is produced by another node too`},
		{"output shadows initializer", func(m *onnxpb.ModelProto) {
			m.Graph.Node[0].Output[0] = "W"
		}, `shadows`},
		{"graph output not produced", func(m *onnxpb.ModelProto) {
			m.Graph.Output[0].Name = sp("Z")
		}, `output "Z" is not produced`},
		{"raw size mismatch", func(m *onnxpb.ModelProto) {
			m.Graph.Initializer[0].RawData = m.Graph.Initializer[0].RawData[:12]
		}, `tensor "W": raw_data has 12 bytes`},
		{"typed size mismatch", func(m *onnxpb.ModelProto) {
			t := m.Graph.Initializer[1]
			t.RawData = nil
			t.FloatData = []float32{1, 2, 3}
		}, `tensor "B": 3 values`},
		{"absurd dims", func(m *onnxpb.ModelProto) {
			m.Graph.Initializer[0].Dims = []int64{1 << 40, 1 << 40}
		}, `tensor "W": shape`},
		{"huge dim beside a zero one", func(m *onnxpb.ModelProto) {
			m.Graph.Initializer[0].Dims = []int64{0, 1 << 41}
			m.Graph.Initializer[0].RawData = nil
		}, `tensor "W": shape`},
		{"sparse initializer without indices", func(m *onnxpb.ModelProto) {
			v, _ := onnx.EncodeTensor("S", onnx.NewFloat([]int{1}, []float32{1}))
			m.Graph.SparseInitializer = []*onnxpb.SparseTensorProto{{Values: v, Dims: []int64{4}}}
		}, `sparse initializer without values or indices`},
		{"segmented tensor", func(m *onnxpb.ModelProto) {
			m.Graph.Initializer[0].Segment = &onnxpb.TensorProto_Segment{Begin: i64p(0), End: i64p(2)}
		}, `tensor "W": segmented`},
		{"negative dim", func(m *onnxpb.ModelProto) {
			m.Graph.Initializer[0].Dims = []int64{-2, -2}
		}, `negative dimension`},
		{"unimported domain", func(m *onnxpb.ModelProto) {
			m.Graph.Node[1].Domain = sp("ai.linearize")
		}, `domain "ai.linearize" is not in the model's opset_import`},
		{"no opset import", func(m *onnxpb.ModelProto) {
			m.OpsetImport = nil
		}, `no opset_import`},
		// A model decoded from bytes with its weights in another file
		// (found by FuzzDecodeModel: Validate passed it, DecodeTensor
		// then refused the tensor).
		{"external data not loaded", func(m *onnxpb.ModelProto) {
			w := m.Graph.Initializer[0]
			w.RawData = nil
			w.DataLocation = onnxpb.TensorProto_EXTERNAL.Enum()
			w.ExternalData = []*onnxpb.StringStringEntryProto{{Key: sp("location"), Value: sp("w.bin")}}
		}, `tensor "W": external data not loaded`},
	}
	if err := onnx.Validate(tinyModel()); err != nil {
		t.Fatalf("the unbroken model is invalid: %v", err)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := tinyModel()
			c.break_(m)
			err := onnx.Validate(m)
			if err == nil {
				t.Fatal("Validate accepted the broken model")
			}
			if !errors.Is(err, onnx.ErrInvalid) {
				t.Errorf("error %v is not ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not mention %q", err, c.want)
			}
		})
	}
}

// TestValidateAcceptsRealModels guards against false alarms: every model
// written by a real tool must pass.
func TestValidateAcceptsRealModels(t *testing.T) {
	var paths []string
	corpus, _ := filepath.Glob("../../shared/corpus/ort-fusion/*.onnx")
	paths = append(paths, corpus...)
	node, _ := filepath.Glob("/usr/share/libonnx-testdata/data/node/*/model.onnx")
	paths = append(paths, node...)
	if len(paths) == 0 {
		t.Skip("no corpus (../shared/corpus) and no ONNX test data; run scripts/setup.sh")
	}
	for _, p := range paths {
		m, err := onnx.Load(p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if err := onnx.Validate(m); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	t.Logf("validated %d real models (%d corpus, %d ONNX node tests)", len(paths), len(corpus), len(node))
}

func FuzzDecodeModel(f *testing.F) {
	b, _ := proto.Marshal(tinyModel())
	f.Add(b)
	seeds, _ := filepath.Glob("../../shared/corpus/ort-fusion/*.onnx")
	for _, p := range seeds {
		if data, err := os.ReadFile(p); err == nil && len(data) < 64<<10 {
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := onnx.Decode(data)
		if err != nil {
			return
		}
		if onnx.Validate(m) != nil {
			return
		}
		for _, tp := range m.Graph.Initializer {
			if _, err := onnx.DecodeTensor(tp); err != nil {
				t.Fatalf("Validate accepted tensor %q that DecodeTensor rejects: %v", tp.GetName(), err)
			}
		}
		if _, err := onnx.Encode(m); err != nil {
			t.Fatal(err)
		}
		onnx.NewIndex(m.Graph)
		onnx.RemoveDeadNodes(m.Graph)
	})
}

func FuzzDecodeTensor(f *testing.F) {
	for _, tc := range []*onnx.Tensor{
		onnx.NewFloat([]int{2, 2}, []float32{1, 2, 3, 4}),
		onnx.NewInt64([]int{3}, []int64{1, -2, 3}),
		{DType: onnx.Bool, Shape: []int{2}, Data: []bool{true, false}},
		{DType: onnx.Float16, Shape: []int{1}, Data: []uint16{0x3c00}},
	} {
		tp, _ := onnx.EncodeTensor("t", tc)
		b, _ := proto.Marshal(tp)
		f.Add(b)
	}
	typed := &onnxpb.TensorProto{Name: sp("typed"), DataType: ip(int32(onnx.Int32)), Dims: []int64{2}, Int32Data: []int32{7, 8}}
	b, _ := proto.Marshal(typed)
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		tp := &onnxpb.TensorProto{}
		if proto.Unmarshal(data, tp) != nil {
			return
		}
		x, err := onnx.DecodeTensor(tp)
		if err != nil {
			return
		}
		if err := x.Check(); err != nil {
			t.Fatalf("decoded tensor is inconsistent: %v", err)
		}
		back, err := onnx.EncodeTensor("t", x)
		if err != nil {
			t.Fatalf("re-encoding: %v", err)
		}
		y, err := onnx.DecodeTensor(back)
		if err != nil {
			t.Fatalf("decoding the re-encoded tensor: %v", err)
		}
		if len(onnx.EncodeRaw(x)) != len(onnx.EncodeRaw(y)) || string(onnx.EncodeRaw(x)) != string(onnx.EncodeRaw(y)) {
			t.Fatal("round trip changed the data")
		}
	})
}

func FuzzDecodeNPY(f *testing.F) {
	var sb strings.Builder
	_ = onnx.EncodeNPY(&sb, onnx.NewFloat([]int{2, 3}, []float32{1, 2, 3, 4, 5, 6}))
	f.Add([]byte(sb.String()))
	f.Fuzz(func(t *testing.T, data []byte) {
		x, err := onnx.DecodeNPY(data)
		if err != nil {
			return
		}
		if err := x.Check(); err != nil {
			t.Fatalf("decoded .npy tensor is inconsistent: %v", err)
		}
	})
}

// FuzzLoadExternal writes the fuzzed bytes as a model beside a data file,
// a file outside its folder and a symlink to it, and loads it: external
// data must only ever be read from inside the folder and within the data
// file, and a model Load accepts must hold its data in raw_data that
// decodes.
func FuzzLoadExternal(f *testing.F) {
	seed := func(location string, offset, length int64) {
		m := tinyModel()
		w := m.Graph.Initializer[0]
		loc := onnxpb.TensorProto_EXTERNAL
		w.DataLocation = &loc
		w.RawData = nil
		w.ExternalData = []*onnxpb.StringStringEntryProto{
			{Key: sp("location"), Value: sp(location)},
			{Key: sp("offset"), Value: sp(strconv.FormatInt(offset, 10))},
			{Key: sp("length"), Value: sp(strconv.FormatInt(length, 10))},
		}
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	seed("w.bin", 0, 16)
	seed("w.bin", 48, 16)
	seed("w.bin", 60, 16)
	seed("../outside.bin", 0, 16)
	seed("/etc/passwd", 0, 16)
	seed("link.bin", 0, 16)
	seed("sub/../w.bin", 0, 16)
	root := f.TempDir()
	dir := filepath.Join(root, "model")
	if err := os.Mkdir(dir, 0o755); err != nil {
		f.Fatal(err)
	}
	data := make([]byte, 64)
	for i := range data {
		data[i] = byte(i)
	}
	os.WriteFile(filepath.Join(dir, "w.bin"), data, 0o644)
	outside := filepath.Join(root, "outside.bin")
	os.WriteFile(outside, []byte("SECRET-SECRET-SECRET"), 0o644)
	if err := os.Symlink(outside, filepath.Join(dir, "link.bin")); err != nil {
		f.Skipf("cannot make a symlink: %v", err)
	}
	path := filepath.Join(dir, "model.onnx")
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		m, err := onnx.Load(path)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "onnx: ") && !strings.HasPrefix(err.Error(), path) {
				t.Fatalf("error without the package prefix or path: %v", err)
			}
			return
		}
		err = onnx.ForEachTensor(m.Graph, func(tp *onnxpb.TensorProto) error {
			if tp.GetDataLocation() == onnxpb.TensorProto_EXTERNAL || len(tp.ExternalData) > 0 {
				t.Fatalf("tensor %q still refers to external data after Load", tp.GetName())
			}
			if strings.Contains(string(tp.RawData), "SECRET") {
				t.Fatalf("tensor %q holds bytes of a file outside the model folder", tp.GetName())
			}
			_, err := onnx.DecodeTensor(tp)
			return err
		})
		if err != nil {
			t.Fatalf("Load accepted a tensor DecodeTensor rejects: %v", err)
		}
	})
}
