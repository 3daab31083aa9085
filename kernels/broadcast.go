package kernels

import (
	"fmt"
	"slices"

	"github.com/linearize/linearize/onnx"
)

// broadcastShapes returns the numpy broadcast of the given shapes.
// internal/graphfacts/broadcast.go has the int64 form for static shapes.
func broadcastShapes(shapes ...[]int) ([]int, error) {
	r := 0
	for _, s := range shapes {
		r = max(r, len(s))
	}
	out := make([]int, r)
	for i := range out {
		out[i] = 1
	}
	for _, s := range shapes {
		off := r - len(s)
		for i, d := range s {
			o := out[off+i]
			switch {
			case d == o || d == 1:
			case o == 1:
				out[off+i] = d
			default:
				return nil, fmt.Errorf("shapes %v are not broadcast-compatible", shapes)
			}
		}
	}
	return out, nil
}

// bstrides returns the strides of an input of shape s read as the broadcast
// shape out: 0 along broadcast dimensions.
func bstrides(s, out []int) []int {
	st := make([]int, len(out))
	off := len(out) - len(s)
	acc := 1
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] != 1 {
			st[off+i] = acc
		}
		acc *= s[i]
	}
	return st
}

// plan2 is a broadcast iteration over two inputs: the output is walked in
// runs of Inner elements along which a and b advance by SA and SB (0 or 1).
type plan2 struct {
	Out        []int // output shape
	N          int   // output elements
	shape      []int // collapsed outer dims
	sa, sb     []int // collapsed outer strides
	Inner      int
	SA, SB     int
	aLen, bLen int
}

func makePlan2(as, bs []int) (*plan2, error) {
	out, err := broadcastShapes(as, bs)
	if err != nil {
		return nil, err
	}
	if n := onnx.NumElements(out); n < 0 || n > MaxElements {
		return nil, fmt.Errorf("broadcast shape %v has more than %d elements", out, MaxElements)
	}
	p := &plan2{Out: out, N: prod(out), aLen: prod(as), bLen: prod(bs)}
	sa, sb := bstrides(as, out), bstrides(bs, out)
	// collapse: drop 1-dims, merge dims whose strides chain in both inputs.
	var shape, ca, cb []int
	for i, d := range out {
		if d == 1 {
			continue
		}
		n := len(shape)
		if n > 0 && ca[n-1] == sa[i]*d && cb[n-1] == sb[i]*d {
			shape[n-1] *= d
			ca[n-1], cb[n-1] = sa[i], sb[i]
			continue
		}
		shape = append(shape, d)
		ca = append(ca, sa[i])
		cb = append(cb, sb[i])
	}
	if len(shape) == 0 {
		p.Inner, p.SA, p.SB = 1, 0, 0
		return p, nil
	}
	last := len(shape) - 1
	p.Inner, p.SA, p.SB = shape[last], ca[last], cb[last]
	if p.SA > 1 || p.SB > 1 { // inner dim not contiguous in an input: iterate it as outer
		p.shape, p.sa, p.sb = shape, ca, cb
		p.Inner, p.SA, p.SB = 1, 0, 0
		return p, nil
	}
	p.shape, p.sa, p.sb = shape[:last], ca[:last], cb[:last]
	return p, nil
}

// runs calls fn for every run: output offset, a offset, b offset.
func (p *plan2) runs(fn func(o, a, b int)) {
	p.runRange(0, p.N/max(p.Inner, 1), fn)
}

// runRange calls fn for runs lo..hi-1.
func (p *plan2) runRange(lo, hi int, fn func(o, a, b int)) {
	if p.N == 0 || lo >= hi {
		return
	}
	r := len(p.shape)
	idx := make([]int, r)
	ao, bo := 0, 0
	for k, rest := r-1, lo; k >= 0; k-- {
		idx[k] = rest % p.shape[k]
		rest /= p.shape[k]
		ao += idx[k] * p.sa[k]
		bo += idx[k] * p.sb[k]
	}
	for o := lo * p.Inner; o < hi*p.Inner; o += p.Inner {
		fn(o, ao, bo)
		ao, bo, _ = advance(idx, p.shape, p.sa, p.sb, ao, bo)
	}
}

// advance steps the index idx (of len(idx) ≤ len(shape) axes, the last
// the fastest) to the next one in shape and moves the offsets a and b by
// their strides sa and sb; more is false when it wrapped around past the
// last index (idx all 0 again).
func advance(idx, shape, sa, sb []int, a, b int) (na, nb int, more bool) {
	for k := len(idx) - 1; k >= 0; k-- {
		idx[k]++
		a += sa[k]
		b += sb[k]
		if idx[k] < shape[k] {
			return a, b, true
		}
		a -= sa[k] * shape[k]
		b -= sb[k] * shape[k]
		idx[k] = 0
	}
	return a, b, false
}

// vec2 computes one run: dst[i] = f(a[i*sa], b[i*sb]) for i < len(dst).
type vec2[T, R any] func(dst []R, a []T, sa int, b []T, sb int)

// apply2 runs f over the broadcast of a and b.
func apply2[T, R any](p *plan2, a, b []T, f vec2[T, R]) []R {
	return apply2p(p, a, b, f, 1)
}

// apply2p is apply2 split over up to threads goroutines for large outputs.
func apply2p[T, R any](p *plan2, a, b []T, f vec2[T, R], threads int) []R {
	out := make([]R, p.N)
	n := p.Inner
	one := func(o, ao, bo int) {
		ae, be := ao+1, bo+1
		if p.SA == 1 {
			ae = ao + n
		}
		if p.SB == 1 {
			be = bo + n
		}
		f(out[o:o+n], a[ao:ae], p.SA, b[bo:be], p.SB)
	}
	runs := p.N / max(n, 1)
	parallelFor(runs, threads, max(1, (1<<15)/max(n, 1)), func(lo, hi int) {
		p.runRange(lo, hi, one)
	})
	return out
}

// elementwise lifts a scalar function to a run function.
func elementwise[T, R any](f func(x, y T) R) vec2[T, R] {
	return func(dst []R, a []T, sa int, b []T, sb int) {
		switch {
		case sa == 1 && sb == 1:
			b = b[:len(a)]
			for i, x := range a {
				dst[i] = f(x, b[i])
			}
		case sa == 0 && sb == 0:
			v := f(a[0], b[0])
			for i := range dst {
				dst[i] = v
			}
		case sb == 0:
			y := b[0]
			for i, x := range a[:len(dst)] {
				dst[i] = f(x, y)
			}
		case sa == 0:
			x := a[0]
			for i, y := range b[:len(dst)] {
				dst[i] = f(x, y)
			}
		}
	}
}

// broadcastTo copies t broadcast to shape out (unidirectional).
func broadcastTo(t *onnx.Tensor, out []int) (*onnx.Tensor, error) {
	if slices.Equal(t.Shape, out) {
		return t, nil
	}
	full, err := broadcastShapes(t.Shape, out)
	if err != nil || !slices.Equal(full, out) {
		return nil, fmt.Errorf("cannot broadcast %v to %v", t.Shape, out)
	}
	if n := onnx.NumElements(out); n < 0 || n > MaxElements {
		return nil, fmt.Errorf("broadcast shape %v has more than %d elements", out, MaxElements)
	}
	res, err := onnx.NewZeros(t.DType, out)
	if err != nil {
		return nil, err
	}
	w := walk{Shape: out, SrcStrides: bstrides(t.Shape, out), DstStrides: stridesOf(out)}
	if err := walkAny(res, t, w); err != nil {
		return nil, err
	}
	return res, nil
}
