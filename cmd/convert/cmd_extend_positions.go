package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/onnx"
)

func init() {
	register(&command{
		name:     "extend-positions",
		rewrites: true,
		summary:  "grow a model's absolute position-embedding table so it accepts longer inputs",
		usage:    "MODEL -o OUT --max-positions N [--method copy|interpolate] [--offset K] [--overwrite]",
		run:      runExtendPositions,
	})
}

func runExtendPositions(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("extend-positions", flag.ContinueOnError)
	out := fs.String("o", "", "output model path (required)")
	maxPos := fs.Int("max-positions", 0, "rows of the new position table (required; more than the current rows)")
	method := fs.String("method", "copy", "copy (tile the learned rows, as Longformer did) or interpolate (resample linearly)")
	offset := fs.Int("offset", 0, "leading non-position rows kept as they are (0 for BERT; 2 for RoBERTa's padding_idx+1 numbering)")
	overwrite := fs.Bool("overwrite", false, "allow -o to be the input model")
	pos, err := parseFlags(fs, args, stdout)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError("want exactly one MODEL argument, got %d", len(pos))
	}
	if *out == "" {
		return usageError("-o OUT is required")
	}
	if *maxPos <= 0 {
		return usageError("--max-positions N is required")
	}
	if err := checkOutput(pos[0], *out, *overwrite); err != nil {
		return err
	}
	m, err := onnx.Load(pos[0])
	if err != nil {
		return badInput(err)
	}
	ext, rep, err := convert.ExtendPositions(m, convert.ExtendOptions{MaxPositions: *maxPos, Method: *method, Offset: *offset})
	if err != nil {
		return badInput(err)
	}
	if err := onnx.Save(ext, *out, onnx.SaveOptions{Input: pos[0], Overwrite: *overwrite}); err != nil {
		return runtimeFailure(err)
	}
	fmt.Fprintf(stdout, "%s\nwrote %s\n", rep, *out)
	return nil
}
