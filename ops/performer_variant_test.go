package ops_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/infer/infertest"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

// This file tests the PerformerAttention variants: centring, the linear
// balance and the FAVOR++ / FAVOR# feature maps, against float64
// references written from the definitions (explicit normalisers, no
// stabilisers), against closed forms, and the function body against the
// Go kernel.

// refFeature is f(ω, x) of a positive random-feature map in float64:
// favor+: exp(ω·x − ‖x‖²/2); favor++ (scalar A): (1−4A)^{d/4}
// exp(A‖ω‖² + √(1−4A) ω·x − ‖x‖²/2); DERF (per-coordinate a):
// Π(1−4a_c)^{1/4} exp(Σ a_c ω_c² + Σ √(1−4a_c) ω_c x_c − ‖x‖²/2). For ω ~
// N(0, I) every one satisfies E[f(ω,x) f(ω,y)] = exp(x·y).
func refFeature(kind ops.FeatureMap, w, x []float64, A float64, a []float64) float64 {
	return math.Exp(refLogFeature(kind, w, x, A, a))
}

// refLogFeature is log f(ω, x) (refFeature), so that references can sum
// the features of large-norm inputs without leaving float64's range.
func refLogFeature(kind ops.FeatureMap, w, x []float64, A float64, a []float64) float64 {
	var xx float64
	for _, v := range x {
		xx += v * v
	}
	logD, e := 0.0, -xx/2
	for c := range x {
		ac := 0.0
		switch kind {
		case ops.FeaturesFavorPP:
			ac = A
		case ops.FeaturesSDERF, ops.FeaturesADERF:
			ac = a[c]
		}
		logD += math.Log(1-4*ac) / 4
		e += ac*w[c]*w[c] + math.Sqrt(1-4*ac)*w[c]*x[c]
	}
	return logD + e
}

// ratioFromLogs returns Σ_j κ_j v_j / Σ_j κ_j for κ_j = Σ_r exp(l[j][r])
// (rows of l nil for keys that do not count) in float64: the terms are
// summed relative to the largest one, exp(l − max l), which changes
// nothing in the ratio and keeps float64 from underflowing whatever the
// logs' range (a term below e^−700 of the largest is below float64's
// resolution of the sum anyway). v(j, c) is the value.
func ratioFromLogs(l [][]float64, dv int, v func(j, c int) float64) []float64 {
	top := math.Inf(-1)
	for _, row := range l {
		for _, x := range row {
			top = math.Max(top, x)
		}
	}
	num := make([]float64, dv)
	var den float64
	for j, row := range l {
		if row == nil {
			continue
		}
		var kap float64
		for _, x := range row {
			kap += math.Exp(x - top)
		}
		den += kap
		for c := range num {
			num[c] += kap * v(j, c)
		}
	}
	if den == 0 { // no valid key: the op's output is 0
		return num
	}
	for c := range num {
		num[c] /= den
	}
	return num
}

// refTransform applies the op's exact transformations to one (batch,
// head) in float64: x = (√s·q − q̄)·Tq, y = (√s·k − k̄)·Tk over the valid
// tokens, and the key log-weights b'_j = b_j + q̄·(√s·k_j − k̄) (only with
// center). tq, tk may be nil (identity).
func refTransform(q, k [][]float64, b []float64, ok []bool, qok []bool, scale float64, center bool, tq, tk [][]float64) (x, y [][]float64, bb []float64) {
	d := len(q[0])
	sd := math.Sqrt(scale)
	qbar, kbar := make([]float64, d), make([]float64, d)
	if center {
		var nq, nk float64
		for i := range q {
			if qok[i] {
				nq++
				for c := range qbar {
					qbar[c] += sd * q[i][c]
				}
			}
		}
		for j := range k {
			if ok[j] {
				nk++
				for c := range kbar {
					kbar[c] += sd * k[j][c]
				}
			}
		}
		for c := range qbar {
			qbar[c] /= math.Max(nq, 1)
			kbar[c] /= math.Max(nk, 1)
		}
	}
	apply := func(v, mean []float64, t [][]float64) []float64 {
		r := make([]float64, d)
		for c := range r {
			r[c] = sd*v[c] - mean[c]
		}
		if t == nil {
			return r
		}
		out := make([]float64, d)
		for c := range out {
			for a := range r {
				out[c] += r[a] * t[a][c]
			}
		}
		return out
	}
	bb = append([]float64(nil), b...)
	for i := range q {
		x = append(x, apply(q[i], qbar, tq))
	}
	for j := range k {
		y = append(y, apply(k[j], kbar, tk))
		if center {
			for c := range qbar {
				bb[j] += qbar[c] * (sd*k[j][c] - kbar[c])
			}
		}
	}
	return x, y, bb
}

