package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The torch tier: testdata/real/minilm-torch.onnx is all-MiniLM-L6-v2 as
// PyTorch's own exporter writes it (testdata/realmodel/export_torch.py).
// It checks, on a real exporter's graph of a real pretrained model, that
// every block is found with the checkpoint's dimensions, that the graph the
// project builds from the same weights computes the same embeddings, and
// that both conversions validate op by op.
func TestTorchExportedRealModel(t *testing.T) {
	root := filepath.Join("..", "..")
	torchModel := filepath.Join(root, "testdata", "real", "minilm-torch.onnx")
	goModel := filepath.Join(root, "testdata", "real", "minilm.onnx")
	vocab := filepath.Join(root, "testdata", "real", "minilm", "tokenizer.json")
	for _, p := range []string{torchModel, goModel, vocab} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("%s absent: run scripts/real-model.sh, then python3 testdata/realmodel/export_torch.py (needs torch from PyPI)", p)
		}
	}
	needORT(t)

	code, out, stderr := runCLI("inspect", torchModel, "--json")
	if code != 0 {
		t.Fatalf("inspect: exit %d: %s", code, stderr)
	}
	var rep struct {
		AttentionCount int `json:"attention_count"`
		Attention      []struct {
			Heads       int     `json:"heads"`
			HeadDim     int     `json:"head_dim"`
			Scale       float64 `json:"scale"`
			Bias        string  `json:"bias"`
			Convertible bool    `json:"convertible"`
		} `json:"attention"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("inspect --json: %v", err)
	}
	// config.json of all-MiniLM-L6-v2: 6 layers, 12 heads, hidden 384.
	if rep.AttentionCount != 6 || len(rep.Attention) != 6 {
		t.Fatalf("found %d blocks, the checkpoint has 6 layers", rep.AttentionCount)
	}
	for i, b := range rep.Attention {
		if b.Heads != 12 || b.HeadDim != 32 || math.Abs(b.Scale-1/math.Sqrt(32)) > 1e-6 || b.Bias != "per-key" || !b.Convertible {
			t.Errorf("block %d: %+v, want 12 heads × 32, scale 1/√32, per-key bias, convertible", i, b)
		}
	}

	texts := filepath.Join(root, "testdata", "realmodel", "heldout.txt")
	code, out, stderr = runCLI("compare", goModel, torchModel, "--text-file", texts, "--vocab", vocab, "--json")
	if code != 0 {
		t.Fatalf("compare: exit %d: %s", code, stderr)
	}
	if !strings.Contains(out, "last_hidden_state") {
		t.Fatalf("compare output names no last_hidden_state: %s", out)
	}
	var cmp any
	if err := json.Unmarshal([]byte(out), &cmp); err != nil {
		t.Fatalf("compare --json: %v", err)
	}
	// README: the two exports give identical outputs in onnxruntime
	// (measured: max abs 0 on every held-out sentence).
	checkNumbers(t, cmp, "rel_err", 0)
	checkNumbers(t, cmp, "max_abs", 0)

	dir := t.TempDir()
	for _, c := range [][]string{
		{"performer", torchModel, "-o", filepath.Join(dir, "p.onnx"), "--seed", "1"},
		{"linformer", torchModel, "-o", filepath.Join(dir, "l.onnx"), "--k", "64", "--seed", "1"},
	} {
		if code, _, stderr := runCLI(c...); code != 0 {
			t.Fatalf("%s: exit %d: %s", c[0], code, stderr)
		}
		if code, out, stderr := runCLI("validate", c[3], "--text-file", texts, "--vocab", vocab); code != 0 {
			t.Fatalf("validate %s: exit %d: %s\n%s", c[0], code, stderr, out)
		}
	}
}

// checkNumbers walks decoded JSON and requires every number under a key
// named key to be at most limit.
func checkNumbers(t *testing.T, v any, key string, limit float64) {
	t.Helper()
	seen := 0
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if f, ok := e.(float64); ok && k == key {
					seen++
					if !(f <= limit) {
						t.Errorf("%s = %g exceeds %g", key, f, limit)
					}
				}
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(v)
	if seen == 0 {
		t.Errorf("no %q field in the JSON", key)
	}
}
