package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/features"
	"github.com/linearize/linearize/finetune"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

// The command of the performer conversion (convert.Conversions).
var _ = conversionCommand(&cli.Command{Name: "performer", Usage: "MODEL -o OUT [flags]",
	Summary: "rewrite attention into Performer random features",
	Detail:  "frozen ω; centred FAVOR++ features by default, FAVOR# fitted on --calibration, plain FAVOR+ on request; causal blocks get the causal form",
	Example: "performer model.onnx -o out/performer.onnx"}, "seed of ω (with the layer index)", performerFlags)

// performerFlags adds performer's flags to fs and returns its
// conversion, fitted on --calibration when the flags ask for it.
func performerFlags(fs *flag.FlagSet) rewrite {
	var o convert.PerformerOptions // its zero value is this command's default
	o.Features = convert.DefaultPerformerFeatures
	fs.Var(&intFlag{&o.Features, 1}, "features", "random features `M` per head")
	cli.TypedVar(fs, &o.Omega, "omega", features.Orthogonal, "`KIND` of ω: orthogonal (blocks from QR of Gaussian matrices) or iid (Gaussian rows)")
	cli.TypedVar(fs, &o.Norms, "norms", features.NormsChi, "row `NORMS` of ω: chi (sampled), sqrt-d (all √D) or qmc (χ_D quantiles, permuted)")
	cli.TypedVar(fs, &o.Kernel, "kernel", ops.KernelPositive, "positive (FAVOR+) or trig")
	fs.BoolVar(&o.PerHead, "per-head", false, "sample one ω per head instead of one per layer")
	o.Chunk = ops.DefaultChunk
	fs.Var(&intFlag{&o.Chunk, 1}, "chunk", "chunk length `C` of the causal Performer's function body (causal blocks of decoders are converted with causal=1: plain FAVOR+ with prefix sums, whatever --center and --features-kind say; the report notes it)")
	center := fs.Bool("center", true, "centre queries and keys over each sequence's valid tokens at run time (exact: the keys' mean cancels in the softmax, the queries' mean becomes a per-key bias); "+
		"on by default for the positive kernel (off for --kernel trig, which cannot be centred), --center=false for plain FAVOR+ (which convert finetune can fit)")
	cli.TypedVar(fs, &o.FeatureMap, "features-kind", "auto", "feature map of the positive kernel: favor+ (FAVOR+), favor++ (optimal positive features, A from each sequence at run time), "+
		"sderf or aderf (FAVOR# dense-exponential features, symmetric or asymmetric; fitted on --calibration); "+
		"auto: aderf with --calibration (and no --balance), favor++ otherwise, favor+ for --kernel trig")
	fs.BoolVar(&o.Balance, "balance", false, "add a per-head linear balance of queries and keys (q·T, k·T⁻ᵀ: exact) fitted on --calibration, for favor+ and favor++")
	calib := fs.String("calibration", "", "`FILE` of calibration texts, one per line, run through the original model to fit --balance, sderf and aderf")
	weighting := fs.String("calibration-weighting", "attention", "which query–key pairs the fit weighs: attention (the original attention weights) or uniform")
	calibLen := fs.Int("calibration-max-len", 512, "longest tokenized calibration text (when not given, at most the model's position limit)"+atMost(maxWindowFlag))
	vocab := fs.String("vocab", "", "tokenizer `PATH` for --calibration: a folder, tokenizer.json or vocab.txt (default: found beside the model)")
	var inputs map[string]string
	fixedInputsVar(fs, &inputs)
	return func(m *onnxpb.ModelProto, r *rewriteRun) (*onnxpb.ModelProto, *convert.Report, error) {
		o.Seed, o.Layers, o.Positions = r.seed, r.layers, r.positions
		set := map[string]bool{}
		fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
		if set["center"] { // unset: the library's automatic centring
			o.Center = convert.CenterOff
			if *center {
				o.Center = convert.CenterOn
			}
		}
		if o.FeatureMap == "auto" {
			o.FeatureMap = "" // the library's automatic feature map
		}
		if *weighting != features.WeightAttention && *weighting != features.WeightUniform {
			return nil, nil, cli.UsageError("--calibration-weighting %q: want %s or %s", *weighting, features.WeightAttention, features.WeightUniform)
		}
		var feed map[string]*onnx.Tensor
		if *calib != "" {
			if *calibLen < 2 {
				return nil, nil, cli.UsageError("--calibration-max-len must be at least 2")
			}
			if err := checkCounts(count{"calibration-max-len", *calibLen, maxWindowFlag}); err != nil {
				return nil, nil, err
			}
			spec := infer.FeedSpec{TextFiles: []string{*calib}, Vocab: *vocab, MaxLen: *calibLen, Inputs: inputs}
			if n, err := convert.PositionLimit(m); err == nil && n > 0 {
				spec.Limit = n
				if !set["calibration-max-len"] {
					spec.MaxLen = min(spec.MaxLen, max(n, 2))
				}
			}
			built, err := spec.Build(m, r.in)
			if err != nil {
				return nil, nil, calibrationError(err)
			}
			feed = built.Tensors
		} else if o.NeedsMoments() {
			return nil, nil, cli.UsageError("--balance and --features-kind %s need --calibration FILE", o.FeatureMap)
		}
		mo := finetune.MomentOptions{Weighting: *weighting, Progress: r.stderr}
		out, rep, err := finetune.CalibratedPerformer(m, feed, o, mo)
		if errors.Is(err, finetune.ErrCalibrationRun) {
			return nil, nil, cli.RuntimeFailure(err)
		} else if err != nil {
			return nil, nil, optionError(err, flagsOf("Features", "features", "Omega", "omega", "Norms", "norms", "Kernel", "kernel",
				"Chunk", "chunk", "Center", "center", "FeatureMap", "features-kind", "Balance", "balance", "Moments", "calibration"))
		}
		if o.Kernel == ops.KernelTrig {
			warnGuarded(r.stderr, out, r.positions.MaxPositions)
		}
		return out, rep, nil
	}
}

