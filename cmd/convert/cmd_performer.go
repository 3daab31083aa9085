package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"strings"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/features"
	"github.com/linearize/linearize/finetune"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/internal/cliutil"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

func init() {
	register(&command{
		name:     "performer",
		rewrites: true,
		summary:  "rewrite every convertible attention block into a PerformerAttention op (random-feature attention with frozen ω: by default exact centring + FAVOR++ features, or FAVOR# ADERF fitted on --calibration; plain FAVOR+ on request; causal blocks of decoders with the causal Performer, plain FAVOR+ with prefix sums) that runs in stock onnxruntime",
		usage:    "MODEL -o OUT [flags]",
		run:      runPerformer,
	})
}

// rewriteFlags are the flags the rewriting commands (performer,
// linformer, local-pooled, lara) share.
type rewriteFlags struct {
	out, layers, posMethod string
	seed                   uint64
	json, overwrite        bool
	maxPos, posOffset      int
}

// seedUsage is the help of --seed of the rewriting commands that sample
// parameters; local-pooled samples nothing and has no --seed.
var seedUsage = map[string]string{
	"performer": "seed of ω (with the layer index)",
	"linformer": "seed of E and F with --init gaussian (with the layer index)",
	"lara":      "seed of the proposals' noise (with the layer index)",
}

func (f *rewriteFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.out, "o", "", "path of the output model `OUT` (required)")
	if u := seedUsage[fs.Name()]; u != "" {
		fs.Uint64Var(&f.seed, "seed", defaultSeed, u)
	}
	fs.StringVar(&f.layers, "layers", "", "`LIST` of block indices to convert, as convert inspect numbers them: comma-separated, ranges like 0-5 (default: all)")
	fs.BoolVar(&f.json, "json", false, "print the report as JSON")
	fs.BoolVar(&f.overwrite, "overwrite", false, "allow -o to be the input model")
	addPositionFlags(fs, &f.maxPos, &f.posMethod, &f.posOffset, "first grow the position table to `N` rows (see extend-positions)")
}

// defaultSeed is the default of every --seed.
const defaultSeed = 1

// addPositionFlags registers the position-table flags of
// extend-positions and the rewriting commands.
func addPositionFlags(fs *flag.FlagSet, maxPos *int, method *string, offset *int, maxPosUsage string) {
	fs.IntVar(maxPos, "max-positions", 0, maxPosUsage)
	fs.StringVar(method, "position-method", "copy", "how the table grows: copy (tile the learned rows, as Longformer did) or interpolate (resample linearly)")
	fs.IntVar(offset, "position-offset", 0, "leading non-position rows kept as they are (0 for BERT; 2 for RoBERTa's padding_idx+1 numbering)")
}

// positionFlagOf names the flags of convert.ExtendOptions' fields.
var positionFlagOf = map[string]string{"MaxPositions": "max-positions", "Method": "position-method", "Offset": "position-offset"}

// flagsOf maps convert.OptionError fields to flag names: the position
// flags and the given pairs (field, flag, field, flag, ...).
func flagsOf(pairs ...string) map[string]string {
	m := maps.Clone(positionFlagOf)
	for i := 0; i+1 < len(pairs); i += 2 {
		m[pairs[i]] = pairs[i+1]
	}
	return m
}

func (f *rewriteFlags) positions() convert.ExtendOptions {
	return convert.ExtendOptions{MaxPositions: f.maxPos, Method: f.posMethod, Offset: f.posOffset}
}

// maxLayerIndex bounds --layers before it is expanded.
const maxLayerIndex = 1 << 16

