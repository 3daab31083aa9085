// Package costfit fits the weights of convert's cost model to measured
// run times: how many multiply-accumulate equivalents an elementwise pass,
// an exponential, a fixed per-layer cost and each form's core MACs are
// worth on one machine, relative to the projections' and FFN's GEMMs.
//
// Only ratios between forms timed at the same length in the same run are
// fitted (each (run, length) group has its own unknown scale), so a
// machine that drifts between runs, or a run slower throughout, does not
// bias the weights.
package costfit

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/linearize/linearize/convert"
)

// Sample is one measured run time.
type Sample struct {
	Group string // runs with the same Group and N were timed together
	Form  convert.Form
	N     int
	Ms    float64 // median wall time
}

// Result is a fit.
type Result struct {
	Weights convert.Weights
	// RMS and Max are the root-mean-square and largest relative error of
	// the fitted ratios t_f / t_g over every pair of forms in a group.
	RMS, Max float64
	Pairs    int
}

// ErrTooFew is returned when the samples cannot determine the weights.
var ErrTooFew = errors.New("costfit: too few samples")

// params lists the fitted weights; Linear's core weight is the unit the
// others are measured against, with the projections' MACs.
var params = []struct {
	name string
	get  func(*convert.Weights) *float64
	form convert.Form // the form whose runs determine it; "" for all
}{
	{"original", func(w *convert.Weights) *float64 { return &w.Original }, convert.Original},
	{"fused", func(w *convert.Weights) *float64 { return &w.Fused }, convert.Fused},
	{"flash", func(w *convert.Weights) *float64 { return &w.Flash }, convert.Flash},
	{"pass", func(w *convert.Weights) *float64 { return &w.Pass }, ""},
	{"exp", func(w *convert.Weights) *float64 { return &w.Exp }, ""},
	{"fused-token", func(w *convert.Weights) *float64 { return &w.FusedToken }, convert.Fused},
	{"flash-token", func(w *convert.Weights) *float64 { return &w.FlashToken }, convert.Flash},
	{"token", func(w *convert.Weights) *float64 { return &w.Token }, ""},
	{"layer", func(w *convert.Weights) *float64 { return &w.Layer }, ""},
}

// neutral is where a weight the caller leaves at 0 starts: every core MAC
// at the projections' cost, a pass at 10 MAC-eq (memory-bound work), an
// exponential at 1, per-token and per-layer costs of about a hundredth of
// a BERT-base layer's per-token work at a few hundred tokens.
var neutral = convert.Weights{Original: 1, Fused: 1, Flash: 1, Linear: 1, Pass: 10, Exp: 1, FusedToken: 100, FlashToken: 100, Token: 100, Layer: 1e8}

// ridge is the weight of the pull of each log weight towards its start,
// against the sum of squared log-ratio residuals: a weight moved by a
// factor e costs what one ratio off by 1 % does.
const ridge = 1e-4

// Set is the samples of one model, priced by its cost model.
type Set struct {
	Model   convert.CostModel
	Samples []Sample
}

// Fit returns the weights for cm's model that best fit the samples' log
// time ratios within each group (least squares). cm's Weights (where
// zero, a neutral value) are the starting point and keep the values of any
// weight no sample determines (Fused when no fused run was timed, say).
func Fit(cm convert.CostModel, samples []Sample) (*Result, error) {
	return FitSets([]Set{{Model: cm, Samples: samples}})
}

// ratios are the time ratios of sets' samples: every pair of forms
// timed at the same length in the same group of the same set.
type ratios struct {
	sets   []Set
	keys   []groupKey
	groups map[groupKey][]Sample
	pairs  int
	// setWeight is the weight of each pair of a set in the fit: each set
	// weighs the same in all, its share split evenly over its pairs (the
	// weights sum to the number of pairs).
	setWeight []float64
	seen      map[convert.Form]bool // forms in some pair
}

type groupKey struct {
	set int
	g   string
	n   int
}

