package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/models"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// runBuildModel's flag list looks like other commands' (bench,
// extend-positions) in form only: each command declares its own flags, with
// its own help texts and defaults.
func runBuildModel(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("build-model", flag.ContinueOnError)
	out := fs.String("o", "", "path of the output model `OUT` (required)")
	family := fs.String("family", "bert", "`FAMILY` of the graph: bert (BertModel: learned positions, post-norm, Gelu FFN) or modernbert (ModernBertModel: rotary positions, packed Wqkv, GeGLU, global layers every --global-every and sliding-window layers between them)")
	preset := fs.String("preset", "tiny", "starting configuration: tiny (bert: hidden 64, 4 heads, 2 layers; modernbert: hidden 64, 4 heads, 3 layers, window 16) or base (BERT-base or ModernBERT-base width; modernbert: 3 layers, 8192 positions)")
	hidden := fs.Int("hidden", 0, "model width (0: the preset's)")
	heads := fs.Int("heads", 0, "attention heads (0: the preset's)")
	layers := fs.Int("num-layers", 0, "encoder layers (0: the preset's)")
	inter := fs.Int("intermediate", 0, "FFN width; modernbert's Wi projects to twice this, input and gate (0: the preset's)")
	vocab := fs.Int("vocab-size", 0, "vocabulary size (0: the preset's)")
	maxPos := fs.Int("max-positions", 0, "rows of the position-embedding table; modernbert (rotary, no table) records it in the model's doc string as max_position_embeddings (0: the preset's)")
	opset := fs.Int("opset", 0, "ONNX opset, 11-21 (modernbert: 12-21); LayerNormalization op from 17 (0: the preset's)")
	seed := fs.Uint64("seed", cli.DefaultSeed, "seed of the random weights")
	kTwoStep := fs.Bool("k-two-step", false, "bert: write Kᵀ as Transpose [0,2,1,3] then [0,1,3,2] instead of one [0,2,3,1]")
	scale := fs.String("scale", "div", "bert: where the 1/√D score scale sits: div, mul or q")
	causal := fs.Bool("causal", false, "bert: add a triangular (decoder) mask to every layer's scores, as a BERT exported with is_decoder=True: query i sees keys j ≤ i (convert performer then uses the causal Performer)")
	window := fs.Int("window", 0, "modernbert: local_attention, the full `WINDOW` of the sliding-window layers, even: query i sees keys |i−j| ≤ WINDOW/2 (0: the preset's, 16 for tiny, 128 for base)")
	globalEvery := fs.Int("global-every", 0, "modernbert: global_attn_every_n_layers, layer i attends globally when i % `N` = 0, within the window otherwise; 1 makes every layer global (0: the preset's, 3)")
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
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var only []string // flags of the other family
	switch *family {
	case "bert":
		only = []string{"window", "global-every"}
	case "modernbert":
		only = []string{"k-two-step", "scale", "causal"}
	default:
		return cli.UsageError("--family %q: want bert or modernbert", *family)
	}
	for _, name := range only {
		if set[name] {
			return cli.UsageError("--%s does not apply to --family %s", name, *family)
		}
	}
	if *preset != "tiny" && *preset != "base" {
		return cli.UsageError("--preset %q: want tiny or base", *preset)
	}
	if err := cli.CheckOutput("", *out, false); err != nil {
		return err
	}
	override := func(dst *int, v int) {
		if v != 0 {
			*dst = v
		}
	}
	// sizes overrides the fields both families' configurations have
	// (Hidden, Heads, Layers, Intermediate, Vocab, MaxPositions, Opset)
	// with their flags.
	sizes := func(hiddenTo, headsTo, layersTo, interTo, vocabTo, maxPosTo, opsetTo *int) {
		override(hiddenTo, *hidden)
		override(headsTo, *heads)
		override(layersTo, *layers)
		override(interTo, *inter)
		override(vocabTo, *vocab)
		override(maxPosTo, *maxPos)
		override(opsetTo, *opset)
	}
	const sizeFlags = "--hidden, --heads, --num-layers, --intermediate, --vocab-size, --max-positions, --opset"
	var m *onnxpb.ModelProto
	var what string // the model, as the line written says it
	if *family == "modernbert" {
		cfg := models.ModernBERTTinyConfig()
		if *preset == "base" {
			cfg = models.ModernBERTBaseConfig(3, 8192)
		}
		sizes(&cfg.Hidden, &cfg.Heads, &cfg.Layers, &cfg.Intermediate, &cfg.Vocab, &cfg.MaxPositions, &cfg.Opset)
		override(&cfg.Window, *window)
		override(&cfg.GlobalEvery, *globalEvery)
		cfg.Seed = *seed
		if err := cfg.Validate(); err != nil {
			return cli.UsageError("%v (flags %s, --window, --global-every)", err, sizeFlags)
		}
		m, err = models.ModernBERT(cfg)
		what = fmt.Sprintf("ModernBERT hidden %d, %d heads, %d layers (global every %d, window %d: ±%d), MLP %d, vocab %d, %d positions, opset %d, seed %d",
			cfg.Hidden, cfg.Heads, cfg.Layers, cfg.GlobalEvery, cfg.Window, cfg.Window/2, cfg.Intermediate, cfg.Vocab, cfg.MaxPositions, cfg.Opset, cfg.Seed)
	} else {
		cfg := models.TinyConfig()
		if *preset == "base" {
			cfg = models.BaseConfig(2, 512)
		}
		sizes(&cfg.Hidden, &cfg.Heads, &cfg.Layers, &cfg.Intermediate, &cfg.Vocab, &cfg.MaxPositions, &cfg.Opset)
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
			return cli.UsageError("%v (flags %s)", err, sizeFlags)
		}
		m, err = models.BERT(cfg)
		what = fmt.Sprintf("BERT hidden %d, %d heads, %d layers, FFN %d, vocab %d, %d positions, opset %d, seed %d",
			cfg.Hidden, cfg.Heads, cfg.Layers, cfg.Intermediate, cfg.Vocab, cfg.MaxPositions, cfg.Opset, cfg.Seed)
	}
	if err != nil {
		return cli.RuntimeFailure(err)
	}
	if err := onnx.Save(m, *out, onnx.SaveOptions{}); err != nil {
		return cli.RuntimeFailure(err)
	}
	fmt.Fprintf(stdout, "wrote %s: %s\n", *out, what)
	return nil
}
