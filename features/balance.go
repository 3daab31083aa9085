package features

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/mat"

	"github.com/linearize/linearize/ops"
)

// This file fits the frozen parameters of the PerformerAttention variants
// (ops.PerformerAttention: balance_q, balance_k, derf_a) from calibration
// statistics of a layer's queries and keys.
//
// # What is minimised
//
// A positive random-feature estimator of exp(x·y) with features
// f(ω, x) = D·exp(Σ_c a_c ω_c² + Σ_c √(1−4a_c) ω_c x_c − ‖x‖²/2) (FAVOR+ is
// a = 0, FAVOR++ a_c = A, FAVOR#'s DERF any a) has the log second moment
//
//	log E[(f(ω,x) f(ω,y))²] = Σ_c g(a_c, z_c²) − ‖x‖² − ‖y‖²,  z = x + y,
//	g(a, ρ) = log(1−4a) − ½ log(1−8a) + 2(1−4a)ρ/(1−8a),
//
// and its relative second moment is that minus 2x·y. Averaged over the
// query–key pairs (i, j) the estimator serves, weighted by p(i, j),
// and since ‖x‖² + ‖y‖² + 2x·y = ‖z‖², this is
//
//	L = Σ_c [g(a_c, ρ_c) − ρ_c] + const,   ρ_c = E_p[z_c²].
//
// The linear balance x → x·T, y → y·T⁻ᵀ leaves every x·y (and the exact
// attention) unchanged but changes the ρ_c. Write T = S·R with S
// symmetric positive definite and R orthogonal, P = S², M1 = E_p[xᵀx],
// M2 = E_p[yᵀy], X = E_p[xᵀy] (row vectors). Then
//
//   - FAVOR+ (a = 0): L = Σ_c ρ_c = tr(S_u) = tr(P·M1) + tr(P⁻¹·M2) + 2 tr X,
//     which is exactly minimised by the matrix geometric mean
//     P = M1⁻¹ # M2 = M1^{-1/2} (M1^{1/2} M2 M1^{1/2})^{1/2} M1^{-1/2}, the
//     unique solution of P·M1·P = M2: after it, queries and keys have the
//     same second moment S·M1·S = S⁻¹·M2·S⁻¹. R does not matter.
//   - DERF: h(ρ) = min_a g(a, ρ) − ρ is a minimum of affine functions of ρ,
//     so concave; for a fixed S the ρ_c are the diagonal of R ᵀ S_u0 R, which
//     the eigenvalues majorise (Schur–Horn), so Σ_c h(ρ_c) is smallest when R
//     diagonalises S_u0 = S·M1·S + S⁻¹·M2·S⁻¹ + C + Cᵀ (C = S·X·S⁻¹), and then
//     a_c = ops.OptimalPositiveA(λ_c) per eigenvalue λ_c. The symmetric
//     form (SDERF, one map for queries and keys) fixes S = I; the
//     asymmetric form (ADERF) uses the geometric-mean S, which minimises
//     Σ ρ_c (the exact optimum of S for a = 0; for a ≠ 0 a closed-form
//     choice rather than the joint optimum).
//
// # Which pairs
//
// p is either uniform over the valid pairs of each calibration sequence
// ("uniform") or the exact attention weights, p(i, j) ∝ a_ij
// ("attention"): the estimator's error on pairs that carry no attention
// weight does not matter, and pretrained attention concentrates on few
// keys, so the second weighting puts the fit where the softmax needs it.
// Sequences count by their number of valid queries in both.

// Weightings of the calibration pairs.
const (
	WeightAttention = "attention"
	WeightUniform   = "uniform"
)

// BalanceKind is a kind of fitted balance (FitBalance).
type BalanceKind string

// Kinds of fitted balance.
const (
	// BalanceGeoMean: T = P^{1/2}·R (the geometric-mean balance), for
	// favor+ and favor++ features; no DERF parameters.
	BalanceGeoMean BalanceKind = "balance"
	// BalanceSDERF: T = R (orthogonal) and per-coordinate a.
	BalanceSDERF = BalanceKind(ops.FeaturesSDERF)
	// BalanceADERF: T = P^{1/2}·R and per-coordinate a.
	BalanceADERF = BalanceKind(ops.FeaturesADERF)
)

