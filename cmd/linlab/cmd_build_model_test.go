package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/linearize/linearize/cmd/internal/cli"
)

// TestBuildModelRegeneratesBundledModel: the command go generate runs
// writes exactly the committed testdata/bert-tiny.onnx.
func TestBuildModelRegeneratesBundledModel(t *testing.T) {
	out := filepath.Join(t.TempDir(), "tiny.onnx")
	code, _, errOut := runCLI("build-model", "--preset", "tiny", "-o", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	a, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "bert-tiny.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatal("build-model --preset tiny differs from testdata/bert-tiny.onnx: run go generate ./testdata")
	}
	if code, _, _ := runCLI("build-model", "-o", out, "--hidden", "30", "--heads", "4"); code != cli.ExitUsage {
		t.Errorf("hidden 30 with 4 heads: exit %d, want %d", code, cli.ExitUsage)
	}
	if code, _, _ := runCLI("build-model"); code != cli.ExitUsage {
		t.Errorf("no -o: exit %d, want %d", code, cli.ExitUsage)
	}
}
