package benchrun

import (
	"fmt"
	"slices"
	"time"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
)

// Timing is the wall-clock time of repeated runs of one session.
type Timing struct {
	Runs   int
	Median time.Duration
	Min    time.Duration
	// CPU is the mean process CPU time (user+system, all threads) per
	// run, 0 where the OS does not report it. Unlike wall time it hardly
	// depends on other load on the machine; note that onnxruntime's
	// worker threads spin while waiting, which counts as CPU time.
	CPU time.Duration
}

// TimeRuns times sessions on the same inputs: warmup untimed rounds, then
// repeat rounds in which every session runs once, in turn, so that load
// from elsewhere on the machine affects all of them alike. It returns the
// median and fastest run of each session.
func TimeRuns(sessions []infer.Session, inputs map[string]*onnx.Tensor, warmup, repeat int) ([]Timing, error) {
	if repeat < 1 {
		return nil, fmt.Errorf("benchrun: repeat must be ≥ 1, got %d", repeat)
	}
	for i := 0; i < warmup; i++ {
		for _, s := range sessions {
			if _, err := s.Run(inputs); err != nil {
				return nil, err
			}
		}
	}
	ds := make([][]time.Duration, len(sessions))
	cpu := make([]time.Duration, len(sessions))
	for r := 0; r < repeat; r++ {
		for i, s := range sessions {
			c0, t0 := cpuTime(), time.Now()
			if _, err := s.Run(inputs); err != nil {
				return nil, err
			}
			ds[i] = append(ds[i], time.Since(t0))
			cpu[i] += cpuTime() - c0
		}
	}
	out := make([]Timing, len(sessions))
	for i, d := range ds {
		slices.Sort(d)
		out[i] = Timing{Runs: repeat, Median: d[repeat/2], Min: d[0], CPU: cpu[i] / time.Duration(repeat)}
	}
	return out, nil
}
