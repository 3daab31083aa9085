package finetune

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/internal/progress"
	"github.com/linearize/linearize/models"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

// TestRowSplit: the held-out rows are a seeded, deterministic share of
// the batch rows, at least one and never all; an explicit HeldOut is taken
// as it is; a single row, or Unguarded, holds nothing out and says why;
// bad options are refused.
func TestRowSplit(t *testing.T) {
	for _, c := range []struct {
		name      string
		opt       Options
		b         int
		wantHeld  int    // rows held out
		unguarded string // in the reason, when nothing is held out
		err       string
	}{
		{"default quarter of 16", Options{Seed: 1}, 16, 4, "", ""},
		{"default of 2: one", Options{Seed: 1}, 2, 1, "", ""},
		{"default of 3: one", Options{Seed: 7}, 3, 1, "", ""},
		{"half of 10", Options{Seed: 2, HeldOutFraction: 0.5}, 10, 5, "", ""},
		{"tiny fraction: still one", Options{Seed: 2, HeldOutFraction: 0.01}, 8, 1, "", ""},
		{"large fraction: one left to train", Options{Seed: 2, HeldOutFraction: 0.99}, 8, 7, "", ""},
		{"single row", Options{Seed: 1}, 1, 0, "single calibration row", ""},
		{"unguarded", Options{Unguarded: true}, 8, 0, "asked for", ""},
		{"explicit", Options{HeldOut: []bool{false, true, false, true}}, 4, 2, "", ""},
		{"explicit none", Options{HeldOut: []bool{false, false}}, 2, 0, "no calibration row marked", ""},
		{"explicit all", Options{HeldOut: []bool{true, true}}, 2, 0, "", "nothing to train on"},
		{"explicit wrong length", Options{HeldOut: []bool{true, false}}, 3, 0, "", "2 entries for 3"},
		{"fraction 1", Options{HeldOutFraction: 1}, 4, 0, "", "[0, 1)"},
		{"negative fraction", Options{HeldOutFraction: -0.1}, 4, 0, "", "[0, 1)"},
		{"unguarded with held rows", Options{Unguarded: true, HeldOut: []bool{true, false}}, 2, 0, "", "Unguarded"},
		{"no rows", Options{}, 0, 0, "", "no calibration rows"},
	} {
		t.Run(c.name, func(t *testing.T) {
			opt := c.opt
			train, held, why, err := opt.rowSplit(c.b)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(held) != c.wantHeld || len(train)+len(held) != c.b || len(train) == 0 {
				t.Fatalf("train %v held %v, want %d held of %d", train, held, c.wantHeld, c.b)
			}
			if (why == "") != (c.unguarded == "") || !strings.Contains(why, c.unguarded) {
				t.Errorf("unguarded reason %q, want %q", why, c.unguarded)
			}
			all := append(slices.Clone(train), held...)
			slices.Sort(all)
			for i, r := range all {
				if r != i {
					t.Fatalf("train %v and held %v do not partition 0..%d", train, held, c.b-1)
				}
			}
			if !slices.IsSorted(train) || !slices.IsSorted(held) {
				t.Errorf("rows not in order: %v %v", train, held)
			}
			for r, h := range c.opt.HeldOut {
				if h != slices.Contains(held, r) {
					t.Errorf("row %d: held %v, HeldOut says %v", r, !h, h)
				}
			}
			// The same options give the same split.
			again := c.opt
			_, held2, _, _ := again.rowSplit(c.b)
			if !slices.Equal(held, held2) {
				t.Errorf("split not deterministic: %v then %v", held, held2)
			}
		})
	}
	// Seeds draw different documents.
	seen := map[string]bool{}
	for seed := range uint64(8) {
		o := Options{Seed: seed}
		_, held, _, _ := o.rowSplit(16)
		seen[fmt.Sprint(held)] = true
	}
	if len(seen) < 4 {
		t.Errorf("8 seeds drew only %d distinct splits of 16 rows", len(seen))
	}
}

// quadratic is a toy fit for the training loop: one parameter vector x,
// and per batch row r a target c_r; the loss over rows is the mean of
// ‖x − c_r‖². Training rows pull x to one point, the held-out row sits
// part of the way there, so the held-out loss falls, then rises: a fit
// that overfits the training rows.
type quadratic struct {
	x       []float64
	targets [][]float64
	grads   [][]float64
	held    map[int]bool
	t       *testing.T
	// Records of every held-out evaluation: the loss and x then.
	heldLoss []float64
	heldX    [][]float64
}

