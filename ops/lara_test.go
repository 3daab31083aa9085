package ops_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/ops"
)

type laraCase struct {
	name      string
	b, h, s   int
	d, dv     int
	landmarks int
	per       int  // samples per landmark
	perHead   bool // Noise [H,R,D] instead of [1,R,D]
	bias      string
	sigma     float64 // of Q and K
	noise     float64 // σ of the frozen noise
}

func laraCases() []laraCase {
	var cs []laraCase
	i := 0
	for _, c := range []int{1, 3, 8, 20} {
		for _, per := range []int{1, 2} {
			for _, bias := range []string{"none", "pad", "inf", "one"} {
				i++
				if i%2 == 0 && bias != "pad" {
					continue
				}
				s := 11
				if i%3 == 0 {
					s = 16
				}
				lc := laraCase{b: 2, h: 2, s: s, d: 4, dv: 3, landmarks: c, per: per, perHead: i%4 == 1, bias: bias, sigma: 0.8, noise: 1}
				lc.name = fmt.Sprintf("C%d/Sp%d/perhead=%v/bias=%s/S=%d", c, per, lc.perHead, bias, s)
				cs = append(cs, lc)
			}
		}
	}
	return cs
}

func (c laraCase) inputs(seed uint64) (q, k, v, noise, bias *onnx.Tensor) {
	rng := rand.New(rand.NewPCG(seed, 43))
	q, k, v = randQKV(rng, c.sigma, c.b, c.h, c.s, c.d, c.dv)
	noise = randTensor(rng, c.noise, paramHeads(c.perHead, c.h), c.landmarks*c.per, c.d)
	bias = caseBias(c.bias, c.s)
	if c.bias == "soft" { // finite per-key biases that are not padding
		bias = padBias(c.s, -1e4, 2, 0)
		for j := range bias.Floats() {
			if bias.Floats()[j] == 0 {
				bias.Floats()[j] = float32(0.3 * float64(j%5-2))
			}
		}
	}
	return
}

