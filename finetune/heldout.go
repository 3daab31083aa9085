package finetune

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// This file holds the held-out guard every fit goes through: the split of
// the calibration batch rows (documents) into rows to train on and rows to
// hold out, and the check of the whole fitted model against the converted
// one on the held-out rows (the loop that keeps each layer's parameters
// of lowest held-out loss is train.go's).

// rowSplit returns the calibration batch rows (0..b−1, a row being a
// document) to train on and to hold out, in increasing order, under the
// options: Options.HeldOut when set, else a seeded draw (Options.Seed) of
// Options.HeldOutFraction of the rows, at least one, leaving at least one
// to train on. It is a function of (HeldOut or Seed, HeldOutFraction, b)
// only, so every layer and every fit of one call sees the same split.
// When nothing is held out (Options.Unguarded, a batch of one row, or a
// HeldOut without a marked row) held is empty and unguarded says why.
func (o *Options) rowSplit(b int) (train, held []int, unguarded string, err error) {
	if b < 1 {
		return nil, nil, "", fmt.Errorf("finetune: no calibration rows")
	}
	if err := o.checkGuard(); err != nil {
		return nil, nil, "", err
	}
	all := allRows(nil, b)
	switch {
	case o.HeldOut != nil:
		if len(o.HeldOut) != b {
			return nil, nil, "", fmt.Errorf("finetune: HeldOut has %d entries for %d calibration rows", len(o.HeldOut), b)
		}
		for r, h := range o.HeldOut {
			if h {
				held = append(held, r)
			} else {
				train = append(train, r)
			}
		}
		if len(train) == 0 {
			return nil, nil, "", fmt.Errorf("finetune: every one of the %d calibration rows is held out: nothing to train on", b)
		}
		if len(held) == 0 {
			return train, nil, "no calibration row marked held out", nil
		}
		return train, held, "", nil
	case o.Unguarded:
		return all, nil, "unguarded fit asked for", nil
	case b == 1:
		return all, nil, "a single calibration row (document): nothing to hold out", nil
	}
	f := o.HeldOutFraction
	if f == 0 {
		f = DefaultHeldOutFraction
	}
	k := min(max(int(math.Round(f*float64(b))), 1), b-1)
	rng := rand.New(rand.NewPCG(o.Seed, 0x4e1d0c))
	isHeld := make([]bool, b)
	for _, r := range rng.Perm(b)[:k] {
		isHeld[r] = true
	}
	for r := range b {
		if isHeld[r] {
			held = append(held, r)
		} else {
			train = append(train, r)
		}
	}
	return train, held, "", nil
}

// targetRows is the number of calibration batch rows: the first
// dimension of the captured targets of nodes (0 when there are none).
func targetRows(ref map[string]*onnx.Tensor, nodes []targetNode) int {
	if len(nodes) == 0 {
		return 0
	}
	if t := ref[nodes[0].target]; t != nil && len(t.Shape) > 0 {
		return t.Shape[0]
	}
	return 0
}

// splitFor resolves the row split of a fit whose layer values have b
// batch rows and records it in rep.
func splitFor(opt *Options, rep *Report, b int) (train, held []int, err error) {
	train, held, why, err := opt.rowSplit(b)
	if err != nil {
		return nil, nil, err
	}
	rep.Rows, rep.HeldOutRows, rep.Unguarded = b, held, why
	if rep.HeldOutRows == nil {
		rep.HeldOutRows = []int{}
	}
	return train, held, nil
}

// HeldOutCheck compares, on the held-out rows, the converted model given
// to the fit (before) and the fitted model (after) with the original, on
// the original's first graph output with a token axis (else its first
// output). The fitted model counts as better (Better) only when it is
// better on both measures: a lower relative error, and a mean-pooled
// cosine no lower.
type HeldOutCheck struct {
	Rows   int    `json:"rows"`   // held-out rows compared
	Output string `json:"output"` // the graph output compared
	// The relative error ‖a−b‖/‖b‖ of the output over the real tokens: it
	// weighs every token of every held-out row (token-level uses).
	RelErrBefore float64 `json:"rel_err_before"`
	RelErrAfter  float64 `json:"rel_err_after"`
	// The output's mean over the real tokens of each row, cosine with the
	// original's, mean over rows: the sentence embedding of mean-pooling
	// models. Absent when the output has no token axis. A fit can lower
	// the relative error and the pooled cosine at once (on
	// all-MiniLM-L6-v2 local+pooled, 16 documents: 0.327 → 0.309 and
	// 0.969 → 0.965); that is not better.
	PooledCosBefore *float64 `json:"pooled_cos_before,omitempty"`
	PooledCosAfter  *float64 `json:"pooled_cos_after,omitempty"`
	// AfterBroken is set when the fitted model's output cannot be compared
	// (non-finite values, say): it counts as worse.
	AfterBroken string `json:"after_broken,omitempty"`
}

// Better reports whether the fitted model is better than the converted
// one on the held-out rows: a strictly lower relative error and, when the
// output has a token axis, a mean-pooled cosine no lower.
func (c *HeldOutCheck) Better() bool {
	if c.AfterBroken != "" || !(c.RelErrAfter < c.RelErrBefore) {
		return false
	}
	if c.PooledCosBefore != nil {
		return c.PooledCosAfter != nil && *c.PooledCosAfter >= *c.PooledCosBefore
	}
	return true
}

