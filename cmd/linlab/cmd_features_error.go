package main

import (
	"flag"
	"io"
	"runtime"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/cmd/internal/cliutil"
	"github.com/linearize/linearize/cmd/internal/featsweep"
	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/features"
	"github.com/linearize/linearize/ops"
)

func runFeaturesError(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("features-error", flag.ContinueOnError)
	d := fs.Int("d", 64, "head width D")
	n := fs.Int("seq-len", 256, "sequence length n of the synthetic queries, keys and values")
	featList := fs.String("features", "64,256,1024,4096", "comma-separated feature counts M (a sweep, where convert performer takes one M)")
	seeds := fs.Int("seeds", 5, "trials per cell (fresh inputs and ω each)")
	sigma := fs.Float64("qk-sigma", 0.5, "standard deviation `σ` of the query and key entries (logit std ≈ σ²)")
	kernel := fs.String("kernel", "positive", "Performer kernel: positive or trig")
	kinds := fs.String("omega", "orthogonal,iid", "comma-separated ω kinds: orthogonal, iid (a sweep, where convert performer takes one)")
	norms := fs.String("norms", "chi,sqrt-d,qmc", "comma-separated row norms: chi, sqrt-d, qmc (a sweep, where convert performer takes one)")
	seed := fs.Uint64("seed", cli.DefaultSeed, "base seed (trial t uses seed+t)")
	threads := fs.Int("threads", 0, "goroutines for the Performer kernel (0: one per CPU; the results do not depend on it)")
	quiet := fs.Bool("q", false, "no progress lines on stderr")
	pos, err := cli.ParseFlags(fs, args, stdout)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return cli.UsageError("unexpected argument %q", pos[0])
	}
	ms, err := cli.Ints("features", *featList, cliutil.IntList{Min: 1, Max: convert.MaxFeatures})
	if err != nil {
		return err
	}
	cfg := featsweep.Config{
		D: *d, N: *n, Features: ms, Seeds: *seeds, Sigma: *sigma, Kernel: ops.PerformerKernel(*kernel),
		Kinds: cli.TypedList[features.Kind](*kinds), Norms: cli.TypedList[features.Norms](*norms), Seed: *seed, Threads: *threads,
	}
	if *d < 1 || *n < 1 || *seeds < 1 || *threads < 0 || !(*sigma > 0) {
		return cli.UsageError("--d, --seq-len and --seeds must be ≥ 1, --threads ≥ 0 and --qk-sigma > 0")
	}
	if cfg.Threads == 0 {
		cfg.Threads = runtime.GOMAXPROCS(0)
	}
	if *kernel != "positive" && *kernel != "trig" {
		return cli.UsageError("--kernel %q: want positive or trig", *kernel)
	}
	for _, k := range cfg.Kinds {
		if k != features.Orthogonal && k != features.IID {
			return cli.UsageError("--omega %q: want orthogonal or iid", k)
		}
	}
	for _, k := range cfg.Norms {
		if k != features.NormsChi && k != features.NormsSqrtD && k != features.NormsQMC {
			return cli.UsageError("--norms %q: want chi, sqrt-d or qmc", k)
		}
	}
	if !*quiet {
		cfg.Progress = stderr
	}
	cells, err := featsweep.Run(cfg)
	if err != nil {
		// every field of cfg comes from a flag, checked above but for
		// the sweep's size limits
		return cli.UsageError("%v", err)
	}
	return featsweep.WriteTable(stdout, cfg, cells)
}