// laraRef evaluates the LARA estimator from its probabilistic definition in
// float64, one query at a time: the target density of query i is
// p_i(ω) ∝ N(ω; 0, I)·exp(q̃_i·ω − ½‖q̃_i‖²)·Σ_j exp(k̃_j·ω − ½‖k̃_j‖² + b_j),
// each sample's importance ratio is p_i(ω)/N(ω; μ_c, I) with the full
// Gaussian log densities, the multiple-importance weight is the balance
// heuristic plus the query's landmark softmax minus 1/C, and f(ω) is the
// key-side softmax of ω against the keys. No shared intermediate, no
// matrix products.
func laraRef(q, k, v, noise, bias *onnx.Tensor, scale float64, c int) []float64 {
	b, h, n, d := q.Shape[0], q.Shape[1], q.Shape[2], q.Shape[3]
	dv := v.Shape[3]
	r := noise.Shape[1]
	per := r / c
	rs := math.Sqrt(scale)
	qd, kd, vd, ed := widen(q.Floats()), widen(k.Floats()), widen(v.Floats()), widen(noise.Floats())
	out := make([]float64, b*h*n*dv)
	vec := func(x []float64, bh, i, w int) []float64 {
		y := make([]float64, w)
		for t := range y {
			y[t] = x[(bh*n+i)*w+t] * rs
		}
		return y
	}
	dot := func(a, b []float64) float64 {
		var s float64
		for t := range a {
			s += a[t] * b[t]
		}
		return s
	}
	logGauss := func(x, mean []float64) float64 { // log N(x; mean, I)
		var s float64
		for t := range x {
			s += (x[t] - mean[t]) * (x[t] - mean[t])
		}
		return -0.5*s - 0.5*float64(len(x))*math.Log(2*math.Pi)
	}
	for bh := 0; bh < b*h; bh++ {
		bi, hi := bh/h, bh%h
		var valid []int
		var kb []float64
		for j := 0; j < n; j++ {
			if bias == nil {
				valid = append(valid, j)
				kb = append(kb, 0)
				continue
			}
			row, col := 0, j
			if bias.Shape[0] > 1 {
				row = bi
			}
			if bias.Shape[3] == 1 {
				col = 0
			}
			if x := float64(bias.Floats()[row*bias.Shape[3]+col]); x > -1e4 {
				valid = append(valid, j)
				kb = append(kb, x)
			}
		}
		m := len(valid)
		if m == 0 {
			continue
		}
		// Landmarks.
		qbar := make([][]float64, c)
		mu := make([][]float64, c)
		for g := 0; g < c; g++ {
			var group []int
			if m >= c {
				for rank, j := range valid {
					if rank*c/m == g {
						group = append(group, j)
					}
				}
			} else {
				group = []int{valid[g*m/c]}
			}
			qbar[g], mu[g] = make([]float64, d), make([]float64, d)
			for _, j := range group {
				qj, kj := vec(qd, bh, j, d), vec(kd, bh, j, d)
				for t := 0; t < d; t++ {
					qbar[g][t] += qj[t] / float64(len(group))
					mu[g][t] += (qj[t] + kj[t]) / float64(len(group))
				}
			}
		}
		// Samples and their query-independent parts.
		nh := noise.Shape[0]
		omega := make([][]float64, r)
		logZ := make([]float64, r)
		fv := make([][]float64, r)
		balance := make([]float64, r)
		logProp := make([]float64, r)
		for s := 0; s < r; s++ {
			g := s / per
			omega[s] = make([]float64, d)
			for t := 0; t < d; t++ {
				e := ed[(s)*d+t]
				if nh > 1 {
					e = ed[(hi*r+s)*d+t]
				}
				omega[s][t] = mu[g][t] + e
			}
			var z float64
			fv[s] = make([]float64, dv)
			for x, j := range valid {
				kj := vec(kd, bh, j, d)
				w := math.Exp(dot(kj, omega[s]) - 0.5*dot(kj, kj) + kb[x])
				z += w
				for t := 0; t < dv; t++ {
					fv[s][t] += w * vd[(bh*n+j)*dv+t]
				}
			}
			for t := range fv[s] {
				fv[s][t] /= z
			}
			logZ[s] = math.Log(z)
			var mix float64
			for g2 := 0; g2 < c; g2++ {
				mix += math.Exp(logGauss(omega[s], mu[g2]))
			}
			logProp[s] = logGauss(omega[s], mu[g])
			balance[s] = math.Exp(logProp[s]) / mix
		}
		zeros := make([]float64, d)
		for i := 0; i < n; i++ {
			qi := vec(qd, bh, i, d)
			var tsum float64
			tau := make([]float64, c)
			for g := range tau {
				tau[g] = math.Exp(dot(qi, qbar[g]))
				tsum += tau[g]
			}
			logw := make([]float64, r)
			for s := 0; s < r; s++ {
				alpha := math.Max(balance[s]+tau[s/per]/tsum-1/float64(c), 1e-8)
				logTarget := logGauss(omega[s], zeros) + dot(qi, omega[s]) - 0.5*dot(qi, qi) + logZ[s]
				logw[s] = math.Log(alpha) + logTarget - logProp[s]
			}
			softmaxMix(out[(bh*n+i)*dv:(bh*n+i+1)*dv], logw, func(s, t int) float64 { return fv[s][t] })
		}
	}
	return out
}

