package benchrun

import (
	"fmt"

	"github.com/linearize/linearize/cmd/internal/costfit"
	"github.com/linearize/linearize/convert"
)

// Samples returns r's successful runs as cost-fit samples of group
// group: the variants by their form, the baselines by their kind
// (baselines of unknown kind are left out).
func Samples(r *Result, group string) []costfit.Sample {
	kind := map[convert.Form]convert.Form{}
	for _, b := range r.Baselines {
		kind[convert.Form(b.Name)] = b.Kind
	}
	var out []costfit.Sample
	for _, run := range r.Runs {
		if run.Status != "ok" || run.MedianMS <= 0 {
			continue
		}
		f := run.Variant
		if run.Baseline {
			f = kind[f]
		}
		if f == "" {
			continue
		}
		out = append(out, costfit.Sample{Group: group, Form: f, N: run.Length, Ms: run.MedianMS})
	}
	return out
}

// FitWeights fits cm's weights to the runs of every result (each its own
// group) and returns the fit with the crossovers it predicts against the
// original and, by their names in the first result, its baselines of
// known kind.
func FitWeights(cm convert.CostModel, results ...*Result) (*Fit, error) {
	var samples []costfit.Sample
	for i, r := range results {
		samples = append(samples, Samples(r, fmt.Sprint(i))...)
	}
	res, err := costfit.Fit(cm, samples)
	if err != nil {
		return nil, err
	}
	cm.Weights = res.Weights
	fit := &Fit{Weights: res.Weights, RMS: res.RMS, Max: res.Max, Pairs: res.Pairs, Crossover: map[convert.Form]int{}}
	forms := map[convert.Form]bool{}
	for _, r := range results {
		for _, run := range r.Runs {
			if _, ok := convert.LookupConversion(string(run.Variant)); ok && !run.Baseline {
				forms[run.Variant] = true
			}
		}
	}
	for f := range forms {
		fit.Crossover[f] = cm.Crossover(f)
	}
	if len(results) > 0 {
		for _, b := range results[0].Baselines {
			switch b.Kind {
			case convert.Original, convert.Fused, convert.Flash:
			default:
				continue
			}
			if fit.CrossoverVersus == nil {
				fit.CrossoverVersus = map[string]map[convert.Form]int{}
			}
			fit.CrossoverVersus[b.Name] = map[convert.Form]int{}
			for f := range forms {
				fit.CrossoverVersus[b.Name][f] = cm.CrossoverOver(b.Kind, f)
			}
		}
	}
	return fit, nil
}
