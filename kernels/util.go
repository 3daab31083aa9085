package kernels

import (
	"fmt"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// errf returns an error naming the op and node the kernel computes. It
// wraps the errors among args (whatever their verb), so that a sentinel
// such as ErrTensorBudget survives a subgraph's or a caller's errf.
func (ctx *Context) errf(format string, args ...any) error {
	var wrapped []error
	for _, a := range args {
		if e, ok := a.(error); ok {
			wrapped = append(wrapped, e)
		}
	}
	return ctx.wrapErr(wrapped, fmt.Sprintf(format, args...))
}

// wrapErr returns an error with errf's prefix and message msg that wraps
// the errors in wrapped.
func (ctx *Context) wrapErr(wrapped []error, msg string) error {
	op, name := "?", ""
	if ctx != nil && ctx.Node != nil {
		op, name = ctx.Node.GetOpType(), ctx.Node.GetName()
	}
	if name != "" {
		msg = fmt.Sprintf("kernels: %s node %q: %s", op, name, msg)
	} else {
		msg = fmt.Sprintf("kernels: %s: %s", op, msg)
	}
	return &kernelError{msg: msg, wrapped: wrapped}
}

// kernelError is errf's error: a message and the errors it wraps.
type kernelError struct {
	msg     string
	wrapped []error
}

func (e *kernelError) Error() string   { return e.msg }
func (e *kernelError) Unwrap() []error { return e.wrapped }

// attrInt, attrFloat, attrInts and attrString read attributes of the node
// being computed; they tolerate a nil node so that kernels can be called
// directly from tests.
func (ctx *Context) attrInt(name string, def int64) int64 {
	if ctx == nil || ctx.Node == nil {
		return def
	}
	return onnx.AttrInt(ctx.Node, name, def)
}

func (ctx *Context) attrFloat(name string, def float32) float32 {
	if ctx == nil || ctx.Node == nil {
		return def
	}
	return onnx.AttrFloat(ctx.Node, name, def)
}

func (ctx *Context) attrInts(name string) ([]int64, bool) {
	if ctx == nil || ctx.Node == nil {
		return nil, false
	}
	a := onnx.Attr(ctx.Node, name)
	if a == nil {
		return nil, false
	}
	return a.Ints, true
}

func (ctx *Context) attrString(name string, def string) string {
	if ctx == nil || ctx.Node == nil {
		return def
	}
	return onnx.AttrString(ctx.Node, name, def)
}

// intsAttr reads an optional list attribute of n non-negative values
// (def for each when absent or empty).
func (ctx *Context) intsAttr(name string, n, def int) ([]int, error) {
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
		if x < 0 || x > MaxElements {
			return nil, ctx.errf("%s[%d] = %d is out of range", name, i, x)
		}
		out[i] = int(x)
	}
	return out, nil
}

func (ctx *Context) hasAttr(name string) bool {
	return ctx.attr(name) != nil
}

// attr returns the named attribute of the node, or nil.
func (ctx *Context) attr(name string) *onnxpb.AttributeProto {
	if ctx == nil || ctx.Node == nil {
		return nil
	}
	return onnx.Attr(ctx.Node, name)
}

// checkInputs validates the number of inputs and that the required ones
// (the first min) are present and well formed.
func (ctx *Context) checkInputs(in []*onnx.Tensor, min, max int) error {
	if len(in) < min || (max >= 0 && len(in) > max) {
		if max == min {
			return ctx.errf("want %d inputs, got %d", min, len(in))
		}
		if max < 0 {
			return ctx.errf("want at least %d inputs, got %d", min, len(in))
		}
		return ctx.errf("want %d to %d inputs, got %d", min, max, len(in))
	}
	for i, t := range in {
		if t == nil {
			if i < min {
				return ctx.errf("input %d is missing", i)
			}
			continue
		}
		if err := t.Check(); err != nil {
			return ctx.errf("input %d: %v", i, err)
		}
	}
	return nil
}

