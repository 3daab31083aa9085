package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/models"
	"github.com/linearize/linearize/onnx"
)

// runBuildModel's flag list looks like other commands' (bench,
// extend-positions) in form only: each command declares its own flags, with
// its own help texts and defaults.
func runBuildModel(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("build-model", flag.ContinueOnError)
	out := fs.String("o", "", "path of the output model `OUT` (required)")
	preset := fs.String("preset", "tiny", "starting configuration: tiny (hidden 64, 4 heads, 2 layers) or base (BERT-base width)")
	hidden := fs.Int("hidden", 0, "model width (0: the preset's)")
	heads := fs.Int("heads", 0, "attention heads (0: the preset's)")
	layers := fs.Int("num-layers", 0, "encoder layers (0: the preset's)")
	inter := fs.Int("intermediate", 0, "FFN width (0: the preset's)")
	vocab := fs.Int("vocab-size", 0, "vocabulary size (0: the preset's)")
	maxPos := fs.Int("max-positions", 0, "rows of the position-embedding table (0: the preset's)")
	opset := fs.Int("opset", 0, "ONNX opset, 11-21; LayerNormalization op from 17 (0: the preset's)")
	seed := fs.Uint64("seed", cli.DefaultSeed, "seed of the random weights")
	kTwoStep := fs.Bool("k-two-step", false, "write Kᵀ as Transpose [0,2,1,3] then [0,1,3,2] instead of one [0,2,3,1]")
	scale := fs.String("scale", "div", "where the 1/√D score scale sits: div, mul or q")
	causal := fs.Bool("causal", false, "add a triangular (decoder) mask to every layer's scores, as a BERT exported with is_decoder=True: query i sees keys j ≤ i (convert performer then uses the causal Performer)")
	pos, err := cli.ParseFlags(fs, args, stdout)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return cli.UsageError("unexpected argument %q", pos[0])
	}
	if *out == "" {
		return cli.UsageError("-o OUT is required")
	}
	if err := cli.CheckOutput("", *out, false); err != nil {
		return err
	}
	var cfg models.Config
	switch *preset {
	case "tiny":
		cfg = models.TinyConfig()
	case "base":
		cfg = models.BaseConfig(2, 512)
	default:
		return cli.UsageError("--preset %q: want tiny or base", *preset)
	}
	set := func(dst *int, v int) {
		if v != 0 {
			*dst = v
		}
	}
	set(&cfg.Hidden, *hidden)
	set(&cfg.Heads, *heads)
	set(&cfg.Layers, *layers)
	set(&cfg.Intermediate, *inter)
	set(&cfg.Vocab, *vocab)
	set(&cfg.MaxPositions, *maxPos)
	set(&cfg.Opset, *opset)
	cfg.Seed = *seed
	cfg.Causal = *causal
	if *kTwoStep {
		cfg.KTranspose = models.KTwoStep
	}
	switch *scale {
	case "div":
		cfg.Scale = models.ScaleDiv
	case "mul":
		cfg.Scale = models.ScaleMul
	case "q":
		cfg.Scale = models.ScaleQ
	default:
		return cli.UsageError("--scale %q: want div, mul or q", *scale)
	}
	// Every field comes from a flag (or the preset), so an invalid
	// configuration is a usage error.
	if err := cfg.Validate(); err != nil {
		return cli.UsageError("%v (flags --hidden, --heads, --num-layers, --intermediate, --vocab-size, --max-positions, --opset)", err)
	}
	m, err := models.BERT(cfg)
	if err != nil {
		return cli.RuntimeFailure(err)
	}
	if err := onnx.Save(m, *out, onnx.SaveOptions{}); err != nil {
		return cli.RuntimeFailure(err)
	}
	fmt.Fprintf(stdout, "wrote %s: BERT hidden %d, %d heads, %d layers, FFN %d, vocab %d, %d positions, opset %d, seed %d\n",
		*out, cfg.Hidden, cfg.Heads, cfg.Layers, cfg.Intermediate, cfg.Vocab, cfg.MaxPositions, cfg.Opset, cfg.Seed)
	return nil
}
