package features_test

import (
	"math"
	"sort"
	"strings"
	"testing"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/linearize/linearize/features"
	"github.com/linearize/linearize/onnx"
)

func rowsOf(t *onnx.Tensor) [][]float64 {
	m, d := t.Shape[len(t.Shape)-2], t.Shape[len(t.Shape)-1]
	var rows [][]float64
	x := t.Floats()
	for i := 0; i < len(x)/d; i++ {
		r := make([]float64, d)
		for j := range r {
			r[j] = float64(x[i*d+j])
		}
		rows = append(rows, r)
	}
	_ = m
	return rows
}

func dot(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

func equalTensors(a, b *onnx.Tensor) bool {
	if len(a.Shape) != len(b.Shape) {
		return false
	}
	for i := range a.Shape {
		if a.Shape[i] != b.Shape[i] {
			return false
		}
	}
	x, y := a.Floats(), b.Floats()
	for i := range x {
		if math.Float32bits(x[i]) != math.Float32bits(y[i]) {
			return false
		}
	}
	return len(x) == len(y)
}

func TestOmegaDeterminism(t *testing.T) {
	for _, kind := range []features.Kind{features.Orthogonal, features.IID} {
		for _, norms := range []features.Norms{features.NormsChi, features.NormsSqrtD, features.NormsQMC} {
			opts := features.OmegaOptions{Kind: kind, Norms: norms, PerHead: true}
			a, err := features.Omega(42, 3, 2, 40, 16, opts)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := features.Omega(42, 3, 2, 40, 16, opts)
			if !equalTensors(a, b) {
				t.Errorf("%s/%s: same seed and layer give different ω", kind, norms)
			}
			for _, other := range []struct {
				seed  uint64
				layer int
			}{{43, 3}, {42, 4}} {
				c, _ := features.Omega(other.seed, other.layer, 2, 40, 16, opts)
				if equalTensors(a, c) {
					t.Errorf("%s/%s: seed %d layer %d gives the same ω as seed 42 layer 3", kind, norms, other.seed, other.layer)
				}
			}
			rows := rowsOf(a)
			if len(rows) != 80 || a.Shape[0] != 2 || a.Shape[1] != 40 || a.Shape[2] != 16 {
				t.Fatalf("%s/%s: shape %v", kind, norms, a.Shape)
			}
			// Heads get different draws.
			if dot(rows[0], rows[40]) == dot(rows[0], rows[0]) {
				t.Errorf("%s/%s: heads 0 and 1 share rows", kind, norms)
			}
		}
	}
	shared, _ := features.Omega(1, 0, 12, 8, 4, features.OmegaOptions{})
	if shared.Shape[0] != 1 {
		t.Errorf("shared ω has shape %v, want [1 8 4]", shared.Shape)
	}
}

// Rows inside one orthogonal block are mutually orthogonal; rows of
// different blocks are not in general.
func TestOmegaOrthogonalBlocks(t *testing.T) {
	const m, d = 40, 16 // two full blocks and a partial block of 8
	for _, norms := range []features.Norms{features.NormsChi, features.NormsSqrtD, features.NormsQMC} {
		om, err := features.Omega(7, 1, 1, m, d, features.OmegaOptions{Kind: features.Orthogonal, Norms: norms})
		if err != nil {
			t.Fatal(err)
		}
		rows := rowsOf(om)
		var worstIn, worstAcross float64
		for i := 0; i < m; i++ {
			for j := i + 1; j < m; j++ {
				c := math.Abs(dot(rows[i], rows[j])) / math.Sqrt(dot(rows[i], rows[i])*dot(rows[j], rows[j]))
				if i/d == j/d {
					worstIn = math.Max(worstIn, c)
				} else {
					worstAcross = math.Max(worstAcross, c)
				}
			}
		}
		if worstIn > 1e-5 {
			t.Errorf("%s: rows in one block have |cos| up to %.3g", norms, worstIn)
		}
		if worstAcross < 0.1 {
			t.Errorf("%s: rows of different blocks look orthogonal too (max |cos| %.3g)", norms, worstAcross)
		}
	}
}

func TestOmegaNorms(t *testing.T) {
	const m, d = 300, 32
	for _, kind := range []features.Kind{features.Orthogonal, features.IID} {
		// sqrt-d: every norm is exactly √d (to float32 rounding).
		om, _ := features.Omega(9, 0, 1, m, d, features.OmegaOptions{Kind: kind, Norms: features.NormsSqrtD})
		for i, r := range rowsOf(om) {
			if n := math.Sqrt(dot(r, r)); math.Abs(n-math.Sqrt(d)) > 1e-5 {
				t.Fatalf("%s sqrt-d: row %d norm %v, want %v", kind, i, n, math.Sqrt(d))
			}
		}
		// qmc: sorted squared norms sit at the χ²_d CDF levels i/(m+1).
		om, _ = features.Omega(9, 0, 1, m, d, features.OmegaOptions{Kind: kind, Norms: features.NormsQMC})
		var sq []float64
		for _, r := range rowsOf(om) {
			sq = append(sq, dot(r, r))
		}
		if sort.Float64sAreSorted(sq) {
			t.Errorf("%s qmc: norms are not permuted", kind)
		}
		sort.Float64s(sq)
		c := distuv.ChiSquared{K: d}
		for i, s := range sq {
			if p := c.CDF(s); math.Abs(p-float64(i+1)/(m+1)) > 1e-4 {
				t.Fatalf("%s qmc: sorted row %d has CDF %.6f, want %.6f", kind, i, p, float64(i+1)/(m+1))
			}
		}
		// chi: squared norms are χ²_d samples: mean d, variance 2d.
		om, _ = features.Omega(9, 0, 1, 4096, d, features.OmegaOptions{Kind: kind, Norms: features.NormsChi})
		var mean, v float64
		rows := rowsOf(om)
		for _, r := range rows {
			mean += dot(r, r)
		}
		mean /= float64(len(rows))
		for _, r := range rows {
			v += (dot(r, r) - mean) * (dot(r, r) - mean)
		}
		v /= float64(len(rows) - 1)
		// Standard errors: √(2d/4096) ≈ 0.125 for the mean, ≈ 6% for v.
		if math.Abs(mean-d) > 0.6 || math.Abs(v-2*d) > 0.3*2*d {
			t.Errorf("%s chi: squared norms mean %.3f var %.3f, want %d and %d", kind, mean, v, d, 2*d)
		}
	}
}

func TestOmegaBadOptions(t *testing.T) {
	for _, c := range []struct {
		m, d int
		opts features.OmegaOptions
	}{
		{8, 4, features.OmegaOptions{Kind: "gaussian"}},
		{8, 4, features.OmegaOptions{Norms: "unit"}},
		{0, 4, features.OmegaOptions{}},
		{8, 0, features.OmegaOptions{}},
	} {
		if _, err := features.Omega(1, 0, 1, c.m, c.d, c.opts); err == nil || !strings.HasPrefix(err.Error(), "features: ") {
			t.Errorf("%+v: error %v", c, err)
		}
	}
}

func TestProjection(t *testing.T) {
	const heads, k, n = 3, 16, 64
	for _, c := range []struct {
		share   features.Share
		heads   int
		sameEF  bool
		byLayer bool
	}{
		{features.ShareNone, heads, false, true},
		{features.ShareHeadwise, 1, false, true},
		{"", 1, false, true},
		{features.ShareKV, 1, true, true},
		{features.ShareLayerwise, 1, true, false},
	} {
		opts := features.ProjOptions{Share: c.share}
		e, f, err := features.Projection(5, 2, heads, k, n, opts)
		if err != nil {
			t.Fatal(err)
		}
		if e.Shape[0] != c.heads || e.Shape[1] != k || e.Shape[2] != n || !equalTensors(e, f) && c.sameEF {
			t.Errorf("%q: E %v, F %v", c.share, e.Shape, f.Shape)
		}
		if c.sameEF != (e == f) {
			t.Errorf("%q: F is E = %v, want %v", c.share, e == f, c.sameEF)
		}
		e2, _, _ := features.Projection(5, 2, heads, k, n, opts)
		if !equalTensors(e, e2) {
			t.Errorf("%q: not deterministic", c.share)
		}
		e3, _, _ := features.Projection(5, 3, heads, k, n, opts)
		if equalTensors(e, e3) == c.byLayer {
			t.Errorf("%q: layer 3 equal to layer 2 = %v", c.share, !c.byLayer)
		}
		e4, _, _ := features.Projection(6, 2, heads, k, n, opts)
		if equalTensors(e, e4) {
			t.Errorf("%q: seed 6 equals seed 5", c.share)
		}
		// Entries are N(0, 1/k): variance k·E[x²] ≈ 1.
		var s float64
		for _, x := range e.Floats() {
			s += float64(x) * float64(x)
		}
		if v := s / float64(e.Len()) * k; math.Abs(v-1) > 0.15 {
			t.Errorf("%q: k·var = %.3f, want 1", c.share, v)
		}
	}
	if _, _, err := features.Projection(1, 0, 1, 4, 8, features.ProjOptions{Share: "all"}); err == nil {
		t.Error("bad sharing mode: no error")
	}
}
