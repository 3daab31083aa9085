package ops

import (
	"github.com/linearize/linearize/internal/gemm"
	"github.com/linearize/linearize/onnx"
)

func init() {
	Register("", "Conv", 1, conv)
}

// window is the geometry of a convolution or pooling window over the
// spatial axes of an [N, C, D1, ..., Dk] input.
type window struct {
	in      []int // input spatial sizes
	kernel  []int
	strides []int
	dil     []int
	begin   []int // padding before each axis
	end     []int // padding after each axis
	out     []int // output spatial sizes
}

// maxWindowRank bounds the number of spatial axes (ONNX tests use up to
// three; images and audio use one or two).
const maxWindowRank = 8

// windowGeometry reads strides, dilations, pads and auto_pad for a window
// of the given kernel shape over the spatial sizes in. ceil selects
// ceil_mode (pooling): the last window may start inside the end padding
// but not beyond it.
func (ctx *Context) windowGeometry(in, kernel []int, ceil bool) (*window, error) {
	r := len(in)
	if r == 0 || r > maxWindowRank {
		return nil, ctx.errf("%d spatial axes (want 1 to %d)", r, maxWindowRank)
	}
	if len(kernel) != r {
		return nil, ctx.errf("kernel_shape %v has %d axes, the input has %d spatial axes", kernel, len(kernel), r)
	}
	w := &window{in: in, kernel: kernel}
	ints := func(name string, n, def int) ([]int, error) {
		v, ok := ctx.attrInts(name)
		out := make([]int, n)
		if !ok || len(v) == 0 {
			for i := range out {
				out[i] = def
			}
			return out, nil
		}
		if len(v) != n {
			return nil, ctx.errf("%s has %d values, want %d", name, len(v), n)
		}
		for i, x := range v {
			if x < 0 || x > maxElements {
				return nil, ctx.errf("%s[%d] = %d is out of range", name, i, x)
			}
			out[i] = int(x)
		}
		return out, nil
	}
	var err error
	if w.strides, err = ints("strides", r, 1); err != nil {
		return nil, err
	}
	if w.dil, err = ints("dilations", r, 1); err != nil {
		return nil, err
	}
	for i := 0; i < r; i++ {
		if w.strides[i] < 1 || w.dil[i] < 1 {
			return nil, ctx.errf("strides %v and dilations %v must be positive", w.strides, w.dil)
		}
		if kernel[i] < 1 {
			return nil, ctx.errf("kernel_shape %v must be positive", kernel)
		}
	}
	pads, err := ints("pads", 2*r, 0)
	if err != nil {
		return nil, err
	}
	w.begin, w.end = pads[:r], pads[r:]
	w.out = make([]int, r)
	autoPad := ctx.attrString("auto_pad", "NOTSET")
	for i := 0; i < r; i++ {
		ext := w.dil[i]*(kernel[i]-1) + 1 // extent of the dilated kernel
		switch autoPad {
		case "NOTSET", "":
		case "VALID":
			w.begin[i], w.end[i] = 0, 0
		case "SAME_UPPER", "SAME_LOWER":
			o := (in[i] + w.strides[i] - 1) / w.strides[i]
			total := max(0, (o-1)*w.strides[i]+ext-in[i])
			small := total / 2
			if autoPad == "SAME_UPPER" {
				w.begin[i], w.end[i] = small, total-small
			} else {
				w.begin[i], w.end[i] = total-small, small
			}
		default:
			return nil, ctx.errf("auto_pad %q is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER", autoPad)
		}
		span := in[i] + w.begin[i] + w.end[i] - ext
		if span < 0 {
			return nil, ctx.errf("kernel extent %d exceeds padded input size %d on spatial axis %d", ext, in[i]+w.begin[i]+w.end[i], i)
		}
		o := span/w.strides[i] + 1
		if ceil && span%w.strides[i] != 0 {
			o++
			// The last window must start inside the input or its
			// leading padding.
			if (o-1)*w.strides[i] >= in[i]+w.begin[i] {
				o--
			}
		}
		w.out[i] = o
	}
	if n := onnx.NumElements(w.out); n < 0 || n > maxElements {
		return nil, ctx.errf("output spatial shape %v is too large", w.out)
	}
	return w, nil
}

