package onnx

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/linearize/linearize/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// extRange is one float32 initializer stored as external data.
type extRange struct {
	name        string
	off, length int64 // bytes
}

// externalModel writes dir/m.onnx whose initializers point at the given
// ranges of dir/location; each initializer goes through an Identity to a
// graph output so the model is valid.
func externalModel(t *testing.T, dir, location string, ranges []extRange) string {
	t.Helper()
	g := &onnxpb.GraphProto{Name: proto.String("g")}
	for _, r := range ranges {
		g.Initializer = append(g.Initializer, &onnxpb.TensorProto{
			Name:         proto.String(r.name),
			DataType:     proto.Int32(int32(Float)),
			Dims:         []int64{r.length / 4},
			DataLocation: onnxpb.TensorProto_EXTERNAL.Enum(),
			ExternalData: []*onnxpb.StringStringEntryProto{
				kvEntry("location", location),
				kvEntry("offset", strconv.FormatInt(r.off, 10)),
				kvEntry("length", strconv.FormatInt(r.length, 10)),
			},
		})
		g.Node = append(g.Node, &onnxpb.NodeProto{OpType: proto.String("Identity"), Input: []string{r.name}, Output: []string{r.name + "_out"}})
		g.Output = append(g.Output, MakeValueInfo(r.name+"_out", Float, []Dim{{Value: r.length / 4}}))
	}
	return writeModelFile(t, dir, &onnxpb.ModelProto{
		IrVersion:   proto.Int64(8),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(17)}},
		Graph:       g,
	})
}

// allocated returns the bytes the Go heap allocated while fn ran.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestExternalDataSharedRanges: initializers on the same bytes share one
// buffer and an overlapping one a slice of it; each holds exactly its
// range of the file (read back here with os.ReadFile) and cannot grow into
// its neighbour's bytes.
func TestExternalDataSharedRanges(t *testing.T) {
	dir := t.TempDir()
	data := make([]byte, 256)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if err := os.WriteFile(filepath.Join(dir, "w.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	ranges := []extRange{{"a", 0, 64}, {"b", 0, 64}, {"c", 32, 64}, {"d", 128, 64}, {"e", 64, 0}, {"f", 192, 64}}
	m, err := Load(externalModel(t, dir, "w.bin", ranges))
	if err != nil {
		t.Fatal(err)
	}
	raw := map[string][]byte{}
	for i, tp := range m.Graph.Initializer {
		r := ranges[i]
		if !bytes.Equal(tp.RawData, data[r.off:r.off+r.length]) {
			t.Errorf("%s: raw_data differs from bytes %d..%d of the file", r.name, r.off, r.off+r.length)
		}
		if cap(tp.RawData) != len(tp.RawData) {
			t.Errorf("%s: capacity %d beyond its %d bytes", r.name, cap(tp.RawData), len(tp.RawData))
		}
		if tp.ExternalData != nil || tp.GetDataLocation() == onnxpb.TensorProto_EXTERNAL {
			t.Errorf("%s: still marked external", r.name)
		}
		raw[r.name] = tp.RawData
	}
	at := func(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
	if at(raw["a"]) != at(raw["b"]) {
		t.Error("a and b name the same bytes but do not share them")
	}
	if at(raw["c"]) != at(raw["a"])+32 {
		t.Error("c overlaps a but was read separately")
	}
}

// TestExternalDataSparseReadOnce: 32 initializers of 64 MiB each, all on
// the same bytes of a sparse 64 MiB file, are read once: Load allocates
// about one file's worth, not 32 (2 GiB), and every tensor shares it.
func TestExternalDataSparseReadOnce(t *testing.T) {
	const size = 64 << 20
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "w.bin"))
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Truncate(f.Name(), size); err != nil {
		t.Fatal(err)
	}
	var ranges []extRange
	for i := range 32 {
		ranges = append(ranges, extRange{"w" + strconv.Itoa(i), 0, size})
	}
	p := externalModel(t, dir, "w.bin", ranges)
	var m *onnxpb.ModelProto
	n := allocated(func() { m, err = Load(p) })
	if err != nil {
		t.Fatal(err)
	}
	if n > 2*size {
		t.Errorf("Load allocated %d bytes for 32 tensors on one %d-byte range; want about %d", n, size, size)
	}
	first := unsafe.SliceData(m.Graph.Initializer[0].RawData)
	for _, tp := range m.Graph.Initializer {
		if len(tp.RawData) != size || unsafe.SliceData(tp.RawData) != first {
			t.Fatalf("%s: %d bytes, shared %v", tp.GetName(), len(tp.RawData), unsafe.SliceData(tp.RawData) == first)
		}
	}
}

// TestExternalDataTotalBound: distinct ranges adding up past
// MaxExternalBytes (65 ranges of 1 GiB on a sparse 65 GiB file) are
// refused before any is read.
func TestExternalDataTotalBound(t *testing.T) {
	const gib = 1 << 30
	n := MaxExternalBytes/gib + 1
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "w.bin"))
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Truncate(f.Name(), int64(n)*gib); err != nil {
		t.Skipf("no sparse file of %d GiB here: %v", n, err)
	}
	var ranges []extRange
	for i := range n {
		ranges = append(ranges, extRange{"w" + strconv.Itoa(i), int64(i) * gib, gib})
	}
	p := externalModel(t, dir, "w.bin", ranges)
	var lerr error
	if a := allocated(func() { _, lerr = Load(p) }); a > gib {
		t.Errorf("Load allocated %d bytes before refusing", a)
	}
	if lerr == nil || !strings.Contains(lerr.Error(), "exceeds") || !strings.Contains(lerr.Error(), "m.onnx") {
		t.Errorf("Load: %v; want an error naming the file and the bound", lerr)
	}
}
