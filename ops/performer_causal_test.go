package ops_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/infer/infertest"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

// causalRef computes causal FAVOR+ in float64 straight from its
// definition, without stabilisers: κ(q, k) = mean over features of
// exp(ω·q̃ − ‖q̃‖²/2)·exp(ω·k̃ − ‖k̃‖²/2)·exp(b) for valid keys,
// out_i = Σ_{j≤i} κ(q_i, k_j) v_j / Σ_{j≤i} κ(q_i, k_j), and 0 when no
// valid key j ≤ i exists.
func causalRef(q, k, v, omega, bias *onnx.Tensor, scale float64) []float64 {
	b, h, s, d := q.Shape[0], q.Shape[1], q.Shape[2], q.Shape[3]
	dv, m := v.Shape[3], omega.Shape[1]
	qd, kd, vd, od := widen(q.Floats()), widen(k.Floats()), widen(v.Floats()), widen(omega.Floats())
	out := make([]float64, b*h*s*dv)
	for bh := 0; bh < b*h; bh++ {
		bi, hi := bh/h, bh%h
		om := od
		if omega.Shape[0] > 1 {
			om = od[hi*m*d:]
		}
		logits := func(x []float64) []float64 { // ω·x̃ − ‖x̃‖²/2 per feature
			u, hh := featureLogits(x, om, m, d, scale)
			for r := range u {
				u[r] -= hh
			}
			return u
		}
		for i := 0; i < s; i++ {
			lq := logits(qd[(bh*s+i)*d:])
			var den float64
			num := make([]float64, dv)
			for j := 0; j <= i; j++ {
				bv := 0.0
				if bias != nil {
					row, col := 0, j
					if bias.Shape[0] > 1 {
						row = bi
					}
					if bias.Shape[3] == 1 {
						col = 0
					}
					bv = float64(bias.Floats()[row*bias.Shape[3]+col])
					if !(bv > -1e4) {
						continue
					}
				}
				lk := logits(kd[(bh*s+j)*d:])
				var kap float64
				for r := 0; r < m; r++ {
					kap += math.Exp(lq[r] + lk[r])
				}
				kap *= math.Exp(bv) / float64(m)
				den += kap
				for c := 0; c < dv; c++ {
					num[c] += kap * vd[(bh*s+j)*dv+c]
				}
			}
			for c := 0; c < dv; c++ {
				if den > 0 {
					out[(bh*s+i)*dv+c] = num[c] / den
				}
			}
		}
	}
	return out
}

type causalCase struct {
	name    string
	b, h, s int
	d, dv   int
	m       int
	perHead bool
	bias    string // "none", "zero" ([1,1,1,1] zero), "pad" (right), "left" (left padding), "value" (real bias and −Inf padding)
	sigma   float64
	chunk   int
}

func causalCases() []causalCase {
	var cs []causalCase
	for _, s := range []int{1, 3, 8, 13} {
		for _, bias := range []string{"none", "pad", "left", "value"} {
			for _, perHead := range []bool{false, true} {
				c := causalCase{b: 2, h: 3, s: s, d: 8, dv: 5, m: 16, perHead: perHead, bias: bias, sigma: 0.6, chunk: 4}
				c.name = fmt.Sprintf("S=%d/C=4/bias=%s/perhead=%v", s, bias, perHead)
				cs = append(cs, c)
			}
		}
	}
	// The default chunk length: S < C, and S over two chunks.
	for _, s := range []int{7, 130} {
		c := causalCase{b: 1, h: 2, s: s, d: 16, dv: 8, m: 32, bias: "pad", sigma: 0.5}
		c.name = fmt.Sprintf("S=%d/C=default/bias=pad", s)
		cs = append(cs, c)
	}
	return cs
}

