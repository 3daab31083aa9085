package main

import (
	"encoding/json"
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
	} {
		code, _, errOut := runCLI(c.args...)
		if code != c.code || !strings.Contains(errOut, c.msg) {
			t.Errorf("%v: exit %d, stderr %q; want exit %d mentioning %q", c.args, code, errOut, c.code, c.msg)
		}
	}
}

// TestCompareBackendsFloat16: a float16 model's outputs (here float32, as
// onnxruntime's converter keeps the inputs and outputs) are held to 16
// units in the last place of float16 (2^-6 of their scale), not to the
// float32 default: the two backends round each layer's values apart
// (0.0012 of the scale on this two-layer model, cosine 1.000000), which
// is agreement. --tolerance given holds every output to it, and the
// error then names the output and its figure.
func TestCompareBackendsFloat16(t *testing.T) {
	needORT(t)
	path := filepath.Join("..", "..", "testdata", "fixtures", "published", "minilm_eager_op17.fp16_ortx.onnx")
	code, out, errOut := runCLI("compare-backends", path, "--random-inputs", "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s\n%s", code, errOut, out)
	}
	var rep backendsReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	for _, o := range rep.Outputs {
		if o.Tolerance != 1.0/64 || !o.OK || o.Scaled <= 1e-4 || o.Cosine < 0.99999 {
			t.Errorf("output %s: tolerance %g, ok %v, scaled %g, cosine %g; want 1/64, agreeing on a scaled error above float32's 1e-4", o.Name, o.Tolerance, o.OK, o.Scaled, o.Cosine)
		}
	}
	code, _, errOut = runCLI("compare-backends", path, "--random-inputs", "--tolerance", "1e-4")
	if code != exitRuntime || !strings.Contains(errOut, "last_hidden_state (scaled ") || !strings.Contains(errOut, "> 0.0001)") {
		t.Errorf("--tolerance 1e-4: exit %d, %q; want exit %d naming the output", code, errOut, exitRuntime)
	}
}
