package finetune

import (
	"math/rand/v2"
	"testing"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/features"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

func randTensor(rng *rand.Rand, std float64, shape ...int) *onnx.Tensor {
	d := make([]float32, onnx.NumElements(shape))
	for i := range d {
		d[i] = float32(rng.NormFloat64() * std)
	}
	return onnx.NewFloat(shape, d)
}

// problem draws a small random layer with the last key of batch row 1
// padded.
func problem(t *testing.T, seed uint64, he, hf int, shared bool) *linformerProblem {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 9))
	B, H, S, D, K, N := 2, 2, 5, 3, 3, 7
	bias := make([]float32, B*S)
	bias[1*S+S-1] = -1e9
	p := &linformerProblem{
		Q: randTensor(rng, 1, B, H, S, D), K: randTensor(rng, 1, B, H, S, D), V: randTensor(rng, 1, B, H, S, D),
		Y: randTensor(rng, 1, B, H, S, D), E: randTensor(rng, 0.5, he, K, N), F: randTensor(rng, 0.5, hf, K, N),
		Bias: onnx.NewFloat([]int{B, 1, 1, S}, bias), SharedEF: shared,
	}
	if shared {
		p.F = p.E
	}
	if err := p.init(); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestLinformerForward: the float64 forward pass used for fitting agrees
// with the op's Go kernel (ops.Linformer) at the valid query rows.
func TestLinformerForward(t *testing.T) {
	for _, c := range []struct{ he, hf int }{{1, 1}, {2, 2}, {1, 2}} {
		p := problem(t, 1, c.he, c.hf, false)
		out, err := ops.Linformer(p.Q, p.K, p.V, p.E, p.F, p.Bias, ops.LinformerAttrs{})
		if err != nil {
			t.Fatal(err)
		}
		// Against the kernel's own output the (unnormalised) loss is ~0.
		p.y = f64(out)
		if l := p.LossGrad(nil, nil, nil); l > 1e-10 {
			t.Errorf("E heads %d, F heads %d: relative loss %g against the kernel's own output", c.he, c.hf, l)
		}
	}
}

// TestLinformerGradient compares the analytic gradient with central finite
// differences of the loss, for shared and per-head projections and E = F.
func TestLinformerGradient(t *testing.T) {
	for _, c := range []struct {
		he, hf int
		shared bool
		rows   []int
	}{{1, 1, false, nil}, {2, 2, false, nil}, {2, 1, false, []int{1}}, {2, 2, true, nil}, {2, 2, true, []int{0}}} {
		p := problem(t, 2, c.he, c.hf, c.shared)
		ge, gf := make([]float64, len(p.e)), make([]float64, len(p.f))
		p.LossGrad(c.rows, ge, gf)
		check := func(name string, x, g []float64) {
			num := numericGrad(x, func() float64 { return p.LossGrad(c.rows, nil, nil) })
			for i := 6; i < len(x); i += 7 {
				if g[i] != 0 && num[i] == 0 {
					t.Errorf("%s[%d]: analytic %g, numeric 0", name, i, g[i])
				}
			}
			worst, _ := gradError(num, g, 1e-3)
			if worst > 1e-5 {
				t.Errorf("E heads %d F heads %d shared %v: %s gradient relative error %g", c.he, c.hf, c.shared, name, worst)
			}
		}
		check("E", p.e, ge)
		if !c.shared {
			check("F", p.f, gf)
		}
		// Columns past S are not reached: zero gradient.
		for r := 0; r < p.he*p.k; r++ {
			for j := p.s; j < p.n; j++ {
				if ge[r*p.n+j] != 0 {
					t.Fatalf("gradient at column %d ≥ S", j)
				}
			}
		}
	}
}

// TestLinformerFitTiny converts the tiny BERT to Linformer with random
// projections, fits them on seeded random calibration inputs, and checks
// on other (held-out) inputs that the fitted model is closer to the
// original than the unfitted one, and that its ops still validate.
func TestLinformerFitTiny(t *testing.T) {
	orig, calib, held := tinyFitSetup(t, 8, 32)
	for _, share := range []features.Share{features.ShareHeadwise, features.ShareLayerwise, features.ShareKV} {
		t.Run(string(share), func(t *testing.T) { linformerFitTiny(t, orig, calib, held, share) })
	}
}

func linformerFitTiny(t *testing.T, orig *onnxpb.ModelProto, calib, held map[string]*onnx.Tensor, share features.Share) {
	conv, _, err := convert.ToLinformer(orig, convert.LinformerOptions{Init: "gaussian", K: 8, MaxLen: 32, Seed: 4, Share: share})
	if err != nil {
		t.Fatal(err)
	}
	fitted, rep, err := Linformer(orig, conv, calib, Options{Steps: 150, LR: 0.02})
	if err != nil {
		t.Fatal(err)
	}
	checkLayerFit(t, rep, 0.7)
	_, pooled := compareFit(t, orig, conv, fitted, held, 32, nil)
	t.Logf("held-out mean-pooled cosine vs original: before %.4f, after %.4f", pooled["before"], pooled["after"])
	if !(pooled["after"] > pooled["before"]) {
		t.Errorf("fitting did not bring the model closer on held-out inputs: %.4f → %.4f", pooled["before"], pooled["after"])
	}
	checkValidates(t, fitted, held)
	// Deterministic: fitting again gives the same model.
	again, _, err := Linformer(orig, conv, calib, Options{Steps: 150, LR: 0.02})
	if err != nil {
		t.Fatal(err)
	}
	if !sameEncoding(t, fitted, again) {
		t.Error("two fits of the same inputs differ")
	}
}
