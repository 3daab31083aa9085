package main

import (
	"encoding/json"
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
	feat "github.com/linearize/linearize/features"
	"github.com/linearize/linearize/finetune"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/internal/textfile"
	"github.com/linearize/linearize/onnx"
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
		sinks := map[string]string{"sinks": "first,last", "first": "first", "last": "last", "none": "none"}[f[2]]
		if sinks == "" {
			return nil, cli.UsageError("--local-pooled %q: sinks must be sinks, first, last or none", item)
		}
		out = append(out, convert.LocalPooledOptions{Block: b, NoLocal: b == 0, Segments: k, Sinks: sinks})
	}
	return out, nil
}

func runReportReal(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("report-real", flag.ContinueOnError)
	model := fs.String("model", "testdata/real/minilm.onnx", "the original model (built by scripts/real-model.sh); its tokenizer is found beside it")
	calib := fs.String("calibration", "testdata/realmodel/calibration.txt", "calibration texts for fine-tuning, one per line")
	held := fs.String("heldout", "testdata/realmodel/heldout.txt", "held-out texts for measuring, one per line")
	docs := fs.String("docs", "", "document mode: read DIR/calibration.txt and DIR/heldout.txt (long documents from scripts/real-text.sh, e.g. testdata/real/docs) and measure at each of --lengths")
	lengths := fs.String("lengths", "", "document mode: truncate every text to each of these token counts (document-mode default "+docDefaults["lengths"]+")")
	valTexts := fs.Int("validate-texts", 0, "run the validate check (every converted node recomputed by its Go kernel) on the first N held-out texts only (0: all; document-mode default "+docDefaults["validate-texts"]+")")
	calTexts := fs.Int("calibration-texts", 0, "use only the first N calibration texts (0: all; document-mode default "+docDefaults["calibration-texts"]+")")
	features := fs.String("features", "64,256,1024", "Performer feature counts M (document-mode default "+docDefaults["features"]+")")
	norms := fs.String("norms", "chi,sqrt-d,qmc", "Performer ω row norms (document-mode default "+docDefaults["norms"]+")")
	omegas := fs.String("omega", "orthogonal,iid", "Performer ω kinds, comma-separated (document-mode default "+docDefaults["omega"]+")")
	ks := fs.String("k", "32,64,128", "Linformer projected lengths k, each zero-shot and fine-tuned (document-mode default "+docDefaults["k"]+")")
	fitPerf := fs.String("fit-performer", "256", "feature counts M of Performer variants (orthogonal, chi) also fine-tuned (empty: none)")
	perfVariants := fs.String("performer-variants", "", "zero-shot Performer variants at each --features M, as [center+][balance+]MAP[/NORMS] items (MAP favor+, favor++, sderf or aderf; balance and FAVOR# fitted on the calibration texts; see convert performer --help) (document-mode default "+docDefaults["performer-variants"]+")")
	localPooled := fs.String("local-pooled", "", "local+pooled variants (zero-shot) as BLOCK/SEGMENTS/SINKS items, SINKS one of sinks (first and last), first, last, none; BLOCK 0 is a pooled Linformer (document-mode default "+docDefaults["local-pooled"]+")")
	lara := fs.String("lara", "", "LARA landmark counts C, each a zero-shot row (1 sample per landmark, σ = 1, noise from --seed; empty: none)")
	fitLP := fs.String("fit-local-pooled", "", "local+pooled variants (same form) also fine-tuned: the Q/K projections (document-mode default "+docDefaults["fit-local-pooled"]+")")
	lpSteps := fs.Int("local-pooled-steps", 30, "Adam steps per layer when fine-tuning local+pooled (document-mode default "+docDefaults["local-pooled-steps"]+")")
	steps := fs.Int("steps", 200, "Adam steps per layer when fine-tuning Linformer (document-mode default "+docDefaults["steps"]+")")
	perfSteps := fs.Int("performer-steps", 60, "Adam steps per layer when fine-tuning Performer (document-mode default "+docDefaults["performer-steps"]+")")
	join := fs.Int("join", 1, "join this many consecutive lines into one text (longer sequences)")
	minibatch := fs.Int("minibatch", 16, "calibration texts per Adam step (document-mode default "+docDefaults["minibatch"]+")")
	seed := fs.Uint64("seed", cli.DefaultSeed, "seed of ω, of E/F and of the mini-batches")
	asJSON := fs.Bool("json", false, "print JSON rows instead of markdown tables")
	pos, err := cli.ParseFlags(fs, args, stdout)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return cli.UsageError("report-real takes no positional arguments (use --model)")
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	docMode := *docs != "" || set["lengths"]
	if docMode {
		for name, v := range docDefaults {
			if !set[name] {
				if err := fs.Set(name, v); err != nil {
					return err
				}
			}
		}
		if *docs != "" {
			if set["calibration"] || set["heldout"] {
				return cli.UsageError("--docs names both files; drop --calibration and --heldout (or drop --docs and keep --lengths)")
			}
			*calib = filepath.Join(*docs, "calibration.txt")
			*held = filepath.Join(*docs, "heldout.txt")
		}
	}
	if *steps < 0 || *perfSteps < 0 || *lpSteps < 0 || *minibatch < 0 || *join < 1 || *calTexts < 0 || *valTexts < 0 {
		return cli.UsageError("--steps, --performer-steps, --local-pooled-steps, --minibatch, --calibration-texts and --validate-texts must be non-negative, --join positive")
	}
	ms, err := cli.Ints("features", *features, cliutil.IntList{Min: 1, Empty: true})
	if err != nil {
		return err
	}
	kk, err := cli.Ints("k", *ks, cliutil.IntList{Min: 1, Empty: true})
	if err != nil {
		return err
	}
	fitMs, err := cli.Ints("fit-performer", *fitPerf, cliutil.IntList{Min: 1, Empty: true})
	if err != nil {
		return err
	}
	laraCs, err := cli.Ints("lara", *lara, cliutil.IntList{Min: 1, Empty: true})
	if err != nil {
		return err
	}
	lps, err := localPooledList(*localPooled)
	if err != nil {
		return err
	}
	fitLPs, err := localPooledList(*fitLP)
	if err != nil {
		return err
	}
	var lens []int
	if docMode {
		// a text needs at least 2 tokens ([CLS] and [SEP])
		if lens, err = cli.Ints("lengths", *lengths, cliutil.IntList{Min: 2}); err != nil {
			return err
		}
	}
	if _, err := os.Stat(*model); err != nil {
		return cli.BadInput(fmt.Errorf("%s is absent: run scripts/real-model.sh first (%v)", *model, err))
	}
	for _, f := range []string{*calib, *held} {
		if _, err := os.Stat(f); err != nil && *docs != "" {
			return cli.BadInput(fmt.Errorf("%s is absent: run scripts/real-text.sh (or scripts/real-model.sh) first (%v)", f, err))
		}
	}
	orig, err := onnx.Load(*model)
	if err != nil {
		return cli.BadInput(err)
	}
	// No --vocab here: the tokenizer is the one scripts/real-model.sh
	// writes beside the model.
	tok, err := tokenize.LoadForModel(*model)
	if err != nil {
		return cli.BadInput(fmt.Errorf("tokenizer of %s: %w (run scripts/real-model.sh first)", *model, err))
	}
	readTexts := func(path string, limit int) ([]string, error) {
		texts, err := textfile.Read(path)
		if err != nil {
			return nil, cli.BadInput(err)
		}
		var joined []string
		for i := 0; i < len(texts); i += *join {
			joined = append(joined, strings.Join(texts[i:min(i+*join, len(texts))], " "))
		}
		if limit > 0 && len(joined) > limit {
			joined = joined[:limit]
		}
		return joined, nil
	}
	calibTexts, err := readTexts(*calib, *calTexts)
	if err != nil {
		return err
	}
	heldTexts, err := readTexts(*held, 0)
	if err != nil {
		return err
	}
	// inputs tokenizes texts; seqLen > 0 truncates (and pads) every text
	// to exactly that many tokens.
	inputs := func(path string, texts []string, seqLen int) (realtable.Inputs, int, error) {
		in, err := infer.FeedSpec{Texts: texts, SeqLen: seqLen, Tokenizer: tok}.Build(orig, *model)
		if err != nil {
			return realtable.Inputs{}, 0, cli.BadInput(fmt.Errorf("%s: %w", path, err))
		}
		short := 0
		for _, n := range in.Lengths {
			if n < in.SeqLen {
				short++
			}
		}
		return realtable.Inputs{Feed: in.Tensors, Mask: in.Mask, Batch: in.Batch, SeqLen: in.SeqLen}, short, nil
	}
	// Progress on stderr whatever the output format (--json goes to
	// stdout); document mode, which runs for many minutes, also reports
	// each variant's phases and fitted layers.
	opt := realtable.Options{Fit: finetune.Options{Steps: *steps, Batch: *minibatch, Seed: *seed}, ValidateInputs: *valTexts,
		Progress: os.Stderr, Detail: docMode}
	for _, m := range ms {
		for _, om := range cli.StrList(*omegas) {
			for _, nm := range cli.StrList(*norms) {
				opt.Variants = append(opt.Variants, realtable.Variant{Performer: &convert.PerformerOptions{Features: m, Omega: feat.Kind(om), Norms: feat.Norms(nm), Seed: *seed}})
			}
		}
	}
	pvs, err := performerVariantList(*perfVariants)
	if err != nil {
		return err
	}
	for _, m := range ms {
		for _, pv := range pvs {
			pv.Features, pv.Omega, pv.Seed = m, "orthogonal", *seed
			opt.Variants = append(opt.Variants, realtable.Variant{Performer: &pv})
		}
	}
	for _, m := range fitMs {
		opt.Variants = append(opt.Variants, realtable.Variant{Performer: &convert.PerformerOptions{Features: m, Omega: "orthogonal", Norms: "chi", Seed: *seed}, Fit: true, Steps: *perfSteps})
	}
	for _, k := range kk {
		for _, fit := range []bool{false, true} {
			opt.Variants = append(opt.Variants, realtable.Variant{Linformer: &convert.LinformerOptions{K: k, Seed: *seed}, Fit: fit})
		}
	}
	for i := range lps {
		opt.Variants = append(opt.Variants, realtable.Variant{LocalPooled: &lps[i]})
	}
	for i := range fitLPs {
		opt.Variants = append(opt.Variants, realtable.Variant{LocalPooled: &fitLPs[i], Fit: true, Steps: *lpSteps})
	}
	for _, c := range laraCs {
		opt.Variants = append(opt.Variants, realtable.Variant{Lara: &convert.LaraOptions{Landmarks: c, Seed: *seed}})
	}
	start := time.Now()
	fitDesc := fmt.Sprintf("fine-tuning: Adam, %d (Linformer) / %d (Performer) / %d (local+pooled) steps per layer, mini-batch %d", *steps, *perfSteps, *lpSteps, *minibatch)
	var rows []realtable.Row
	if !docMode {
		if opt.Calibration, _, err = inputs(*calib, calibTexts, 0); err != nil {
			return err
		}
		if opt.HeldOut, _, err = inputs(*held, heldTexts, 0); err != nil {
			return err
		}
		if !*asJSON {
			fmt.Fprintf(stdout, "model %s; calibration %s (%d texts, %d tokens after padding); held-out %s (%d texts, %d tokens); seed %d; %s\n\n",
				*model, *calib, opt.Calibration.Batch, opt.Calibration.SeqLen, *held, opt.HeldOut.Batch, opt.HeldOut.SeqLen, *seed, fitDesc)
		}
		if rows, err = realtable.Table(orig, opt); err != nil {
			return cli.RuntimeFailure(err)
		}
	} else {
		var notes []string
		byLength := func(n int) (cal, h realtable.Inputs, err error) {
			var shortC, shortH int
			if cal, shortC, err = inputs(*calib, calibTexts, n); err != nil {
				return cal, h, err
			}
			if h, shortH, err = inputs(*held, heldTexts, n); err != nil {
				return cal, h, err
			}
			if shortC+shortH > 0 {
				notes = append(notes, fmt.Sprintf("at n=%d, %d calibration and %d held-out texts are shorter than n (padded)", n, shortC, shortH))
			}
			return cal, h, nil
		}
		if rows, err = realtable.ByLength(orig, lens, byLength, opt); err != nil {
			return cli.RuntimeFailure(err)
		}
		if !*asJSON {
			val := "validate on every held-out text"
			if *valTexts > 0 {
				val = fmt.Sprintf("validate on the first %d held-out texts", *valTexts)
			}
			fmt.Fprintf(stdout, "model %s; calibration %s (first %d texts); held-out %s (%d texts); every text truncated to n tokens ([CLS] … [SEP]), n = %s; seed %d; %s; %s; %.0f s\n\n",
				*model, *calib, len(calibTexts), *held, len(heldTexts), *lengths, *seed, fitDesc, val, time.Since(start).Seconds())
			for _, n := range notes {
				fmt.Fprintf(stdout, "Note: %s.\n\n", n)
			}
			fmt.Fprintf(stdout, "Mean-pooled embedding cosine with the original, mean over the held-out texts (– : not run that way):\n\n%s\n", realtable.LengthMarkdown(rows))
			fmt.Fprint(stdout, "Per variant and length:\n\n")
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	fmt.Fprint(stdout, realtable.Markdown(rows))
	return nil
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
		var o convert.PerformerOptions
		for _, m := range []ops.FeatureMap{ops.FeaturesFavorPP, ops.FeaturesFavorPlus, ops.FeaturesSDERF, ops.FeaturesADERF} {
			if strings.HasSuffix(spec, string(m)) {
				o.FeatureMap, spec = m, strings.TrimSuffix(spec, string(m))
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
			return nil, cli.UsageError("--performer-variants %q: want [center+][balance+]MAP[/NORMS] with MAP favor+, favor++, sderf or aderf", item)
		}
		o.Norms = feat.Norms(norms)
		out = append(out, o)
	}
	return out, nil
}
