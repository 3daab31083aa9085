package kernels

import (
	"github.com/linearize/linearize/onnx"
)

// Shape ops: the ones that only look at or rearrange shapes.

func shapeOp(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 1, 1); err != nil {
		return nil, err
	}
	r := len(in[0].Shape)
	clampIdx := func(v int64) int {
		if v < 0 {
			v += int64(r)
		}
		return int(max(0, min(v, int64(r))))
	}
	start, end := clampIdx(ctx.attrInt("start", 0)), clampIdx(ctx.attrInt("end", int64(r)))
	out := []int64{}
	for i := start; i < end; i++ {
		out = append(out, int64(in[0].Shape[i]))
	}
	return []*onnx.Tensor{onnx.NewInt64([]int{len(out)}, out)}, nil
}

func sizeOp(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 1, 1); err != nil {
		return nil, err
	}
	return []*onnx.Tensor{onnx.NewInt64([]int{}, []int64{int64(in[0].Len())})}, nil
}

func reshape(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	x, spec, err := ctx.dataAndInts(in, "shape")
	if err != nil {
		return nil, err
	}
	if len(in[1].Shape) != 1 {
		return nil, ctx.errf("shape must be 1-D, got %v", in[1].Shape)
	}
	allowzero := ctx.attrInt("allowzero", 0) != 0
	shape := make([]int, len(spec))
	infer := -1
	known := 1
	for i, v := range spec {
		switch {
		case v == -1:
			if infer >= 0 {
				return nil, ctx.errf("shape %v has more than one -1", spec)
			}
			infer = i
			continue
		case v == 0 && !allowzero:
			if i >= len(x.Shape) {
				return nil, ctx.errf("shape %v copies dimension %d of an input of rank %d", spec, i, len(x.Shape))
			}
			shape[i] = x.Shape[i]
		case v < 0:
			return nil, ctx.errf("invalid dimension %d in shape %v", v, spec)
		default:
			shape[i] = int(v)
		}
		known *= shape[i]
	}
	n := x.Len()
	if infer >= 0 {
		if known == 0 || n%known != 0 {
			return nil, ctx.errf("cannot reshape %v to %v", x.Shape, spec)
		}
		shape[infer] = n / known
	}
	if prod(shape) != n {
		return nil, ctx.errf("cannot reshape %v (%d elements) to %v", x.Shape, n, spec)
	}
	return []*onnx.Tensor{view(x, shape)}, nil
}

func flatten(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 1, 1); err != nil {
		return nil, err
	}
	x := in[0]
	r := len(x.Shape)
	axis := ctx.attrInt("axis", 1)
	if axis < -int64(r) || axis > int64(r) {
		return nil, ctx.errf("axis %d out of range for rank %d", axis, r)
	}
	if axis < 0 {
		axis += int64(r)
	}
	a := int(axis)
	return []*onnx.Tensor{view(x, []int{prod(x.Shape[:a]), prod(x.Shape[a:])})}, nil
}

// axesArg reads the axes of Squeeze/Unsqueeze/Reduce*: the attribute
// before opset inputFrom, the optional input i from then on.
func (ctx *Context) axesArg(in []*onnx.Tensor, i int, inputFrom int64) ([]int64, bool, error) {
	if ctx.Opset >= inputFrom || (ctx.Opset == 0 && len(in) > i) {
		t := opt(in, i)
		if t == nil {
			return nil, false, nil
		}
		v, err := ctx.intsInput(t, "axes")
		return v, true, err
	}
	if opt(in, i) != nil {
		return nil, false, ctx.errf("axes is an attribute before opset %d, not an input", inputFrom)
	}
	v, ok := ctx.attrInts("axes")
	return v, ok, nil
}

// squeezeArgs reads Squeeze's and Unsqueeze's input and axes (an input
// from opset 13, before it an attribute); given is false when absent.
func (ctx *Context) squeezeArgs(in []*onnx.Tensor) (x *onnx.Tensor, axes []int64, given bool, err error) {
	if err := ctx.checkInputs(in, 1, 2); err != nil {
		return nil, nil, false, err
	}
	axes, given, err = ctx.axesArg(in, 1, 13)
	return in[0], axes, given, err
}

func squeeze(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	x, axes, given, err := ctx.squeezeArgs(in)
	if err != nil {
		return nil, err
	}
	drop := make([]bool, len(x.Shape))
	if !given {
		for i, d := range x.Shape {
			drop[i] = d == 1
		}
	}
	for _, a := range axes {
		k, err := ctx.normAxis(a, len(x.Shape))
		if err != nil {
			return nil, err
		}
		if x.Shape[k] != 1 {
			return nil, ctx.errf("cannot squeeze axis %d of size %d", a, x.Shape[k])
		}
		drop[k] = true
	}
	shape := []int{}
	for i, d := range x.Shape {
		if !drop[i] {
			shape = append(shape, d)
		}
	}
	return []*onnx.Tensor{view(x, shape)}, nil
}

func unsqueeze(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	x, axes, given, err := ctx.squeezeArgs(in)
	if err != nil {
		return nil, err
	}
	if !given {
		return nil, ctx.errf("axes are required")
	}
	r := len(x.Shape) + len(axes)
	ins := make([]bool, r)
	for _, a := range axes {
		if _, err := ctx.markAxis(a, ins); err != nil {
			return nil, err
		}
	}
	shape := make([]int, r)
	j := 0
	for i := range shape {
		if ins[i] {
			shape[i] = 1
		} else {
			shape[i] = x.Shape[j]
			j++
		}
	}
	return []*onnx.Tensor{view(x, shape)}, nil
}

func constant(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 0, 0); err != nil {
		return nil, err
	}
	if ctx == nil || ctx.Node == nil {
		return nil, ctx.errf("no node")
	}
	t, err := onnx.ConstantNodeValue(ctx.Node)
	if err != nil {
		return nil, ctx.errf("%v", err)
	}
	return []*onnx.Tensor{t}, nil
}

func constantOfShape(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 1, 1); err != nil {
		return nil, err
	}
	spec, err := ctx.intsInput(in[0], "shape")
	if err != nil {
		return nil, err
	}
	shape := make([]int, len(spec))
	for i, v := range spec {
		if v < 0 {
			return nil, ctx.errf("negative dimension in shape %v", spec)
		}
		shape[i] = int(v)
	}
	val := &onnx.Tensor{DType: onnx.Float, Shape: []int{1}, Data: []float32{0}}
	if a := ctx.attr("value"); a != nil {
		val, err = onnx.DecodeTensor(a.GetT())
		if err != nil {
			return nil, ctx.errf("value: %v", err)
		}
		if val.Len() != 1 {
			return nil, ctx.errf("value must have one element, got %v", val.Shape)
		}
	}
	out, err := ctx.newTensor(val.DType, shape)
	if err != nil {
		return nil, err
	}
	w := walk{Shape: shape, SrcStrides: make([]int, len(shape)), DstStrides: stridesOf(shape)}
	if err := ctx.run(out, val, w); err != nil {
		return nil, err
	}
	return []*onnx.Tensor{out}, nil
}