func TestLaraKernelMatchesDefinition(t *testing.T) {
	cases := append(laraCases(),
		laraCase{name: "empty", b: 2, h: 1, s: 7, d: 4, dv: 2, landmarks: 2, per: 2, bias: "empty", sigma: 1, noise: 1},
		laraCase{name: "soft biases", b: 2, h: 2, s: 9, d: 4, dv: 3, landmarks: 3, per: 2, bias: "soft", sigma: 1, noise: 1},
		laraCase{name: "wide", b: 2, h: 3, s: 40, d: 16, dv: 8, landmarks: 8, per: 3, perHead: true, bias: "pad", sigma: 0.7, noise: 0.5},
	)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q, k, v, noise, bias := c.inputs(1)
			got, err := ops.Lara(q, k, v, noise, bias, ops.LaraAttrs{Scale: 0.45, Landmarks: c.landmarks})
			if err != nil {
				t.Fatal(err)
			}
			want := laraRef(q, k, v, noise, bias, 0.45, c.landmarks)
			if d := maxDiff(t, got.Floats(), want); d > 2e-5 {
				t.Errorf("max abs error vs the float64 definition %.3g > 2e-5", d)
			}
		})
	}
}

// The estimator is consistent: with many samples it approaches exact
// softmax attention (a property of the definition, checked against an
// independent exact attention, not against the kernel).
func TestLaraConvergesToSoftmax(t *testing.T) {
	c := laraCase{b: 1, h: 2, s: 7, d: 2, dv: 3, landmarks: 3, per: 3000, bias: "none", sigma: 0.7, noise: 1}
	q, k, v, noise, _ := c.inputs(5)
	got, err := ops.Lara(q, k, v, noise, nil, ops.LaraAttrs{Scale: 0.5, Landmarks: c.landmarks})
	if err != nil {
		t.Fatal(err)
	}
	want := exactAttention(q, k, v, nil, 0.5)
	if d := maxDiff(t, got.Floats(), want); d > 0.03 {
		t.Errorf("with %d samples: max abs error vs exact attention %.3g > 0.03", c.landmarks*c.per, d)
	}
	// and with few samples it is an estimate, not the exact answer
	few := laraCase{b: 1, h: 2, s: 7, d: 2, dv: 3, landmarks: 3, per: 1, bias: "none", sigma: 0.7, noise: 1}
	_, _, _, n1, _ := few.inputs(5)
	est, err := ops.Lara(q, k, v, n1, nil, ops.LaraAttrs{Scale: 0.5, Landmarks: 3})
	if err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(t, est.Floats(), want); d < 1e-3 {
		t.Errorf("3 samples reproduce exact attention to %.3g: the test inputs are degenerate", d)
	}
}

func TestLaraFunctionMatchesKernel(t *testing.T) {
	requireORT(t)
	cases := append(laraCases(),
		laraCase{name: "empty", b: 2, h: 1, s: 7, d: 4, dv: 2, landmarks: 2, per: 2, bias: "empty", sigma: 1, noise: 1},
		laraCase{name: "soft biases", b: 2, h: 2, s: 9, d: 4, dv: 3, landmarks: 3, per: 2, bias: "soft", sigma: 1, noise: 1},
	)
	for _, opset := range []int64{11, 13, 17, 18} {
		for i, c := range cases {
			if opset != 17 && i%3 != 0 {
				continue // every case at one opset, a third at the others
			}
			t.Run(fmt.Sprintf("opset%d/%s", opset, c.name), func(t *testing.T) {
				q, k, v, noise, bias := c.inputs(2)
				if bias == nil {
					bias = onnx.NewFloat([]int{1, 1, 1, 1}, []float32{0})
				}
				a := ops.LaraAttrs{Scale: 0.45, Landmarks: c.landmarks}
				want, err := ops.Lara(q, k, v, noise, bias, a)
				if err != nil {
					t.Fatal(err)
				}
				fn, err := ops.LaraFunction(opset, a)
				if err != nil {
					t.Fatal(err)
				}
				node := ops.NewLaraNode("lara", []string{"Q", "K", "V", "Noise", "key_bias"}, "out", a)
				in := map[string]*onnx.Tensor{"Q": q, "K": k, "V": v, "Noise": noise, "key_bias": bias}
				m := oneNodeModel(t, node, fn, opset, in)
				t.Logf("relative error %.2g", checkClose(t, "onnxruntime vs Go kernel", runORT(t, m, in), want, 1e-4))
				if opset == 17 && i%3 == 0 {
					checkClose(t, "native (inlined body) vs Go kernel", runInlined(t, m, in), want, 1e-4)
				}
			})
		}
	}
}

