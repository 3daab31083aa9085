package onnx_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/linearize/linearize/onnx"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

// FuzzSaveRoundTrip: every model Load would accept is written by Save
// (the streaming encoder, atomically, in both the inline and the
// external-data form) so that Load gives the same model back, and leaves
// nothing but its output files in the folder.
func FuzzSaveRoundTrip(f *testing.F) {
	b, _ := proto.Marshal(tinyModel())
	f.Add(b, false)
	f.Add(b, true)
	seeds, _ := filepath.Glob("../../shared/corpus/ort-fusion/*.onnx")
	for _, p := range seeds {
		if data, err := os.ReadFile(p); err == nil && len(data) < 64<<10 {
			f.Add(data, false)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, external bool) {
		m, err := onnx.Decode(data)
		if err != nil || onnx.Validate(m) != nil {
			return
		}
		dir := t.TempDir()
		path := filepath.Join(dir, "m.onnx")
		if err := onnx.Save(m, path, onnx.SaveOptions{ExternalData: external}); err != nil {
			t.Fatalf("Save refused a valid model: %v", err)
		}
		back, err := onnx.Load(path)
		if err != nil {
			t.Fatalf("Load of what Save wrote: %v", err)
		}
		want, err := onnx.Decode(data) // Save may move weights out; compare with a fresh copy
		if err != nil {
			t.Fatal(err)
		}
		// Compared as text: an unknown field's varint written with
		// redundant bytes comes back canonical, the same value.
		if !external && prototext.Format(back) != prototext.Format(want) {
			t.Fatal("the saved model differs from the one given")
		}
		for i, tp := range want.GetGraph().GetInitializer() {
			a, errA := onnx.DecodeTensor(tp)
			b, errB := onnx.DecodeTensor(back.Graph.Initializer[i])
			if (errA == nil) != (errB == nil) || (errA == nil && !proto.Equal(mustEncode(t, a), mustEncode(t, b))) {
				t.Fatalf("initializer %q changed in the round trip", tp.GetName())
			}
		}
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if n := e.Name(); n != "m.onnx" && n != "m.onnx.data" {
				t.Fatalf("Save left %s beside its output", n)
			}
		}
	})
}

func mustEncode(t *testing.T, x *onnx.Tensor) proto.Message {
	t.Helper()
	tp, err := onnx.EncodeTensor("x", x)
	if err != nil {
		t.Fatal(err)
	}
	return tp
}
