package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/finetune"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/runtime"
)

func init() {
	register(&command{
		name:    "report-real",
		summary: "measure Performer (zero-shot, optionally fine-tuned) and Linformer (zero-shot and fine-tuned) conversions of the real model against the original on held-out sentences: mean-pooled embedding cosine, per-layer attention error, validate; prints a markdown table",
		usage:   "[--model PATH] [--calibration F] [--heldout F] [--features LIST] [--norms LIST] [--omegas LIST] [--k LIST] [--fit-performer LIST] [--steps N] [--minibatch R] [--seed S] [--json]",
		run:     runReportReal,
	})
}

func intList(flagName, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, usageError("--%s %q: want positive integers separated by commas", flagName, s)
		}
		out = append(out, n)
	}
	return out, nil
}

// strList splits a comma-separated flag value into its trimmed, non-empty
// items.
func strList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func runReportReal(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("report-real", flag.ContinueOnError)
	model := fs.String("model", "testdata/real/minilm.onnx", "the original model (built by scripts/real-model.sh); its tokenizer is found beside it")
	calib := fs.String("calibration", "testdata/realmodel/calibration.txt", "calibration sentences for fine-tuning, one per line")
	held := fs.String("heldout", "testdata/realmodel/heldout.txt", "held-out sentences for measuring, one per line")
	features := fs.String("features", "64,256,1024", "Performer feature counts M")
	norms := fs.String("norms", "chi,sqrt-d,qmc", "Performer ω row norms")
	omegas := fs.String("omegas", "orthogonal,iid", "Performer ω kinds")
	ks := fs.String("k", "32,64,128", "Linformer projected lengths k (each zero-shot and fine-tuned)")
	fitPerf := fs.String("fit-performer", "256", "feature counts M of Performer variants (orthogonal, chi) also fine-tuned (empty: none)")
	steps := fs.Int("steps", 200, "Adam steps per layer when fine-tuning Linformer")
	perfSteps := fs.Int("performer-steps", 60, "Adam steps per layer when fine-tuning Performer")
	join := fs.Int("join", 1, "join this many consecutive lines into one text (longer sequences)")
	minibatch := fs.Int("minibatch", 16, "calibration sentences per Adam step")
	seed := fs.Uint64("seed", 1, "seed of ω, of E/F and of the mini-batches")
	asJSON := fs.Bool("json", false, "print JSON rows instead of a markdown table")
	pos, err := parseFlags(fs, args, stdout)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageError("report-real takes no positional arguments (use --model)")
	}
	if *steps < 0 || *perfSteps < 0 || *minibatch < 0 || *join < 1 {
		return usageError("--steps, --performer-steps and --minibatch must be non-negative, --join positive")
	}
	ms, err := intList("features", *features)
	if err != nil {
		return err
	}
	kk, err := intList("k", *ks)
	if err != nil {
		return err
	}
	fitMs, err := intList("fit-performer", *fitPerf)
	if err != nil {
		return err
	}
	if _, err := os.Stat(*model); err != nil {
		return badInput(fmt.Errorf("%s is absent: run scripts/real-model.sh first (%v)", *model, err))
	}
	orig, err := onnx.Load(*model)
	if err != nil {
		return badInput(err)
	}
	tok, err := runtime.FindTokenizer(*model, "")
	if err != nil {
		return badInput(err)
	}
	inputs := func(path string) (finetune.Inputs, error) {
		texts, err := runtime.ReadTexts(path)
		if err != nil {
			return finetune.Inputs{}, badInput(err)
		}
		var joined []string
		for i := 0; i < len(texts); i += *join {
			joined = append(joined, strings.Join(texts[i:min(i+*join, len(texts))], " "))
		}
		texts = joined
		ti, err := runtime.TextInputs(tok, runtime.GraphInputs(orig), texts, 0, 512)
		if err != nil {
			return finetune.Inputs{}, badInput(fmt.Errorf("%s: %w", path, err))
		}
		return finetune.Inputs{Feed: ti.Feed, Mask: ti.Mask, Batch: ti.Batch, SeqLen: ti.SeqLen}, nil
	}
	opt := finetune.TableOptions{Fit: finetune.Options{Steps: *steps, Batch: *minibatch, Seed: *seed}}
	if opt.Calibration, err = inputs(*calib); err != nil {
		return err
	}
	if opt.HeldOut, err = inputs(*held); err != nil {
		return err
	}
	for _, m := range ms {
		for _, om := range strList(*omegas) {
			for _, nm := range strList(*norms) {
				opt.Variants = append(opt.Variants, finetune.Variant{Performer: &convert.PerformerOptions{Features: m, Omega: om, Norms: nm, Seed: *seed}})
			}
		}
	}
	for _, m := range fitMs {
		opt.Variants = append(opt.Variants, finetune.Variant{Performer: &convert.PerformerOptions{Features: m, Omega: "orthogonal", Norms: "chi", Seed: *seed}, Fit: true, Steps: *perfSteps})
	}
	for _, k := range kk {
		for _, fit := range []bool{false, true} {
			opt.Variants = append(opt.Variants, finetune.Variant{Linformer: &convert.LinformerOptions{K: k, Seed: *seed}, Fit: fit})
		}
	}
	if !*asJSON {
		fmt.Fprintf(stdout, "model %s; calibration %s (%d texts, %d tokens after padding); held-out %s (%d texts, %d tokens); seed %d; fine-tuning: Adam, %d (Linformer) / %d (Performer) steps per layer, mini-batch %d\n\n",
			*model, *calib, opt.Calibration.Batch, opt.Calibration.SeqLen, *held, opt.HeldOut.Batch, opt.HeldOut.SeqLen, *seed, *steps, *perfSteps, *minibatch)
		opt.Progress = func(r finetune.TableRow) {
			fmt.Fprintf(os.Stderr, "%-40s pooled cos %.4f  mean layer err %.3f  (%.0f s)\n", r.Variant, r.PooledCos, r.MeanLayerErr, r.Seconds)
		}
	}
	rows, err := finetune.Table(orig, opt)
	if err != nil {
		return runtimeFailure(err)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	fmt.Fprint(stdout, finetune.Markdown(rows))
	return nil
}
