package featsweep

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"text/tabwriter"

	"github.com/linearize/linearize/features"
	"github.com/linearize/linearize/internal/progress"
	"github.com/linearize/linearize/internal/splitmix"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/ops"
)

// Config describes an error sweep of the Performer estimator.
type Config struct {
	D        int                 // head width (default 64)
	N        int                 // sequence length (default 256)
	Features []int               // values of M (default 64, 256, 1024, 4096)
	Seeds    int                 // trials per cell, each with fresh inputs and ω (default 5)
	Sigma    float64             // std of the query and key entries (default 0.5)
	Kinds    []features.Kind     // ω kinds (default orthogonal, iid)
	Norms    []features.Norms    // row norms (default chi, sqrt-d, qmc)
	Kernel   ops.PerformerKernel // Performer kernel (default positive)
	Threads  int                 // goroutines for the Performer kernel
	Seed     uint64              // base seed; trial t uses Seed+t
	Progress io.Writer           // optional: one line per finished trial (internal/progress)
}

// Cell is the measured error for one (M, kind, norms) choice.
type Cell struct {
	M     int
	Kind  features.Kind
	Norms features.Norms
	// Mean and Std of the relative error ‖Performer − exact‖_F / ‖exact‖_F
	// of the attention output over the trials.
	Mean, Std float64
}

func (c *Config) defaults() {
	if c.D == 0 {
		c.D = 64
	}
	if c.N == 0 {
		c.N = 256
	}
	if len(c.Features) == 0 {
		c.Features = []int{64, 256, 1024, 4096}
	}
	if c.Seeds == 0 {
		c.Seeds = 5
	}
	if c.Sigma == 0 {
		c.Sigma = 0.5
	}
	if len(c.Kinds) == 0 {
		c.Kinds = []features.Kind{features.Orthogonal, features.IID}
	}
	if len(c.Norms) == 0 {
		c.Norms = []features.Norms{features.NormsChi, features.NormsSqrtD, features.NormsQMC}
	}
	if c.Kernel == "" {
		c.Kernel = ops.KernelPositive
	}
}

// Run measures the relative error of Performer attention (the float32
// Go kernel of ops.PerformerAttention) against exact softmax attention
// computed in float64, for one head with queries and keys drawn
// N(0, Sigma²), values N(0, 1) and scale 1/√D. Every cell of one trial
// uses the same inputs, so the comparison between kinds and norms is paired.
// Cells are ordered by kind, norms, then M.
func Run(cfg Config) ([]Cell, error) {
	cfg.defaults()
	if cfg.D < 1 || cfg.N < 1 || cfg.Seeds < 1 || !(cfg.Sigma > 0) || math.IsInf(cfg.Sigma, 0) {
		return nil, fmt.Errorf("featsweep: sweep needs d, n, seeds ≥ 1 and sigma > 0, got d=%d n=%d seeds=%d sigma=%g", cfg.D, cfg.N, cfg.Seeds, cfg.Sigma)
	}
	if cfg.D*cfg.N > 1<<24 {
		return nil, fmt.Errorf("featsweep: sweep of n=%d, d=%d is too large", cfg.N, cfg.D)
	}
	for _, m := range cfg.Features {
		if m < 1 || m > 1<<16 {
			return nil, fmt.Errorf("featsweep: sweep feature count %d out of range 1..65536", m)
		}
	}
	type key struct {
		kind  features.Kind
		norms features.Norms
		m     int
	}
	errs := map[key][]float64{}
	scale := 1 / math.Sqrt(float64(cfg.D))
	pr := progress.New(cfg.Progress, "sweep: trial", cfg.Seeds)
	for t := 0; t < cfg.Seeds; t++ {
		seed := cfg.Seed + uint64(t)
		rng := sweepStream(seed)
		gauss := func(sigma float64, n int) *onnx.Tensor {
			d := make([]float32, n*cfg.D)
			for i := range d {
				d[i] = float32(rng.NormFloat64() * sigma)
			}
			return onnx.NewFloat([]int{1, 1, n, cfg.D}, d)
		}
		q, k, v := gauss(cfg.Sigma, cfg.N), gauss(cfg.Sigma, cfg.N), gauss(1, cfg.N)
		exact := exactAttention(q.Floats(), k.Floats(), v.Floats(), cfg.N, cfg.D, scale)
		for _, kind := range cfg.Kinds {
			for _, norms := range cfg.Norms {
				for _, m := range cfg.Features {
					omega, err := features.Omega(seed, 0, 1, m, cfg.D, features.OmegaOptions{Kind: kind, Norms: norms})
					if err != nil {
						return nil, err
					}
					out, err := ops.Performer(q, k, v, omega, nil, ops.PerformerAttrs{Scale: float32(scale), Kernel: cfg.Kernel, Threads: cfg.Threads})
					if err != nil {
						return nil, err
					}
					var num, den float64
					for i, x := range out.Floats() {
						diff := float64(x) - exact[i]
						num += diff * diff
						den += exact[i] * exact[i]
					}
					kk := key{kind, norms, m}
					errs[kk] = append(errs[kk], math.Sqrt(num/den))
				}
			}
		}
		pr.Step("")
	}
	var cells []Cell
	for _, kind := range cfg.Kinds {
		for _, norms := range cfg.Norms {
			for _, m := range cfg.Features {
				e := errs[key{kind, norms, m}]
				var mean, ss float64
				for _, x := range e {
					mean += x
				}
				mean /= float64(len(e))
				for _, x := range e {
					ss += (x - mean) * (x - mean)
				}
				std := 0.0
				if len(e) > 1 {
					std = math.Sqrt(ss / float64(len(e)-1))
				}
				cells = append(cells, Cell{M: m, Kind: kind, Norms: norms, Mean: mean, Std: std})
			}
		}
	}
	return cells, nil
}