// Appending padded tokens leaves the outputs at real tokens unchanged, in
// the kernel and in the function body; padded keys and values hold NaN,
// which must never be read.
func TestLaraPaddingInvariance(t *testing.T) {
	for _, c := range []struct{ landmarks, per int }{{4, 2}, {20, 1}, {1, 3}} {
		for _, masked := range []float32{-1e4, float32(math.Inf(-1))} {
			rng := rand.New(rand.NewPCG(17, 17))
			const b, h, s, pad, d, dv = 2, 2, 13, 6, 8, 3
			q, k, v := randQKV(rng, 0.8, b, h, s+pad, d, dv)
			noise := randTensor(rng, 1, 1, c.landmarks*c.per, d)
			poisonPadding(v, s)
			poisonPadding(k, s)
			bias := padBias(s+pad, masked, pad, pad)
			a := ops.LaraAttrs{Scale: 0.4, Landmarks: c.landmarks}
			what := fmt.Sprintf("C%d/Sp%d/bias %g", c.landmarks, c.per, masked)
			full, err := ops.Lara(q, k, v, noise, bias, a)
			if err != nil {
				t.Fatal(err)
			}
			short, err := ops.Lara(prefix(q, s), prefix(k, s), prefix(v, s), noise, nil, a)
			if err != nil {
				t.Fatal(err)
			}
			checkClose(t, what+": padded vs unpadded (Go kernel)", prefix(full, s), short, 1e-5)
			fn, err := ops.LaraFunction(17, a)
			if err != nil {
				t.Fatal(err)
			}
			node := ops.NewLaraNode("lara", []string{"Q", "K", "V", "Noise", "key_bias"}, "out", a)
			in := map[string]*onnx.Tensor{"Q": q, "K": k, "V": v, "Noise": noise, "key_bias": bias}
			checkPaddedBody(t, what, node, fn, in, s, short, 1e-4)
		}
	}
}

// The op is deterministic: the same inputs give bit-identical outputs,
// whatever the number of threads.
func TestLaraDeterministic(t *testing.T) {
	c := laraCase{b: 3, h: 4, s: 21, d: 8, dv: 5, landmarks: 5, per: 2, bias: "pad", sigma: 1, noise: 1}
	q, k, v, noise, _ := c.inputs(9)
	bias := padBias(c.s, -1e4, 0, 5, 20)
	var first []float32
	for _, threads := range []int{1, 1, 4} {
		got, err := ops.Lara(q, k, v, noise, bias, ops.LaraAttrs{Scale: 0.3, Landmarks: c.landmarks, Threads: threads})
		if err != nil {
			t.Fatal(err)
		}
		if first == nil {
			first = got.Floats()
			continue
		}
		for i, x := range got.Floats() {
			if math.Float32bits(x) != math.Float32bits(first[i]) {
				t.Fatalf("threads %d: output %d is %v, first run %v", threads, i, x, first[i])
			}
		}
	}
}

func TestLaraLargeScoresFinite(t *testing.T) {
	c := laraCase{b: 2, h: 2, s: 17, d: 16, dv: 4, landmarks: 4, per: 2, bias: "pad", sigma: 4, noise: 1}
	q, k, v, noise, bias := c.inputs(3)
	a := ops.LaraAttrs{Scale: 0.25, Landmarks: c.landmarks}
	got, err := ops.Lara(q, k, v, noise, bias, a)
	if err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(t, got.Floats(), laraRef(q, k, v, noise, bias, 0.25, c.landmarks)); d > 1e-4 {
		t.Errorf("large scores: max abs error vs definition %.3g", d)
	}
	requireORT(t)
	fn, err := ops.LaraFunction(17, a)
	if err != nil {
		t.Fatal(err)
	}
	node := ops.NewLaraNode("lara", []string{"Q", "K", "V", "Noise", "key_bias"}, "out", a)
	in := map[string]*onnx.Tensor{"Q": q, "K": k, "V": v, "Noise": noise, "key_bias": bias}
	checkClose(t, "large scores: onnxruntime vs Go kernel", runORT(t, oneNodeModel(t, node, fn, 17, in), in), got, 1e-4)
}

