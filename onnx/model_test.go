package onnx

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/onnx/onnxpb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

const nodeTestDir = "/usr/share/libonnx-testdata/data/node"

// corpusDir is ../shared/corpus/ort-fusion relative to the repository root.
func corpusDir(t *testing.T) string {
	t.Helper()
	d, _ := filepath.Abs(filepath.Join("..", "..", "shared", "corpus", "ort-fusion"))
	if _, err := os.Stat(d); err != nil {
		t.Skipf("corpus %s absent (CI clones the project beside shared/): %v", d, err)
	}
	return d
}

// roundTrip loads path, saves it to dir and loads the copy.
func roundTrip(t *testing.T, path, dir string) {
	t.Helper()
	m, err := Load(path)
	if err != nil {
		t.Errorf("%v", err)
		return
	}
	// Load streams the weights; proto.Unmarshal of the whole file is the
	// independent reference (external data aside, which Load resolves).
	if raw, err := os.ReadFile(path); err == nil && !bytes.Contains(raw, []byte("location")) {
		ref := &onnxpb.ModelProto{}
		if err := proto.Unmarshal(raw, ref); err == nil && !proto.Equal(ref, m) {
			t.Errorf("%s: Load differs from proto.Unmarshal of the file", path)
		}
	}
	out := filepath.Join(dir, "copy.onnx")
	if err := Save(m, out, SaveOptions{Input: path}); err != nil {
		t.Errorf("%s: %v", path, err)
		return
	}
	m2, err := Load(out)
	if err != nil {
		t.Errorf("%s: reload: %v", path, err)
		return
	}
	if !proto.Equal(m, m2) {
		t.Errorf("%s: model changed in load → save → load", path)
	}
	// Saving re-encodes deterministically, so a second save is byte-equal.
	b1, err := Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	b2, err := Encode(m2)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b1, b2) {
		t.Errorf("%s: encoding differs after a round trip", path)
	}
}

func TestRoundTripCorpus(t *testing.T) {
	dir := corpusDir(t)
	paths, _ := filepath.Glob(filepath.Join(dir, "*.onnx"))
	if len(paths) == 0 {
		t.Fatalf("no models in %s", dir)
	}
	roundTripAll(t, paths, "corpus")
}

// roundTripAll round-trips every model in paths and logs how many (of
// what kind) it did.
func roundTripAll(t *testing.T, paths []string, what string) {
	tmp := t.TempDir()
	for _, p := range paths {
		roundTrip(t, p, tmp)
	}
	t.Logf("%d %s models round-tripped", len(paths), what)
}

func TestRoundTripNodeTests(t *testing.T) {
	paths, _ := filepath.Glob(filepath.Join(nodeTestDir, "*", "model.onnx"))
	if len(paths) == 0 {
		t.Skipf("no ONNX conformance models under %s (run scripts/setup.sh to install libonnx-testdata)", nodeTestDir)
	}
	roundTripAll(t, paths, "conformance")
}

// smallModel is y = Add(x, w) with a float initializer w of n elements.
func smallModel(n int) *onnxpb.ModelProto {
	w := make([]float32, n)
	for i := range w {
		w[i] = float32(i) * 0.5
	}
	wt, _ := EncodeTensor("w", NewFloat([]int{n}, w))
	return &onnxpb.ModelProto{
		IrVersion:   proto.Int64(8),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(17)}},
		Graph: &onnxpb.GraphProto{
			Name:        proto.String("g"),
			Node:        []*onnxpb.NodeProto{{OpType: proto.String("Add"), Input: []string{"x", "w"}, Output: []string{"y"}}},
			Initializer: []*onnxpb.TensorProto{wt},
			Input:       []*onnxpb.ValueInfoProto{MakeValueInfo("x", Float, []Dim{{Value: int64(n)}})},
			Output:      []*onnxpb.ValueInfoProto{MakeValueInfo("y", Float, []Dim{{Value: int64(n)}})},
		},
	}
}