// Moments accumulates per-head second moments of one attention layer's
// scaled queries x = √scale·q and keys y = √scale·k (minus their means over
// the sequence's valid tokens when Centered) under a pair weighting.
type Moments struct {
	Heads, Dim int
	Centered   bool
	Weighting  string
	// Weight is the total weight added per head: one per valid query.
	Weight []float64
	// XX, YY, XY are the weighted sums Σ p·xᵀx, Σ p·yᵀy, Σ p·xᵀy, each
	// [Heads][Dim][Dim] row-major (divide by Weight for the moments).
	XX, YY, XY []float64
}

// NewMoments returns empty moments.
func NewMoments(heads, dim int, centered bool, weighting string) (*Moments, error) {
	if heads < 1 || dim < 1 || heads*dim*dim > 1<<26 {
		return nil, fmt.Errorf("features: moments of %d heads × %d dims", heads, dim)
	}
	if weighting != WeightAttention && weighting != WeightUniform {
		return nil, fmt.Errorf("features: moment weighting %q, want %q or %q", weighting, WeightAttention, WeightUniform)
	}
	n := heads * dim * dim
	return &Moments{Heads: heads, Dim: dim, Centered: centered, Weighting: weighting, Weight: make([]float64, heads),
		XX: make([]float64, n), YY: make([]float64, n), XY: make([]float64, n)}, nil
}

// AddSequence adds one head of one sequence: q and k are the [n, Dim]
// unscaled query and key rows of its n valid tokens (self-attention, so
// query i and key i are the same token), bias the keys' additive bias
// (nil: zero), scale the score scale. Attention weights are
// softmax_j(scale·q_i·k_j + bias_j), as the original model computes them.
func (m *Moments) AddSequence(head int, q, k []float64, n int, bias []float64, scale float64) error {
	d := m.Dim
	if head < 0 || head >= m.Heads || n < 1 || len(q) != n*d || len(k) != n*d || (bias != nil && len(bias) != n) || !(scale > 0) {
		return fmt.Errorf("features: moments: head %d of %d, %d tokens, %d query and %d key values (want %d), %d biases, scale %g",
			head, m.Heads, n, len(q), len(k), n*d, len(bias), scale)
	}
	sd := math.Sqrt(scale)
	x, y := make([]float64, n*d), make([]float64, n*d)
	xm, ym := make([]float64, d), make([]float64, d)
	for i := 0; i < n*d; i++ {
		x[i], y[i] = sd*q[i], sd*k[i]
		xm[i%d] += x[i] / float64(n)
		ym[i%d] += y[i] / float64(n)
	}
	if m.Centered {
		for i := range x {
			x[i] -= xm[i%d]
			y[i] -= ym[i%d]
		}
		clear(xm)
		clear(ym)
	}
	o := head * d * d
	xx, yy, xy := m.XX[o:o+d*d], m.YY[o:o+d*d], m.XY[o:o+d*d]
	dense := func(v []float64, r int) blas64.General { return blas64.General{Rows: r, Cols: d, Stride: d, Data: v} }
	acc := func(v []float64) blas64.General { return blas64.General{Rows: d, Cols: d, Stride: d, Data: v} }
	// Σ x_iᵀx_i over the queries: every valid query has weight 1.
	blas64.Gemm(blas.Trans, blas.NoTrans, 1, dense(x, n), dense(x, n), 1, acc(xx))
	switch m.Weighting {
	case WeightUniform:
		// Uniform pairs: each of the n² pairs weighs 1/n.
		blas64.Gemm(blas.Trans, blas.NoTrans, 1, dense(y, n), dense(y, n), 1, acc(yy))
		for a := 0; a < d; a++ {
			for b := 0; b < d; b++ {
				xy[a*d+b] += float64(n) * xm[a] * ym[b]
			}
		}
	case WeightAttention:
		// a_ij from the original scores; column sums weigh the keys, and
		// Σ_j a_ij y_j pairs each query with its attended keys. The row
		// softmax is inline, as in finetune's Linformer fit and ops' tests:
		// each folds its own terms (here the bias and column sums) into it.
		s := make([]float64, n*n)
		blas64.Gemm(blas.NoTrans, blas.Trans, scale, dense(q, n), dense(k, n), 0, blas64.General{Rows: n, Cols: n, Stride: n, Data: s})
		col := make([]float64, n)
		for i := 0; i < n; i++ {
			row := s[i*n : (i+1)*n]
			top := math.Inf(-1)
			for j := range row {
				if bias != nil {
					row[j] += bias[j]
				}
				top = math.Max(top, row[j])
			}
			var z float64
			for j := range row {
				row[j] = math.Exp(row[j] - top)
				z += row[j]
			}
			for j := range row {
				row[j] /= z
				col[j] += row[j]
			}
		}
		ay := make([]float64, n*d)
		blas64.Gemm(blas.NoTrans, blas.NoTrans, 1, blas64.General{Rows: n, Cols: n, Stride: n, Data: s}, dense(y, n), 0, dense(ay, n))
		blas64.Gemm(blas.Trans, blas.NoTrans, 1, dense(x, n), dense(ay, n), 1, acc(xy))
		wy := make([]float64, n*d)
		for j := 0; j < n; j++ {
			for c := 0; c < d; c++ {
				wy[j*d+c] = col[j] * y[j*d+c]
			}
		}
		blas64.Gemm(blas.Trans, blas.NoTrans, 1, dense(wy, n), dense(y, n), 1, acc(yy))
	}
	m.Weight[head] += float64(n)
	return nil
}

