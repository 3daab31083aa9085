package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/linearize/linearize/features"
	"github.com/linearize/linearize/internal/cliutil"
)

func init() {
	register(&command{
		name:    "features-error",
		summary: "measure the Performer estimator's error vs exact softmax attention as the feature count M grows",
		usage:   "[--d 64] [--n 256] [--features 64,256,1024,4096] [--seeds 5] [--sigma 0.5] [--kernel positive|trig] [--omega orthogonal,iid] [--norms chi,sqrt-d,qmc] [--seed 0] [--threads T]",
		run:     runFeaturesError,
	})
}

func runFeaturesError(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("features-error", flag.ContinueOnError)
	d := fs.Int("d", 64, "head width D")
	n := fs.Int("n", 256, "sequence length")
	featList := fs.String("features", "64,256,1024,4096", "comma-separated feature counts M")
	seeds := fs.Int("seeds", 5, "trials per cell (fresh inputs and ω each)")
	sigma := fs.Float64("sigma", 0.5, "std of query and key entries (logit std ≈ sigma²)")
	kernel := fs.String("kernel", "positive", "Performer kernel: positive or trig")
	kinds := fs.String("omega", "orthogonal,iid", "comma-separated ω kinds: orthogonal, iid")
	norms := fs.String("norms", "chi,sqrt-d,qmc", "comma-separated row norms: chi, sqrt-d, qmc")
	seed := fs.Uint64("seed", 0, "base seed (trial t uses seed+t)")
	threads := fs.Int("threads", 1, "goroutines for the Performer kernel")
	quiet := fs.Bool("q", false, "no progress lines on stderr")
	pos, err := parseFlags(fs, args, stdout)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError("unexpected argument %q", pos[0])
	}
	ms, err := ints("features", *featList, cliutil.IntList{Min: 1})
	if err != nil {
		return err
	}
	cfg := features.SweepConfig{
		D: *d, N: *n, Features: ms, Seeds: *seeds, Sigma: *sigma, Kernel: *kernel,
		Kinds: typedList[features.Kind](*kinds), Norms: typedList[features.Norms](*norms), Seed: *seed, Threads: *threads,
	}
	if *d < 1 || *n < 1 || *seeds < 1 || !(*sigma > 0) {
		return badInput(fmt.Errorf("--d, --n, --seeds must be ≥ 1 and --sigma > 0"))
	}
	if *kernel != "positive" && *kernel != "trig" {
		return badInput(fmt.Errorf("--kernel %q: want positive or trig", *kernel))
	}
	for _, k := range cfg.Kinds {
		if k != features.Orthogonal && k != features.IID {
			return badInput(fmt.Errorf("--omega %q: want orthogonal or iid", k))
		}
	}
	for _, k := range cfg.Norms {
		if k != features.NormsChi && k != features.NormsSqrtD && k != features.NormsQMC {
			return badInput(fmt.Errorf("--norms %q: want chi, sqrt-d or qmc", k))
		}
	}
	if !*quiet {
		cfg.Progress = os.Stderr
	}
	cells, err := features.ErrorSweep(cfg)
	if err != nil {
		return badInput(err)
	}
	return features.WriteSweepTable(stdout, cfg, cells)
}
