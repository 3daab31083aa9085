package main

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCountFlagsBounded: every count flag past its bound is a usage
// error (exit 1) naming the flag and the bound, at once, before any
// work: `evaluate --bootstrap 1000000000000` ended in Go's fatal
// out-of-memory, `finetune --steps` and `--patience` of 10¹² ran for
// ever, and `bench --repeat` printed "ETA 0.0s" and did too.
func TestCountFlagsBounded(t *testing.T) {
	model := filepath.Join("..", "..", "testdata", "bert-tiny.onnx")
	dir := t.TempDir()
	out := filepath.Join(dir, "out.onnx")
	docs := filepath.Join(dir, "docs.jsonl")
	huge := "1000000000000"
	for _, c := range []struct {
		args  []string
		flag  string
		bound int
	}{
		{[]string{"evaluate", model, "--jsonl", docs, "--bootstrap", huge}, "bootstrap", maxBootstrap},
		{[]string{"evaluate", model, "--jsonl", docs, "--per-bucket", huge}, "per-bucket", maxPerBucket},
		{[]string{"evaluate", model, "--jsonl", docs, "--limit-docs", huge}, "limit-docs", maxDocs},
		{[]string{"evaluate", model, "--jsonl", docs, "--max-tokens", huge}, "max-tokens", maxTokensFlag},
		{[]string{"evaluate", model, "--jsonl", docs, "--min-tokens", huge}, "min-tokens", maxTokensFlag},
		{[]string{"bench", model, "--repeat", huge}, "repeat", maxRepeat},
		{[]string{"bench", model, "--features", "100000"}, "features", maxSizeFlag},
		{[]string{"bench", model, "--landmarks", "100000"}, "landmarks", maxSizeFlag},
		{[]string{"finetune", model, model, "-o", out, "--random-inputs", "--steps", huge}, "steps", maxSteps},
		{[]string{"finetune", model, model, "-o", out, "--random-inputs", "--patience", huge}, "patience", maxPatience},
		{[]string{"finetune", model, model, "-o", out, "--random-inputs", "--minibatch", huge}, "minibatch", maxMinibatch},
		{[]string{"hedgehog", model, "-o", out, "--steps", huge}, "steps", maxSteps},
		{[]string{"hedgehog", model, "-o", out, "--windows", huge}, "windows", maxWindowsStep},
		{[]string{"hedgehog", model, "-o", out, "--max-windows", huge}, "max-windows", maxWindowsTotal},
		{[]string{"hedgehog", model, "-o", out, "--seq-len", huge}, "seq-len", maxWindowFlag},
		{[]string{"hedgehog", model, "-o", out, "--steps", "0", "--reach", huge}, "reach", maxReach},
		{[]string{"long", model, "-o", out, "--learned", "--steps", huge}, "steps", maxSteps},
		{[]string{"long", model, "-o", out, "--learned", "--windows", huge}, "windows", maxWindowsStep},
		{[]string{"embed", model, "-o", filepath.Join(dir, "v.npy"), "--text", "x", "--max-tokens", huge}, "max-tokens", maxTokensFlag},
		{[]string{"embed", model, "-o", filepath.Join(dir, "v.npy"), "--text", "x", "--window", huge}, "window", maxWindowFlag},
		{[]string{"embed", model, "-o", filepath.Join(dir, "v.npy"), "--text", "x", "--batch", huge}, "batch", maxBatchFlag},
		{[]string{"performer", model, "-o", out, "--calibration", docs, "--calibration-max-len", huge}, "calibration-max-len", maxWindowFlag},
		{[]string{"inspect", model, "--cost", "--k", "100000"}, "k", maxSizeFlag},
		{[]string{"inspect", model, "--cost", "--segments", "100000"}, "segments", maxSizeFlag},
	} {
		start := time.Now()
		code, _, stderr := runCLI(c.args...)
		if code != exitUsage || !strings.Contains(stderr, "--"+c.flag+" ") || !strings.Contains(stderr, "at most "+itoa(c.bound)) {
			t.Errorf("%v: exit %d, %q; want exit 1 naming --%s and its bound %d", c.args, code, stderr, c.flag, c.bound)
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("%v: refused after %v, want at once", c.args, took)
		}
		// The help says the bound.
		if _, help, _ := runCLI("help", c.args[0]); !strings.Contains(strings.Join(strings.Fields(help), " "), "(at most "+itoa(c.bound)+")") {
			t.Errorf("%s --help does not say --%s is at most %d", c.args[0], c.flag, c.bound)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