func (q *quadratic) loss(rows []int) float64 {
	var l float64
	for _, r := range rows {
		for i, v := range q.x {
			l += (v - q.targets[r][i]) * (v - q.targets[r][i])
		}
	}
	l /= float64(len(rows))
	if len(rows) > 0 && q.held[rows[0]] {
		q.heldLoss = append(q.heldLoss, l)
		q.heldX = append(q.heldX, slices.Clone(q.x))
	}
	return l
}

func (q *quadratic) grad(rows []int) {
	for _, r := range rows {
		if q.held[r] {
			q.t.Fatalf("gradient asked for held-out row %d (rows %v)", r, rows)
		}
		for i, v := range q.x {
			q.grads[0][i] += 2 * (v - q.targets[r][i]) / float64(len(rows))
		}
	}
}

// TestFitAdamHeldStopsEarly runs the training loop on the toy overfitting
// fit: it must keep the parameters of the lowest held-out loss among its
// checkpoints (start included), never give a held-out row to the
// gradient, stop Patience checkpoints after the best one, and run every
// step when early stopping is off or when it is unguarded.
func TestFitAdamHeldStopsEarly(t *testing.T) {
	newQ := func() *quadratic {
		tr := []float64{1, -1, 0.5}
		return &quadratic{
			x:       make([]float64, 3),
			targets: [][]float64{tr, {0.3, -0.3, 0.15}, tr, tr},
			grads:   [][]float64{make([]float64, 3)},
			held:    map[int]bool{1: true},
			t:       t,
		}
	}
	train, held := []int{0, 2, 3}, []int{1}
	for _, c := range []struct {
		name      string
		opt       Options
		held      []int
		stopEarly bool
	}{
		{"default patience", Options{Steps: 400, LR: 0.01, Seed: 1}, held, true},
		{"patience 2, minibatch", Options{Steps: 400, LR: 0.01, Seed: 1, Patience: 2, Batch: 2}, held, true},
		{"no early stopping", Options{Steps: 400, LR: 0.01, Seed: 1, Patience: -1}, held, false},
		{"unguarded", Options{Steps: 400, LR: 0.01, Seed: 1}, nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := newQ()
			x0 := slices.Clone(q.x)
			tr := fitAdamTrace(c.opt, train, c.held, [][]float64{q.x}, q.grads, q.loss, q.grad)
			kept := slices.Clone(q.x)
			// Independent losses at the start and at the kept parameters.
			at := func(x []float64, rows []int) float64 {
				saved := slices.Clone(q.x)
				copy(q.x, x)
				q.held = nil // no recording
				l := q.loss(rows)
				q.held = map[int]bool{1: true}
				copy(q.x, saved)
				return l
			}
			if d := math.Abs(tr.trainBefore - at(x0, train)); d > 1e-12 {
				t.Errorf("train before %g, recomputed %g", tr.trainBefore, at(x0, train))
			}
			if d := math.Abs(tr.trainAfter - at(kept, train)); d > 1e-12 {
				t.Errorf("train after %g, recomputed %g", tr.trainAfter, at(kept, train))
			}
			if c.held == nil {
				if tr.steps != c.opt.Steps || tr.heldBefore != 0 || tr.heldAfter != 0 || len(q.heldLoss) != 0 {
					t.Errorf("unguarded: %+v, %d held-out evaluations", tr, len(q.heldLoss))
				}
				if !(tr.trainAfter < 0.01*tr.trainBefore) {
					t.Errorf("unguarded fit did not fit the training rows: %g → %g", tr.trainBefore, tr.trainAfter)
				}
				return
			}
			if d := math.Abs(tr.heldBefore - at(x0, held)); d > 1e-12 {
				t.Errorf("held before %g, recomputed %g", tr.heldBefore, at(x0, held))
			}
			if d := math.Abs(tr.heldAfter - at(kept, held)); d > 1e-12 {
				t.Errorf("held after %g, recomputed %g", tr.heldAfter, at(kept, held))
			}
			// The lowest of the recorded held-out evaluations is the one kept.
			best := slices.Min(q.heldLoss)
			if tr.heldAfter != best || !(best < tr.heldBefore) {
				t.Errorf("kept held-out loss %g, lowest evaluated %g, start %g", tr.heldAfter, best, tr.heldBefore)
			}
			if i := slices.Index(q.heldLoss, best); !slices.Equal(q.heldX[i], kept) {
				t.Errorf("kept parameters %v, those of the best checkpoint %v", kept, q.heldX[i])
			}
			// The training rows' loss went on falling past the held-out
			// optimum: there was something to stop.
			if !(at(q.heldX[len(q.heldX)-1], train) < tr.trainAfter) {
				t.Errorf("the toy fit does not overfit: train loss at the last checkpoint %g, at the kept one %g", at(q.heldX[len(q.heldX)-1], train), tr.trainAfter)
			}
			patience := c.opt.Patience
			if patience == 0 {
				patience = DefaultPatience
			}
			if c.stopEarly {
				if tr.steps >= c.opt.Steps || tr.steps != tr.kept+patience*CheckpointEvery {
					t.Errorf("ran %d of %d steps, kept step %d: want a stop %d checkpoints after it", tr.steps, c.opt.Steps, tr.kept, patience)
				}
			} else if tr.steps != c.opt.Steps {
				t.Errorf("ran %d of %d steps without early stopping", tr.steps, c.opt.Steps)
			}
			t.Logf("held-out %.4g → %.4g, train %.4g → %.4g, kept step %d of %d run", tr.heldBefore, tr.heldAfter, tr.trainBefore, tr.trainAfter, tr.kept, tr.steps)
		})
	}
}