// newRatios groups sets' samples, refusing a time that is not a positive
// number.
func newRatios(sets []Set) (*ratios, error) {
	rs := &ratios{sets: sets, groups: map[groupKey][]Sample{}, seen: map[convert.Form]bool{}}
	for i, set := range sets {
		for _, s := range set.Samples {
			if s.Ms <= 0 || s.N <= 0 || math.IsNaN(s.Ms) || math.IsInf(s.Ms, 0) {
				return nil, fmt.Errorf("costfit: %s at n = %d: time %v is not a positive number", s.Form, s.N, s.Ms)
			}
			k := groupKey{i, s.Group, s.N}
			rs.groups[k] = append(rs.groups[k], s)
		}
	}
	for k, g := range rs.groups {
		if len(g) > 1 {
			rs.keys = append(rs.keys, k)
		}
	}
	sort.Slice(rs.keys, func(i, j int) bool {
		a, b := rs.keys[i], rs.keys[j]
		if a.set != b.set {
			return a.set < b.set
		}
		if a.g != b.g {
			return a.g < b.g
		}
		return a.n < b.n
	})
	setPairs := make([]int, len(sets))
	for _, k := range rs.keys {
		g := rs.groups[k]
		sort.Slice(g, func(i, j int) bool { return g[i].Form < g[j].Form })
		rs.pairs += len(g) * (len(g) - 1) / 2
		setPairs[k.set] += len(g) * (len(g) - 1) / 2
		for _, s := range g {
			rs.seen[s.Form] = true
		}
	}
	used := 0
	for _, p := range setPairs {
		if p > 0 {
			used++
		}
	}
	rs.setWeight = make([]float64, len(sets))
	for i, p := range setPairs {
		if p > 0 {
			rs.setWeight[i] = float64(rs.pairs) / float64(used*p)
		}
	}
	return rs, nil
}

// residuals calls fn with log(predicted ratio / measured ratio) of every
// pair, each set's model priced with w, and the pair's weight in the fit
// (setWeight), so that a model timed at many lengths and forms does not
// outweigh one timed at a few.
func (rs *ratios) residuals(w convert.Weights, fn func(r, weight float64)) {
	for _, k := range rs.keys {
		m := rs.sets[k.set].Model
		m.Weights = w
		g := rs.groups[k]
		for a := 0; a < len(g); a++ {
			for b := a + 1; b < len(g); b++ {
				meas := math.Log(g[a].Ms / g[b].Ms)
				pred := math.Log(m.Work(g[a].Form, k.n) / m.Work(g[b].Form, k.n))
				fn(pred-meas, rs.setWeight[k.set])
			}
		}
	}
}

// errors returns the root-mean-square and largest relative error of the
// ratios predicted with w.
func (rs *ratios) errors(w convert.Weights) (rms, most float64) {
	sum := 0.0
	rs.residuals(w, func(r, _ float64) {
		e := math.Abs(math.Expm1(r))
		sum += e * e
		most = math.Max(most, e)
	})
	return math.Sqrt(sum / float64(max(rs.pairs, 1))), most
}

// Check returns the errors of the time ratios of set's samples that its
// model predicts with its Weights, fitted or not: how far from the
// measured ratios the predictions are, on runs the weights were not
// fitted to.
func Check(set Set) (*Result, error) {
	rs, err := newRatios([]Set{set})
	if err != nil {
		return nil, err
	}
	if rs.pairs == 0 {
		return nil, fmt.Errorf("%w: no two forms timed at one length", ErrTooFew)
	}
	out := &Result{Weights: set.Model.Weights, Pairs: rs.pairs}
	out.RMS, out.Max = rs.errors(set.Model.Weights)
	return out, nil
}

