package onnxpb_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
)

// TestGeneratedCodeIsFresh regenerates the Go types from the installed
// schema and fails when the committed file differs. The protoc version line
// is ignored so that a newer Debian protoc does not count as staleness.
func TestGeneratedCodeIsFresh(t *testing.T) {
	root, _ := filepath.Abs("../..")
	if _, err := exec.LookPath("protoc"); err != nil {
		t.Skip("protoc not installed; run scripts/setup.sh to enable this test")
	}
	for _, p := range []string{".tools/bin/protoc-gen-go", ".tools/proto/onnx-ml.proto"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Skipf("%s missing; run scripts/setup.sh to enable this test", p)
		}
	}
	dir := t.TempDir()
	cmd := exec.Command("bash", filepath.Join(root, "scripts/gen-proto.sh"), dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gen-proto.sh: %v\n%s", err, out)
	}
	fresh, err := os.ReadFile(filepath.Join(dir, "onnx-ml.pb.go"))
	if err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadFile("onnx-ml.pb.go")
	if err != nil {
		t.Fatal(err)
	}
	protocLine := regexp.MustCompile(`(?m)^// \tprotoc +v.*$`)
	fresh = protocLine.ReplaceAll(fresh, nil)
	committed = protocLine.ReplaceAll(committed, nil)
	if !bytes.Equal(fresh, committed) {
		t.Fatal("onnx/onnxpb/onnx-ml.pb.go is stale: run `go generate ./onnx/onnxpb` and commit the result")
	}
}