// inputs draws like perfCase.inputs, with its own stream and biases.
func (c causalCase) inputs(seed uint64) (q, k, v, omega, bias *onnx.Tensor) {
	rng := rand.New(rand.NewPCG(seed, 14))
	q, k, v = randQKV(rng, c.sigma, c.b, c.h, c.s, c.d, c.dv)
	omega = randTensor(rng, 1, paramHeads(c.perHead, c.h), c.m, c.d)
	pads := func(p ...int) []int { // clamp the padding to the length
		for i := range p {
			p[i] = min(p[i], c.s-1)
		}
		return p[:c.b]
	}
	switch c.bias {
	case "zero":
		bias = onnx.NewFloat([]int{1, 1, 1, 1}, []float32{0})
	case "pad":
		bias = padBias(c.s, -1e4, pads(0, 3, 1)...)
	case "left":
		// The first keys are padding: queries before the first valid key
		// see nothing and give 0.
		bias = padBias(c.s, -1e4, make([]int, c.b)...)
		for bi, p := range pads(2, 0, 1) {
			for j := 0; j < p; j++ {
				bias.Floats()[bi*c.s+j] = -1e4
			}
		}
	case "value":
		bias = padBias(c.s, float32(math.Inf(-1)), pads(2, 0, 1)...)
		for i, x := range bias.Floats() {
			if x == 0 {
				bias.Floats()[i] = float32(rng.NormFloat64() * 0.5)
			}
		}
	}
	return
}

func (c causalCase) attrs() ops.PerformerAttrs {
	return ops.PerformerAttrs{Scale: 0.3, Causal: true, Chunk: c.chunk}
}

func relErr(t *testing.T, got []float32, want []float64) float64 {
	t.Helper()
	var scale float64
	for _, x := range want {
		scale = math.Max(scale, math.Abs(x))
	}
	return maxDiff(t, got, want) / math.Max(scale, 1e-3)
}

// The causal kernel computes the estimator it defines: compare with a
// float64 evaluation of the unstabilised formula.
func TestPerformerCausalKernelMatchesFormula(t *testing.T) {
	worst := 0.0
	for _, c := range causalCases() {
		t.Run(c.name, func(t *testing.T) {
			q, k, v, omega, bias := c.inputs(1)
			got, err := ops.Performer(q, k, v, omega, bias, ops.PerformerAttrs{Scale: 0.3, Causal: true, Threads: 2, Epsilon: 1e-12})
			if err != nil {
				t.Fatal(err)
			}
			e := relErr(t, got.Floats(), causalRef(q, k, v, omega, bias, 0.3))
			worst = math.Max(worst, e)
			if e > 1e-4 {
				t.Errorf("max error %.3g of the output scale > 1e-4", e)
			}
		})
	}
	t.Logf("worst kernel error vs float64 formula: %.2g of the output scale", worst)
}

// The causal function body, run by onnxruntime, agrees with the Go kernel
// for several lengths (S = 1, S < C, S a multiple of C, S not a multiple
// of C) and opsets.
func TestPerformerCausalFunctionMatchesKernel(t *testing.T) {
	requireORT(t)
	worst := 0.0
	for _, opset := range []int64{11, 13, 17, 18, 23} {
		for _, c := range causalCases() {
			if opset != 17 && (c.perHead || c.bias == "value") {
				continue // the other opsets check the body's form, not every input
			}
			t.Run(fmt.Sprintf("opset%d/%s", opset, c.name), func(t *testing.T) {
				m, in, want := c.bodyModel(t, 2, opset)
				got := runORT(t, m, in)
				worst = math.Max(worst, checkClose(t, "onnxruntime vs Go kernel", got, want, 1e-4))
			})
		}
	}
	t.Logf("worst onnxruntime-vs-kernel error: %.2g of the output scale", worst)
}

// bodyModel returns a one-node model of the case's causal function at
// opset, its inputs (a zero [1,1,1,1] bias when the case has none) and the
// Go kernel's output on them.
func (c causalCase) bodyModel(t *testing.T, seed uint64, opset int64) (*onnxpb.ModelProto, map[string]*onnx.Tensor, *onnx.Tensor) {
	t.Helper()
	q, k, v, omega, bias := c.inputs(seed)
	if bias == nil {
		bias = onnx.NewFloat([]int{1, 1, 1, 1}, []float32{0})
	}
	want, err := ops.Performer(q, k, v, omega, bias, c.attrs())
	if err != nil {
		t.Fatal(err)
	}
	fn, err := ops.PerformerFunctionFor(ops.PerformerVariant{Causal: true, Chunk: c.chunk}, opset)
	if err != nil {
		t.Fatal(err)
	}
	node := ops.NewPerformerNode("perf", []string{"Q", "K", "V", "Omega", "key_bias"}, "out", c.attrs())
	in := map[string]*onnx.Tensor{"Q": q, "K": k, "V": v, "Omega": omega, "key_bias": bias}
	return oneNodeModel(t, node, fn, opset, in), in, want
}

