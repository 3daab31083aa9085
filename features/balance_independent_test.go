package features_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/linearize/linearize/features"
)

// The DERF parameters a_c that FitBalance returns are checked here against
// what they are for, not against the formula that computes them.
//
// The estimator. With ω ~ N(0, I_d) and per-coordinate a_c < 1/8, the
// features
//
//	f(ω, x) = D·exp(Σ_c a_c ω_c² + Σ_c √(1−4a_c) ω_c x_c − ‖x‖²/2),  D = Π_c (1−4a_c)^{1/4}
//
// estimate exp(x·y) by f(ω, x)·f(ω, y) (a = 0 is FAVOR+). Both moments are
// products over the independent coordinates of the one-dimensional
// Gaussian integral
//
//	E[exp(αω² + βω)] = ∫ exp(αω² + βω − ω²/2) dω/√(2π)
//	                 = (1−2α)^{−1/2}·exp(β²/(2(1−2α)))      (α < ½)
//
// (complete the square: (½−α)(ω − β/(1−2α))² − β²/(2(1−2α))). The mean is
// α = 2a_c, β = √(1−4a_c)(x_c + y_c), which gives exp(x·y) exactly; the
// second moment is α = 4a_c, β = 2√(1−4a_c)(x_c + y_c), so the relative
// second moment E[(f f)²]/exp(2x·y) = 1 + Var/mean² is
//
//	log rel = Σ_c [log(1−4a_c) − ½log(1−8a_c) + 2(1−4a_c)z_c²/(1−8a_c)] − ‖z‖²,  z = x + y.
//
// FitBalance chooses a to minimise this averaged over the calibration
// pairs (weighted by p_ij, in the balanced basis x·T_q, y·T_k). The tests
// compute that average from the raw calibration sequences, pair by pair,
// and check that the fitted a is its minimiser (perturbations raise it, a
// one-dimensional search finds the same a), verify the moment formula by
// Monte Carlo, and check two isotropic cases solved by hand.

// logGaussExp is log E[exp(αω² + βω)] for ω ~ N(0, 1), α < ½.
func logGaussExp(alpha, beta float64) float64 {
	return -0.5*math.Log(1-2*alpha) + beta*beta/(2*(1-2*alpha))
}

// logMoments returns the log of E[f(ω,x)·f(ω,y)] and of
// E[(f(ω,x)·f(ω,y))²] from the Gaussian integrals above.
func logMoments(a, x, y []float64) (mean, second float64) {
	for c := range a {
		b, z := math.Sqrt(1-4*a[c]), x[c]+y[c]
		logD := 0.25 * math.Log(1-4*a[c])
		mean += 2*logD + logGaussExp(2*a[c], b*z) - (x[c]*x[c]+y[c]*y[c])/2
		second += 4*logD + logGaussExp(4*a[c], 2*b*z) - x[c]*x[c] - y[c]*y[c]
	}
	return mean, second
}

// logRel is the log relative second moment log(E[(f f)²]/exp(2x·y)).
func logRel(a, x, y []float64) float64 {
	_, second := logMoments(a, x, y)
	var xy float64
	for c := range x {
		xy += x[c] * y[c]
	}
	return second - 2*xy
}

// TestDERFMomentsMonteCarlo draws ω (seeded) and compares the sample mean
// and second moment of f(ω,x)·f(ω,y), computed from the features'
// definition, with logMoments: the closed form the minimality test below
// relies on is the estimator's.
func TestDERFMomentsMonteCarlo(t *testing.T) {
	const samples = 400000
	for i, tc := range []struct{ a, x, y []float64 }{
		{[]float64{0, 0, 0}, []float64{0.3, -0.2, 0.1}, []float64{0.2, 0.4, -0.3}},            // FAVOR+
		{[]float64{-0.2, -0.2, -0.2}, []float64{0.5, 0.1, -0.4}, []float64{0.3, 0.2, 0.1}},    // FAVOR++
		{[]float64{-0.4, 0.02, -0.1}, []float64{0.6, -0.3, 0.2}, []float64{0.4, -0.5, 0.3}},   // DERF
		{[]float64{-0.9, -0.05, -0.3}, []float64{1.1, 0.2, -0.6}, []float64{0.7, -0.1, -0.4}}, // larger z
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(12, uint64(i)))
			d := len(tc.a)
			var logD, nx, ny float64
			for c := 0; c < d; c++ {
				logD += 0.25 * math.Log(1-4*tc.a[c])
				nx += tc.x[c] * tc.x[c]
				ny += tc.y[c] * tc.y[c]
			}
			feat := func(w, v []float64, nv float64) float64 {
				e := logD - nv/2
				for c := range w {
					e += tc.a[c]*w[c]*w[c] + math.Sqrt(1-4*tc.a[c])*w[c]*v[c]
				}
				return math.Exp(e)
			}
			w := make([]float64, d)
			var s1, s2, s4 float64
			for range samples {
				for c := range w {
					w[c] = rng.NormFloat64()
				}
				p := feat(w, tc.x, nx) * feat(w, tc.y, ny)
				s1 += p
				s2 += p * p
				s4 += p * p * p * p
			}
			m1, m2, m4 := s1/samples, s2/samples, s4/samples
			lm, ls := logMoments(tc.a, tc.x, tc.y)
			// Standard errors of the two sample means.
			se1 := math.Sqrt((m2 - m1*m1) / samples)
			se2 := math.Sqrt((m4 - m2*m2) / samples)
			if e := math.Exp(lm); math.Abs(m1-e) > 5*se1+1e-12 {
				t.Errorf("mean %.6g, closed form %.6g (± %.2g)", m1, e, se1)
			}
			if e := math.Exp(ls); math.Abs(m2-e) > 5*se2+1e-12 {
				t.Errorf("second moment %.6g, closed form %.6g (± %.2g)", m2, e, se2)
			}
			var xy float64
			for c := range tc.x {
				xy += tc.x[c] * tc.y[c]
			}
			if math.Abs(lm-xy) > 1e-12 {
				t.Errorf("closed-form mean %g is not exp(x·y) = %g", math.Exp(lm), math.Exp(xy))
			}
		})
	}
}

