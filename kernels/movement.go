package kernels

import (
	"github.com/linearize/linearize/onnx"
)

// Data-movement ops, each a few strided walks (see walk).

func (ctx *Context) run(dst, src *onnx.Tensor, w walk) error {
	if err := walkAny(dst, src, w); err != nil {
		return ctx.errf("%v", err)
	}
	return nil
}

func transpose(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 1, 1); err != nil {
		return nil, err
	}
	x := in[0]
	r := len(x.Shape)
	perm, ok := ctx.attrInts("perm")
	if !ok {
		perm = make([]int64, r)
		for i := range perm {
			perm[i] = int64(r - 1 - i)
		}
	}
	if len(perm) != r {
		return nil, ctx.errf("perm %v does not match rank %d", perm, r)
	}
	seen := make([]bool, r)
	shape := make([]int, r)
	src := make([]int, r)
	xs := stridesOf(x.Shape)
	for i, p := range perm {
		if p < 0 || p >= int64(r) || seen[p] {
			return nil, ctx.errf("invalid perm %v", perm)
		}
		seen[p] = true
		shape[i] = x.Shape[p]
		src[i] = xs[p]
	}
	out, err := ctx.newTensor(x.DType, shape)
	if err != nil {
		return nil, err
	}
	return []*onnx.Tensor{out}, ctx.run(out, x, walk{Shape: shape, SrcStrides: src, DstStrides: stridesOf(shape)})
}

func concat(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 1, -1); err != nil {
		return nil, err
	}
	if err := ctx.checkPresent(in); err != nil {
		return nil, err
	}
	if !ctx.hasAttr("axis") {
		return nil, ctx.errf("missing attribute axis")
	}
	x0 := in[0]
	r := len(x0.Shape)
	axis, err := ctx.normAxis(ctx.attrInt("axis", 0), r)
	if err != nil {
		return nil, err
	}
	shape := cloneShape(x0.Shape)
	shape[axis] = 0
	for i, t := range in {
		if t.DType != x0.DType || len(t.Shape) != r {
			return nil, ctx.errf("input %d is %s, input 0 is %s", i, t, x0)
		}
		for k := range t.Shape {
			if k != axis && t.Shape[k] != x0.Shape[k] {
				return nil, ctx.errf("input %d has shape %v, input 0 has %v", i, t.Shape, x0.Shape)
			}
		}
		shape[axis] += t.Shape[axis]
	}
	out, err := ctx.newTensor(x0.DType, shape)
	if err != nil {
		return nil, err
	}
	ds := stridesOf(shape)
	off := 0
	for _, t := range in {
		if err := ctx.run(out, t, walk{Shape: t.Shape, SrcStrides: stridesOf(t.Shape), DstOff: off * ds[axis], DstStrides: ds}); err != nil {
			return nil, err
		}
		off += t.Shape[axis]
	}
	return []*onnx.Tensor{out}, nil
}

// sliceRange returns the first index and the count of the slice
// [start, end) by step (nonzero) of an axis of size d: negative bounds
// count from the end, and the bounds are clamped to the axis.
func sliceRange(start, end, step, d int64) (s, n int64) {
	s, e := start, end
	if s < 0 {
		s += d
	}
	if e < 0 {
		e += d
	}
	if step > 0 {
		s = max(0, min(s, d))
		e = max(0, min(e, d))
		if e > s {
			n = (e - s + step - 1) / step
		}
	} else if d > 0 {
		s = max(0, min(s, d-1))
		e = max(-1, min(e, d-1))
		if s > e {
			n = (s - e - step - 1) / -step
		}
	}
	return s, n
}

