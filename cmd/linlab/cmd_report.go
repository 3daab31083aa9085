package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/cmd/internal/cliutil"
	"github.com/linearize/linearize/cmd/internal/realtable"
	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/corpus"
	feat "github.com/linearize/linearize/features"
	"github.com/linearize/linearize/finetune"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
	"github.com/linearize/linearize/tokenize"
)

// docDefaults are report-real's flag defaults in document mode (--docs or
// --lengths): fewer, cheaper variants and fits, so that the three lengths
// of the table run in well under 30 minutes on two cores.
var docDefaults = map[string]string{
	"features":           "256",
	"norms":              "chi,sqrt-d",
	"omega":              "orthogonal",
	"k":                  "64,128",
	"fit-performer":      "256",
	"local-pooled":       "32/32/sinks,64/64/sinks,0/64/none,0/128/sinks",
	"fit-local-pooled":   "32/32/sinks",
	"local-pooled-steps": "20",
	"steps":              "60",
	"performer-steps":    "30",
	"minibatch":          "4",
	"calibration-texts":  "8",
	"validate-texts":     "4",
	"lengths":            "128,256,512",
	"performer-variants": "center+favor++/chi,center+aderf/chi",
}

// localPooledList parses --local-pooled: comma-separated B/K/SINKS items,
// SINKS one of sinks (first and last), first, last, none; B = 0 is a
// pooled Linformer (no local part).
func localPooledList(s string) ([]convert.LocalPooledOptions, error) {
	var out []convert.LocalPooledOptions
	for _, item := range cli.StrList(s) {
		f := strings.Split(item, "/")
		if len(f) != 3 {
			return nil, cli.UsageError("--local-pooled %q: want BLOCK/SEGMENTS/SINKS items such as 32/32/sinks", item)
		}
		b, errB := strconv.Atoi(f[0])
		k, errK := strconv.Atoi(f[1])
		if errB != nil || errK != nil || b < 0 || k < 1 {
			return nil, cli.UsageError("--local-pooled %q: block must be ≥ 0 and segments ≥ 1", item)
		}
		sinks := map[string]convert.Sinks{"sinks": convert.DefaultSinks, "first": convert.SinkFirst, "last": convert.SinkLast, "none": convert.NoSinks}[f[2]]
		if sinks == 0 {
			return nil, cli.UsageError("--local-pooled %q: sinks must be sinks, first, last or none", item)
		}
		out = append(out, convert.LocalPooledOptions{Block: b, NoLocal: b == 0, Segments: k, Sinks: sinks})
	}
	return out, nil
}

// reportFlags are report-real's flags.
type reportFlags struct {
	stderr                                              io.Writer // progress lines
	model, calib, held, docs, lengths                   string
	features, norms, omegas, ks, fitPerf, perfVariants  string
	localPooled, lara, fitLP                            string
	valTexts, calTexts, lpSteps, steps, perfSteps, join int
	minibatch                                           int
	seed                                                uint64
	asJSON                                              bool
	docMode                                             bool // --docs or --lengths given
}

