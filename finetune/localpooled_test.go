package finetune

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/models"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/ops"
)

// lpProblem draws a small random layer with padded keys in two batch rows.
func lpProblem(t *testing.T, seed uint64, a ops.LocalPooledAttrs, withBias, fitV bool) *localPooledProblem {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 23))
	B, S, Dm, H, D := 3, 11, 6, 2, 3
	bias := make([]float32, B*S)
	bias[1*S+S-1] = -1e9
	bias[1*S+S-2] = -1e9
	bias[2*S+S-1] = -1e4
	p := &localPooledProblem{
		XQ: randTensor(rng, 1, B, S, Dm), XK: randTensor(rng, 1, B, S, Dm),
		WQ: randTensor(rng, 0.5, Dm, H*D), WK: randTensor(rng, 0.5, Dm, H*D),
		V: randTensor(rng, 1, B, H, S, D), Y: randTensor(rng, 0.3, B, H, S, D),
		Bias: onnx.NewFloat([]int{B, 1, 1, S}, bias), Attrs: a,
	}
	if withBias {
		p.BQ, p.BK = randTensor(rng, 0.3, H*D), randTensor(rng, 0.3, H*D)
	}
	if fitV {
		p.XV, p.WV = randTensor(rng, 1, B, S, Dm), randTensor(rng, 0.5, Dm, H*D)
		if withBias {
			p.BV = randTensor(rng, 0.3, H*D)
		}
	}
	if err := p.init(); err != nil {
		t.Fatal(err)
	}
	return p
}

var lpFitCases = []ops.LocalPooledAttrs{
	{Block: 2, Segments: 3, SinkFirst: true, SinkLast: true},
	{Block: 0, Segments: 2, SinkFirst: true},
	{Block: 3, Segments: 1, Scale: 0.7},
}

// TestLocalPooledForward: the float64 forward pass used for fitting agrees
// with the op's Go kernel (ops.LocalPooled, itself checked against the
// op's definition) on the projected Q and K.
func TestLocalPooledForward(t *testing.T) {
	for i, a := range lpFitCases {
		fitV := i%2 == 0
		p := lpProblem(t, 3, a, true, fitV)
		q, k, v := heads(p.XQ, p.WQ, p.BQ, p.h), heads(p.XK, p.WK, p.BK, p.h), p.V
		if fitV {
			v = heads(p.XV, p.WV, p.BV, p.h)
		}
		out, err := ops.LocalPooled(q, k, v, p.Bias, a)
		if err != nil {
			t.Fatal(err)
		}
		p.y = f64(out)
		p.rowNorm = []float64{1, 1, 1}
		res := p.LossGrad(nil, nil) * 3
		ref := validSquares(p.y, p.valid, p.b, p.h, p.s, p.dv)
		if rel := math.Sqrt(res / ref); rel > 1e-5 {
			t.Errorf("%+v: relative error %g against ops.LocalPooled", a, rel)
		}
	}
}

// TestLocalPooledGradient compares the analytic gradient with central
// finite differences of the loss, on all rows and on a mini-batch.
func TestLocalPooledGradient(t *testing.T) {
	for i, a := range lpFitCases {
		for _, rows := range [][]int{nil, {0, 2}} {
			p := lpProblem(t, 5+uint64(i), a, true, true)
			g := p.newGrads()
			p.LossGrad(rows, g)
			for pi, x := range [][]float64{p.wq, p.bq, p.wk, p.bk, p.wv, p.bv} {
				worst, nonzero := gradError(numericGrad(x, func() float64 { return p.LossGrad(rows, nil) }), g[pi], 1e-4)
				name := []string{"WQ", "BQ", "WK", "BK", "WV", "BV"}[pi]
				if name == "BK" {
					// A key bias shifts every score of a query by the same
					// q·b: softmax ignores it, so both gradients vanish.
					for j := range x {
						if math.Abs(g[pi][j]) > 1e-9 {
							t.Errorf("%+v rows %v: BK gradient %g, want 0 (softmax is shift-invariant)", a, rows, g[pi][j])
						}
					}
					continue
				}
				if worst > 1e-5 {
					t.Errorf("%+v rows %v: %s gradient relative error %g", a, rows, name, worst)
				}
				if nonzero == 0 {
					t.Errorf("%+v: %s: loss does not depend on it", a, name)
				}
			}
		}
	}
}

// TestLocalPooledFitTiny converts the tiny BERT with a compressing
// local+pooled structure, fits the Q/K projections on random calibration
// inputs (layer by layer, with held-out early stopping) and checks on
// other inputs that the fitted layers are closer to the original's, that
// the fitted ops validate, and that Fit dispatches to it. The fit is the
// per-layer one, before the whole-model guard: on this tiny model with
// random tokens the output's pooled cosine is 1 − 1e-7 either way, and
// the guard keeps the converted model (TestGuardOverfit tests the guard).
func TestLocalPooledFitTiny(t *testing.T) {
	orig, calib, held := tinyFitSetup(t, 16, 32)
	cfg := models.TinyConfig()
	conv, _, err := convert.ToLocalPooled(orig, convert.LocalPooledOptions{Block: 4, Segments: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, rep, err := Fit(orig, conv, calib, Options{Steps: 1, Seed: 3}); err != nil || rep.Op != ops.LocalPooledOp || rep.HeldOut == nil {
		t.Fatalf("Fit: %v, report %+v; want a guarded %s fit", err, rep, ops.LocalPooledOp)
	}
	opt := Options{Steps: 80, LR: 3e-3, Batch: 8, Seed: 3}
	if err := opt.defaults(0); err != nil {
		t.Fatal(err)
	}
	fitted, rep, err := localPooled(orig, conv, calib, opt, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkLayerFit(t, rep, 0.9)
	layerErr, _ := compareFit(t, orig, conv, fitted, held, 32, mergedValues(t, orig))
	t.Logf("held-out summed layer relative error %.4f → %.4f", layerErr["before"], layerErr["after"])
	if !(layerErr["after"] < 0.95*layerErr["before"]) || layerErr["before"] == 0 {
		t.Errorf("held-out layer attention error did not fall: %.4f → %.4f", layerErr["before"], layerErr["after"])
	}
	checkValidates(t, fitted, held)
	// Q/K fitting changes WQ, BQ and WK of each layer (BK's gradient is
	// identically zero: softmax ignores a shift shared by a query's
	// scores); FitValues WV and BV as well.
	for _, c := range []struct {
		fitV bool
		want int
	}{{false, 3}, {true, 5}} {
		m := fitted
		if c.fitV {
			o := opt
			o.FitValues = true
			if m, _, err = localPooled(orig, conv, calib, o, nil); err != nil {
				t.Fatal(err)
			}
		}
		if changed := changedInitializers(conv, m); changed != c.want*cfg.Layers {
			t.Errorf("FitValues %v: %d initializers changed, want %d per layer", c.fitV, changed, c.want)
		}
	}
}
