package ops_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/kernels"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
	"google.golang.org/protobuf/proto"
)

type hhCase struct {
	name       string
	b, h, s    int
	d, dv, f   int
	attrs      ops.HedgehogAttrs
	bias       string // "none", "pad" (−1e4), "min" (float32's lowest), "rand" (a shared [1,1,1,S] N(0,1) bias), "off" (rand + 300)
	sigma      float64
	paramScale float64 // spread of the feature-map parameters (1 when 0)
}

// hhCases: every block (0, 8, 16) × reach (0, 1, 2; block 0 once) × causal,
// lengths that are not a multiple of the block (and, for causal block 0,
// longer than the function body's 64-key chunks), bias kinds rotating.
func hhCases() []hhCase {
	var cs []hhCase
	i := 0
	for _, blk := range []int{0, 8, 16} {
		reaches := []int{0, 1, 2}
		if blk == 0 {
			reaches = []int{1}
		}
		for _, r := range reaches {
			for _, causal := range []bool{false, true} {
				for _, masked := range []bool{false, true} {
					i++
					bias := []string{"none", "rand"}[(i/2)%2]
					if masked {
						bias = []string{"pad", "min"}[(i/2)%2]
					}
					s := 37
					if blk == 0 {
						s = 150
					}
					a := ops.HedgehogAttrs{Scale: 0.35, Block: blk, Reach: r, Causal: causal}
					c := hhCase{b: 2, h: 2, s: s, d: 8, dv: 5, f: 6, attrs: a, bias: bias, sigma: 1}
					c.name = fmt.Sprintf("b%d/r%d/causal=%t/bias=%s/S=%d", blk, r, causal, bias, s)
					cs = append(cs, c)
				}
			}
		}
	}
	// Scale 0 (1/√D), one block, a window covering everything but the
	// neighbours' neighbours, and larger scores.
	cs = append(cs,
		hhCase{name: "scale0/b4/r1", b: 1, h: 3, s: 21, d: 4, dv: 3, f: 2, attrs: ops.HedgehogAttrs{Block: 4, Reach: 1}, bias: "pad", sigma: 1},
		hhCase{name: "b1/r3/causal", b: 2, h: 1, s: 13, d: 4, dv: 2, f: 3, attrs: ops.HedgehogAttrs{Scale: 0.5, Block: 1, Reach: 3, Causal: true}, bias: "pad", sigma: 1},
		hhCase{name: "large/b8/r1", b: 2, h: 2, s: 45, d: 16, dv: 4, f: 8, attrs: ops.HedgehogAttrs{Scale: 0.25, Block: 8, Reach: 1}, bias: "pad", sigma: 3, paramScale: 3},
		hhCase{name: "offset/b8/r1/causal", b: 2, h: 2, s: 30, d: 8, dv: 3, f: 4, attrs: ops.HedgehogAttrs{Scale: 0.35, Block: 8, Reach: 1, Causal: true}, bias: "off", sigma: 1},
		hhCase{name: "offset/b0", b: 2, h: 2, s: 30, d: 8, dv: 3, f: 4, attrs: ops.HedgehogAttrs{Scale: 0.35}, bias: "off", sigma: 1},
		hhCase{name: "large/b0/causal", b: 2, h: 2, s: 90, d: 16, dv: 4, f: 8, attrs: ops.HedgehogAttrs{Scale: 0.25, Causal: true}, bias: "min", sigma: 3, paramScale: 3},
	)
	return cs
}

// hhParams draws per-head feature-map parameters of moderate size: W with
// entries N(0, (0.5·ps)²/D), biases N(0, (0.5·ps)²), norms in [0, 0.1·ps).
func hhParams(rng *rand.Rand, h, d, f int, ps float64) ops.HedgehogParams {
	if ps == 0 {
		ps = 1
	}
	norm := func() *onnx.Tensor {
		x := make([]float32, h)
		for i := range x {
			x[i] = float32(rng.Float64() * 0.1 * ps)
		}
		return onnx.NewFloat([]int{h}, x)
	}
	return ops.HedgehogParams{
		QWeight: randTensor(rng, 0.5*ps/math.Sqrt(float64(d)), h, d, f),
		QBias:   randTensor(rng, 0.5*ps, h, 2*f),
		QNorm:   norm(),
		KWeight: randTensor(rng, 0.5*ps/math.Sqrt(float64(d)), h, d, f),
		KBias:   randTensor(rng, 0.5*ps, h, 2*f),
		KNorm:   norm(),
	}
}

