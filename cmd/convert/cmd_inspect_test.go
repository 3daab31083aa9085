package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/onnx"
)

// corpusDir is ../shared/corpus/ort-fusion beside the repository root.
func corpusDir(t *testing.T) string {
	t.Helper()
	d, _ := filepath.Abs(filepath.Join("..", "..", "..", "shared", "corpus", "ort-fusion"))
	if _, err := os.Stat(d); err != nil {
		t.Skipf("corpus %s absent (CI clones the project beside shared/): %v", d, err)
	}
	return d
}

func TestInspectJSONCorpus(t *testing.T) {
	dir := corpusDir(t)
	paths, _ := filepath.Glob(filepath.Join(dir, "*.onnx"))
	for _, p := range paths {
		code, out, errOut := runCLI("inspect", p, "--json")
		if code != 0 {
			t.Errorf("inspect --json %s: exit %d: %s", filepath.Base(p), code, errOut)
			continue
		}
		var rep map[string]any
		dec := json.NewDecoder(strings.NewReader(out))
		if err := dec.Decode(&rep); err != nil {
			t.Errorf("%s: output is not JSON: %v", filepath.Base(p), err)
			continue
		}
		if dec.More() {
			t.Errorf("%s: more than one JSON value printed", filepath.Base(p))
		}
		// Check against the model read independently of Summarize.
		m, err := onnx.Load(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := rep["ir_version"].(float64); int64(got) != m.GetIrVersion() {
			t.Errorf("%s: ir_version %v, want %d", filepath.Base(p), got, m.GetIrVersion())
		}
		if got := int(rep["node_count"].(float64)); got != len(m.Graph.Node) {
			t.Errorf("%s: node_count %d, want %d", filepath.Base(p), got, len(m.Graph.Node))
		}
		outs := rep["outputs"].([]any)
		if len(outs) != len(m.Graph.Output) {
			t.Errorf("%s: %d outputs, want %d", filepath.Base(p), len(outs), len(m.Graph.Output))
		}
		for i, o := range outs {
			if name := o.(map[string]any)["name"]; name != m.Graph.Output[i].GetName() {
				t.Errorf("%s: output %d named %v, want %s", filepath.Base(p), i, name, m.Graph.Output[i].GetName())
			}
		}
		for _, k := range []string{"opsets", "producer", "inputs", "ops", "initializer_count", "initializer_bytes"} {
			if _, ok := rep[k]; !ok {
				t.Errorf("%s: JSON lacks %q", filepath.Base(p), k)
			}
		}
	}
	t.Logf("inspected %d corpus models", len(paths))
}

func TestInspectText(t *testing.T) {
	p := filepath.Join(corpusDir(t), "embed_layer_norm_multiple.onnx")
	code, out, errOut := runCLI("inspect", p)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"ir_version:   6", "opsets:       ai.onnx 11", "input_ids_1", "int64[batch 3]", "com.microsoft: Attention 2", "initializers: 15"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect output lacks %q:\n%s", want, out)
		}
	}
}

func TestInspectBadInput(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.onnx")
	os.WriteFile(junk, []byte("not a model at all"), 0o644)
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"inspect"}, exitUsage, "MODEL"},
		{[]string{"inspect", "a.onnx", "b.onnx"}, exitUsage, "MODEL"},
		{[]string{"inspect", "--bogus", junk}, exitUsage, "bogus"},
		{[]string{"inspect", filepath.Join(dir, "missing.onnx")}, exitBadInput, "missing.onnx"},
		{[]string{"inspect", junk, "--json"}, exitBadInput, "junk.onnx"},
		{[]string{"inspect", dir}, exitBadInput, dir},
	}
	for _, c := range cases {
		code, out, errOut := runCLI(c.args...)
		if code != c.code {
			t.Errorf("%v: exit %d, want %d (stderr %q)", c.args, code, c.code, errOut)
		}
		if !strings.Contains(errOut, c.want) {
			t.Errorf("%v: stderr %q should mention %q", c.args, errOut, c.want)
		}
		if c.code == exitBadInput && (strings.Count(errOut, "\n") != 1 || out != "") {
			t.Errorf("%v: want a one-line error and no stdout, got %q / %q", c.args, out, errOut)
		}
	}
	if code, out, _ := runCLI("inspect", "-h"); code != 0 || !strings.Contains(out, "--json") {
		t.Errorf("inspect -h: exit %d, output %q", code, out)
	}
}
