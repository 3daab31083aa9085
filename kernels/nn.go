package kernels

import (
	"math"

	"github.com/linearize/linearize/onnx"
)

// Channel-first (N, C, spatial...) ops: BatchNormalization (inference),
// InstanceNormalization, GlobalAveragePool, GlobalMaxPool, DepthToSpace,
// SpaceToDepth; and ReverseSequence.

// channelFloats reads a float input of shape [C] as float64.
func (ctx *Context) channelFloats(t *onnx.Tensor, c int, what string) ([]float64, error) {
	if !onnx.IsFloat(t.DType) || t.Len() != c || len(t.Shape) != 1 {
		return nil, ctx.errf("%s must be a float vector of %d channels, got %s", what, c, t)
	}
	v, _ := t.AsFloat64s()
	return v, nil
}

// channelRows returns the values of an (N, C, ...) float tensor x as
// float64, N·C rows of inner elements, and a zero output of x's shape.
func (ctx *Context) channelRows(x *onnx.Tensor) (xv []float64, inner int, out *onnx.Tensor, err error) {
	inner = prod(x.Shape[2:])
	xv, _ = x.AsFloat64s()
	out, err = ctx.newTensor(x.DType, x.Shape)
	return xv, inner, out, err
}

// oneOutput returns t as a kernel's only output, or err.
func oneOutput(t *onnx.Tensor, err error) ([]*onnx.Tensor, error) {
	if err != nil {
		return nil, err
	}
	return []*onnx.Tensor{t}, nil
}

// perChannel computes y = x·a[c] + b[c] over an (N, C, ...) float tensor.
func (ctx *Context) perChannel(x *onnx.Tensor, a, b []float64) (*onnx.Tensor, error) {
	n, c := x.Shape[0], x.Shape[1]
	xv, inner, out, err := ctx.channelRows(x)
	if err != nil {
		return nil, err
	}
	for i := range n * c {
		ch := i % c
		for j := range inner {
			p := i*inner + j
			setFloat(out, p, xv[p]*a[ch]+b[ch])
		}
	}
	return out, nil
}

// ncInput checks that in holds n inputs, the first an (N, C, ...) float
// tensor (checkNC), and returns that one.
func (ctx *Context) ncInput(in []*onnx.Tensor, n int) (*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, n, n); err != nil {
		return nil, err
	}
	return in[0], ctx.checkNC(in[0])
}

func (ctx *Context) checkNC(x *onnx.Tensor) error {
	if len(x.Shape) < 2 || !onnx.IsFloat(x.DType) {
		return ctx.errf("input must be a float tensor of rank ≥ 2 (N, C, ...), got %s", x)
	}
	return nil
}

func batchNorm(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 5, 5); err != nil {
		return nil, err
	}
	if ctx.attrInt("training_mode", 0) != 0 {
		return nil, ctx.errf("training_mode=1 is not supported (inference only)")
	}
	if ctx.Node != nil && len(ctx.Node.Output) > 1 {
		return nil, ctx.errf("running mean and variance outputs exist only in training mode")
	}
	x := in[0]
	if err := ctx.checkNC(x); err != nil {
		return nil, err
	}
	c := x.Shape[1]
	var p [4][]float64
	for i, what := range []string{"scale", "B", "input_mean", "input_var"} {
		v, err := ctx.channelFloats(in[i+1], c, what)
		if err != nil {
			return nil, err
		}
		p[i] = v
	}
	eps := float64(ctx.attrFloat("epsilon", 1e-5))
	a, b := make([]float64, c), make([]float64, c)
	for ch := range c {
		a[ch] = p[0][ch] / math.Sqrt(p[3][ch]+eps)
		b[ch] = p[1][ch] - p[2][ch]*a[ch]
	}
	return oneOutput(ctx.perChannel(x, a, b))
}

// instanceNorm normalizes each (image, channel) row of X to mean 0 and
// variance 1, then scales and shifts it per channel.
func instanceNorm(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	x, err := ctx.ncInput(in, 3)
	if err != nil {
		return nil, err
	}
	n, c := x.Shape[0], x.Shape[1]
	scale, err := ctx.channelFloats(in[1], c, "scale")
	if err != nil {
		return nil, err
	}
	bias, err := ctx.channelFloats(in[2], c, "B")
	if err != nil {
		return nil, err
	}
	eps := float64(ctx.attrFloat("epsilon", 1e-5))
	xv, inner, out, err := ctx.channelRows(x)
	if err != nil {
		return nil, err
	}
	for i := range n * c {
		row := xv[i*inner : i*inner+inner]
		var m, v float64
		for _, e := range row {
			m += e
		}
		m /= float64(max(inner, 1))
		for _, e := range row {
			v += (e - m) * (e - m)
		}
		v /= float64(max(inner, 1))
		ch := i % c
		s := scale[ch] / math.Sqrt(v+eps)
		for j, e := range row {
			setFloat(out, i*inner+j, (e-m)*s+bias[ch])
		}
	}
	return []*onnx.Tensor{out}, nil
}