func TestUnknownFieldsSurvive(t *testing.T) {
	m := smallModel(4)
	b, err := Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	// Field 999 (varint) and 1000 (bytes) are not in onnx.proto.
	b = protowire.AppendTag(b, 999, protowire.VarintType)
	b = protowire.AppendVarint(b, 12345)
	b = protowire.AppendTag(b, 1000, protowire.BytesType)
	b = protowire.AppendBytes(b, []byte("future"))
	dir := t.TempDir()
	in := filepath.Join(dir, "in.onnx")
	if err := os.WriteFile(in, b, 0o644); err != nil {
		t.Fatal(err)
	}
	m1, err := Load(in)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.onnx")
	if err := Save(m1, out, SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(out)
	found := map[protowire.Number]bool{}
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			t.Fatal("saved model is not valid protobuf")
		}
		data = data[n:]
		m := protowire.ConsumeFieldValue(num, typ, data)
		if num == 1000 {
			v, _ := protowire.ConsumeBytes(data)
			if string(v) != "future" {
				t.Errorf("field 1000 = %q, want %q", v, "future")
			}
		}
		if num == 999 {
			v, _ := protowire.ConsumeVarint(data)
			if v != 12345 {
				t.Errorf("field 999 = %d, want 12345", v)
			}
		}
		found[num] = true
		data = data[m:]
	}
	if !found[999] || !found[1000] {
		t.Errorf("unknown fields lost in load/save: found 999=%v 1000=%v", found[999], found[1000])
	}
}

func TestExternalData(t *testing.T) {
	dir := t.TempDir()
	m := smallModel(1000) // 4000 bytes, above ExternalMin
	p := filepath.Join(dir, "ext.onnx")
	if err := Save(m, p, SaveOptions{ExternalData: true, ExternalMin: 100}); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(p)
	if len(raw) > 1000 {
		t.Errorf("model file has %d bytes; the weights should be external", len(raw))
	}
	stub, err := Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	if stub.Graph.Initializer[0].GetDataLocation() != onnxpb.TensorProto_EXTERNAL {
		t.Fatal("initializer not stored as external data")
	}
	got, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := DecodeTensor(m.Graph.Initializer[0])
	b, err := DecodeTensor(got.Graph.Initializer[0])
	if err != nil {
		t.Fatal(err)
	}
	if !equalTensors(a, b) {
		t.Error("external data reloaded with different values")
	}
	if !proto.Equal(m, got) {
		t.Error("model with external data differs after reload")
	}
}

// writeExternalStub writes a model whose initializer w points at location.
func writeExternalStub(t *testing.T, dir, location string) string {
	t.Helper()
	m := smallModel(4)
	w := m.Graph.Initializer[0]
	w.RawData = nil
	w.DataLocation = onnxpb.TensorProto_EXTERNAL.Enum()
	w.ExternalData = []*onnxpb.StringStringEntryProto{kvEntry("location", location)}
	return writeModelFile(t, dir, m)
}

// writeModelFile encodes m to dir/m.onnx as it is, with no check (Save
// would refuse some of the models the tests write).
func writeModelFile(t *testing.T, dir string, m *onnxpb.ModelProto) string {
	t.Helper()
	b, err := Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "m.onnx")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestExternalDataRefused(t *testing.T) {
	root := t.TempDir()
	outside := filepath.Join(root, "outside.bin")
	os.WriteFile(outside, make([]byte, 16), 0o644)
	modelDir := filepath.Join(root, "model")
	os.Mkdir(modelDir, 0o755)
	os.WriteFile(filepath.Join(modelDir, "ok.bin"), make([]byte, 16), 0o644)
	os.Symlink(outside, filepath.Join(modelDir, "link.bin"))
	os.Symlink(root, filepath.Join(modelDir, "dirlink"))
	os.WriteFile(filepath.Join(modelDir, "short.bin"), make([]byte, 8), 0o644)

	cases := []struct {
		loc     string
		wantErr string // "" means Load must succeed
	}{
		{"ok.bin", ""},
		{"../outside.bin", "leaves"},
		{"sub/../../outside.bin", "leaves"},
		{outside, "absolute"},
		{"link.bin", "outside"},
		{"dirlink/outside.bin", "outside"},
		{"missing.bin", "missing.bin"},
		{"short.bin", "bytes"},
		{"", "empty"},
	}
	for _, c := range cases {
		p := writeExternalStub(t, modelDir, c.loc)
		_, err := Load(p)
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("location %q: %v", c.loc, err)
		case c.wantErr != "" && err == nil:
			t.Errorf("location %q: Load succeeded, want an error", c.loc)
		case c.wantErr != "" && !(strings.Contains(err.Error(), c.wantErr) && strings.Contains(err.Error(), `"w"`)):
			t.Errorf("location %q: error %q should mention %q and name tensor \"w\"", c.loc, err, c.wantErr)
		}
	}
}

