package features_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/linearize/linearize/features"
	"gonum.org/v1/gonum/mat"
)

// seqData draws one head of one sequence with the structure of a
// pretrained layer: shared means and unequal spreads of queries and keys.
func seqData(rng *rand.Rand, n, d int) (q, k, bias []float64) {
	q, k, bias = make([]float64, n*d), make([]float64, n*d), make([]float64, n)
	for i := range q {
		c := i % d
		q[i] = 1.5 + float64(c%3) + (0.5+float64(c)/float64(d))*rng.NormFloat64()
		k[i] = -1 + 2*rng.NormFloat64()/(1+float64(c%4))
	}
	for j := range bias {
		bias[j] = 0.3 * rng.NormFloat64()
	}
	return q, k, bias
}

// The accumulated sums are the pair sums Σ_ij p_ij x_iᵀx_i, Σ p_ij y_jᵀy_j,
// Σ p_ij x_iᵀy_j, computed here pair by pair from the definition.
func TestMomentsArePairSums(t *testing.T) {
	const d, h = 4, 2
	for _, w := range []string{features.WeightUniform, features.WeightAttention} {
		for _, centered := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/centered=%v", w, centered), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(1, 1))
				m, err := features.NewMoments(h, d, centered, w)
				if err != nil {
					t.Fatal(err)
				}
				const scale = 0.5
				ref := make([][3][]float64, h)
				for hi := range ref {
					for i := range ref[hi] {
						ref[hi][i] = make([]float64, d*d)
					}
				}
				var weight float64
				for _, n := range []int{5, 9} {
					for hi := 0; hi < h; hi++ {
						q, k, bias := seqData(rng, n, d)
						if err := m.AddSequence(hi, q, k, n, bias, scale); err != nil {
							t.Fatal(err)
						}
						x, y := make([][]float64, n), make([][]float64, n)
						for i := 0; i < n; i++ {
							x[i], y[i] = make([]float64, d), make([]float64, d)
							for c := 0; c < d; c++ {
								x[i][c] = math.Sqrt(scale) * q[i*d+c]
								y[i][c] = math.Sqrt(scale) * k[i*d+c]
							}
						}
						if centered {
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
							p := make([]float64, n)
							var z float64
							for j := 0; j < n; j++ {
								if w == features.WeightUniform {
									p[j] = 1
								} else {
									var s float64
									for c := 0; c < d; c++ {
										s += q[i*d+c] * k[j*d+c]
									}
									p[j] = math.Exp(scale*s + bias[j])
								}
								z += p[j]
							}
							for j := 0; j < n; j++ {
								pij := p[j] / z
								for a := 0; a < d; a++ {
									for b := 0; b < d; b++ {
										ref[hi][0][a*d+b] += pij * x[i][a] * x[i][b]
										ref[hi][1][a*d+b] += pij * y[j][a] * y[j][b]
										ref[hi][2][a*d+b] += pij * x[i][a] * y[j][b]
									}
								}
							}
						}
					}
					weight += float64(n)
				}
				for hi := 0; hi < h; hi++ {
					if m.Weight[hi] != weight {
						t.Errorf("head %d weight %g, want %g", hi, m.Weight[hi], weight)
					}
					for i, got := range [][]float64{m.XX, m.YY, m.XY} {
						for e := 0; e < d*d; e++ {
							if g, r := got[hi*d*d+e], ref[hi][i][e]; math.Abs(g-r) > 1e-10*(1+math.Abs(r)) {
								t.Fatalf("head %d sum %d entry %d: %.12g, want %.12g", hi, i, e, g, r)
							}
						}
					}
				}
			})
		}
	}
}

// momentsFrom returns moments of one head holding M1, M2, X directly.
func momentsFrom(t *testing.T, d int, m1, m2, x []float64) *features.Moments {
	m, err := features.NewMoments(1, d, true, features.WeightUniform)
	if err != nil {
		t.Fatal(err)
	}
	copy(m.XX, m1)
	copy(m.YY, m2)
	copy(m.XY, x)
	m.Weight[0] = 1
	return m
}