func slice(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	var starts, ends, axes, steps []int64
	var err error
	if ctx.Opset < 10 && ctx.Opset != 0 {
		if err := ctx.checkInputs(in, 1, 1); err != nil {
			return nil, err
		}
		starts, _ = ctx.attrInts("starts")
		ends, _ = ctx.attrInts("ends")
		axes, _ = ctx.attrInts("axes")
	} else {
		if err := ctx.checkInputs(in, 3, 5); err != nil {
			return nil, err
		}
		if starts, err = ctx.intsInput(in[1], "starts"); err != nil {
			return nil, err
		}
		if ends, err = ctx.intsInput(in[2], "ends"); err != nil {
			return nil, err
		}
		if t := opt(in, 3); t != nil {
			if axes, err = ctx.intsInput(t, "axes"); err != nil {
				return nil, err
			}
		}
		if t := opt(in, 4); t != nil {
			if steps, err = ctx.intsInput(t, "steps"); err != nil {
				return nil, err
			}
		}
	}
	x := in[0]
	r := len(x.Shape)
	if len(starts) != len(ends) || (axes != nil && len(axes) != len(starts)) || (steps != nil && len(steps) != len(starts)) {
		return nil, ctx.errf("starts, ends, axes and steps differ in length")
	}
	shape := cloneShape(x.Shape)
	xs := stridesOf(x.Shape)
	src := cloneShape(xs)
	off := 0
	done := make([]bool, r)
	for i := range starts {
		a := int64(i)
		if axes != nil {
			a = axes[i]
		}
		k, err := ctx.markAxis(a, done)
		if err != nil {
			return nil, err
		}
		step := int64(1)
		if steps != nil {
			step = steps[i]
		}
		if step == 0 {
			return nil, ctx.errf("step is 0")
		}
		s, n := sliceRange(starts[i], ends[i], step, int64(x.Shape[k]))
		shape[k] = int(n)
		if n > 0 {
			off += int(s) * xs[k]
		}
		src[k] = xs[k] * int(step)
	}
	out, err := ctx.newTensor(x.DType, shape)
	if err != nil {
		return nil, err
	}
	return []*onnx.Tensor{out}, ctx.run(out, x, walk{Shape: shape, SrcOff: off, SrcStrides: src, DstStrides: stridesOf(shape)})
}

func split(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 1, 2); err != nil {
		return nil, err
	}
	x := in[0]
	axis, err := ctx.normAxis(ctx.attrInt("axis", 0), len(x.Shape))
	if err != nil {
		return nil, err
	}
	d := x.Shape[axis]
	nout := 1
	if ctx != nil && ctx.Node != nil {
		nout = len(ctx.Node.Output)
	}
	var sizes []int64
	if ctx.Opset >= 13 || ctx.Opset == 0 {
		if t := opt(in, 1); t != nil {
			if sizes, err = ctx.intsInput(t, "split"); err != nil {
				return nil, err
			}
		}
	} else {
		sizes, _ = ctx.attrInts("split")
	}
	if sizes == nil {
		if ctx.Opset >= 18 {
			if !ctx.hasAttr("num_outputs") {
				return nil, ctx.errf("either split or num_outputs is required")
			}
			nout = int(ctx.attrInt("num_outputs", 0))
			if nout <= 0 {
				return nil, ctx.errf("num_outputs must be positive")
			}
			// Chunks of ceil(d/n); the last takes the rest.
			c := (d + nout - 1) / nout
			for rest := d; len(sizes) < nout; rest -= c {
				sizes = append(sizes, int64(max(0, min(c, rest))))
			}
		} else {
			if d%nout != 0 {
				return nil, ctx.errf("dimension %d of size %d does not split evenly into %d outputs", axis, d, nout)
			}
			for range nout {
				sizes = append(sizes, int64(d/nout))
			}
		}
	}
	if ctx != nil && ctx.Node != nil && len(ctx.Node.Output) != len(sizes) {
		return nil, ctx.errf("%d split sizes for %d outputs", len(sizes), len(ctx.Node.Output))
	}
	total := int64(0)
	for _, s := range sizes {
		if s < 0 {
			return nil, ctx.errf("negative split size in %v", sizes)
		}
		total += s
	}
	if total != int64(d) {
		return nil, ctx.errf("split sizes %v do not sum to dimension %d of size %d", sizes, axis, d)
	}
	xs := stridesOf(x.Shape)
	outs := make([]*onnx.Tensor, len(sizes))
	off := 0
	for i, s := range sizes {
		shape := cloneShape(x.Shape)
		shape[axis] = int(s)
		o, err := ctx.newTensor(x.DType, shape)
		if err != nil {
			return nil, err
		}
		if err := ctx.run(o, x, walk{Shape: shape, SrcOff: off * xs[axis], SrcStrides: xs, DstStrides: stridesOf(shape)}); err != nil {
			return nil, err
		}
		off += int(s)
		outs[i] = o
	}
	return outs, nil
}

// shapeInput reads a 1-D shape input as non-negative ints.
func (ctx *Context) shapeInput(t *onnx.Tensor, what string) ([]int, error) {
	v, err := ctx.intsInput(t, what)
	if err != nil {
		return nil, err
	}
	if len(t.Shape) != 1 {
		return nil, ctx.errf("%s must be 1-D, got %v", what, t.Shape)
	}
	s := make([]int, len(v))
	for i, d := range v {
		if d < 0 {
			return nil, ctx.errf("negative value in %s %v", what, v)
		}
		s[i] = int(d)
	}
	return s, nil
}