func dot(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// softmaxRow returns softmax(s) over the entries with ok, 0 elsewhere.
func softmaxRow(s []float64, ok []bool) []float64 {
	top := math.Inf(-1)
	for j, v := range s {
		if ok[j] {
			top = math.Max(top, v)
		}
	}
	out := make([]float64, len(s))
	var z float64
	for j, v := range s {
		if ok[j] {
			out[j] = math.Exp(v - top)
			z += out[j]
		}
	}
	for j := range out {
		out[j] /= z
	}
	return out
}

// randBalance returns a well-conditioned T = I + 0.3·G/√d (or, orth, a
// Haar-like orthogonal matrix from Gram–Schmidt) and T⁻ᵀ, in float64.
func randBalance(rng *rand.Rand, d int, orth bool) (t, tinvT [][]float64) {
	t = make([][]float64, d)
	for r := range t {
		t[r] = make([]float64, d)
		for c := range t[r] {
			g := rng.NormFloat64()
			if orth {
				t[r][c] = g
			} else {
				t[r][c] = 0.3 * g / math.Sqrt(float64(d))
				if r == c {
					t[r][c]++
				}
			}
		}
	}
	if orth {
		for r := range t {
			for p := 0; p < r; p++ {
				f := dot(t[r], t[p])
				for c := range t[r] {
					t[r][c] -= f * t[p][c]
				}
			}
			n := math.Sqrt(dot(t[r], t[r]))
			for c := range t[r] {
				t[r][c] /= n
			}
		}
		return t, t
	}
	return t, transpose(invert(t))
}

// invert inverts a square matrix by Gauss–Jordan elimination with partial
// pivoting.
func invert(a [][]float64) [][]float64 {
	n := len(a)
	m := make([][]float64, n)
	for r := range m {
		m[r] = make([]float64, 2*n)
		copy(m[r], a[r])
		m[r][n+r] = 1
	}
	for c := 0; c < n; c++ {
		p := c
		for r := c + 1; r < n; r++ {
			if math.Abs(m[r][c]) > math.Abs(m[p][c]) {
				p = r
			}
		}
		m[c], m[p] = m[p], m[c]
		f := m[c][c]
		for j := range m[c] {
			m[c][j] /= f
		}
		for r := 0; r < n; r++ {
			if r != c {
				f := m[r][c]
				for j := range m[r] {
					m[r][j] -= f * m[c][j]
				}
			}
		}
	}
	out := make([][]float64, n)
	for r := range out {
		out[r] = m[r][n:]
	}
	return out
}

func transpose(a [][]float64) [][]float64 {
	out := make([][]float64, len(a[0]))
	for c := range out {
		out[c] = make([]float64, len(a))
		for r := range a {
			out[c][r] = a[r][c]
		}
	}
	return out
}

// The transformed scores reproduce exact softmax attention: softmax over
// valid keys of x_i·y_j + b'_j equals softmax of scale·q_i·k_j + b_j.
func TestPerformerTransformationsAreExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 1))
	const s, d = 9, 6
	for _, c := range []struct {
		name    string
		center  bool
		balance string // "", "general", "orthogonal"
		pad     int
	}{
		{"center", true, "", 0}, {"center/pad", true, "", 3}, {"balance", false, "general", 2},
		{"center+balance", true, "general", 2}, {"center+rotation", true, "orthogonal", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			q, k := make([][]float64, s), make([][]float64, s)
			b, ok := make([]float64, s), make([]bool, s)
			for i := range q {
				q[i], k[i] = make([]float64, d), make([]float64, d)
				for j := range q[i] {
					// Large shared means, as in pretrained models.
					q[i][j] = 3 + 2*rng.NormFloat64()
					k[i][j] = -2 + 2*rng.NormFloat64()
				}
				ok[i] = i < s-c.pad
				if ok[i] {
					b[i] = rng.NormFloat64()
				}
			}
			var tq, tk [][]float64
			if c.balance != "" {
				tq, tk = randBalance(rng, d, c.balance == "orthogonal")
			}
			const scale = 0.4
			x, y, bb := refTransform(q, k, b, ok, ok, scale, c.center, tq, tk)
			var worst float64
			for i := 0; i < s-c.pad; i++ {
				s0, s1 := make([]float64, s), make([]float64, s)
				for j := range k {
					s0[j] = scale*dot(q[i], k[j]) + b[j]
					s1[j] = dot(x[i], y[j]) + bb[j]
				}
				p0, p1 := softmaxRow(s0, ok), softmaxRow(s1, ok)
				for j := range p0 {
					worst = math.Max(worst, math.Abs(p0[j]-p1[j]))
				}
			}
			if worst > 1e-9 {
				t.Errorf("transformed attention differs by %.3g > 1e-9", worst)
			}
		})
	}
}

