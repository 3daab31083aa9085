package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strings"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/internal/benchrun"
	"github.com/linearize/linearize/internal/cliutil"
	"github.com/linearize/linearize/onnx"
)

func init() {
	// A benchmark child (this binary re-executed) is dispatched by main
	// before any command: see benchChild in main.go.
	register(&command{
		name:    "bench",
		summary: "time and measure peak memory of the original, Performer, Linformer and local+pooled forms of a model over sequence lengths, beside any baseline models",
		usage:   "MODEL [--variants original,performer,linformer,local-pooled[,lara]] [--baseline NAME=FILE ...] [--lengths 512,1024,...] [--features M] [--k K] [--block B] [--segments K] [--landmarks C] [--threads T] [--repeat R] [--pass-weight W] [--json F] [--plot F.png]",
		run:     runBench,
	})
}

func runBench(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	variants := fs.String("variants", "original,performer,linformer,local-pooled", "comma-separated forms to run (also: lara)")
	lengths := fs.String("lengths", "512,1024,2048,4096,8192,16384", "comma-separated sequence lengths (batch 1)")
	features := fs.Int("features", 256, "Performer random features M")
	k := fs.Int("k", 256, "Linformer projected length k")
	block := fs.Int("block", 64, "local+pooled block length b")
	segments := fs.Int("segments", 64, "local+pooled segments k")
	landmarks := fs.Int("landmarks", convert.DefaultLaraLandmarks, "LARA landmarks C (one sample each), for the lara variant")
	threads := fs.Int("threads", 2, "onnxruntime intra-op threads per run")
	repeat := fs.Int("repeat", 3, "timed runs per (variant, length), each in its own process; the median is reported")
	seed := fs.Uint64("seed", 1, "seed of the Performer features and Linformer projections")
	jsonOut := fs.String("json", "", "write the results as JSON to this file")
	plotOut := fs.String("plot", "", "write a PNG plot of time and memory against length to this file")
	var baselineArgs multiFlag
	fs.Var(&baselineArgs, "baseline", "NAME=FILE: also time this model (same inputs as MODEL, e.g. onnxruntime's optimized form; scripts/bench-baselines.sh writes them) and report every run against it; repeatable")
	passWeight := fs.Float64("pass-weight", convert.DefaultPassWeight, "cost of one element of the attention cores' elementwise passes, in MACs, in the predictions (0: MACs only)")
	pos, err := parseFlags(fs, args, stdout)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError("want exactly one MODEL argument, got %d", len(pos))
	}
	for _, o := range []string{*jsonOut, *plotOut} {
		if o != "" {
			if err := checkOutput(pos[0], o, false); err != nil {
				return err
			}
		}
	}
	ls, err := ints("lengths", *lengths, cliutil.IntList{Min: 1})
	if err != nil {
		return err
	}
	var forms []convert.Form
	for _, v := range strings.Split(*variants, ",") {
		f := convert.Form(strings.TrimSpace(v))
		if f != convert.Original && f != convert.Performer && f != convert.Linformer && f != convert.LocalPooled && f != convert.Lara {
			return usageError("--variants: unknown variant %q (want original, performer, linformer, local-pooled, lara)", v)
		}
		forms = append(forms, f)
	}
	if *features <= 0 || *k <= 0 || *block <= 0 || *segments <= 0 || *landmarks <= 0 || *threads <= 0 || *repeat <= 0 {
		return usageError("--features, --k, --block, --segments, --landmarks, --threads and --repeat must be positive")
	}
	if !(*passWeight >= 0) || math.IsInf(*passWeight, 0) {
		return usageError("--pass-weight %v: want a finite number ≥ 0", *passWeight)
	}
	var baselines []convert.Baseline
	for _, a := range baselineArgs {
		b, err := convert.ParseBaseline(a)
		if err != nil {
			return usageError("--baseline: %v", err)
		}
		baselines = append(baselines, b)
	}
	m, err := onnx.Load(pos[0])
	if err != nil {
		return badInput(err)
	}
	res, err := benchrun.Run(benchrun.Options{
		ModelPath: pos[0],
		Model:     m,
		Bench: convert.BenchOptions{Variants: forms, Lengths: ls, Features: *features, K: *k, Block: *block, Segments: *segments, Seed: *seed,
			Landmarks: *landmarks, Baselines: baselines},
		Threads:    *threads,
		Repeat:     *repeat,
		PassWeight: *passWeight,
		Progress:   os.Stderr,
	})
	if errors.Is(err, convert.ErrBadBaseline) {
		return badInput(fmt.Errorf("--baseline: %w", err))
	}
	if err != nil {
		return runtimeFailure(err)
	}
	benchrun.WriteTable(stdout, res)
	if *jsonOut != "" {
		b, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return runtimeFailure(err)
		}
		if err := onnx.WriteFileAtomic(*jsonOut, append(b, '\n')); err != nil {
			return runtimeFailure(err)
		}
		fmt.Fprintf(stdout, "wrote %s\n", *jsonOut)
	}
	if *plotOut != "" {
		if err := benchrun.Plot(res, *plotOut); err != nil {
			return runtimeFailure(err)
		}
		fmt.Fprintf(stdout, "wrote %s\n", *plotOut)
	}
	return nil
}
