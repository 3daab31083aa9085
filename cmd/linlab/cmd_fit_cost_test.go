package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestFitCost fits the saved crossover run and checks another saved run
// against the fit: the weights come first, then each result under its
// role.
func TestFitCost(t *testing.T) {
	docs := filepath.Join("..", "..", "docs")
	fitted, checked := filepath.Join(docs, "bench-crossover.json"), filepath.Join(docs, "bench.json")
	code, out, errOut := runCLI("fit-cost", fitted, "--check", checked)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"weights: ", "to 3 digits (convert.DefaultWeights): ", fitted + " (fitted):", checked + " (not fitted, checked):", "predicted "} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.HasPrefix(out, "weights: ") {
		t.Errorf("output does not start with the weights:\n%s", out)
	}
}
