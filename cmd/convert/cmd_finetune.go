package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/linearize/linearize/finetune"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/tokenize"
)

func init() {
	register(&command{
		name:    "finetune",
		summary: "fit a converted model's Linformer E/F, or the Q/K projections feeding its Performer features (ω frozen), to the original model's per-layer attention outputs on calibration inputs (distillation, layer by layer)",
		usage:   "ORIGINAL CONVERTED -o OUT [flags]",
		run:     runFinetune,
	})
}

func runFinetune(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("finetune", flag.ContinueOnError)
	ff := addFeedFlags(fs)
	out := fs.String("o", "", "path of the output model `OUT` (required; must differ from both inputs)")
	var opt finetune.Options
	fs.IntVar(&opt.Steps, "steps", 200, "Adam steps per layer")
	fs.Float64Var(&opt.LR, "lr", 0, "Adam learning rate (0: 0.01 for Linformer, 0.0005 for Performer)")
	fs.IntVar(&opt.Batch, "minibatch", 0, "calibration rows per Adam step, drawn with --seed (0: all)")
	backend := fs.String("backend", infer.DefaultBackend, "runtime backend that captures values: "+strings.Join(infer.Backends(), " or "))
	fs.IntVar(&opt.Threads, "threads", 0, "intra-op threads (0: backend default)")
	asJSON := fs.Bool("json", false, "print the per-layer report as JSON")
	pos, err := parseFlags(fs, args, stdout)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usageError("want ORIGINAL and CONVERTED models, got %d arguments", len(pos))
	}
	if *out == "" {
		return usageError("-o OUT is required")
	}
	if opt.Steps < 0 || opt.LR < 0 || opt.Batch < 0 || opt.Threads < 0 {
		return usageError("--steps, --lr, --minibatch and --threads must be non-negative")
	}
	if err := checkBackend(*backend); err != nil {
		return err
	}
	for _, in := range pos {
		if err := checkOutput(in, *out, false); err != nil {
			return err
		}
	}
	orig, err := onnx.Load(pos[0])
	if err != nil {
		return badInput(err)
	}
	conv, err := onnx.Load(pos[1])
	if err != nil {
		return badInput(err)
	}
	in, err := ff.buildFor([]*onnxpb.ModelProto{orig, conv}, pos)
	if err != nil {
		return err
	}
	opt.Seed, opt.Backend = ff.spec.Seed, *backend
	opt.Progress = os.Stderr // a line per fitted layer; --json goes to stdout
	fitted, rep, err := finetune.Fit(orig, conv, in.Tensors, opt)
	if err != nil {
		return badInput(err)
	}
	// The tokenizer travels from the converted model, else the original.
	from := pos[1]
	if tokenize.CompanionDir(from) == "" {
		from = pos[0]
	}
	w := stdout
	if *asJSON {
		w = stderrNotes // stdout is the JSON report only
	}
	if err := saveModel(w, fitted, *out, from, false); err != nil {
		return err
	}
	if *asJSON {
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
