package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCompareBackendsCLI runs compare-backends on the bundled tiny BERT and
// on a fused corpus model; the backends must agree and the JSON must list
// every output.
func TestCompareBackendsCLI(t *testing.T) {
	needORT(t)
	models := []struct {
		path string
		args []string
		outs int
	}{
		{filepath.Join("..", "..", "testdata", "bert-tiny.onnx"), []string{"--seq-len", "24", "--batch", "2"}, 2},
	}
	if dir := corpusDirOrEmpty(); dir != "" {
		models = append(models, struct {
			path string
			args []string
			outs int
		}{filepath.Join(dir, "attention_opt.onnx"), nil, 1})
	}
	for _, m := range models {
		args := append([]string{"compare-backends", m.path, "--random-inputs", "--json", "--threads", "2"}, m.args...)
		code, out, errOut := runCLI(args...)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", m.path, code, errOut)
		}
		var rep backendsReport
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("%s: %v\n%s", m.path, err, out)
		}
		if !rep.Agree || len(rep.Outputs) != m.outs {
			t.Errorf("%s: agree %v, %d outputs:\n%s", m.path, rep.Agree, len(rep.Outputs), out)
		}
		for _, o := range rep.Outputs {
			if o.N == 0 || o.Scale == 0 || o.Cosine < 0.999999 {
				t.Errorf("%s: output %s: %+v", m.path, o.Name, o)
			}
		}
		// The table form names every output.
		code, out, _ = runCLI(append([]string{"compare-backends", m.path, "--random-inputs"}, m.args...)...)
		if code != 0 || !strings.Contains(out, rep.Outputs[0].Name) || !strings.Contains(out, "max abs") {
			t.Errorf("%s: table (exit %d):\n%s", m.path, code, out)
		}
	}
}

// corpusDirOrEmpty returns ../shared/corpus/ort-fusion beside the
// repository, or "" when the corpus is absent.
func corpusDirOrEmpty() string {
	dir := filepath.Join("..", "..", "..", "shared", "corpus", "ort-fusion")
	if _, err := os.Stat(filepath.Join(dir, "attention_opt.onnx")); err != nil {
		return ""
	}
	return dir
}

func TestCompareBackendsCLIErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"compare-backends"}, exitUsage, "exactly one MODEL"},
		{[]string{"compare-backends", "a.onnx", "b.onnx"}, exitUsage, "exactly one MODEL"},
		{[]string{"compare-backends", "x.onnx", "--tolerance", "-1"}, exitUsage, "--tolerance"},
		{[]string{"compare-backends", filepath.Join(t.TempDir(), "missing.onnx"), "--random-inputs"}, exitBadInput, "missing.onnx"},
		{[]string{"bench-backends", "--lengths", "128,x"}, exitUsage, "--lengths"},
		{[]string{"bench-backends", "--repeat", "0"}, exitUsage, "--repeat"},
		{[]string{"bench-backends", "model.onnx"}, exitUsage, "no positional"},
		{[]string{"bench-backends", "--profile", "--json"}, exitUsage, "--profile"},
	} {
		code, _, errOut := runCLI(c.args...)
		if code != c.code || !strings.Contains(errOut, c.msg) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d mentioning %q", c.args, code, errOut, c.code, c.msg)
		}
	}
}

// TestBenchBackendsCLI runs the smallest benchmark (one layer, 8 tokens,
// one timed run) and checks the report's shape and arithmetic.
func TestBenchBackendsCLI(t *testing.T) {
	needORT(t)
	code, out, errOut := runCLI("bench-backends", "--lengths", "8,16", "--num-layers", "1", "--repeat", "1", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep benchBackendsReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(rep.Rows) != 2 || rep.Rows[0].SeqLen != 8 || rep.Rows[1].SeqLen != 16 || rep.GEMM == "" {
		t.Fatalf("report: %+v", rep)
	}
	code, out, errOut = runCLI("bench-backends", "--lengths", "8", "--num-layers", "1", "--repeat", "1", "--profile")
	if code != 0 || !strings.Contains(out, "MatMul") || !strings.Contains(out, "native/ort") {
		t.Errorf("--profile: exit %d: %s\n%s", code, errOut, out)
	}
	for _, r := range rep.Rows {
		if r.NativeMS <= 0 || r.ORTMS <= 0 || r.Ratio <= 0 || math.Abs(r.Ratio-r.NativeMS/r.ORTMS) > 1e-9*r.Ratio {
			t.Errorf("row %+v", r)
		}
	}
}
