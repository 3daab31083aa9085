package kernels

import (
	"math"

	"github.com/linearize/linearize/onnx"
)

// Less common elementwise ops: Mod, BitShift, Celu, Shrink, Hardmax,
// EyeLike.

func init() {
	Register("", "Mod", 10, mod)
	Register("", "BitShift", 11, bitShift)
	Register("", "Celu", 12, unaryFloat(func(ctx *Context) (func(float64) float64, error) {
		alpha := float64(ctx.attrFloat("alpha", 1))
		if alpha == 0 {
			return nil, ctx.errf("alpha must be nonzero")
		}
		return func(x float64) float64 { return max(0, x) + min(0, alpha*(math.Exp(x/alpha)-1)) }, nil
	}))
	Register("", "Shrink", 9, unaryFloat(func(ctx *Context) (func(float64) float64, error) {
		bias, lambd := float64(ctx.attrFloat("bias", 0)), float64(ctx.attrFloat("lambd", 0.5))
		return func(x float64) float64 {
			switch {
			case x < -lambd:
				return x + bias
			case x > lambd:
				return x - bias
			}
			return 0
		}, nil
	}))
	Register("", "Hardmax", 1, hardmax)
	Register("", "EyeLike", 9, eyeLike)
}

func modInt[T integer](a, b T, fmod bool) T {
	r := a % b
	if !fmod && r != 0 && (r < 0) != (b < 0) {
		r += b
	}
	return r
}

// mod is the remainder: with fmod=0 (integers only) it takes the sign of
// the divisor, like Python's %; with fmod=1 the sign of the dividend.
func mod(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	a, b, err := ctx.twoInputs(in)
	if err != nil {
		return nil, err
	}
	fmod := ctx.attrInt("fmod", 0) != 0
	if onnx.IsFloat(a.DType) {
		if !fmod {
			return nil, ctx.errf("fmod=0 is not defined for floating-point inputs")
		}
		if a.DType == onnx.Float16 || a.DType == onnx.BFloat16 {
			return viaFloat32(ctx, in, mod)
		}
	} else {
		bv, err := b.AsInt64s()
		if err != nil {
			return nil, ctx.errf("%v", err)
		}
		for _, v := range bv {
			if v == 0 {
				return nil, ctx.errf("integer modulo by zero")
			}
		}
	}
	p, err := ctx.plan2(a.Shape, b.Shape, a.DType)
	if err != nil {
		return nil, err
	}
	op := opMod
	if fmod {
		op = opFmod
	}
	n, err := ctx.numericFor(a.DType, numbers)
	if err != nil {
		return nil, err
	}
	out, _ := n.arith(p, a, b, op, ctx.threads())
	return []*onnx.Tensor{{DType: a.DType, Shape: p.Out, Data: out}}, nil
}

func bitShift(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	a, b, err := ctx.twoInputs(in)
	if err != nil {
		return nil, err
	}
	var op int
	switch dir := ctx.attrString("direction", ""); dir {
	case "LEFT":
		op = opShl
	case "RIGHT":
		op = opShr
	default:
		return nil, ctx.errf("direction must be LEFT or RIGHT, got %q", dir)
	}
	p, err := ctx.plan2(a.Shape, b.Shape, a.DType)
	if err != nil {
		return nil, err
	}
	n := numericOf(a.DType, dtypesOf(onnx.Uint8, onnx.Uint16, onnx.Uint32, onnx.Uint64))
	if n == nil {
		return nil, ctx.errf("inputs must be unsigned integers, got %s", onnx.TypeName(a.DType))
	}
	out, _ := n.arith(p, a, b, op, ctx.threads())
	return []*onnx.Tensor{{DType: a.DType, Shape: p.Out, Data: out}}, nil
}

// hardmax puts 1 at the first maximum of each group (Softmax's grouping:
// flattened at axis before opset 13, the single axis from 13).
func hardmax(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	x, err := ctx.floatInput(in)
	if err != nil {
		return nil, err
	}
	outer, d, inner, err := ctx.softmaxGroups(x.Shape)
	if err != nil {
		return nil, err
	}
	v, _ := x.AsFloat64s()
	out, err := ctx.newTensor(x.DType, x.Shape)
	if err != nil {
		return nil, err
	}
	if d == 0 {
		return []*onnx.Tensor{out}, nil
	}
	for o := range outer {
		for i := range inner {
			base := o*d*inner + i
			best := 0
			for j := 1; j < d; j++ {
				if v[base+j*inner] > v[base+best*inner] {
					best = j
				}
			}
			setFloat(out, base+best*inner, 1)
		}
	}
	return []*onnx.Tensor{out}, nil
}

func eyeLike(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 1, 1); err != nil {
		return nil, err
	}
	x := in[0]
	if len(x.Shape) != 2 {
		return nil, ctx.errf("input must be 2-D, got %v", x.Shape)
	}
	dt := x.DType
	if ctx.hasAttr("dtype") {
		dt = onnx.DataType(ctx.attrInt("dtype", 0))
	}
	out, err := ctx.newTensor(dt, x.Shape)
	if err != nil {
		return nil, err
	}
	k := int(ctx.attrInt("k", 0))
	rows, cols := x.Shape[0], x.Shape[1]
	for i := range rows {
		if j := i + k; j >= 0 && j < cols {
			setFloat(out, i*cols+j, 1)
		}
	}
	return []*onnx.Tensor{out}, nil
}
