package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/linearize/linearize/cmd/internal/benchrun"
	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/cmd/internal/cliutil"
	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/internal/fsutil"
	"github.com/linearize/linearize/onnx"
)

// benchSizes are bench's flags that size the variants. Their defaults
// are the conversions' own, and only the flags given are passed on, so
// each variant is what the conversion command of its name writes by
// default.
type benchSizes struct {
	features, k, block, segments, landmarks int
}

func (s *benchSizes) register(fs *flag.FlagSet) {
	fs.IntVar(&s.features, "features", convert.DefaultPerformerFeatures, "Performer random features M (convert performer's default)"+atMost(maxSizeFlag))
	fs.IntVar(&s.k, "k", benchrun.DefaultLinformerK, "Linformer projected length k (convert linformer's default)"+atMost(maxSizeFlag))
	fs.IntVar(&s.block, "block", 64, "local+pooled block length b (convert local-pooled's default)"+atMost(maxSizeFlag))
	fs.IntVar(&s.segments, "segments", 64, "local+pooled segments k (convert local-pooled's default)"+atMost(maxSizeFlag))
	fs.IntVar(&s.landmarks, "landmarks", convert.DefaultLaraLandmarks, "LARA landmarks C (one sample each), for the lara variant (convert lara's default)"+atMost(maxSizeFlag))
}

// options returns the sizes of the flags given (0 for the others: the
// conversion's default).
func (s *benchSizes) options(fs *flag.FlagSet, o *benchrun.VariantOptions) error {
	if s.features <= 0 || s.k <= 0 || s.block <= 0 || s.segments <= 0 || s.landmarks <= 0 {
		return cli.UsageError("--features, --k, --block, --segments and --landmarks must be positive")
	}
	if err := checkCounts(count{"features", s.features, maxSizeFlag}, count{"k", s.k, maxSizeFlag}, count{"block", s.block, maxSizeFlag},
		count{"segments", s.segments, maxSizeFlag}, count{"landmarks", s.landmarks, maxSizeFlag}); err != nil {
		return err
	}
	to := map[string]*int{"features": &o.Features, "k": &o.K, "block": &o.Block, "segments": &o.Segments, "landmarks": &o.Landmarks}
	from := map[string]int{"features": s.features, "k": s.k, "block": s.block, "segments": s.segments, "landmarks": s.landmarks}
	fs.Visit(func(fl *flag.Flag) {
		if p, ok := to[fl.Name]; ok {
			*p = from[fl.Name]
		}
	})
	return nil
}

// benchForms parses --variants.
func benchForms(list string) ([]convert.Form, error) {
	var forms []convert.Form
	for _, v := range strings.Split(list, ",") {
		f := convert.Form(strings.TrimSpace(v))
		switch f {
		case convert.Original, convert.Windowed, convert.Performer, convert.Linformer, convert.LocalPooled, convert.Hedgehog, convert.Lara:
		default:
			return nil, cli.UsageError("--variants: unknown variant %q (want original, window, performer, linformer, local-pooled, hedgehog, lara)", v)
		}
		forms = append(forms, f)
	}
	return forms, nil
}

func runBench(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	variants := fs.String("variants", "original,performer,linformer,local-pooled", "comma-separated forms to run (also: window, hedgehog, lara; window converts only the sliding-window blocks, which every other form converts too); each is what the conversion command of that name writes by default, sized by the flags below when given")
	lengths := fs.String("lengths", "512,1024,2048,4096,8192,16384", "comma-separated sequence lengths (batch 1), each"+atMost(maxBenchLength))
	var sizes benchSizes
	sizes.register(fs)
	threads := fs.Int("threads", cli.BenchThreads, "onnxruntime intra-op threads per run (fixed, not the backend default, so timings compare across runs and machines)")
	repeat := fs.Int("repeat", 3, "timed runs per (variant, length), each in its own process (hence fewer than bench-backends' 5); the median is reported"+atMost(maxRepeat))
	seed := fs.Uint64("seed", cli.DefaultSeed, "seed of the Performer features, Linformer projections and LARA noise")
	asJSON := fs.Bool("json", false, "print the results as JSON instead of the table")
	jsonOut := fs.String("json-out", "", "write the results as JSON to `FILE`")
	plotOut := fs.String("plot", "", "write a PNG plot of time and memory against length to `FILE`")
	var baselineArgs cli.MultiFlag
	fs.Var(&baselineArgs, "baseline", "also time the model FILE, reported as NAME (`NAME=FILE`; same inputs as MODEL, e.g. onnxruntime's optimized form; scripts/bench-baselines.sh writes them) and report every run against it; repeatable")
	costWeights := fs.String("cost-weights", "default", costWeightsHelp)
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
	if err := sizes.options(fs, &bo); err != nil {
		return err
	}
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
		Weights: weights, Fit: *fit, Progress: os.Stderr})
	if errors.Is(err, benchrun.ErrBadBaseline) {
		return cli.BadInput(fmt.Errorf("--baseline: %w", err))
	}
	if errors.Is(err, convert.ErrInvalidOption) {
		return optionError(err, map[string]string{"Features": "features", "K": "k", "MaxLen": "lengths", "Block": "block", "Segments": "segments", "Landmarks": "landmarks"})
	}
	if errors.Is(err, convert.ErrTableTooLarge) { // the model does not fit --lengths
		return cli.BadInput(fmt.Errorf("--lengths: %w", err))
	}
	if err != nil {
		return cli.RuntimeFailure(err)
	}
	return writeBench(stdout, res, *asJSON, *jsonOut, *plotOut)
}

// writeBench prints the table (or the JSON with --json) and writes the
// files asked for.
func writeBench(stdout io.Writer, res *benchrun.Result, asJSON bool, jsonOut, plotOut string) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return cli.RuntimeFailure(err)
	}
	wrote := stdout // "wrote FILE" lines: after the table, or on stderr beside --json
	if asJSON {
		fmt.Fprintf(stdout, "%s\n", b)
		wrote = os.Stderr
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
