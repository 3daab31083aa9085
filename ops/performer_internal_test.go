package ops

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/linearize/linearize/onnx"
	"gonum.org/v1/gonum/mat"
)

func TestExpNeg(t *testing.T) {
	var worst float64
	for i := 0; i <= 2000000; i++ {
		x := -87 * float64(i) / 2000000
		got := float64(expNeg(float32(x)))
		want := math.Exp(float64(float32(x)))
		worst = math.Max(worst, math.Abs(got-want)/want)
	}
	if worst > 3e-7 {
		t.Errorf("max relative error %.3g > 3e-7", worst)
	}
	for _, x := range []float32{-87.5, -1e4, float32(math.Inf(-1))} {
		if v := expNeg(x); v != 0 {
			t.Errorf("expNeg(%g) = %g, want 0", x, v)
		}
	}
	if v := expNeg(0); v != 1 {
		t.Errorf("expNeg(0) = %g, want 1", v)
	}
	t.Logf("max relative error %.3g", worst)
}

// The kernel's own (float32) transformations reproduce exact softmax
// attention: softmax_j(x_i·y_j + kb_j) = softmax_j(scale·q_i·k_j + b_j).
func TestKernelTransformReproducesAttention(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	const sq, d = 10, 6
	scale := float32(0.35)
	for _, center := range []bool{false, true} {
		for _, balance := range []bool{false, true} {
			qs, ks := make([]float32, sq*d), make([]float32, sq*d)
			for i := range qs {
				qs[i] = float32(2 + rng.NormFloat64())
				ks[i] = float32(-1 + rng.NormFloat64())
			}
			bias := make([]float32, sq)
			for j := range bias {
				bias[j] = float32(rng.NormFloat64())
			}
			bias[sq-1], bias[sq-2] = -1e4, float32(math.Inf(-1))
			mask, err := newKeyMask(PerformerOp, onnx.NewFloat([]int{1, 1, 1, sq}, bias), 1, sq)
			if err != nil {
				t.Fatal(err)
			}
			v := &variant{center: center, features: FeaturesFavorPlus}
			if balance {
				// T = I + 0.2·G and its inverse transpose by
				// Gauss–Jordan in float64.
				tm := make([]float64, d*d)
				for i := range tm {
					tm[i] = 0.2 * rng.NormFloat64()
					if i%(d+1) == 0 {
						tm[i]++
					}
				}
				inv := invertFlat(tm, d)
				v.tq, v.tk, v.ht = make([]float32, d*d), make([]float32, d*d), 1
				for r := 0; r < d; r++ {
					for c := 0; c < d; c++ {
						v.tq[r*d+c] = float32(tm[r*d+c])
						v.tk[r*d+c] = float32(inv[c*d+r])
					}
				}
			}
			tr := v.transform(qs, ks, 0, 0, sq, sq, d, scale, mask)
			var worst float64
			for i := 0; i < sq-2; i++ {
				p0, p1 := make([]float64, sq), make([]float64, sq)
				var z0, z1 float64
				for j := 0; j < sq-2; j++ {
					var s0, s1 float64
					for c := 0; c < d; c++ {
						s0 += float64(qs[i*d+c]) * float64(ks[j*d+c])
						s1 += float64(tr.x[i*d+c]) * float64(tr.y[j*d+c])
					}
					p0[j] = math.Exp(float64(scale)*s0 + float64(bias[j]))
					p1[j] = math.Exp(s1 + tr.kb[j])
					z0 += p0[j]
					z1 += p1[j]
				}
				for j := range p0 {
					worst = math.Max(worst, math.Abs(p0[j]/z0-p1[j]/z1))
				}
			}
			if worst > 1e-5 {
				t.Errorf("center=%v balance=%v: attention differs by %.3g", center, balance, worst)
			}
			if tr.ok[sq-1] || tr.ok[sq-2] || tr.nk != sq-2 {
				t.Errorf("padded keys counted as valid")
			}
		}
	}
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