// perturbAfter returns a copy of x [B,H,S,D] whose rows at positions > t
// are replaced by large random values.
func perturbAfter(rng *rand.Rand, x *onnx.Tensor, t int) *onnx.Tensor {
	b, h, s, d := x.Shape[0], x.Shape[1], x.Shape[2], x.Shape[3]
	out := append([]float32(nil), x.Floats()...)
	for bh := 0; bh < b*h; bh++ {
		for i := t + 1; i < s; i++ {
			for c := 0; c < d; c++ {
				out[(bh*s+i)*d+c] = float32(rng.NormFloat64() * 4)
			}
		}
	}
	return onnx.NewFloat(x.Shape, out)
}

// sameUpTo reports the first position ≤ t where a and b [B,H,S,Dv] differ
// in any bit, or −1. convert/causal_test.go has its own: test helpers do
// not cross packages.
func sameUpTo(a, b *onnx.Tensor, t int) int {
	bb, h, s, dv := a.Shape[0], a.Shape[1], a.Shape[2], a.Shape[3]
	for bh := 0; bh < bb*h; bh++ {
		for i := 0; i <= t; i++ {
			for c := 0; c < dv; c++ {
				x, y := a.Floats()[(bh*s+i)*dv+c], b.Floats()[(bh*s+i)*dv+c]
				if math.Float32bits(x) != math.Float32bits(y) {
					return i
				}
			}
		}
	}
	return -1
}

