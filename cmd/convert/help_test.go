package main

import (
	"runtime"
	"strings"
	"testing"

	"github.com/linearize/linearize/cmd/internal/cli/clitest"
)

// defaultsDiffer lists the flags whose default is not the same in every
// command that defines them, with the reason. TestHelp fails on any other
// flag whose defaults differ, and on an entry here whose flag no longer
// differs.
var defaultsDiffer = map[string]string{
	"features":   "performer, bench and inspect --cost use M = 256 random features (linlab's features-error and report-real sweep a list); hedgehog and long --learned take F = the head size (0)",
	"threads":    "bench times with a fixed 2 threads so that timings compare (as linlab's bench-backends does); elsewhere 0 is the backend's default",
	"seq-len":    "the input flags' 0 means the model's length (texts) or 16, at most the model's position limit (random inputs); hedgehog cuts calibration documents into windows of 512, long --learned into windows of 2048 (several windows, so that the far field has something to learn)",
	"steps":      "finetune fits 200 Adam steps per layer; hedgehog trains every head 300 steps, since its maps start far from the teacher",
	"lr":         "finetune's 0 picks each method's rate; hedgehog's maps train at 0.01",
	"sinks":      "local-pooled and linformer keep [CLS] and the last token exact (first,last); long frames every window with its own [CLS] and [SEP], so it needs none",
	"batch":      "embed runs texts or chunks in batches of embed.DefaultBatch (8), the library's default; the input flags' --batch is the number of random input rows (1)",
	"tolerance":  "compare-backends' 0 holds each output of a whole model to its precision's default (1e-4 in float32, 16 units in the last place in float16 or bfloat16: infer.ModelTolerance); validate checks one node at a time, to 1e-4 with a floor of one unit for a half-precision node",
	"max-tokens": "embed reads every wordpiece (0); evaluate cuts documents at 4096 so that every system reads the same text and the buckets end there",
}

// TestHelp checks every command's --help and the defaults of flags that
// share a name (clitest.Help).
func TestHelp(t *testing.T) { clitest.Help(t, defaultsDiffer) }

// TestHelpFits checks that the usage and every -h fit a terminal: 80
// columns, at most 50 lines, one example each (clitest.HelpFits).
func TestHelpFits(t *testing.T) { clitest.HelpFits(t) }

// TestVersion: --version (and "version") prints one line naming the tool
// and the Go toolchain that built it, and exits 0.
func TestVersion(t *testing.T) {
	for _, arg := range []string{"--version", "version"} {
		code, out, errOut := runCLI(arg)
		if code != exitOK || errOut != "" || !strings.HasPrefix(out, "convert (linearize) ") || !strings.Contains(out, runtime.Version()) || strings.Count(out, "\n") != 1 {
			t.Errorf("convert %s: exit %d, stdout %q, stderr %q", arg, code, out, errOut)
		}
	}
}
