package main

import (
	"strings"
	"testing"

	"github.com/linearize/linearize/cmd/internal/cli"
)

func TestFeaturesErrorCommand(t *testing.T) {
	code, out, errOut := runCLI("features-error", "-q", "--d", "16", "--seq-len", "32", "--features", "16,64", "--seeds", "2", "--norms", "sqrt-d", "--omega", "iid")
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "| iid") || !strings.Contains(out, "| sqrt-d") || strings.Contains(out, "orthogonal") {
		t.Errorf("table row missing:\n%s", out)
	}
	if !strings.Contains(out, "M = 16") || !strings.Contains(out, "M = 64") {
		t.Errorf("M columns missing:\n%s", out)
	}
	// A list flag's value out of bounds is a usage error, as with every
	// list flag (cmd/internal/cliutil).
	if code, _, errOut := runCLI("features-error", "--features", "0"); code != cli.ExitUsage || !strings.Contains(errOut, "--features") {
		t.Errorf("--features 0: exit %d, want %d (%s)", code, cli.ExitUsage, errOut)
	}
	for _, bad := range [][]string{
		{"features-error", "--norms", "unit"},
		{"features-error", "--kernel", "relu"},
	} {
		if code, _, _ := runCLI(bad...); code != cli.ExitUsage {
			t.Errorf("%v: exit %d, want %d", bad, code, cli.ExitUsage)
		}
	}
}
