package finetune

import "math"

// This file holds the optimiser: Adam over float64 parameter slices.

// adam is the Adam optimiser over a list of parameter slices (nil
// entries are frozen).
type adam struct {
	params [][]float64
	m, v   [][]float64
	lr     float64
	t      int
}

func newAdam(params [][]float64, lr float64) *adam {
	a := &adam{params: params, lr: lr}
	for _, p := range params {
		a.m = append(a.m, make([]float64, len(p)))
		a.v = append(a.v, make([]float64, len(p)))
	}
	return a
}

func (a *adam) step(grads [][]float64) {
	const b1, b2, eps = 0.9, 0.999, 1e-8
	a.t++
	c1, c2 := 1-math.Pow(b1, float64(a.t)), 1-math.Pow(b2, float64(a.t))
	for k, x := range a.params {
		g, m, v := grads[k], a.m[k], a.v[k]
		for i := range x {
			m[i] = b1*m[i] + (1-b1)*g[i]
			v[i] = b2*v[i] + (1-b2)*g[i]*g[i]
			x[i] -= a.lr * (m[i] / c1) / (math.Sqrt(v[i]/c2) + eps)
		}
	}
}
