package main

import (
	"flag"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// The command of the lara conversion (convert.Conversions).
var _ = conversionCommand(&cli.Command{Name: "lara", Usage: "MODEL -o OUT [flags]",
	Summary: "rewrite attention into LARA randomized attention",
	Detail:  "LaraAttention: multiple importance sampling from Gaussian proposals centred at run-time segment landmarks of Q and K, the proposals' noise frozen per layer from --seed",
	Example: "lara model.onnx -o out/lara.onnx"}, "seed of the proposals' noise (with the layer index)", laraFlags)

// laraFlags adds lara's flags to fs and returns its conversion.
func laraFlags(fs *flag.FlagSet) rewrite {
	var o convert.LaraOptions
	o.Landmarks, o.Samples = convert.DefaultLaraLandmarks, 1
	fs.Var(&intFlag{&o.Landmarks, 1}, "landmarks", "landmarks `C`: segment means of Q and K at run time, one Gaussian proposal centred at each")
	fs.Var(&intFlag{&o.Samples, 1}, "samples", "frozen noise samples `S` per landmark (C·S samples per head)")
	fs.Float64Var(&o.Sigma, "sigma", 1, "standard deviation `σ` of the proposals' noise (positive)")
	return func(m *onnxpb.ModelProto, r *rewriteRun) (*onnxpb.ModelProto, *convert.Report, error) {
		if !(o.Sigma > 0) { // 0 would mean the default to convert.ToLARA
			return nil, nil, cli.UsageError("--sigma %g must be positive", o.Sigma)
		}
		o.Seed, o.Layers, o.Positions = r.seed, r.layers, r.positions
		out, rep, err := convert.ToLARA(m, o)
		return out, rep, optionError(err, flagsOf("Landmarks", "landmarks", "Samples", "samples", "Sigma", "sigma"))
	}
}
