package features

import (
	"math"
	"strings"
	"testing"
)

func TestLaraNoise(t *testing.T) {
	a, err := LaraNoise(3, 2, 64, 4, 32, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	if s := a.Shape; len(s) != 3 || s[0] != 1 || s[1] != 256 || s[2] != 32 {
		t.Fatalf("shape %v, want [1 256 32]", s)
	}
	var sum, sq float64
	for _, x := range a.Floats() {
		sum += float64(x)
		sq += float64(x) * float64(x)
	}
	n := float64(len(a.Floats()))
	if mean, sd := sum/n, math.Sqrt(sq/n-(sum/n)*(sum/n)); math.Abs(mean) > 0.02 || math.Abs(sd-0.5) > 0.02 {
		t.Errorf("mean %.4f, sd %.4f, want N(0, 0.5²)", mean, sd)
	}
	b, _ := LaraNoise(3, 2, 64, 4, 32, 0.5)
	c, _ := LaraNoise(3, 3, 64, 4, 32, 0.5)
	d, _ := LaraNoise(4, 2, 64, 4, 32, 0.5)
	same := func(x, y []float32) bool {
		for i := range x {
			if x[i] != y[i] {
				return false
			}
		}
		return true
	}
	if !same(a.Floats(), b.Floats()) {
		t.Error("same arguments, different noise")
	}
	if same(a.Floats(), c.Floats()) || same(a.Floats(), d.Floats()) {
		t.Error("another layer or seed gave the same noise")
	}
	for _, bad := range []struct {
		c, s, d, layer int
		sigma          float64
	}{{0, 1, 4, 0, 1}, {2, 0, 4, 0, 1}, {2, 1, 0, 0, 1}, {2, 1, 4, -1, 1}, {2, 1, 4, 0, math.NaN()}, {2, 1, 4, 0, -1}, {1 << 16, 1 << 10, 4, 0, 1}} {
		if _, err := LaraNoise(1, bad.layer, bad.c, bad.s, bad.d, bad.sigma); err == nil || !strings.HasPrefix(err.Error(), "features: ") {
			t.Errorf("%+v: error %v", bad, err)
		}
	}
}
