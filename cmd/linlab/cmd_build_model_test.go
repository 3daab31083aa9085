package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/models"
	"github.com/linearize/linearize/onnx"
)

// TestBuildModelRegeneratesBundledModel: the command go generate runs
// writes exactly the committed testdata/bert-tiny.onnx.
func TestBuildModelRegeneratesBundledModel(t *testing.T) {
	out := filepath.Join(t.TempDir(), "tiny.onnx")
	code, _, errOut := runCLI("build-model", "--preset", "tiny", "-o", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	a, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "bert-tiny.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatal("build-model --preset tiny differs from testdata/bert-tiny.onnx: run go generate ./testdata")
	}
	if code, _, _ := runCLI("build-model", "-o", out, "--hidden", "30", "--heads", "4"); code != cli.ExitUsage {
		t.Errorf("hidden 30 with 4 heads: exit %d, want %d", code, cli.ExitUsage)
	}
	if code, _, _ := runCLI("build-model"); code != cli.ExitUsage {
		t.Errorf("no -o: exit %d, want %d", code, cli.ExitUsage)
	}
}

// TestBuildModelModernBERT: --family modernbert writes models.ModernBERT's
// model of the flags' configuration, and refuses bad windows and the
// other family's flags.
func TestBuildModelModernBERT(t *testing.T) {
	out := filepath.Join(t.TempDir(), "mb.onnx")
	code, stdout, errOut := runCLI("build-model", "--family", "modernbert", "-o", out, "--num-layers", "6", "--hidden", "96",
		"--heads", "6", "--intermediate", "144", "--window", "128", "--global-every", "3", "--max-positions", "8192", "--seed", "7")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(stdout, "ModernBERT hidden 96, 6 heads, 6 layers (global every 3, window 128: ±64)") {
		t.Errorf("stdout %q does not describe the model", stdout)
	}
	have, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	cfg := models.ModernBERTTinyConfig()
	cfg.Layers, cfg.Hidden, cfg.Heads, cfg.Intermediate, cfg.Window, cfg.GlobalEvery, cfg.MaxPositions, cfg.Seed = 6, 96, 6, 144, 128, 3, 8192, 7
	m, err := models.ModernBERT(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ref := filepath.Join(t.TempDir(), "ref.onnx")
	if err := onnx.Save(m, ref, onnx.SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(ref)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, want) {
		t.Error("build-model --family modernbert differs from models.ModernBERT of the same configuration")
	}
	loaded, err := onnx.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	if doc := loaded.GetDocString(); !strings.Contains(doc, "positions 8192") {
		t.Errorf("doc string %q does not record max_position_embeddings", doc)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--family", "gpt2"}, "--family"},
		{[]string{"--family", "modernbert", "--window", "15"}, "window 15 must be even"},
		{[]string{"--family", "modernbert", "--window", "-2"}, "window must be positive"},
		{[]string{"--family", "modernbert", "--hidden", "60", "--heads", "4"}, "head dim 15"},
		{[]string{"--family", "modernbert", "--opset", "11"}, "opset 11"},
		{[]string{"--family", "modernbert", "--causal"}, "--causal does not apply to --family modernbert"},
		{[]string{"--family", "modernbert", "--scale", "mul"}, "--scale does not apply"},
		{[]string{"--window", "128"}, "--window does not apply to --family bert"},
		{[]string{"--global-every", "2"}, "--global-every does not apply"},
	} {
		bad := filepath.Join(t.TempDir(), "bad.onnx")
		code, stdout, errOut := runCLI(append([]string{"build-model", "-o", bad}, c.args...)...)
		if code != cli.ExitUsage || !strings.Contains(errOut, c.want) || stdout != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d naming %q", c.args, code, stdout, errOut, cli.ExitUsage, c.want)
		}
		if _, err := os.Stat(bad); err == nil {
			t.Errorf("%v wrote %s", c.args, bad)
		}
	}
}