// checkHeldOut runs the original, the input (converted) and the fitted
// model on the held rows of feed (whose batch has rows rows; tensors with
// another first dimension are fed whole) and compares the input's and the
// fitted model's output with the original's (see HeldOutCheck).
func checkHeldOut(original, input, fitted *onnxpb.ModelProto, feed map[string]*onnx.Tensor, rows int, held []int, opt Options) (*HeldOutCheck, error) {
	hf, err := gatherFeed(feed, rows, held)
	if err != nil {
		return nil, fmt.Errorf("finetune: held-out check: %w", err)
	}
	copt := infer.ModelCompareOptions{Backend: opt.Backend, Threads: opt.Threads, Batch: len(held)}
	copt.Mask, copt.SeqLen = feedMask(hf, len(held))
	mc, err := infer.CompareModels([]*onnxpb.ModelProto{original, input, fitted}, []string{"original", "input", "fitted"}, hf, copt)
	if err != nil {
		return nil, fmt.Errorf("finetune: held-out check: %w", err)
	}
	byModel := map[string]map[string]infer.ValueComparison{"input": {}, "fitted": {}}
	var outputs []string
	for _, r := range mc.Rows {
		if r.Kind != "output" {
			continue
		}
		if r.Model == "input" {
			outputs = append(outputs, r.Value)
		}
		byModel[r.Model][r.Value] = r
	}
	// The first output with a token axis (a pooled cosine), else the first
	// that compares at all.
	pick := ""
	for _, pooled := range []bool{true, false} {
		for _, o := range outputs {
			if r := byModel["input"][o]; pick == "" && r.Mismatch == "" && (!pooled || r.PooledCosMean != nil) {
				pick = o
			}
		}
	}
	if pick == "" {
		return nil, fmt.Errorf("finetune: held-out check: no output of the converted model compares with the original's on the held-out rows")
	}
	in, fit := byModel["input"][pick], byModel["fitted"][pick]
	c := &HeldOutCheck{Rows: len(held), Output: pick, RelErrBefore: in.RelErr, PooledCosBefore: in.PooledCosMean}
	if fit.Mismatch != "" {
		c.AfterBroken = fit.Mismatch
	} else {
		c.RelErrAfter, c.PooledCosAfter = fit.RelErr, fit.PooledCosMean
	}
	return c, nil
}

// gatherFeed returns the rows rows of every tensor of feed whose first
// dimension is the batch (n rows); other tensors are shared as they are.
func gatherFeed(feed map[string]*onnx.Tensor, n int, rows []int) (map[string]*onnx.Tensor, error) {
	out := make(map[string]*onnx.Tensor, len(feed))
	for name, t := range feed {
		if t == nil || len(t.Shape) == 0 || t.Shape[0] != n {
			out[name] = t
			continue
		}
		g, err := gatherRows(t, rows)
		if err != nil {
			return nil, fmt.Errorf("input %q: %w", name, err)
		}
		out[name] = g
	}
	return out, nil
}

// gatherRows returns the rows rows of t's first axis, in that order.
func gatherRows(t *onnx.Tensor, rows []int) (*onnx.Tensor, error) {
	per := 1
	for _, d := range t.Shape[1:] {
		per *= d
	}
	shape := append([]int{len(rows)}, t.Shape[1:]...)
	var data any
	switch d := t.Data.(type) {
	case []float32:
		data = gatherSlice(d, rows, per)
	case []float64:
		data = gatherSlice(d, rows, per)
	case []int64:
		data = gatherSlice(d, rows, per)
	case []int32:
		data = gatherSlice(d, rows, per)
	case []int16:
		data = gatherSlice(d, rows, per)
	case []int8:
		data = gatherSlice(d, rows, per)
	case []uint64:
		data = gatherSlice(d, rows, per)
	case []uint32:
		data = gatherSlice(d, rows, per)
	case []uint16:
		data = gatherSlice(d, rows, per)
	case []uint8:
		data = gatherSlice(d, rows, per)
	case []bool:
		data = gatherSlice(d, rows, per)
	case []string:
		data = gatherSlice(d, rows, per)
	default:
		return nil, fmt.Errorf("cannot take rows of a %s tensor", onnx.TypeName(t.DType))
	}
	return &onnx.Tensor{DType: t.DType, Shape: shape, Data: data}, nil
}

func gatherSlice[T any](d []T, rows []int, per int) []T {
	out := make([]T, 0, len(rows)*per)
	for _, r := range rows {
		out = append(out, d[r*per:(r+1)*per]...)
	}
	return out
}

// feedMask returns the [batch, S] padding mask of feed (an input named
// like a mask, infer.InputRole) and S, or nil and the sequence length of
// the first [batch, S] input (by name) when none is a mask.
func feedMask(feed map[string]*onnx.Tensor, batch int) ([]int64, int) {
	names := make([]string, 0, len(feed))
	for n := range feed {
		names = append(names, n)
	}
	slices.Sort(names)
	seq := 0
	for _, n := range names {
		t := feed[n]
		if t == nil || len(t.Shape) != 2 || t.Shape[0] != batch {
			continue
		}
		if seq == 0 {
			seq = t.Shape[1]
		}
		if infer.InputRole(n) == infer.RoleMask {
			if m, err := t.AsInt64s(); err == nil {
				return m, t.Shape[1]
			}
		}
	}
	return nil, seq
}