// warnGuarded runs a trig conversion once on seeded random tokens and
// warns when the denominator guard, not the estimator, decides more than
// infer.DefaultMaxGuarded of some node's rows: the trig estimator's
// denominator is unbiased but not positive, and on a pretrained model's
// logit scale it is often negative (a user found an output cosine of
// 0.003 that validate passed). The check is advice: it never fails the
// conversion, and a model it cannot run is not warned about.
func warnGuarded(stderr io.Writer, m *onnxpb.ModelProto, limit int) {
	seq := 64
	if n, err := convert.PositionLimit(m); err == nil && n > 0 {
		seq = min(seq, n)
	}
	if limit > 0 {
		seq = min(seq, limit)
	}
	feed, err := infer.RandomInputs(m, infer.GraphInputs(m), infer.RandomOptions{Batch: 1, SeqLen: seq, Seed: 1})
	if err != nil {
		return
	}
	v, err := infer.ValidateOps(m, feed, infer.ValidateOptions{MaxGuarded: 1})
	if err != nil {
		return
	}
	worst, rows, guarded := "", 0, 0
	for _, c := range v.Checks {
		if c.Rows > 0 && (worst == "" || c.GuardedRows*rows > guarded*c.Rows) {
			worst, rows, guarded = c.Node, c.Rows, c.GuardedRows
		}
	}
	if rows == 0 || float64(guarded) <= infer.DefaultMaxGuarded*float64(rows) {
		return
	}
	fmt.Fprintf(stderr, "warning: performer --kernel trig: on random tokens the denominator guard decides %d of %d rows (%.0f%%) of %s: "+
		"this model's logit scale is outside the trig estimator's range, so its outputs will be far from attention; use --kernel positive (the default)\n",
		guarded, rows, 100*float64(guarded)/float64(rows), worst)
}

// calibrationError words an error of building the --calibration feed in
// performer's flags: --vocab for the tokenizer, --calibration for the
// texts. Every such error is bad input (--calibration-max-len is checked
// before).
func calibrationError(err error) error {
	var fe *infer.FeedError
	if !errors.As(err, &fe) {
		return cli.BadInput(err)
	}
	flagName := "--calibration"
	if fe.Field == "Vocab" {
		flagName = "--vocab"
	}
	return cli.BadInput(fmt.Errorf("%s: %s", flagName, fe.Message()))
}
