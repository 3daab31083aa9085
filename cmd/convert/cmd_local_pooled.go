package main

import (
	"flag"
	"io"

	"github.com/linearize/linearize/convert"
)

func init() {
	register(&command{
		name:     "local-pooled",
		rewrites: true,
		summary:  "rewrite every convertible attention block into LocalPooledAttention: exact attention to the query's block and both neighbours and to sink tokens, plus one pooled key per segment of the rest; no parameters, no length limit",
		usage:    "MODEL -o OUT [--block B] [--segments K] [--sinks first,last|first|last|none] [--layers LIST] [--max-positions N] [--json]",
		run:      runLocalPooled,
	})
}

func runLocalPooled(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("local-pooled", flag.ContinueOnError)
	var f rewriteFlags
	var o convert.LocalPooledOptions
	fs.IntVar(&o.Block, "block", 64, "local block length b: each query sees its block and both neighbours exactly")
	fs.IntVar(&o.Segments, "segments", 64, "pooled segments k standing for the rest of the sequence")
	fs.StringVar(&o.Sinks, "sinks", "first,last", "tokens every query sees exactly: first,last, first, last or none")
	m, in, layers, err := loadForRewrite("local-pooled", fs, &f, args, stdout)
	if err != nil {
		return err
	}
	if o.Block == 0 {
		return usageError("--block must be positive (for no local part use `convert linformer --init pool`)")
	}
	o.Layers, o.Positions = layers, f.positions()
	out, rep, err := convert.ToLocalPooled(m, o)
	if err != nil {
		return badInput(err)
	}
	return finishRewrite(stdout, &f, in, out, rep)
}
