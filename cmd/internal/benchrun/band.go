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

// Band is the spread of a measured crossover: Lo and Hi are its 5th and
// 95th percentiles over bootstrap draws, Shortest and Longest the lengths
// both runs had. Lo or Hi equal to Shortest stands for "at most that
// length"; Beyond for "past Longest".
type Band struct {
	Lo, Hi, Shortest, Longest int
}

// Band returns the band of form f's measured crossover against the variant
// ref over bootstrap draws of the runs' repeats. ok is false when a run
// used has fewer than 3 timed repeats or when no length has both runs.
func (r *Result) Band(f, ref convert.Form) (b Band, ok bool) {
	refRuns := r.okRuns(ref)
	var ns []int
	var own, base [][]float64
	for _, run := range r.sorted(f) {
		b := refRuns[run.Length]
		if run.Status != "ok" || b == nil || run.MedianMS <= 0 {
			continue
		}
		if len(run.TimesMS) < 3 || len(b.TimesMS) < 3 {
			return Band{}, false
		}
		ns = append(ns, run.Length)
		own = append(own, run.TimesMS)
		base = append(base, b.TimesMS)
	}
	if len(ns) == 0 {
		return Band{}, false
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
	return Band{Lo: draws[bandDraws*5/100], Hi: draws[bandDraws*95/100-1], Shortest: ns[0], Longest: ns[len(ns)-1]}, true
}

// String writes the band as "90 % of resampled runs: 398 to 466", with
// "≤ N" for a crossover at the shortest length and "> N" past the longest.
func (b Band) String() string {
	end := func(c int) string {
		switch c {
		case Beyond:
			return "> " + strconv.Itoa(b.Longest)
		case b.Shortest:
			return "≤ " + strconv.Itoa(b.Shortest)
		}
		return strconv.Itoa(c)
	}
	if b.Lo == b.Hi {
		return "90 % of resampled runs: " + end(b.Lo)
	}
	return "90 % of resampled runs: " + end(b.Lo) + " to " + end(b.Hi)
}

// Within reports whether a crossover predicted at pred lies within the
// factor tol (1.3 for 30 %) of some length in the band. Lo at the shortest
// length stands for "at most" it, so any prediction up to Hi·tol passes;
// Beyond for "past the longest", so any prediction from Longest/tol passes.
func (b Band) Within(pred int, tol float64) bool {
	p := float64(pred)
	if pred <= 0 {
		return false
	}
	lo := b.Lo
	if lo == Beyond {
		lo = b.Longest
	}
	if b.Hi != Beyond && p > float64(b.Hi)*tol {
		return false
	}
	if lo == b.Shortest {
		return true
	}
	return p >= float64(lo)/tol
}
