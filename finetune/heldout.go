package finetune

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// This file holds the held-out guard every fit goes through: the split of
// the calibration batch rows (documents) into rows to train on and rows to
// hold out, the Adam loop that keeps each layer's parameters of lowest
// held-out loss and stops early, and the check of the whole fitted model
// against the converted one on the held-out rows.

const (
	// DefaultHeldOutFraction is the fraction of calibration rows held out
	// when Options.HeldOut is nil and Options.HeldOutFraction is 0.
	DefaultHeldOutFraction = 0.25
	// DefaultPatience is the number of checkpoints without a lower
	// held-out loss after which a layer stops when Options.Patience is 0.
	DefaultPatience = 5
	// CheckpointEvery is the number of Adam steps between two checkpoints
	// (a held-out evaluation); the last step is always one.
	CheckpointEvery = 10
)

// Values of Report.Kept.
const (
	KeptFitted = "fitted" // the fitted parameters are returned
	KeptInput  = "input"  // the converted model's parameters are returned unchanged
)

// checkGuard checks the held-out options that do not depend on the batch.
func (o *Options) checkGuard() error {
	f := o.HeldOutFraction
	if math.IsNaN(f) || f < 0 || f >= 1 {
		return fmt.Errorf("finetune: held-out fraction %g must be in [0, 1)", f)
	}
	if o.Unguarded && o.HeldOut != nil {
		for _, h := range o.HeldOut {
			if h {
				return fmt.Errorf("finetune: Unguarded, yet HeldOut marks rows to hold out")
			}
		}
	}
	return nil
}

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

// patience is the number of checkpoints without improvement after which a
// guarded fit stops (0: never).
func (o *Options) patience() int {
	switch {
	case o.Patience == 0:
		return DefaultPatience
	case o.Patience < 0:
		return 0
	}
	return o.Patience
}

// adamTrace is what one run of the training loop did.
type adamTrace struct {
	trainBefore, trainAfter float64 // loss on the training rows at the start and at the kept parameters
	heldBefore, heldAfter   float64 // loss on the held-out rows (0 without any)
	steps                   int     // Adam steps run (fewer than Options.Steps when stopped early)
	kept                    int     // the step whose parameters were kept (0: the start)
}

// fitAdamTrace is the training loop every fit shares. rows are batch-row
// indices (documents): train the rows gradients come from, held the rows
// held out (nil or empty: an unguarded fit). It runs Adam (Options.LR) for
// up to Options.Steps steps, each on a seeded (Options.Seed) mini-batch of
// Options.Batch of the train rows (all when 0); grad(rows) must add the
// gradient of the loss over those rows into grads, which are cleared
// before each step; loss(rows) returns the loss over rows (it is never
// passed nil). params (nil entries frozen) are updated in place.
//
// Every CheckpointEvery steps and at the last one it evaluates loss(held)
// and keeps the parameters of the lowest held-out loss seen, the start
// included, so a layer never ends worse on the held-out rows than it
// began; after Options.Patience checkpoints (DefaultPatience when 0, never
// when negative) without a lower held-out loss it stops. Held-out rows
// never reach grad. Without held rows the criterion is loss(train) and
// every step runs. It returns the losses on the train and held rows at
// the start and at the parameters it leaves in params (the held ones 0
// without held rows), the steps it ran and the one it kept.
func fitAdamTrace(opt Options, train, held []int, params, grads [][]float64, loss func(rows []int) float64, grad func(rows []int)) adamTrace {
	rng := rand.New(rand.NewPCG(opt.Seed, 0x5eed))
	var tr adamTrace
	tr.trainBefore = loss(train)
	// Unguarded, the criterion is the training loss and every step runs.
	judged, start, patience := train, tr.trainBefore, 0
	guarded := len(held) > 0
	if guarded {
		tr.heldBefore = loss(held)
		judged, start, patience = held, tr.heldBefore, opt.patience()
	}
	draw := func() []int {
		pick := minibatch(rng, len(train), opt.Batch)
		if pick == nil {
			return train
		}
		rows := make([]int, len(pick))
		for i, j := range pick {
			rows[i] = train[j]
		}
		return rows
	}
	loop := adamLoop{steps: opt.Steps, every: CheckpointEvery, patience: patience, lr: opt.LR}
	var best float64
	tr.steps, tr.kept, best = loop.run(params, grads, start, draw, grad, func() float64 { return loss(judged) })
	switch {
	case !guarded:
		tr.trainAfter = best
	case tr.kept == 0:
		tr.trainAfter, tr.heldAfter = tr.trainBefore, best
	default:
		tr.trainAfter, tr.heldAfter = loss(train), best
	}
	return tr
}

