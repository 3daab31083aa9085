package kernels

import (
	"github.com/linearize/linearize/internal/gemm"
	"github.com/linearize/linearize/onnx"
)

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
	var err error
	if w.strides, err = ctx.intsAttr("strides", r, 1); err != nil {
		return nil, err
	}
	if w.dil, err = ctx.intsAttr("dilations", r, 1); err != nil {
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
	pads, err := ctx.intsAttr("pads", 2*r, 0)
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
	if n := onnx.NumElements(w.out); n < 0 || n > MaxElements {
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
	if out, done, err := ctx.halfPrologue(in, 2, 3, conv); done {
		return out, err
	}
	x, wt, b := in[0], in[1], opt(in, 2)
	if err := ctx.convTypes(x, wt, b); err != nil {
		return nil, err
	}
	p, err := ctx.convPlan(x, wt, b)
	if err != nil {
		return nil, err
	}
	y, err := ctx.newTensor(x.DType, append([]int{p.n, p.m}, p.w.out...))
	if err != nil {
		return nil, err
	}
	if !p.direct {
		rows, cols := p.c/p.groups*prod(p.w.kernel), prod(p.w.out)
		if sz := rows * cols; sz < 0 || sz > MaxElements || (cols > 0 && sz/cols != rows) {
			return nil, ctx.errf("im2col buffer of %d×%d elements is too large", rows, cols)
		}
	}
	switch xd := x.Data.(type) {
	case []float32:
		convT(p, xd, wt.Floats(), dataOf[float32](b), y.Floats(), ctx.threads(), func(mm, nn, k int, a, bb, cc []float32, threads int) {
			gemm.Sgemm(false, false, mm, nn, k, 1, a, max(k, 1), bb, max(nn, 1), 0, cc, max(nn, 1), threads)
		})
	case []float64:
		convT(p, xd, wt.Data.([]float64), dataOf[float64](b), y.Data.([]float64), ctx.threads(), matmulPlain[float64])
	}
	return []*onnx.Tensor{y}, nil
}

// dataOf returns the data of an optional tensor holding T (nil for none).
func dataOf[T any](t *onnx.Tensor) []T {
	if t == nil {
		return nil
	}
	return t.Data.([]T)
}

// convTypes checks that Conv's or ConvTranspose's X is float32 or float64
// and that W and B have its type.
func (ctx *Context) convTypes(x, wt, b *onnx.Tensor) error {
	if x.DType != onnx.Float && x.DType != onnx.Double {
		return ctx.errf("unsupported type %s", onnx.TypeName(x.DType))
	}
	return ctx.sameConvType(x, wt, b)
}

// sameConvType checks that W and B (optional) have X's type.
func (ctx *Context) sameConvType(x, wt, b *onnx.Tensor) error {
	if wt.DType != x.DType || (b != nil && b.DType != x.DType) {
		return ctx.errf("X, W and B must have one type, got %s, %s and %v", x, wt, b)
	}
	return nil
}

// convRanks checks that X is [N, C, D...] and W has its rank.
func (ctx *Context) convRanks(x, wt *onnx.Tensor) error {
	if len(x.Shape) < 3 {
		return ctx.errf("X must have rank ≥ 3 ([N, C, D...]), got %v", x.Shape)
	}
	if len(wt.Shape) != len(x.Shape) {
		return ctx.errf("W %v must have the rank of X %v", wt.Shape, x.Shape)
	}
	return nil
}

// kernelShape returns W's spatial dims, which the kernel_shape attribute,
// when given, must repeat.
func (ctx *Context) kernelShape(wt *onnx.Tensor) ([]int, error) {
	kernel := cloneShape(wt.Shape[2:])
	ks, ok := ctx.attrInts("kernel_shape")
	if !ok || len(ks) == 0 {
		return kernel, nil
	}
	if len(ks) != len(kernel) {
		return nil, ctx.errf("kernel_shape %v does not match W %v", ks, wt.Shape)
	}
	for i, k := range ks {
		if int64(kernel[i]) != k {
			return nil, ctx.errf("kernel_shape %v does not match W %v", ks, wt.Shape)
		}
	}
	return kernel, nil
}

// checkBias checks that an optional bias B has shape [m].
func (ctx *Context) checkBias(b *onnx.Tensor, m int) error {
	if b != nil && (len(b.Shape) != 1 || b.Shape[0] != m) {
		return ctx.errf("B must have shape [%d], got %v", m, b.Shape)
	}
	return nil
}

// convPlan holds the sizes of a Conv: n images of c channels in groups,
// m output channels, the window, and whether the input is already the
// im2col matrix (a 1×1 kernel without padding or stride).
type convPlan struct {
	n, c, m, groups int
	w               *window
	direct          bool
}

// convPlan checks the shapes of X, W and B and the attributes of a Conv.
func (ctx *Context) convPlan(x, wt, b *onnx.Tensor) (*convPlan, error) {
	if err := ctx.convRanks(x, wt); err != nil {
		return nil, err
	}
	p := &convPlan{n: x.Shape[0], c: x.Shape[1], m: wt.Shape[0]}
	cg := wt.Shape[1]
	group := ctx.attrInt("group", 1)
	if group < 1 || int64(p.c)%group != 0 {
		return nil, ctx.errf("group %d does not divide the %d input channels", group, p.c)
	}
	g := int(group)
	if cg*g != p.c {
		return nil, ctx.errf("W %v: %d channels per group, X %v with group %d has %d", wt.Shape, cg, x.Shape, g, p.c/g)
	}
	if p.m%g != 0 {
		return nil, ctx.errf("W %v: %d output channels are not divisible by group %d", wt.Shape, p.m, g)
	}
	p.groups = g
	kernel, err := ctx.kernelShape(wt)
	if err != nil {
		return nil, err
	}
	if err := ctx.checkBias(b, p.m); err != nil {
		return nil, err
	}
	if p.w, err = ctx.windowGeometry(cloneShape(x.Shape[2:]), kernel, false); err != nil {
		return nil, err
	}
	p.direct = prod(kernel) == 1
	for i := range p.w.in {
		p.direct = p.direct && p.w.strides[i] == 1 && p.w.begin[i] == 0 && p.w.end[i] == 0
	}
	return p, nil
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

func convT[T float](p *convPlan, x, wt, bias, y []T, threads int, mul func(m, n, k int, a, b, c []T, threads int)) {
	w, c, m, g := p.w, p.c, p.m, p.groups
	cg, mg := c/g, m/g
	kk, out, pin := prod(w.kernel), prod(w.out), prod(w.in)
	rows := cg * kk
	colSize := 0
	if !p.direct {
		colSize = rows * out
	}
	eachGroup(p.n*g, colSize, mg*out*rows < smallConvGEMM, threads, func(bg int, col []T, threads int) {
		b, gi := bg/g, bg%g
		xg := x[(b*c+gi*cg)*pin : (b*c+(gi+1)*cg)*pin]
		src := xg
		if !p.direct {
			im2col(col, xg, w, cg)
			src = col
		}
		yg := y[(b*m+gi*mg)*out : (b*m+(gi+1)*mg)*out]
		mul(mg, out, rows, wt[gi*mg*rows:(gi+1)*mg*rows], src, yg, threads)
	})
	addChannelBias(y, bias, p.n*m, m, out)
}

// eachGroup runs one(i, col, threads) for i in [0, count), each call with
// a column buffer of colSize elements: in parallel, each serially, when
// the products are small and there are several, else one after the other
// with threads for each product.
func eachGroup[T float](count, colSize int, small bool, threads int, one func(i int, col []T, threads int)) {
	if threads > 1 && count > 1 && small {
		parallelFor(count, threads, 1, func(lo, hi int) {
			col := make([]T, colSize)
			for i := lo; i < hi; i++ {
				one(i, col, 1)
			}
		})
		return
	}
	col := make([]T, colSize)
	for i := 0; i < count; i++ {
		one(i, col, threads)
	}
}

// addChannelBias adds bias[j] to every element of channel j of y
// [N, M, P] (nm = N·M rows of p elements); nothing for a nil bias.
func addChannelBias[T float](y, bias []T, nm, m, p int) {
	if bias == nil {
		return
	}
	for i := 0; i < nm; i++ {
		yi, bv := y[i*p:(i+1)*p], bias[i%m]
		for j := range yi {
			yi[j] += bv
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
