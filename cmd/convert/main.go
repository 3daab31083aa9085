// Command convert turns BERT-style ONNX transformers into linear-attention
// models and runs, compares and benchmarks them. Each subcommand lives in
// its own file (cmd_*.go); the table of them below is registered with
// cmd/internal/cli, which dispatches the command line, parses flags,
// prints usage and gives every error its exit code (the package comment
// there lists them); the work is done by the library packages (convert,
// infer, ops, models). The development instruments (report tables,
// backend timings, the cost fit, the model builder) are the lab's binary,
// cmd/linlab.
package main

import (
	"errors"
	"os"

	"github.com/linearize/linearize/cmd/internal/benchrun"
	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/convert"
)

// commands are convert's commands, one file each (cmd_*.go: flags and the
// library call); a benchmark child (this binary re-executed by bench) is
// dispatched by main before any of them (benchChild).
var commands = []*cli.Command{
	{Name: "inspect", Usage: "MODEL [flags]", Run: runInspect, Rewrites: true,
		Summary: "describe a model: IR version, opsets, producer, inputs/outputs, op histogram, initializers"},
	{Name: "window", Usage: "MODEL -o OUT [flags]", Run: runWindow, Rewrites: true,
		Summary: "rewrite every sliding-window attention block (a mask confining each query to a band of keys around it, as ModernBERT's local layers) into WindowAttention: the same output at linear cost; global blocks unchanged (every other conversion also does this)"},
	{Name: "performer", Usage: "MODEL -o OUT [flags]", Run: runPerformer, Rewrites: true,
		Summary: "rewrite every convertible attention block into a PerformerAttention op (random-feature attention with frozen ω: by default exact centring + FAVOR++ features, or FAVOR# ADERF fitted on --calibration; plain FAVOR+ on request; causal blocks of decoders with the causal Performer, plain FAVOR+ with prefix sums) that runs in stock onnxruntime"},
	{Name: "linformer", Usage: "MODEL -o OUT [flags]", Run: runLinformer, Rewrites: true,
		Summary: "rewrite every convertible attention block into Linformer attention (keys and values pooled or projected to length k) that runs in stock onnxruntime"},
	{Name: "local-pooled", Usage: "MODEL -o OUT [flags]", Run: runLocalPooled, Rewrites: true,
		Summary: "rewrite every convertible attention block into LocalPooledAttention: exact attention to the query's block and both neighbours and to sink tokens, plus one pooled key per segment of the rest; no parameters, no length limit"},
	{Name: "lara", Usage: "MODEL -o OUT [flags]", Run: runLara, Rewrites: true,
		Summary: "rewrite every convertible attention block into LaraAttention: LARA randomized attention (multiple importance sampling from Gaussian proposals centred at run-time segment landmarks of Q and K), the proposals' noise frozen per layer from --seed"},
	{Name: "hedgehog", Usage: "MODEL -o OUT --calibration FILE|DIR [flags]", Run: runHedgehog, Rewrites: true,
		Summary: "rewrite every convertible attention block into HedgehogAttention (exact attention to the nearby keys plus learned feature maps for the rest, in one normaliser; or pure linear attention with --linear) and train the maps on your documents by attention transfer"},
	{Name: "long", Usage: "MODEL -o OUT [--max-length N] [flags]", Run: runLong, Rewrites: true,
		Summary: "make a 512-position encoder read long inputs at linear cost: positions restart every window and attention is exact within each window (optionally a pooled far field across windows); identical to the original up to one window"},
	{Name: "extend-positions", Usage: "MODEL -o OUT --max-positions N [flags]", Run: runExtendPositions, Rewrites: true,
		Summary: "grow a model's absolute position-embedding table so it accepts longer inputs"},
	{Name: "finetune", Usage: "ORIGINAL CONVERTED -o OUT [flags]", Run: runFinetune,
		Summary: "fit a converted model's Linformer E/F, or the Q/K projections feeding its Performer features (ω frozen) or local+pooled attention, to the original model's per-layer attention outputs on calibration documents (distillation, layer by layer), guarded by held-out documents: the output is the fine-tuned model only if it beats the converted one on them"},
	{Name: "compare", Usage: "A B [C ...] [flags]", Run: runCompare,
		Summary: "feed the same inputs to several models and compare outputs and per-layer attention outputs with the first; with three or more models the table ends with the others side by side, so that compare ORIGINAL CONVERTED FINETUNED --text-file heldout.txt shows what fine-tuning did on texts it did not see"},
	{Name: "compare-backends", Usage: "MODEL [flags]", Run: runCompareBackends,
		Summary: "run a model in the native Go backend and in onnxruntime on the same inputs and print the error of every output"},
	{Name: "validate", Usage: "CONVERTED [flags]", Run: runValidate,
		Summary: "check every converted op: its ONNX function body (run by onnxruntime, or interpreted by --backend native) vs the Go kernel on the op's captured inputs"},
	{Name: "run", Usage: "MODEL [flags]", Run: runRun,
		Summary: "run a model on inputs from .npy/.pb files or seeded random inputs; print and save the outputs"},
	{Name: "embed", Usage: "MODEL (--text T | --text-file F | --docs DIR | --jsonl F) -o OUT [flags]", Run: runEmbed,
		Summary: "embed texts or documents, one vector each with the model's own pooling; long ones truncated, chunked or read whole"},
	{Name: "embed-merge", Usage: "DIR... [flags]", Run: runEmbedMerge,
		Summary: "verify folders of parts written by embed -o DIR/ (the shards of one run: manifests agree, every id once, every part's SHA-256) and merge them into one .npy, .jsonl or folder"},
	{Name: "evaluate", Usage: "ORIGINAL [NAME=MODEL[:MODE] ...] (--docs DIR | --jsonl F) [flags]", Run: runEvaluate,
		Summary: "long-document retrieval test: passages taken out of long documents, by position bucket, retrieved by the original model " +
			"truncated and chunked (and read whole, when its own limit is longer than 512 tokens) and by other models; MRR, recall@1, bootstrap intervals, time and memory"},
	{Name: "bench", Usage: "MODEL [flags]", Run: runBench,
		Summary: "time and measure peak memory of the original, Performer, Linformer and local+pooled forms of a model over sequence lengths, beside any baseline models"},
}

func init() {
	cli.Name = "convert"
	cli.Register(commands...)
}

// optionError gives an error of the convert package its exit code: an
// option error (convert.ErrInvalidOption) is a usage error, worded with
// the flag that set the field (flagOf maps convert.OptionError.Field to
// a flag name; a field it lacks is named as the library names it); any
// other error is bad input (the model does not fit the flags, or
// nothing converted).
func optionError(err error, flagOf map[string]string) error {
	if err == nil {
		return nil
	}
	var oe *convert.OptionError
	if !errors.As(err, &oe) {
		return cli.BadInput(err)
	}
	if name := flagOf[oe.Field]; name != "" {
		return cli.UsageError("--%s %s", name, oe.Msg)
	}
	return &cli.ExitError{Code: cli.ExitUsage, Err: err}
}

func main() {
	if benchChild() {
		os.Exit(cli.ExitOK)
	}
	os.Exit(cli.Main())
}

// benchChild runs the benchmark job and reports true when this process is
// a bench child: this binary re-executed by bench (cmd/internal/benchrun)
// with the job in $LINEARIZE_BENCH_CHILD. It is checked before any command
// is dispatched, by main and by the tests' TestMain (the tests' binary is
// the child there).
func benchChild() bool {
	return benchrun.ChildMain(os.Stdout)
}
