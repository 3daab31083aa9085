package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/onnx"
)

// TestRunNonFiniteFails: run on a model whose outputs hold NaN exits 3
// naming the outputs and their counts, and leaves --out-dir as it was; on
// the finite model it writes every output, which reads back as what it
// printed.
func TestRunNonFiniteFails(t *testing.T) {
	needORT(t)
	orig, nanOrig, _, _ := nonFiniteModels(t)
	feed := []string{"--random-inputs", "--batch", "2", "--seq-len", "12"}
	dir := filepath.Join(t.TempDir(), "outs")
	for _, backend := range []string{"ort", "native"} {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := runCLI(append([]string{"run", orig, "--backend", backend, "--out-dir", dir}, feed...)...)
		if code != exitOK {
			t.Fatalf("%s: the finite model: exit %d: %s", backend, code, stderr)
		}
		old, err := os.ReadFile(filepath.Join(dir, "last_hidden_state.npy"))
		if err != nil {
			t.Fatalf("%s: %v\n%s", backend, err, stdout)
		}
		x, err := onnx.DecodeNPY(old)
		if err != nil || x.Len() != 2*12*x.Shape[2] {
			t.Fatalf("%s: last_hidden_state.npy: %v %v", backend, x, err)
		}
		code, stdout, stderr = runCLI(append([]string{"run", nanOrig, "--backend", backend, "--out-dir", dir}, feed...)...)
		if code != exitRuntime || !strings.Contains(stderr, "outputs are not finite: last_hidden_state holds") || !strings.Contains(stderr, "nothing written to") {
			t.Errorf("%s: NaN outputs: exit %d, want %d naming them:\nstdout %s\nstderr %s", backend, code, exitRuntime, stdout, stderr)
		}
		if !strings.Contains(stdout, "NaN)") {
			t.Errorf("%s: the NaN count is not printed:\n%s", backend, stdout)
		}
		now, err := os.ReadFile(filepath.Join(dir, "last_hidden_state.npy"))
		if err != nil || !bytes.Equal(now, old) {
			t.Errorf("%s: --out-dir changed by a failed run (err %v)", backend, err)
		}
	}
}

// TestRunReportsCutTexts: a text longer than the sequence length is cut
// to it, and run and compare say which text was cut; texts that fit give
// no note.
func TestRunReportsCutTexts(t *testing.T) {
	needORT(t)
	model, _ := feedModel(t) // its vocabulary: the, man, is, eating, food, …
	long := strings.Repeat("the man is eating food ", 20)
	code, stdout, stderr := runCLI("run", model, "--text", "the man", "--text", long, "--seq-len", "16")
	if code != exitOK || !strings.Contains(stdout, "note: text 2 of 2 cut to 16 tokens") {
		t.Errorf("run: exit %d, want a note on text 2:\n%s%s", code, stdout, stderr)
	}
	code, stdout, _ = runCLI("run", model, "--text", "the man", "--text", "the food", "--seq-len", "16")
	if code != exitOK || strings.Contains(stdout, "cut") {
		t.Errorf("run: texts that fit: exit %d, a note:\n%s", code, stdout)
	}
	// 14 wordpieces with [CLS] and [SEP] fill 16 exactly: not cut.
	exact := strings.TrimSpace(strings.Repeat("man ", 14))
	code, stdout, _ = runCLI("run", model, "--text", exact, "--seq-len", "16")
	if code != exitOK || strings.Contains(stdout, "cut") {
		t.Errorf("run: a text of exactly 16 tokens: exit %d, a note:\n%s", code, stdout)
	}
	code, stdout, _ = runCLI("run", model, "--text", exact+" man", "--seq-len", "16")
	if code != exitOK || !strings.Contains(stdout, "note: the text was cut to 16 tokens") {
		t.Errorf("run: a text of 17 tokens: exit %d, no note:\n%s", code, stdout)
	}
	code, stdout, stderr = runCLI("compare", model, model, "--text", long, "--text", "the man", "--text", long, "--seq-len", "16")
	if code != exitOK || !strings.Contains(stdout, "2 of 3 texts cut to 16 tokens: 1, 3") {
		t.Errorf("compare: exit %d, want a note on texts 1 and 3:\n%s%s", code, stdout, stderr)
	}
}

