package ops_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

// performerRef computes the random-feature estimate of softmax attention in
// float64 straight from its definition, without stabilisers:
// κ(q, k) = mean over features of φ(q)·φ(k) with φ the positive features
// exp(ω·x̃ − ‖x̃‖²/2) or the trig pair exp(‖x̃‖²/2)(cos ω·x̃, sin ω·x̃),
// times exp(b) for valid keys (0 for masked ones), out = Σκv / Σκ; the
// positive terms are summed from their logs (ratioFromLogs), so that
// large norms cannot leave float64's range.
func performerRef(q, k, v, omega, bias *onnx.Tensor, scale float64, kernel ops.PerformerKernel) []float64 {
	b, h, sq, d := q.Shape[0], q.Shape[1], q.Shape[2], q.Shape[3]
	sk, dv := k.Shape[2], v.Shape[3]
	m := omega.Shape[1]
	qd, kd, vd, od := widen(q.Floats()), widen(k.Floats()), widen(v.Floats()), widen(omega.Floats())
	out := make([]float64, b*h*sq*dv)
	for bh := 0; bh < b*h; bh++ {
		bi, hi := bh/h, bh%h
		om := od
		if omega.Shape[0] > 1 {
			om = od[hi*m*d:]
		}
		feat := func(x []float64) ([]float64, float64) { return featureLogits(x, om, m, d, scale) }
		for i := 0; i < sq; i++ {
			uq, hq := feat(qd[(bh*sq+i)*d:])
			var den float64
			num := make([]float64, dv)
			l := make([][]float64, sk) // positive kernel: log of each term
			for j := 0; j < sk; j++ {
				bv := 0.0
				if bias != nil {
					bb := bias.Floats()
					row := 0
					if bias.Shape[0] > 1 {
						row = bi
					}
					bv = float64(bb[row*bias.Shape[3]+j])
					if bv <= -1e4 {
						continue
					}
				}
				uk, hk := feat(kd[(bh*sk+j)*d:])
				if kernel != ops.KernelTrig {
					l[j] = make([]float64, m)
					for r := range l[j] {
						l[j][r] = uq[r] - hq + uk[r] - hk + bv - math.Log(float64(m))
					}
					continue
				}
				var kap float64
				for r := 0; r < m; r++ {
					kap += math.Exp(hq+hk) * (math.Cos(uq[r])*math.Cos(uk[r]) + math.Sin(uq[r])*math.Sin(uk[r]))
				}
				kap *= math.Exp(bv) / float64(m)
				den += kap
				for c := 0; c < dv; c++ {
					num[c] += kap * vd[(bh*sk+j)*dv+c]
				}
			}
			if kernel != ops.KernelTrig {
				num = ratioFromLogs(l, dv, func(j, c int) float64 { return vd[(bh*sk+j)*dv+c] })
				den = 1
			}
			for c := 0; c < dv; c++ {
				out[(bh*sq+i)*dv+c] = num[c] / den
			}
		}
	}
	return out
}

type perfCase struct {
	name     string
	kernel   ops.PerformerKernel
	b, h, s  int
	d, dv, m int
	perHead  bool
	bias     string // "none" (nil / zero), "pad" (−1e4), "inf" (−Inf), "value" (small real bias plus padding)
	sigma    float64
}

func perfCases() []perfCase {
	var cs []perfCase
	for _, kernel := range []ops.PerformerKernel{ops.KernelPositive, ops.KernelTrig} {
		for _, perHead := range []bool{false, true} {
			for _, bias := range []string{"none", "pad", "inf", "value"} {
				c := perfCase{kernel: kernel, b: 2, h: 3, s: 7, d: 8, dv: 5, m: 16, perHead: perHead, bias: bias, sigma: 0.5}
				c.name = fmt.Sprintf("%s/perhead=%v/bias=%s", kernel, perHead, bias)
				cs = append(cs, c)
			}
		}
	}
	return cs
}