// Every feature map is an unbiased estimator of exp(x·y) over ω ~ N(0, I),
// and its second moment is the closed form the parameters are chosen
// from: for DERF with per-coordinate a (FAVOR++: all a_c = A, favor+:
// a = 0),
//
//	E[(f(ω,x) f(ω,y))²] = Π_c (1−4a_c)/√(1−8a_c) · exp(Σ_c 2(1−4a_c)z_c²/(1−8a_c) − ‖x‖² − ‖y‖²), z = x + y.
func TestPerformerFeaturesUnbiased(t *testing.T) {
	// Small enough that the sample second moment converges (its own
	// variance grows like exp(4‖x+y‖²)).
	x := []float64{0.3, -0.15, 0.2}
	y := []float64{0.1, 0.25, 0.35}
	for _, c := range []struct {
		kind ops.FeatureMap
		A    float64
		a    []float64
	}{
		{ops.FeaturesFavorPlus, 0, nil},
		{ops.FeaturesFavorPP, ops.OptimalPositiveA(0.8), nil},
		{ops.FeaturesFavorPP, -0.3, nil},
		{ops.FeaturesSDERF, 0, []float64{-0.2, -0.05, 0.02}},
		{ops.FeaturesADERF, 0, []float64{-0.4, 0.03, -0.1}},
	} {
		t.Run(fmt.Sprintf("%s/A=%.3g/a=%v", c.kind, c.A, c.a), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(41, 2))
			const n = 400000
			var s1, s2, s4 float64
			w := make([]float64, len(x))
			for range n {
				for i := range w {
					w[i] = rng.NormFloat64()
				}
				p := refFeature(c.kind, w, x, c.A, c.a) * refFeature(c.kind, w, y, c.A, c.a)
				s1 += p
				s2 += p * p
				s4 += p * p * p * p
			}
			mean, second := s1/n, s2/n
			se := math.Sqrt((second - mean*mean) / n)
			want := math.Exp(dot(x, y))
			if math.Abs(mean-want) > 4*se {
				t.Errorf("mean %.6f, want exp(x·y) = %.6f (±%.2g, 4 standard errors)", mean, want, 4*se)
			}
			// Closed-form second moment.
			logm := -dot(x, x) - dot(y, y)
			for i := range x {
				ac := c.A
				if c.a != nil {
					ac = c.a[i]
				}
				z := x[i] + y[i]
				logm += math.Log(1-4*ac) - 0.5*math.Log(1-8*ac) + 2*(1-4*ac)*z*z/(1-8*ac)
			}
			se2 := math.Sqrt((s4/n - second*second) / n)
			if m := math.Exp(logm); math.Abs(second-m) > 4*se2 {
				t.Errorf("second moment %.5f, closed form %.5f (±%.2g, 4 standard errors)", second, m, 4*se2)
			}
			t.Logf("mean %.5f vs %.5f; second moment %.4f vs %.4f", mean, want, second, math.Exp(logm))
		})
	}
}

// OptimalPositiveA minimises the log second moment per coordinate,
// log(1−4A) − ½ log(1−8A) + 2(1−4A)ρ/(1−8A), over A < 1/8.
func TestOptimalPositiveA(t *testing.T) {
	g := func(A, rho float64) float64 {
		return math.Log(1-4*A) - 0.5*math.Log(1-8*A) + 2*(1-4*A)*rho/(1-8*A)
	}
	for _, rho := range []float64{0, 0.01, 0.3, 1, 2.5, 10, 100} {
		A := ops.OptimalPositiveA(rho)
		if !(A <= 0) || !(A < 0.125) {
			t.Errorf("ρ=%g: A=%g, want ≤ 0", rho, A)
		}
		best := g(A, rho)
		for i := -20000; i < 1250; i++ { // grid over [−20, 0.125)
			B := float64(i) / 1000
			if v := g(B, rho); v < best-1e-12 {
				t.Errorf("ρ=%g: g(%g)=%.9g < g(A*=%g)=%.9g", rho, B, v, A, best)
				break
			}
		}
	}
	if A := ops.OptimalPositiveA(0); A != 0 {
		t.Errorf("A(0) = %g, want 0", A)
	}
}