func expand(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	x, spec, err := ctx.dataAndShape(in, "shape")
	if err != nil {
		return nil, err
	}
	shape, err := broadcastShapes(x.Shape, spec)
	if err != nil {
		return nil, ctx.errf("%v", err)
	}
	out, err := ctx.newTensor(x.DType, shape)
	if err != nil {
		return nil, err
	}
	return []*onnx.Tensor{out}, ctx.run(out, x, walk{Shape: shape, SrcStrides: bstrides(x.Shape, shape), DstStrides: stridesOf(shape)})
}

func tile(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	x, reps, err := ctx.dataAndShape(in, "repeats")
	if err != nil {
		return nil, err
	}
	r := len(x.Shape)
	if len(reps) != r {
		return nil, ctx.errf("repeats %v do not match rank %d", reps, r)
	}
	// Walk the output as [rep0, d0, rep1, d1, ...] reading x with stride 0
	// along the repetitions.
	shape := make([]int, r)
	wshape := make([]int, 0, 2*r)
	wsrc := make([]int, 0, 2*r)
	xs := stridesOf(x.Shape)
	for k := range r {
		shape[k] = x.Shape[k] * reps[k]
		wshape = append(wshape, reps[k], x.Shape[k])
		wsrc = append(wsrc, 0, xs[k])
	}
	out, err := ctx.newTensor(x.DType, shape)
	if err != nil {
		return nil, err
	}
	return []*onnx.Tensor{out}, ctx.run(out, x, walk{Shape: wshape, SrcStrides: wsrc, DstStrides: stridesOf(wshape)})
}

func gather(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	x, idx, err := ctx.dataAndInts(in, "indices")
	if err != nil {
		return nil, err
	}
	r := len(x.Shape)
	axis, err := ctx.normAxis(ctx.attrInt("axis", 0), r)
	if err != nil {
		return nil, err
	}
	d := x.Shape[axis]
	outer, inner := prod(x.Shape[:axis]), prod(x.Shape[axis+1:])
	shape := append(append(cloneShape(x.Shape[:axis]), in[1].Shape...), x.Shape[axis+1:]...)
	out, err := ctx.newTensor(x.DType, shape)
	if err != nil {
		return nil, err
	}
	n := len(idx)
	for j, v := range idx {
		a, err := ctx.axisIndex(v, axis, d)
		if err != nil {
			return nil, err
		}
		w := walk{
			Shape:      []int{outer, inner},
			SrcOff:     a * inner,
			SrcStrides: []int{d * inner, 1},
			DstOff:     j * inner,
			DstStrides: []int{n * inner, 1},
		}
		if err := ctx.run(out, x, w); err != nil {
			return nil, err
		}
	}
	return []*onnx.Tensor{out}, nil
}

func gatherElements(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 2, 2); err != nil {
		return nil, err
	}
	x, it := in[0], in[1]
	idx, err := ctx.intsInput(it, "indices")
	if err != nil {
		return nil, err
	}
	r := len(x.Shape)
	if len(it.Shape) != r {
		return nil, ctx.errf("indices rank %d differs from data rank %d", len(it.Shape), r)
	}
	axis, err := ctx.normAxis(ctx.attrInt("axis", 0), r)
	if err != nil {
		return nil, err
	}
	out, err := ctx.newTensor(x.DType, it.Shape)
	if err != nil {
		return nil, err
	}
	xs := stridesOf(x.Shape)
	pos := make([]int, r)
	d := x.Shape[axis]
	for i, v := range idx {
		a, err := ctx.axisIndex(v, axis, d)
		if err != nil {
			return nil, err
		}
		src := 0
		for k := range r {
			p := pos[k]
			if k == axis {
				p = a
			} else if p >= x.Shape[k] {
				return nil, ctx.errf("indices shape %v exceeds data shape %v", it.Shape, x.Shape)
			}
			src += p * xs[k]
		}
		if err := ctx.run(out, x, walk{Shape: []int{}, SrcOff: src, DstOff: i}); err != nil {
			return nil, err
		}
		nextIndex(pos, it.Shape)
	}
	return []*onnx.Tensor{out}, nil
}