// perturbRow rescales and shifts the r-th of the b equal batch-row chunks
// of x.
func perturbRow(rng *rand.Rand, x []float64, b, r int) {
	n := len(x) / b
	for i := r * n; i < (r+1)*n; i++ {
		x[i] = 1.7*x[i] + rng.NormFloat64()
	}
}

// TestHeldOutRowsDoNotTrain: for each fitted problem (Linformer E/F,
// Performer Q/K, local+pooled Q/K/V), changing everything a held-out
// batch row holds (its inputs and its target) leaves the whole training
// trajectory unchanged, bit for bit, while the held-out losses change: the
// held-out rows are whole documents and have no influence on gradients.
// Early stopping is off so both runs reach every checkpoint.
func TestHeldOutRowsDoNotTrain(t *testing.T) {
	type fitProblem struct {
		params, grads [][]float64
		loss          func(rows []int) float64
		grad          func(rows []int)
	}
	cases := []struct {
		name string
		b    int
		make func(perturb bool) fitProblem
	}{
		{"linformer", 2, func(perturb bool) fitProblem {
			p := problem(t, 4, 2, 2, false)
			if perturb {
				rng := rand.New(rand.NewPCG(1, 2))
				for _, x := range [][]float64{p.q, p.kk, p.v, p.y} {
					perturbRow(rng, x, p.b, 1)
				}
				p.rowNorm, _ = targetRowNorms(p.y, p.valid, p.b, p.h, p.s, p.dv)
			}
			ge, gf := make([]float64, len(p.e)), make([]float64, len(p.f))
			return fitProblem{[][]float64{p.e, p.f}, [][]float64{ge, gf},
				func(rows []int) float64 { return p.LossGrad(rows, nil, nil) },
				func(rows []int) { p.LossGrad(rows, ge, gf) }}
		}},
		{"performer", 3, func(perturb bool) fitProblem {
			p := perfProblem(t, 6, 2, true)
			if perturb {
				rng := rand.New(rand.NewPCG(1, 3))
				for _, x := range [][]float64{p.xq, p.xk, p.v, p.y} {
					perturbRow(rng, x, p.b, 1)
				}
				p.rowNorm, _ = targetRowNorms(p.y, p.valid, p.b, p.h, p.s, p.dv)
			}
			g := p.newGrads()
			return fitProblem{[][]float64{p.wq, p.bq, p.wk, p.bk}, [][]float64{g.wq, g.bq, g.wk, g.bk},
				func(rows []int) float64 { return p.LossGrad(rows, nil) },
				func(rows []int) { p.LossGrad(rows, g) }}
		}},
		{"local+pooled with values", 3, func(perturb bool) fitProblem {
			p := lpProblem(t, 8, lpFitCases[0], true, true)
			if perturb {
				rng := rand.New(rand.NewPCG(1, 4))
				for _, x := range [][]float64{p.xq, p.xk, p.xv, p.y} {
					perturbRow(rng, x, p.b, 1)
				}
				p.rowNorm, _ = targetRowNorms(p.y, p.valid, p.b, p.h, p.s, p.dv)
			}
			g := p.newGrads()
			return fitProblem{[][]float64{p.wq, p.bq, p.wk, p.bk, p.wv, p.bv}, g,
				func(rows []int) float64 { return p.LossGrad(rows, nil) },
				func(rows []int) { p.LossGrad(rows, g) }}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			train := []int{0}
			if c.b == 3 {
				train = []int{0, 2}
			}
			held := []int{1}
			run := func(perturb bool) (trajectory [][]float64, heldLosses []float64) {
				fp := c.make(perturb)
				loss := func(rows []int) float64 {
					l := fp.loss(rows)
					if slices.Equal(rows, held) {
						var snap []float64
						for _, x := range fp.params {
							snap = append(snap, x...)
						}
						trajectory, heldLosses = append(trajectory, snap), append(heldLosses, l)
					}
					return l
				}
				grad := func(rows []int) {
					if slices.Contains(rows, held[0]) {
						t.Fatalf("gradient asked for held-out row %d", held[0])
					}
					fp.grad(rows)
				}
				fitAdamTrace(Options{Steps: 40, LR: 0.02, Seed: 5, Batch: 1, Patience: -1}, train, held, fp.params, fp.grads, loss, grad)
				return trajectory, heldLosses
			}
			a, la := run(false)
			b, lb := run(true)
			if len(a) != 40/CheckpointEvery+1 || len(a) != len(b) {
				t.Fatalf("%d and %d held-out checkpoints, want %d", len(a), len(b), 40/CheckpointEvery+1)
			}
			if slices.Equal(la, lb) {
				t.Fatal("perturbing the held-out row did not change its loss: the test proves nothing")
			}
			if slices.Equal(a[0], a[len(a)-1]) {
				t.Fatal("the parameters did not move")
			}
			for i := range a {
				if !slices.Equal(a[i], b[i]) {
					t.Fatalf("checkpoint %d: parameters differ when only the held-out row changed", i)
				}
			}
		})
	}
}