func (c hhCase) inputs(seed uint64) (q, k, v, bias *onnx.Tensor, p ops.HedgehogParams) {
	rng := rand.New(rand.NewPCG(seed, 77))
	q, k, v = randQKV(rng, c.sigma, c.b, c.h, c.s, c.d, c.dv)
	p = hhParams(rng, c.h, c.d, c.f, c.paramScale)
	pads := make([]int, c.b)
	for i := range pads {
		pads[i] = (5 * i) % c.s // batch 0 unpadded, the others padded on the right
	}
	switch c.bias {
	case "pad":
		bias = padBias(c.s, -1e4, pads...)
	case "min":
		bias = padBias(c.s, -math.MaxFloat32, pads...)
	case "rand", "off":
		bias = randTensor(rng, 1, 1, 1, 1, c.s)
		if c.bias == "off" {
			for i := range bias.Floats() {
				bias.Floats()[i] += 300
			}
		}
	}
	return q, k, v, bias, p
}

// hhFeed is the named input map of a HedgehogAttention node; a nil bias
// becomes a zero [1,1,1,1] (what a converter passes without a mask).
func hhFeed(q, k, v, bias *onnx.Tensor, p ops.HedgehogParams) map[string]*onnx.Tensor {
	if bias == nil {
		bias = onnx.NewFloat([]int{1, 1, 1, 1}, []float32{0})
	}
	return map[string]*onnx.Tensor{"Q": q, "K": k, "V": v, "key_bias": bias,
		"q_weight": p.QWeight, "q_bias": p.QBias, "q_norm": p.QNorm,
		"k_weight": p.KWeight, "k_bias": p.KBias, "k_norm": p.KNorm}
}

