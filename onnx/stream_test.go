package onnx

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"unsafe"

	"github.com/linearize/linearize/onnx/onnxpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// streamModels lists real models to check the streaming reader and writer
// on: the bundled fixtures and, when present, the shared corpus.
func streamModels(t *testing.T) []string {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join("..", "testdata", "fixtures", "*.onnx"))
	paths = append(paths, filepath.Join("..", "testdata", "bert-tiny.onnx"))
	corpus, _ := filepath.Glob(filepath.Join("..", "..", "shared", "corpus", "*", "*.onnx"))
	paths = append(paths, corpus...)
	if len(paths) < 10 {
		t.Fatalf("only %d models found for the streaming test", len(paths))
	}
	return paths
}

// TestStreamMatchesProto checks decodeStream and encodeStream against the
// protobuf library's own Unmarshal on every fixture and corpus model: the
// streamed decode equals proto.Unmarshal's, and the streamed encoding
// unmarshals (by proto) to the same model, the same bytes every time.
func TestStreamMatchesProto(t *testing.T) {
	for _, p := range streamModels(t) {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		ref := &onnxpb.ModelProto{}
		if err := proto.Unmarshal(data, ref); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		got, err := decodeStream(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			t.Errorf("%s: decodeStream: %v", p, err)
			continue
		}
		if !proto.Equal(got, ref) {
			t.Errorf("%s: decodeStream differs from proto.Unmarshal", p)
		}
		var b1, b2 bytes.Buffer
		if err := encodeStream(&b1, ref); err != nil {
			t.Fatalf("%s: encodeStream: %v", p, err)
		}
		if err := encodeStream(&b2, got); err != nil {
			t.Fatalf("%s: encodeStream: %v", p, err)
		}
		if !bytes.Equal(b1.Bytes(), b2.Bytes()) {
			t.Errorf("%s: encodeStream is not deterministic", p)
		}
		back := &onnxpb.ModelProto{}
		if err := proto.Unmarshal(b1.Bytes(), back); err != nil {
			t.Fatalf("%s: streamed encoding does not parse: %v", p, err)
		}
		if !proto.Equal(back, ref) {
			t.Errorf("%s: streamed encoding parses to a different model", p)
		}
		if b1.Len() != proto.Size(ref) {
			t.Errorf("%s: streamed encoding has %d bytes, proto.Size says %d", p, b1.Len(), proto.Size(ref))
		}
	}
}

// TestStreamFallback feeds Load wire forms the streaming reader leaves to
// proto: a graph field split in two (protobuf merges them), and unknown
// fields at both levels; Load must still equal proto.Unmarshal.
func TestStreamFallback(t *testing.T) {
	m := smallModel(8)
	extra := &onnxpb.GraphProto{
		Node:        []*onnxpb.NodeProto{{OpType: proto.String("Identity"), Input: []string{"y"}, Output: []string{"z"}}},
		Initializer: []*onnxpb.TensorProto{mustTensor(t, "v", 3)},
		Output:      []*onnxpb.ValueInfoProto{MakeValueInfo("z", Float, []Dim{{Value: 8}})},
	}
	b, err := Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	gb, err := proto.Marshal(extra)
	if err != nil {
		t.Fatal(err)
	}
	split := protowire.AppendTag(append([]byte(nil), b...), modelGraphField, protowire.BytesType)
	split = protowire.AppendBytes(split, gb)

	// Unknown fields inside the graph, between two initializers.
	g2 := proto.Clone(m.Graph).(*onnxpb.GraphProto)
	g2.Initializer = append(g2.Initializer, mustTensor(t, "u", 2))
	gb2, err := proto.Marshal(g2)
	if err != nil {
		t.Fatal(err)
	}
	gb2 = protowire.AppendTag(gb2, 900, protowire.Fixed32Type)
	gb2 = protowire.AppendFixed32(gb2, 7)
	gb2 = protowire.AppendTag(gb2, graphInitializerField, protowire.BytesType)
	tb, _ := proto.Marshal(mustTensor(t, "t", 4))
	gb2 = protowire.AppendBytes(gb2, tb)
	top := without(m, modelGraphField)
	tb2, _ := proto.Marshal(top)
	unknown := protowire.AppendTag(tb2, modelGraphField, protowire.BytesType)
	unknown = protowire.AppendBytes(unknown, gb2)
	unknown = protowire.AppendTag(unknown, 901, protowire.Fixed64Type)
	unknown = protowire.AppendFixed64(unknown, 9)

	dir := t.TempDir()
	for name, data := range map[string][]byte{"split graph": split, "unknown fields": unknown} {
		ref := &onnxpb.ModelProto{}
		if err := proto.Unmarshal(data, ref); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		p := filepath.Join(dir, "m.onnx")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := Load(p)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !proto.Equal(got, ref) {
			t.Errorf("%s: Load differs from proto.Unmarshal", name)
		}
	}
}