// FitSets is Fit over the runs of several models, each priced by its own
// cost model (its dimensions and conversion sizes): one set of weights
// for all, each model's runs weighing the same in the fit however many
// ratios they give. The first set's Weights are the starting point.
func FitSets(sets []Set) (*Result, error) {
	if len(sets) == 0 {
		return nil, fmt.Errorf("%w: no models", ErrTooFew)
	}
	rs, err := newRatios(sets)
	if err != nil {
		return nil, err
	}
	seen, pairs := rs.seen, rs.pairs
	var free []int
	for i, p := range params {
		if p.form == "" || seen[p.form] {
			free = append(free, i)
		}
	}
	if pairs < 2*len(free) {
		return nil, fmt.Errorf("%w: %d ratios for %d weights", ErrTooFew, pairs, len(free))
	}
	start := sets[0].Model.Weights
	// Weights are fitted as logarithms so they stay positive; a weight
	// that starts at 0 starts at its neutral value, so that a fit from the
	// zero Weights depends on the samples alone (not on DefaultWeights,
	// which such a fit produces).
	x0 := make([]float64, len(free))
	for j, i := range free {
		v := *params[i].get(&start)
		if v <= 0 {
			v = *params[i].get(&neutral)
		}
		x0[j] = math.Log(v)
	}
	weights := func(x []float64) convert.Weights {
		w := start
		for j, i := range free {
			*params[i].get(&w) = math.Exp(x[j])
		}
		return w
	}
	// A weak pull of each log weight towards its start keeps weights the
	// ratios cannot tell apart (the core MACs, passes and exponentials of
	// a softmax form all grow as n²) near their starting values instead of
	// letting them drift to any extreme that fits as well.
	loss := func(x []float64) float64 {
		s := 0.0
		rs.residuals(weights(x), func(r, weight float64) { s += weight * r * r })
		for j := range x {
			d := x[j] - x0[j]
			s += ridge * d * d
		}
		if math.IsNaN(s) {
			return math.Inf(1)
		}
		return s
	}
	// Nelder-Mead from the start, restarted from its own answer until it
	// stops improving: derivative-free and deterministic.
	x, best := x0, loss(x0)
	for round := 0; round < 30; round++ {
		nx, f := nelderMead(loss, x, 1, 4000)
		if f >= best*(1-1e-10) {
			break
		}
		x, best = nx, f
	}
	out := &Result{Weights: weights(x), Pairs: pairs}
	out.RMS, out.Max = rs.errors(out.Weights)
	return out, nil
}

// nelderMead minimises f from x0 with an initial simplex of step size
// step along each axis, for at most iters iterations.
func nelderMead(f func([]float64) float64, x0 []float64, step float64, iters int) ([]float64, float64) {
	d := len(x0)
	pts := make([][]float64, d+1)
	val := make([]float64, d+1)
	for i := range pts {
		pts[i] = append([]float64(nil), x0...)
		if i > 0 {
			pts[i][i-1] += step
		}
		val[i] = f(pts[i])
	}
	at := func(c []float64, toward []float64, t float64) []float64 {
		p := make([]float64, d)
		for j := range p {
			p[j] = c[j] + t*(toward[j]-c[j])
		}
		return p
	}
	for it := 0; it < iters; it++ {
		order := make([]int, d+1)
		for i := range order {
			order[i] = i
		}
		sort.SliceStable(order, func(a, b int) bool { return val[order[a]] < val[order[b]] })
		ps, vs := make([][]float64, d+1), make([]float64, d+1)
		for i, o := range order {
			ps[i], vs[i] = pts[o], val[o]
		}
		pts, val = ps, vs
		if vs[d]-vs[0] <= 1e-14*(math.Abs(vs[0])+1e-300) {
			break
		}
		c := make([]float64, d)
		for _, p := range pts[:d] {
			for j := range c {
				c[j] += p[j] / float64(d)
			}
		}
		r := at(c, pts[d], -1)
		fr := f(r)
		switch {
		case fr < val[0]:
			e := at(c, pts[d], -2)
			if fe := f(e); fe < fr {
				pts[d], val[d] = e, fe
			} else {
				pts[d], val[d] = r, fr
			}
		case fr < val[d-1]:
			pts[d], val[d] = r, fr
		default:
			k := at(c, pts[d], 0.5)
			if fr < val[d] {
				k = at(c, r, 0.5)
			}
			if fk := f(k); fk < math.Min(fr, val[d]) {
				pts[d], val[d] = k, fk
				continue
			}
			for i := 1; i <= d; i++ {
				pts[i] = at(pts[0], pts[i], 0.5)
				val[i] = f(pts[i])
			}
		}
	}
	bi := 0
	for i := range val {
		if val[i] < val[bi] {
			bi = i
		}
	}
	return pts[bi], val[bi]
}