// hedgehogRef evaluates the op's definition in float64 with every weight
// w_ij explicit (a quadratic loop): the near set by its block condition,
// far weights as Σ_f φ_q,f·φ_k,f from the feature formula written out,
// each key's bias added to its log-weight, then one normalisation.
func hedgehogRef(q, k, v, bias *onnx.Tensor, p ops.HedgehogParams, a ops.HedgehogAttrs) []float64 {
	b, h, n, d := q.Shape[0], q.Shape[1], q.Shape[2], q.Shape[3]
	dv, f := v.Shape[3], p.QWeight.Shape[2]
	qd, kd, vd := widen(q.Floats()), widen(k.Floats()), widen(v.Floats())
	scale := float64(a.Scale)
	if scale == 0 {
		scale = float64(float32(1 / math.Sqrt(float64(d))))
	}
	logPhi := func(x []float64, hi int, w, c, nu *onnx.Tensor) []float64 {
		wd, cd := widen(w.Floats()), widen(c.Floats())
		var sq float64
		for _, y := range x {
			sq += y * y
		}
		nn := float64(nu.Floats()[hi]) * sq
		out := make([]float64, 2*f)
		for j := 0; j < f; j++ {
			var proj float64
			for t := 0; t < d; t++ {
				proj += x[t] * wd[(hi*d+t)*f+j]
			}
			out[j] = proj + cd[hi*2*f+j] - nn
			out[f+j] = -proj + cd[hi*2*f+f+j] - nn
		}
		return out
	}
	out := make([]float64, b*h*n*dv)
	for bh := 0; bh < b*h; bh++ {
		bi, hi := bh/h, bh%h
		beta := func(j int) float64 {
			if bias == nil {
				return 0
			}
			row, col := 0, j
			if bias.Shape[0] > 1 {
				row = bi
			}
			if bias.Shape[3] == 1 {
				col = 0
			}
			return float64(bias.Floats()[row*bias.Shape[3]+col])
		}
		row := func(x []float64, i, w int) []float64 { return x[(bh*n+i)*w : (bh*n+i+1)*w] }
		lk := make([][]float64, n)
		for j := range lk {
			lk[j] = logPhi(row(kd, j, d), hi, p.KWeight, p.KBias, p.KNorm)
		}
		for i := 0; i < n; i++ {
			lq := logPhi(row(qd, i, d), hi, p.QWeight, p.QBias, p.QNorm)
			var lw []float64
			var keys []int
			for j := 0; j < n; j++ {
				if a.Causal && j > i {
					continue
				}
				near := a.Block > 0 && abs(j/a.Block-i/a.Block) <= a.Reach
				var l float64
				if near {
					for t := 0; t < d; t++ {
						l += row(qd, i, d)[t] * row(kd, j, d)[t]
					}
					l *= scale
				} else {
					// log Σ_f exp(lq_f + lk_f), stabilised.
					top := math.Inf(-1)
					for c := range lq {
						top = math.Max(top, lq[c]+lk[j][c])
					}
					var s float64
					for c := range lq {
						s += math.Exp(lq[c] + lk[j][c] - top)
					}
					l = top + math.Log(s)
				}
				lw = append(lw, l+beta(j))
				keys = append(keys, j)
			}
			if len(lw) == 0 {
				continue
			}
			softmaxMix(out[(bh*n+i)*dv:(bh*n+i+1)*dv], lw, func(x, c int) float64 { return row(vd, keys[x], dv)[c] })
		}
	}
	return out
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func TestHedgehogKernelMatchesDefinition(t *testing.T) {
	for _, c := range hhCases() {
		t.Run(c.name, func(t *testing.T) {
			q, k, v, bias, p := c.inputs(1)
			got, err := ops.Hedgehog(q, k, v, bias, p, c.attrs)
			if err != nil {
				t.Fatal(err)
			}
			want := hedgehogRef(q, k, v, bias, p, c.attrs)
			scale := 0.0
			for _, x := range want {
				scale = math.Max(scale, math.Abs(x))
			}
			if d := maxDiff(t, got.Floats(), want); d > 1e-5*math.Max(1, scale) {
				t.Errorf("max abs error vs the float64 definition %.3g > 1e-5 (output scale %.3g)", d, scale)
			}
			// Threads change nothing.
			a := c.attrs
			a.Threads = 3
			par, err := ops.Hedgehog(q, k, v, bias, p, a)
			if err != nil {
				t.Fatal(err)
			}
			for i, x := range par.Floats() {
				if x != got.Floats()[i] {
					t.Fatalf("Threads 3 differs from serial at %d: %v vs %v", i, x, got.Floats()[i])
				}
			}
		})
	}
}

func TestHedgehogFunctionMatchesKernel(t *testing.T) {
	requireORT(t)
	cases := hhCases()
	for _, opset := range []int64{11, 13, 17, 18, 23} {
		for i, c := range cases {
			if opset != 17 && i%5 != 0 {
				continue // every case at opset 17, a fifth at the others
			}
			t.Run(fmt.Sprintf("opset%d/%s", opset, c.name), func(t *testing.T) {
				q, k, v, bias, p := c.inputs(2)
				in := hhFeed(q, k, v, bias, p)
				want, err := ops.Hedgehog(q, k, v, in["key_bias"], p, c.attrs)
				if err != nil {
					t.Fatal(err)
				}
				fn, err := ops.HedgehogFunction(opset, c.attrs)
				if err != nil {
					t.Fatal(err)
				}
				a := c.attrs
				if a.Scale == 0 {
					a.Scale = float32(1 / math.Sqrt(float64(c.d)))
				}
				node := ops.NewHedgehogNode("hh", ops.HedgehogInputNames(), "out", a)
				got := runORT(t, oneNodeModel(t, node, fn, opset, in), in)
				t.Logf("relative error %.2g", checkClose(t, "onnxruntime vs Go kernel", got, want, 1e-4))
			})
		}
	}
}

// Appending masked keys leaves the outputs at real tokens unchanged, in the
// kernel and in the function body, for masks of −1e4 and float32's lowest
// value.
func TestHedgehogPaddingInvariance(t *testing.T) {
	for _, a := range []ops.HedgehogAttrs{
		{Scale: 0.4, Block: 0},
		{Scale: 0.4, Block: 0, Causal: true},
		{Scale: 0.4, Block: 8, Reach: 1},
		{Scale: 0.4, Block: 8, Reach: 1, Causal: true},
		{Scale: 0.4, Block: 16, Reach: 0},
		{Scale: 0.4, Block: 4, Reach: 2, Causal: true},
	} {
		for _, masked := range []float32{-1e4, -math.MaxFloat32} {
			rng := rand.New(rand.NewPCG(17, 17))
			const b, h, s, pad, d, dv, f = 2, 2, 29, 43, 8, 3, 5
			q, k, v := randQKV(rng, 1, b, h, s+pad, d, dv)
			p := hhParams(rng, h, d, f, 1)
			bias := padBias(s+pad, masked, pad, pad)
			what := fmt.Sprintf("b%d/r%d/causal=%t/mask %g", a.Block, a.Reach, a.Causal, masked)
			full, err := ops.Hedgehog(q, k, v, bias, p, a)
			if err != nil {
				t.Fatal(err)
			}
			short, err := ops.Hedgehog(prefix(q, s), prefix(k, s), prefix(v, s), nil, p, a)
			if err != nil {
				t.Fatal(err)
			}
			checkClose(t, what+": padded vs unpadded (Go kernel)", prefix(full, s), short, 1e-5)
			fn, err := ops.HedgehogFunction(17, a)
			if err != nil {
				t.Fatal(err)
			}
			node := ops.NewHedgehogNode("hh", ops.HedgehogInputNames(), "out", a)
			checkPaddedBody(t, what, node, fn, hhFeed(q, k, v, bias, p), s, short, 1e-5)
		}
	}
}

// Closed forms: with every key near the op is exact softmax attention;
// with φ ≡ 1 (W = 0, biases 0, norms 0) and no window it is the mean of
// V over the valid keys (the prefix mean when causal).
func TestHedgehogClosedForms(t *testing.T) {
	const b, h, d, dv, f = 2, 3, 8, 4, 4
	check := func(t *testing.T, what string, q, k, v, bias *onnx.Tensor, p ops.HedgehogParams, a ops.HedgehogAttrs, want []float64) {
		t.Helper()
		got, err := ops.Hedgehog(q, k, v, bias, p, a)
		if err != nil {
			t.Fatal(err)
		}
		if e := maxDiff(t, got.Floats(), want); e > 1e-5 {
			t.Errorf("%s: max abs error %.3g > 1e-5 (Go kernel)", what, e)
		}
		if !hasORT() {
			return
		}
		fn, err := ops.HedgehogFunction(17, a)
		if err != nil {
			t.Fatal(err)
		}
		in := hhFeed(q, k, v, bias, p)
		node := ops.NewHedgehogNode("hh", ops.HedgehogInputNames(), "out", a)
		res := runORT(t, oneNodeModel(t, node, fn, 17, in), in)
		if e := maxDiff(t, res.Floats(), want); e > 1e-5 {
			t.Errorf("%s: max abs error %.3g > 1e-5 (function body)", what, e)
		}
	}
	t.Run("every key near", func(t *testing.T) {
		for _, x := range []struct {
			s, blk, reach int
		}{{20, 32, 0}, {20, 20, 0}, {20, 8, 2}, {23, 6, 3}} {
			rng := rand.New(rand.NewPCG(uint64(x.s*x.blk), 3))
			q, k, v := randQKV(rng, 1.5, b, h, x.s, d, dv)
			p := hhParams(rng, h, d, f, 1)
			// Feature logits far above the scores (biases +60: φ·φ ≈ e^120)
			// must not matter when no key is far.
			big := hhParams(rng, h, d, f, 1)
			for _, c := range []*onnx.Tensor{big.QBias, big.KBias} {
				for i := range c.Floats() {
					c.Floats()[i] += 60
				}
			}
			for pi, p := range []ops.HedgehogParams{p, big} {
				for _, bias := range []*onnx.Tensor{nil, padBias(x.s, -1e4, 0, 6), randTensor(rng, 2, 1, 1, 1, x.s)} {
					a := ops.HedgehogAttrs{Scale: 0.3, Block: x.blk, Reach: x.reach}
					check(t, fmt.Sprintf("S=%d b=%d r=%d bias %v params %d", x.s, x.blk, x.reach, bias != nil, pi), q, k, v, bias, p, a, exactAttention(q, k, v, bias, 0.3))
				}
			}
		}
	})
	t.Run("constant features", func(t *testing.T) {
		const s = 75
		rng := rand.New(rand.NewPCG(5, 5))
		q, k, v := randQKV(rng, 1, b, h, s, d, dv)
		zero := func(shape ...int) *onnx.Tensor { return onnx.NewFloat(shape, make([]float32, onnx.NumElements(shape))) }
		p := ops.HedgehogParams{QWeight: zero(h, d, f), QBias: zero(h, 2*f), QNorm: zero(h), KWeight: zero(h, d, f), KBias: zero(h, 2*f), KNorm: zero(h)}
		pads := []int{0, 30}
		bias := padBias(s, -1e4, pads...)
		for _, causal := range []bool{false, true} {
			want := make([]float64, b*h*s*dv)
			vd := v.Floats()
			for bh := 0; bh < b*h; bh++ {
				valid := s - pads[bh/h]
				for i := 0; i < s; i++ {
					m := valid
					if causal {
						m = min(i+1, valid)
					}
					for c := 0; c < dv; c++ {
						var sum float64
						for j := 0; j < m; j++ {
							sum += float64(vd[(bh*s+j)*dv+c])
						}
						want[(bh*s+i)*dv+c] = sum / float64(m)
					}
				}
			}
			check(t, fmt.Sprintf("causal=%t", causal), q, k, v, bias, p, ops.HedgehogAttrs{Scale: 0.3, Causal: causal}, want)
		}
	})
	t.Run("every key masked", func(t *testing.T) {
		// A sequence whose keys are all masked averages them as softmax
		// does (the bias is relative to the sequence's maximum).
		const s = 19
		rng := rand.New(rand.NewPCG(8, 8))
		q, k, v := randQKV(rng, 1, b, h, s, d, dv)
		p := hhParams(rng, h, d, f, 1)
		for _, masked := range []float32{-1e4, -1e9, -math.MaxFloat32} {
			bias := padBias(s, masked, s, s)
			a := ops.HedgehogAttrs{Scale: 0.3, Block: 32}
			check(t, fmt.Sprintf("mask %g", masked), q, k, v, bias, p, a, exactAttention(q, k, v, nil, 0.3))
		}
	})
}

func hasORT() bool { return infer.ORTAvailable() == nil }

// The feature map's Performer initialisation: with W = √scale·Ωᵀ, biases
// −½·log 2F and norms scale/2, φ(q)·φ(k) is an unbiased estimate of
// exp(scale·q·k) (hyperbolic positive random features).
func TestHedgehogFeaturesFavorInit(t *testing.T) {
	const d, f = 4, 40000
	scale := 0.5
	rng := rand.New(rand.NewPCG(9, 9))
	w := make([]float64, d*f)
	for i := range w {
		w[i] = math.Sqrt(scale) * rng.NormFloat64()
	}
	bias := make([]float64, 2*f)
	for i := range bias {
		bias[i] = -0.5 * math.Log(2*f)
	}
	lq, lk := make([]float64, 2*f), make([]float64, 2*f)
	for trial := 0; trial < 4; trial++ {
		x, y := make([]float64, d), make([]float64, d)
		var dot float64
		for i := range x {
			x[i], y[i] = 0.7*rng.NormFloat64(), 0.7*rng.NormFloat64()
			dot += x[i] * y[i]
		}
		ops.HedgehogLogFeatures(x, w, bias, scale/2, lq)
		ops.HedgehogLogFeatures(y, w, bias, scale/2, lk)
		var est float64
		for c := range lq {
			est += math.Exp(lq[c] + lk[c])
		}
		want := math.Exp(scale * dot)
		if math.Abs(est/want-1) > 0.05 {
			t.Errorf("trial %d: φ(q)·φ(k) = %.4g, exp(scale·q·k) = %.4g", trial, est, want)
		}
	}
	// The formula itself, on a hand-checked row: D = 2, F = 1.
	out := make([]float64, 2)
	ops.HedgehogLogFeatures([]float64{1, 2}, []float64{0.5, -1}, []float64{0.1, 0.2}, 0.25, out)
	// a = 1·0.5 + 2·(−1) = −1.5, n = 0.25·5 = 1.25.
	if want := []float64{-1.5 + 0.1 - 1.25, 1.5 + 0.2 - 1.25}; math.Abs(out[0]-want[0]) > 1e-12 || math.Abs(out[1]-want[1]) > 1e-12 {
		t.Errorf("HedgehogLogFeatures = %v, want %v", out, want)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("HedgehogLogFeatures accepted mismatched lengths")
			}
		}()
		ops.HedgehogLogFeatures([]float64{1, 2}, []float64{0.5}, []float64{0.1, 0.2}, 0, out)
	}()
}

