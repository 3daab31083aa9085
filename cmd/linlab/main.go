// Command linlab is the lab's binary: the development instruments that
// measure the conversions and the backends and produce the figures of
// docs/ (report-real, bench-backends, features-error, fit-cost) and the
// model builder the tests and benchmarks start from (build-model). The
// user's verbs are in cmd/convert. Both binaries share cmd/internal/cli
// (command registry, flag parsing, usage texts, exit codes: the package
// comment there lists them); the experiment harnesses live beside it under
// cmd/internal (realtable, featsweep, benchrun, costfit).
package main

import (
	"os"

	"github.com/linearize/linearize/cmd/internal/cli"
)

// commands are linlab's commands, one file each (cmd_*.go).
var commands = []*cli.Command{
	{Name: "report-real", Usage: "[flags]", Run: runReportReal,
		Summary: "measure Performer, Linformer and local+pooled conversions of the real model against the original (zero-shot, and fine-tuned where possible): mean-pooled embedding cosine, per-layer attention error, validate; on held-out sentences, or with --docs on long documents truncated to each of --lengths tokens; prints markdown tables"},
	{Name: "bench-backends", Usage: "[flags]", Run: runBenchBackends,
		Summary: "time the native Go backend against onnxruntime on a BERT-base-width model (hidden 768, 12 heads, FFN 3072) and print the ratio"},
	{Name: "features-error", Usage: "[flags]", Run: runFeaturesError,
		Summary: "measure the Performer estimator's error vs exact softmax attention as the feature count M grows"},
	{Name: "fit-cost", Usage: "BENCH.json... [flags]", Run: runFitCost,
		Summary: "fit the cost model's weights (convert.Weights) to the time ratios of convert bench --json-out results, all of one model and options, and print the crossovers they predict beside the measured ones; results after --check are only compared with the fit, not fitted"},
	{Name: "build-model", Usage: "-o OUT [flags]", Run: runBuildModel,
		Summary: "write a BERT-style or ModernBERT-shaped (RoPE, sliding-window and global layers) model with seeded random weights (no download needed)"},
}

func init() {
	cli.Name = "linlab"
	cli.Register(commands...)
}

func main() { os.Exit(cli.Main()) }
