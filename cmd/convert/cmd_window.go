package main

import (
	"flag"
	"io"

	"github.com/linearize/linearize/convert"
)

func runWindow(args []string, stdout io.Writer) error {
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
	return finishRewrite(stdout, &f, in, out, rep)
}