// variantCase is one configuration of the general positive path.
type variantCase struct {
	name     string
	center   bool
	balance  string // "", "shared", "perhead"
	features ops.FeatureMap
	bias     string // "none", "pad", "value"
	b, h, s  int
	sq       int // query length when it differs from s (cross-attention)
	d, dv, m int
	sigma    float64
	mean     float64 // shared mean of the query and key entries
}

func variantCases() []variantCase {
	var cs []variantCase
	for _, feat := range []ops.FeatureMap{ops.FeaturesFavorPlus, ops.FeaturesFavorPP, ops.FeaturesSDERF, ops.FeaturesADERF} {
		for _, center := range []bool{false, true} {
			for _, bal := range []string{"", "shared", "perhead"} {
				derf := feat == ops.FeaturesSDERF || feat == ops.FeaturesADERF
				if (derf && bal == "") || (!center && bal == "" && feat == ops.FeaturesFavorPlus) {
					continue
				}
				for _, bias := range []string{"none", "pad", "value"} {
					c := variantCase{center: center, balance: bal, features: feat, bias: bias, b: 2, h: 3, s: 7, d: 8, dv: 5, m: 16, sigma: 0.5, mean: 0.4}
					c.name = fmt.Sprintf("%s/center=%v/balance=%s/bias=%s", feat, center, def(bal, "none"), bias)
					cs = append(cs, c)
				}
			}
		}
	}
	// Cross-attention shapes: every query counts in the query statistics.
	for _, c := range []variantCase{
		{center: true, features: ops.FeaturesFavorPlus, bias: "pad", sq: 5},
		{center: true, balance: "shared", features: ops.FeaturesADERF, bias: "value", sq: 9},
		{features: ops.FeaturesFavorPP, bias: "pad", sq: 4},
	} {
		c.b, c.h, c.s, c.d, c.dv, c.m, c.sigma, c.mean = 2, 3, 7, 8, 5, 16, 0.5, 0.4
		c.name = fmt.Sprintf("%s/center=%v/balance=%s/bias=%s/sq=%d", c.features, c.center, def(c.balance, "none"), c.bias, c.sq)
		cs = append(cs, c)
	}
	return cs
}

