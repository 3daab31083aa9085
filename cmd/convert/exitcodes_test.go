package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/linearize/linearize/cmd/internal/cli/clitest"
)

// TestBadInputExitCodes runs every command on bad command lines and bad
// files and checks the exit code's class (cmd/internal/cli: 1 usage — the
// command line is wrong whatever the files hold; 2 bad input — a file, or
// a model the flags do not fit), that the one-line message names the flag
// or file at fault, and that nothing is printed on stdout
// (clitest.ExitCodes). Every registered command has cases. No case gets
// as far as converting a whole model or timing anything.
func TestBadInputExitCodes(t *testing.T) {
	tmp := t.TempDir()
	model := filepath.Join("..", "..", "testdata", "bert-tiny.onnx")
	missing := filepath.Join(tmp, "missing.onnx")
	noDir := filepath.Join(tmp, "nodir", "out.onnx")
	out := filepath.Join(tmp, "out.onnx")
	noText := filepath.Join(tmp, "none.txt")
	texts := filepath.Join(tmp, "texts.txt")
	if err := os.WriteFile(texts, []byte("the man\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	clitest.ExitCodes(t, out, []clitest.Case{
		// inspect
		{[]string{"inspect", "--bogus", model}, exitUsage, "bogus"},
		{[]string{"inspect", model, "--cost", "--sinks", "middle"}, exitUsage, "--sinks"},
		{[]string{"inspect", model, "--cost", "--lengths", "0"}, exitUsage, "--lengths"},
		{[]string{"inspect", model, "--cost", "--seq-len", "512"}, exitUsage, "seq-len"}, // renamed --lengths
		{[]string{"inspect", model, "--cost", "--features", "0"}, exitUsage, "--features"},
		{[]string{"inspect", missing}, exitBadInput, "missing.onnx"},

		// the rewriting commands
		{[]string{"performer", model, "-o", out, "--features", "0"}, exitUsage, "features"},
		{[]string{"performer", model, "-o", out, "--features", "100000"}, exitUsage, "--features"},
		{[]string{"performer", model, "-o", out, "--omega", "cube"}, exitUsage, "--omega"},
		{[]string{"performer", model, "-o", out, "--norms", "unit"}, exitUsage, "--norms"},
		{[]string{"performer", model, "-o", out, "--kernel", "cosine"}, exitUsage, "--kernel"},
		{[]string{"performer", model, "-o", out, "--features-kind", "relu"}, exitUsage, "--features-kind"},
		{[]string{"performer", model, "-o", out, "--chunk", "0"}, exitUsage, "chunk"},
		{[]string{"performer", model, "-o", out, "--calibration-weighting", "all"}, exitUsage, "--calibration-weighting"},
		{[]string{"performer", model, "-o", out, "--max-positions", "256", "--position-method", "cubic"}, exitUsage, "--position-method"},
		{[]string{"performer", model, "-o", out, "--max-positions", "-1"}, exitUsage, "--max-positions"},
		{[]string{"performer", model, "-o", out, "--layers", "x"}, exitUsage, "--layers"},
		{[]string{"performer", model, "-o", out, "--layers", "7"}, exitBadInput, "layer 7"},
		{[]string{"performer", model, "-o", out, "--calibration", noText}, exitBadInput, "none.txt"},
		{[]string{"performer", missing, "-o", out}, exitBadInput, "missing.onnx"},
		{[]string{"performer", model, "-o", noDir}, exitBadInput, "nodir"},
		{[]string{"linformer", model, "-o", out, "--k", "0"}, exitUsage, "k"},
		{[]string{"linformer", model, "-o", out, "--k", "100000"}, exitUsage, "--k"},
		{[]string{"linformer", model, "-o", out, "--init", "zeros"}, exitUsage, "--init"},
		{[]string{"linformer", model, "-o", out, "--init", "gaussian", "--share", "all"}, exitUsage, "--share"},
		{[]string{"linformer", model, "-o", out, "--init", "gaussian", "--k", "40000", "--max-len", "40000"}, exitUsage, "--max-len"},
		{[]string{"linformer", model, "-o", out, "--sinks", "middle"}, exitUsage, "--sinks"},
		{[]string{"linformer", model, "-o", out, "--layers", "5"}, exitBadInput, "layer 5"},
		{[]string{"local-pooled", model, "-o", out, "--block", "0"}, exitUsage, "block"},
		{[]string{"local-pooled", model, "-o", out, "--segments", "1000000"}, exitUsage, "--segments"},
		{[]string{"local-pooled", model, "-o", out, "--sinks", "middle"}, exitUsage, "--sinks"},
		{[]string{"local-pooled", model, "-o", out, "--seed", "1"}, exitUsage, "seed"}, // nothing is sampled
		{[]string{"local-pooled", missing, "-o", out}, exitBadInput, "missing.onnx"},
		{[]string{"lara", model, "-o", out, "--landmarks", "0"}, exitUsage, "landmarks"},
		{[]string{"lara", model, "-o", out, "--landmarks", "1000000"}, exitUsage, "--landmarks"},
		{[]string{"lara", model, "-o", out, "--samples", "0"}, exitUsage, "samples"},
		{[]string{"lara", model, "-o", out, "--sigma", "0"}, exitUsage, "--sigma"},
		{[]string{"lara", model}, exitUsage, "-o OUT"},
		{[]string{"lara", missing, "-o", out}, exitBadInput, "missing.onnx"},
		// -o naming a file another flag reads: never written over.
		{[]string{"performer", model, "-o", texts, "--calibration", texts}, exitUsage, "never written over"},
		{[]string{"hedgehog", model, "-o", texts, "--calibration", texts}, exitUsage, "never written over"},
		{[]string{"embed-merge"}, exitUsage, "folders"},
		{[]string{"embed-merge", tmp}, exitBadInput, "manifest.json"},
		{[]string{"embed-merge", tmp, "-o", "x.txt"}, exitUsage, "-o"},
		{[]string{"window", model}, exitUsage, "-o OUT"},
		{[]string{"window", model, "-o", out, "--seed", "1"}, exitUsage, "seed"},  // nothing is sampled
		{[]string{"window", model, "-o", out}, exitBadInput, "nothing converted"}, // no sliding-window block
		{[]string{"window", missing, "-o", out}, exitBadInput, "missing.onnx"},
		{[]string{"long", model, "-o", out, "--max-length", "64"}, exitUsage, "--max-length"},
		{[]string{"long", model, "-o", out, "--window", "100"}, exitUsage, "--window"},
		{[]string{"long", model, "-o", out, "--segments", "0"}, exitUsage, "segments"},
		{[]string{"long", model, "-o", out, "--far-bias", "x"}, exitUsage, "--far-bias"},
		{[]string{"long", model, "-o", out, "--sinks", "middle"}, exitUsage, "--sinks"},
		{[]string{"long", model}, exitUsage, "-o OUT"},
		{[]string{"long", missing, "-o", out}, exitBadInput, "missing.onnx"},
		{[]string{"embed", missing, "--text", "a", "-o", filepath.Join(tmp, "e.npy")}, exitBadInput, "missing.onnx"},
		{[]string{"evaluate", missing, "--docs", tmp}, exitBadInput, "missing.onnx"},
		{[]string{"extend-positions", model, "-o", out}, exitUsage, "--max-positions"},
		{[]string{"extend-positions", model, "-o", out, "--max-positions", "256", "--position-method", "cubic"}, exitUsage, "--position-method"},
		{[]string{"extend-positions", model, "-o", out, "--max-positions", "256", "--position-offset", "-1"}, exitUsage, "--position-offset"},
		{[]string{"extend-positions", model, "-o", out, "--max-positions", "256", "--method", "copy"}, exitUsage, "method"}, // renamed --position-method
		{[]string{"extend-positions", model, "-o", out, "--max-positions", "8"}, exitBadInput, "max-positions"},
		{[]string{"extend-positions", missing, "-o", out, "--max-positions", "256"}, exitBadInput, "missing.onnx"},

		// the commands that run models
		{[]string{"run", model, "--backend", "tpu"}, exitUsage, "--backend"},
		{[]string{"run", model, "--threads", "-1"}, exitUsage, "--threads"},
		{[]string{"run", model, "--input", "x"}, exitUsage, "input"},
		{[]string{"run", model, "--random-inputs", "--seq-len", "0"}, exitUsage, "seq-len"},
		{[]string{"run", model, "--text", "the", "--random-inputs"}, exitUsage, "--text"},
		{[]string{"run", model, "--text-file", noText}, exitBadInput, "none.txt"},
		{[]string{"run", missing, "--random-inputs"}, exitBadInput, "missing.onnx"},
		{[]string{"compare", model}, exitUsage, "two models"},
		{[]string{"compare", model, model, "--layers=false", "--random-inputs"}, exitUsage, "layers"}, // renamed --per-layer
		{[]string{"compare", model, model, "--per-layer=maybe", "--random-inputs"}, exitUsage, "per-layer"},
		{[]string{"compare", model, missing, "--random-inputs"}, exitBadInput, "missing.onnx"},
		{[]string{"compare", model, model, "--random-inputs", "--pooling", "sum"}, exitUsage, "--pooling"},
		{[]string{"validate", model, "--random-inputs", "--tolerance", "0"}, exitUsage, "--tolerance"},
		{[]string{"validate", model, "--random-inputs", "--tolerance", "-1"}, exitUsage, "--tolerance"},
		{[]string{"validate", missing, "--random-inputs"}, exitBadInput, "missing.onnx"},
		{[]string{"compare-backends", model, "--random-inputs", "--tolerance", "-1"}, exitUsage, "--tolerance"},
		{[]string{"compare-backends", model, "--random-inputs", "--tol", "1e-3"}, exitUsage, "tol"}, // renamed --tolerance
		{[]string{"compare-backends", missing, "--random-inputs"}, exitBadInput, "missing.onnx"},
		{[]string{"finetune", model, model, "--random-inputs"}, exitUsage, "-o OUT"},
		{[]string{"finetune", model, model, "-o", out, "--steps", "-1", "--random-inputs"}, exitUsage, "--steps"},
		{[]string{"finetune", model, model, "-o", out, "--backend", "tpu", "--random-inputs"}, exitUsage, "--backend"},
		{[]string{"finetune", missing, model, "-o", out, "--random-inputs"}, exitBadInput, "missing.onnx"},
		{[]string{"hedgehog", model, "-o", out}, exitUsage, "--calibration"},
		{[]string{"hedgehog", model, "-o", out, "--calibration", texts, "--objective", "kl"}, exitUsage, "--objective"},
		{[]string{"hedgehog", model, "-o", out, "--features", "-1", "--steps", "0"}, exitUsage, "--features"},
		{[]string{"hedgehog", model, "-o", out, "--calibration", noText}, exitBadInput, "none.txt"},
		{[]string{"hedgehog", missing, "-o", out, "--steps", "0"}, exitBadInput, "missing.onnx"},

		// bench
		{[]string{"bench", model, "--variants", "softmax"}, exitUsage, "--variants"},
		{[]string{"bench", model, "--lengths", "0"}, exitUsage, "--lengths"},
		{[]string{"bench", model, "--lengths", "512,1e9"}, exitUsage, "--lengths"},
		{[]string{"bench", model, "--lengths", "512,2000000"}, exitUsage, "--lengths 2000000 is past its bound"},
		{[]string{"bench", model, "--json-out", out + ".json", "--plot", out + ".json"}, exitUsage, "same file"},
		{[]string{"bench", model, "--repeat", "0"}, exitUsage, "--repeat"},
		{[]string{"bench", model, "--cost-weights", "pass=-1"}, exitUsage, "--cost-weights"},
		{[]string{"bench", model, "--baseline", "fused"}, exitUsage, "--baseline"},
		{[]string{"bench", model, "--json-out", filepath.Join(tmp, "nodir", "b.json")}, exitBadInput, "nodir"},
		{[]string{"bench", missing}, exitBadInput, "missing.onnx"},
	})
}
