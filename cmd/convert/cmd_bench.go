package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/linearize/linearize/cmd/internal/benchrun"
	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/cmd/internal/cliutil"
	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/internal/fsutil"
	"github.com/linearize/linearize/onnx"
)

// benchForms parses --variants: the original and the conversions'
// names.
func benchForms(list string) ([]convert.Form, error) {
	var forms []convert.Form
	for _, v := range strings.Split(list, ",") {
		f := convert.Form(strings.TrimSpace(v))
		if _, ok := convert.LookupConversion(string(f)); !ok && f != convert.Original {
			return nil, cli.UsageError("--variants: unknown variant %q (want %s, %s)", v, convert.Original, strings.Join(benchrun.Names(), ", "))
		}
		forms = append(forms, f)
	}
	return forms, nil
}

// defaultVariants and variantsHelp are the default and the help of
// --variants: the variants run by default, the others, and what the exact
// ones convert.
var defaultVariants, variantsHelp = variantsUsage()

func variantsUsage() (def, usage string) {
	var run, also, exact []string
	for _, f := range benchrun.DefaultVariants() {
		run = append(run, string(f))
	}
	for _, c := range convert.Conversions() {
		if !c.BenchDefault {
			also = append(also, c.Name)
		}
		if c.Exact {
			exact = append(exact, c.Name)
		}
	}
	return strings.Join(run, ","), fmt.Sprintf("comma-separated forms to run (also: %s; %s converts only the sliding-window blocks, which every other form converts too); "+
		"each is what the conversion command of that name writes by default, sized by the flags below when given", strings.Join(also, ", "), strings.Join(exact, ", "))
}

func runBench(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	variants := fs.String("variants", defaultVariants, variantsHelp)
	lengths := fs.String("lengths", "512,1024,2048,4096,8192,16384", "comma-separated sequence lengths (batch 1), each"+atMost(maxBenchLength))
	var sizes sizeFlags
	sizes.register(fs, "")
	threads := fs.Int("threads", cli.BenchThreads, "onnxruntime intra-op threads per run (fixed, not the backend default, so timings compare across runs and machines)")
	repeat := fs.Int("repeat", 3, "timed runs per (variant, length), each in its own process (hence fewer than bench-backends' 5); the median is reported"+atMost(maxRepeat))
	seed := fs.Uint64("seed", cli.DefaultSeed, "seed of the variants that sample parameters (ω, E and F, noise, initial maps)")
	asJSON := fs.Bool("json", false, "print the results as JSON instead of the table")
	jsonOut := fs.String("json-out", "", "write the results as JSON to `FILE`")
	plotOut := fs.String("plot", "", "write a PNG plot of time and memory against length to `FILE`")
	var baselineArgs cli.MultiFlag
	fs.Var(&baselineArgs, "baseline", "also time the model FILE, reported as NAME (`NAME=FILE`; same inputs as MODEL, e.g. onnxruntime's optimized form; scripts/bench-baselines.sh writes them) and report every run against it; repeatable")
	costWeights := fs.String("cost-weights", "default", costWeightsHelp)
	inputs := map[string]string{}
	fs.Var((*inputsFlag)(&inputs), "input", "feed the model input NAME, which carries no tokens, VALUE in every run (`NAME=VALUE`, a NUMBER or a .npy or .pb FILE; as jina-embeddings-v3's task_id=4; default zeros; repeatable)")
	fit := fs.Bool("fit", false, "also fit the cost model's weights to this run's time ratios and print the crossovers they predict (for --cost-weights on this machine)")
	path, err := cli.ParseModelArg(fs, args, stdout)
	if err != nil {
		return err
	}
	var outs []namedFile
	for _, o := range []namedFile{{"--json-out", *jsonOut}, {"--plot", *plotOut}} {
		if o.path != "" {
			if err := cli.CheckOutput(path, o.path, false); err != nil {
				return err
			}
			outs = append(outs, o)
		}
	}
	if err := checkNotInputs(outs, nil); err != nil {
		return err
	}
	bo := benchrun.VariantOptions{Seed: *seed}
	if bo.Lengths, err = cli.Ints("lengths", *lengths, cliutil.IntList{Min: 1}); err != nil {
		return err
	}
	if err := checkCounts(count{"lengths", slices.Max(bo.Lengths), maxBenchLength}); err != nil {
		return err
	}
	if bo.Variants, err = benchForms(*variants); err != nil {
		return err
	}
	if err := sizes.check(); err != nil {
		return err
	}
	bo.Sizes = sizes.given(fs)
	if *threads <= 0 || *repeat <= 0 {
		return cli.UsageError("--threads and --repeat must be positive")
	}
	if err := checkCounts(count{"repeat", *repeat, maxRepeat}); err != nil {
		return err
	}
	weights, err := convert.ParseWeights(*costWeights)
	if err != nil {
		return cli.UsageError("--cost-weights: %v", err)
	}
	for _, a := range baselineArgs {
		b, err := benchrun.ParseBaseline(a)
		if err != nil {
			return cli.UsageError("--baseline: %v", err)
		}
		bo.Baselines = append(bo.Baselines, b)
	}
	m, err := onnx.Load(path)
	if err != nil {
		return cli.BadInput(err)
	}
	res, err := benchrun.Run(benchrun.Options{ModelPath: path, Model: m, Bench: bo, Threads: *threads, Repeat: *repeat,
		Weights: weights, Fit: *fit, Inputs: inputs, Progress: stderr})
	if errors.Is(err, benchrun.ErrBadBaseline) {
		return cli.BadInput(fmt.Errorf("--baseline: %w", err))
	}
	if errors.Is(err, benchrun.ErrBadInput) { // the model does not fit the flags
		return cli.BadInput(err)
	}
	if errors.Is(err, convert.ErrInvalidOption) {
		return sizeOptionError(err, map[string]string{"MaxLen": "lengths"})
	}
	if errors.Is(err, convert.ErrTableTooLarge) { // the model does not fit --lengths
		return cli.BadInput(fmt.Errorf("--lengths: %w", err))
	}
	if err != nil {
		return cli.RuntimeFailure(err)
	}
	return writeBench(stdout, stderr, res, *asJSON, *jsonOut, *plotOut)
}

// writeBench prints the table (or the JSON with --json) and writes the
// files asked for.
func writeBench(stdout, stderr io.Writer, res *benchrun.Result, asJSON bool, jsonOut, plotOut string) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return cli.RuntimeFailure(err)
	}
	wrote := stdout // "wrote FILE" lines: after the table, or on stderr beside --json
	if asJSON {
		fmt.Fprintf(stdout, "%s\n", b)
		wrote = stderr
	} else {
		benchrun.WriteTable(stdout, res)
	}
	// --json-out and --plot are one set: both old or both new.
	var set []fsutil.SetFile
	if jsonOut != "" {
		set = append(set, fsutil.FileBytes(jsonOut, append(b, '\n')))
	}
	if plotOut != "" {
		png, err := benchrun.PlotPNG(res)
		if err != nil {
			return cli.RuntimeFailure(err)
		}
		set = append(set, fsutil.FileBytes(plotOut, png))
	}
	if err := fsutil.WriteSet(set...); err != nil {
		return cli.RuntimeFailure(err)
	}
	for _, f := range set {
		fmt.Fprintf(wrote, "wrote %s\n", f.Path)
	}
	return nil
}
