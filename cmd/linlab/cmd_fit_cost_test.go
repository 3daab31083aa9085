package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/linearize/linearize/cmd/internal/benchrun"
	"github.com/linearize/linearize/convert"
)

// TestFitCost fits the saved runs the default weights come from, of three
// shapes (BERT-base width, 2 layers; a ModernBERT-shaped 6 layers;
// gte-base-en-v1.5's full size), and checks the full-size ModernBERT run
// against the fit: the weights come first, then each result under its
// role with its shape and its time ratios' errors.
func TestFitCost(t *testing.T) {
	docs := filepath.Join("..", "..", "docs")
	fitted, small, gte, checked := filepath.Join(docs, "bench-crossover.json"), filepath.Join(docs, "bench-longctx.json"), filepath.Join(docs, "bench-gte.json"), filepath.Join(docs, "bench-fullsize.json")
	code, out, errOut := runCLI("fit-cost", fitted, small, gte, "--check", checked)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"weights: ", "to 3 digits (convert.DefaultWeights): " + convert.DefaultWeights.String(),
		fitted + " (fitted):\n  2 layers, hidden 768, FFN 3072: 255 time ratios",
		small + " (fitted):\n  6 layers, hidden 384, FFN 2304 in, 1152 out: 20 time ratios",
		gte + " (fitted):\n  12 layers, hidden 768, FFN 6144 in, 3072 out: 12 time ratios",
		checked + " (not fitted, checked):\n  22 layers, hidden 768, FFN 2304 in, 1152 out: 24 time ratios", "predicted "} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.HasPrefix(out, "weights: ") {
		t.Errorf("output does not start with the weights:\n%s", out)
	}
}

// fitCostTruth are the weights TestFitCostRecovers times its synthetic
// runs with: unlike the defaults, in the same regime.
var fitCostTruth = convert.Weights{Original: 0.4, Linear: 1, Pass: 40, Exp: 5, Layer: 1e9}

// TestFitCostRecovers writes bench results timed by a known cost model
// (fitCostTruth; each run of a length scaled by its own drift, as a
// machine drifts between runs), fits two of them with fit-cost and checks
// a third, and requires the printed fit to recover what the true weights
// predict: every time ratio between forms within 1 %, and each printed
// crossover within 3 % of the true one (the ridge's pull towards the start
// biases even an exact fit a little). The weights themselves are not
// compared: a softmax form's core MACs and passes both grow as n², so only
// their sum is determined.
func TestFitCostRecovers(t *testing.T) {
	dims := convert.Dims{Layers: 2, Hidden: 768, Heads: 12, HeadDim: 64, FFN: 3072}
	// fit-cost's cost model for results of these dims and options.
	truth := convert.CostModel{Dims: dims, Features: 256, K: 256, Block: 64, Segments: 64, Sinks: 2, Landmarks: convert.DefaultLaraLandmarks, Samples: 1, Weights: fitCostTruth}
	forms := []convert.Form{convert.Original, convert.Performer, convert.Linformer, convert.LocalPooled}
	dir := t.TempDir()
	var paths []string
	for run, drift := range []float64{1, 1.13, 0.91} {
		r := benchrun.Result{Model: "synthetic", Threads: 2, Features: 256, K: 256, Repeat: 1, Dims: dims}
		for n := 384; n <= 8192; n += 384 {
			// Each length's runs share a drift of their own.
			d := drift * (1 + 0.05*math.Sin(float64(n)))
			for _, f := range forms {
				r.Runs = append(r.Runs, benchrun.Measurement{Variant: f, Length: n, Status: "ok", MedianMS: truth.Work(f, n) * 1e-8 * d})
			}
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, "run"+strconv.Itoa(run)+".json")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	code, out, errOut := runCLI("fit-cost", paths[0], paths[1], "--check", paths[2])
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	line, _, _ := strings.Cut(strings.TrimPrefix(out, "weights: "), "\n")
	w, err := convert.ParseWeights(line)
	if err != nil || !strings.HasPrefix(out, "weights: ") {
		t.Fatalf("no weights on the first line (%v):\n%s", err, out)
	}
	fit := truth
	fit.Weights = w
	for _, f := range forms[1:] {
		for n := 256; n <= 16384; n *= 2 {
			want, got := truth.Work(f, n)/truth.Work(convert.Original, n), fit.Work(f, n)/fit.Work(convert.Original, n)
			if math.Abs(got/want-1) > 0.01 {
				t.Errorf("%s / original at n = %d: time ratio %.4g with the fitted weights %v, %.4g with the true ones", f, n, got, w, want)
			}
		}
	}
	rms := regexp.MustCompile(`RMS error ([0-9.]+)%`).FindStringSubmatch(out)
	if rms == nil {
		t.Fatalf("no RMS error:\n%s", out)
	}
	if e, _ := strconv.ParseFloat(rms[1], 64); e > 0.5 {
		t.Errorf("RMS error %.1f%% on exact timings, want ≤ 0.5%%", e)
	}
	// Every result lists the crossovers the fit predicts against the
	// original: the fitted weights' own, close to the true ones.
	predicted := regexp.MustCompile(`(?m)^  (\S+)\s+vs original\s+predicted\s+(-?\d+),`).FindAllStringSubmatch(out, -1)
	if len(predicted) != 3*(len(forms)-1) {
		t.Fatalf("%d predicted crossovers, want %d per result:\n%s", len(predicted), len(forms)-1, out)
	}
	for _, m := range predicted {
		f := convert.Form(m[1])
		got, _ := strconv.Atoi(m[2])
		if got != fit.Crossover(f) {
			t.Errorf("%s: printed crossover %d, the printed weights give %d", f, got, fit.Crossover(f))
		}
		if want := truth.Crossover(f); math.Abs(float64(got-want)) > 0.03*float64(want) {
			t.Errorf("%s: predicted crossover %d, the true weights give %d", f, got, want)
		}
	}
	for i, p := range paths {
		role := " (fitted):"
		if i == 2 {
			role = " (not fitted, checked):"
		}
		if !strings.Contains(out, p+role) {
			t.Errorf("output lacks %q:\n%s", p+role, out)
		}
	}
}