func def(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func (c variantCase) attrs() ops.PerformerAttrs {
	return ops.PerformerAttrs{Scale: 0.3, Center: c.center, Features: c.features}
}

func (c variantCase) variant() ops.PerformerVariant {
	return ops.PerformerVariant{Center: c.center, Balance: c.balance != "", Features: c.features}
}

// inputs draws the case's inputs; queries and keys have a shared mean (the
// regime centring is for).
func (c variantCase) inputs(seed uint64) ops.PerformerInputs {
	rng := rand.New(rand.NewPCG(seed, 11))
	pc := perfCase{b: c.b, h: c.h, s: c.s, d: c.d, dv: c.dv, m: c.m, bias: c.bias, sigma: c.sigma, kernel: ops.KernelPositive}
	q, k, v, omega, bias := pc.inputs(seed)
	if c.sq > 0 {
		q = randTensor(rng, c.sigma, c.b, c.h, c.sq, c.d)
	}
	for i := range q.Floats() {
		q.Floats()[i] += float32(c.mean)
	}
	for i := range k.Floats() {
		k.Floats()[i] -= float32(c.mean)
	}
	in := ops.PerformerInputs{Q: q, K: k, V: v, Omega: omega, Bias: bias}
	if c.balance != "" {
		nh := 1
		if c.balance == "perhead" {
			nh = c.h
		}
		orth := c.features == ops.FeaturesSDERF
		var tq, tk []float32
		for range nh {
			a, b := randBalance(rng, c.d, orth)
			for r := range a {
				for col := range a[r] {
					tq = append(tq, float32(a[r][col]))
					tk = append(tk, float32(b[r][col]))
				}
			}
		}
		in.BalanceQ = onnx.NewFloat([]int{nh, c.d, c.d}, tq)
		in.BalanceK = onnx.NewFloat([]int{nh, c.d, c.d}, tk)
		if orth {
			in.BalanceK = in.BalanceQ
		}
	}
	if c.features == ops.FeaturesSDERF || c.features == ops.FeaturesADERF {
		a := make([]float32, c.h*c.d)
		for i := range a {
			a[i] = float32(-0.4 + 0.5*rng.Float64())
		}
		in.DerfA = onnx.NewFloat([]int{c.h, 1, c.d}, a)
	}
	return in
}

// variantRef computes the op's estimator in float64 from its definition:
// transformations, then κ_ij = exp(b'_j)·(1/M)·Σ_r f(ω_r, x_i) f(ω_r, y_j)
// with the feature map's f (refFeature), out_i = Σ_j κ_ij v_j / Σ_j κ_ij,
// summed from the logs of the terms (ratioFromLogs).
func variantRef(in ops.PerformerInputs, a ops.PerformerAttrs) []float64 {
	q, k, v, omega := in.Q, in.K, in.V, in.Omega
	b, h, sq, d := q.Shape[0], q.Shape[1], q.Shape[2], q.Shape[3]
	sk, dv, m := k.Shape[2], v.Shape[3], omega.Shape[1]
	scale := float64(a.Scale)
	rows := func(t *onnx.Tensor, bh, n, w int) [][]float64 {
		out := make([][]float64, n)
		for i := range out {
			out[i] = widen(t.Floats()[(bh*n+i)*w : (bh*n+i+1)*w])
		}
		return out
	}
	mat := func(t *onnx.Tensor, hi int) [][]float64 {
		if t == nil {
			return nil
		}
		o := 0
		if t.Shape[0] > 1 {
			o = hi * d * d
		}
		out := make([][]float64, d)
		for r := range out {
			out[r] = widen(t.Floats()[o+r*d : o+(r+1)*d])
		}
		return out
	}
	out := make([]float64, b*h*sq*dv)
	for bh := 0; bh < b*h; bh++ {
		bi, hi := bh/h, bh%h
		bias, ok := make([]float64, sk), make([]bool, sk)
		for j := range ok {
			ok[j] = true
			if in.Bias != nil {
				row := 0
				if in.Bias.Shape[0] > 1 {
					row = bi
				}
				bias[j] = float64(in.Bias.Floats()[row*in.Bias.Shape[3]+j])
				ok[j] = bias[j] > -1e4
			}
		}
		// Queries share the keys' mask in self-attention; with Sq ≠ Sk
		// every query counts.
		qok := make([]bool, sq)
		for i := range qok {
			qok[i] = sq != sk || ok[i]
		}
		x, y, bb := refTransform(rows(q, bh, sq, d), rows(k, bh, sk, d), bias, ok, qok, scale, a.Center, mat(in.BalanceQ, hi), mat(in.BalanceK, hi))
		A := 0.0
		var av []float64
		switch a.Features {
		case ops.FeaturesFavorPP:
			// ρ = mean over valid pairs of ‖x_i + y_j‖²/d.
			var s, n float64
			for i := range x {
				for j := range y {
					if qok[i] && ok[j] {
						var z float64
						for c := range x[i] {
							z += (x[i][c] + y[j][c]) * (x[i][c] + y[j][c])
						}
						s += z
						n++
					}
				}
			}
			A = ops.OptimalPositiveA(s / n / float64(d))
		case ops.FeaturesSDERF, ops.FeaturesADERF:
			o := 0
			if in.DerfA.Shape[0] > 1 {
				o = hi * d
			}
			av = widen(in.DerfA.Floats()[o : o+d])
		}
		o := 0
		if omega.Shape[0] > 1 {
			o = hi * m * d
		}
		om := widen(omega.Floats()[o : o+m*d])
		fx := func(z []float64) []float64 {
			f := make([]float64, m)
			for r := range f {
				f[r] = refLogFeature(a.Features, om[r*d:(r+1)*d], z, A, av)
			}
			return f
		}
		fy := make([][]float64, sk)
		for j := range fy {
			if ok[j] {
				fy[j] = fx(y[j])
			}
		}
		for i := 0; i < sq; i++ {
			fq := fx(x[i])
			l := make([][]float64, sk)
			for j := range l {
				if !ok[j] {
					continue
				}
				l[j] = make([]float64, m)
				for r := range l[j] {
					l[j][r] = bb[j] + fq[r] + fy[j][r] - math.Log(float64(m))
				}
			}
			row := ratioFromLogs(l, dv, func(j, c int) float64 { return float64(v.Floats()[(bh*sk+j)*dv+c]) })
			copy(out[(bh*sq+i)*dv:(bh*sq+i+1)*dv], row)
		}
	}
	return out
}

func TestPerformerVariantKernelMatchesReference(t *testing.T) {
	for _, c := range variantCases() {
		t.Run(c.name, func(t *testing.T) {
			in := c.inputs(1)
			a := c.attrs()
			a.Threads = 2
			got, err := ops.PerformerWith(in, a)
			if err != nil {
				t.Fatal(err)
			}
			want := variantRef(in, a)
			var wmax float64
			for _, x := range want {
				wmax = math.Max(wmax, math.Abs(x))
			}
			if d := maxDiff(t, got.Floats(), want); d > 1e-4*wmax {
				t.Errorf("max abs error %.3g > %.3g", d, 1e-4*wmax)
			}
		})
	}
}

// perfNodeInputs lists the node inputs and the feed of a variant case.
func perfNodeInputs(in ops.PerformerInputs, balance, derf bool) ([]string, map[string]*onnx.Tensor) {
	names := []string{"Q", "K", "V", "Omega", "key_bias"}
	feed := map[string]*onnx.Tensor{"Q": in.Q, "K": in.K, "V": in.V, "Omega": in.Omega, "key_bias": in.Bias}
	if balance {
		names = append(names, "balance_q", "balance_k")
		feed["balance_q"], feed["balance_k"] = in.BalanceQ, in.BalanceK
	}
	if derf {
		names = append(names, "derf_a")
		feed["derf_a"] = in.DerfA
	}
	return names, feed
}

// bodyModel returns a one-node model of the case's function at opset and
// the feed of in.
func (c variantCase) bodyModel(t *testing.T, in ops.PerformerInputs, opset int64) (*onnxpb.ModelProto, map[string]*onnx.Tensor) {
	t.Helper()
	fn, err := ops.PerformerFunctionFor(c.variant(), opset)
	if err != nil {
		t.Fatal(err)
	}
	names, feed := perfNodeInputs(in, c.balance != "", in.DerfA != nil)
	node := ops.NewPerformerNode("perf", names, "out", c.attrs())
	return oneNodeModel(t, node, fn, opset, feed), feed
}

// The function body of every variant, run by onnxruntime and by the
// native backend with the body inlined, agrees with the Go kernel.
func TestPerformerVariantFunctionMatchesKernel(t *testing.T) {
	ort := infertest.ORT(t)
	for _, opset := range []int64{11, 13, 17, 18} {
		for _, c := range variantCases() {
			t.Run(fmt.Sprintf("opset%d/%s", opset, c.name), func(t *testing.T) {
				in := c.inputs(2)
				if in.Bias == nil {
					in.Bias = onnx.NewFloat([]int{1, 1, 1, 1}, []float32{0})
				}
				want, err := ops.PerformerWith(in, c.attrs())
				if err != nil {
					t.Fatal(err)
				}
				model, feed := c.bodyModel(t, in, opset)
				// The registered kernel reads the node's attributes.
				runtimeOut := runNative(t, model, feed)
				checkClose(t, "native kernel vs Go kernel", runtimeOut, want, 1e-6)
				checkClose(t, "inlined function vs Go kernel", runInlined(t, model, feed), want, 1e-4)
				if ort {
					t.Logf("relative error %.2g", checkClose(t, "onnxruntime vs Go kernel", runORT(t, model, feed), want, 1e-4))
				}
			})
		}
	}
}

// runNative runs the model in the native backend with the registered
// kernel (not the function body).
func runNative(t *testing.T, m *onnxpb.ModelProto, inputs map[string]*onnx.Tensor) *onnx.Tensor {
	t.Helper()
	s, err := infer.NewNativeSession(m, infer.Options{Threads: 1})
	return runOut(t, "native", s, err, inputs)
}

// Appending padded tokens (large-norm keys and queries) leaves the real
// tokens' outputs unchanged for every variant, in the kernel and in
// onnxruntime.
func TestPerformerVariantPaddingInvariance(t *testing.T) {
	ort := infertest.ORT(t)
	for _, c := range variantCases() {
		if c.bias != "none" {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			const pad = 4
			full := c
			full.s += pad
			in := full.inputs(5)
			d := c.d
			for _, x := range []*onnx.Tensor{in.Q, in.K} {
				for i := range x.Floats() {
					if (i/d)%full.s >= c.s {
						x.Floats()[i] = x.Floats()[i]*5 + 3
					}
				}
			}
			in.Bias = padBias(full.s, -1e4, pad, pad)
			got, err := ops.PerformerWith(in, c.attrs())
			if err != nil {
				t.Fatal(err)
			}
			short := in
			short.Q, short.K, short.V, short.Bias = prefix(in.Q, c.s), prefix(in.K, c.s), prefix(in.V, c.s), nil
			want, err := ops.PerformerWith(short, c.attrs())
			if err != nil {
				t.Fatal(err)
			}
			checkClose(t, "kernel: padded vs unpadded", prefix(got, c.s), want, 1e-5)
			if !ort {
				return
			}
			model, feed := c.bodyModel(t, in, 17)
			checkClose(t, "onnxruntime: padded vs unpadded kernel", prefix(runORT(t, model, feed), c.s), want, 1e-4)
		})
	}
}