// loadForRewrite parses the shared flags and loads the model.
func loadForRewrite(name string, fs *flag.FlagSet, f *rewriteFlags, args []string, stdout io.Writer) (*onnxpb.ModelProto, string, []int, error) {
	f.register(fs)
	path, err := parseModelArg(fs, args, stdout)
	if err != nil {
		return nil, "", nil, err
	}
	if f.out == "" {
		return nil, "", nil, usageError("-o OUT is required")
	}
	if f.maxPos < 0 {
		return nil, "", nil, usageError("--max-positions %d must not be negative", f.maxPos)
	}
	// Block indices are checked against the model later; the bound here
	// keeps a typo such as 0-50000000 from being expanded first.
	layers, err := ints("layers", f.layers, cliutil.IntList{Max: maxLayerIndex, Ranges: true, MaxItems: maxLayerIndex, Empty: true})
	if err != nil {
		return nil, "", nil, err
	}
	if err := checkOutput(path, f.out, f.overwrite); err != nil {
		return nil, "", nil, err
	}
	m, err := onnx.Load(path)
	if err != nil {
		return nil, "", nil, badInput(err)
	}
	return m, path, layers, nil
}

// finishRewrite saves the model and prints the report.
func finishRewrite(stdout io.Writer, f *rewriteFlags, in string, m *onnxpb.ModelProto, rep *convert.Report) error {
	w := stdout
	if f.json {
		w = stderrNotes // stdout is the JSON report only
	}
	if err := saveModel(w, m, f.out, in, f.overwrite); err != nil {
		return err
	}
	if f.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	fmt.Fprint(stdout, rep.Text())
	fmt.Fprintf(stdout, "wrote %s\n", f.out)
	return nil
}

func runPerformer(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("performer", flag.ContinueOnError)
	var f rewriteFlags
	var o convert.PerformerOptions
	o.Features = 256
	fs.Var(&intFlag{&o.Features, 1}, "features", "random features `M` per head")
	typedVar(fs, &o.Omega, "omega", features.Orthogonal, "`KIND` of ω: orthogonal (blocks from QR of Gaussian matrices) or iid (Gaussian rows)")
	typedVar(fs, &o.Norms, "norms", features.NormsChi, "row `NORMS` of ω: chi (sampled), sqrt-d (all √D) or qmc (χ_D quantiles, permuted)")
	fs.StringVar(&o.Kernel, "kernel", "positive", "positive (FAVOR+) or trig")
	fs.BoolVar(&o.PerHead, "per-head", false, "sample one ω per head instead of one per layer")
	o.Chunk = 64
	fs.Var(&intFlag{&o.Chunk, 1}, "chunk", "chunk length `C` of the causal Performer's function body (causal blocks of decoders are converted with causal=1: plain FAVOR+ with prefix sums, whatever --center and --features-kind say; the report notes it)")
	fs.BoolVar(&o.Center, "center", true, "centre queries and keys over each sequence's valid tokens at run time (exact: the keys' mean cancels in the softmax, the queries' mean becomes a per-key bias); "+
		"on by default for the positive kernel, --center=false for plain FAVOR+ (which convert finetune can fit)")
	fs.StringVar(&o.FeatureMap, "features-kind", "auto", "feature map of the positive kernel: favor+ (FAVOR+), favor++ (optimal positive features, A from each sequence at run time), "+
		"sderf or aderf (FAVOR# dense-exponential features, symmetric or asymmetric; fitted on --calibration); "+
		"auto: aderf with --calibration (and no --balance), favor++ otherwise, favor+ for --kernel trig")
	fs.BoolVar(&o.Balance, "balance", false, "add a per-head linear balance of queries and keys (q·T, k·T⁻ᵀ: exact) fitted on --calibration, for favor+ and favor++")
	calib := fs.String("calibration", "", "`FILE` of calibration texts, one per line, run through the original model to fit --balance, sderf and aderf")
	weighting := fs.String("calibration-weighting", "attention", "which query–key pairs the fit weighs: attention (the original attention weights) or uniform")
	calibLen := fs.Int("calibration-max-len", 512, "longest tokenized calibration text (when not given, at most the model's position limit)")
	vocab := fs.String("vocab", "", "tokenizer `PATH` for --calibration: a folder, tokenizer.json or vocab.txt (default: found beside the model)")
	m, in, layers, err := loadForRewrite("performer", fs, &f, args, stdout)
	if err != nil {
		return err
	}
	o.Seed, o.Layers, o.Positions = f.seed, layers, f.positions()
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if o.Kernel == "trig" && !set["center"] {
		o.Center = false
	}
	if o.FeatureMap == "auto" {
		switch {
		case o.Kernel == "trig":
			o.FeatureMap = "favor+"
		case *calib != "" && !o.Balance:
			o.FeatureMap = "aderf"
		default:
			o.FeatureMap = "favor++"
		}
	}
	if *weighting != features.WeightAttention && *weighting != features.WeightUniform {
		return usageError("--calibration-weighting %q: want %s or %s", *weighting, features.WeightAttention, features.WeightUniform)
	}
	if *calib != "" {
		if *calibLen < 2 {
			return usageError("--calibration-max-len must be at least 2")
		}
		spec := infer.FeedSpec{TextFiles: []string{*calib}, Vocab: *vocab, MaxLen: *calibLen}
		if n, err := convert.PositionLimit(m); err == nil && n > 0 {
			spec.Limit = n
			if !set["calibration-max-len"] {
				spec.MaxLen = min(spec.MaxLen, max(n, 2))
			}
		}
		feed, err := spec.Build(m, in)
		if err != nil {
			return calibrationError(err)
		}
		if o.Moments, err = finetune.PerformerMoments(m, feed.Tensors, finetune.MomentOptions{Center: o.Center, Weighting: *weighting}); err != nil {
			return runtimeFailure(err)
		}
	} else if o.NeedsMoments() {
		return usageError("--balance and --features-kind %s need --calibration FILE", o.FeatureMap)
	}
	out, rep, err := convert.ToPerformer(m, o)
	if err != nil {
		return optionError(err, flagsOf("Features", "features", "Omega", "omega", "Norms", "norms", "Kernel", "kernel",
			"Chunk", "chunk", "FeatureMap", "features-kind", "Balance", "balance", "Moments", "calibration"))
	}
	if o.Kernel == "trig" {
		warnGuarded(out, f.positions().MaxPositions)
	}
	return finishRewrite(stdout, &f, in, out, rep)
}

