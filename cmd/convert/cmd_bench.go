package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/linearize/linearize/cmd/internal/benchrun"
	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/cmd/internal/cliutil"
	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/internal/fsutil"
	"github.com/linearize/linearize/onnx"
)

func runBench(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	variants := fs.String("variants", "original,performer,linformer,local-pooled", "comma-separated forms to run (also: lara)")
	lengths := fs.String("lengths", "512,1024,2048,4096,8192,16384", "comma-separated sequence lengths (batch 1)")
	features := fs.Int("features", 256, "Performer random features M")
	k := fs.Int("k", 256, "Linformer projected length k (256 = --features, so that the Performer and Linformer cores cost the same; convert linformer's default is 128)")
	block := fs.Int("block", 64, "local+pooled block length b")
	segments := fs.Int("segments", 64, "local+pooled segments k")
	landmarks := fs.Int("landmarks", convert.DefaultLaraLandmarks, "LARA landmarks C (one sample each), for the lara variant")
	threads := fs.Int("threads", cli.BenchThreads, "onnxruntime intra-op threads per run (fixed, not the backend default, so timings compare across runs and machines)")
	repeat := fs.Int("repeat", 3, "timed runs per (variant, length), each in its own process (hence fewer than bench-backends' 5); the median is reported")
	seed := fs.Uint64("seed", cli.DefaultSeed, "seed of the Performer features and Linformer projections")
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
	for _, o := range []string{*jsonOut, *plotOut} {
		if o != "" {
			if err := cli.CheckOutput(path, o, false); err != nil {
				return err
			}
		}
	}
	ls, err := cli.Ints("lengths", *lengths, cliutil.IntList{Min: 1})
	if err != nil {
		return err
	}
	var forms []convert.Form
	for _, v := range strings.Split(*variants, ",") {
		f := convert.Form(strings.TrimSpace(v))
		if f != convert.Original && f != convert.Performer && f != convert.Linformer && f != convert.LocalPooled && f != convert.Lara {
			return cli.UsageError("--variants: unknown variant %q (want original, performer, linformer, local-pooled, lara)", v)
		}
		forms = append(forms, f)
	}
	if *features <= 0 || *k <= 0 || *block <= 0 || *segments <= 0 || *landmarks <= 0 || *threads <= 0 || *repeat <= 0 {
		return cli.UsageError("--features, --k, --block, --segments, --landmarks, --threads and --repeat must be positive")
	}
	weights, err := convert.ParseWeights(*costWeights)
	if err != nil {
		return cli.UsageError("--cost-weights: %v", err)
	}
	var baselines []benchrun.Baseline
	for _, a := range baselineArgs {
		b, err := benchrun.ParseBaseline(a)
		if err != nil {
			return cli.UsageError("--baseline: %v", err)
		}
		baselines = append(baselines, b)
	}
	m, err := onnx.Load(path)
	if err != nil {
		return cli.BadInput(err)
	}
	res, err := benchrun.Run(benchrun.Options{
		ModelPath: path,
		Model:     m,
		Bench: benchrun.VariantOptions{Variants: forms, Lengths: ls, Features: *features, K: *k, Block: *block, Segments: *segments, Seed: *seed,
			Landmarks: *landmarks, Baselines: baselines},
		Threads:  *threads,
		Repeat:   *repeat,
		Weights:  weights,
		Fit:      *fit,
		Progress: os.Stderr,
	})
	if errors.Is(err, benchrun.ErrBadBaseline) {
		return cli.BadInput(fmt.Errorf("--baseline: %w", err))
	}
	if errors.Is(err, convert.ErrInvalidOption) {
		return optionError(err, map[string]string{"Features": "features", "K": "k", "MaxLen": "lengths", "Block": "block", "Segments": "segments", "Landmarks": "landmarks"})
	}
	if err != nil {
		return cli.RuntimeFailure(err)
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return cli.RuntimeFailure(err)
	}
	wrote := stdout // "wrote FILE" lines: after the table, or on stderr beside --json
	if *asJSON {
		fmt.Fprintf(stdout, "%s\n", b)
		wrote = os.Stderr
	} else {
		benchrun.WriteTable(stdout, res)
	}
	if *jsonOut != "" {
		if err := fsutil.WriteFileAtomic(*jsonOut, append(b, '\n')); err != nil {
			return cli.RuntimeFailure(err)
		}
		fmt.Fprintf(wrote, "wrote %s\n", *jsonOut)
	}
	if *plotOut != "" {
		if err := benchrun.Plot(res, *plotOut); err != nil {
			return cli.RuntimeFailure(err)
		}
		fmt.Fprintf(wrote, "wrote %s\n", *plotOut)
	}
	return nil
}
