package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"

	"github.com/linearize/linearize/cmd/internal/benchrun"
	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/cmd/internal/costfit"
	"github.com/linearize/linearize/convert"
)

// runFitCost fits the weights of convert.DefaultWeights:
//
//	bin/linlab fit-cost docs/bench-crossover.json docs/bench-longctx.json docs/bench-gte.json --check docs/bench-fullsize.json
//
// --check is not a flag but the line between the results fitted and the
// results checked: FIT.json... --check CHECK.json... The results may be
// of models of different shapes: each is priced by its own cost model
// (benchrun.Result.CostModel), with one set of weights for all, and each
// weighs the same in the fit however many time ratios it gives.
func runFitCost(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fit-cost", flag.ContinueOnError)
	fitArgs, checkArgs := args, []string(nil)
	if i := slices.Index(args, "--check"); i >= 0 {
		fitArgs, checkArgs = args[:i], args[i+1:]
	}
	paths, err := cli.ParseFlags(fs, fitArgs, stdout)
	if err != nil {
		return err
	}
	checked, err := cli.ParseFlags(fs, checkArgs, stdout)
	if err != nil {
		return err
	}
	fitted := len(paths)
	paths = append(paths, checked...)
	if len(paths) == 0 {
		return cli.UsageError("want BENCH.json [BENCH.json...] [--check BENCH.json...]")
	}
	if fitted == 0 {
		return cli.UsageError("no result to fit before --check")
	}
	var results []*benchrun.Result
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return cli.BadInput(err)
		}
		var r benchrun.Result
		if err := json.Unmarshal(b, &r); err != nil {
			return cli.BadInput(fmt.Errorf("%s: %w", p, err))
		}
		if err := r.CostModel(convert.Weights{}).Validate(); err != nil {
			return cli.BadInput(fmt.Errorf("%s: %w", p, err))
		}
		r.Summarize() // the measured crossovers as this version defines them
		results = append(results, &r)
	}
	// Each model's conversions at their defaults, at its runs' Features
	// and K, fitted from neutral weights.
	fit, err := benchrun.FitModels(convert.Weights{}, results[:fitted]...)
	if err != nil {
		return cli.BadInput(err)
	}
	fmt.Fprintf(stdout, "weights: %v\nto 3 digits (convert.DefaultWeights): %v\n%d time ratios, RMS error %.1f%%, largest %.1f%%\n", fit.Weights, round3(fit.Weights), fit.Pairs, 100*fit.RMS, 100*fit.Max)
	for i, r := range results {
		what := "fitted"
		if i >= fitted {
			what = "not fitted, checked"
		}
		fmt.Fprintf(stdout, "\n%s (%s):\n  %d layers, hidden %d, FFN %s", paths[i], what, r.Dims.Layers, r.Dims.Hidden, r.Dims.FFNText())
		if c, err := costfit.Check(costfit.Set{Model: r.CostModel(fit.Weights), Samples: benchrun.Samples(r, "")}); err == nil {
			fmt.Fprintf(stdout, ": %d time ratios, RMS error %.1f%%, largest %.1f%%", c.Pairs, 100*c.RMS, 100*c.Max)
		}
		fmt.Fprintln(stdout)
		banded, in := 0, 0
		r.FitCrossovers(r.Predict(fit), func(f, base convert.Form, pred, meas int) {
			text, b, ok := r.Measured(f, base, meas, pred)
			fmt.Fprintf(stdout, "  %-12s vs %-8s predicted %5d, %s\n", f, base, pred, text)
			if ok {
				banded++
				if b.Within(pred, 1.3) {
					in++
				}
			}
		})
		if banded > 0 {
			fmt.Fprintf(stdout, "  %d of %d predicted crossovers within 30 %% of the measured band\n", in, banded)
		}
	}
	return nil
}

// round3 rounds every weight to 3 significant digits.
func round3(w convert.Weights) convert.Weights {
	for _, p := range []*float64{&w.Original, &w.Fused, &w.Flash, &w.Linear, &w.Pass, &w.Exp, &w.FusedToken, &w.FlashToken, &w.Token, &w.Layer} {
		v, _ := strconv.ParseFloat(strconv.FormatFloat(*p, 'g', 3, 64), 64)
		*p = v
	}
	return w
}
