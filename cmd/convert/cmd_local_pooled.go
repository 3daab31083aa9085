package main

import (
	"flag"
	"io"

	"github.com/linearize/linearize/convert"
)

func runLocalPooled(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("local-pooled", flag.ContinueOnError)
	var f rewriteFlags
	var o convert.LocalPooledOptions
	o.Block, o.Segments = 64, 64
	fs.Var(&intFlag{&o.Block, 1}, "block", "local block length `B`: each query sees its block and both neighbours exactly (for no local part use convert linformer --init pool)")
	fs.Var(&intFlag{&o.Segments, 1}, "segments", "pooled segments `K` standing for the rest of the sequence")
	fs.StringVar(&o.Sinks, "sinks", "first,last", "tokens every query sees exactly: first,last, first, last or none")
	m, in, layers, err := loadForRewrite(fs, &f, args, stdout)
	if err != nil {
		return err
	}
	o.Layers, o.Positions = layers, f.positions()
	out, rep, err := convert.ToLocalPooled(m, o)
	if err != nil {
		return optionError(err, flagsOf("Block", "block", "Segments", "segments", "Sinks", "sinks"))
	}
	return finishRewrite(stdout, &f, in, out, rep)
}