// pair is one weighted query–key pair of the calibration data.
type pair struct {
	x, y []float64
	p    float64
}

// calibrationPairs draws the calibration sequences of one head (as
// TestFitBalanceProperties does), adds them to m, and returns every
// query–key pair with its weight, from the definitions: x = √scale·q and
// y = √scale·k (minus their sequence means when centred), p_ij = 1/n
// (uniform) or softmax_j(scale·q_i·k_j + bias_j) (attention).
func calibrationPairs(t *testing.T, rng *rand.Rand, m *features.Moments, seqs, n int, scale float64) []pair {
	t.Helper()
	d := m.Dim
	var out []pair
	for range seqs {
		q, k, bias := seqData(rng, n, d)
		if err := m.AddSequence(0, q, k, n, bias, scale); err != nil {
			t.Fatal(err)
		}
		x, y := make([][]float64, n), make([][]float64, n)
		for i := range x {
			x[i], y[i] = make([]float64, d), make([]float64, d)
			for c := 0; c < d; c++ {
				x[i][c] = math.Sqrt(scale) * q[i*d+c]
				y[i][c] = math.Sqrt(scale) * k[i*d+c]
			}
		}
		if m.Centered {
			for _, v := range [][][]float64{x, y} {
				for c := 0; c < d; c++ {
					var s float64
					for i := range v {
						s += v[i][c]
					}
					for i := range v {
						v[i][c] -= s / float64(n)
					}
				}
			}
		}
		for i := 0; i < n; i++ {
			w := make([]float64, n)
			var z float64
			for j := range w {
				w[j] = 1
				if m.Weighting == features.WeightAttention {
					var s float64
					for c := 0; c < d; c++ {
						s += q[i*d+c] * k[j*d+c]
					}
					w[j] = math.Exp(scale*s + bias[j])
				}
				z += w[j]
			}
			for j := range w {
				out = append(out, pair{x[i], y[j], w[j] / z})
			}
		}
	}
	return out
}

// rowTimes returns the row vector v·T for a d×d row-major T.
func rowTimes(v []float64, tm []float32, d int) []float64 {
	out := make([]float64, d)
	for r := 0; r < d; r++ {
		for c := 0; c < d; c++ {
			out[c] += v[r] * float64(tm[r*d+c])
		}
	}
	return out
}

// goldenMin returns the minimiser of a unimodal f on [lo, hi].
func goldenMin(f func(float64) float64, lo, hi float64) float64 {
	r := (math.Sqrt(5) - 1) / 2
	a, b := hi-r*(hi-lo), lo+r*(hi-lo)
	fa, fb := f(a), f(b)
	for hi-lo > 1e-10*(1+math.Abs(lo)) {
		if fa < fb {
			hi, b, fb = b, a, fa
			a = hi - r*(hi-lo)
			fa = f(a)
		} else {
			lo, a, fa = a, b, fb
			b = lo + r*(hi-lo)
			fb = f(b)
		}
	}
	return (lo + hi) / 2
}

