package convert

import (
	"fmt"

	"github.com/linearize/linearize/onnx/onnxpb"
)

// BenchOptions configures the model variants a benchmark compares.
type BenchOptions struct {
	Variants []Form // default original, performer, linformer, local-pooled
	Lengths  []int  // sequence lengths to run
	Features int    // Performer M (default 256)
	K        int    // Linformer k (default 256)
	Seed     uint64 // seeds ω and E/F
	// Block and Segments configure the local-pooled variant (default 64
	// and 64, with both sinks).
	Block, Segments int
}

// BenchVariants prepares the models a benchmark runs: the original with its
// position table extended (copy) when it is shorter than the longest
// length, and from it the Performer and Linformer conversions (Linformer's
// projections sized for the longest length). It returns the models by form
// and notes on what was done. m is not modified.
func BenchVariants(m *onnxpb.ModelProto, o BenchOptions) (map[Form]*onnxpb.ModelProto, []string, error) {
	o = o.withDefaults()
	if len(o.Lengths) == 0 {
		return nil, nil, fmt.Errorf("convert: bench: no lengths")
	}
	longest := 0
	for _, n := range o.Lengths {
		if n <= 0 {
			return nil, nil, fmt.Errorf("convert: bench: length %d must be positive", n)
		}
		longest = max(longest, n)
	}
	var notes []string
	base := m
	dims, _, err := ModelDims(m)
	if err != nil {
		return nil, nil, fmt.Errorf("convert: bench: %w", err)
	}
	if dims.MaxPositions > 0 && dims.MaxPositions < longest {
		ext, rep, err := ExtendPositions(m, ExtendOptions{MaxPositions: longest, Method: "copy"})
		if err != nil {
			return nil, nil, fmt.Errorf("convert: bench: %w", err)
		}
		base = ext
		notes = append(notes, "extended "+rep.String())
	}
	out := map[Form]*onnxpb.ModelProto{}
	for _, f := range o.Variants {
		switch f {
		case Original:
			out[f] = base
		case Performer:
			pm, rep, err := ToPerformer(base, PerformerOptions{Features: o.Features, Seed: o.Seed})
			if err != nil {
				return nil, nil, fmt.Errorf("convert: bench: %w", err)
			}
			if len(rep.Converted) == 0 {
				return nil, nil, fmt.Errorf("convert: bench: performer: no attention block could be converted")
			}
			out[f] = pm
			notes = append(notes, fmt.Sprintf("performer: %d of %d blocks converted, M = %d", len(rep.Converted), rep.Blocks, o.Features))
		case Linformer:
			lm, rep, err := ToLinformer(base, LinformerOptions{K: o.K, MaxLen: longest, Seed: o.Seed})
			if err != nil {
				return nil, nil, fmt.Errorf("convert: bench: %w", err)
			}
			if len(rep.Converted) == 0 {
				return nil, nil, fmt.Errorf("convert: bench: linformer: no attention block could be converted")
			}
			out[f] = lm
			notes = append(notes, fmt.Sprintf("linformer: %d of %d blocks converted, k = %d, N = %d", len(rep.Converted), rep.Blocks, o.K, longest))
		case LocalPooled:
			lp, rep, err := ToLocalPooled(base, LocalPooledOptions{Block: o.Block, Segments: o.Segments})
			if err != nil {
				return nil, nil, fmt.Errorf("convert: bench: %w", err)
			}
			if len(rep.Converted) == 0 {
				return nil, nil, fmt.Errorf("convert: bench: local-pooled: no attention block could be converted")
			}
			out[f] = lp
			notes = append(notes, fmt.Sprintf("local-pooled: %d of %d blocks converted, b = %d, k = %d, sinks first,last", len(rep.Converted), rep.Blocks, o.Block, o.Segments))
		default:
			return nil, nil, fmt.Errorf("convert: bench: unknown variant %q (want original, performer, linformer or local-pooled)", f)
		}
	}
	return out, notes, nil
}

func (o BenchOptions) withDefaults() BenchOptions {
	if len(o.Variants) == 0 {
		o.Variants = []Form{Original, Performer, Linformer, LocalPooled}
	}
	if o.Block == 0 {
		o.Block = 64
	}
	if o.Segments == 0 {
		o.Segments = 64
	}
	if o.Features == 0 {
		o.Features = 256
	}
	if o.K == 0 {
		o.K = 256
	}
	return o
}

// BenchRun is one (variant, length) measurement; the JSON names follow
// issue 7.
type BenchRun struct {
	Variant          Form    `json:"variant"`
	Length           int     `json:"length"`
	Status           string  `json:"status"` // ok, skipped or failed
	MedianMS         float64 `json:"median_ms"`
	PeakRSSMB        float64 `json:"peak_rss_mb"`
	PredictedSpeedup float64 `json:"predicted_speedup"`
	Speedup          float64 `json:"speedup,omitempty"`      // original median / this median
	MemoryRatio      float64 `json:"memory_ratio,omitempty"` // this peak RSS / original's
	PredictedPeakMB  float64 `json:"predicted_peak_mb"`
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
}

// BenchResult is what a benchmark writes with --json.
type BenchResult struct {
	Model    string     `json:"model"`
	Threads  int        `json:"threads"`
	Features int        `json:"features"`
	K        int        `json:"k"`
	Repeat   int        `json:"repeat"`
	Dims     Dims       `json:"dims"`
	Notes    []string   `json:"notes,omitempty"`
	Runs     []BenchRun `json:"runs"`
	// Crossover is the cost model's predicted crossover per form, and
	// MeasuredCrossover the first measured length from which the form was
	// faster than the original at every longer measured length (0 when
	// never, −1 when the original did not run).
	Crossover         map[Form]int `json:"predicted_crossover"`
	MeasuredCrossover map[Form]int `json:"measured_crossover"`
}

// Summarize fills Speedup and MemoryRatio of every run from the original's
// run at the same length, and the measured crossovers.
func (r *BenchResult) Summarize() {
	orig := map[int]*BenchRun{}
	for i := range r.Runs {
		if r.Runs[i].Variant == Original && r.Runs[i].Status == "ok" {
			orig[r.Runs[i].Length] = &r.Runs[i]
		}
	}
	for i := range r.Runs {
		run := &r.Runs[i]
		o := orig[run.Length]
		if run.Status != "ok" || o == nil || run.MedianMS <= 0 {
			continue
		}
		run.Speedup = o.MedianMS / run.MedianMS
		if o.MedianCPUMS > 0 && run.MedianCPUMS > 0 {
			run.CPUSpeedup = o.MedianCPUMS / run.MedianCPUMS
		}
		if o.PeakRSSMB > 0 {
			run.MemoryRatio = run.PeakRSSMB / o.PeakRSSMB
		}
	}
	r.MeasuredCrossover = map[Form]int{}
	for _, f := range []Form{Performer, Linformer, LocalPooled} {
		cross, seen := 0, false
		for _, run := range r.sorted(f) {
			if run.Status != "ok" {
				continue
			}
			if orig[run.Length] == nil {
				continue
			}
			seen = true
			if run.Speedup > 1 {
				if cross == 0 {
					cross = run.Length
				}
			} else {
				cross = 0
			}
		}
		if !seen {
			if len(r.sorted(f)) > 0 {
				r.MeasuredCrossover[f] = -1
			}
			continue
		}
		r.MeasuredCrossover[f] = cross
	}
}

func (r *BenchResult) sorted(f Form) []BenchRun {
	var out []BenchRun
	for _, run := range r.Runs {
		if run.Variant == f {
			out = append(out, run)
		}
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].Length < out[j-1].Length; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}
