package main

import (
	"flag"
	"io"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/convert"
)

// The command of the window conversion (convert.Conversions).
var _ = conversionCommand(&cli.Command{Name: "window", Usage: "MODEL -o OUT [flags]", Run: runWindow, Rewrites: true,
	Summary: "rewrite sliding-window blocks exactly (WindowAttention)",
	Detail:  "a block whose mask confines each query to a band of keys around it (ModernBERT's local layers) becomes WindowAttention: the same output at linear cost; global blocks are left as they are (every other conversion also does this)",
	Example: "window modernbert.onnx -o out/window.onnx"})

func runWindow(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("window", flag.ContinueOnError)
	var f rewriteFlags
	m, in, layers, err := loadForRewrite(fs, &f, args, stdout)
	if err != nil {
		return err
	}
	out, rep, err := convert.ToWindow(m, convert.WindowOptions{Layers: layers, Positions: f.positions()})
	if err != nil {
		return optionError(err, nil)
	}
	return finishRewrite(stdout, stderr, &f, in, out, rep)
}
