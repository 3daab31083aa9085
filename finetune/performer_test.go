package finetune

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/models"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
	"google.golang.org/protobuf/proto"
)

// perfProblem draws a small random Performer layer with the last key of
// batch row 1 padded and a non-zero bias on one real key.
func perfProblem(t *testing.T, seed uint64, ho int, withBias bool) *performerProblem {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 11))
	B, S, Dm, H, D, M := 3, 5, 6, 2, 3, 7
	bias := make([]float32, B*S)
	bias[1*S+S-1] = -1e9
	bias[2] = 0.3
	p := &performerProblem{
		XQ: randTensor(rng, 1, B, S, Dm), XK: randTensor(rng, 1, B, S, Dm),
		WQ: randTensor(rng, 0.4, Dm, H*D), WK: randTensor(rng, 0.4, Dm, H*D),
		V: randTensor(rng, 1, B, H, S, D), Y: randTensor(rng, 0.3, B, H, S, D),
		Omega: randTensor(rng, 1, ho, M, D), Bias: onnx.NewFloat([]int{B, 1, 1, S}, bias),
		Epsilon: 1e-6,
	}
	if withBias {
		p.BQ, p.BK = randTensor(rng, 0.3, H*D), randTensor(rng, 0.3, H*D)
	}
	if err := p.init(); err != nil {
		t.Fatal(err)
	}
	return p
}

// heads computes split_heads(x·w + b) in float32 as an independent
// reference for the projection.
func heads(x, w, b *onnx.Tensor, h int) *onnx.Tensor {
	B, S, Dm, HD := x.Shape[0], x.Shape[1], x.Shape[2], w.Shape[1]
	D := HD / h
	out := make([]float32, B*h*S*D)
	xd, wd := x.Floats(), w.Floats()
	for bi := 0; bi < B; bi++ {
		for i := 0; i < S; i++ {
			for c := 0; c < HD; c++ {
				var acc float64
				for k := 0; k < Dm; k++ {
					acc += float64(xd[(bi*S+i)*Dm+k]) * float64(wd[k*HD+c])
				}
				if b != nil {
					acc += float64(b.Floats()[c])
				}
				out[((bi*h+c/D)*S+i)*D+c%D] = float32(acc)
			}
		}
	}
	return onnx.NewFloat([]int{B, h, S, D}, out)
}

// TestPerformerForward: the float64 forward pass used for fitting agrees
// with the op's Go kernel (ops.Performer) on the projected Q and K.
func TestPerformerForward(t *testing.T) {
	for _, c := range []struct {
		ho    int
		bias  bool
		large bool // inputs ×10: denominators far below the old ε
	}{{1, false, false}, {2, true, false}, {1, false, true}} {
		p := perfProblem(t, 3, c.ho, c.bias)
		if c.large {
			// The op's positive kernel is the plain ratio; the fit uses
			// Epsilon 0 for it (as PerformerFit sets from the node), so
			// rows whose denominators are tiny must still agree.
			for _, x := range []*onnx.Tensor{p.XQ, p.XK} {
				for i, v := range x.Floats() {
					x.Floats()[i] = 10 * v
				}
			}
			p.Epsilon = 0
			if err := p.init(); err != nil {
				t.Fatal(err)
			}
		}
		q, k := heads(p.XQ, p.WQ, p.BQ, p.h), heads(p.XK, p.WK, p.BK, p.h)
		out, err := ops.Performer(q, k, p.V, p.Omega, p.Bias, ops.PerformerAttrs{Epsilon: 1e-6})
		if err != nil {
			t.Fatal(err)
		}
		p.y = f64(out)
		// The residual against the kernel's own output is float32 rounding.
		var res float64
		p.rowNorm = []float64{1, 1, 1}
		res = p.LossGrad(nil, nil) * 3
		ref := validSquares(p.y, p.valid, p.b, p.h, p.s, p.dv)
		if rel := math.Sqrt(res / ref); rel > 1e-5 {
			t.Errorf("Omega heads %d, bias %v, large %v: relative error %g against ops.Performer", c.ho, c.bias, c.large, rel)
		}
	}
}

