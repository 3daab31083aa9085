package main

import (
	"flag"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// The command of the linformer conversion (convert.Conversions).
var _ = conversionCommand(&cli.Command{Name: "linformer", Usage: "MODEL -o OUT [flags]",
	Summary: "rewrite attention into Linformer (keys, values to length k)",
	Detail:  "keys and values pooled or projected to length k; runs in stock onnxruntime",
	Example: "linformer model.onnx -o out/linformer.onnx --k 256"}, "seed of E and F with --init gaussian (with the layer index)", linformerFlags)

// linformerFlags adds linformer's flags to fs and returns its
// conversion.
func linformerFlags(fs *flag.FlagSet) rewrite {
	var o convert.LinformerOptions
	fs.StringVar(&o.Init, "init", convert.LinformerPool, "pool: E = F = means over k segments of each input's valid tokens, at run time (no length limit); gaussian: frozen random E, F ~ N(0, 1/k)")
	o.K = convert.DefaultLinformerK
	fs.Var(&intFlag{&o.K, 1}, "k", "projected length `K` (segments with --init pool)")
	cli.StringLikeVar(fs, &o.Sinks, "sinks", "with --init pool: tokens kept exact (first,last, first, last or none; default first,last)")
	fs.IntVar(&o.MaxLen, "max-len", 0, "with --init gaussian: longest sequence `N` the projections accept (0: 512, or --max-positions)")
	cli.TypedVar(fs, &o.Share, "share", "", "with --init gaussian: projection `SHARING`: none, headwise (default), kv or layerwise")
	return func(m *onnxpb.ModelProto, r *rewriteRun) (*onnxpb.ModelProto, *convert.Report, error) {
		o.Seed, o.Layers, o.Positions = r.seed, r.layers, r.positions
		out, rep, err := convert.ToLinformer(m, o)
		return out, rep, optionError(err, flagsOf("K", "k", "Init", "init", "MaxLen", "max-len", "Share", "share", "Sinks", "sinks"))
	}
}
