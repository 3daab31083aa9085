package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/cmd/internal/cli/clitest"
)

// TestLabBadInputExitCodes runs every linlab command on bad command lines
// and bad files and checks the exit code's class (cmd/internal/cli: 1
// usage, 2 bad input), that the one-line message names the flag or file
// at fault, and that nothing is printed on stdout or written (as
// convert's TestBadInputExitCodes). Every registered command has cases.
func TestLabBadInputExitCodes(t *testing.T) {
	tmp := t.TempDir()
	missing := filepath.Join(tmp, "missing.onnx")
	missingJSON := filepath.Join(tmp, "missing.json")
	noDir := filepath.Join(tmp, "nodir", "out.onnx")
	out := filepath.Join(tmp, "out.onnx")
	dir := filepath.Join(tmp, "adir")
	texts := filepath.Join(tmp, "texts.txt")
	bench := filepath.Join("..", "..", "docs", "bench.json")
	if err := os.WriteFile(texts, []byte("the man\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	clitest.ExitCodes(t, out, []clitest.Case{
		// build-model
		{[]string{"build-model", "-o", out, "--hidden", "30", "--heads", "4"}, cli.ExitUsage, "hidden"},
		{[]string{"build-model", "-o", out, "--preset", "huge"}, cli.ExitUsage, "--preset"},
		{[]string{"build-model", "-o", out, "--scale", "sqrt"}, cli.ExitUsage, "--scale"},
		{[]string{"build-model", "-o", out, "--layers", "2"}, cli.ExitUsage, "layers"}, // renamed --num-layers
		{[]string{"build-model", "-o", out, "--vocab", "30"}, cli.ExitUsage, "vocab"},  // renamed --vocab-size
		{[]string{"build-model", "-o", noDir}, cli.ExitBadInput, "nodir"},
		{[]string{"build-model", "--no-such-flag", "-o", out}, cli.ExitUsage, "no-such-flag"},
		{[]string{"build-model", "-o", filepath.Join(tmp, "no-such-folder", "out.onnx")}, cli.ExitBadInput, "does not exist"},
		{[]string{"build-model", "-o", dir}, cli.ExitBadInput, "is a directory"},

		// bench-backends
		{[]string{"bench-backends", "--lengths", "0"}, cli.ExitUsage, "--lengths"},
		{[]string{"bench-backends", "--num-layers", "0"}, cli.ExitUsage, "--num-layers"},
		{[]string{"bench-backends", "--seq-lens", "128"}, cli.ExitUsage, "seq-lens"}, // renamed --lengths
		{[]string{"bench-backends", "--profile", "--json"}, cli.ExitUsage, "--profile"},
		{[]string{"bench-backends", "--lengths", "128,x"}, cli.ExitUsage, "--lengths"},
		{[]string{"bench-backends", "--repeat", "0"}, cli.ExitUsage, "--repeat"},
		{[]string{"bench-backends", "model.onnx"}, cli.ExitUsage, "no positional"},

		// features-error
		{[]string{"features-error", "--features", "0"}, cli.ExitUsage, "--features"},
		{[]string{"features-error", "--features", "100000"}, cli.ExitUsage, "--features"},
		{[]string{"features-error", "--kernel", "relu"}, cli.ExitUsage, "--kernel"},
		{[]string{"features-error", "--norms", "unit"}, cli.ExitUsage, "--norms"},
		{[]string{"features-error", "--omega", "cube"}, cli.ExitUsage, "--omega"},
		{[]string{"features-error", "--seq-len", "0"}, cli.ExitUsage, "--seq-len"},
		{[]string{"features-error", "--qk-sigma", "0"}, cli.ExitUsage, "--qk-sigma"},
		{[]string{"features-error", "--sigma", "0.5"}, cli.ExitUsage, "sigma"}, // renamed --qk-sigma
		{[]string{"features-error", "--threads", "-1"}, cli.ExitUsage, "--threads"},

		// report-real
		{[]string{"report-real", "--model", missing}, cli.ExitBadInput, "missing.onnx"},
		{[]string{"report-real", "--model", missing, "--lara", "0"}, cli.ExitUsage, "--lara"},
		{[]string{"report-real", "--model", missing, "--local-pooled", "8/8"}, cli.ExitUsage, "--local-pooled"},
		{[]string{"report-real", "--model", missing, "--steps", "-1"}, cli.ExitUsage, "--steps"},
		{[]string{"report-real", "--model", missing, "--omegas", "iid"}, cli.ExitUsage, "omegas"}, // renamed --omega
		{[]string{"report-real", "--model", missing, "--calibration", texts, "--docs", tmp}, cli.ExitUsage, "--docs"},
		{[]string{"report-real", "--model", missing, "--lara", "64,x"}, cli.ExitUsage, "--lara"},

		// fit-cost
		{[]string{"fit-cost"}, cli.ExitUsage, "BENCH.json"},
		{[]string{"fit-cost", "--check", bench}, cli.ExitUsage, "--check"},
		{[]string{"fit-cost", "--bogus", bench}, cli.ExitUsage, "--bogus"},
		{[]string{"fit-cost", missingJSON}, cli.ExitBadInput, "missing.json"},
		{[]string{"fit-cost", texts}, cli.ExitBadInput, "texts.txt"},
	})
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("build-model -o DIRECTORY left %v in it", left)
	}
}
