package main

import (
	"flag"
	"fmt"
	"io"
	"strconv"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/cmd/internal/cliutil"
	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/finetune"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

func runLong(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("long", flag.ContinueOnError)
	out := fs.String("o", "", "path of the output model `OUT` (required)")
	var o convert.LongOptions
	o.MaxLength = convert.DefaultLongMaxLength
	fs.Var(&intFlag{&o.MaxLength, 3}, "max-length", "longest input `N` in tokens the result reads")
	fs.IntVar(&o.Window, "window", 0, "tokens `W` of one window (default: the model's position limit, e.g. 512)")
	fs.BoolVar(&o.Far, "far", false, "add a pooled far field: every query also sees the other windows through --segments segment means, gated by --far-bias (off: zero-shot it lowered retrieval; docs/long-documents.md)")
	o.Segments = convert.DefaultSegments
	fs.Var(&intFlag{&o.Segments, 1}, "segments", "pooled segments `K` standing for the other windows, with --far")
	far := fs.String("far-bias", "0", "gate `B` added to every pooled score, with --far (0: a segment weighs as the keys it stands for; negative: less)")
	fs.BoolVar(&o.Learned, "learned", false, "read the other windows through learned feature maps (HedgehogAttention), trained on --calibration documents cut into --seq-len windows (see convert hedgehog)")
	fs.Var(&intFlag{&o.Features, 0}, "features", "`F`: with --learned, each head's map has 2F features (0: the head size)")
	seed := fs.Uint64("seed", cli.DefaultSeed, "seed of the learned maps and their training mini-batches, with --learned")
	var tf transferFlags
	tf.register(fs, finetune.DefaultLongSeqLen, "needed by --learned (unless --steps 0)")
	fs.BoolVar(&o.Overlap, "overlap", false, "every query also sees the neighbouring half window (1.5 windows of keys)")
	o.Sinks = convert.NoSinks
	cli.StringLikeVar(fs, &o.Sinks, "sinks", "tokens every query sees exactly besides its window: none, first, last or first,last")
	layers := fs.String("layers", "", "`LIST` of block indices to convert (default: all)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	overwrite := fs.Bool("overwrite", false, "allow -o to be the input model")
	inline := fs.Bool("inline", false, inlineUsage)
	path, err := cli.ParseModelArg(fs, args, stdout)
	if err != nil {
		return err
	}
	if *out == "" {
		return cli.UsageError("-o OUT is required")
	}
	beta, err := strconv.ParseFloat(*far, 32)
	if err != nil {
		return cli.UsageError("--far-bias %q: want a number", *far)
	}
	o.FarBias = float32(beta)
	if err := tf.check(); err != nil && o.Learned {
		return err
	}
	if !o.Learned && tf.calib != "" {
		return cli.UsageError("--calibration trains the maps of --learned; add --learned")
	}
	o.Seed = *seed
	if o.Window < 0 {
		return cli.UsageError("--window %d must not be negative", o.Window)
	}
	if o.Layers, err = cli.Ints("layers", *layers, cliutil.IntList{Max: maxLayerIndex, Ranges: true, MaxItems: maxLayerIndex, Empty: true}); err != nil {
		return err
	}
	if err := cli.CheckOutput(path, *out, *overwrite); err != nil {
		return err
	}
	m, err := onnx.Load(path)
	if err != nil {
		return cli.BadInput(err)
	}
	convertFlags := map[string]string{"MaxLength": "max-length", "Window": "window", "Segments": "segments", "Sinks": "sinks", "Learned": "learned", "Features": "features"}
	var res *onnxpb.ModelProto
	var rep *convert.Report
	if o.Learned && tf.t.Steps > 0 {
		lo := finetune.LongOptions{Convert: o}
		docs, err := tf.options(&lo.Windows, &lo.Transfer, m, path, o.Seed, stderr)
		if err != nil {
			return err
		}
		var trep *finetune.TransferReport
		if res, rep, trep, err = finetune.TrainLong(m, docs, lo); err != nil {
			return trainError(err, convertFlags)
		}
		fmt.Fprint(stderr, trep.Text())
	} else if res, rep, err = convert.ToLong(m, o); err != nil { // --steps 0: the maps stay as drawn
		return optionError(err, convertFlags)
	}
	if !*asJSON {
		fmt.Fprintf(stdout, "reads up to %d tokens in windows of %s\n", o.MaxLength, convert.Meta(res, convert.MetaWindow))
	}
	return finishRewrite(stdout, stderr, &rewriteFlags{out: *out, json: *asJSON, overwrite: *overwrite, inline: *inline}, path, res, rep)
}