// With center=1 the op is invariant, like softmax attention, to one
// vector added to every key; without it FAVOR+ is not.
func TestPerformerCenterKeyShiftInvariance(t *testing.T) {
	c := variantCase{center: true, features: ops.FeaturesFavorPlus, bias: "pad", b: 2, h: 2, s: 9, d: 8, dv: 3, m: 32, sigma: 0.5}
	in := c.inputs(7)
	shifted := in
	k := onnx.NewFloat(in.K.Shape, append([]float32(nil), in.K.Floats()...))
	for i := range k.Floats() {
		k.Floats()[i] += float32(1.5 - 0.4*float64(i%c.d))
	}
	shifted.K = k
	for _, center := range []bool{true, false} {
		a := ops.PerformerAttrs{Scale: 0.3, Center: center}
		x, err := ops.PerformerWith(in, a)
		if err != nil {
			t.Fatal(err)
		}
		y, err := ops.PerformerWith(shifted, a)
		if err != nil {
			t.Fatal(err)
		}
		d := maxDiff(t, x.Floats(), widen(y.Floats()))
		if center && d > 1e-5*maxAbs(x.Floats()) {
			t.Errorf("center=1: shifting the keys changes the output by %.3g", d)
		}
		if !center && d < 1e-3*maxAbs(x.Floats()) {
			t.Errorf("center=0: shifting the keys changes the output by only %.3g (the test would not see a broken centring)", d)
		}
	}
}

