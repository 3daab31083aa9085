package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/finetune"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/tokenize"
)

func runFinetune(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("finetune", flag.ContinueOnError)
	rf := addRunFlags(fs)
	out := fs.String("o", "", "path of the output model `OUT` (required; must differ from both inputs)")
	var opt finetune.Options
	fs.IntVar(&opt.Steps, "steps", 200, "Adam steps per layer"+atMost(maxSteps))
	fs.Float64Var(&opt.LR, "lr", 0, "Adam learning rate (0: 0.01 for Linformer, 0.0005 for Performer)")
	fs.IntVar(&opt.Batch, "minibatch", 0, "calibration rows per Adam step, drawn with --seed from those trained on (0: all)"+atMost(maxMinibatch))
	heldOut := fs.Float64("held-out", finetune.DefaultHeldOutFraction, "`FRACTION` of the calibration documents (one per text; rows of --random-inputs) held out, drawn with --seed: no layer may end worse on them, and the fine-tuned parameters are written only if the model beats the converted one on them (0: an unguarded fit)")
	patience := fs.Int("patience", finetune.DefaultPatience, "checkpoints (every "+strconv.Itoa(finetune.CheckpointEvery)+" steps) without a lower held-out error before a layer stops (0: never stop early)"+atMost(maxPatience))
	asJSON := fs.Bool("json", false, "print the per-layer report as JSON")
	pos, err := cli.ParseFlags(fs, args, stdout)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return cli.UsageError("want ORIGINAL and CONVERTED models, got %d arguments", len(pos))
	}
	if *out == "" {
		return cli.UsageError("-o OUT is required")
	}
	// A negative --threads never gets here: cli.ParseFlags refuses it.
	if opt.Steps < 0 || opt.LR < 0 || opt.Batch < 0 || *patience < 0 {
		return cli.UsageError("--steps, --lr, --minibatch, --threads and --patience must be non-negative")
	}
	if err := checkCounts(count{"steps", opt.Steps, maxSteps}, count{"minibatch", opt.Batch, maxMinibatch}, count{"patience", *patience, maxPatience}); err != nil {
		return err
	}
	if !(*heldOut >= 0 && *heldOut < 1) {
		return cli.UsageError("--held-out %g: want a fraction in [0, 1)", *heldOut)
	}
	opt.HeldOutFraction, opt.Unguarded = *heldOut, *heldOut == 0
	opt.Patience = *patience
	if opt.Patience == 0 {
		opt.Patience = -1 // the library's 0 is its default
	}
	if err := rf.check(); err != nil {
		return err
	}
	for _, in := range pos {
		if err := cli.CheckOutput(in, *out, false); err != nil {
			return err
		}
	}
	orig, err := onnx.Load(pos[0])
	if err != nil {
		return cli.BadInput(err)
	}
	conv, err := onnx.Load(pos[1])
	if err != nil {
		return cli.BadInput(err)
	}
	in, err := rf.buildFor([]*onnxpb.ModelProto{orig, conv}, pos)
	if err != nil {
		return err
	}
	opt.Seed, opt.Backend, opt.Threads = rf.spec.Seed, rf.backend, rf.threads
	opt.Progress = stderr // a line per fitted layer; --json goes to stdout
	fitted, rep, err := finetune.Fit(orig, conv, in.Tensors, opt)
	if err != nil {
		return cli.BadInput(err)
	}
	// The tokenizer travels from the converted model, else the original.
	from := pos[1]
	if tokenize.CompanionDir(from) == "" {
		from = pos[0]
	}
	w := stdout
	if *asJSON {
		w = stderr // stdout is the JSON report only
	}
	if err := saveModel(w, stderr, fitted, *out, from, false); err != nil {
		return err
	}
	if rep.HeldOut == nil && !opt.Unguarded {
		fmt.Fprintf(stderr, "convert: warning: finetune: %s: the fit is unguarded (give at least 2 documents: --text or --text-file lines, or --batch with --random-inputs)\n", rep.Unguarded)
	}
	if *asJSON {
		fmt.Fprintln(stderr, rep.HeldOutLine())
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			*finetune.Report
			Inputs string `json:"inputs"`
			Output string `json:"output"`
		}{rep, in.Description, *out})
	}
	fmt.Fprintf(stdout, "calibration: %s\n", in.Description)
	fmt.Fprint(stdout, rep.Text())
	fmt.Fprintf(stdout, "wrote %s\n", *out)
	return nil
}
