package main

import (
	"flag"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// The command of the window conversion (convert.Conversions).
var _ = conversionCommand(&cli.Command{Name: "window", Usage: "MODEL -o OUT [flags]",
	Summary: "rewrite sliding-window blocks exactly (WindowAttention)",
	Detail:  "a block whose mask confines each query to a band of keys around it (ModernBERT's local layers) becomes WindowAttention: the same output at linear cost; global blocks are left as they are (every other conversion also does this)",
	Example: "window modernbert.onnx -o out/window.onnx"}, "", windowFlags)

// windowFlags returns window's conversion: it has only the shared flags.
func windowFlags(*flag.FlagSet) rewrite {
	return func(m *onnxpb.ModelProto, r *rewriteRun) (*onnxpb.ModelProto, *convert.Report, error) {
		out, rep, err := convert.ToWindow(m, convert.WindowOptions{Layers: r.layers, Positions: r.positions})
		return out, rep, optionError(err, nil)
	}
}
