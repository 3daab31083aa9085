package main

import (
	"encoding/json"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/models"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// poison sets rows of the float initializer name of m to v (NaN or Inf),
// every row when rows is empty, as a corrupt or overflowed (fp16)
// checkpoint holds them.
func poison(t *testing.T, m *onnxpb.ModelProto, name string, v float32, rows ...int) {
	t.Helper()
	for i, tp := range m.Graph.Initializer {
		if tp.GetName() != name {
			continue
		}
		x, err := onnx.DecodeTensor(tp)
		if err != nil {
			t.Fatal(err)
		}
		f := x.Floats()
		width := f
		if len(x.Shape) > 1 {
			width = f[:x.Shape[len(x.Shape)-1]]
		}
		if len(rows) == 0 {
			for k := range f {
				f[k] = v
			}
		}
		for _, r := range rows {
			for k := range width {
				f[r*len(width)+k] = v
			}
		}
		if m.Graph.Initializer[i], err = onnx.EncodeTensor(name, x); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("no initializer %q", name)
}

// nonFiniteModels writes the tiny BERT and its Linformer conversion, and
// copies of both whose layer-0 query bias is NaN (every attention output
// of the copy is then NaN, in both backends and in the Go kernels).
func nonFiniteModels(t *testing.T) (orig, nanOrig, lin, nanLin string) {
	t.Helper()
	dir := t.TempDir()
	cfg := models.TinyConfig()
	write := func(name string, m *onnxpb.ModelProto) string {
		p := filepath.Join(dir, name)
		if err := onnx.Save(m, p, onnx.SaveOptions{}); err != nil {
			t.Fatal(err)
		}
		return p
	}
	build := func(bad bool) (*onnxpb.ModelProto, *onnxpb.ModelProto) {
		m, err := models.BERT(cfg)
		if err != nil {
			t.Fatal(err)
		}
		l, _, err := convert.ToLinformer(m, convert.LinformerOptions{Init: "gaussian", K: 8, MaxLen: cfg.MaxPositions, Seed: 2})
		if err != nil {
			t.Fatal(err)
		}
		if bad {
			poison(t, m, "encoder.layer.0.attention.self.query.bias", float32(math.NaN()))
			poison(t, l, "encoder.layer.0.attention.self.query.bias", float32(math.NaN()))
		}
		return m, l
	}
	m, l := build(false)
	bm, bl := build(true)
	return write("bert.onnx", m), write("nan.onnx", bm), write("lin.onnx", l), write("nanlin.onnx", bl)
}

// TestNonFiniteIsNoAgreement: validate, compare-backends and compare
// fail (exit 3) on NaN outputs, saying so, where all-NaN outputs on
// both sides used to read as max abs 0, cosine 1, ok.
func TestNonFiniteIsNoAgreement(t *testing.T) {
	needORT(t)
	orig, nanOrig, lin, nanLin := nonFiniteModels(t)
	feed := []string{"--random-inputs", "--batch", "2", "--seq-len", "12"}
	run := func(args ...string) (int, string, string) {
		return runCLI(append(args, feed...)...)
	}

	t.Run("validate", func(t *testing.T) {
		if code, _, stderr := run("validate", lin); code != exitOK {
			t.Fatalf("the finite model: exit %d: %s", code, stderr)
		}
		for _, backend := range []string{"ort", "native"} {
			code, stdout, stderr := run("validate", nanLin, "--backend", backend)
			if code != exitRuntime || !strings.Contains(stderr, "2 of 2 converted ops fail, 2 of them with NaN or Inf outputs") {
				t.Errorf("%s: exit %d, want %d:\n%s%s", backend, code, exitRuntime, stdout, stderr)
			}
			if strings.Contains(stdout, " ok\n") || !strings.Contains(stdout, "FAIL: non-finite: ") || !strings.Contains(stdout, "NaN in the Go kernel's") || !strings.Contains(stdout, "NaN in its inputs") {
				t.Errorf("%s: the table does not fail the NaN ops, saying so:\n%s", backend, stdout)
			}
			if !strings.Contains(stdout, "0 of 2 ops within tolerance") {
				t.Errorf("%s: summary:\n%s", backend, stdout)
			}
		}
		code, stdout, _ := run("validate", nanLin, "--json")
		var v struct {
			OK     bool `json:"ok"`
			Checks []struct {
				OK    bool   `json:"ok"`
				Error string `json:"error"`
				Diff  struct {
					NaN    int `json:"nan"`
					RefNaN int `json:"ref_nan"`
				} `json:"diff"`
			} `json:"checks"`
		}
		if err := json.Unmarshal([]byte(stdout), &v); err != nil {
			t.Fatalf("--json (exit %d): %v\n%s", code, err, stdout)
		}
		if code != exitRuntime || v.OK || len(v.Checks) != 2 || v.Checks[0].OK || v.Checks[0].Diff.NaN == 0 || v.Checks[0].Diff.RefNaN == 0 {
			t.Errorf("--json: exit %d, %+v", code, v)
		}
	})

	t.Run("compare-backends", func(t *testing.T) {
		if code, _, stderr := run("compare-backends", orig); code != exitOK {
			t.Fatalf("the finite model: exit %d: %s", code, stderr)
		}
		code, stdout, stderr := run("compare-backends", nanOrig)
		if code != exitRuntime || !strings.Contains(stderr, "not finite") || !strings.Contains(stderr, "last_hidden_state: non-finite: 1536 NaN in native; 1536 NaN in onnxruntime") {
			t.Errorf("exit %d, want %d naming the NaN outputs; stderr %q", code, exitRuntime, stderr)
		}
		if strings.Contains(stdout, "yes") || !strings.Contains(stdout, "non-finite: ") {
			t.Errorf("the table calls NaN outputs agreeing:\n%s", stdout)
		}
		code, stdout, _ = run("compare-backends", nanOrig, "--json")
		var rep backendsReport
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
			t.Fatalf("--json: %v\n%s", err, stdout)
		}
		if code != exitRuntime || rep.Agree || len(rep.Outputs) != 2 || rep.Outputs[0].OK || rep.Outputs[0].NonFinite == "" || rep.Outputs[0].NaN != 1536 {
			t.Errorf("--json: exit %d, %+v", code, rep)
		}
	})

	t.Run("compare", func(t *testing.T) {
		for _, c := range []struct {
			models []string
			want   string
		}{
			{[]string{orig, nanOrig}, "nan.onnx last_hidden_state: non-finite: 1536 NaN in nan.onnx"},
			// The same NaN in both models is no agreement either.
			{[]string{nanOrig, nanOrig}, "non-finite: 1536 NaN in " + nanOrig + "; 1536 NaN in the reference " + nanOrig},
			{[]string{nanOrig, orig}, "bert.onnx last_hidden_state: non-finite: 1536 NaN in the reference nan.onnx"},
		} {
			code, stdout, stderr := run(append([]string{"compare"}, c.models...)...)
			if code != exitRuntime || !strings.Contains(stderr, "not finite") || !strings.Contains(stderr, c.want) {
				t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.models, code, stderr, exitRuntime, c.want)
			}
			if !strings.Contains(stdout, "non-finite: ") {
				t.Errorf("%v: the table does not say non-finite:\n%s", c.models, stdout)
			}
		}
		code, stdout, _ := run("compare", orig, nanOrig, "--json")
		var mc infer.ModelComparison
		if err := json.Unmarshal([]byte(stdout), &mc); err != nil {
			t.Fatalf("--json: %v\n%s", err, stdout)
		}
		if code != exitRuntime || len(mc.NonFinite()) == 0 {
			t.Errorf("--json: exit %d, %+v", code, mc)
		}
		if code, _, stderr := run("compare", orig, lin); code != exitOK {
			t.Errorf("finite models: exit %d: %s", code, stderr)
		}
	})
}
