package kernels

import (
	"github.com/linearize/linearize/onnx"
)

// poolInput checks the [N, C, D...] input of a pooling op and returns its
// window geometry from kernel_shape and the other attributes.
func (ctx *Context) poolInput(in []*onnx.Tensor, maxIn int) (*onnx.Tensor, *window, error) {
	if err := ctx.checkInputs(in, 1, maxIn); err != nil {
		return nil, nil, err
	}
	x := in[0]
	if len(x.Shape) < 3 {
		return nil, nil, ctx.errf("X must have rank ≥ 3 ([N, C, D...]), got %v", x.Shape)
	}
	ks, ok := ctx.attrInts("kernel_shape")
	if !ok {
		return nil, nil, ctx.errf("attribute kernel_shape is required")
	}
	kernel := make([]int, len(ks))
	for i, k := range ks {
		if k < 1 || k > MaxElements {
			return nil, nil, ctx.errf("kernel_shape %v must be positive", ks)
		}
		kernel[i] = int(k)
	}
	w, err := ctx.windowGeometry(cloneShape(x.Shape[2:]), kernel, ctx.attrInt("ceil_mode", 0) != 0)
	if err != nil {
		return nil, nil, err
	}
	return x, w, nil
}

// pooling makes a pooling kernel of pool, which fills the output y from
// the input x over the windows w: the kernel checks the input, widens the
// half types to float32 and allocates y.
func pooling(pool func(ctx *Context, x, y *onnx.Tensor, w *window) ([]*onnx.Tensor, error)) Kernel {
	var k Kernel
	k = func(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
		x, w, err := ctx.poolInput(in, 1)
		if err != nil {
			return nil, err
		}
		if x.DType == onnx.Float16 || x.DType == onnx.BFloat16 {
			return viaFloat32(ctx, in, k)
		}
		y, err := ctx.newTensor(x.DType, append(cloneShape(x.Shape[:2]), w.out...))
		if err != nil {
			return nil, err
		}
		return pool(ctx, x, y, w)
	}
	return k
}

// averagePool averages each window; with count_include_pad the explicit
// padding counts in the divisor (a ceil_mode overhang beyond it does not),
// without it only input elements do.
func averagePool(ctx *Context, x, y *onnx.Tensor, w *window) ([]*onnx.Tensor, error) {
	inclPad := ctx.attrInt("count_include_pad", 0) != 0
	planes := x.Shape[0] * x.Shape[1]
	switch xd := x.Data.(type) {
	case []float32:
		poolT(xd, y.Floats(), nil, w, planes, avgReducer[float32](inclPad))
	case []float64:
		poolT(xd, y.Data.([]float64), nil, w, planes, avgReducer[float64](inclPad))
	default:
		return nil, ctx.errf("unsupported type %s", onnx.TypeName(x.DType))
	}
	return []*onnx.Tensor{y}, nil
}

// maxPool takes the maximum of each window (padding never wins) and, as
// the optional second output, the flat index of the maximum in X (its
// spatial part in column-major order when storage_order is 1).
func maxPool(ctx *Context, x, y *onnx.Tensor, w *window) ([]*onnx.Tensor, error) {
	var idx []int64
	wantIdx := ctx.Node != nil && len(ctx.Node.Output) > 1 && ctx.Node.Output[1] != ""
	if wantIdx {
		idx = make([]int64, y.Len())
	}
	planes := x.Shape[0] * x.Shape[1]
	switch xd := x.Data.(type) {
	case []float32:
		poolT(xd, y.Floats(), idx, w, planes, maxReducer[float32])
	case []float64:
		poolT(xd, y.Data.([]float64), idx, w, planes, maxReducer[float64])
	case []int8:
		poolT(xd, y.Data.([]int8), idx, w, planes, maxReducer[int8])
	case []uint8:
		poolT(xd, y.Data.([]uint8), idx, w, planes, maxReducer[uint8])
	default:
		return nil, ctx.errf("unsupported type %s", onnx.TypeName(x.DType))
	}
	if !wantIdx {
		return []*onnx.Tensor{y}, nil
	}
	if ctx.attrInt("storage_order", 0) == 1 {
		// Re-express each spatial index column-major.
		pin := prod(w.in)
		rs := stridesOf(w.in)
		for i, v := range idx {
			plane, sp := v/int64(pin), int(v%int64(pin))
			cm, acc := 0, 1
			for a := range w.in {
				cm += (sp / rs[a] % w.in[a]) * acc
				acc *= w.in[a]
			}
			idx[i] = plane*int64(pin) + int64(cm)
		}
	}
	return []*onnx.Tensor{y, onnx.NewInt64(cloneShape(y.Shape), idx)}, nil
}