// halfPrologue opens a kernel whose first input may be float16 or
// bfloat16: it checks the inputs (checkInputs(in, min, max)) and, for a
// half first input, runs k on the inputs widened to float32 (viaFloat32).
// done reports that the kernel has its result: the error, or k's outputs.
func (ctx *Context) halfPrologue(in []*onnx.Tensor, min, max int, k Kernel) (out []*onnx.Tensor, done bool, err error) {
	if err := ctx.checkInputs(in, min, max); err != nil {
		return nil, true, err
	}
	if x := in[0]; x.DType == onnx.Float16 || x.DType == onnx.BFloat16 {
		out, err := viaFloat32(ctx, in, k)
		return out, true, err
	}
	return nil, false, nil
}

// checkPresent requires every input to be present (variadic ops).
func (ctx *Context) checkPresent(in []*onnx.Tensor) error {
	for i, t := range in {
		if t == nil {
			return ctx.errf("input %d is missing", i)
		}
	}
	return nil
}

// twoInputs checks a binary op's two inputs and that their types match.
func (ctx *Context) twoInputs(in []*onnx.Tensor) (a, b *onnx.Tensor, err error) {
	if err := ctx.checkInputs(in, 2, 2); err != nil {
		return nil, nil, err
	}
	a, b = in[0], in[1]
	if a.DType != b.DType {
		return nil, nil, ctx.errf("input types differ: %s and %s", a, b)
	}
	return a, b, nil
}

// sameTypeInputs checks the inputs of a variadic op (Sum, Max, Einsum, ...):
// at least one, all present, all of one type, which it returns.
func (ctx *Context) sameTypeInputs(in []*onnx.Tensor) (onnx.DataType, error) {
	if err := ctx.checkInputs(in, 1, -1); err != nil {
		return 0, err
	}
	if err := ctx.checkPresent(in); err != nil {
		return 0, err
	}
	dt := in[0].DType
	for i, t := range in {
		if t.DType != dt {
			return 0, ctx.errf("input %d is %s, input 0 is %s", i, onnx.TypeName(t.DType), onnx.TypeName(dt))
		}
	}
	return dt, nil
}

// opt returns input i or nil when absent.
func opt(in []*onnx.Tensor, i int) *onnx.Tensor {
	if i < len(in) {
		return in[i]
	}
	return nil
}

// normAxis maps a possibly negative axis into [0, rank).
func (ctx *Context) normAxis(axis int64, rank int) (int, error) {
	if axis < -int64(rank) || axis >= int64(rank) {
		return 0, ctx.errf("axis %d out of range for rank %d", axis, rank)
	}
	if axis < 0 {
		axis += int64(rank)
	}
	return int(axis), nil
}

// markAxis maps axis (possibly negative) into [0, len(seen)) as normAxis
// does, refuses an axis already seen and marks it seen.
func (ctx *Context) markAxis(axis int64, seen []bool) (int, error) {
	k, err := ctx.normAxis(axis, len(seen))
	if err != nil {
		return 0, err
	}
	if seen[k] {
		return 0, ctx.errf("axis %d repeated", axis)
	}
	seen[k] = true
	return k, nil
}

// axisIndex checks index v along axis (of size d) and counts a negative
// one from the end.
func (ctx *Context) axisIndex(v int64, axis, d int) (int, error) {
	if v < -int64(d) || v >= int64(d) {
		return 0, ctx.errf("index %d out of range for axis %d of size %d", v, axis, d)
	}
	if v < 0 {
		v += int64(d)
	}
	return int(v), nil
}

// nextIndex advances the row-major multi-index pos within shape by one
// (after the last index, back to all zeros).
func nextIndex(pos, shape []int) {
	for k := len(pos) - 1; k >= 0; k-- {
		pos[k]++
		if pos[k] < shape[k] {
			return
		}
		pos[k] = 0
	}
}

// intsInput reads an integer tensor input (shape, axes, pads, ...) as int64.
func (ctx *Context) intsInput(t *onnx.Tensor, what string) ([]int64, error) {
	v, err := t.AsInt64s()
	if err != nil || t.DType == onnx.Bool {
		return nil, ctx.errf("%s must be an integer tensor, got %s", what, t)
	}
	return v, nil
}