// Merge adds o's sums to m (same shape and settings).
func (m *Moments) Merge(o *Moments) error {
	if o.Heads != m.Heads || o.Dim != m.Dim || o.Centered != m.Centered || o.Weighting != m.Weighting {
		return fmt.Errorf("features: cannot merge moments of %d×%d (centred %v, %s) into %d×%d (centred %v, %s)",
			o.Heads, o.Dim, o.Centered, o.Weighting, m.Heads, m.Dim, m.Centered, m.Weighting)
	}
	for h := range m.Weight {
		m.Weight[h] += o.Weight[h]
	}
	for i := range m.XX {
		m.XX[i] += o.XX[i]
		m.YY[i] += o.YY[i]
		m.XY[i] += o.XY[i]
	}
	return nil
}

// Fit holds the fitted balance of one layer, in the shapes
// ops.PerformerAttention takes.
type Fit struct {
	Heads, Dim int
	// BalanceQ = T and BalanceK = T⁻ᵀ, [Heads, Dim, Dim] row-major (row
	// vectors: x·T), rounded from float64.
	BalanceQ, BalanceK []float32
	// A holds the DERF parameters per head and coordinate [Heads, 1, Dim]
	// (nil for BalanceGeoMean).
	A []float32
	// Rho is ρ_c = E_p[z_c²] per head and coordinate in the fitted basis;
	// TraceBefore and TraceAfter are Σ_c ρ_c per head without and with the
	// balance (the exponent FAVOR+'s variance grows with).
	Rho                     []float64
	TraceBefore, TraceAfter []float64
}

// FitBalance fits the balance of kind (BalanceGeoMean, BalanceSDERF or
// BalanceADERF) from the moments, per head (see the file comment).
func FitBalance(m *Moments, kind BalanceKind) (*Fit, error) {
	if m == nil {
		return nil, fmt.Errorf("features: balance: no moments")
	}
	if kind != BalanceGeoMean && kind != BalanceSDERF && kind != BalanceADERF {
		return nil, fmt.Errorf("features: balance kind %q, want %q, %q or %q", kind, BalanceGeoMean, BalanceSDERF, BalanceADERF)
	}
	d := m.Dim
	f := &Fit{Heads: m.Heads, Dim: d, BalanceQ: make([]float32, 0, m.Heads*d*d), BalanceK: make([]float32, 0, m.Heads*d*d)}
	for h := 0; h < m.Heads; h++ {
		o := h * d * d
		if !(m.Weight[h] > 0) {
			return nil, fmt.Errorf("features: balance head %d: no calibration tokens", h)
		}
		get := func(v []float64) *mat.Dense {
			out := mat.NewDense(d, d, nil)
			for i := 0; i < d*d; i++ {
				out.Set(i/d, i%d, v[o+i]/m.Weight[h])
			}
			return out
		}
		m1, m2, x := get(m.XX), get(m.YY), get(m.XY)
		sym(m1)
		sym(m2)
		ridge(m1)
		ridge(m2)
		s, sInv := eye(d), eye(d)
		if kind != BalanceSDERF {
			var err error
			if s, sInv, err = geoMeanRoot(m1, m2); err != nil {
				return nil, fmt.Errorf("features: balance head %d: %w", h, err)
			}
		}
		su0 := pairMoment(s, sInv, m1, m2, x)
		var es mat.EigenSym
		if !es.Factorize(mat.NewSymDense(d, su0.RawMatrix().Data), true) {
			return nil, fmt.Errorf("features: balance head %d: eigendecomposition failed", h)
		}
		var vecs mat.Dense
		es.VectorsTo(&vecs)
		lam := es.Values(nil)
		var tq, tk mat.Dense
		tq.Mul(s, &vecs)
		tk.Mul(sInv, &vecs)
		for r := 0; r < d; r++ {
			for c := 0; c < d; c++ {
				f.BalanceQ = append(f.BalanceQ, float32(tq.At(r, c)))
				f.BalanceK = append(f.BalanceK, float32(tk.At(r, c)))
			}
		}
		before := pairMoment(eye(d), eye(d), m1, m2, x)
		f.TraceBefore = append(f.TraceBefore, mat.Trace(before))
		f.TraceAfter = append(f.TraceAfter, mat.Trace(su0))
		for _, l := range lam {
			f.Rho = append(f.Rho, l)
			if kind != BalanceGeoMean {
				f.A = append(f.A, float32(ops.OptimalPositiveA(l)))
			}
		}
	}
	return f, nil
}

