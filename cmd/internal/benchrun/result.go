package benchrun

import (
	"cmp"
	"math"
	"slices"

	"github.com/linearize/linearize/convert"
)

// Measurement is one (variant, length) measurement; the JSON names follow
// issue 7.
type Measurement struct {
	Variant          convert.Form `json:"variant"`
	Length           int          `json:"length"`
	Status           string       `json:"status"` // ok, skipped or failed
	MedianMS         float64      `json:"median_ms"`
	PeakRSSMB        float64      `json:"peak_rss_mb"`
	PredictedSpeedup float64      `json:"predicted_speedup"`
	Speedup          float64      `json:"speedup,omitempty"`      // original median / this median
	MemoryRatio      float64      `json:"memory_ratio,omitempty"` // this peak RSS / original's
	PredictedPeakMB  float64      `json:"predicted_peak_mb"`
	// LoadPeakRSSMB is the peak while loading the model; PeakRSSMB is the
	// peak while running (the child resets the high-water mark after
	// loading), which is what the forms differ in.
	LoadPeakRSSMB float64   `json:"load_peak_rss_mb,omitempty"`
	TimesMS       []float64 `json:"times_ms,omitempty"`
	// MedianCPUMS is the median CPU time (user + system, all threads) of
	// a run, and CPUSpeedup the original's over this one: on a machine
	// shared with other work, wall time includes waiting for a core and
	// CPU time does not.
	MedianCPUMS float64   `json:"median_cpu_ms,omitempty"`
	CPUSpeedup  float64   `json:"cpu_speedup,omitempty"`
	CPUTimesMS  []float64 `json:"cpu_times_ms,omitempty"`
	Reason      string    `json:"reason,omitempty"`
	// Baseline marks the run of a baseline model (Variant is its name).
	Baseline bool `json:"baseline,omitempty"`
	// Versus holds the ratios against each baseline (by name) that ran
	// at the same length: its median over this one's (Speedup, CPUSpeedup)
	// and this peak RSS over its (MemoryRatio), with the cost model's
	// prediction when the baseline's kind is known.
	Versus map[string]Ratio `json:"versus,omitempty"`
}

// Ratio is one run compared with one baseline at the same length.
type Ratio struct {
	Speedup          float64 `json:"speedup,omitempty"`
	CPUSpeedup       float64 `json:"cpu_speedup,omitempty"`
	MemoryRatio      float64 `json:"memory_ratio,omitempty"`
	PredictedSpeedup float64 `json:"predicted_speedup,omitempty"`
}

// Result is what a benchmark writes with --json.
type Result struct {
	Model    string        `json:"model"`
	Threads  int           `json:"threads"`
	Features int           `json:"features"`
	K        int           `json:"k"`
	Repeat   int           `json:"repeat"`
	Dims     convert.Dims  `json:"dims"`
	Notes    []string      `json:"notes,omitempty"`
	Runs     []Measurement `json:"runs"`
	// Crossover is the cost model's predicted crossover per form, and
	// MeasuredCrossover the length from which the form was faster than
	// the original at every longer measured length: interpolated between
	// the last measured length where it was not faster and the next (the
	// log of the speedup linear in the log of the length), the shortest
	// length when it was faster at all, 0 when it was not faster at the
	// longest, −1 when the original did not run.
	Crossover         map[convert.Form]int `json:"predicted_crossover"`
	MeasuredCrossover map[convert.Form]int `json:"measured_crossover"`
	// Baselines are the models given besides the original; the
	// crossovers against each (by name) are as above, the predicted ones
	// only for baselines of known kind. Weights are the cost model's
	// (convert.CostModel.Weights) used for every prediction.
	Baselines               []Baseline                      `json:"baselines,omitempty"`
	CrossoverVersus         map[string]map[convert.Form]int `json:"predicted_crossover_versus,omitempty"`
	MeasuredCrossoverVersus map[string]map[convert.Form]int `json:"measured_crossover_versus,omitempty"`
	Weights                 convert.Weights                 `json:"weights"`
	// Fit, when asked for, holds the weights fitted to this run's time
	// ratios (cmd/internal/costfit) and the crossovers they predict.
	Fit *Fit `json:"fit,omitempty"`
}

// Fit is a cost model fitted to a run.
type Fit struct {
	Weights convert.Weights `json:"weights"`
	// RMS and Max are the fitted ratios' relative errors over Pairs
	// pairs of forms timed at the same length.
	RMS   float64 `json:"rms_error"`
	Max   float64 `json:"max_error"`
	Pairs int     `json:"pairs"`
	// Crossover and CrossoverVersus are as in Result, predicted with the
	// fitted weights.
	Crossover       map[convert.Form]int            `json:"predicted_crossover"`
	CrossoverVersus map[string]map[convert.Form]int `json:"predicted_crossover_versus,omitempty"`
}