// inputIndex returns, for spatial axis i, kernel offset k and output
// position o, the input position the window reads (may be outside
// [0, in[i]), meaning padding).
func (w *window) inputIndex(i, k, o int) int {
	return o*w.strides[i] - w.begin[i] + k*w.dil[i]
}

// conv is the ONNX Conv: X [N, C, D...], W [M, C/group, K...], optional
// B [M]; Y [N, M, O...]. Each group's product is one GEMM of the group's
// weights [M/group, C/group·ΠK] with the im2col matrix
// [C/group·ΠK, ΠO] of the input (skipped for a 1×1 kernel without
// padding or stride, where the input is already that matrix).
func conv(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 2, 3); err != nil {
		return nil, err
	}
	x, wt, b := in[0], in[1], opt(in, 2)
	if x.DType == onnx.Float16 || x.DType == onnx.BFloat16 {
		return viaFloat32(ctx, in, conv)
	}
	if x.DType != onnx.Float && x.DType != onnx.Double {
		return nil, ctx.errf("unsupported type %s", onnx.TypeName(x.DType))
	}
	if wt.DType != x.DType || (b != nil && b.DType != x.DType) {
		return nil, ctx.errf("X, W and B must have one type, got %s, %s and %v", x, wt, b)
	}
	if len(x.Shape) < 3 {
		return nil, ctx.errf("X must have rank ≥ 3 ([N, C, D...]), got %v", x.Shape)
	}
	if len(wt.Shape) != len(x.Shape) {
		return nil, ctx.errf("W %v must have the rank of X %v", wt.Shape, x.Shape)
	}
	n, c := x.Shape[0], x.Shape[1]
	m, cg := wt.Shape[0], wt.Shape[1]
	group := ctx.attrInt("group", 1)
	if group < 1 || int64(c)%group != 0 {
		return nil, ctx.errf("group %d does not divide the %d input channels", group, c)
	}
	g := int(group)
	if cg*g != c {
		return nil, ctx.errf("W %v: %d channels per group, X %v with group %d has %d", wt.Shape, cg, x.Shape, g, c/g)
	}
	if m%g != 0 {
		return nil, ctx.errf("W %v: %d output channels are not divisible by group %d", wt.Shape, m, g)
	}
	kernel := cloneShape(wt.Shape[2:])
	if ks, ok := ctx.attrInts("kernel_shape"); ok && len(ks) > 0 {
		if len(ks) != len(kernel) {
			return nil, ctx.errf("kernel_shape %v does not match W %v", ks, wt.Shape)
		}
		for i, k := range ks {
			if int64(kernel[i]) != k {
				return nil, ctx.errf("kernel_shape %v does not match W %v", ks, wt.Shape)
			}
		}
	}
	if b != nil && (len(b.Shape) != 1 || b.Shape[0] != m) {
		return nil, ctx.errf("B must have shape [%d], got %v", m, b.Shape)
	}
	w, err := ctx.windowGeometry(cloneShape(x.Shape[2:]), kernel, false)
	if err != nil {
		return nil, err
	}
	y, err := ctx.newTensor(x.DType, append([]int{n, m}, w.out...))
	if err != nil {
		return nil, err
	}
	kk, p, pin := prod(kernel), prod(w.out), prod(w.in)
	rows := cg * kk
	direct := kk == 1
	for i := range w.in {
		direct = direct && w.strides[i] == 1 && w.begin[i] == 0 && w.end[i] == 0
	}
	if !direct {
		if sz := rows * p; sz < 0 || sz > maxElements || (p > 0 && sz/p != rows) {
			return nil, ctx.errf("im2col buffer of %d×%d elements is too large", rows, p)
		}
	}
	switch xd := x.Data.(type) {
	case []float32:
		var bd []float32
		if b != nil {
			bd = b.Floats()
		}
		convT(xd, wt.Floats(), bd, y.Floats(), w, n, c, m, g, direct, pin, ctx.threads(), func(mm, nn, k int, a, bb, cc []float32, threads int) {
			gemm.Sgemm(false, false, mm, nn, k, 1, a, max(k, 1), bb, max(nn, 1), 0, cc, max(nn, 1), threads)
		})
	case []float64:
		var bd []float64
		if b != nil {
			bd = b.Data.([]float64)
		}
		convT(xd, wt.Data.([]float64), bd, y.Data.([]float64), w, n, c, m, g, direct, pin, ctx.threads(), matmulPlain[float64])
	}
	return []*onnx.Tensor{y}, nil
}

