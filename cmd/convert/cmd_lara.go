package main

import (
	"flag"
	"io"

	"github.com/linearize/linearize/convert"
)

func init() {
	register(&command{
		name:     "lara",
		rewrites: true,
		summary:  "rewrite every convertible attention block into LaraAttention: LARA randomized attention (multiple importance sampling from Gaussian proposals centred at run-time segment landmarks of Q and K), the proposals' noise frozen per layer from --seed",
		usage:    "MODEL -o OUT [--landmarks C] [--samples S] [--sigma σ] [--seed N] [--layers LIST] [--max-positions N] [--json]",
		run:      runLara,
	})
}

func runLara(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("lara", flag.ContinueOnError)
	var f rewriteFlags
	var o convert.LaraOptions
	fs.IntVar(&o.Landmarks, "landmarks", convert.DefaultLaraLandmarks, "landmarks C: segment means of Q and K at run time, one Gaussian proposal centred at each")
	fs.IntVar(&o.Samples, "samples", 1, "frozen noise samples per landmark (C·S samples per head)")
	fs.Float64Var(&o.Sigma, "sigma", 1, "standard deviation of the proposals' noise")
	m, in, layers, err := loadForRewrite("lara", fs, &f, args, stdout)
	if err != nil {
		return err
	}
	if o.Landmarks < 1 || o.Samples < 1 || !(o.Sigma > 0) {
		return usageError("--landmarks and --samples must be positive, --sigma positive")
	}
	o.Seed, o.Layers, o.Positions = f.seed, layers, f.positions()
	out, rep, err := convert.ToLARA(m, o)
	if err != nil {
		return badInput(err)
	}
	return finishRewrite(stdout, &f, in, out, rep)
}
