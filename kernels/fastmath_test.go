package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// ulpDist is the distance in float32 ulps between got and the float64
// value want rounded to float32.
func ulpDist(got float32, want float64) int64 {
	w := float32(want)
	a, b := int64(math.Float32bits(got)), int64(math.Float32bits(w))
	if (a < 0x80000000) != (b < 0x80000000) {
		return math.MaxInt32
	}
	if a > b {
		return a - b
	}
	return b - a
}

func TestExp32WithinOneUlp(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	var xs []float32
	for x := float32(-110); x <= 90; x += 0.001953125 {
		xs = append(xs, x)
	}
	for range 100000 {
		xs = append(xs, float32(rng.NormFloat64()*3), float32(rng.NormFloat64()*1e-4), float32((rng.Float64()-0.5)*200))
	}
	xs = append(xs, 0, float32(math.Copysign(0, -1)), 1e-30, -1e-30, 0.25, -0.25, 4, -4, 3.9999998, 88.72283, -87.33654, -103.97, -103.98, 88.73)
	var worstExp int64
	for _, x := range xs {
		if d := ulpDist(exp32(x), math.Exp(float64(x))); d > worstExp {
			worstExp = d
			if d > 1 {
				t.Errorf("exp32(%g) = %g, want %g (%d ulp)", x, exp32(x), math.Exp(float64(x)), d)
			}
		}
	}
	for _, x := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
		if e, w := exp32(x), math.Exp(float64(x)); !(float64(e) == w || (e != e && w != w)) {
			t.Errorf("exp32(%g) = %g, want %g", x, e, w)
		}
	}
	t.Logf("worst: exp32 %d ulp over %d points", worstExp, len(xs))
}