func (c perfCase) inputs(seed uint64) (q, k, v, omega, bias *onnx.Tensor) {
	rng := rand.New(rand.NewPCG(seed, 7))
	q, k, v = randQKV(rng, c.sigma, c.b, c.h, c.s, c.d, c.dv)
	omega = randTensor(rng, 1, paramHeads(c.perHead, c.h), c.m, c.d)
	switch c.bias { // not caseBias (localpooled_test.go): other pads, "value"
	case "pad":
		bias = padBias(c.s, -1e4, 0, 3)
	case "inf":
		bias = padBias(c.s, float32(math.Inf(-1)), 2, 0)
	case "value":
		bias = padBias(c.s, -3.4e38, 1, 2)
		for i, x := range bias.Floats() {
			if x == 0 {
				bias.Floats()[i] = float32(rng.NormFloat64() * 0.5)
			}
		}
	}
	return
}

// bodyModel returns a one-node model of the case's function at opset, its
// inputs and the Go kernel's output on them.
func (c perfCase) bodyModel(t *testing.T, seed uint64, opset int64) (*onnxpb.ModelProto, map[string]*onnx.Tensor, *onnx.Tensor) {
	t.Helper()
	q, k, v, omega, bias := c.inputs(seed)
	if bias == nil {
		// The converter passes a zero [1,1,1,1] bias when the graph has
		// none.
		bias = onnx.NewFloat([]int{1, 1, 1, 1}, []float32{0})
	}
	attrs := ops.PerformerAttrs{Scale: 0.3, Kernel: c.kernel}
	want, err := ops.Performer(q, k, v, omega, bias, attrs)
	if err != nil {
		t.Fatal(err)
	}
	fn, err := ops.PerformerFunction(c.kernel, opset)
	if err != nil {
		t.Fatal(err)
	}
	node := ops.NewPerformerNode("perf", []string{"Q", "K", "V", "Omega", "key_bias"}, "out", attrs)
	in := map[string]*onnx.Tensor{"Q": q, "K": k, "V": v, "Omega": omega, "key_bias": bias}
	return oneNodeModel(t, node, fn, opset, in), in, want
}