// Changing the tokens after position t (queries, keys, values and their
// key bias, with norms that move every maximum) never changes an output at
// positions ≤ t, in any bit: in the Go kernel and in the function body run
// by onnxruntime (one session for both runs).
func TestPerformerCausalExact(t *testing.T) {
	c := causalCase{b: 2, h: 2, s: 23, d: 8, dv: 4, m: 16, bias: "value", sigma: 0.6, chunk: 4}
	q, k, v, omega, bias := c.inputs(3)
	node := ops.NewPerformerNode("perf", []string{"Q", "K", "V", "Omega", "key_bias"}, "out", c.attrs())
	var sess infer.Session
	if infertest.ORT(t) {
		fn, err := ops.PerformerFunctionFor(ops.PerformerVariant{Causal: true, Chunk: c.chunk}, 17)
		if err != nil {
			t.Fatal(err)
		}
		in := map[string]*onnx.Tensor{"Q": q, "K": k, "V": v, "Omega": omega, "key_bias": bias}
		sess, err = infer.NewORTSession(oneNodeModel(t, node, fn, 17, in), infer.Options{Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
	} else {
		t.Log("onnxruntime not available: the function body is not checked")
	}
	run := func(q, k, v, bias *onnx.Tensor) (kern, ort *onnx.Tensor) {
		kern, err := ops.Performer(q, k, v, omega, bias, c.attrs())
		if err != nil {
			t.Fatal(err)
		}
		if sess != nil {
			res, err := sess.Run(map[string]*onnx.Tensor{"Q": q, "K": k, "V": v, "Omega": omega, "key_bias": bias}, "out")
			if err != nil {
				t.Fatal(err)
			}
			ort = res["out"]
		}
		return kern, ort
	}
	baseK, baseO := run(q, k, v, bias)
	rng := rand.New(rand.NewPCG(9, 9))
	for _, at := range []int{0, 2, 3, 4, 9, 15, 21} {
		nb := append([]float32(nil), bias.Floats()...)
		for bi := 0; bi < c.b; bi++ {
			for j := at + 1; j < c.s; j++ {
				if rng.IntN(3) == 0 {
					nb[bi*c.s+j] = -1e4
				} else {
					nb[bi*c.s+j] = float32(rng.NormFloat64())
				}
			}
		}
		pk, po := run(perturbAfter(rng, q, at), perturbAfter(rng, k, at), perturbAfter(rng, v, at), onnx.NewFloat(bias.Shape, nb))
		if i := sameUpTo(baseK, pk, at); i >= 0 {
			t.Errorf("Go kernel: changing tokens after %d changes the output at %d", at, i)
		}
		if sameUpTo(baseK, pk, c.s-1) < 0 {
			t.Errorf("Go kernel: changing tokens after %d changes nothing at all (the test does not test)", at)
		}
		if sess != nil {
			if i := sameUpTo(baseO, po, at); i >= 0 {
				t.Errorf("onnxruntime: changing tokens after %d changes the output at %d", at, i)
			}
			if sameUpTo(baseO, po, c.s-1) < 0 {
				t.Errorf("onnxruntime: changing tokens after %d changes nothing at all", at)
			}
		}
	}
}

// A padded key (bias −1e4 or −Inf) never contributes: changing its key and
// value leaves every output unchanged (the kernel in every bit; the body
// within rounding of the sign of a zero), and the outputs equal the
// formula that leaves the key out.
func TestPerformerCausalPaddedKeys(t *testing.T) {
	c := causalCase{b: 2, h: 2, s: 11, d: 8, dv: 4, m: 16, sigma: 0.6, chunk: 4}
	q, k, v, omega, _ := c.inputs(4)
	bias := onnx.NewFloat([]int{2, 1, 1, c.s}, make([]float32, 2*c.s))
	masked := map[int]bool{3: true, 4: true, 9: true}
	for j := range masked {
		bias.Floats()[j] = -1e4
		bias.Floats()[c.s+j] = float32(math.Inf(-1))
	}
	k2 := append([]float32(nil), k.Floats()...)
	v2 := append([]float32(nil), v.Floats()...)
	rng := rand.New(rand.NewPCG(5, 5))
	for bh := 0; bh < c.b*c.h; bh++ {
		for j := range masked {
			for x := 0; x < c.d; x++ {
				k2[(bh*c.s+j)*c.d+x] = float32(rng.NormFloat64() * 20)
			}
			for x := 0; x < c.dv; x++ {
				v2[(bh*c.s+j)*c.dv+x] = float32(rng.NormFloat64() * 1e3)
			}
		}
	}
	kk, vv := onnx.NewFloat(k.Shape, k2), onnx.NewFloat(v.Shape, v2)
	a, err := ops.Performer(q, k, v, omega, bias, c.attrs())
	if err != nil {
		t.Fatal(err)
	}
	b, err := ops.Performer(q, kk, vv, omega, bias, c.attrs())
	if err != nil {
		t.Fatal(err)
	}
	if i := sameUpTo(a, b, c.s-1); i >= 0 {
		t.Errorf("Go kernel: a padded key changes the output at %d", i)
	}
	if e := relErr(t, b.Floats(), causalRef(q, k, v, omega, bias, 0.3)); e > 1e-4 {
		t.Errorf("Go kernel vs formula without the padded keys: %.3g", e)
	}
	if !infertest.ORT(t) {
		return
	}
	fn, err := ops.PerformerFunctionFor(ops.PerformerVariant{Causal: true, Chunk: c.chunk}, 17)
	if err != nil {
		t.Fatal(err)
	}
	node := ops.NewPerformerNode("perf", []string{"Q", "K", "V", "Omega", "key_bias"}, "out", c.attrs())
	in := map[string]*onnx.Tensor{"Q": q, "K": k, "V": v, "Omega": omega, "key_bias": bias}
	oa := runORT(t, oneNodeModel(t, node, fn, 17, in), in)
	in2 := map[string]*onnx.Tensor{"Q": q, "K": kk, "V": vv, "Omega": omega, "key_bias": bias}
	ob := runORT(t, oneNodeModel(t, node, fn, 17, in2), in2)
	checkClose(t, "onnxruntime: padded keys changed", ob, oa, 1e-6)
	checkClose(t, "onnxruntime vs Go kernel", ob, a, 1e-4)
}

// Query/key norms ×10 (logits far beyond float32's exp range without the
// stabiliser) give finite outputs that agree between the kernel and the
// function body.
func TestPerformerCausalLargeNormsFinite(t *testing.T) {
	c := causalCase{b: 2, h: 2, s: 19, d: 16, dv: 4, m: 32, perHead: true, bias: "pad", sigma: 10, chunk: 8}
	q, k, v, omega, bias := c.inputs(6)
	attrs := ops.PerformerAttrs{Scale: 0.25, Causal: true, Chunk: c.chunk}
	got, err := ops.Performer(q, k, v, omega, bias, attrs)
	if err != nil {
		t.Fatal(err)
	}
	maxDiff(t, got.Floats(), make([]float64, got.Len())) // fails on NaN/Inf
	if !infertest.ORT(t) {
		return
	}
	fn, err := ops.PerformerFunctionFor(ops.PerformerVariant{Causal: true, Chunk: c.chunk}, 17)
	if err != nil {
		t.Fatal(err)
	}
	node := ops.NewPerformerNode("perf", []string{"Q", "K", "V", "Omega", "key_bias"}, "out", attrs)
	in := map[string]*onnx.Tensor{"Q": q, "K": k, "V": v, "Omega": omega, "key_bias": bias}
	checkClose(t, "large norms: onnxruntime vs Go kernel", runORT(t, oneNodeModel(t, node, fn, 17, in), in), got, 1e-4)
}

// The variants without a causal mode, cross-attention shapes and bad chunk
// lengths are refused with errors that say why.
func TestPerformerCausalErrors(t *testing.T) {
	c := causalCase{b: 1, h: 2, s: 5, d: 4, dv: 3, m: 8, sigma: 0.5}
	q, k, v, omega, _ := c.inputs(7)
	bal := onnx.NewFloat([]int{1, 4, 4}, []float32{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1})
	for _, e := range []struct {
		name string
		in   ops.PerformerInputs
		a    ops.PerformerAttrs
		want string
	}{
		{"center", ops.PerformerInputs{Q: q, K: k, V: v, Omega: omega}, ops.PerformerAttrs{Causal: true, Center: true}, "center=1"},
		{"favor++", ops.PerformerInputs{Q: q, K: k, V: v, Omega: omega}, ops.PerformerAttrs{Causal: true, Features: ops.FeaturesFavorPP}, "favor++"},
		{"trig", ops.PerformerInputs{Q: q, K: k, V: v, Omega: omega}, ops.PerformerAttrs{Causal: true, Kernel: ops.KernelTrig}, "kernel"},
		{"balance", ops.PerformerInputs{Q: q, K: k, V: v, Omega: omega, BalanceQ: bal, BalanceK: bal}, ops.PerformerAttrs{Causal: true}, "balance"},
		{"cross", ops.PerformerInputs{Q: prefix(q, 3), K: k, V: v, Omega: omega}, ops.PerformerAttrs{Causal: true}, "as many queries as keys"},
		{"chunk", ops.PerformerInputs{Q: q, K: k, V: v, Omega: omega}, ops.PerformerAttrs{Causal: true, Chunk: -2}, "chunk"},
	} {
		_, err := ops.PerformerWith(e.in, e.a)
		if err == nil || !strings.HasPrefix(err.Error(), "ops: PerformerAttention: ") || !strings.Contains(err.Error(), e.want) {
			t.Errorf("%s: error %v, want one naming %q", e.name, err, e.want)
		}
	}
	for _, v := range []ops.PerformerVariant{
		{Causal: true, Center: true},
		{Causal: true, Features: ops.FeaturesFavorPP},
		{Causal: true, Kernel: ops.KernelTrig},
		{Causal: true, Chunk: ops.MaxChunk + 1},
	} {
		if _, err := ops.PerformerFunctionFor(v, 17); err == nil || !strings.HasPrefix(err.Error(), "ops: ") {
			t.Errorf("function %+v: error %v", v, err)
		}
	}
	if _, err := ops.PerformerFunctionFor(ops.PerformerVariant{Causal: true}, 10); err == nil {
		t.Error("opset 10: no error")
	}
}

// The causal body expanded into standard ops runs in the native backend
// too (no onnxruntime) and agrees with the kernel.
func TestPerformerCausalFunctionNative(t *testing.T) {
	for _, opset := range []int64{11, 18} {
		for _, s := range []int{1, 6, 13} {
			c := causalCase{b: 2, h: 2, s: s, d: 8, dv: 3, m: 12, bias: "left", sigma: 0.6, chunk: 4}
			t.Run(fmt.Sprintf("opset%d/S=%d", opset, s), func(t *testing.T) {
				m, in, want := c.bodyModel(t, 8, opset)
				checkClose(t, "inlined function vs Go kernel", runInlined(t, m, in), want, 1e-4)
			})
		}
	}
}
