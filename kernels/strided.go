package kernels

import "fmt"

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
	for {
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
		// advance the outer index (as plan2.runRange in broadcast.go does;
		// kept inline in both hot loops)
		k := r - 2
		for ; k >= 0; k-- {
			idx[k]++
			so += w.SrcStrides[k]
			do += w.DstStrides[k]
			if idx[k] < w.Shape[k] {
				break
			}
			so -= w.SrcStrides[k] * w.Shape[k]
			do -= w.DstStrides[k] * w.Shape[k]
			idx[k] = 0
		}
		if k < 0 {
			return
		}
	}
}

// walkAny runs w over dst and src, which must be slices of the same type.
func walkAny(dst, src any, w walk) error {
	switch d := dst.(type) {
	case []float32:
		walkT(d, src.([]float32), w)
	case []float64:
		walkT(d, src.([]float64), w)
	case []int8:
		walkT(d, src.([]int8), w)
	case []uint8:
		walkT(d, src.([]uint8), w)
	case []int16:
		walkT(d, src.([]int16), w)
	case []uint16:
		walkT(d, src.([]uint16), w)
	case []int32:
		walkT(d, src.([]int32), w)
	case []uint32:
		walkT(d, src.([]uint32), w)
	case []int64:
		walkT(d, src.([]int64), w)
	case []uint64:
		walkT(d, src.([]uint64), w)
	case []bool:
		walkT(d, src.([]bool), w)
	case []string:
		walkT(d, src.([]string), w)
	default:
		return fmt.Errorf("unsupported data %T", dst)
	}
	return nil
}