// define declares the flags on fs.
func (f *reportFlags) define(fs *flag.FlagSet) {
	fs.StringVar(&f.model, "model", "testdata/real/minilm.onnx", "the original model (built by scripts/real-model.sh); its tokenizer is found beside it")
	fs.StringVar(&f.calib, "calibration", "testdata/realmodel/calibration.txt", "calibration texts for fine-tuning, one per line")
	fs.StringVar(&f.held, "heldout", "testdata/realmodel/heldout.txt", "held-out texts for measuring, one per line")
	fs.StringVar(&f.docs, "docs", "", "document mode: read DIR/calibration.txt and DIR/heldout.txt (long documents from scripts/real-text.sh, e.g. testdata/real/docs) and measure at each of --lengths")
	fs.StringVar(&f.lengths, "lengths", "", "document mode: truncate every text to each of these token counts (document-mode default "+docDefaults["lengths"]+")")
	fs.IntVar(&f.valTexts, "validate-texts", 0, "run the validate check (every converted node recomputed by its Go kernel) on the first N held-out texts only (0: all; document-mode default "+docDefaults["validate-texts"]+")")
	fs.IntVar(&f.calTexts, "calibration-texts", 0, "use only the first N calibration texts (0: all; document-mode default "+docDefaults["calibration-texts"]+")")
	fs.StringVar(&f.features, "features", "64,256,1024", "Performer feature counts M (document-mode default "+docDefaults["features"]+")")
	fs.StringVar(&f.norms, "norms", "chi,sqrt-d,qmc", "Performer ω row norms (document-mode default "+docDefaults["norms"]+")")
	fs.StringVar(&f.omegas, "omega", "orthogonal,iid", "Performer ω kinds, comma-separated (document-mode default "+docDefaults["omega"]+")")
	fs.StringVar(&f.ks, "k", "32,64,128", "Linformer projected lengths k, each zero-shot and fine-tuned (document-mode default "+docDefaults["k"]+")")
	fs.StringVar(&f.fitPerf, "fit-performer", "256", "feature counts M of Performer variants (orthogonal, chi) also fine-tuned (empty: none)")
	fs.StringVar(&f.perfVariants, "performer-variants", "", "zero-shot Performer variants at each --features M, as [center+][balance+]MAP[/NORMS] items (MAP favor+, favor++, sderf or aderf; balance and FAVOR# fitted on the calibration texts; see convert performer --help) (document-mode default "+docDefaults["performer-variants"]+")")
	fs.StringVar(&f.localPooled, "local-pooled", "", "local+pooled variants (zero-shot) as BLOCK/SEGMENTS/SINKS items, SINKS one of sinks (first and last), first, last, none; BLOCK 0 is a pooled Linformer (document-mode default "+docDefaults["local-pooled"]+")")
	fs.StringVar(&f.lara, "lara", "", "LARA landmark counts C, each a zero-shot row (1 sample per landmark, σ = 1, noise from --seed; empty: none)")
	fs.StringVar(&f.fitLP, "fit-local-pooled", "", "local+pooled variants (same form) also fine-tuned: the Q/K projections (document-mode default "+docDefaults["fit-local-pooled"]+")")
	fs.IntVar(&f.lpSteps, "local-pooled-steps", 30, "Adam steps per layer when fine-tuning local+pooled (document-mode default "+docDefaults["local-pooled-steps"]+")")
	fs.IntVar(&f.steps, "steps", 200, "Adam steps per layer when fine-tuning Linformer (document-mode default "+docDefaults["steps"]+")")
	fs.IntVar(&f.perfSteps, "performer-steps", 60, "Adam steps per layer when fine-tuning Performer (document-mode default "+docDefaults["performer-steps"]+")")
	fs.IntVar(&f.join, "join", 1, "join this many consecutive lines into one text (longer sequences)")
	fs.IntVar(&f.minibatch, "minibatch", 16, "calibration texts per Adam step (document-mode default "+docDefaults["minibatch"]+")")
	fs.Uint64Var(&f.seed, "seed", cli.DefaultSeed, "seed of ω, of E/F and of the mini-batches")
	fs.BoolVar(&f.asJSON, "json", false, "print JSON rows instead of markdown tables")
}

func runReportReal(args []string, stdout, stderr io.Writer) error {
	var f reportFlags
	fs := flag.NewFlagSet("report-real", flag.ContinueOnError)
	f.define(fs)
	pos, err := cli.ParseFlags(fs, args, stdout)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return cli.UsageError("report-real takes no positional arguments (use --model)")
	}
	f.stderr = stderr
	return f.report(fs, stdout)
}

// report runs the report the parsed flags of fs ask for and prints it.
func (f *reportFlags) report(fs *flag.FlagSet, stdout io.Writer) error {
	if err := f.documentMode(fs); err != nil {
		return err
	}
	opt, lens, err := f.tableOptions()
	if err != nil {
		return err
	}
	in, err := f.load()
	if err != nil {
		return err
	}
	var rows []realtable.Row
	if f.docMode {
		rows, err = f.byLength(in, lens, opt, stdout)
	} else {
		rows, err = f.oneLength(in, opt, stdout)
	}
	if err != nil {
		return err
	}
	if f.asJSON {
		return cli.PrintJSON(stdout, rows)
	}
	fmt.Fprint(stdout, realtable.Markdown(rows))
	return nil
}

