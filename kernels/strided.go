package kernels

import "github.com/linearize/linearize/onnx"

// walk describes a strided copy of a block of shape Shape from src (starting
// at SrcOff, element strides SrcStrides, possibly 0 or negative) to dst
// (DstOff, DstStrides). Every data-movement op (Transpose, Slice, Expand,
// Tile, Concat, Split, Gather, Pad) is a few walks.
type walk struct {
	Shape      []int
	SrcOff     int
	SrcStrides []int
	DstOff     int
	DstStrides []int
}

// simplify drops unit dimensions and merges neighbours that are contiguous
// in both src and dst, so the inner loop runs as long as possible.
func (w walk) simplify() walk {
	var s walk
	s.SrcOff, s.DstOff = w.SrcOff, w.DstOff
	for i, d := range w.Shape {
		if d == 1 {
			continue
		}
		n := len(s.Shape)
		if n > 0 && s.SrcStrides[n-1] == w.SrcStrides[i]*d && s.DstStrides[n-1] == w.DstStrides[i]*d {
			s.Shape[n-1] *= d
			s.SrcStrides[n-1] = w.SrcStrides[i]
			s.DstStrides[n-1] = w.DstStrides[i]
			continue
		}
		s.Shape = append(s.Shape, d)
		s.SrcStrides = append(s.SrcStrides, w.SrcStrides[i])
		s.DstStrides = append(s.DstStrides, w.DstStrides[i])
	}
	return s
}

func walkT[T any](dst, src []T, w walk) {
	for _, d := range w.Shape {
		if d == 0 {
			return
		}
	}
	w = w.simplify()
	r := len(w.Shape)
	if r == 0 {
		dst[w.DstOff] = src[w.SrcOff]
		return
	}
	n := w.Shape[r-1]
	ss, ds := w.SrcStrides[r-1], w.DstStrides[r-1]
	idx := make([]int, r-1)
	so, do := w.SrcOff, w.DstOff
	for more := true; more; so, do, more = advance(idx, w.Shape, w.SrcStrides, w.DstStrides, so, do) {
		switch {
		case ss == 1 && ds == 1:
			copy(dst[do:do+n], src[so:so+n])
		case ss == 0:
			v := src[so]
			for i, j := 0, do; i < n; i, j = i+1, j+ds {
				dst[j] = v
			}
		default:
			for i, j, k := 0, do, so; i < n; i, j, k = i+1, j+ds, k+ss {
				dst[j] = src[k]
			}
		}
	}
}

// walkAny runs w over the data of dst and src, which must have the same
// element type.
func walkAny(dst, src *onnx.Tensor, w walk) error {
	e, err := elemsFor(dst)
	if err == nil {
		e.walk(dst.Data, src.Data, w)
	}
	return err
}