// The kernel computes the random-feature estimator it defines: compare with
// a float64 evaluation of the unstabilised formula.
func TestPerformerKernelMatchesFormula(t *testing.T) {
	for _, c := range perfCases() {
		t.Run(c.name, func(t *testing.T) {
			q, k, v, omega, bias := c.inputs(1)
			scale := 1 / math.Sqrt(float64(c.d))
			got, err := ops.Performer(q, k, v, omega, bias, ops.PerformerAttrs{Kernel: c.kernel, Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			want := performerRef(q, k, v, omega, bias, scale, c.kernel)
			tol := 1e-4
			if c.kernel == ops.KernelTrig {
				// Trig denominators can be close to zero, which magnifies
				// float32 rounding; compare relative to each row's scale.
				tol = 1e-3
			}
			var wmax float64
			for _, x := range want {
				wmax = math.Max(wmax, math.Abs(x))
			}
			if d := maxDiff(t, got.Floats(), want); d > tol*wmax {
				t.Errorf("max abs error %.3g > %.3g", d, tol*wmax)
			}
		})
	}
}

// The ONNX function body, run by onnxruntime, agrees with the Go kernel on
// the same inputs for every option combination.
func TestPerformerFunctionMatchesKernel(t *testing.T) {
	requireORT(t)
	for _, opset := range []int64{11, 13, 17, 18} {
		for _, c := range perfCases() {
			t.Run(fmt.Sprintf("opset%d/%s", opset, c.name), func(t *testing.T) {
				m, in, want := c.bodyModel(t, 2, opset)
				got := runORT(t, m, in)
				t.Logf("relative error %.2g", checkClose(t, "onnxruntime vs Go kernel", got, want, 1e-4))
			})
		}
	}
}

// Query/key norms ×10 (logits far beyond float32 exp range without the
// stabilisers) give finite outputs in the kernel and in onnxruntime.
func TestPerformerLargeNormsFinite(t *testing.T) {
	for _, kernel := range []ops.PerformerKernel{ops.KernelPositive, ops.KernelTrig} {
		c := perfCase{kernel: kernel, b: 2, h: 2, s: 9, d: 16, dv: 4, m: 32, perHead: true, bias: "pad", sigma: 10}
		q, k, v, omega, bias := c.inputs(3)
		attrs := ops.PerformerAttrs{Scale: 1 / 4.0, Kernel: kernel}
		got, err := ops.Performer(q, k, v, omega, bias, attrs)
		if err != nil {
			t.Fatal(err)
		}
		maxDiff(t, got.Floats(), make([]float64, got.Len())) // fails on NaN/Inf
		if err := infer.ORTAvailable(); err != nil {
			t.Logf("%s: onnxruntime not available, function body not checked: %v", kernel, err)
			continue
		}
		fn, err := ops.PerformerFunction(kernel, 17)
		if err != nil {
			t.Fatal(err)
		}
		node := ops.NewPerformerNode("perf", []string{"Q", "K", "V", "Omega", "key_bias"}, "out", attrs)
		in := map[string]*onnx.Tensor{"Q": q, "K": k, "V": v, "Omega": omega, "key_bias": bias}
		ort := runORT(t, oneNodeModel(t, node, fn, 17, in), in)
		maxDiff(t, ort.Floats(), make([]float64, ort.Len()))
		if kernel == ops.KernelPositive {
			checkClose(t, string(kernel)+" large norms: onnxruntime vs Go kernel", ort, got, 1e-4)
		}
	}
}

// Appending padded tokens (bias −1e4 or −Inf) leaves the outputs at the
// real tokens unchanged.
func TestPerformerPaddingInvariance(t *testing.T) {
	for _, kernel := range []ops.PerformerKernel{ops.KernelPositive, ops.KernelTrig} {
		for _, masked := range []float32{-1e4, float32(math.Inf(-1))} {
			rng := rand.New(rand.NewPCG(4, 4))
			const b, h, s, pad, d, dv, m = 2, 2, 6, 5, 8, 3, 24
			q, k, v := randQKV(rng, 0.7, b, h, s+pad, d, dv)
			omega := randTensor(rng, 1, 1, m, d)
			// Padded keys get large norms, so that a leak would show.
			for i := range k.Floats() {
				if (i/d)%(s+pad) >= s {
					k.Floats()[i] *= 5
				}
			}
			attrs := ops.PerformerAttrs{Kernel: kernel}
			full, err := ops.Performer(q, k, v, omega, padBias(s+pad, masked, pad, pad), attrs)
			if err != nil {
				t.Fatal(err)
			}
			short, err := ops.Performer(prefix(q, s), prefix(k, s), prefix(v, s), omega, nil, attrs)
			if err != nil {
				t.Fatal(err)
			}
			checkClose(t, fmt.Sprintf("%s bias %g: padded vs unpadded", kernel, masked), prefix(full, s), short, 1e-5)
		}
	}
}

// prefix returns x[:, :, :s, :].
func prefix(x *onnx.Tensor, s int) *onnx.Tensor {
	b, h, n, d := x.Shape[0], x.Shape[1], x.Shape[2], x.Shape[3]
	out := make([]float32, 0, b*h*s*d)
	for bh := 0; bh < b*h; bh++ {
		out = append(out, x.Floats()[bh*n*d:(bh*n+s)*d]...)
	}
	return onnx.NewFloat([]int{b, h, s, d}, out)
}

func TestPerformerErrors(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	q := randTensor(rng, 1, 1, 2, 3, 4)
	v := randTensor(rng, 1, 1, 2, 3, 5)
	for _, c := range []struct {
		name  string
		omega *onnx.Tensor
		bias  *onnx.Tensor
		attrs ops.PerformerAttrs
	}{
		{"omega width", randTensor(rng, 1, 1, 8, 3), nil, ops.PerformerAttrs{}},
		{"omega heads", randTensor(rng, 1, 3, 8, 4), nil, ops.PerformerAttrs{}},
		{"omega rank", randTensor(rng, 1, 8, 4), nil, ops.PerformerAttrs{}},
		{"bias shape", randTensor(rng, 1, 1, 8, 4), randTensor(rng, 1, 1, 1, 1, 4), ops.PerformerAttrs{}},
		{"kernel", randTensor(rng, 1, 1, 8, 4), nil, ops.PerformerAttrs{Kernel: "relu"}},
		{"epsilon", randTensor(rng, 1, 1, 8, 4), nil, ops.PerformerAttrs{Epsilon: -1}},
	} {
		if _, err := ops.Performer(q, q, v, c.omega, c.bias, c.attrs); err == nil {
			t.Errorf("%s: no error", c.name)
		} else if err.Error()[:4] != "ops:" {
			t.Errorf("%s: error %q lacks the package prefix", c.name, err)
		}
	}
	if _, err := ops.PerformerFunction("positive", 10); err == nil {
		t.Error("opset 10: no error")
	}
}

// The function honours the epsilon attribute and defaults it to 1e-6, like
// the kernel, for the trig kernel (a large epsilon visibly changes the
// output, so the two comparisons cannot both pass if the attribute were
// ignored); the positive kernel's output does not depend on it.
func TestPerformerFunctionEpsilon(t *testing.T) {
	requireORT(t)
	c := perfCase{kernel: ops.KernelTrig, b: 2, h: 2, s: 5, d: 8, dv: 3, m: 16, bias: "pad", sigma: 0.5}
	q, k, v, omega, bias := c.inputs(6)
	fn, err := ops.PerformerFunction(c.kernel, 17)
	if err != nil {
		t.Fatal(err)
	}
	in := map[string]*onnx.Tensor{"Q": q, "K": k, "V": v, "Omega": omega, "key_bias": bias}
	inputs := []string{"Q", "K", "V", "Omega", "key_bias"}
	def, err := ops.Performer(q, k, v, omega, bias, ops.PerformerAttrs{Scale: 0.35, Kernel: c.kernel})
	if err != nil {
		t.Fatal(err)
	}
	big, err := ops.Performer(q, k, v, omega, bias, ops.PerformerAttrs{Scale: 0.35, Kernel: c.kernel, Epsilon: 3})
	if err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(t, big.Floats(), widen(def.Floats())); d < 1e-2*maxAbs(def.Floats()) {
		t.Fatalf("epsilon 3 changes the output by only %.3g", d)
	}
	node := ops.NewPerformerNode("perf", inputs, "out", ops.PerformerAttrs{Scale: 0.35, Kernel: c.kernel})
	node.Attribute = node.Attribute[:2] // scale and kernel: epsilon from the function's default
	checkClose(t, "default epsilon", runORT(t, oneNodeModel(t, node, fn, 17, in), in), def, 1e-4)
	node = ops.NewPerformerNode("perf", inputs, "out", ops.PerformerAttrs{Scale: 0.35, Kernel: c.kernel, Epsilon: 3})
	checkClose(t, "epsilon 3", runORT(t, oneNodeModel(t, node, fn, 17, in), in), big, 1e-4)

	// Positive kernel: the ratio itself, whatever epsilon, in the kernel
	// and in the body.
	fn, err = ops.PerformerFunction(ops.KernelPositive, 17)
	if err != nil {
		t.Fatal(err)
	}
	want := performerRef(q, k, v, omega, bias, 0.35, ops.KernelPositive)
	for _, eps := range []float32{1e-6, 3} {
		a := ops.PerformerAttrs{Scale: 0.35, Epsilon: eps}
		got, err := ops.Performer(q, k, v, omega, bias, a)
		if err != nil {
			t.Fatal(err)
		}
		if d := maxDiff(t, got.Floats(), want); d > 1e-5*maxAbs(got.Floats()) {
			t.Errorf("positive, epsilon %g: kernel differs from the ratio by %.3g", eps, d)
		}
		ort := runORT(t, oneNodeModel(t, ops.NewPerformerNode("perf", inputs, "out", a), fn, 17, in), in)
		if d := maxDiff(t, ort.Floats(), want); d > 1e-5*maxAbs(ort.Floats()) {
			t.Errorf("positive, epsilon %g: body differs from the ratio by %.3g", eps, d)
		}
	}
}
