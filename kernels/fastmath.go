package kernels

import (
	"math"
)

// A fast float32 exp for the hot kernels (Softmax, Exp, Sigmoid). It
// evaluates in float64 and rounds once, so it is within one float32 ulp of
// the correctly rounded result.

const (
	log2e = 1.4426950408889634
	ln2   = 0.6931471805599453
)

// exp32 returns e^x: x = n·ln2 + r with |r| ≤ ln2/2, e^r by its Taylor
// series to degree 8 (relative error < 1e-9), scaled by 2^n.
func exp32(x float32) float32 {
	switch {
	case x != x:
		return x
	case x > 88.72284:
		return float32(math.Inf(1))
	case x < -103.97208:
		return 0
	}
	xf := float64(x)
	n := math.Floor(xf*log2e + 0.5)
	r := xf - n*ln2
	p := 1 + r*(1+r*(1.0/2+r*(1.0/6+r*(1.0/24+r*(1.0/120+r*(1.0/720+r*(1.0/5040+r*(1.0/40320))))))))
	return float32(p * math.Float64frombits(uint64(int64(n)+1023)<<52))
}

func sigmoid32(x float32) float32 {
	if x >= 0 {
		return 1 / (1 + exp32(-x))
	}
	e := exp32(x)
	return e / (1 + e)
}