// TestStaleExternalEntries: external_data entries on a tensor whose
// data_location is DEFAULT refer to nothing (found by FuzzLoadExternal:
// Load kept them, and a reader could take them for a reference). Load
// keeps the inline data and drops the entries.
func TestStaleExternalEntries(t *testing.T) {
	dir := t.TempDir()
	m := smallModel(4)
	w := m.Graph.Initializer[0]
	w.ExternalData = []*onnxpb.StringStringEntryProto{kvEntry("location", "../outside.bin"), kvEntry("length", "16")}
	want, err := DecodeTensor(w)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Load(writeModelFile(t, dir, m))
	if err != nil {
		t.Fatal(err)
	}
	gw := got.Graph.Initializer[0]
	if len(gw.ExternalData) != 0 {
		t.Errorf("external_data entries kept: %v", gw.ExternalData)
	}
	if d, err := DecodeTensor(gw); err != nil || !equalTensors(d, want) {
		t.Errorf("inline data changed: %v", err)
	}
}

func TestSaveRefusesToOverwriteInput(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "m.onnx")
	if err := Save(smallModel(2), p, SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(p)
	m := smallModel(3)
	if err := Save(m, p, SaveOptions{Input: p}); err == nil {
		t.Fatal("Save overwrote its input")
	}
	// Also through a different spelling of the same path.
	if err := Save(m, filepath.Join(dir, ".", "m.onnx"), SaveOptions{Input: p}); err == nil {
		t.Fatal("Save overwrote its input given as another path")
	}
	after, _ := os.ReadFile(p)
	if !bytes.Equal(before, after) {
		t.Error("refused save still changed the file")
	}
	if err := Save(m, p, SaveOptions{Input: p, Overwrite: true}); err != nil {
		t.Errorf("Save with Overwrite: %v", err)
	}
}

func TestFailedSaveLeavesNoFile(t *testing.T) {
	dir := t.TempDir()
	// A non-empty folder where the model should go: the temp file is
	// written, but renaming it over the folder fails.
	target := filepath.Join(dir, "m.onnx")
	os.Mkdir(target, 0o755)
	os.WriteFile(filepath.Join(target, "keep"), []byte("x"), 0o644)
	if err := Save(smallModel(2), target, SaveOptions{}); err == nil {
		t.Fatal("Save over a non-empty folder succeeded")
	}
	// A folder that does not exist cannot receive the temp file.
	if err := Save(smallModel(2), filepath.Join(dir, "nope", "m.onnx"), SaveOptions{}); err == nil {
		t.Fatal("Save into a missing folder succeeded")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "m.onnx" {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("failed saves left files behind: %v", names)
	}
}

func TestLoadBadFiles(t *testing.T) {
	dir := t.TempDir()
	good, _ := Encode(smallModel(4))
	files := map[string][]byte{
		"truncated.onnx": good[:len(good)/2],
		"text.onnx":      []byte("this is not a model\n"),
		"empty.onnx":     nil,
	}
	for name, data := range files {
		p := filepath.Join(dir, name)
		os.WriteFile(p, data, 0o644)
		_, err := Load(p)
		if err == nil {
			t.Errorf("%s: Load succeeded", name)
			continue
		}
		if !strings.Contains(err.Error(), name) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error %q should be one line naming the file", name, err)
		}
	}
	if _, err := Load(filepath.Join(dir, "missing.onnx")); err == nil || !strings.Contains(err.Error(), "missing.onnx") {
		t.Errorf("missing file: %v", err)
	}
	if _, err := Load(dir); err == nil {
		t.Error("Load of a directory succeeded")
	}
}

func TestExternalDataNothingToMove(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "small.onnx")
	if err := Save(smallModel(4), p, SaveOptions{ExternalData: true, ExternalMin: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("want only the model file, got %d entries", len(entries))
	}
	m, err := Load(p)
	if err != nil || !proto.Equal(m, smallModel(4)) {
		t.Errorf("reload: %v", err)
	}
}
