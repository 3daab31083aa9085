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
		Summary: "describe a model: inputs, opsets, ops, attention blocks",
		Detail:  "IR version, opsets, producer, inputs and outputs, op histogram, initializers; --attention lists the attention blocks found and --cost prices each conversion",
		Example: "inspect model.onnx --cost --lengths 512,8192"},
	{Name: "window", Usage: "MODEL -o OUT [flags]", Run: runWindow, Rewrites: true,
		Summary: "rewrite sliding-window blocks exactly (WindowAttention)",
		Detail:  "a block whose mask confines each query to a band of keys around it (ModernBERT's local layers) becomes WindowAttention: the same output at linear cost; global blocks are left as they are (every other conversion also does this)",
		Example: "window modernbert.onnx -o out/window.onnx"},
	{Name: "performer", Usage: "MODEL -o OUT [flags]", Run: runPerformer, Rewrites: true,
		Summary: "rewrite attention into Performer random features",
		Detail:  "frozen ω; centred FAVOR++ features by default, FAVOR# fitted on --calibration, plain FAVOR+ on request; causal blocks get the causal form",
		Example: "performer model.onnx -o out/performer.onnx"},
	{Name: "linformer", Usage: "MODEL -o OUT [flags]", Run: runLinformer, Rewrites: true,
		Summary: "rewrite attention into Linformer (keys, values to length k)",
		Detail:  "keys and values pooled or projected to length k; runs in stock onnxruntime",
		Example: "linformer model.onnx -o out/linformer.onnx --k 256"},
	{Name: "local-pooled", Usage: "MODEL -o OUT [flags]", Run: runLocalPooled, Rewrites: true,
		Summary: "rewrite attention into exact local + pooled far attention",
		Detail:  "LocalPooledAttention: exact attention to the query's block, both neighbours and sink tokens, plus one pooled key per segment of the rest; no parameters, no length limit",
		Example: "local-pooled model.onnx -o out/lp.onnx"},
	{Name: "lara", Usage: "MODEL -o OUT [flags]", Run: runLara, Rewrites: true,
		Summary: "rewrite attention into LARA randomized attention",
		Detail:  "LaraAttention: multiple importance sampling from Gaussian proposals centred at run-time segment landmarks of Q and K, the proposals' noise frozen per layer from --seed",
		Example: "lara model.onnx -o out/lara.onnx"},
	{Name: "hedgehog", Usage: "MODEL -o OUT --calibration FILE|DIR [flags]", Run: runHedgehog, Rewrites: true,
		Summary: "rewrite attention into Hedgehog and train its feature maps",
		Detail:  "exact attention to nearby keys plus learned feature maps for the rest (pure linear with --linear), trained on your documents",
		Example: "hedgehog model.onnx -o out/hh.onnx --calibration docs/"},
	{Name: "long", Usage: "MODEL -o OUT [--max-length N] [flags]", Run: runLong, Rewrites: true,
		Summary: "let a 512-position encoder read long inputs by windows",
		Detail:  "positions restart every window, attention is exact within each (with --far, a pooled far field): the original up to one window",
		Example: "long model.onnx -o out/long.onnx --max-length 8192"},
	{Name: "extend-positions", Usage: "MODEL -o OUT --max-positions N [flags]", Run: runExtendPositions, Rewrites: true,
		Summary: "grow a model's absolute position table for longer inputs",
		Example: "extend-positions model.onnx -o out/ext.onnx --max-positions 2048"},
	{Name: "finetune", Usage: "ORIGINAL CONVERTED -o OUT [flags]", Run: runFinetune,
		Summary: "fit a converted model to the original on your documents",
		Detail:  "fits Linformer's E/F, or the Q/K projections feeding Performer features (ω frozen) or local+pooled attention, to the original's per-layer attention outputs, layer by layer; the output is the fine-tuned model only if it beats the converted one on held-out documents",
		Example: "finetune model.onnx out/lp.onnx -o out/lp-ft.onnx --text-file cal.txt"},
	{Name: "compare", Usage: "A B [C ...] [flags]", Run: runCompare,
		Summary: "compare models' outputs and attention layers on one input",
		Detail:  "the first model is the reference; with three or more models the table ends with the others side by side (compare ORIGINAL CONVERTED FINETUNED --text-file held-out.txt shows what fine-tuning did on texts it did not see)",
		Example: "compare model.onnx out/lp.onnx --text-file held-out.txt"},
	{Name: "compare-backends", Usage: "MODEL [flags]", Run: runCompareBackends,
		Summary: "compare the Go backend with onnxruntime on one model",
		Detail:  "runs the model in the native Go backend and in onnxruntime on the same inputs and prints the error of every output",
		Example: "compare-backends model.onnx --random-inputs"},
	{Name: "validate", Usage: "CONVERTED [flags]", Run: runValidate,
		Summary: "check each converted op: its ONNX body vs its Go kernel",
		Detail:  "the op's ONNX function body (run by onnxruntime, or interpreted by --backend native) against the Go kernel, on the op's captured inputs",
		Example: "validate out/lp.onnx --random-inputs --seq-len 256"},
	{Name: "run", Usage: "MODEL [flags]", Run: runRun,
		Summary: "run a model on files, texts or random inputs; save outputs",
		Detail:  "inputs from .npy/.pb files, texts or seeded random inputs; prints each output's statistics and saves them with --out-dir",
		Example: "run model.onnx --text \"a short text\" --out-dir out/run"},
	{Name: "embed", Usage: "MODEL (--jsonl F | --docs DIR | --text T) -o OUT [flags]", Run: runEmbed,
		Summary: "embed texts or documents: one vector each, long ones too",
		Detail:  "with the model's own pooling; long texts truncated, chunked or read whole; a folder output is written in parts as it goes, resumable and shardable",
		Example: "embed model.onnx --jsonl docs.jsonl -o out/vectors/"},
	{Name: "embed-merge", Usage: "DIR... [flags]", Run: runEmbedMerge,
		Summary: "verify and merge the part folders of sharded embed runs",
		Detail:  "the manifests agree, every id appears once, every part's SHA-256 matches; merged into one .npy, .jsonl or folder",
		Example: "embed-merge out/shard0/ out/shard1/ -o out/all.npy"},
	{Name: "evaluate", Usage: "ORIGINAL [NAME=MODEL ...] (--jsonl F | --docs D) [flags]", Run: runEvaluate,
		Summary: "long-document retrieval test of models and reading modes",
		Detail:  "passages taken out of long documents, by position bucket, retrieved by the original model truncated and chunked (and whole, when its limit is past 512 tokens) and by other models; MRR, recall@1, bootstrap intervals, time and memory",
		Example: "evaluate model.onnx lp=out/lp.onnx --jsonl docs.jsonl"},
	{Name: "bench", Usage: "MODEL [flags]", Run: runBench,
		Summary: "time and measure the memory of each form over lengths",
		Detail:  "the original and its conversions (and any baseline models) at each length, each run in its own process: median time, peak memory, and the ratios to the original",
		Example: "bench model.onnx --lengths 2048,8192 --variants original,local-pooled"},
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
