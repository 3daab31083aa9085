package kernels

import (
	"github.com/linearize/linearize/internal/gemm"
	"github.com/linearize/linearize/onnx"
)

// tgeom is the geometry of a transposed convolution over the spatial axes
// of an [N, C, D1, ..., Dk] input: output position o along axis i receives
// input position p through kernel offset q when
// o = p·strides[i] + q·dil[i] − begin[i].
type tgeom struct {
	in, kernel, strides, dil []int
	begin                    []int // padding before each axis (negative: zeros are added)
	out                      []int // output spatial sizes
}

// transposeGeometry reads strides, dilations, pads, output_padding,
// output_shape and auto_pad for a kernel over the input sizes in. The
// output size of axis i before padding is
// full = strides·(in − 1) + output_padding + dil·(kernel − 1) + 1; pads
// (or, with output_shape or SAME_*, the padding full − output size split
// as the specification says) remove that many positions from each end.
func (ctx *Context) transposeGeometry(in, kernel []int) (*tgeom, error) {
	r := len(in)
	if r == 0 || r > maxWindowRank {
		return nil, ctx.errf("%d spatial axes (want 1 to %d)", r, maxWindowRank)
	}
	g := &tgeom{in: in, kernel: kernel}
	var err error
	if g.strides, err = ctx.intsAttr("strides", r, 1); err != nil {
		return nil, err
	}
	if g.dil, err = ctx.intsAttr("dilations", r, 1); err != nil {
		return nil, err
	}
	outPad, err := ctx.intsAttr("output_padding", r, 0)
	if err != nil {
		return nil, err
	}
	pads, err := ctx.intsAttr("pads", 2*r, 0)
	if err != nil {
		return nil, err
	}
	for i := 0; i < r; i++ {
		if g.strides[i] < 1 || g.dil[i] < 1 || kernel[i] < 1 {
			return nil, ctx.errf("strides %v, dilations %v and kernel %v must be positive", g.strides, g.dil, kernel)
		}
		// Bounded so that the sizes below cannot overflow.
		if in[i] > MaxElements || kernel[i] > MaxElements {
			return nil, ctx.errf("input %v or kernel %v is too large", in, kernel)
		}
	}
	full := make([]int, r)
	for i := range full {
		full[i] = g.strides[i]*(in[i]-1) + outPad[i] + g.dil[i]*(kernel[i]-1) + 1
	}
	if err := ctx.transposePads(g, full, pads); err != nil {
		return nil, err
	}
	if n := onnx.NumElements(g.out); n < 0 || n > MaxElements {
		return nil, ctx.errf("output spatial shape %v is too large", g.out)
	}
	return g, nil
}

// transposePads sets g.begin and g.out from the explicit pads, or from
// output_shape or auto_pad, which fix the output size and split the total
// padding full − out between the ends: the larger half at the end for
// SAME_UPPER, at the beginning otherwise (a negative total adds zeros).
func (ctx *Context) transposePads(g *tgeom, full, pads []int) error {
	r := len(full)
	g.begin, g.out = make([]int, r), make([]int, r)
	autoPad := ctx.attrString("auto_pad", "NOTSET")
	shape, hasShape := ctx.attrInts("output_shape")
	hasShape = hasShape && len(shape) > 0
	switch autoPad {
	case "NOTSET", "", "VALID", "SAME_UPPER", "SAME_LOWER":
	default:
		return ctx.errf("auto_pad %q is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER", autoPad)
	}
	if hasShape && len(shape) != r && len(shape) != r+2 {
		return ctx.errf("output_shape %v has %d values, want %d", shape, len(shape), r)
	}
	for i := 0; i < r; i++ {
		switch {
		case hasShape:
			o := shape[len(shape)-r+i]
			if o < 0 || o > MaxElements {
				return ctx.errf("output_shape %v is out of range", shape)
			}
			g.out[i] = int(o)
		case autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER":
			g.out[i] = g.in[i] * g.strides[i]
		case autoPad == "VALID":
			g.out[i] = full[i]
		default:
			g.begin[i], g.out[i] = pads[i], full[i]-pads[i]-pads[r+i]
			if g.out[i] < 0 {
				return ctx.errf("pads %v leave a negative output size on spatial axis %d", pads, i)
			}
			continue
		}
		if g.out[i] < 0 {
			return ctx.errf("negative output size %d on spatial axis %d", g.out[i], i)
		}
		total := full[i] - g.out[i]
		small := floorDiv(total, 2)
		if autoPad == "SAME_UPPER" {
			g.begin[i] = small
		} else {
			g.begin[i] = total - small
		}
	}
	return nil
}

