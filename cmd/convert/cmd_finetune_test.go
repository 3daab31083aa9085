package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/finetune"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/internal/realtable"
	"github.com/linearize/linearize/onnx"
)

// TestFinetuneCLI fits the tiny BERT's Linformer conversion on seeded
// random inputs and on texts, checks that the fit lowers every layer's
// error, that `compare` on other inputs finds the fitted model closer to
// the original, that two runs write identical files, and the refusals.
func TestFinetuneCLI(t *testing.T) {
	orig, _, lin := tinyModels(t)
	dir := filepath.Dir(orig)
	out := filepath.Join(dir, "fit.onnx")
	args := []string{"finetune", orig, lin, "-o", out, "--random-inputs", "--batch", "8", "--seq-len", "16", "--steps", "80", "--minibatch", "4", "--seed", "3", "--json"}
	code, stdout, errOut := runCLI(args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep finetune.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	if rep.Op != "LinformerAttention" || len(rep.Layers) != 2 {
		t.Fatalf("report %+v", rep)
	}
	for _, l := range rep.Layers {
		if !(l.After < 0.7*l.Before) {
			t.Errorf("layer %d: %.4f → %.4f", l.Layer, l.Before, l.After)
		}
	}
	first, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	// Same flags and seed: byte-identical output.
	out2 := filepath.Join(dir, "fit2.onnx")
	args[4] = out2
	if code, _, errOut := runCLI(args...); code != 0 {
		t.Fatalf("second run: exit %d: %s", code, errOut)
	}
	second, err := os.ReadFile(out2)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, second) {
		t.Error("two runs with the same seed wrote different models")
	}
	// Held-out inputs (another seed): compare ORIGINAL BEFORE AFTER.
	code, stdout, errOut = runCLI("compare", orig, lin, out, "--random-inputs", "--batch", "4", "--seq-len", "16", "--seed", "77", "--json")
	if code != 0 {
		t.Fatalf("compare: exit %d: %s", code, errOut)
	}
	var mc infer.ModelComparison
	if err := json.Unmarshal([]byte(stdout), &mc); err != nil {
		t.Fatal(err)
	}
	rel := map[string]float64{}
	for _, r := range mc.Rows {
		if r.Kind == "layer" {
			rel[filepath.Base(r.Model)] += r.RelErr
		}
	}
	if !(rel["fit.onnx"] < 0.5*rel["lin.onnx"]) {
		t.Errorf("held-out layer error: before %.4f, after %.4f", rel["lin.onnx"], rel["fit.onnx"])
	}
	// Texts through the tokenizer beside the original.
	texts := filepath.Join(dir, "texts.txt")
	if err := os.WriteFile(texts, []byte("the man is eating food .\nthe horses\nthe man is eating\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, stdout, errOut := runCLI("finetune", orig, lin, "-o", filepath.Join(dir, "fit3.onnx"), "--text-file", texts, "--steps", "20"); code != 0 || !strings.Contains(stdout, "3 texts") {
		t.Errorf("text calibration: exit %d: %s%s", code, stdout, errOut)
	}
	if _, err := onnx.Load(filepath.Join(dir, "fit3.onnx")); err != nil {
		t.Error(err)
	}
	// Refusals: overwriting either input, no inputs, an unconverted model.
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"finetune", orig, lin, "-o", lin, "--random-inputs"}, 1},
		{[]string{"finetune", orig, lin, "-o", orig, "--random-inputs"}, 1},
		{[]string{"finetune", orig, lin, "-o", filepath.Join(dir, "x.onnx")}, 2}, // no inputs: as in every command (feed.go)
		{[]string{"finetune", orig, "-o", filepath.Join(dir, "x.onnx"), "--random-inputs"}, 1},
		{[]string{"finetune", orig, orig, "-o", filepath.Join(dir, "x.onnx"), "--random-inputs"}, 2},
		{[]string{"finetune", orig, filepath.Join(dir, "missing.onnx"), "-o", filepath.Join(dir, "x.onnx"), "--random-inputs"}, 2},
	} {
		if code, _, errOut := runCLI(c.args...); code != c.code {
			t.Errorf("%v: exit %d, want %d (%s)", c.args[1:], code, c.code, errOut)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "x.onnx")); err == nil {
		t.Error("a refused run wrote its output")
	}
}

// TestReportRealCLI runs a small table on the real model when
// scripts/real-model.sh has built it.
func TestReportRealCLI(t *testing.T) {
	needORT(t)
	model := filepath.Join("..", "..", "testdata", "real", "minilm.onnx")
	if _, err := os.Stat(model); err != nil {
		t.Skip("testdata/real/minilm.onnx absent: run scripts/real-model.sh")
	}
	if testing.Short() {
		t.Skip("short mode")
	}
	calib := filepath.Join("..", "..", "testdata", "realmodel", "calibration.txt")
	held := filepath.Join("..", "..", "testdata", "realmodel", "heldout.txt")
	code, stdout, errOut := runCLI("report-real", "--model", model, "--calibration", calib, "--heldout", held,
		"--features", "64", "--norms", "chi", "--omega", "orthogonal", "--fit-performer", "", "--k", "32", "--steps", "30", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rows []realtable.Row
	if err := json.Unmarshal([]byte(stdout), &rows); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	if len(rows) != 3 {
		t.Fatalf("%d rows, want Performer and Linformer before/after", len(rows))
	}
	for _, r := range rows {
		if !r.Validated || len(r.LayerErr) != 6 || !(r.PooledCos > 0 && r.PooledCos <= 1+1e-9) {
			t.Errorf("row %+v", r)
		}
	}
	if !(rows[2].PooledCos > rows[1].PooledCos) || !(rows[2].MeanLayerErr < rows[1].MeanLayerErr) {
		t.Errorf("fine-tuned Linformer not closer: %+v → %+v", rows[1], rows[2])
	}
}