// warnGuarded runs a trig conversion once on seeded random tokens and
// warns when the denominator guard, not the estimator, decides more than
// infer.DefaultMaxGuarded of some node's rows: the trig estimator's
// denominator is unbiased but not positive, and on a pretrained model's
// logit scale it is often negative (a user found an output cosine of
// 0.003 that validate passed). The check is advice: it never fails the
// conversion, and a model it cannot run is not warned about.
func warnGuarded(m *onnxpb.ModelProto, limit int) {
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
	fmt.Fprintf(stderrNotes, "warning: performer --kernel trig: on random tokens the denominator guard decides %d of %d rows (%.0f%%) of %s: "+
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
		return badInput(err)
	}
	flagName := "--calibration"
	if fe.Field == "Vocab" {
		flagName = "--vocab"
	}
	return badInput(fmt.Errorf("%s: %s", flagName, fe.Message()))
}

// performerVariantList parses report-real's --performer-variants:
// comma-separated items [center+][balance+]MAP[/NORMS], MAP one of
// favor+, favor++, sderf, aderf and NORMS chi (default), sqrt-d or qmc;
// e.g. center+aderf/chi, center+balance+favor+/sqrt-d.
func performerVariantList(s string) ([]convert.PerformerOptions, error) {
	var out []convert.PerformerOptions
	for _, item := range strList(s) {
		spec, norms, _ := strings.Cut(item, "/")
		if norms == "" {
			norms = "chi"
		}
		var o convert.PerformerOptions
		for _, m := range []string{"favor++", "favor+", "sderf", "aderf"} {
			if strings.HasSuffix(spec, m) {
				o.FeatureMap, spec = m, strings.TrimSuffix(spec, m)
				break
			}
		}
		switch spec {
		case "":
		case "center+":
			o.Center = true
		case "balance+":
			o.Balance = true
		case "center+balance+":
			o.Center, o.Balance = true, true
		default:
			o.FeatureMap = ""
		}
		if o.FeatureMap == "" {
			return nil, usageError("--performer-variants %q: want [center+][balance+]MAP[/NORMS] with MAP favor+, favor++, sderf or aderf", item)
		}
		o.Norms = features.Norms(norms)
		out = append(out, o)
	}
	return out, nil
}