// reducer folds the input elements of one window: vals are the elements
// inside the input, at flat plane offsets offs; padded counts the window
// positions inside the explicit padding. It returns the result and the
// offset chosen (for MaxPool's indices).
type reducer[T number] func(vals []T, offs []int, padded float64) (T, int)

func avgReducer[T float](inclPad bool) reducer[T] {
	return func(vals []T, _ []int, padded float64) (T, int) {
		var s float64
		for _, v := range vals {
			s += float64(v)
		}
		n := float64(len(vals))
		if inclPad {
			n += padded
		}
		if n == 0 {
			return 0, 0
		}
		return T(s / n), 0
	}
}

func maxReducer[T number](vals []T, offs []int, _ float64) (T, int) {
	if len(vals) == 0 {
		return 0, 0
	}
	best, at := vals[0], offs[0]
	for i, v := range vals[1:] {
		if v > best || (isNaN(best) && !isNaN(v)) {
			best, at = v, offs[i+1]
		}
	}
	return best, at
}

func isNaN[T number](v T) bool { return v != v }

// poolT applies f to every window of every [D...] plane of x. idx, when
// not nil, receives the flat index in x of the element f chose. Each axis'
// kernel offsets are clipped to those that land in the input (and counted
// for those that land in the padding) arithmetically, so the work is
// bounded by the input elements the windows read, however large the
// kernel and padding.
func poolT[T number](x, y []T, idx []int64, w *window, planes int, f reducer[T]) {
	r := len(w.in)
	pin, p := prod(w.in), prod(w.out)
	inStr := stridesOf(w.in)
	var vals []T
	var offs []int
	opos := make([]int, r)
	lo, cnt := make([]int, r), make([]int, r) // per axis: first valid input position and count
	kpos := make([]int, r)
	for pl := 0; pl < planes; pl++ {
		xp := x[pl*pin : (pl+1)*pin]
		clear(opos)
		for o := 0; o < p; o++ {
			vals, offs = vals[:0], offs[:0]
			inside, inPad := 1, 1.0 // the padded count in float64: it may be huge
			for a := 0; a < r; a++ {
				base, d, k := w.inputIndex(a, 0, opos[a]), w.dil[a], w.kernel[a]
				k0, k1 := offsetRange(base, d, k, 0, w.in[a])
				lo[a], cnt[a] = base+k0*d, k1-k0
				p0, p1 := offsetRange(base, d, k, -w.begin[a], w.in[a]+w.end[a])
				inside *= cnt[a]
				inPad *= float64(p1 - p0)
			}
			if inside > 0 {
				clear(kpos)
				for e := 0; e < inside; e++ {
					off := 0
					for a := 0; a < r; a++ {
						off += (lo[a] + kpos[a]*w.dil[a]) * inStr[a]
					}
					vals = append(vals, xp[off])
					offs = append(offs, off)
					nextIndex(kpos, cnt)
				}
			}
			v, at := f(vals, offs, inPad-float64(inside))
			y[pl*p+o] = v
			if idx != nil {
				idx[pl*p+o] = int64(pl*pin + at)
			}
			nextIndex(opos, w.out)
		}
	}
}

// offsetRange returns the kernel offsets [k0, k1) (within [0, k)) whose
// positions base + offset·d fall in [lo, hi).
func offsetRange(base, d, k, lo, hi int) (int, int) {
	k0 := 0
	if base < lo {
		k0 = (lo - base + d - 1) / d
	}
	k1 := k
	if last := hi - 1 - base; last < 0 {
		k1 = 0
	} else {
		k1 = min(k, last/d+1)
	}
	if k1 < k0 {
		return 0, 0
	}
	return k0, k1
}