// exactAttention computes softmax(scale·Q·Kᵀ)·V for one head in float64:
// the sweep's own reference, like ops' test reference in
// ops/linear_helpers_test.go, which no package can import.
func exactAttention(q, k, v []float32, n, d int, scale float64) []float64 {
	out := make([]float64, n*d)
	p := make([]float64, n)
	for i := 0; i < n; i++ {
		top := math.Inf(-1)
		for j := 0; j < n; j++ {
			var s float64
			for c := 0; c < d; c++ {
				s += float64(q[i*d+c]) * float64(k[j*d+c])
			}
			p[j] = s * scale
			top = math.Max(top, p[j])
		}
		var sum float64
		for j := range p {
			p[j] = math.Exp(p[j] - top)
			sum += p[j]
		}
		for j := 0; j < n; j++ {
			w := p[j] / sum
			for c := 0; c < d; c++ {
				out[i*d+c] += w * float64(v[j*d+c])
			}
		}
	}
	return out
}

// Slope returns the least-squares slope of log(mean error) against log M
// for the cells of one (kind, norms) pair, in the order given.
func Slope(cells []Cell) float64 {
	var sx, sy, sxx, sxy float64
	n := float64(len(cells))
	for _, c := range cells {
		x, y := math.Log(float64(c.M)), math.Log(c.Mean)
		sx += x
		sy += y
		sxx += x * x
		sxy += x * y
	}
	return (n*sxy - sx*sy) / (n*sxx - sx*sx)
}

// WriteTable prints the cells as a Markdown table: one row per (kind,
// norms) with the mean ± std relative error for each M and the log-log
// slope of the mean.
func WriteTable(w io.Writer, cfg Config, cells []Cell) error {
	cfg.defaults()
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	fmt.Fprintf(tw, "Performer (%s kernel) vs exact softmax attention, float64 reference: relative error ‖out − exact‖/‖exact‖, mean ± std over %d seeds\n", cfg.Kernel, cfg.Seeds)
	fmt.Fprintf(tw, "d = %d, n = %d, q,k ~ N(0, %g²), v ~ N(0, 1), scale 1/√d\n\n", cfg.D, cfg.N, cfg.Sigma)
	fmt.Fprint(tw, "| omega\t| norms\t")
	for _, m := range cfg.Features {
		fmt.Fprintf(tw, "| M = %d\t", m)
	}
	fmt.Fprint(tw, "| slope\t|\n|---\t|---\t")
	for range cfg.Features {
		fmt.Fprint(tw, "|---\t")
	}
	fmt.Fprint(tw, "|---\t|\n")
	for i := 0; i+len(cfg.Features) <= len(cells); i += len(cfg.Features) {
		row := cells[i : i+len(cfg.Features)]
		fmt.Fprintf(tw, "| %s\t| %s\t", row[0].Kind, row[0].Norms)
		for _, c := range row {
			fmt.Fprintf(tw, "| %.4f ± %.4f\t", c.Mean, c.Std)
		}
		slope := math.NaN()
		if len(row) > 1 {
			slope = Slope(row)
		}
		fmt.Fprintf(tw, "| %.2f\t|\n", slope)
	}
	return tw.Flush()
}

// sweepStream is the generator of one trial's inputs: the stream that
// features drew them from when the sweep lived there (its stream tag 4,
// layer 0, head 0), so that a seed gives the same table as before;
// splitmix's test pins the hash to the reference SplitMix64.
func sweepStream(seed uint64) *rand.Rand {
	const tagSweep = 4
	x := uint64(tagSweep) << 56
	return rand.New(rand.NewPCG(seed, splitmix.Hash(x)))
}
