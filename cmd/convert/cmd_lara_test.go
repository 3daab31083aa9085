package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/onnx"
)

// convert lara writes a model of LaraAttention nodes (deterministic from
// --seed) and refuses bad options (linlab's report-real refuses a bad
// --lara: TestLabBadInputExitCodes).
func TestLaraCLI(t *testing.T) {
	in := filepath.Join("..", "..", "testdata", "bert-tiny.onnx")
	tmp := t.TempDir()
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"lara", in, "-o", filepath.Join(tmp, "a.onnx"), "--landmarks", "8", "--seed", "7", "--json"}, 0, `"LaraAttention"`},
		{[]string{"lara", in, "-o", filepath.Join(tmp, "b.onnx"), "--landmarks", "8", "--seed", "7"}, 0, "2 converted"},
		{[]string{"lara", in, "-o", filepath.Join(tmp, "c.onnx"), "--landmarks", "8", "--seed", "8", "--samples", "2", "--sigma", "0.5"}, 0, "2 converted"},
		{[]string{"lara", in}, exitUsage, "-o OUT is required"},
		{[]string{"lara", in, "-o", filepath.Join(tmp, "x.onnx"), "--landmarks", "0"}, exitUsage, "--landmarks"},
		{[]string{"lara", in, "-o", filepath.Join(tmp, "x.onnx"), "--sigma", "-1"}, exitUsage, "--sigma"},
		{[]string{"lara", in, "-o", filepath.Join(tmp, "x.onnx"), "--landmarks", "1000000"}, exitUsage, "--landmarks 1000000"},
		{[]string{"lara", in, "-o", filepath.Join(tmp, "x.onnx"), "--layers", "5"}, exitBadInput, "layer 5 selected"},
	} {
		code, out, errOut := runCLI(c.args...)
		if code != c.code || !strings.Contains(out+errOut, c.want) {
			t.Errorf("%v: exit %d, want %d; output %q does not contain %q", c.args, code, c.code, out+errOut, c.want)
		}
	}
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(tmp, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if !bytes.Equal(read("a.onnx"), read("b.onnx")) {
		t.Error("same seed, different bytes")
	}
	if bytes.Equal(read("a.onnx"), read("c.onnx")) {
		t.Error("different options, same bytes")
	}
	m, err := onnx.Load(filepath.Join(tmp, "a.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	if h := onnx.Summarize(m).Ops; h["ai.linearize"]["LaraAttention"] != 2 {
		t.Errorf("written model ops: %v", h)
	}
}
