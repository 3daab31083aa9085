package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The Python onnx tools accept every conversion the CLI writes:
// testdata/spec/check_spec.py runs onnx's checker (full_check), its
// reference evaluator against onnxruntime, its inliner and its version
// converter on conversions of bert-tiny, a ModernBERT-shaped model and a
// float16 copy, in the venv .tools/onnx-venv. .ci/run creates the venv
// first, so the test runs in CI; elsewhere it skips until the venv exists.
func TestSpecTools(t *testing.T) {
	root := filepath.Join("..", "..")
	py := filepath.Join(root, ".tools", "onnx-venv", "bin", "python")
	script := filepath.Join(root, "testdata", "spec", "check_spec.py")
	if _, err := os.Stat(py); err != nil {
		t.Skipf("the onnx venv is missing (%v): run python3 testdata/spec/check_spec.py (it creates .tools/onnx-venv and runs this check; .ci/run creates it with --venv)", err)
	}
	// Reading the script makes go test's cache depend on it.
	if _, err := os.ReadFile(script); err != nil {
		t.Fatal(err)
	}
	absPy, err := filepath.Abs(py)
	if err != nil {
		t.Fatal(err)
	}
	absScript, err := filepath.Abs(script)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(absPy, absScript)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("%s %s: %v", py, script, err)
	}
}
