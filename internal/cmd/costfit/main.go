// Command costfit fits the cost model's weights (convert.Weights) to the
// time ratios of one or more `convert bench --json-out` results and prints
// them with the crossovers they predict beside the measured ones; the
// weights of convert.DefaultWeights come from it:
//
//	go run ./internal/cmd/costfit docs/bench-crossover.json docs/bench.json
//
// Results after --check are not fitted, only compared with the fit's
// predictions (a check on runs the weights have not seen). Every result
// must be of the same model and options (M, k, b, segments).
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/internal/benchrun"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "costfit:", err)
		os.Exit(1)
	}
}

func run(paths []string) error {
	if len(paths) == 0 {
		return fmt.Errorf("usage: costfit BENCH.json [BENCH.json...] [--check BENCH.json...]")
	}
	var results []*benchrun.Result
	fitted := len(paths)
	for i, p := range paths {
		if p == "--check" {
			fitted = i
			paths = append(paths[:i:i], paths[i+1:]...)
			break
		}
	}
	if fitted == 0 {
		return fmt.Errorf("no result to fit before --check")
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var r benchrun.Result
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if len(results) > 0 && (r.Dims != results[0].Dims || r.Features != results[0].Features || r.K != results[0].K) {
			return fmt.Errorf("%s: another model or options than %s", p, paths[0])
		}
		r.Summarize() // the measured crossovers as this version defines them
		results = append(results, &r)
	}
	r0 := results[0]
	cm := convert.CostModel{Dims: r0.Dims, Features: r0.Features, K: r0.K, Block: 64, Segments: 64, Sinks: 2, Landmarks: convert.DefaultLaraLandmarks, Samples: 1}
	fit, err := benchrun.FitWeights(cm, results[:fitted]...)
	if err != nil {
		return err
	}
	fmt.Printf("weights: %v\nto 3 digits (convert.DefaultWeights): %v\n%d time ratios, RMS error %.1f%%, largest %.1f%%\n", fit.Weights, round3(fit.Weights), fit.Pairs, 100*fit.RMS, 100*fit.Max)
	for i, r := range results {
		what := "fitted"
		if i >= fitted {
			what = "not fitted, checked"
		}
		fmt.Printf("\n%s (%s):\n", paths[i], what)
		banded, in := 0, 0
		r.FitCrossovers(fit, func(f, base convert.Form, pred, meas int) {
			text, b, ok := r.Measured(f, base, meas, pred)
			fmt.Printf("  %-12s vs %-8s predicted %5d, %s\n", f, base, pred, text)
			if ok {
				banded++
				if b.Within(pred, 1.3) {
					in++
				}
			}
		})
		if banded > 0 {
			fmt.Printf("  %d of %d predicted crossovers within 30 %% of the measured band\n", in, banded)
		}
	}
	return nil
}

// round3 rounds every weight to 3 significant digits.
func round3(w convert.Weights) convert.Weights {
	for _, p := range []*float64{&w.Original, &w.Fused, &w.Flash, &w.Linear, &w.Pass, &w.Exp, &w.FusedToken, &w.FlashToken, &w.Layer} {
		v, _ := strconv.ParseFloat(strconv.FormatFloat(*p, 'g', 3, 64), 64)
		*p = v
	}
	return w
}