func globalPool(isMax bool) Kernel {
	return func(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
		x, err := ctx.ncInput(in, 1)
		if err != nil {
			return nil, err
		}
		inner := prod(x.Shape[2:])
		if inner == 0 {
			return nil, ctx.errf("cannot pool over empty spatial dimensions %v", x.Shape)
		}
		shape := cloneShape(x.Shape)
		for k := 2; k < len(shape); k++ {
			shape[k] = 1
		}
		out, err := ctx.newTensor(x.DType, shape)
		if err != nil {
			return nil, err
		}
		xv, _ := x.AsFloat64s()
		for i := range x.Shape[0] * x.Shape[1] {
			row := xv[i*inner : i*inner+inner]
			v := row[0]
			if !isMax {
				v = 0
			}
			for _, e := range row {
				if isMax {
					v = math.Max(v, e)
				} else {
					v += e
				}
			}
			if !isMax {
				v /= float64(inner)
			}
			setFloat(out, i, v)
		}
		return []*onnx.Tensor{out}, nil
	}
}

// permuteView copies x, read under shape view (same element count) and
// permuted by perm, into a tensor of shape out.
func (ctx *Context) permuteView(x *onnx.Tensor, view, perm, out []int) (*onnx.Tensor, error) {
	vs := stridesOf(view)
	shape := make([]int, len(perm))
	src := make([]int, len(perm))
	for i, p := range perm {
		shape[i], src[i] = view[p], vs[p]
	}
	y, err := ctx.newTensor(x.DType, out)
	if err != nil {
		return nil, err
	}
	return y, ctx.run(y, x, walk{Shape: shape, SrcStrides: src, DstStrides: stridesOf(shape)})
}

// blockArgs checks DepthToSpace's and SpaceToDepth's one input, 4-D, and
// reads blocksize.
func (ctx *Context) blockArgs(in []*onnx.Tensor) (x *onnx.Tensor, n, c, h, w, b int, err error) {
	if err := ctx.checkInputs(in, 1, 1); err != nil {
		return nil, 0, 0, 0, 0, 0, err
	}
	x = in[0]
	if len(x.Shape) != 4 {
		return nil, 0, 0, 0, 0, 0, ctx.errf("input must be 4-D (N, C, H, W), got %v", x.Shape)
	}
	b = int(ctx.attrInt("blocksize", 0))
	if b <= 0 {
		return nil, 0, 0, 0, 0, 0, ctx.errf("blocksize must be positive, got %d", b)
	}
	return x, x.Shape[0], x.Shape[1], x.Shape[2], x.Shape[3], b, nil
}

func depthToSpace(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	x, n, c, h, w, b, err := ctx.blockArgs(in)
	if err != nil {
		return nil, err
	}
	if c%(b*b) != 0 {
		return nil, ctx.errf("channels %d not divisible by blocksize² %d", c, b*b)
	}
	cc := c / (b * b)
	out := []int{n, cc, h * b, w * b}
	switch mode := ctx.attrString("mode", "DCR"); mode {
	case "DCR":
		return oneOutput(ctx.permuteView(x, []int{n, b, b, cc, h, w}, []int{0, 3, 4, 1, 5, 2}, out))
	case "CRD":
		return oneOutput(ctx.permuteView(x, []int{n, cc, b, b, h, w}, []int{0, 1, 4, 2, 5, 3}, out))
	default:
		return nil, ctx.errf("unsupported mode %q", mode)
	}
}

func spaceToDepth(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	x, n, c, h, w, b, err := ctx.blockArgs(in)
	if err != nil {
		return nil, err
	}
	if h%b != 0 || w%b != 0 {
		return nil, ctx.errf("spatial size %dx%d not divisible by blocksize %d", h, w, b)
	}
	return oneOutput(ctx.permuteView(x, []int{n, c, h / b, b, w / b, b}, []int{0, 3, 5, 1, 2, 4}, []int{n, c * b * b, h / b, w / b}))
}

func reverseSequence(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	x, lens, err := ctx.dataAndInts(in, "sequence_lens")
	if err != nil {
		return nil, err
	}
	r := len(x.Shape)
	if r < 2 {
		return nil, ctx.errf("input must have rank ≥ 2, got %v", x.Shape)
	}
	bax, err := ctx.normAxis(ctx.attrInt("batch_axis", 1), r)
	if err != nil {
		return nil, err
	}
	tax, err := ctx.normAxis(ctx.attrInt("time_axis", 0), r)
	if err != nil {
		return nil, err
	}
	if bax == tax || (bax > 1 || tax > 1) {
		return nil, ctx.errf("batch_axis and time_axis must be 0 and 1 in some order")
	}
	if len(lens) != x.Shape[bax] {
		return nil, ctx.errf("sequence_lens has %d entries for a batch of %d", len(lens), x.Shape[bax])
	}
	xs := stridesOf(x.Shape)
	inner := prod(x.Shape[2:])
	out := x.Clone()
	for bi, l := range lens {
		if l < 0 || l > int64(x.Shape[tax]) {
			return nil, ctx.errf("sequence length %d out of range [0, %d]", l, x.Shape[tax])
		}
		for t := range int(l) {
			src := bi*xs[bax] + t*xs[tax]
			dst := bi*xs[bax] + (int(l)-1-t)*xs[tax]
			if err := ctx.run(out, x, walk{Shape: []int{inner}, SrcOff: src, SrcStrides: []int{1}, DstOff: dst, DstStrides: []int{1}}); err != nil {
				return nil, err
			}
		}
	}
	return []*onnx.Tensor{out}, nil
}
