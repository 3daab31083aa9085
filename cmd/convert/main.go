// Command convert turns BERT-style ONNX transformers into linear-attention
// models and runs, compares and benchmarks them. Each subcommand lives in
// its own file (cmd_*.go); the table of them below, with the
// conversions' commands (each declared in its file, listed in the order
// of convert.Conversions), is registered with cmd/internal/cli, which
// dispatches the command line, parses flags, prints usage and gives every
// error its exit code (the package comment there lists them); the work is
// done by the library packages (convert, infer, ops, models). The
// development instruments (report tables, backend timings, the cost fit,
// the model builder) are the lab's binary, cmd/linlab.
package main

import (
	"errors"
	"os"

	"github.com/linearize/linearize/cmd/internal/benchrun"
	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/convert"
)

// commands are convert's commands, one file each (cmd_*.go: flags and the
// library call), the conversions' (conversionCommands) after inspect in
// the order of convert.Conversions; a benchmark child (this binary
// re-executed by bench) is dispatched by main before any of them
// (benchChild).
var commands = []*cli.Command{
	{Name: "inspect", Usage: "MODEL [flags]", Run: runInspect, Rewrites: true,
		Summary: "describe a model: inputs, ops, tokenizer, attention blocks",
		Detail:  "IR version, opsets, producer, inputs and outputs, op histogram, initializers; --attention lists the attention blocks found and --cost prices each conversion",
		Example: "inspect model.onnx --cost --lengths 512,8192"},
	{Name: "long", Usage: "MODEL -o OUT [--max-length N] [flags]", Run: runLong, Rewrites: true,
		Summary: "let a 512-position encoder read long inputs by windows",
		Detail:  "positions restart every window, attention is exact within each (with --far, a pooled far field): the original up to one window",
		Example: "long model.onnx -o out/long.onnx --max-length 8192"},
	{Name: "extend-positions", Usage: "MODEL -o OUT --max-positions N [flags]", Run: runExtendPositions, Rewrites: true,
		Summary: "let a model read past the length it was trained for",
		Detail:  "an absolute position table grows by copy or interpolation; a rotary encoder (ModernBERT, GTE, Nomic) gets its global layers' frequencies scaled by NTK (fixed or dynamic), linear interpolation or YaRN, and metadata that embed reads as its new limit",
		Example: "extend-positions model.onnx -o out/ext.onnx --max-positions 32768"},
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
		Detail:  "the manifests agree, every id appears once, every part's SHA-256 matches; merged into one .npy, .jsonl, .parquet or folder",
		Example: "embed-merge out/shard0/ out/shard1/ -o out/all.npy"},
	{Name: "evaluate", Usage: "ORIGINAL [NAME=MODEL ...] (--jsonl F | --docs D) [flags]", Run: runEvaluate,
		Summary: "long-document retrieval test of models and reading modes",
		Detail:  "passages taken out of documents, by position bucket; MRR, recall@1, intervals, time, memory",
		Example: "evaluate model.onnx lp=out/lp.onnx --jsonl docs.jsonl"},
	{Name: "bench", Usage: "MODEL [flags]", Run: runBench,
		Summary: "time and measure the memory of each form over lengths",
		Detail:  "the original and its conversions (and any baseline models) at each length, each run in its own process: median time, peak memory, and the ratios to the original",
		Example: "bench model.onnx --lengths 2048,8192 --variants original,local-pooled"},
}

func init() {
	cli.Name = "convert"
	cli.Register(withConversions(commands)...)
}

// withConversions returns cmds with the conversions' commands after the
// first, in the order of convert.Conversions.
func withConversions(cmds []*cli.Command) []*cli.Command {
	out := append([]*cli.Command(nil), cmds[0])
	for _, c := range convert.Conversions() {
		cmd := conversionCommands[c.Name]
		if cmd == nil {
			panic("convert: the conversion " + c.Name + " has no command (cmd/convert/cmd_*.go: conversionCommand)")
		}
		out = append(out, cmd)
	}
	if len(out)-1 != len(conversionCommands) {
		panic("convert: a conversion command names no conversion of convert.Conversions")
	}
	return append(out, cmds[1:]...)
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
