package finetune

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/models"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
	"github.com/linearize/linearize/runtime"
	"google.golang.org/protobuf/proto"
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
		var ref float64
		for bi := 0; bi < p.b; bi++ {
			for hi := 0; hi < p.h; hi++ {
				for i := 0; i < p.s; i++ {
					if p.valid[bi*p.s+i] {
						for _, x := range p.y[((bi*p.h+hi)*p.s+i)*p.dv:][:p.dv] {
							ref += x * x
						}
					}
				}
			}
		}
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
				const h = 1e-6
				var worst float64
				nonzero := 0
				for j := range x {
					old := x[j]
					x[j] = old + h
					lp := p.LossGrad(rows, nil)
					x[j] = old - h
					lm := p.LossGrad(rows, nil)
					x[j] = old
					num := (lp - lm) / (2 * h)
					worst = math.Max(worst, math.Abs(num-g[pi][j])/math.Max(1e-4, math.Abs(num)))
					if num != 0 {
						nonzero++
					}
				}
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
// inputs and checks on held-out inputs that the fitted model is closer to
// the original, that the fitted ops validate, and that Fit dispatches to it.
func TestLocalPooledFitTiny(t *testing.T) {
	if err := runtime.ORTAvailable(); err != nil {
		t.Skipf("%v (run scripts/setup.sh)", err)
	}
	cfg := models.TinyConfig()
	orig, err := models.BERT(cfg)
	if err != nil {
		t.Fatal(err)
	}
	conv, _, err := convert.ToLocalPooled(orig, convert.LocalPooledOptions{Block: 4, Segments: 2})
	if err != nil {
		t.Fatal(err)
	}
	inputs := runtime.GraphInputs(orig)
	calib, err := runtime.RandomInputs(orig, inputs, runtime.RandomOptions{Batch: 16, SeqLen: 32, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	held, err := runtime.RandomInputs(orig, inputs, runtime.RandomOptions{Batch: 4, SeqLen: 32, Seed: 99})
	if err != nil {
		t.Fatal(err)
	}
	fitted, rep, err := Fit(orig, conv, calib, Options{Steps: 80, LR: 3e-3, Batch: 8, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Op != ops.LocalPooledOp || len(rep.Layers) != cfg.Layers {
		t.Fatalf("fitted %s on %d layers, want %s on %d", rep.Op, len(rep.Layers), ops.LocalPooledOp, cfg.Layers)
	}
	for _, l := range rep.Layers {
		t.Logf("layer %d: relative error %.4f → %.4f", l.Layer, l.Before, l.After)
		if !(l.After < 0.9*l.Before) {
			t.Errorf("layer %d: fit did not reduce the error: %.4f → %.4f", l.Layer, l.Before, l.After)
		}
	}
	det, err := convert.Detect(orig)
	if err != nil {
		t.Fatal(err)
	}
	var values []string
	for _, b := range det.Blocks {
		values = append(values, runtime.MergedValue(orig, b.Output))
	}
	mc, err := runtime.CompareModels([]*onnxpb.ModelProto{orig, conv, fitted}, []string{"orig", "before", "after"}, held,
		runtime.ModelCompareOptions{Batch: 4, SeqLen: 32, Values: values})
	if err != nil {
		t.Fatal(err)
	}
	layerErr := map[string]float64{}
	for _, r := range mc.Rows {
		if r.Kind == "layer" {
			layerErr[r.Model] += r.RelErr
		}
	}
	t.Logf("held-out summed layer relative error %.4f → %.4f", layerErr["before"], layerErr["after"])
	if !(layerErr["after"] < 0.95*layerErr["before"]) || layerErr["before"] == 0 {
		t.Errorf("held-out layer attention error did not fall: %.4f → %.4f", layerErr["before"], layerErr["after"])
	}
	v, err := runtime.ValidateOps(fitted, held, runtime.ValidateOptions{})
	if err != nil || !v.OK() {
		t.Errorf("fitted model does not validate: %v", err)
	}
	// Q/K fitting changes WQ, BQ and WK of each layer (BK's gradient is
	// identically zero: softmax ignores a shift shared by a query's
	// scores); FitValues WV and BV as well.
	for _, c := range []struct {
		fitV bool
		want int
	}{{false, 3}, {true, 5}} {
		m := fitted
		if c.fitV {
			if m, _, err = Fit(orig, conv, calib, Options{Steps: 80, LR: 3e-3, Batch: 8, Seed: 3, FitValues: true}); err != nil {
				t.Fatal(err)
			}
		}
		before := map[string]*onnxpb.TensorProto{}
		for _, t := range conv.Graph.Initializer {
			before[t.GetName()] = t
		}
		changed := 0
		for _, t := range m.Graph.Initializer {
			if !proto.Equal(t, before[t.GetName()]) {
				changed++
			}
		}
		if changed != c.want*cfg.Layers {
			t.Errorf("FitValues %v: %d initializers changed, want %d per layer", c.fitV, changed, c.want)
		}
	}
}