// TestPerformerGradient compares the analytic gradient with central finite
// differences of the loss (stabilising maxima held fixed, as in the
// derivation), on all rows and on a mini-batch.
func TestPerformerGradient(t *testing.T) {
	for _, c := range []struct {
		ho   int
		bias bool
		rows []int
	}{{1, true, nil}, {2, true, []int{0, 2}}, {2, false, []int{1}}} {
		p := perfProblem(t, 5, c.ho, c.bias)
		g := p.newGrads()
		p.LossGrad(c.rows, g)
		p.FixedMaxima = true
		check := func(name string, x, grad []float64) {
			worst, nonzero := gradError(numericGrad(x, func() float64 { return p.LossGrad(c.rows, nil) }), grad, 1e-4)
			if worst > 1e-5 {
				t.Errorf("Omega heads %d rows %v: %s gradient relative error %g", c.ho, c.rows, name, worst)
			}
			if nonzero == 0 {
				t.Errorf("%s: loss does not depend on it", name)
			}
		}
		check("WQ", p.wq, g.wq)
		check("WK", p.wk, g.wk)
		check("BQ", p.bq, g.bq)
		check("BK", p.bk, g.bk)
	}
}

// TestPerformerFitTiny converts the tiny BERT to Performer, fits the Q/K
// projections on seeded random calibration inputs, and checks on other
// (held-out) inputs that the fitted model is closer to the original than
// the unfitted one, that ω is untouched, that its ops still validate, and
// that fitting is deterministic.
func TestPerformerFitTiny(t *testing.T) {
	orig, calib, held := tinyFitSetup(t, 16, 24)
	cfg := models.TinyConfig()
	conv, _, err := convert.ToPerformer(orig, convert.PerformerOptions{Features: 32, Seed: 4, FeatureMap: ops.FeaturesFavorPlus, Center: convert.CenterOff})
	if err != nil {
		t.Fatal(err)
	}
	opt := Options{Steps: 120, LR: 2e-3, Batch: 8, Seed: 3}
	fitted, rep, err := Performer(orig, conv, calib, opt)
	if err != nil {
		t.Fatal(err)
	}
	checkLayerFit(t, rep, 0.8)
	// Held-out per-layer attention error and final output, measured by the
	// compare library.
	layerErr, pooled := compareFit(t, orig, conv, fitted, held, 24, mergedValues(t, orig))
	t.Logf("held-out: pooled cosine %.4f → %.4f; summed layer relative error %.4f → %.4f",
		pooled["before"], pooled["after"], layerErr["before"], layerErr["after"])
	if !(pooled["after"] > pooled["before"]) {
		t.Errorf("fitting did not bring the model closer on held-out inputs: %.4f → %.4f", pooled["before"], pooled["after"])
	}
	if !(layerErr["after"] < layerErr["before"]) || layerErr["before"] == 0 {
		t.Errorf("held-out layer attention error did not fall: %.4f → %.4f", layerErr["before"], layerErr["after"])
	}
	// ω and every initializer other than the Q/K projections are unchanged.
	if changed := changedInitializers(conv, fitted); changed != 4*cfg.Layers {
		t.Errorf("%d initializers changed, want the 4 Q/K projection tensors of each of %d layers", changed, cfg.Layers)
	}
	checkValidates(t, fitted, held)
	again, _, err := Performer(orig, conv, calib, opt)
	if err != nil {
		t.Fatal(err)
	}
	if !sameEncoding(t, fitted, again) {
		t.Error("two fits with the same inputs and seed differ")
	}
}

// TestPerformerRefusesCausal checks that a causal PerformerAttention node
// (causal=1), which the fit has no masking for, is refused up front with
// an error naming it.
func TestPerformerRefusesCausal(t *testing.T) {
	orig, err := models.BERT(models.TinyConfig())
	if err != nil {
		t.Fatal(err)
	}
	conv, _, err := convert.ToPerformer(orig, convert.PerformerOptions{Features: 8, Seed: 4, FeatureMap: ops.FeaturesFavorPlus, Center: convert.CenterOff})
	if err != nil {
		t.Fatal(err)
	}
	var node *onnxpb.NodeProto
	for _, n := range conv.Graph.Node {
		if n.GetDomain() == ops.Domain && n.GetOpType() == ops.PerformerOp {
			node = n
			break
		}
	}
	if node == nil {
		t.Fatal("the converted model has no PerformerAttention node")
	}
	if a := onnx.Attr(node, "causal"); a != nil {
		a.I = proto.Int64(1)
	} else {
		node.Attribute = append(node.Attribute, &onnxpb.AttributeProto{Name: proto.String("causal"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(1)})
	}
	_, _, err = Performer(orig, conv, nil, Options{Steps: 1})
	if err == nil || !strings.Contains(err.Error(), "causal") || !strings.Contains(err.Error(), node.GetName()) {
		t.Fatalf("causal node %s: got error %v, want a refusal naming it", node.GetName(), err)
	}
}