// Summarize fills Speedup and MemoryRatio of every run from the original's
// run at the same length, Versus from each baseline's, and the measured
// crossovers of the linear forms against the original and each baseline.
func (r *Result) Summarize() {
	orig := r.okRuns(convert.Original)
	for i := range r.Runs {
		run := &r.Runs[i]
		if q, ok := ratio(run, orig[run.Length]); ok {
			run.Speedup, run.CPUSpeedup, run.MemoryRatio = q.Speedup, q.CPUSpeedup, q.MemoryRatio
		}
	}
	r.MeasuredCrossover = r.measuredCrossover(orig)
	if len(r.Baselines) == 0 {
		return
	}
	r.MeasuredCrossoverVersus = map[string]map[convert.Form]int{}
	for _, b := range r.Baselines {
		ref := r.okRuns(convert.Form(b.Name))
		for i := range r.Runs {
			run := &r.Runs[i]
			if run.Variant == convert.Form(b.Name) {
				continue
			}
			q, ok := ratio(run, ref[run.Length])
			if !ok {
				continue
			}
			if run.Versus == nil {
				run.Versus = map[string]Ratio{}
			}
			q.PredictedSpeedup = run.Versus[b.Name].PredictedSpeedup
			run.Versus[b.Name] = q
		}
		r.MeasuredCrossoverVersus[b.Name] = r.measuredCrossover(ref)
	}
}

// okRuns maps length to the successful run of variant f.
func (r *Result) okRuns(f convert.Form) map[int]*Measurement {
	out := map[int]*Measurement{}
	for i := range r.Runs {
		if r.Runs[i].Variant == f && r.Runs[i].Status == "ok" {
			out[r.Runs[i].Length] = &r.Runs[i]
		}
	}
	return out
}

// ratio compares run with the reference run ref at the same length.
func ratio(run, ref *Measurement) (Ratio, bool) {
	var q Ratio
	if ref == nil || run.Status != "ok" || run.MedianMS <= 0 {
		return q, false
	}
	q.Speedup = ref.MedianMS / run.MedianMS
	if ref.MedianCPUMS > 0 && run.MedianCPUMS > 0 {
		q.CPUSpeedup = ref.MedianCPUMS / run.MedianCPUMS
	}
	if ref.PeakRSSMB > 0 {
		q.MemoryRatio = run.PeakRSSMB / ref.PeakRSSMB
	}
	return q, true
}

// measuredCrossover is, per linear form, the length from which the form
// was faster than the reference at every longer length where both ran
// (see Result.MeasuredCrossover).
func (r *Result) measuredCrossover(ref map[int]*Measurement) map[convert.Form]int {
	out := map[convert.Form]int{}
	for _, c := range convert.Conversions() {
		f := c.Form()
		var ns []int
		var sp []float64
		runs := r.sorted(f)
		for _, run := range runs {
			if run.Status != "ok" || ref[run.Length] == nil || run.MedianMS <= 0 {
				continue
			}
			ns = append(ns, run.Length)
			sp = append(sp, ref[run.Length].MedianMS/run.MedianMS)
		}
		if len(ns) == 0 {
			if len(runs) > 0 {
				out[f] = -1
			}
			continue
		}
		out[f] = crossing(ns, sp)
	}
	return out
}

// crossing returns the length from which the speedups sp measured at the
// increasing lengths ns stay above 1: ns[0] when every one is, 0 when the
// last one is not, and otherwise the point between the last length where
// the speedup is at most 1 and the next where the log speedup, linear in
// the log length, crosses 0.
func crossing(ns []int, sp []float64) int {
	last := -1
	for i, s := range sp {
		if s <= 1 {
			last = i
		}
	}
	switch {
	case last < 0:
		return ns[0]
	case last == len(ns)-1:
		return 0
	}
	n0, n1 := math.Log(float64(ns[last])), math.Log(float64(ns[last+1]))
	s0, s1 := math.Log(sp[last]), math.Log(sp[last+1])
	t := -s0 / (s1 - s0)
	return int(math.Round(math.Exp(n0 + t*(n1-n0))))
}

// sorted returns the runs of variant f by increasing length.
func (r *Result) sorted(f convert.Form) []Measurement {
	var out []Measurement
	for _, run := range r.Runs {
		if run.Variant == f {
			out = append(out, run)
		}
	}
	slices.SortStableFunc(out, func(a, b Measurement) int { return cmp.Compare(a.Length, b.Length) })
	return out
}