// Logits far beyond float32's exp range stay finite in every variant.
func TestPerformerVariantLargeNormsFinite(t *testing.T) {
	for _, c := range variantCases() {
		if c.bias != "pad" || c.balance == "perhead" {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			c.sigma, c.mean = 6, 4
			in := c.inputs(9)
			got, err := ops.PerformerWith(in, c.attrs())
			if err != nil {
				t.Fatal(err)
			}
			maxDiff(t, got.Floats(), make([]float64, got.Len())) // fails on NaN/Inf
			if !infertest.ORT(t) {
				return
			}
			model, feed := c.bodyModel(t, in, 17)
			ort := runORT(t, model, feed)
			maxDiff(t, ort.Floats(), make([]float64, ort.Len()))
			checkClose(t, "large norms: onnxruntime vs Go kernel", ort, got, 1e-4)
		})
	}
}

func TestPerformerVariantErrors(t *testing.T) {
	base := variantCase{center: true, balance: "shared", features: ops.FeaturesADERF, bias: "pad", b: 2, h: 2, s: 5, d: 4, dv: 3, m: 8, sigma: 0.5}
	good := base.inputs(3)
	if _, err := ops.PerformerWith(good, base.attrs()); err != nil {
		t.Fatalf("valid inputs: %v", err)
	}
	notInverse := onnx.NewFloat(good.BalanceK.Shape, append([]float32(nil), good.BalanceK.Floats()...))
	notInverse.Floats()[1] += 0.1
	bigA := onnx.NewFloat(good.DerfA.Shape, append([]float32(nil), good.DerfA.Floats()...))
	bigA.Floats()[0] = 0.25
	asym := variantCase{balance: "shared", features: ops.FeaturesFavorPlus, b: 2, h: 2, s: 5, d: 4, dv: 3, m: 8, sigma: 0.5}.inputs(4)
	for _, c := range []struct {
		name string
		mod  func(in *ops.PerformerInputs, a *ops.PerformerAttrs)
	}{
		{"features", func(in *ops.PerformerInputs, a *ops.PerformerAttrs) { a.Features = "relu" }},
		{"trig with center", func(in *ops.PerformerInputs, a *ops.PerformerAttrs) {
			a.Kernel, a.Features, in.BalanceQ, in.BalanceK, in.DerfA = ops.KernelTrig, "", nil, nil, nil
		}},
		{"balance_k alone", func(in *ops.PerformerInputs, a *ops.PerformerAttrs) { in.BalanceQ = nil }},
		{"balance not inverse", func(in *ops.PerformerInputs, a *ops.PerformerAttrs) { in.BalanceK = notInverse }},
		{"balance shape", func(in *ops.PerformerInputs, a *ops.PerformerAttrs) { in.BalanceQ, in.BalanceK = in.Q, in.Q }},
		{"derf without balance", func(in *ops.PerformerInputs, a *ops.PerformerAttrs) { in.BalanceQ, in.BalanceK = nil, nil }},
		{"derf without a", func(in *ops.PerformerInputs, a *ops.PerformerAttrs) { in.DerfA = nil }},
		{"derf a ≥ 1/4", func(in *ops.PerformerInputs, a *ops.PerformerAttrs) { in.DerfA = bigA }},
		{"a with favor+", func(in *ops.PerformerInputs, a *ops.PerformerAttrs) { a.Features = ops.FeaturesFavorPlus }},
		{"sderf asymmetric", func(in *ops.PerformerInputs, a *ops.PerformerAttrs) {
			a.Features, in.BalanceQ, in.BalanceK = ops.FeaturesSDERF, asym.BalanceQ, asym.BalanceK
		}},
	} {
		in, a := good, base.attrs()
		c.mod(&in, &a)
		if _, err := ops.PerformerWith(in, a); err == nil {
			t.Errorf("%s: no error", c.name)
		} else if err.Error()[:4] != "ops:" {
			t.Errorf("%s: error %q lacks the package prefix", c.name, err)
		}
	}
	for _, v := range []ops.PerformerVariant{
		{Kernel: ops.KernelTrig, Center: true},
		{Features: ops.FeaturesADERF},
		{Features: "relu", Center: true},
	} {
		if _, err := ops.PerformerFunctionFor(v, 17); err == nil {
			t.Errorf("function %+v: no error", v)
		}
	}
}

