package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/finetune"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/ops"
	"github.com/linearize/linearize/tokenize"
)

func init() {
	seedUsage["hedgehog"] = "seed of the initial feature maps (with the layer index) and of the training mini-batches"
	register(&command{
		name:     "hedgehog",
		rewrites: true,
		summary:  "rewrite every convertible attention block into HedgehogAttention (exact attention to the nearby keys plus learned feature maps for the rest, in one normaliser; or pure linear attention with --linear) and train the maps on your documents by attention transfer",
		usage:    "MODEL -o OUT --calibration FILE|DIR [flags]",
		run:      runHedgehog,
	})
}

func runHedgehog(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("hedgehog", flag.ContinueOnError)
	var f rewriteFlags
	var o convert.HedgehogOptions
	var t finetune.TransferOptions
	o.Block = 64
	fs.Var(&intFlag{&o.Features, 0}, "features", "`F`: each head's map has 2F features (0: the head size)")
	fs.Var(&intFlag{&o.Block, 1}, "block", "block length `B`: each query sees its block and --reach blocks on either side exactly")
	reach := fs.Int("reach", 1, "blocks `R` on either side seen exactly (0: the block alone)")
	fs.BoolVar(&o.Linear, "linear", false, "no exact part: pure linear attention, a state of fixed size per head")
	calib := fs.String("calibration", "", "`PATH` of calibration documents: a file with one document per line, or a folder of *.txt/*.md files (one document each); required unless --steps 0")
	vocab := fs.String("vocab", "", "tokenizer `PATH` (default: found beside the model)")
	seqLen := fs.Int("seq-len", 512, "calibration window `L` in tokens: documents are cut into windows of L tokens (at most the model's position limit)")
	maxWindows := fs.Int("max-windows", 0, "use at most `N` windows, taken evenly across documents (0: all)")
	fs.IntVar(&t.Steps, "steps", 300, "Adam steps per head (0: no training, the maps stay random FAVOR+ features)")
	fs.Float64Var(&t.LR, "lr", 0.01, "Adam learning rate")
	fs.IntVar(&t.Windows, "windows", 8, "calibration windows per Adam step")
	objective := fs.String("objective", string(finetune.ObjectiveOutput), "what training minimises: output (each head's attention output against exact attention) or weights (cross-entropy of the attention weights)")
	heldOut := fs.Float64("held-out", 0.25, "fraction of the documents held out to choose the parameters and stop early (0: none)")
	fs.IntVar(&t.Threads, "threads", 0, "heads trained at once and teacher threads (0: 2)")
	backend := fs.String("backend", infer.DefaultBackend, "runtime backend of the teacher runs")
	m, in, layers, err := loadForRewrite("hedgehog", fs, &f, args, stdout)
	if err != nil {
		return err
	}
	if t.Steps < 0 || !(t.LR > 0) || t.Windows < 0 || t.Threads < 0 || *maxWindows < 0 {
		return usageError("--steps, --windows, --threads and --max-windows must be non-negative and --lr positive")
	}
	if !(*heldOut >= 0 && *heldOut < 1) {
		return usageError("--held-out %g: want a fraction in [0, 1)", *heldOut)
	}
	switch t.Objective = finetune.Objective(*objective); t.Objective {
	case finetune.ObjectiveOutput, finetune.ObjectiveWeights:
	default:
		return usageError("--objective %q: want %s or %s", *objective, finetune.ObjectiveOutput, finetune.ObjectiveWeights)
	}
	if *calib == "" && t.Steps > 0 {
		return usageError("--calibration is required: the maps are learned from your documents (--steps 0 writes the untrained maps)")
	}
	if err := checkBackend(*backend); err != nil {
		return err
	}
	if err := checkThreads(t.Threads); err != nil {
		return err
	}
	if *reach < 0 {
		return usageError("--reach %d must not be negative", *reach)
	}
	o.Reach = *reach
	if o.Reach == 0 {
		o.Reach = ops.NoReach
	}
	o.Layers, o.Positions, o.Seed = layers, f.positions(), f.seed
	out, rep, err := convert.ToHedgehog(m, o)
	if err != nil {
		return optionError(err, flagsOf("Features", "features", "Block", "block", "Reach", "reach"))
	}
	if t.Steps > 0 {
		docs, err := readCalibration(*calib)
		if err != nil {
			return usageError("%v", err)
		}
		tok, err := tokenize.Find(*vocab, in)
		if err != nil {
			return badInput(err)
		}
		if limit, err := convert.PositionLimit(out); err == nil && limit > 0 && *seqLen > limit {
			return usageError("--seq-len %d exceeds the model's %d positions", *seqLen, limit)
		}
		cal, err := finetune.DocumentWindows(tok, infer.GraphInputs(out), docs, *seqLen, *maxWindows)
		if err != nil {
			return badInput(err)
		}
		t.Seed, t.Backend, t.Progress = f.seed, *backend, stderrNotes
		t.HeldOut = cal.HoldOut(*heldOut)
		if *heldOut > 0 && t.HeldOut == nil {
			fmt.Fprintln(stderrNotes, "note: fewer than two calibration documents: nothing is held out, so the parameters are chosen on the training windows")
		}
		if t.Patience == 0 && t.HeldOut == nil {
			t.Patience = -1
		}
		trained, trep, err := finetune.Transfer(out, cal, t)
		if err != nil {
			return badInput(err)
		}
		out = trained
		fmt.Fprint(stderrNotes, trep.Text())
	}
	return finishRewrite(stdout, &f, in, out, rep)
}

// readCalibration reads calibration documents: the lines of a file, or
// the *.txt and *.md files of a folder.
func readCalibration(path string) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("--calibration: %w", err)
	}
	var list []embedDoc
	if st.IsDir() {
		list, err = readDocsDir("--calibration", path)
	} else {
		list, err = readTextLines("--calibration", path)
	}
	if err != nil {
		return nil, err
	}
	docs := make([]string, len(list))
	for i, d := range list {
		docs[i] = d.text
	}
	return docs, nil
}
