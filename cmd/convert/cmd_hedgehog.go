package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/corpus"
	"github.com/linearize/linearize/finetune"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
	"github.com/linearize/linearize/tokenize"
)

// The command of the hedgehog conversion (convert.Conversions).
var _ = conversionCommand(&cli.Command{Name: "hedgehog", Usage: "MODEL -o OUT --calibration FILE|DIR [flags]",
	Summary: "rewrite attention into Hedgehog and train its feature maps",
	Detail:  "exact attention to nearby keys plus learned feature maps for the rest (pure linear with --linear), trained on your documents",
	Example: "hedgehog model.onnx -o out/hh.onnx --calibration docs/"},
	"seed of the initial feature maps (with the layer index) and of the training mini-batches", hedgehogFlags)

// hedgehogFlags adds hedgehog's flags to fs and returns its conversion,
// trained on the calibration documents unless --steps is 0.
func hedgehogFlags(fs *flag.FlagSet) rewrite {
	var o convert.HedgehogOptions
	o.Block = convert.DefaultBlock
	fs.Var(&intFlag{&o.Features, 0}, "features", "`F`: each head's map has 2F features (0: the head size)")
	fs.Var(&intFlag{&o.Block, 1}, "block", "block length `B`: each query sees its block and --reach blocks on either side exactly")
	reach := fs.Int("reach", 1, "blocks `R` on either side seen exactly (0: the block alone)"+atMost(maxReach))
	fs.BoolVar(&o.Linear, "linear", false, "no exact part: pure linear attention, a state of fixed size per head")
	var tf transferFlags
	tf.register(fs, finetune.DefaultHedgehogSeqLen, "required unless --steps 0")
	fixedInputsVar(fs, &tf.inputs)
	return func(m *onnxpb.ModelProto, r *rewriteRun) (*onnxpb.ModelProto, *convert.Report, error) {
		if err := tf.check(); err != nil {
			return nil, nil, err
		}
		if *reach < 0 {
			return nil, nil, cli.UsageError("--reach %d must not be negative", *reach)
		}
		if err := checkCounts(count{"reach", *reach, maxReach}); err != nil {
			return nil, nil, err
		}
		o.Reach = *reach
		if o.Reach == 0 {
			o.Reach = ops.NoReach
		}
		o.Layers, o.Positions, o.Seed = r.layers, r.positions, r.seed
		convertFlags := flagsOf("Features", "features", "Block", "block", "Reach", "reach")
		if tf.t.Steps == 0 { // no training: the maps stay as drawn
			out, rep, err := convert.ToHedgehog(m, o)
			return out, rep, optionError(err, convertFlags)
		}
		ho := finetune.HedgehogOptions{Convert: o}
		docs, err := tf.options(&ho.Windows, &ho.Transfer, m, r.in, r.seed, r.stderr)
		if err != nil {
			return nil, nil, err
		}
		out, rep, trep, err := finetune.TrainHedgehog(m, docs, ho)
		if err != nil {
			return nil, nil, trainError(err, convertFlags)
		}
		fmt.Fprint(r.stderr, trep.Text())
		return out, rep, nil
	}
}

// transferFlags are the flags of the commands that train
// HedgehogAttention maps (finetune.Transfer) on calibration documents.
type transferFlags struct {
	t                             finetune.TransferOptions
	calib, vocab, objective, back string
	seqLen, maxWindows            int
	heldOut                       float64
	inputs                        map[string]string // --input, where the command has it
}

// register adds the flags; seqLen is --seq-len's default and when says
// when --calibration must be given.
func (tf *transferFlags) register(fs *flag.FlagSet, seqLen int, when string) {
	fs.StringVar(&tf.calib, "calibration", "", "`PATH` of calibration documents: a file with one document per line, or a folder of *.txt/*.md files (one document each); "+when)
	fs.StringVar(&tf.vocab, "vocab", "", "tokenizer `PATH` (default: found beside the model)")
	fs.IntVar(&tf.seqLen, "seq-len", seqLen, "calibration window `L` in tokens: documents are cut into windows of L tokens"+atMost(maxWindowFlag))
	fs.IntVar(&tf.maxWindows, "max-windows", 0, "use at most `N` windows, taken evenly across documents (0: all)"+atMost(maxWindowsTotal))
	fs.IntVar(&tf.t.Steps, "steps", 300, "Adam steps per head (0: no training, the maps stay as drawn)"+atMost(maxSteps))
	fs.Float64Var(&tf.t.LR, "lr", 0.01, "Adam learning rate")
	fs.IntVar(&tf.t.Windows, "windows", 8, "calibration windows per Adam step"+atMost(maxWindowsStep))
	fs.StringVar(&tf.objective, "objective", string(finetune.ObjectiveOutput), "what training minimises: output (each head's attention output against exact attention) or weights (cross-entropy of the attention weights)")
	fs.Float64Var(&tf.heldOut, "held-out", 0.25, "documents held out, a fraction: they choose the parameters and stop training early (0: none)")
	fs.IntVar(&tf.t.Threads, "threads", 0, "heads trained at once and teacher threads (0: 2)")
	fs.StringVar(&tf.back, "backend", infer.DefaultBackend, "runtime backend of the teacher runs")
}

