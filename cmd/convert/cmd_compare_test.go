package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/models"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// tinyModels writes the tiny BERT, an identical copy, its Linformer
// conversion and a vocab.txt beside them into a temporary folder.
func tinyModels(t *testing.T) (orig, same, lin string) {
	t.Helper()
	needORT(t)
	dir := t.TempDir()
	cfg := models.TinyConfig()
	m, err := models.BERT(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, _, err := convert.ToLinformer(m, convert.LinformerOptions{Init: "gaussian", K: 8, MaxLen: cfg.MaxPositions, Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	orig, same, lin = filepath.Join(dir, "bert.onnx"), filepath.Join(dir, "same.onnx"), filepath.Join(dir, "lin.onnx")
	for _, w := range []struct {
		p string
		m *onnxpb.ModelProto
	}{{orig, m}, {same, m}, {lin, l}} {
		if err := onnx.Save(w.m, w.p, onnx.SaveOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	vocab := "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\nman\nis\neating\nfood\n.\nhorse\n##s\n"
	if err := os.WriteFile(filepath.Join(dir, "vocab.txt"), []byte(vocab), 0o644); err != nil {
		t.Fatal(err)
	}
	return orig, same, lin
}

func TestCompareCLI(t *testing.T) {
	orig, same, lin := tinyModels(t)
	code, out, errOut := runCLI("compare", orig, same, lin, "--random-inputs", "--batch", "2", "--seq-len", "12", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var mc infer.ModelComparison
	if err := json.Unmarshal([]byte(out), &mc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if mc.Batch != 2 || mc.SeqLen != 12 || len(mc.Models) != 3 {
		t.Errorf("header %+v", mc)
	}
	layers := map[string]int{}
	for _, r := range mc.Rows {
		if r.Mismatch != "" {
			t.Errorf("%s %s: %s", r.Model, r.Value, r.Mismatch)
		}
		if r.Kind == "layer" {
			layers[r.Model]++
		}
		// An identical model agrees exactly; the Linformer with random
		// projections does not.
		if r.Model == "same.onnx" && (r.MaxAbs != 0 || r.TokenCosMin < 1-1e-12) {
			t.Errorf("identical model: %+v", r)
		}
		if r.Model == "lin.onnx" && r.MaxAbs == 0 {
			t.Errorf("linformer equals the original: %+v", r)
		}
	}
	if layers["same.onnx"] != 2 || layers["lin.onnx"] != 2 {
		t.Errorf("per-layer rows %v, want 2 per model", layers)
	}
	// Texts through the vocab.txt beside the models; a readable table.
	texts := filepath.Join(t.TempDir(), "texts.txt")
	os.WriteFile(texts, []byte("The man is eating food.\nHorses!\n"), 0o644)
	code, out, errOut = runCLI("compare", orig, lin, "--text-file", texts)
	if code != 0 {
		t.Fatalf("text: exit %d: %s", code, errOut)
	}
	for _, want := range []string{"2 texts, 8 tokens", "last_hidden_state", "layer 1 attention", "pooled cos"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "side by side") {
		t.Errorf("two models: a side-by-side table:\n%s", out)
	}
	// ORIGINAL CONVERTED FINETUNED: the table ends with the later models
	// side by side, one line per value with each model's relative error
	// and pooled cosine, as the main table has them.
	code, out, errOut = runCLI("compare", orig, lin, same, "--text-file", texts)
	if code != 0 {
		t.Fatalf("three models: exit %d: %s", code, errOut)
	}
	_, side, ok := strings.Cut(out, "\nside by side, against bert.onnx:\n")
	if !ok {
		t.Fatalf("three models: no side-by-side table:\n%s", out)
	}
	lines := strings.Split(strings.TrimSuffix(side, "\n"), "\n")
	if head := strings.Fields(lines[0]); strings.Join(head, " ") != "value rel err lin.onnx rel err same.onnx pooled cos mean lin.onnx pooled cos mean same.onnx" {
		t.Errorf("side-by-side header %q", lines[0])
	}
	fromTable := map[string]string{} // "model value" → "rel err pooled"
	for _, l := range strings.Split(out, "\n")[2:] {
		f := strings.Fields(l)
		if len(f) == 0 {
			break
		}
		// model kind value… max abs mean abs rel err tok mean tok min pooled mean pooled min top-1
		n := len(f)
		fromTable[f[0]+" "+strings.Join(f[2:n-8], " ")] = f[n-6] + " " + f[n-3]
	}
	if len(lines) != 1+2+2 { // header, 2 outputs, 2 layers
		t.Fatalf("side-by-side table:\n%s", side)
	}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		value := strings.Join(f[:len(f)-4], " ")
		linErr, sameErr, linCos, sameCos := f[len(f)-4], f[len(f)-3], f[len(f)-2], f[len(f)-1]
		if sameErr != "0" || (sameCos != "1.00000" && sameCos != "-") {
			t.Errorf("%s: the identical model has error %s, pooled cosine %s", value, sameErr, sameCos)
		}
		m := fromTable["lin.onnx "+value]
		if m == "" || !strings.HasSuffix(m, " "+linCos) {
			t.Errorf("%s: side by side %s %s, main table %q", value, linErr, linCos, m)
		}
		if e, err := strconv.ParseFloat(linErr, 64); err != nil || !(e > 0) {
			t.Errorf("%s: the Linformer's error %q", value, linErr)
		}
	}
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"compare", orig}, exitUsage},
		{[]string{"compare", orig, filepath.Join(t.TempDir(), "none.onnx"), "--random-inputs"}, exitBadInput},
		{[]string{"compare", orig, same}, exitBadInput}, // no inputs given
		{[]string{"compare", orig, same, "--text", "x", "--random-inputs"}, exitUsage},
		{[]string{"compare", orig, same, "--text", "x", "--vocab", filepath.Join(t.TempDir(), "nope")}, exitBadInput},
	} {
		if code, _, errOut := runCLI(c.args...); code != c.code {
			t.Errorf("%v: exit %d, want %d (%s)", c.args, code, c.code, errOut)
		}
	}
}

func TestValidateCLI(t *testing.T) {
	orig, _, lin := tinyModels(t)
	code, out, errOut := runCLI("validate", lin, "--text", "the man is eating food", "--text", "horses")
	if code != 0 || !strings.Contains(out, "2 of 2 ops within tolerance") {
		t.Fatalf("exit %d:\n%s%s", code, out, errOut)
	}
	code, out, _ = runCLI("validate", lin, "--random-inputs", "--seq-len", "10", "--json")
	var v struct {
		OK     bool
		Checks []infer.OpCheck
	}
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || !v.OK || len(v.Checks) != 2 {
		t.Errorf("json: exit %d, %v, %+v", code, err, v)
	}
	// A tolerance no float32 computation meets makes it fail with exit 3
	// (the two implementations round differently).
	if code, out, _ := runCLI("validate", lin, "--random-inputs", "--tolerance", "1e-30"); code != exitRuntime || !strings.Contains(out, "FAIL") {
		t.Errorf("tolerance 1e-30: exit %d\n%s", code, out)
	}
	if code, _, errOut := runCLI("validate", orig, "--random-inputs"); code != exitBadInput {
		t.Errorf("unconverted model: exit %d (%s)", code, errOut)
	}
	if code, _, _ := runCLI("validate", lin, "--random-inputs", "--tolerance", "-1"); code != exitUsage {
		t.Errorf("negative tolerance: exit %d", code)
	}
}

func TestRunText(t *testing.T) {
	orig, _, _ := tinyModels(t)
	code, out, errOut := runCLI("run", orig, "--text", "The man is eating food.", "--text", "horses")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	// [CLS] the man is eating food . [SEP] → 8 tokens.
	if !strings.Contains(out, "input  input_ids int64[2 8]") {
		t.Errorf("output:\n%s", out)
	}
	code, out, _ = runCLI("run", orig, "--text", "horses", "--seq-len", "16")
	if code != 0 || !strings.Contains(out, "input_ids int64[1 16]") {
		t.Errorf("--seq-len 16: exit %d\n%s", code, out)
	}
}