// documentMode turns on document mode when --docs or --lengths is given:
// the flags not given take their document-mode defaults (docDefaults),
// and --docs names the two text files.
func (f *reportFlags) documentMode(fs *flag.FlagSet) error {
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	f.docMode = f.docs != "" || set["lengths"]
	if !f.docMode {
		return nil
	}
	for name, v := range docDefaults {
		if !set[name] {
			if err := fs.Set(name, v); err != nil {
				return err
			}
		}
	}
	if f.docs != "" {
		if set["calibration"] || set["heldout"] {
			return cli.UsageError("--docs names both files; drop --calibration and --heldout (or drop --docs and keep --lengths)")
		}
		f.calib = filepath.Join(f.docs, "calibration.txt")
		f.held = filepath.Join(f.docs, "heldout.txt")
	}
	return nil
}

// tableOptions vets the numeric flags and returns the table's options
// with its variants (inputs not yet set) and, in document mode, the
// lengths.
func (f *reportFlags) tableOptions() (realtable.Options, []int, error) {
	var opt realtable.Options
	if f.steps < 0 || f.perfSteps < 0 || f.lpSteps < 0 || f.minibatch < 0 || f.join < 1 || f.calTexts < 0 || f.valTexts < 0 {
		return opt, nil, cli.UsageError("--steps, --performer-steps, --local-pooled-steps, --minibatch, --calibration-texts and --validate-texts must be non-negative, --join positive")
	}
	variants, err := f.variants()
	if err != nil {
		return opt, nil, err
	}
	var lens []int
	if f.docMode {
		// a text needs at least 2 tokens ([CLS] and [SEP])
		if lens, err = cli.Ints("lengths", f.lengths, cliutil.IntList{Min: 2}); err != nil {
			return opt, nil, err
		}
	}
	// Progress on stderr whatever the output format (--json goes to
	// stdout); document mode, which runs for many minutes, also reports
	// each variant's phases and fitted layers.
	opt = realtable.Options{Fit: finetune.Options{Steps: f.steps, Batch: f.minibatch, Seed: f.seed}, ValidateInputs: f.valTexts,
		Progress: f.stderr, Detail: f.docMode, Variants: variants}
	return opt, lens, nil
}

// variants lists the variants the flags ask for, in the table's order:
// Performer (each M, ω kind and norms, then each --performer-variants
// item, then those fine-tuned), Linformer (each k, zero-shot then
// fine-tuned), local+pooled (zero-shot, then fine-tuned), LARA.
func (f *reportFlags) variants() ([]realtable.Variant, error) {
	var ms, kk, fitMs, laraCs []int // the counts of --features, --k, --fit-performer and --lara
	for _, l := range []struct {
		flag, value string
		counts      *[]int
	}{{"features", f.features, &ms}, {"k", f.ks, &kk}, {"fit-performer", f.fitPerf, &fitMs}, {"lara", f.lara, &laraCs}} {
		var err error
		if *l.counts, err = cli.Ints(l.flag, l.value, cliutil.IntList{Min: 1, Empty: true}); err != nil {
			return nil, err
		}
	}
	lps, err := localPooledList(f.localPooled)
	if err != nil {
		return nil, err
	}
	fitLPs, err := localPooledList(f.fitLP)
	if err != nil {
		return nil, err
	}
	pvs, err := performerVariantList(f.perfVariants)
	if err != nil {
		return nil, err
	}
	var vs []realtable.Variant
	for _, m := range ms {
		for _, om := range cli.StrList(f.omegas) {
			for _, nm := range cli.StrList(f.norms) {
				vs = append(vs, realtable.Variant{Performer: &convert.PerformerOptions{Features: m, Omega: feat.Kind(om), Norms: feat.Norms(nm), Seed: f.seed,
					FeatureMap: ops.FeaturesFavorPlus, Center: convert.CenterOff}})
			}
		}
	}
	for _, m := range ms {
		for _, pv := range pvs {
			pv.Features, pv.Omega, pv.Seed = m, "orthogonal", f.seed
			vs = append(vs, realtable.Variant{Performer: &pv})
		}
	}
	for _, m := range fitMs {
		vs = append(vs, realtable.Variant{Performer: &convert.PerformerOptions{Features: m, Omega: "orthogonal", Norms: "chi", Seed: f.seed,
			FeatureMap: ops.FeaturesFavorPlus, Center: convert.CenterOff}, Fit: true, Steps: f.perfSteps})
	}
	for _, k := range kk {
		for _, fit := range []bool{false, true} {
			vs = append(vs, realtable.Variant{Linformer: &convert.LinformerOptions{Init: convert.LinformerGaussian, K: k, Seed: f.seed}, Fit: fit})
		}
	}
	for i := range lps {
		vs = append(vs, realtable.Variant{LocalPooled: &lps[i]})
	}
	for i := range fitLPs {
		vs = append(vs, realtable.Variant{LocalPooled: &fitLPs[i], Fit: true, Steps: f.lpSteps})
	}
	for _, c := range laraCs {
		vs = append(vs, realtable.Variant{Lara: &convert.LaraOptions{Landmarks: c, Seed: f.seed}})
	}
	return vs, nil
}