// heldOutErrs runs m on the rows rows of the calibration feed (cut here,
// by hand, from the int64 token inputs) and returns, for its
// last_hidden_state against the original's over the real tokens
// (attention_mask = 1), the relative error ‖a−b‖/‖b‖ and the cosine of
// the per-row token means, averaged over rows.
func heldOutErrs(t *testing.T, orig, m *onnxpb.ModelProto, feed map[string]*onnx.Tensor, rows []int) (relErr, pooledCos float64) {
	t.Helper()
	sub := map[string]*onnx.Tensor{}
	for name, x := range feed {
		s := x.Shape[1]
		var data []int64
		for _, r := range rows {
			data = append(data, x.Int64s()[r*s:(r+1)*s]...)
		}
		sub[name] = onnx.NewInt64([]int{len(rows), s}, data)
	}
	out := func(m *onnxpb.ModelProto) []float32 {
		s, err := infer.Open("ort", m, infer.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		res, err := s.Run(sub, "last_hidden_state")
		if err != nil {
			t.Fatal(err)
		}
		return res["last_hidden_state"].Floats()
	}
	a, b := out(m), out(orig)
	mask := sub["attention_mask"].Int64s()
	seq := len(mask) / len(rows)
	d := len(a) / len(mask)
	var num, den float64
	for r := range rows {
		pa, pb := make([]float64, d), make([]float64, d)
		for i := 0; i < seq; i++ {
			tok := r*seq + i
			if mask[tok] == 0 {
				continue
			}
			for k := 0; k < d; k++ {
				x, y := float64(a[tok*d+k]), float64(b[tok*d+k])
				num += (x - y) * (x - y)
				den += y * y
				pa[k] += x
				pb[k] += y
			}
		}
		var ab, aa, bb float64
		for k := range pa {
			ab, aa, bb = ab+pa[k]*pb[k], aa+pa[k]*pa[k], bb+pb[k]*pb[k]
		}
		pooledCos += ab / math.Sqrt(aa*bb) / float64(len(rows))
	}
	return math.Sqrt(num / den), pooledCos
}

// projectionWeights names the Q or K projection weights of every block
// Detect finds in orig.
func projectionWeights(t *testing.T, orig *onnxpb.ModelProto, role string) map[string]bool {
	t.Helper()
	det, err := convert.Detect(orig)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, b := range det.Blocks {
		pr := b.QProj
		if role == "K" {
			pr = b.KProj
		}
		if pr == nil {
			t.Fatalf("block %d: no %s projection", b.Layer, role)
		}
		names[pr.Weight] = true
	}
	return names
}

// TestGuardOverfit fits the tiny BERT's conversions in overfitting setups
// (few documents, many steps, a high learning rate) and checks the guard:
// no layer ends worse on the held-out rows than it began, and the model
// returned is the better, on the held-out rows, of the converted model and
// the fitted candidate (the same fit without the whole-model check), by the
// relative error and mean-pooled cosine recomputed here with separate
// sessions. One case fits
// with a "fit" that wrecks the Q projections, which the guard must refuse.
func TestGuardOverfit(t *testing.T) {
	orig := tinyBERT(t)
	lp, _, err := convert.ToLocalPooled(orig, convert.LocalPooledOptions{Block: 4, Segments: 2})
	if err != nil {
		t.Fatal(err)
	}
	gauss, _, err := convert.ToLinformer(orig, convert.LinformerOptions{K: 4, MaxLen: 32, Seed: 4, Init: "gaussian"})
	if err != nil {
		t.Fatal(err)
	}
	perf, _, err := convert.ToPerformer(orig, convert.PerformerOptions{Features: 16, Seed: 4, FeatureMap: ops.FeaturesFavorPlus, Center: convert.CenterOff})
	if err != nil {
		t.Fatal(err)
	}
	// wreck is an op fit that scales every Q projection weight by 5.
	qWeights := projectionWeights(t, orig, "Q")
	wreck := opFit{op: ops.LocalPooledOp, fit: func(original, converted *onnxpb.ModelProto, feed map[string]*onnx.Tensor, opt Options, shared *progress.Reporter) (*onnxpb.ModelProto, *Report, error) {
		out, rep, err := localPooled(original, converted, feed, Options{Steps: 1, LR: 1e-9, Seed: opt.Seed}, shared)
		if err != nil {
			return nil, nil, err
		}
		for i, tp := range out.Graph.Initializer {
			if !qWeights[tp.GetName()] {
				continue
			}
			x, err := onnx.DecodeTensor(tp)
			if err != nil {
				t.Fatal(err)
			}
			for j := range x.Floats() {
				x.Floats()[j] *= 5
			}
			if out.Graph.Initializer[i], err = onnx.EncodeTensor(tp.GetName(), x); err != nil {
				t.Fatal(err)
			}
		}
		return out, rep, nil
	}}
	for _, c := range []struct {
		name  string
		conv  *onnxpb.ModelProto
		fit   opFit
		batch int
		opt   Options
		// What the seeded case comes to: the layers stop early (the
		// held-out error rose while the training error could fall), and
		// which model is returned.
		stopsEarly bool
		kept       string
	}{
		{"local+pooled values, lr 0.1", lp, localPooledFit, 4, Options{Steps: 200, LR: 0.1, FitValues: true, Seed: 3}, true, KeptInput},
		{"performer, lr 0.05", perf, performerFit, 3, Options{Steps: 200, LR: 0.05, Seed: 3}, true, KeptInput},
		{"gaussian linformer, 2 documents", gauss, linformerFit, 2, Options{Steps: 200, LR: 0.05, Seed: 3}, false, KeptFitted},
		{"wrecked Q", lp, wreck, 4, Options{Seed: 3}, false, KeptInput},
	} {
		t.Run(c.name, func(t *testing.T) {
			calib, err := infer.RandomInputs(orig, infer.GraphInputs(orig), infer.RandomOptions{Batch: c.batch, SeqLen: 16, Seed: 11})
			if err != nil {
				t.Fatal(err)
			}
			got, rep, err := fitGuarded(orig, c.conv, calib, c.opt, []opFit{c.fit})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.HeldOutRows) == 0 || rep.HeldOut == nil || rep.Rows != c.batch {
				t.Fatalf("report %+v: not guarded", rep)
			}
			stopped := false
			for _, l := range rep.Layers {
				t.Logf("layer %d: train %.4f → %.4f, held-out %.4f → %.4f (kept step %d of %d)", l.Layer, l.Before, l.After, l.HeldOutBefore, l.HeldOutAfter, l.KeptStep, l.StepsRun)
				if !(l.HeldOutAfter <= l.HeldOutBefore) {
					t.Errorf("layer %d: held-out error rose %.6f → %.6f", l.Layer, l.HeldOutBefore, l.HeldOutAfter)
				}
				stopped = stopped || l.StepsRun < c.opt.Steps
			}
			if c.stopsEarly && !stopped {
				t.Errorf("no layer stopped early: the case does not overfit as it means to")
			}
			// The candidate: the same per-layer fit, no whole-model check.
			cand, _, err := c.fit.fit(orig, c.conv, calib, c.opt, nil)
			if err != nil {
				t.Fatal(err)
			}
			before, cosBefore := heldOutErrs(t, orig, c.conv, calib, rep.HeldOutRows)
			after, cosAfter := heldOutErrs(t, orig, cand, calib, rep.HeldOutRows)
			kept, cosKept := heldOutErrs(t, orig, got, calib, rep.HeldOutRows)
			t.Logf("%s; recomputed: converted %.6g (%.8f), candidate %.6g (%.8f), returned %.6g (%.8f)", rep.HeldOutLine(), before, cosBefore, after, cosAfter, kept, cosKept)
			hc := rep.HeldOut
			if math.Abs(hc.RelErrBefore-before) > 1e-4*before || math.Abs(hc.RelErrAfter-after) > 1e-4*after ||
				math.Abs(*hc.PooledCosBefore-cosBefore) > 1e-9 || math.Abs(*hc.PooledCosAfter-cosAfter) > 1e-9 {
				t.Errorf("reported held-out errors %.6g → %.6g, cosines %.8f → %.8f; recomputed %.6g → %.6g, %.8f → %.8f",
					hc.RelErrBefore, hc.RelErrAfter, *hc.PooledCosBefore, *hc.PooledCosAfter, before, after, cosBefore, cosAfter)
			}
			if !(kept <= before) || !(cosKept >= cosBefore) {
				t.Errorf("the returned model is worse on the held-out rows than the converted one: %.6g > %.6g or %.8f < %.8f", kept, before, cosKept, cosBefore)
			}
			// The guard's choice, by the recomputed measures: the
			// candidate only when it is better on both.
			if after < before && cosAfter >= cosBefore {
				if rep.Kept != KeptFitted || !sameEncoding(t, got, cand) {
					t.Errorf("the candidate is better (%.6g < %.6g, %.8f ≥ %.8f), yet kept %q", after, before, cosAfter, cosBefore, rep.Kept)
				}
			} else {
				if rep.Kept != KeptInput || changedInitializers(c.conv, got) != 0 || !strings.Contains(rep.HeldOutLine(), "kept the converted model's parameters") {
					t.Errorf("the candidate is no better (%.6g vs %.6g, %.8f vs %.8f), yet kept %q, %d initializers changed", after, before, cosAfter, cosBefore, rep.Kept, changedInitializers(c.conv, got))
				}
			}
			if rep.Kept != c.kept {
				t.Errorf("kept %q, want %q: the case does not set up what it means to", rep.Kept, c.kept)
			}
		})
	}
}

