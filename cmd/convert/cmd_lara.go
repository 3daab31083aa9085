package main

import (
	"flag"
	"io"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/convert"
)

// The command of the lara conversion (convert.Conversions).
var _ = conversionCommand(&cli.Command{Name: "lara", Usage: "MODEL -o OUT [flags]", Run: runLara, Rewrites: true,
	Summary: "rewrite attention into LARA randomized attention",
	Detail:  "LaraAttention: multiple importance sampling from Gaussian proposals centred at run-time segment landmarks of Q and K, the proposals' noise frozen per layer from --seed",
	Example: "lara model.onnx -o out/lara.onnx"})

func runLara(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("lara", flag.ContinueOnError)
	f := rewriteFlags{seedUsage: "seed of the proposals' noise (with the layer index)"}
	var o convert.LaraOptions
	o.Landmarks, o.Samples = convert.DefaultLaraLandmarks, 1
	fs.Var(&intFlag{&o.Landmarks, 1}, "landmarks", "landmarks `C`: segment means of Q and K at run time, one Gaussian proposal centred at each")
	fs.Var(&intFlag{&o.Samples, 1}, "samples", "frozen noise samples `S` per landmark (C·S samples per head)")
	fs.Float64Var(&o.Sigma, "sigma", 1, "standard deviation `σ` of the proposals' noise (positive)")
	m, in, layers, err := loadForRewrite(fs, &f, args, stdout)
	if err != nil {
		return err
	}
	if !(o.Sigma > 0) { // 0 would mean the default to convert.ToLARA
		return cli.UsageError("--sigma %g must be positive", o.Sigma)
	}
	o.Seed, o.Layers, o.Positions = f.seed, layers, f.positions()
	out, rep, err := convert.ToLARA(m, o)
	if err != nil {
		return optionError(err, flagsOf("Landmarks", "landmarks", "Samples", "samples", "Sigma", "sigma"))
	}
	return finishRewrite(stdout, stderr, &f, in, out, rep)
}