// A case solvable by hand: M1 = diag(4, 1), M2 = diag(1, 4), X = 0. The
// geometric mean is P = diag(1/2, 2) (P·M1·P = M2), so S = diag(1/√2, √2),
// queries and keys both get the second moment diag(2, 2), and
// Σ ρ_c = tr(S_u) falls from 10 to 8.
func TestFitBalanceByHand(t *testing.T) {
	m := momentsFrom(t, 2, []float64{4, 0, 0, 1}, []float64{1, 0, 0, 4}, make([]float64, 4))
	f, err := features.FitBalance(m, features.BalanceGeoMean)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(f.TraceBefore[0]-10) > 1e-4 || math.Abs(f.TraceAfter[0]-8) > 1e-4 {
		t.Errorf("trace %g → %g, want 10 → 8", f.TraceBefore[0], f.TraceAfter[0])
	}
	for _, r := range f.Rho {
		if math.Abs(r-4) > 1e-4 {
			t.Errorf("ρ = %v, want [4 4]", f.Rho)
		}
	}
	// |T| columns: the rows of T scale query coordinates by 1/√2 and √2.
	for r, want := range []float64{1 / math.Sqrt2, math.Sqrt2} {
		n := math.Hypot(float64(f.BalanceQ[2*r]), float64(f.BalanceQ[2*r+1]))
		if math.Abs(n-want) > 1e-4 {
			t.Errorf("row %d of T has norm %g, want %g", r, n, want)
		}
	}
	if f.A != nil {
		t.Errorf("geometric-mean balance has DERF parameters")
	}
}

// matMul multiplies d×d row-major matrices, optionally transposing a.
func matMul(a, b []float64, d int, ta bool) []float64 {
	out := make([]float64, d*d)
	for i := 0; i < d; i++ {
		for j := 0; j < d; j++ {
			var s float64
			for k := 0; k < d; k++ {
				av := a[i*d+k]
				if ta {
					av = a[k*d+i]
				}
				s += av * b[k*d+j]
			}
			out[i*d+j] = s
		}
	}
	return out
}

// suOf returns E[(x·TQ + y·TK)ᵀ(x·TQ + y·TK)] from M1, M2, X.
func suOf(m1, m2, x, tq, tk []float64, d int) []float64 {
	a := matMul(tq, matMul(m1, tq, d, false), d, true)
	b := matMul(tk, matMul(m2, tk, d, false), d, true)
	c := matMul(tq, matMul(x, tk, d, false), d, true)
	out := make([]float64, d*d)
	for i := 0; i < d; i++ {
		for j := 0; j < d; j++ {
			out[i*d+j] = a[i*d+j] + b[i*d+j] + c[i*d+j] + c[j*d+i]
		}
	}
	return out
}

func trace(a []float64, d int) float64 {
	var s float64
	for i := 0; i < d; i++ {
		s += a[i*d+i]
	}
	return s
}