func pad(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	var pads []int64
	var cval *onnx.Tensor
	var axes []int64
	var err error
	if ctx.Opset < 11 && ctx.Opset != 0 {
		if err := ctx.checkInputs(in, 1, 1); err != nil {
			return nil, err
		}
		pads, _ = ctx.attrInts("pads")
		if v := ctx.attrFloat("value", 0); v != 0 {
			if cval, err = scalarOf(in[0].DType, float64(v)); err != nil {
				return nil, ctx.errf("%v", err)
			}
		}
	} else {
		if err := ctx.checkInputs(in, 2, 4); err != nil {
			return nil, err
		}
		if pads, err = ctx.intsInput(in[1], "pads"); err != nil {
			return nil, err
		}
		cval = opt(in, 2)
		if t := opt(in, 3); t != nil {
			if axes, err = ctx.intsInput(t, "axes"); err != nil {
				return nil, err
			}
		}
	}
	mode := ctx.attrString("mode", "constant")
	switch mode {
	case "constant", "edge", "reflect", "wrap":
	default:
		return nil, ctx.errf("unsupported mode %q", mode)
	}
	x := in[0]
	r := len(x.Shape)
	if axes == nil {
		for k := range r {
			axes = append(axes, int64(k))
		}
	}
	if len(pads) != 2*len(axes) {
		return nil, ctx.errf("pads %v do not match %d axes", pads, len(axes))
	}
	before, after := make([]int, r), make([]int, r)
	for i, a := range axes {
		k, err := ctx.normAxis(a, r)
		if err != nil {
			return nil, err
		}
		before[k], after[k] = int(pads[i]), int(pads[i+len(axes)])
	}
	shape := make([]int, r)
	// The copied block: negative pads crop the input.
	inner := make([]int, r)
	srcOff, dstOff := 0, 0
	xs := stridesOf(x.Shape)
	for k := range r {
		shape[k] = x.Shape[k] + before[k] + after[k]
		if shape[k] < 0 {
			return nil, ctx.errf("pads %v make dimension %d negative", pads, k)
		}
		inner[k] = x.Shape[k] - max(0, -before[k]) - max(0, -after[k])
		if inner[k] < 0 {
			inner[k] = 0
		}
	}
	ds := stridesOf(shape)
	for k := range r {
		srcOff += max(0, -before[k]) * xs[k]
		dstOff += max(0, before[k]) * ds[k]
	}
	out, err := ctx.newTensor(x.DType, shape)
	if err != nil {
		return nil, err
	}
	if mode != "constant" {
		idx, err := ctx.padIndex(x.Shape, shape, before, mode)
		if err != nil {
			return nil, err
		}
		if err := gatherIndex(out, x, idx); err != nil {
			return nil, ctx.errf("%v", err)
		}
		return []*onnx.Tensor{out}, nil
	}
	if cval != nil {
		if cval.DType != x.DType || cval.Len() != 1 {
			return nil, ctx.errf("constant_value must be a scalar of the input's type, got %s", cval)
		}
		if err := ctx.run(out, cval, walk{Shape: shape, SrcStrides: make([]int, r), DstStrides: ds}); err != nil {
			return nil, err
		}
	}
	return []*onnx.Tensor{out}, ctx.run(out, x, walk{Shape: inner, SrcOff: srcOff, SrcStrides: xs, DstOff: dstOff, DstStrides: ds})
}

// padIndex maps every output element of an edge/reflect/wrap Pad to the
// input element it copies.
func (ctx *Context) padIndex(in, out, before []int, mode string) ([]int, error) {
	r := len(in)
	// Per dimension, the source coordinate of each output coordinate.
	src := make([][]int, r)
	for k := range r {
		d := in[k]
		if d == 0 && out[k] > 0 {
			return nil, ctx.errf("cannot %s-pad an empty dimension", mode)
		}
		if d == 1 {
			src[k] = make([]int, out[k]) // every mode repeats a single element
			continue
		}
		src[k] = make([]int, out[k])
		for o := range out[k] {
			i := o - before[k]
			switch mode {
			case "edge":
				i = max(0, min(i, d-1))
			case "wrap":
				i = ((i % d) + d) % d
			case "reflect":
				period := 2 * (d - 1)
				i = ((i % period) + period) % period
				if i >= d {
					i = period - i
				}
			}
			src[k][o] = i
		}
	}
	xs := stridesOf(in)
	n := prod(out)
	if err := ctx.budgetBytes("index", int64(n), 8); err != nil {
		return nil, err
	}
	idx := make([]int, n)
	pos := make([]int, r)
	for j := range n {
		s := 0
		for k := range r {
			s += src[k][pos[k]] * xs[k]
		}
		idx[j] = s
		nextIndex(pos, out)
	}
	return idx, nil
}

// gatherIndex sets dst[i] = src[idx[i]]; dst and src have the same type.
func gatherIndex(dst, src *onnx.Tensor, idx []int) error {
	e, err := elemsFor(dst)
	if err == nil {
		e.gather(dst.Data, src.Data, idx)
	}
	return err
}
