package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/features"
)

func runLinformer(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("linformer", flag.ContinueOnError)
	var f rewriteFlags
	var o convert.LinformerOptions
	fs.StringVar(&o.Init, "init", "pool", "pool: E = F = means over k segments of each input's valid tokens, at run time (a LocalPooledAttention node without local blocks; no length limit); gaussian: frozen random E, F ~ N(0, 1/k) (a LinformerAttention node)")
	o.K = 128
	fs.Var(&intFlag{&o.K, 1}, "k", "projected length `K` (segments with --init pool)")
	fs.StringVar(&o.Sinks, "sinks", "first,last", "with --init pool: tokens kept exact (first,last, first, last or none)")
	fs.IntVar(&o.MaxLen, "max-len", 0, "with --init gaussian: longest sequence `N` the projections accept (0: 512, or --max-positions)")
	cli.TypedVar(fs, &o.Share, "share", features.ShareHeadwise, "with --init gaussian: projection `SHARING`: none, headwise, kv or layerwise")
	m, in, layers, err := loadForRewrite(fs, &f, args, stdout)
	if err != nil {
		return err
	}
	if o.Init == "pool" {
		fs.Visit(func(fl *flag.Flag) {
			switch fl.Name {
			case "max-len", "share", "seed":
				fmt.Fprintf(stderrNotes, "%s linformer: --%s does not apply to --init pool (segments follow each input's length; nothing is sampled); ignored\n", cli.Name, fl.Name)
			}
		})
	}
	o.Seed, o.Layers, o.Positions = f.seed, layers, f.positions()
	out, rep, err := convert.ToLinformer(m, o)
	if err != nil {
		return optionError(err, flagsOf("K", "k", "Init", "init", "MaxLen", "max-len", "Share", "share", "Segments", "k", "Sinks", "sinks"))
	}
	return finishRewrite(stdout, &f, in, out, rep)
}