func TestLaraErrors(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 19))
	q := randTensor(rng, 1, 1, 2, 9, 4)
	v := randTensor(rng, 1, 1, 2, 9, 3)
	noise := randTensor(rng, 1, 1, 6, 4)
	for _, c := range []struct {
		name  string
		a     ops.LaraAttrs
		q     *onnx.Tensor
		noise *onnx.Tensor
		want  string
	}{
		{"no landmarks", ops.LaraAttrs{}, q, noise, "landmarks 0"},
		{"huge landmarks", ops.LaraAttrs{Landmarks: 1 << 20}, q, noise, "landmarks"},
		{"negative scale", ops.LaraAttrs{Landmarks: 2, Scale: -1}, q, noise, "positive"},
		{"nan scale", ops.LaraAttrs{Landmarks: 2, Scale: float32(math.NaN())}, q, noise, "finite"},
		{"samples not a multiple", ops.LaraAttrs{Landmarks: 4}, q, noise, "multiple"},
		{"noise width", ops.LaraAttrs{Landmarks: 2}, q, randTensor(rng, 1, 1, 6, 5), "Noise shape"},
		{"noise heads", ops.LaraAttrs{Landmarks: 2}, q, randTensor(rng, 1, 3, 6, 4), "Noise shape"},
		{"noise missing", ops.LaraAttrs{Landmarks: 2}, q, nil, "Noise is missing"},
		{"noise type", ops.LaraAttrs{Landmarks: 2}, q, onnx.NewInt64([]int{1, 2, 4}, make([]int64, 8)), "float32"},
		{"noise short", ops.LaraAttrs{Landmarks: 2}, q, &onnx.Tensor{DType: onnx.Float, Shape: []int{1, 6, 4}, Data: make([]float32, 5)}, "holds 5"},
		{"cross attention", ops.LaraAttrs{Landmarks: 2}, randTensor(rng, 1, 1, 2, 5, 4), noise, "self-attention"},
	} {
		_, err := ops.Lara(c.q, q, v, c.noise, nil, c.a)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "ops: ") {
			t.Errorf("%s: error %v, want one mentioning %q", c.name, err, c.want)
		}
	}
	if _, err := ops.LaraFunction(10, ops.LaraAttrs{Landmarks: 2}); err == nil {
		t.Error("function body built for opset 10")
	}
	if _, err := ops.LaraFunction(17, ops.LaraAttrs{}); err == nil {
		t.Error("function body built without landmarks")
	}
}

// One onnxruntime session serves several batch sizes and sequence lengths,
// on both sides of the landmark count (m < C and m ≥ C in one batch).
func TestLaraFunctionDynamicShapes(t *testing.T) {
	requireORT(t)
	a := ops.LaraAttrs{Scale: 0.3, Landmarks: 6}
	fn, err := ops.LaraFunction(17, a)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"Q", "K", "V", "Noise", "key_bias"}
	node := ops.NewLaraNode("lara", names, "out", a)
	check := sharedSession(t, node, fn)
	for i, r := range []struct{ b, s int }{{1, 3}, {3, 9}, {2, 1}, {2, 20}} {
		c := laraCase{b: r.b, h: 2, s: r.s, d: 8, dv: 4, landmarks: 6, per: 2, sigma: 0.7, noise: 1}
		q, k, v, noise, _ := c.inputs(uint64(20 + i))
		pad := make([]int, r.b)
		pad[r.b-1] = r.s / 2
		bias := padBias(r.s, -1e4, pad...)
		in := map[string]*onnx.Tensor{"Q": q, "K": k, "V": v, "Noise": noise, "key_bias": bias}
		want, err := ops.Lara(q, k, v, noise, bias, a)
		if err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("B=%d S=%d", r.b, r.s), in, want)
	}
}
