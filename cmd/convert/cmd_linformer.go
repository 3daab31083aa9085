package main

import (
	"flag"
	"io"

	"github.com/linearize/linearize/convert"
)

func init() {
	register(&command{
		name:    "linformer",
		summary: "rewrite every convertible attention block into a LinformerAttention op (keys and values projected to length k) that runs in stock onnxruntime",
		usage:   "MODEL -o OUT [--k K] [--max-len N] [--share none|headwise|kv|layerwise] [--seed S] [--layers LIST] [--max-positions N] [--json]",
		run:     runLinformer,
	})
}

func runLinformer(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("linformer", flag.ContinueOnError)
	var f rewriteFlags
	var o convert.LinformerOptions
	fs.IntVar(&o.K, "k", 128, "projected length k")
	fs.IntVar(&o.MaxLen, "max-len", 0, "longest sequence N the projections accept (default 512, or --max-positions)")
	fs.StringVar(&o.Share, "share", "headwise", "projection sharing: none, headwise, kv or layerwise")
	m, in, layers, err := loadForRewrite("linformer", fs, &f, args, stdout)
	if err != nil {
		return err
	}
	o.Seed, o.Layers, o.Positions = f.seed, layers, f.positions()
	out, rep, err := convert.ToLinformer(m, o)
	if err != nil {
		return badInput(err)
	}
	return finishRewrite(stdout, &f, in, out, rep)
}
