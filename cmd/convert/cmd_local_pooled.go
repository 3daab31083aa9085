package main

import (
	"flag"
	"io"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/convert"
)

// The command of the local-pooled conversion (convert.Conversions).
var _ = conversionCommand(&cli.Command{Name: "local-pooled", Usage: "MODEL -o OUT [flags]", Run: runLocalPooled, Rewrites: true,
	Summary: "rewrite attention into exact local + pooled far attention",
	Detail:  "LocalPooledAttention: exact attention to the query's block, both neighbours and sink tokens, plus one pooled key per segment of the rest; no parameters, no length limit",
	Example: "local-pooled model.onnx -o out/lp.onnx"})

func runLocalPooled(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("local-pooled", flag.ContinueOnError)
	var f rewriteFlags
	var o convert.LocalPooledOptions
	o.Block, o.Segments, o.Sinks = convert.DefaultBlock, convert.DefaultSegments, convert.DefaultSinks
	fs.Var(&intFlag{&o.Block, 1}, "block", "local block length `B`: each query sees its block and both neighbours exactly (for no local part use convert linformer --init pool)")
	fs.Var(&intFlag{&o.Segments, 1}, "segments", "pooled segments `K` standing for the rest of the sequence")
	cli.StringLikeVar(fs, &o.Sinks, "sinks", "tokens every query sees exactly: first,last, first, last or none")
	m, in, layers, err := loadForRewrite(fs, &f, args, stdout)
	if err != nil {
		return err
	}
	o.Layers, o.Positions = layers, f.positions()
	out, rep, err := convert.ToLocalPooled(m, o)
	if err != nil {
		return optionError(err, flagsOf("Block", "block", "Segments", "segments", "Sinks", "sinks"))
	}
	return finishRewrite(stdout, stderr, &f, in, out, rep)
}
