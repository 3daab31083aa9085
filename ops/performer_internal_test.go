package ops

import (
	"math"
	"testing"
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
