package models

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/linearize/linearize/onnx"
)

// TestBundledTinyModelIsFresh: testdata/bert-tiny.onnx is exactly what
// `go generate ./testdata` writes from TinyConfig.
func TestBundledTinyModelIsFresh(t *testing.T) {
	path := filepath.Join("..", "testdata", "bert-tiny.onnx")
	have, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("bundled model missing (run go generate ./testdata): %v", err)
	}
	m, err := BERT(TinyConfig())
	if err != nil {
		t.Fatal(err)
	}
	// What `go generate` writes is onnx.Save's output.
	tmp := filepath.Join(t.TempDir(), "bert-tiny.onnx")
	if err := onnx.Save(m, tmp, onnx.SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(tmp)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, want) {
		t.Fatalf("%s is stale: run go generate ./testdata", path)
	}
	if len(have) > 1<<20 {
		t.Errorf("%s is %d bytes; keep fixtures under 1 MiB", path, len(have))
	}
}