// TestComparePooling: compare's pooled cosines pool as --pooling says,
// and the report names the pooling. The reference is computed here from
// the two models' outputs written by run (float64 pooling and cosine).
func TestComparePooling(t *testing.T) {
	needORT(t)
	orig, _, lin, _ := nonFiniteModels(t)
	dir := t.TempDir()
	feed := []string{"--random-inputs", "--batch", "3", "--seq-len", "10", "--seed", "4"}
	hidden := func(model, name string) *onnx.Tensor {
		out := filepath.Join(dir, name)
		if code, _, stderr := runCLI(append([]string{"run", model, "--out-dir", out}, feed...)...); code != exitOK {
			t.Fatalf("run %s: exit %d: %s", model, code, stderr)
		}
		x, err := onnx.ReadNPY(filepath.Join(out, "last_hidden_state.npy"))
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	a, b := hidden(orig, "a"), hidden(lin, "b")
	B, S, D := a.Shape[0], a.Shape[1], a.Shape[2]
	// random inputs: every position is real (no padding mask).
	pool := func(x *onnx.Tensor, row int, how string) []float64 {
		f := x.Floats()
		p := make([]float64, D)
		for k := range p {
			switch how {
			case "cls":
				p[k] = float64(f[row*S*D+k])
			case "max":
				p[k] = math.Inf(-1)
				for s := range S {
					p[k] = math.Max(p[k], float64(f[(row*S+s)*D+k]))
				}
			default:
				for s := range S {
					p[k] += float64(f[(row*S+s)*D+k]) / float64(S)
				}
			}
		}
		return p
	}
	for _, how := range []string{"mean", "cls", "max"} {
		want := math.Inf(1)
		for row := range B {
			pa, pb := pool(b, row, how), pool(a, row, how)
			var ab, aa, bb float64
			for k := range pa {
				ab, aa, bb = ab+pa[k]*pb[k], aa+pa[k]*pa[k], bb+pb[k]*pb[k]
			}
			want = math.Min(want, ab/math.Sqrt(aa*bb))
		}
		code, stdout, stderr := runCLI(append([]string{"compare", orig, lin, "--pooling", how, "--json", "--per-layer=false"}, feed...)...)
		if code != exitOK {
			t.Fatalf("%s: exit %d: %s", how, code, stderr)
		}
		var rep struct {
			Pooling string `json:"pooling"`
			Rows    []struct {
				Value   string   `json:"value"`
				CosMin  *float64 `json:"pooled_cos_min"`
				CosMean *float64 `json:"pooled_cos_mean"`
			} `json:"comparisons"`
		}
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
			t.Fatal(err)
		}
		if rep.Pooling != how {
			t.Errorf("--pooling %s: the report says %q", how, rep.Pooling)
		}
		found := false
		for _, r := range rep.Rows {
			if r.Value != "last_hidden_state" {
				continue
			}
			found = true
			if r.CosMin == nil || math.Abs(*r.CosMin-want) > 1e-6 {
				t.Errorf("--pooling %s: pooled cos min %v, want %.7f", how, r.CosMin, want)
			}
		}
		if !found {
			t.Errorf("--pooling %s: no last_hidden_state row:\n%s", how, stdout)
		}
	}
	code, stdout, _ := runCLI(append([]string{"compare", orig, lin, "--per-layer=false"}, feed...)...)
	if code != exitOK || !strings.Contains(stdout, "pooled by mean (default)") {
		t.Errorf("compare without --pooling: exit %d, the pooling not named:\n%s", code, stdout)
	}
	if code, _, stderr := runCLI(append([]string{"compare", orig, lin, "--pooling", "sum"}, feed...)...); code != exitUsage || !strings.Contains(stderr, "--pooling") {
		t.Errorf("--pooling sum: exit %d, want %d: %s", code, exitUsage, stderr)
	}
}