// reportInputs are what report-real reads: the original model, its
// tokenizer, and the calibration and held-out texts.
type reportInputs struct {
	orig             *onnxpb.ModelProto
	tok              *tokenize.Tokenizer
	calibTexts, held []string
}

// load reads the model, its tokenizer (the one scripts/real-model.sh
// writes beside it: no --vocab here) and the texts (--join lines each,
// the first --calibration-texts calibration texts).
func (f *reportFlags) load() (reportInputs, error) {
	var in reportInputs
	if _, err := os.Stat(f.model); err != nil {
		return in, cli.BadInput(fmt.Errorf("%s is absent: run scripts/real-model.sh first (%v)", f.model, err))
	}
	for _, p := range []string{f.calib, f.held} {
		if _, err := os.Stat(p); err != nil && f.docs != "" {
			return in, cli.BadInput(fmt.Errorf("%s is absent: run scripts/real-text.sh (or scripts/real-model.sh) first (%v)", p, err))
		}
	}
	var err error
	if in.orig, err = onnx.Load(f.model); err != nil {
		return in, cli.BadInput(err)
	}
	if in.tok, err = tokenize.LoadForModel(f.model); err != nil {
		return in, cli.BadInput(fmt.Errorf("tokenizer of %s: %w (run scripts/real-model.sh first)", f.model, err))
	}
	if in.calibTexts, err = f.readTexts(f.calib, f.calTexts); err != nil {
		return in, err
	}
	if in.held, err = f.readTexts(f.held, 0); err != nil {
		return in, err
	}
	return in, nil
}

// readTexts reads the texts of path, --join lines each, the first limit
// of them (0: all).
func (f *reportFlags) readTexts(path string, limit int) ([]string, error) {
	docs, err := corpus.Lines(path, corpus.Options{}).ReadAll()
	if err != nil {
		return nil, cli.BadInput(err)
	}
	texts := make([]string, len(docs))
	for i, d := range docs {
		texts[i] = d.Text
	}
	var joined []string
	for i := 0; i < len(texts); i += f.join {
		joined = append(joined, strings.Join(texts[i:min(i+f.join, len(texts))], " "))
	}
	if limit > 0 && len(joined) > limit {
		joined = joined[:limit]
	}
	return joined, nil
}

// inputs tokenizes texts (read from path); seqLen > 0 truncates (and
// pads) every text to exactly that many tokens. It also returns how many
// texts are shorter than the padded length.
func (f *reportFlags) inputs(in reportInputs, path string, texts []string, seqLen int) (realtable.Inputs, int, error) {
	fi, err := infer.FeedSpec{Texts: texts, SeqLen: seqLen, Tokenizer: in.tok}.Build(in.orig, f.model)
	if err != nil {
		return realtable.Inputs{}, 0, cli.BadInput(fmt.Errorf("%s: %w", path, err))
	}
	short := 0
	for _, n := range fi.Lengths {
		if n < fi.SeqLen {
			short++
		}
	}
	return realtable.Inputs{Feed: fi.Tensors, Mask: fi.Mask, Batch: fi.Batch, SeqLen: fi.SeqLen}, short, nil
}

// fitDesc describes the fine-tuning, for the reports' header.
func (f *reportFlags) fitDesc() string {
	return fmt.Sprintf("fine-tuning: Adam, %d (Linformer) / %d (Performer) / %d (local+pooled) steps per layer, mini-batch %d", f.steps, f.perfSteps, f.lpSteps, f.minibatch)
}