// matmulPlain computes c = a·b for row-major a [m×k], b [k×n], serially.
func matmulPlain[T float](m, n, k int, a, b, c []T, _ int) {
	for i := 0; i < m; i++ {
		ci := c[i*n : (i+1)*n]
		clear(ci)
		for l := 0; l < k; l++ {
			av := a[i*k+l]
			if av == 0 {
				continue
			}
			bl := b[l*n : (l+1)*n]
			for j := range ci {
				ci[j] += av * bl[j]
			}
		}
	}
}

// smallConvGEMM is the size (m·n·k) below which the (image, group)
// products of a convolution run in parallel, each serially, rather than
// one after the other with a parallel GEMM (depthwise and grouped
// convolutions make many small products).
const smallConvGEMM = 1 << 18

func convT[T float](x, wt, bias, y []T, w *window, n, c, m, g int, direct bool, pin, threads int, mul func(m, n, k int, a, b, c []T, threads int)) {
	cg, mg := c/g, m/g
	kk, p := prod(w.kernel), prod(w.out)
	rows := cg * kk
	one := func(bg int, col []T, threads int) {
		b, gi := bg/g, bg%g
		xg := x[(b*c+gi*cg)*pin : (b*c+(gi+1)*cg)*pin]
		src := xg
		if !direct {
			im2col(col, xg, w, cg)
			src = col
		}
		yg := y[(b*m+gi*mg)*p : (b*m+(gi+1)*mg)*p]
		mul(mg, p, rows, wt[gi*mg*rows:(gi+1)*mg*rows], src, yg, threads)
	}
	colSize := 0
	if !direct {
		colSize = rows * p
	}
	if threads > 1 && n*g > 1 && mg*p*rows < smallConvGEMM {
		parallelFor(n*g, threads, 1, func(lo, hi int) {
			col := make([]T, colSize)
			for bg := lo; bg < hi; bg++ {
				one(bg, col, 1)
			}
		})
	} else {
		col := make([]T, colSize)
		for bg := 0; bg < n*g; bg++ {
			one(bg, col, threads)
		}
	}
	if bias != nil {
		for b := 0; b < n; b++ {
			for j := 0; j < m; j++ {
				yj := y[(b*m+j)*p : (b*m+j+1)*p]
				for i := range yj {
					yj[i] += bias[j]
				}
			}
		}
	}
}

// im2col writes col [cg·ΠK, ΠO]: row (ch, kernel offset) holds, for every
// output position, the input value its window reads at that offset (0 in
// the padding).
func im2col[T float](col, x []T, w *window, cg int) {
	r := len(w.in)
	last := r - 1
	p, pin := prod(w.out), prod(w.in)
	kk := prod(w.kernel)
	inStr := stridesOf(w.in)
	kpos := make([]int, r)
	opos := make([]int, r) // only the leading r-1 axes are used
	outer := prod(w.out[:last])
	ol, il := w.out[last], w.in[last]
	for ch := 0; ch < cg; ch++ {
		xc := x[ch*pin : (ch+1)*pin]
		clear(kpos)
		for kf := 0; kf < kk; kf++ {
			row := col[(ch*kk+kf)*p : (ch*kk+kf+1)*p]
			clear(opos)
			for o := 0; o < outer; o++ {
				run := row[o*ol : (o+1)*ol]
				base, ok := 0, true
				for i := 0; i < last; i++ {
					ii := w.inputIndex(i, kpos[i], opos[i])
					if ii < 0 || ii >= w.in[i] {
						ok = false
						break
					}
					base += ii * inStr[i]
				}
				if !ok {
					clear(run)
				} else {
					s, off := w.strides[last], w.inputIndex(last, kpos[last], 0)
					for j := range run {
						ii := off + j*s
						if ii >= 0 && ii < il {
							run[j] = xc[base+ii]
						} else {
							run[j] = 0
						}
					}
				}
				nextIndex(opos[:last], w.out[:last])
			}
			nextIndex(kpos, w.kernel)
		}
	}
}