// adamLoop is the loop of Adam steps every fit shares (fitAdamTrace, and
// each head of Transfer): up to steps steps of learning rate lr, a
// checkpoint every every steps and at the last one, and a stop after
// patience checkpoints without a lower criterion (0: never).
type adamLoop struct {
	steps, every, patience int
	lr                     float64
}

// run updates params (nil entries frozen) in place: each step takes the
// rows draw gives, clears grads, lets grad add the gradient over those
// rows into grads and takes an Adam step. At each checkpoint it evaluates
// criterion and keeps the parameters of its lowest value seen, start (its
// value at the parameters given) included; it leaves those in params and
// returns the steps it ran, the step kept (0: the start) and its
// criterion.
func (l adamLoop) run(params, grads [][]float64, start float64, draw func() []int, grad func(rows []int), criterion func() float64) (steps, kept int, best float64) {
	ad := newAdam(params, l.lr)
	best, bestP := start, snapshot(params)
	since := 0
	for t := 1; t <= l.steps; t++ {
		rows := draw()
		for _, x := range grads {
			clear(x)
		}
		grad(rows)
		ad.step(grads)
		steps = t
		if t%l.every != 0 && t != l.steps {
			continue
		}
		if c := criterion(); c < best {
			best, bestP, kept, since = c, snapshot(params), t, 0
		} else if since++; l.patience > 0 && since >= l.patience {
			break
		}
	}
	restore(params, bestP)
	return steps, kept, best
}

// layerReport is the report of one fitted layer from the losses of its
// fit.
func layerReport(layer int, node string, tr adamTrace, guarded bool) LayerReport {
	l := LayerReport{Layer: layer, Node: node, Before: math.Sqrt(tr.trainBefore), After: math.Sqrt(tr.trainAfter), StepsRun: tr.steps, KeptStep: tr.kept}
	if guarded {
		l.HeldOutBefore, l.HeldOutAfter = math.Sqrt(tr.heldBefore), math.Sqrt(tr.heldAfter)
	}
	return l
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
	sort.Strings(names)
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

// HeldOutLine is the one line that says how the fitted model did on the
// held-out rows against the converted one and which parameters the fit
// returned (the last line of Text).
func (r *Report) HeldOutLine() string {
	c := r.HeldOut
	if c == nil {
		why := r.Unguarded
		if why == "" {
			why = "no held-out check"
		}
		return fmt.Sprintf("held-out: none (%s): unguarded fit, the fine-tuned parameters are kept unchecked", why)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "held-out (%d of %d calibration rows, %s against the original's): ", c.Rows, r.Rows, c.Output)
	if c.AfterBroken != "" {
		fmt.Fprintf(&b, "relative error converted %.4g → fine-tuned unusable (%s)", c.RelErrBefore, c.AfterBroken)
	} else {
		fmt.Fprintf(&b, "relative error converted %.4g → fine-tuned %.4g", c.RelErrBefore, c.RelErrAfter)
		if c.PooledCosBefore != nil && c.PooledCosAfter != nil {
			fmt.Fprintf(&b, ", mean-pooled cosine %.4f → %.4f", *c.PooledCosBefore, *c.PooledCosAfter)
		}
	}
	switch {
	case r.Kept == KeptFitted:
		b.WriteString(": better, kept the fine-tuned parameters")
	case c.AfterBroken != "":
		b.WriteString(": worse, kept the converted model's parameters")
	case c.RelErrAfter < c.RelErrBefore:
		b.WriteString(": pooled cosine worse, kept the converted model's parameters")
	case c.RelErrAfter == c.RelErrBefore:
		b.WriteString(": no better, kept the converted model's parameters")
	default:
		b.WriteString(": worse, kept the converted model's parameters")
	}
	return b.String()
}
