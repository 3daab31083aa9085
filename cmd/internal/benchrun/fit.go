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
	fit := &Fit{Weights: res.Weights, RMS: res.RMS, Max: res.Max, Pairs: res.Pairs}
	cm.Weights = res.Weights
	fit.predict(cm, results...)
	return fit, nil
}

// CostModel returns the cost model of r's model: its dimensions, the
// conversions at their defaults with r's Features and K, priced with w.
func (r *Result) CostModel(w convert.Weights) convert.CostModel {
	return convert.NewCostModel(r.Dims, convert.Sizes{"features": r.Features, "k": r.K}, w)
}

// FitModels fits one set of weights, from start, to the runs of results
// of models of any shape, each priced by its own cost model
// (Result.CostModel). The fit's crossovers are left empty: they belong to
// one model (Predict).
func FitModels(start convert.Weights, results ...*Result) (*Fit, error) {
	sets := make([]costfit.Set, len(results))
	for i, r := range results {
		sets[i] = costfit.Set{Model: r.CostModel(start), Samples: Samples(r, fmt.Sprint(i))}
	}
	res, err := costfit.FitSets(sets)
	if err != nil {
		return nil, err
	}
	return &Fit{Weights: res.Weights, RMS: res.RMS, Max: res.Max, Pairs: res.Pairs}, nil
}

// Predict returns fit with the crossovers its weights predict for r's
// model (Result.CostModel), against the original and r's baselines of
// known kind.
func (r *Result) Predict(fit *Fit) *Fit {
	out := *fit
	out.predict(r.CostModel(fit.Weights), r)
	return &out
}

// predict sets the crossovers cm predicts against the original, for the
// conversions the results ran, and, by their names in the first result,
// against its baselines of known kind.
func (fit *Fit) predict(cm convert.CostModel, results ...*Result) {
	fit.Crossover, fit.CrossoverVersus = map[convert.Form]int{}, nil
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
	if len(results) == 0 {
		return
	}
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