// The registered kernel reads the node's attributes (reach defaulting to
// 1) and names the node in its errors.
func TestHedgehogKernelNode(t *testing.T) {
	c := hhCase{b: 2, h: 2, s: 23, d: 4, dv: 3, f: 3, bias: "pad", sigma: 1}
	q, k, v, bias, p := c.inputs(4)
	a := ops.HedgehogAttrs{Scale: 0.4, Block: 4, Reach: 2, Causal: true}
	node := ops.NewHedgehogNode("layer3", ops.HedgehogInputNames(), "out", a)
	if got, err := ops.ParseHedgehogAttrs(node); err != nil || got != a {
		t.Fatalf("ParseHedgehogAttrs(NewHedgehogNode(a)) = %+v, %v; want %+v", got, err, a)
	}
	kern, err := kernels.Lookup(ops.Domain, ops.HedgehogOp, 1)
	if err != nil {
		t.Fatal(err)
	}
	in := []*onnx.Tensor{q, k, v, bias, p.QWeight, p.QBias, p.QNorm, p.KWeight, p.KBias, p.KNorm}
	outs, err := kern(&kernels.Context{Node: node, Opset: 1}, in)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := ops.Hedgehog(q, k, v, bias, p, a)
	checkClose(t, "kernel vs Hedgehog", outs[0], want, 0)
	// An empty key_bias is every bias 0.
	noBias := append([]*onnx.Tensor(nil), in...)
	noBias[3] = nil
	if _, err := kern(&kernels.Context{Node: node}, noBias); err != nil {
		t.Errorf("empty key_bias: %v", err)
	}
	// A node without reach reads reach 1.
	bare := ops.NewHedgehogNode("bare", ops.HedgehogInputNames(), "out", a)
	bare.Attribute = bare.Attribute[:2]
	if got, err := ops.ParseHedgehogAttrs(bare); err != nil || got.Reach != ops.DefaultHedgehogReach || got.Causal {
		t.Errorf("node without reach and causal: %+v, %v", got, err)
	}
	// Errors name the op and the node.
	if _, err := kern(&kernels.Context{Node: node}, in[:9]); err == nil || !strings.Contains(err.Error(), "layer3") || !strings.HasPrefix(err.Error(), "ops: "+ops.HedgehogOp) {
		t.Errorf("9 inputs: %v", err)
	}
	badQ := append([]*onnx.Tensor(nil), in...)
	badQ[0] = k.Clone()
	badQ[0].Shape = []int{2, 2, 23 * 4}
	if _, err := kern(&kernels.Context{Node: node}, badQ); err == nil || !strings.Contains(err.Error(), "layer3") || !strings.HasPrefix(err.Error(), "ops: "+ops.HedgehogOp) {
		t.Errorf("rank-3 Q: %v", err)
	}
	bad := ops.NewHedgehogNode("odd", ops.HedgehogInputNames(), "out", a)
	bad.Attribute[3] = &onnxpb.AttributeProto{Name: bad.Attribute[3].Name, Type: onnxpb.AttributeProto_INT.Enum(), I: new(int64)}
	*bad.Attribute[3].I = 2
	if _, err := kern(&kernels.Context{Node: bad}, in); err == nil || !strings.Contains(err.Error(), "causal 2") || !strings.Contains(err.Error(), "odd") {
		t.Errorf("causal 2: %v", err)
	}
}