func floorDiv(a, b int) int {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// convTranspose is the ONNX ConvTranspose: X [N, C, D...], W
// [C, M/group, K...], optional B [M]; Y [N, M, O...]. For each image and
// group, one GEMM Wᵀ·X ([M/group·ΠK, C/group] by [C/group, ΠD]) gives
// every (output channel, kernel offset, input position) product, which
// col2im adds into the output positions they reach.
func convTranspose(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 2, 3); err != nil {
		return nil, err
	}
	x, wt, b := in[0], in[1], opt(in, 2)
	if x.DType == onnx.Float16 || x.DType == onnx.BFloat16 {
		if err := ctx.sameConvType(x, wt, b); err != nil {
			return nil, err
		}
		return viaFloat32(ctx, in, convTranspose)
	}
	if err := ctx.convTypes(x, wt, b); err != nil {
		return nil, err
	}
	p, err := ctx.convTransposePlan(x, wt, b)
	if err != nil {
		return nil, err
	}
	y, err := ctx.newTensor(x.DType, append([]int{p.n, p.m}, p.g.out...))
	if err != nil {
		return nil, err
	}
	// The column buffer: output channels of a group × kernel positions ×
	// input positions, which can exceed both inputs. (Workers each take
	// one only below smallConvGEMM elements, where the budget is moot.)
	cols := int64(p.m/p.groups) * int64(prod(p.g.kernel)) * int64(prod(p.g.in))
	if err := ctx.budgetBytes("column buffer", cols, int64(onnx.ElemSize(x.DType))); err != nil {
		return nil, err
	}
	switch xd := x.Data.(type) {
	case []float32:
		convTransposeT(p, xd, wt.Floats(), dataOf[float32](b), y.Floats(), ctx.threads(), func(m, n, k int, a, bb, c []float32, threads int) {
			gemm.Sgemm(true, false, m, n, k, 1, a, max(m, 1), bb, max(n, 1), 0, c, max(n, 1), threads)
		})
	case []float64:
		convTransposeT(p, xd, wt.Data.([]float64), dataOf[float64](b), y.Data.([]float64), ctx.threads(), matmulTransA[float64])
	}
	return []*onnx.Tensor{y}, nil
}

// ctPlan holds the sizes of a ConvTranspose.
type ctPlan struct {
	n, c, m, groups int
	g               *tgeom
}

// convTransposePlan checks the shapes of X, W and B and the attributes.
func (ctx *Context) convTransposePlan(x, wt, b *onnx.Tensor) (*ctPlan, error) {
	if err := ctx.convRanks(x, wt); err != nil {
		return nil, err
	}
	p := &ctPlan{n: x.Shape[0], c: x.Shape[1]}
	group := ctx.attrInt("group", 1)
	if group < 1 || group > int64(max(p.c, 1)) || int64(p.c)%group != 0 {
		return nil, ctx.errf("group %d does not divide the %d input channels", group, p.c)
	}
	p.groups = int(group)
	if wt.Shape[0] != p.c {
		return nil, ctx.errf("W %v must have the %d input channels of X %v first", wt.Shape, p.c, x.Shape)
	}
	p.m = wt.Shape[1] * p.groups
	kernel, err := ctx.kernelShape(wt)
	if err != nil {
		return nil, err
	}
	if err := ctx.checkBias(b, p.m); err != nil {
		return nil, err
	}
	g, err := ctx.transposeGeometry(cloneShape(x.Shape[2:]), kernel)
	if err != nil {
		return nil, err
	}
	p.g = g
	rows, pin := wt.Shape[1]*prod(kernel), prod(g.in)
	if sz := rows * pin; sz < 0 || sz > MaxElements || (pin > 0 && sz/pin != rows) {
		return nil, ctx.errf("column buffer of %d×%d elements is too large", rows, pin)
	}
	return p, nil
}