// TestFitBalanceDERFMinimisesVariance: on seeded calibration data, for
// both DERF kinds and both pair weightings, the fitted a minimises the
// pair-averaged log relative second moment of the estimator in the fitted
// basis, computed pair by pair from the raw sequences: every single
// coordinate moved either way and random joint moves raise it, FAVOR+
// (a = 0) is no better, and a golden-section search along each coordinate
// lands on the fitted a_c.
func TestFitBalanceDERFMinimisesVariance(t *testing.T) {
	const d, scale = 6, 0.4
	for _, w := range []string{features.WeightUniform, features.WeightAttention} {
		for _, kind := range []features.BalanceKind{features.BalanceSDERF, features.BalanceADERF} {
			t.Run(w+"/"+string(kind), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(2, 3))
				mo, err := features.NewMoments(1, d, w == features.WeightAttention, w)
				if err != nil {
					t.Fatal(err)
				}
				pairs := calibrationPairs(t, rng, mo, 6, 20, scale)
				f, err := features.FitBalance(mo, kind)
				if err != nil {
					t.Fatal(err)
				}
				if len(f.A) != d {
					t.Fatalf("%d DERF parameters, want %d", len(f.A), d)
				}
				// The pairs in the fitted basis.
				xs, ys := make([][]float64, len(pairs)), make([][]float64, len(pairs))
				var total float64
				for i, p := range pairs {
					xs[i], ys[i] = rowTimes(p.x, f.BalanceQ, d), rowTimes(p.y, f.BalanceK, d)
					total += p.p
				}
				loss := func(a []float64) float64 {
					var s float64
					for i, p := range pairs {
						s += p.p * logRel(a, xs[i], ys[i])
					}
					return s / total
				}
				a := make([]float64, d)
				for c := range a {
					a[c] = float64(f.A[c])
				}
				best := loss(a)
				tol := 1e-9 * (1 + math.Abs(best))
				with := func(c int, v float64) []float64 {
					out := append([]float64(nil), a...)
					out[c] = v
					return out
				}
				for c := range a {
					for _, step := range []float64{-0.3, -0.03, -1e-3, 1e-3, 0.03, 0.3} {
						v := a[c] + step*(math.Abs(a[c])+0.05)
						if v >= 0.125 {
							continue
						}
						if l := loss(with(c, v)); l < best-tol {
							t.Errorf("a_%d = %.6g → %.6g lowers the log relative second moment: %.9g < %.9g", c, a[c], v, l, best)
						}
					}
					// The minimiser along coordinate c, found by search.
					got := goldenMin(func(v float64) float64 { return loss(with(c, v)) }, -50, 0.125-1e-9)
					if math.Abs(got-a[c]) > 1e-4*(1+math.Abs(a[c])) {
						t.Errorf("a_%d = %.8g, the search along it finds %.8g", c, a[c], got)
					}
				}
				for range 20 {
					b := make([]float64, d)
					for c := range b {
						b[c] = min(a[c]+0.1*rng.NormFloat64()*(math.Abs(a[c])+0.05), 0.12)
					}
					if l := loss(b); l < best-tol {
						t.Errorf("a = %v lowers the log relative second moment: %.9g < %.9g", b, l, best)
					}
				}
				if l0 := loss(make([]float64, d)); !(best < l0) {
					t.Errorf("fitted a %.9g is not below FAVOR+ (a = 0) %.9g", best, l0)
				}
				t.Logf("a = %.4g; mean log relative second moment %.4g (FAVOR+ %.4g)", a, best, loss(make([]float64, d)))
			})
		}
	}
}

// TestFitBalanceDERFIsotropic: with M1 = M2 = σ²·I and X = 0 the pair
// moment is S_u = 2σ²·I in any orthonormal basis (and the geometric mean
// of equal matrices is I, so ADERF agrees), so every ρ_c = 2σ². Minimising
// over a (see the file comment)
//
//	g(a) = log(1−4a) − ½log(1−8a) + 2(1−4a)ρ/(1−8a):
//	g′(a) = −4/(1−4a) + 4/(1−8a) + 8ρ/(1−8a)²
//	      = [16a(1−8a) + 8ρ(1−4a)] / ((1−4a)(1−8a)²),
//
// zero where 16a² + (4ρ−2)a − ρ = 0, whose root below 1/8 is the minimum
// (g′ < 0 as a → −∞, g′ > 0 at 1/8). By hand:
//
//	ρ = ½: 16a² = ½, a = −1/(4√2);
//	ρ = 1: 16a² + 2a − 1 = 0, a = (−1 − √17)/16.
func TestFitBalanceDERFIsotropic(t *testing.T) {
	for _, tc := range []struct{ sigma2, want float64 }{
		{0.25, -1 / (4 * math.Sqrt2)},
		{0.5, (-1 - math.Sqrt(17)) / 16},
	} {
		for _, kind := range []features.BalanceKind{features.BalanceSDERF, features.BalanceADERF} {
			const d = 3
			m1 := make([]float64, d*d)
			for c := 0; c < d; c++ {
				m1[c*d+c] = tc.sigma2
			}
			f, err := features.FitBalance(momentsFrom(t, d, m1, m1, make([]float64, d*d)), kind)
			if err != nil {
				t.Fatal(err)
			}
			for c, a := range f.A {
				if math.Abs(float64(a)-tc.want) > 1e-5 {
					t.Errorf("σ² = %g, %s: a_%d = %.7g, by hand %.7g", tc.sigma2, kind, c, a, tc.want)
				}
			}
		}
	}
}
