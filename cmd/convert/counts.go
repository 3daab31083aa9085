package main

import (
	"strconv"

	"github.com/linearize/linearize/cmd/internal/cli"
)

// The bounds of the count flags: each is far past any use (a typo or a
// hostile value, not a real run, goes beyond), and below what would
// exhaust memory or run for ever. A value past its bound is a usage
// error (exit 1) naming the flag and the bound; each flag's help says
// its bound.
const (
	maxBootstrap    = 100_000   // evaluate --bootstrap: resamples, each over every document
	maxPerBucket    = 1024      // evaluate --per-bucket: passages per document and bucket
	maxDocs         = 1 << 24   // evaluate --limit-docs
	maxTokensFlag   = 1 << 24   // embed and evaluate --max-tokens, evaluate --min-tokens: wordpieces of one text
	maxWindowFlag   = 1 << 20   // embed --window, performer --calibration-max-len, hedgehog/long --seq-len: tokens of one pass
	maxBatchFlag    = 4096      // embed --batch: texts or chunks per run
	maxRepeat       = 1000      // bench --repeat: timed runs per variant and length, each a process
	maxSteps        = 1_000_000 // finetune, hedgehog and long --steps: Adam steps per layer or head
	maxPatience     = 100_000   // finetune --patience: checkpoints without progress
	maxMinibatch    = 1 << 20   // finetune --minibatch: calibration rows per step
	maxWindowsStep  = 1 << 16   // hedgehog and long --windows: windows per Adam step
	maxWindowsTotal = 1 << 24   // hedgehog and long --max-windows
	maxReach        = 1 << 16   // hedgehog --reach: blocks on either side
	maxSizeFlag     = 1 << 16   // bench and inspect --cost: --features, --k, --block, --segments, --landmarks
	maxBenchLength  = 1 << 20   // bench --lengths: tokens of one timed run
)

// count is one count flag's value and bound.
type count struct {
	flag  string
	value int
	max   int
}

// checkCounts refuses the first count past its bound: a usage error
// naming the flag, its value and the bound.
func checkCounts(cs ...count) error {
	for _, c := range cs {
		if c.value > c.max {
			return cli.UsageError("--%s %d is past its bound: at most %d", c.flag, c.value, c.max)
		}
	}
	return nil
}

// atMost is the end of a count flag's help: " (at most N)".
func atMost(n int) string { return " (at most " + strconv.Itoa(n) + ")" }