// The exact-attention body computes softmax(scale·Q·Kᵀ + key_bias)·V.
func TestPerformerExactFunction(t *testing.T) {
	requireORT(t)
	for _, opset := range []int64{11, 13, 18} {
		c := perfCase{kernel: ops.KernelPositive, b: 2, h: 3, s: 6, d: 4, dv: 5, m: 8, bias: "value", sigma: 1}
		q, k, v, omega, bias := c.inputs(12)
		const scale = 0.45
		fn, err := ops.PerformerExactFunction(opset)
		if err != nil {
			t.Fatal(err)
		}
		in := map[string]*onnx.Tensor{"Q": q, "K": k, "V": v, "Omega": omega, "key_bias": bias}
		node := ops.NewPerformerNode("exact", []string{"Q", "K", "V", "Omega", "key_bias"}, "out", ops.PerformerAttrs{Scale: scale})
		got := runORT(t, oneNodeModel(t, node, fn, opset, in), in)
		want := make([]float64, 0, got.Len())
		for bh := 0; bh < c.b*c.h; bh++ {
			bi := bh / c.h
			for i := 0; i < c.s; i++ {
				s, ok := make([]float64, c.s), make([]bool, c.s)
				for j := range s {
					bv := float64(bias.Floats()[bi*c.s+j])
					s[j] = scale*dot(widen(q.Floats()[(bh*c.s+i)*c.d:(bh*c.s+i+1)*c.d]), widen(k.Floats()[(bh*c.s+j)*c.d:(bh*c.s+j+1)*c.d])) + math.Max(bv, -1e4)
					ok[j] = true
				}
				p := softmaxRow(s, ok)
				for e := 0; e < c.dv; e++ {
					var o float64
					for j := range p {
						o += p[j] * float64(v.Floats()[(bh*c.s+j)*c.dv+e])
					}
					want = append(want, o)
				}
			}
		}
		if d := maxDiff(t, got.Floats(), want); d > 1e-5 {
			t.Errorf("opset %d: max abs error %.3g", opset, d)
		}
	}
}