// floatInput checks that in is one float tensor and returns it.
func (ctx *Context) floatInput(in []*onnx.Tensor) (*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 1, 1); err != nil {
		return nil, err
	}
	if x := in[0]; !onnx.IsFloat(x.DType) {
		return nil, ctx.errf("input must be a float tensor, got %s", x)
	}
	return in[0], nil
}

// dataAndInts checks that in is a data input and an integer input (K,
// indices, axis, shape, ...) named what, and reads the latter as int64.
func (ctx *Context) dataAndInts(in []*onnx.Tensor, what string) (*onnx.Tensor, []int64, error) {
	if err := ctx.checkInputs(in, 2, 2); err != nil {
		return nil, nil, err
	}
	v, err := ctx.intsInput(in[1], what)
	return in[0], v, err
}

// dataAndShape is dataAndInts for a shape input, read by shapeInput.
func (ctx *Context) dataAndShape(in []*onnx.Tensor, what string) (*onnx.Tensor, []int, error) {
	if err := ctx.checkInputs(in, 2, 2); err != nil {
		return nil, nil, err
	}
	s, err := ctx.shapeInput(in[1], what)
	return in[0], s, err
}

// prod returns the product of dims.
func prod(dims []int) int {
	n := 1
	for _, d := range dims {
		n *= d
	}
	return n
}

// stridesOf returns the row-major element strides of shape.
func stridesOf(shape []int) []int {
	s := make([]int, len(shape))
	acc := 1
	for i := len(shape) - 1; i >= 0; i-- {
		s[i] = acc
		acc *= shape[i]
	}
	return s
}

func cloneShape(s []int) []int { return append([]int{}, s...) }

// MaxElements bounds the size of any tensor a kernel allocates, so that a
// malformed shape (a huge Expand, Tile, ConstantOfShape, Range or
// broadcast) is an error rather than an out-of-memory crash.
const MaxElements = 1 << 31

// newTensor allocates a zero tensor; shape must be valid.
func (ctx *Context) newTensor(dt onnx.DataType, shape []int) (*onnx.Tensor, error) {
	if err := ctx.budget("output", dt, shape); err != nil {
		return nil, err
	}
	if n := onnx.NumElements(shape); n < 0 || n > MaxElements {
		return nil, ctx.errf("invalid output shape %v (more than %d elements)", shape, MaxElements)
	}
	t, err := onnx.NewZeros(dt, shape)
	if err != nil {
		return nil, ctx.errf("%v", err)
	}
	return t, nil
}

// view returns a tensor sharing t's data under another shape (same element
// count). Kernels use it to return inputs reshaped without copying; outputs
// may alias inputs because no kernel modifies its inputs.
func view(t *onnx.Tensor, shape []int) *onnx.Tensor {
	return &onnx.Tensor{DType: t.DType, Shape: shape, Data: t.Data}
}

// scalar1 returns a rank-0 tensor of type dt holding v.
func scalarOf(dt onnx.DataType, v float64) (*onnx.Tensor, error) {
	t, err := onnx.NewZeros(dt, []int{})
	if err != nil {
		return nil, err
	}
	setFloat(t, 0, v)
	return t, nil
}

// setFloat stores v at element i of a numeric or bool tensor.
func setFloat(t *onnx.Tensor, i int, v float64) {
	switch d := t.Data.(type) {
	case []float32:
		d[i] = float32(v)
	case []float64:
		d[i] = v
	case []int8:
		d[i] = int8(v)
	case []uint8:
		d[i] = uint8(v)
	case []int16:
		d[i] = int16(v)
	case []uint16:
		switch t.DType {
		case onnx.Float16:
			d[i] = onnx.FloatToHalf(float32(v))
		case onnx.BFloat16:
			d[i] = onnx.FloatToBFloat16(float32(v))
		default:
			d[i] = uint16(v)
		}
	case []int32:
		d[i] = int32(v)
	case []uint32:
		d[i] = uint32(v)
	case []int64:
		d[i] = int64(v)
	case []uint64:
		d[i] = uint64(v)
	case []bool:
		d[i] = v != 0
	}
}

func fmtErr(format string, args ...any) error { return fmt.Errorf(format, args...) }