func TestHedgehogErrors(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 19))
	const b, h, s, d, dv, f = 1, 2, 9, 4, 3, 2
	q, k, v := randQKV(rng, 1, b, h, s, d, dv)
	p := hhParams(rng, h, d, f, 1)
	half := &onnx.Tensor{DType: onnx.Float16, Shape: []int{b, h, s, d}, Data: make([]uint16, b*h*s*d)}
	with := func(mod func(*ops.HedgehogParams)) ops.HedgehogParams {
		x := p
		mod(&x)
		return x
	}
	ok := ops.HedgehogAttrs{Scale: 0.5, Block: 4, Reach: 1}
	for _, c := range []struct {
		name    string
		q, k, v *onnx.Tensor
		bias    *onnx.Tensor
		p       ops.HedgehogParams
		a       ops.HedgehogAttrs
		want    string
	}{
		{"float16 Q", half, k, v, nil, p, ok, "Q has type float16, want float32"},
		{"float16 key_bias", q, k, v, &onnx.Tensor{DType: onnx.Float16, Shape: []int{1, 1, 1, s}, Data: make([]uint16, s)}, p, ok, "key_bias has type float16"},
		{"float16 q_weight", q, k, v, nil, with(func(x *ops.HedgehogParams) {
			x.QWeight = &onnx.Tensor{DType: onnx.Float16, Shape: []int{h, d, f}, Data: make([]uint16, h*d*f)}
		}), ok, "q_weight has type float16"},
		{"K shape", q, randTensor(rng, 1, b, h, s, d+1), v, nil, p, ok, "K shape"},
		{"V shape", q, k, randTensor(rng, 1, b, h+1, s, dv), nil, p, ok, "V shape"},
		{"cross attention", randTensor(rng, 1, b, h, s+2, d), k, v, nil, p, ok, "self-attention"},
		{"key_bias shape", q, k, v, randTensor(rng, 1, 1, 1, 1, s+1), p, ok, "key_bias shape"},
		{"missing k_norm", q, k, v, nil, with(func(x *ops.HedgehogParams) { x.KNorm = nil }), ok, "k_norm is missing"},
		{"q_weight heads", q, k, v, nil, with(func(x *ops.HedgehogParams) { x.QWeight = randTensor(rng, 1, h+1, d, f) }), ok, "q_weight shape"},
		{"q_weight D", q, k, v, nil, with(func(x *ops.HedgehogParams) { x.QWeight = randTensor(rng, 1, h, d+1, f) }), ok, "q_weight shape"},
		{"no features", q, k, v, nil, with(func(x *ops.HedgehogParams) { x.QWeight = randTensor(rng, 1, h, d, 0) }), ok, "F ≥ 1"},
		{"k_weight F", q, k, v, nil, with(func(x *ops.HedgehogParams) { x.KWeight = randTensor(rng, 1, h, d, f+1) }), ok, "k_weight shape"},
		{"q_bias length", q, k, v, nil, with(func(x *ops.HedgehogParams) { x.QBias = randTensor(rng, 1, h, f) }), ok, "q_bias shape"},
		{"k_bias rank", q, k, v, nil, with(func(x *ops.HedgehogParams) { x.KBias = randTensor(rng, 1, h*2*f) }), ok, "k_bias shape"},
		{"q_norm shape", q, k, v, nil, with(func(x *ops.HedgehogParams) { x.QNorm = randTensor(rng, 1, 1) }), ok, "q_norm shape"},
		{"short data", q, k, v, nil, with(func(x *ops.HedgehogParams) {
			x.KBias = &onnx.Tensor{DType: onnx.Float, Shape: []int{h, 2 * f}, Data: make([]float32, 3)}
		}), ok, "k_bias holds 3 values"},
		{"negative block", q, k, v, nil, p, ops.HedgehogAttrs{Block: -1}, "block -1"},
		{"huge block", q, k, v, nil, p, ops.HedgehogAttrs{Block: ops.MaxLocalBlock + 1}, "block"},
		{"negative reach", q, k, v, nil, p, ops.HedgehogAttrs{Block: 2, Reach: -1}, "reach -1"},
		{"huge reach", q, k, v, nil, p, ops.HedgehogAttrs{Block: 2, Reach: ops.MaxReach + 1}, "reach"},
		{"nan scale", q, k, v, nil, p, ops.HedgehogAttrs{Scale: float32(math.NaN())}, "finite"},
		{"inf scale", q, k, v, nil, p, ops.HedgehogAttrs{Scale: float32(math.Inf(1))}, "finite"},
	} {
		_, err := ops.Hedgehog(c.q, c.k, c.v, c.bias, c.p, c.a)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "ops: "+ops.HedgehogOp+": ") {
			t.Errorf("%s: error %v, want one naming %s and mentioning %q", c.name, err, ops.HedgehogOp, c.want)
		}
	}
	for _, c := range []struct {
		name string
		a    ops.HedgehogAttrs
		opts int64
		want string
	}{
		{"opset 10", ok, 10, "opset 10"},
		{"opset 24", ok, 24, "opset 24"},
		{"bad reach", ops.HedgehogAttrs{Block: 2, Reach: 99}, 17, "reach 99"},
	} {
		if _, err := ops.HedgehogFunction(c.opts, c.a); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), ops.HedgehogOp) {
			t.Errorf("HedgehogFunction %s: %v", c.name, err)
		}
	}
	for _, c := range []struct {
		attr string
		v    int64
	}{{"block", -3}, {"block", ops.MaxLocalBlock + 1}, {"reach", -1}, {"reach", ops.MaxReach + 1}, {"causal", -1}} {
		// Defaults are left off the node: set the attribute, adding it
		// when absent.
		n := ops.NewHedgehogNode("x", ops.HedgehogInputNames(), "out", ok)
		set := false
		for _, at := range n.Attribute {
			if at.GetName() == c.attr {
				*at.I, set = c.v, true
			}
		}
		if !set {
			n.Attribute = append(n.Attribute, &onnxpb.AttributeProto{Name: proto.String(c.attr), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(c.v)})
		}
		if _, err := ops.ParseHedgehogAttrs(n); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%s %d", c.attr, c.v)) || !strings.HasPrefix(err.Error(), "ops: "+ops.HedgehogOp) {
			t.Errorf("%s %d: %v", c.attr, c.v, err)
		}
	}
}

// infer.ValidateOps, the generic function-vs-kernel check of converted
// models, checks HedgehogAttention nodes through the registered kernel.
func TestHedgehogValidateOps(t *testing.T) {
	requireORT(t)
	c := hhCase{b: 2, h: 2, s: 33, d: 8, dv: 4, f: 4, bias: "pad", sigma: 1,
		attrs: ops.HedgehogAttrs{Scale: 0.35, Block: 8, Reach: 1}}
	q, k, v, bias, p := c.inputs(6)
	in := hhFeed(q, k, v, bias, p)
	fn, err := ops.HedgehogFunction(17, c.attrs)
	if err != nil {
		t.Fatal(err)
	}
	m := oneNodeModel(t, ops.NewHedgehogNode("hh", ops.HedgehogInputNames(), "out", c.attrs), fn, 17, in)
	val, err := infer.ValidateOps(m, in, infer.ValidateOptions{Backend: "ort", Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	if !val.OK() || len(val.Checks) != 1 || val.Checks[0].Op != ops.HedgehogOp {
		t.Fatalf("validation: %+v", val.Checks)
	}
	t.Logf("err/scale %.2g", val.Checks[0].Diff.Scaled)
}
