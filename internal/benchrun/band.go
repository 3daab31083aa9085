package benchrun

import (
	"math"
	"math/rand/v2"
	"sort"
	"strconv"

	"github.com/linearize/linearize/convert"
)

// A measured crossover is where two timing curves meet. Where a linear
// form's advantage grows quickly with n it is well pinned; where the form
// runs within a few percent of its reference over hundreds of tokens (a
// Linformer against onnxruntime's flash kernel below 1K tokens), the
// timing noise of one run moves it by hundreds of tokens. Band says how
// far: it resamples each run's timed repeats with replacement, recomputes
// the medians and the crossover (as Summarize does), and returns the
// spread of the crossovers over the draws.

// bandDraws is the number of bootstrap draws; bandSeed fixes them so that
// a result gives the same band every time.
const (
	bandDraws = 400
	bandSeed  = 0x6c696e656172697a // "linearize"
)

// Beyond stands for a crossover past the longest measured length in a
// Band (the form was not faster there in that draw).
const Beyond = math.MaxInt

// Band returns the 5th and 95th percentiles of form f's measured crossover
// against the variant ref over bootstrap draws of the runs' repeats. A
// crossover at the shortest length both ran stands for "at most that
// length", one past the longest is Beyond. ok is false when a run used has
// fewer than 3 timed repeats or when no length has both runs.
func (r *Result) Band(f, ref convert.Form) (lo, hi int, ok bool) {
	lo, hi, _, _, ok = r.band(f, ref)
	return lo, hi, ok
}

// band is Band, with the shortest and longest lengths both runs had.
func (r *Result) band(f, ref convert.Form) (lo, hi, shortest, longest int, ok bool) {
	refRuns := r.okRuns(ref)
	var ns []int
	var own, base [][]float64
	for _, run := range r.sorted(f) {
		b := refRuns[run.Length]
		if run.Status != "ok" || b == nil || run.MedianMS <= 0 {
			continue
		}
		if len(run.TimesMS) < 3 || len(b.TimesMS) < 3 {
			return 0, 0, 0, 0, false
		}
		ns = append(ns, run.Length)
		own = append(own, run.TimesMS)
		base = append(base, b.TimesMS)
	}
	if len(ns) == 0 {
		return 0, 0, 0, 0, false
	}
	rng := rand.New(rand.NewPCG(bandSeed, uint64(len(ns))))
	draws := make([]int, bandDraws)
	sp := make([]float64, len(ns))
	var sample []float64
	resampledMedian := func(v []float64) float64 {
		sample = sample[:0]
		for range v {
			sample = append(sample, v[rng.IntN(len(v))])
		}
		return median(sample)
	}
	for d := range draws {
		for i := range ns {
			sp[i] = resampledMedian(base[i]) / resampledMedian(own[i])
		}
		c := crossing(ns, sp)
		if c == 0 {
			c = Beyond
		}
		draws[d] = c
	}
	sort.Ints(draws)
	return draws[bandDraws*5/100], draws[bandDraws*95/100-1], ns[0], ns[len(ns)-1], true
}

// bandText writes a band as "90 % of resampled runs: 398–466", with "≤ N"
// for a crossover at the shortest length and "> N" past the longest.
func (r *Result) bandText(f, ref convert.Form) string {
	lo, hi, shortest, longest, ok := r.band(f, ref)
	if !ok {
		return ""
	}
	end := func(c int) string {
		switch c {
		case Beyond:
			return "> " + strconv.Itoa(longest)
		case shortest:
			return "≤ " + strconv.Itoa(shortest)
		}
		return strconv.Itoa(c)
	}
	if lo == hi {
		return "90 % of resampled runs: " + end(lo)
	}
	return "90 % of resampled runs: " + end(lo) + " to " + end(hi)
}

// WithinBand reports whether the crossover of form f against ref predicted
// at pred lies within the factor tol of the measured band (see within);
// ok is false when there is no band (see Band).
func (r *Result) WithinBand(f, ref convert.Form, pred int, tol float64) (in, ok bool) {
	lo, hi, shortest, longest, ok := r.band(f, ref)
	if !ok {
		return false, false
	}
	return within(pred, lo, hi, shortest, longest, tol), true
}

// within reports whether a crossover predicted at pred lies within the
// factor tol (1.3 for 30 %) of some length in the measured band [lo, hi]
// (from Band). lo at the shortest measured length stands for "at most"
// it, so any prediction up to hi·tol passes; hi (and lo) Beyond for "past
// the longest", so any prediction from longest/tol passes.
func within(pred, lo, hi, shortest, longest int, tol float64) bool {
	p := float64(pred)
	if pred <= 0 {
		return false
	}
	if lo == Beyond {
		lo = longest
	}
	if hi != Beyond && p > float64(hi)*tol {
		return false
	}
	if lo == shortest {
		return true
	}
	return p >= float64(lo)/tol
}