// TestCheckHeldOut: the whole-model check prefers the original itself
// (exact) to its conversion, and the conversion to a copy with wrecked
// weights, on both metrics it reports.
func TestCheckHeldOut(t *testing.T) {
	orig, calib, _ := tinyFitSetup(t, 4, 16)
	conv, _, err := convert.ToLocalPooled(orig, convert.LocalPooledOptions{Block: 4, Segments: 2})
	if err != nil {
		t.Fatal(err)
	}
	bad := onnx.CloneShared(conv)
	kWeights := projectionWeights(t, orig, "K")
	for i, tp := range bad.Graph.Initializer {
		if kWeights[tp.GetName()] {
			x, _ := onnx.DecodeTensor(tp)
			for j := range x.Floats() {
				x.Floats()[j] = -x.Floats()[j]
			}
			bad.Graph.Initializer[i], _ = onnx.EncodeTensor(tp.GetName(), x)
		}
	}
	if changedInitializers(conv, bad) != models.TinyConfig().Layers {
		t.Fatalf("%d key weights wrecked, want one per layer", changedInitializers(conv, bad))
	}
	held := []int{1, 3}
	c, err := checkHeldOut(orig, conv, orig, calib, 4, held, Options{Backend: "ort"})
	if err != nil {
		t.Fatal(err)
	}
	if !c.Better() || c.RelErrAfter != 0 || *c.PooledCosAfter < 1-1e-12 || c.Output != "last_hidden_state" || c.Rows != 2 {
		t.Errorf("original as the fitted model: %+v", c)
	}
	c, err = checkHeldOut(orig, conv, bad, calib, 4, held, Options{Backend: "ort"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Better() || !(c.RelErrAfter > c.RelErrBefore) || !(*c.PooledCosAfter < *c.PooledCosBefore) {
		t.Errorf("wrecked model as the fitted model: %+v (pooled %.5f → %.5f)", c, *c.PooledCosBefore, *c.PooledCosAfter)
	}
}