// oneLength runs the table on the texts as they are (padded to the
// longest) and prints its header unless --json.
func (f *reportFlags) oneLength(in reportInputs, opt realtable.Options, stdout io.Writer) ([]realtable.Row, error) {
	var err error
	if opt.Calibration, _, err = f.inputs(in, f.calib, in.calibTexts, 0); err != nil {
		return nil, err
	}
	if opt.HeldOut, _, err = f.inputs(in, f.held, in.held, 0); err != nil {
		return nil, err
	}
	if !f.asJSON {
		fmt.Fprintf(stdout, "model %s; calibration %s (%d texts, %d tokens after padding); held-out %s (%d texts, %d tokens); seed %d; %s\n\n",
			f.model, f.calib, opt.Calibration.Batch, opt.Calibration.SeqLen, f.held, opt.HeldOut.Batch, opt.HeldOut.SeqLen, f.seed, f.fitDesc())
	}
	rows, err := realtable.Table(in.orig, opt)
	if err != nil {
		return nil, cli.RuntimeFailure(err)
	}
	return rows, nil
}

// byLength runs the table at each length (document mode) and prints its
// header, notes and length table unless --json.
func (f *reportFlags) byLength(in reportInputs, lens []int, opt realtable.Options, stdout io.Writer) ([]realtable.Row, error) {
	start := time.Now()
	var notes []string
	byLength := func(n int) (cal, h realtable.Inputs, err error) {
		var shortC, shortH int
		if cal, shortC, err = f.inputs(in, f.calib, in.calibTexts, n); err != nil {
			return cal, h, err
		}
		if h, shortH, err = f.inputs(in, f.held, in.held, n); err != nil {
			return cal, h, err
		}
		if shortC+shortH > 0 {
			notes = append(notes, fmt.Sprintf("at n=%d, %d calibration and %d held-out texts are shorter than n (padded)", n, shortC, shortH))
		}
		return cal, h, nil
	}
	rows, err := realtable.ByLength(in.orig, lens, byLength, opt)
	if err != nil {
		return nil, cli.RuntimeFailure(err)
	}
	if f.asJSON {
		return rows, nil
	}
	val := "validate on every held-out text"
	if f.valTexts > 0 {
		val = fmt.Sprintf("validate on the first %d held-out texts", f.valTexts)
	}
	fmt.Fprintf(stdout, "model %s; calibration %s (first %d texts); held-out %s (%d texts); every text truncated to n tokens ([CLS] … [SEP]), n = %s; seed %d; %s; %s; %.0f s\n\n",
		f.model, f.calib, len(in.calibTexts), f.held, len(in.held), f.lengths, f.seed, f.fitDesc(), val, time.Since(start).Seconds())
	for _, n := range notes {
		fmt.Fprintf(stdout, "Note: %s.\n\n", n)
	}
	fmt.Fprintf(stdout, "Mean-pooled embedding cosine with the original, mean over the held-out texts (– : not run that way):\n\n%s\n", realtable.LengthMarkdown(rows))
	fmt.Fprint(stdout, "Per variant and length:\n\n")
	return rows, nil
}

// performerVariantList parses report-real's --performer-variants:
// comma-separated items [center+][balance+]MAP[/NORMS], MAP one of
// favor+, favor++, sderf, aderf and NORMS chi (default), sqrt-d or qmc;
// e.g. center+aderf/chi, center+balance+favor+/sqrt-d.
func performerVariantList(s string) ([]convert.PerformerOptions, error) {
	var out []convert.PerformerOptions
	for _, item := range cli.StrList(s) {
		spec, norms, _ := strings.Cut(item, "/")
		if norms == "" {
			norms = "chi"
		}
		o := convert.PerformerOptions{Center: convert.CenterOff}
		for _, m := range []ops.FeatureMap{ops.FeaturesFavorPP, ops.FeaturesFavorPlus, ops.FeaturesSDERF, ops.FeaturesADERF} {
			if strings.HasSuffix(spec, string(m)) {
				o.FeatureMap, spec = m, strings.TrimSuffix(spec, string(m))
				break
			}
		}
		switch spec {
		case "":
		case "center+":
			o.Center = convert.CenterOn
		case "balance+":
			o.Balance = true
		case "center+balance+":
			o.Center, o.Balance = convert.CenterOn, true
		default:
			o.FeatureMap = ""
		}
		if o.FeatureMap == "" {
			return nil, cli.UsageError("--performer-variants %q: want [center+][balance+]MAP[/NORMS] with MAP favor+, favor++, sderf or aderf", item)
		}
		o.Norms = feat.Norms(norms)
		out = append(out, o)
	}
	return out, nil
}