// check validates the flags (after parsing).
func (tf *transferFlags) check() error {
	t := &tf.t
	if t.Steps < 0 || !(t.LR > 0) || t.Windows < 0 || t.Threads < 0 || tf.maxWindows < 0 {
		return cli.UsageError("--steps, --windows, --threads and --max-windows must be non-negative and --lr positive")
	}
	if tf.seqLen < 3 {
		return cli.UsageError("--seq-len %d: want at least 3", tf.seqLen)
	}
	if err := checkCounts(count{"steps", t.Steps, maxSteps}, count{"windows", t.Windows, maxWindowsStep},
		count{"max-windows", tf.maxWindows, maxWindowsTotal}, count{"seq-len", tf.seqLen, maxWindowFlag}); err != nil {
		return err
	}
	if !(tf.heldOut >= 0 && tf.heldOut < 1) {
		return cli.UsageError("--held-out %g: want a fraction in [0, 1)", tf.heldOut)
	}
	switch t.Objective = finetune.Objective(tf.objective); t.Objective {
	case finetune.ObjectiveOutput, finetune.ObjectiveWeights:
	default:
		return cli.UsageError("--objective %q: want %s or %s", tf.objective, finetune.ObjectiveOutput, finetune.ObjectiveWeights)
	}
	if tf.calib == "" && t.Steps > 0 {
		return cli.UsageError("--calibration is required: the maps are learned from your documents (--steps 0 writes the untrained maps)")
	}
	return checkBackend(tf.back) // --threads is vetted by cli.ParseFlags
}

// options reads the calibration documents and the tokenizer of the model
// m at path and sets the calibration and training options from the flags
// (seed seeds the training); the options' progress and notes go to
// stderr. A file the flags name that cannot be read is bad input.
func (tf *transferFlags) options(w *finetune.WindowOptions, t *finetune.TransferOptions, m *onnxpb.ModelProto, path string, seed uint64, stderr io.Writer) ([]string, error) {
	docs, err := readCalibration(tf.calib)
	if err != nil {
		return nil, cli.BadInput(err)
	}
	tok, err := tokenize.Find(tf.vocab, path)
	if err != nil {
		return nil, cli.BadInput(err)
	}
	fixed, err := infer.ReadFixedInputs(m, tf.inputs)
	if err != nil {
		return nil, cli.BadInput(fmt.Errorf("--input: %w", err))
	}
	*w = finetune.WindowOptions{Tokenizer: tok, SeqLen: tf.seqLen, MaxWindows: tf.maxWindows, HeldOut: tf.heldOut, ModelPath: path, Inputs: fixed}
	if tf.heldOut == 0 {
		w.HeldOut = -1 // the library's 0 is its default
	}
	*t = tf.t
	t.Seed, t.Backend, t.Progress = seed, tf.back, stderr
	return docs, nil
}

// trainError words an error of a calibrated conversion: a bad option of
// the conversion (convertFlags names their flags) or of the calibration
// is a usage error, anything else (windows longer than the model reads
// included) bad input.
func trainError(err error, convertFlags map[string]string) error {
	var le *finetune.LengthError
	if errors.As(err, &le) {
		// The model does not fit the flag: bad input, as for every
		// command that reads more tokens than the model's limit.
		return cli.BadInput(fmt.Errorf("--seq-len %d exceeds the model's limit of %d tokens (%s)", le.SeqLen, le.Limit.Tokens, le.Limit.Source))
	}
	var oe *finetune.OptionError
	if errors.As(err, &oe) {
		if name := map[string]string{"SeqLen": "seq-len"}[oe.Field]; name != "" {
			return cli.UsageError("--%s %s", name, oe.Msg)
		}
		return &cli.ExitError{Code: cli.ExitUsage, Err: err}
	}
	return optionError(err, convertFlags)
}

// readCalibration reads calibration documents: the lines of a file, or
// the *.txt and *.md files of a folder (corpus.Open), at most
// readBounds' total in all.
func readCalibration(path string) ([]string, error) {
	src, err := corpus.Open(path, readBounds)
	if err != nil {
		return nil, fmt.Errorf("--calibration: %w", err)
	}
	list, err := src.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("--calibration: %w", err)
	}
	docs := make([]string, len(list))
	for i, d := range list {
		docs[i] = d.Text
	}
	return docs, nil
}
