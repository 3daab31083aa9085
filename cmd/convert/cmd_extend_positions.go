package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/onnx"
)

func runExtendPositions(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("extend-positions", flag.ContinueOnError)
	out := fs.String("o", "", "path of the output model `OUT` (required)")
	var maxPos, offset int
	var method string
	addPositionFlags(fs, &maxPos, &method, &offset, "tokens `N` the model reads: the new position table's rows (and the rows before its first position), or the length rotary positions are scaled to (required; more than now)")
	overwrite := fs.Bool("overwrite", false, "allow -o to be the input model")
	trained := fs.Int("trained-length", 0, "tokens `L` a rotary model was trained for, which --max-positions scales (default: max_position_embeddings in the config.json beside it)"+atMost(convert.MaxContextTokens))
	path, err := cli.ParseModelArg(fs, args, stdout)
	if err != nil {
		return err
	}
	if *out == "" {
		return cli.UsageError("-o OUT is required")
	}
	if maxPos <= 0 {
		return cli.UsageError("--max-positions N is required (a positive number of tokens)")
	}
	if err := cli.CheckOutput(path, *out, *overwrite); err != nil {
		return err
	}
	if *trained < 0 || *trained > convert.MaxContextTokens {
		return cli.UsageError("--trained-length %d: want 0 to %d tokens", *trained, convert.MaxContextTokens)
	}
	m, err := onnx.Load(path)
	if err != nil {
		return cli.BadInput(err)
	}
	if *trained == 0 {
		*trained = trainedLength(m, path, maxPos)
	}
	ext, rep, err := convert.ExtendPositions(m, convert.ExtendOptions{MaxPositions: maxPos, Method: method, Offset: offset, Trained: *trained})
	if err != nil {
		return optionError(err, positionFlagOf)
	}
	if err := saveModel(stdout, stderr, ext, *out, path, *overwrite); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s\nwrote %s\n", rep, *out)
	return nil
}