// The fitted balance is exact (T_q·T_kᵀ = I), diagonalises the pair
// moment, balances the query and key moments (geometric mean) and
// minimises tr(S_u) against perturbations; the DERF kinds carry
// parameters.
func TestFitBalanceProperties(t *testing.T) {
	const d = 6
	rng := rand.New(rand.NewPCG(2, 3))
	for _, w := range []string{features.WeightUniform, features.WeightAttention} {
		mo, err := features.NewMoments(1, d, w == features.WeightAttention, w)
		if err != nil {
			t.Fatal(err)
		}
		for range 6 {
			q, k, bias := seqData(rng, 20, d)
			if err := mo.AddSequence(0, q, k, 20, bias, 0.4); err != nil {
				t.Fatal(err)
			}
		}
		norm := func(v []float64) []float64 {
			out := make([]float64, len(v))
			for i := range v {
				out[i] = v[i] / mo.Weight[0]
			}
			return out
		}
		m1, m2, x := norm(mo.XX), norm(mo.YY), norm(mo.XY)
		for _, kind := range []features.BalanceKind{features.BalanceGeoMean, features.BalanceSDERF, features.BalanceADERF} {
			t.Run(w+"/"+string(kind), func(t *testing.T) {
				f, err := features.FitBalance(mo, kind)
				if err != nil {
					t.Fatal(err)
				}
				tq, tk := make([]float64, d*d), make([]float64, d*d)
				for i := range tq {
					tq[i], tk[i] = float64(f.BalanceQ[i]), float64(f.BalanceK[i])
				}
				// T_q·T_kᵀ = I.
				id := matMul(tq, transposeFlat(tk, d), d, false)
				for i := 0; i < d; i++ {
					for j := 0; j < d; j++ {
						want := 0.0
						if i == j {
							want = 1
						}
						if math.Abs(id[i*d+j]-want) > 1e-5 {
							t.Fatalf("T_q·T_kᵀ[%d][%d] = %g", i, j, id[i*d+j])
						}
					}
				}
				su := suOf(m1, m2, x, tq, tk, d)
				scale := trace(su, d) / d
				for i := 0; i < d; i++ {
					for j := 0; j < d; j++ {
						if i != j && math.Abs(su[i*d+j]) > 1e-5*scale {
							t.Errorf("S_u[%d][%d] = %g: not diagonal", i, j, su[i*d+j])
						}
					}
					if math.Abs(su[i*d+i]-f.Rho[i]) > 1e-5*scale {
						t.Errorf("ρ_%d = %g, S_u diagonal %g", i, f.Rho[i], su[i*d+i])
					}
				}
				if kind == features.BalanceSDERF {
					for i := range tq {
						if tq[i] != tk[i] {
							t.Fatalf("sderf: T_q ≠ T_k")
						}
					}
				} else {
					// Balanced: T_qᵀ·M1·T_q = T_kᵀ·M2·T_k.
					a := matMul(tq, matMul(m1, tq, d, false), d, true)
					b := matMul(tk, matMul(m2, tk, d, false), d, true)
					for i := range a {
						if math.Abs(a[i]-b[i]) > 1e-4*scale {
							t.Fatalf("query and key moments differ: %g vs %g", a[i], b[i])
						}
					}
					// tr(S_u) is minimal: every perturbation T(I + εG)
					// (keys T⁻ᵀ(I + εG)⁻ᵀ) raises it.
					base := trace(su, d)
					for range 20 {
						g := make([]float64, d*d)
						for i := range g {
							g[i] = 0.02 * rng.NormFloat64()
							if i%(d+1) == 0 {
								g[i]++
							}
						}
						gi := transposeFlat(invertFlat(g, d), d)
						p := suOf(m1, m2, x, matMul(tq, g, d, false), matMul(tk, gi, d, false), d)
						if trace(p, d) < base-1e-6*base {
							t.Fatalf("perturbed trace %g < fitted %g", trace(p, d), base)
						}
					}
					if !(f.TraceAfter[0] <= f.TraceBefore[0]) {
						t.Errorf("trace %g → %g: the balance made it worse", f.TraceBefore[0], f.TraceAfter[0])
					}
				}
				// Whether the DERF parameters minimise the estimator's
				// variance is TestFitBalanceDERFMinimisesVariance's.
				if (kind == features.BalanceGeoMean) != (f.A == nil) {
					t.Errorf("%s: %d DERF parameters", kind, len(f.A))
				}
				t.Logf("Σρ %.4g → %.4g", f.TraceBefore[0], f.TraceAfter[0])
			})
		}
	}
}

func transposeFlat(a []float64, d int) []float64 {
	out := make([]float64, d*d)
	for i := 0; i < d; i++ {
		for j := 0; j < d; j++ {
			out[j*d+i] = a[i*d+j]
		}
	}
	return out
}

// invertFlat inverts the row-major n×n matrix a with gonum (an
// independent reference for the code under test).
func invertFlat(a []float64, n int) []float64 {
	var inv mat.Dense
	if err := inv.Inverse(mat.NewDense(n, n, append([]float64(nil), a...))); err != nil {
		panic(fmt.Sprintf("invertFlat: %v", err))
	}
	return append([]float64(nil), inv.RawMatrix().Data...)
}

func TestMomentsErrors(t *testing.T) {
	if _, err := features.NewMoments(2, 4, false, "median"); err == nil {
		t.Error("weighting median: no error")
	}
	m, _ := features.NewMoments(2, 4, false, features.WeightUniform)
	if err := m.AddSequence(2, make([]float64, 8), make([]float64, 8), 2, nil, 1); err == nil {
		t.Error("head out of range: no error")
	}
	if _, err := features.FitBalance(m, features.BalanceGeoMean); err == nil {
		t.Error("empty moments: no error")
	}
	if _, err := features.FitBalance(m, "cholesky"); err == nil {
		t.Error("kind cholesky: no error")
	}
	o, _ := features.NewMoments(2, 4, true, features.WeightUniform)
	if err := m.Merge(o); err == nil {
		t.Error("merging centred into uncentred: no error")
	}
}