// matmulTransA computes c = aᵀ·b for row-major a [k×m], b [k×n], serially.
func matmulTransA[T float](m, n, k int, a, b, c []T, _ int) {
	clear(c[:m*n])
	for l := 0; l < k; l++ {
		al, bl := a[l*m:(l+1)*m], b[l*n:(l+1)*n]
		for i, av := range al {
			if av == 0 {
				continue
			}
			ci := c[i*n : (i+1)*n]
			for j, bv := range bl {
				ci[j] += av * bv
			}
		}
	}
}

func convTransposeT[T float](p *ctPlan, x, wt, bias, y []T, threads int, mul func(m, n, k int, a, b, c []T, threads int)) {
	g := p.g
	cg, mg := p.c/p.groups, p.m/p.groups
	kk, pin, pout := prod(g.kernel), prod(g.in), prod(g.out)
	rows := mg * kk
	eachGroup(p.n*p.groups, rows*pin, rows*pin*cg < smallConvGEMM, threads, func(ng int, col []T, threads int) {
		b, gi := ng/p.groups, ng%p.groups
		xg := x[(b*p.c+gi*cg)*pin : (b*p.c+(gi+1)*cg)*pin]
		wg := wt[gi*cg*rows : (gi+1)*cg*rows]
		mul(rows, pin, cg, wg, xg, col, threads)
		col2im(y[(b*p.m+gi*mg)*pout:(b*p.m+(gi+1)*mg)*pout], col, g, mg)
	})
	addChannelBias(y, bias, p.n*p.m, p.m, pout)
}

// col2im adds col [mg·ΠK, ΠD] into y [mg, ΠO]: row (channel, kernel
// offset) holds, for every input position, the value it sends to the
// output position that offset reaches (dropped when outside the output).
func col2im[T float](y, col []T, g *tgeom, mg int) {
	r := len(g.in)
	last := r - 1
	pin, pout, kk := prod(g.in), prod(g.out), prod(g.kernel)
	outStr := stridesOf(g.out)
	kpos := make([]int, r)
	ipos := make([]int, r) // only the leading r-1 axes are used
	outer, il := prod(g.in[:last]), g.in[last]
	s, ol := g.strides[last], g.out[last]
	for ch := 0; ch < mg; ch++ {
		yc := y[ch*pout : (ch+1)*pout]
		clear(kpos)
		for kf := 0; kf < kk; kf++ {
			row := col[(ch*kk+kf)*pin : (ch*kk+kf+1)*pin]
			clear(ipos)
			for o := 0; o < outer; o++ {
				if base, ok := g.outBase(kpos, ipos, outStr); ok {
					off := kpos[last]*g.dil[last] - g.begin[last]
					run := row[o*il : (o+1)*il]
					for j, v := range run {
						if oj := off + j*s; oj >= 0 && oj < ol {
							yc[base+oj] += v
						}
					}
				}
				nextIndex(ipos[:last], g.in[:last])
			}
			nextIndex(kpos, g.kernel)
		}
	}
}

// outBase returns the output offset of the leading r−1 axes that input
// position ipos reaches through kernel offset kpos, and whether it is
// inside the output.
func (g *tgeom) outBase(kpos, ipos, outStr []int) (int, bool) {
	base := 0
	for i := 0; i < len(g.in)-1; i++ {
		o := ipos[i]*g.strides[i] + kpos[i]*g.dil[i] - g.begin[i]
		if o < 0 || o >= g.out[i] {
			return 0, false
		}
		base += o * outStr[i]
	}
	return base, true
}