// pairMoment returns S_u = E_p[(x̂+ŷ)ᵀ(x̂+ŷ)] for x̂ = x·S, ŷ = y·S⁻¹ (S, S⁻¹
// symmetric): S·M1·S + S⁻¹·M2·S⁻¹ + C + Cᵀ with C = S·X·S⁻¹.
func pairMoment(s, sInv, m1, m2, x *mat.Dense) *mat.Dense {
	var a, b, c, t mat.Dense
	t.Mul(s, m1)
	a.Mul(&t, s)
	t.Mul(sInv, m2)
	b.Mul(&t, sInv)
	t.Mul(s, x)
	c.Mul(&t, sInv)
	var out mat.Dense
	out.Add(&a, &b)
	out.Add(&out, &c)
	out.Add(&out, c.T())
	sym(&out)
	return &out
}

// geoMeanRoot returns S = P^{1/2} and S⁻¹ for the geometric mean
// P = M1^{-1/2}(M1^{1/2} M2 M1^{1/2})^{1/2} M1^{-1/2} (P·M1·P = M2).
func geoMeanRoot(m1, m2 *mat.Dense) (s, sInv *mat.Dense, err error) {
	r1, r1i, err := sqrtSym(m1, 1)
	if err != nil {
		return nil, nil, err
	}
	var t, inner mat.Dense
	t.Mul(r1, m2)
	inner.Mul(&t, r1)
	sym(&inner)
	g, _, err := sqrtSym(&inner, 1)
	if err != nil {
		return nil, nil, err
	}
	var p mat.Dense
	t.Mul(r1i, g)
	p.Mul(&t, r1i)
	sym(&p)
	return sqrtSym(&p, 1)
}

// sqrtSym returns A^{p/2} and A^{−p/2} of a symmetric positive definite A.
func sqrtSym(a *mat.Dense, p float64) (root, inv *mat.Dense, err error) {
	n, _ := a.Dims()
	var es mat.EigenSym
	if !es.Factorize(mat.NewSymDense(n, mat.DenseCopyOf(a).RawMatrix().Data), true) {
		return nil, nil, fmt.Errorf("eigendecomposition failed")
	}
	var v mat.Dense
	es.VectorsTo(&v)
	lam := es.Values(nil)
	root, inv = mat.NewDense(n, n, nil), mat.NewDense(n, n, nil)
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			var s, si float64
			for c, l := range lam {
				if !(l > 0) {
					return nil, nil, fmt.Errorf("matrix is not positive definite (eigenvalue %g)", l)
				}
				w := v.At(i, c) * v.At(j, c)
				s += w * math.Pow(l, p/2)
				si += w * math.Pow(l, -p/2)
			}
			root.Set(i, j, s)
			inv.Set(i, j, si)
		}
	}
	return root, inv, nil
}

// ridge adds 1e-6 of the mean eigenvalue to the diagonal, so that a
// calibration set with fewer distinct tokens than dimensions still gives
// a positive definite matrix.
func ridge(a *mat.Dense) {
	n, _ := a.Dims()
	t := mat.Trace(a) / float64(n)
	if !(t > 0) {
		t = 1
	}
	for i := 0; i < n; i++ {
		a.Set(i, i, a.At(i, i)+1e-6*t)
	}
}

// sym replaces a by (a + aᵀ)/2.
func sym(a *mat.Dense) {
	n, _ := a.Dims()
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			v := (a.At(i, j) + a.At(j, i)) / 2
			a.Set(i, j, v)
			a.Set(j, i, v)
		}
	}
}

func eye(n int) *mat.Dense {
	e := mat.NewDense(n, n, nil)
	for i := 0; i < n; i++ {
		e.Set(i, i, 1)
	}
	return e
}