func mustTensor(t *testing.T, name string, n int) *onnxpb.TensorProto {
	t.Helper()
	tp, err := EncodeTensor(name, NewFloat([]int{n}, make([]float32, n)))
	if err != nil {
		t.Fatal(err)
	}
	return tp
}

// TestCloneShared checks that CloneShared is a deep copy of the structure
// that shares raw_data storage: equal to the original, independent when
// the copy's graph and tensors are edited, and not a copy of the weights.
func TestCloneShared(t *testing.T) {
	m, err := Load(filepath.Join("..", "testdata", "bert-tiny.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	ref := proto.Clone(m)
	c := CloneShared(m)
	if !proto.Equal(c, m) {
		t.Fatal("CloneShared differs from the original")
	}
	shared := 0
	for i, tp := range c.Graph.Initializer {
		if len(tp.RawData) > 0 && unsafe.SliceData(tp.RawData) == unsafe.SliceData(m.Graph.Initializer[i].RawData) {
			shared++
		}
	}
	if shared == 0 {
		t.Error("no raw_data is shared: CloneShared copied the weights")
	}
	c.Graph.Node[0].Name = proto.String("renamed")
	c.Graph.Node = c.Graph.Node[1:]
	c.Graph.Initializer[0].Name = proto.String("renamed")
	c.Graph.Initializer[0].RawData = []byte{1, 2, 3, 4}
	c.Graph.Initializer = append(c.Graph.Initializer, mustTensor(t, "new", 2))
	c.OpsetImport[0].Version = proto.Int64(99)
	if !proto.Equal(m, ref) {
		t.Error("editing the CloneShared copy changed the original")
	}
	if CloneShared(nil) != nil {
		t.Error("CloneShared(nil) != nil")
	}
}

// TestLoadSaveAllocation checks what streaming is for, by allocation
// counts (deterministic, unlike RSS): loading a model allocates about the
// model plus one tensor, not the file plus the model; saving allocates
// about one tensor, not the whole encoding.
func TestLoadSaveAllocation(t *testing.T) {
	const tensors, elems = 8, 1 << 20 // 8 tensors of 4 MiB
	m := smallModel(elems)
	for i := 1; i < tensors; i++ {
		m.Graph.Initializer = append(m.Graph.Initializer, mustTensor(t, "w"+string(rune('a'+i)), elems))
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "m.onnx")
	size := float64(proto.Size(m))

	allocated := func(f func()) float64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		return float64(after.TotalAlloc - before.TotalAlloc)
	}
	var err error
	if a := allocated(func() { err = Save(m, p, SaveOptions{}) }); err != nil {
		t.Fatal(err)
	} else if a > 0.25*size {
		t.Errorf("Save allocated %.1f MiB for a %.1f MiB model (%.2f×); streaming should need about one tensor", a/(1<<20), size/(1<<20), a/size)
	} else {
		t.Logf("Save allocated %.2f× the model", a/size)
	}
	var got *onnxpb.ModelProto
	if a := allocated(func() { got, err = Load(p) }); err != nil {
		t.Fatal(err)
	} else if a > 1.35*size {
		t.Errorf("Load allocated %.1f MiB for a %.1f MiB model (%.2f×); streaming should need the model plus one tensor", a/(1<<20), size/(1<<20), a/size)
	} else {
		t.Logf("Load allocated %.2f× the model", a/size)
	}
	if !proto.Equal(got, m) {
		t.Error("the saved and loaded model differs")
	}
}

// TestStreamOverrun feeds decodeStream fields whose tag lies inside the
// graph but whose length varint runs past the graph's end (a fuzzer found
// that the remaining length then went negative and a huge length passed
// the bound). Each must be refused as not streamable, and Load must return
// an error, not panic.
func TestStreamOverrun(t *testing.T) {
	huge := protowire.AppendVarint(nil, 1<<40)
	cases := map[string][]byte{
		// graph of 1 byte holding a bytes-field tag; its length follows outside.
		"field length past graph": append([]byte{0x3a, 0x01, 0x0a}, huge...),
		// the same with the initializer's tag.
		"initializer length past graph": append([]byte{0x3a, 0x01, 0x2a}, huge...),
		// a fixed32 field whose tag ends the graph.
		"fixed32 past graph": {0x3a, 0x01, 0x0d, 1, 2, 3, 4},
	}
	dir := t.TempDir()
	for name, data := range cases {
		if _, err := decodeStream(bytes.NewReader(data), int64(len(data))); err == nil {
			t.Errorf("%s: decodeStream accepted it", name)
		}
		p := filepath.Join(dir, "m.onnx")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(p); err == nil {
			t.Errorf("%s: Load accepted it", name)
		}
	}
}
