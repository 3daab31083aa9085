package kernels

import (
	"math"

	"github.com/linearize/linearize/onnx"
)

// Unary elementwise ops.

func init() {
	unaryFloats := map[string]func(float64) float64{
		"Sqrt":       math.Sqrt,
		"Reciprocal": func(x float64) float64 { return 1 / x },
		"Exp":        math.Exp,
		"Log":        math.Log,
		"Erf":        math.Erf,
		"Tanh":       math.Tanh,
		"Sigmoid":    sigmoid64,
		"Floor":      math.Floor,
		"Ceil":       math.Ceil,
		"Round":      math.RoundToEven,
		"Sin":        math.Sin,
		"Cos":        math.Cos,
		"Tan":        math.Tan,
		"Asin":       math.Asin,
		"Acos":       math.Acos,
		"Atan":       math.Atan,
		"Sinh":       math.Sinh,
		"Cosh":       math.Cosh,
		"Asinh":      math.Asinh,
		"Acosh":      math.Acosh,
		"Atanh":      math.Atanh,
		"Softsign":   func(x float64) float64 { return x / (1 + math.Abs(x)) },
		"Softplus": func(x float64) float64 {
			if x > 30 {
				return x
			}
			return math.Log1p(math.Exp(x))
		},
	}
	since := map[string]int64{"Softplus": 1, "Softsign": 1, "Erf": 9, "Sin": 7, "Cos": 7, "Tan": 7, "Asin": 7, "Acos": 7, "Atan": 7,
		"Sinh": 9, "Cosh": 9, "Asinh": 9, "Acosh": 9, "Atanh": 9, "Round": 11}
	for name, f := range unaryFloats {
		s := since[name]
		if s == 0 {
			s = 6
		}
		var f32 func(float32) float32
		switch name {
		case "Exp":
			f32 = exp32
		case "Sigmoid":
			f32 = sigmoid32
		}
		Register("", name, s, unaryFloat32(func(*Context) (func(float64) float64, error) { return f, nil }, f32))
	}
	Register("", "Gelu", 20, unaryFloat32(geluFunc, nil))
	Register("", "LeakyRelu", 6, unaryFloat(func(ctx *Context) (func(float64) float64, error) {
		alpha := float64(ctx.attrFloat("alpha", 0.01))
		return func(x float64) float64 {
			if x < 0 {
				return alpha * x
			}
			return x
		}, nil
	}))
	Register("", "Elu", 6, unaryFloat(func(ctx *Context) (func(float64) float64, error) {
		alpha := float64(ctx.attrFloat("alpha", 1))
		return func(x float64) float64 {
			if x < 0 {
				return alpha * (math.Exp(x) - 1)
			}
			return x
		}, nil
	}))
	Register("", "Selu", 6, unaryFloat(func(ctx *Context) (func(float64) float64, error) {
		alpha := float64(ctx.attrFloat("alpha", 1.67326319217681884765625))
		gamma := float64(ctx.attrFloat("gamma", 1.05070102214813232421875))
		return func(x float64) float64 {
			if x <= 0 {
				return gamma * (alpha*math.Exp(x) - alpha)
			}
			return gamma * x
		}, nil
	}))
	Register("", "HardSigmoid", 6, unaryFloat(func(ctx *Context) (func(float64) float64, error) {
		alpha := float64(ctx.attrFloat("alpha", 0.2))
		beta := float64(ctx.attrFloat("beta", 0.5))
		return func(x float64) float64 { return max(0, min(1, alpha*x+beta)) }, nil
	}))
	Register("", "HardSwish", 14, unaryFloat(func(*Context) (func(float64) float64, error) {
		return func(x float64) float64 { return x * max(0, min(1, x/6+0.5)) }, nil
	}))
	Register("", "ThresholdedRelu", 10, unaryFloat(func(ctx *Context) (func(float64) float64, error) {
		alpha := float64(ctx.attrFloat("alpha", 1))
		return func(x float64) float64 {
			if x > alpha {
				return x
			}
			return 0
		}, nil
	}))

	Register("", "Neg", 6, unarySigned(func(x float64) float64 { return -x }))
	Register("", "Abs", 6, unarySigned(math.Abs))
	Register("", "Relu", 6, unarySigned(func(x float64) float64 { return max(x, 0) }))
	Register("", "Sign", 9, unarySigned(func(x float64) float64 {
		switch {
		case x > 0:
			return 1
		case x < 0:
			return -1
		}
		return x // 0 or NaN
	}))
	Register("", "IsNaN", 9, floatPredicate(func(*Context) func(float64) bool {
		return math.IsNaN
	}))
	Register("", "IsInf", 10, floatPredicate(func(ctx *Context) func(float64) bool {
		neg, pos := ctx.attrInt("detect_negative", 1) != 0, ctx.attrInt("detect_positive", 1) != 0
		return func(x float64) bool { return (pos && math.IsInf(x, 1)) || (neg && math.IsInf(x, -1)) }
	}))
	Register("", "Not", 1, not)
	Register("", "Identity", 1, identity)
	Register("", "Dropout", 1, dropout)
	Register("", "Clip", 6, clip)
}

func sigmoid64(x float64) float64 {
	if x >= 0 {
		return 1 / (1 + math.Exp(-x))
	}
	e := math.Exp(x)
	return e / (1 + e)
}

func geluFunc(ctx *Context) (func(float64) float64, error) {
	switch a := ctx.attrString("approximate", "none"); a {
	case "none":
		return func(x float64) float64 { return 0.5 * x * (1 + math.Erf(x/math.Sqrt2)) }, nil
	case "tanh":
		c := math.Sqrt(2 / math.Pi)
		return func(x float64) float64 { return 0.5 * x * (1 + math.Tanh(c*(x+0.044715*x*x*x))) }, nil
	default:
		return nil, ctx.errf("unsupported approximate=%q", a)
	}
}

func mapSlice[T, R any](src []T, f func(T) R) []R {
	out := make([]R, len(src))
	for i, v := range src {
		out[i] = f(v)
	}
	return out
}

// unaryFloat builds a kernel for a float op defined by a float64 function
// (float32 inputs are computed in float64 and rounded once).
func unaryFloat(mk func(*Context) (func(float64) float64, error)) Kernel {
	return unaryFloat32(mk, nil)
}

// unaryFloat32 is unaryFloat with an optional faster float32 function
// (within an ulp of the float64 one), used on float32 inputs. Large inputs
// are split over ctx.Threads.
func unaryFloat32(mk func(*Context) (func(float64) float64, error), f32 func(float32) float32) Kernel {
	var k Kernel
	k = func(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
		if err := ctx.checkInputs(in, 1, 1); err != nil {
			return nil, err
		}
		f, err := mk(ctx)
		if err != nil {
			return nil, err
		}
		x := in[0]
		var out any
		switch d := x.Data.(type) {
		case []float32:
			g := f32
			if g == nil {
				g = func(v float32) float32 { return float32(f(float64(v))) }
			}
			o := make([]float32, len(d))
			parallelFor(len(d), ctx.threads(), 1<<14, func(lo, hi int) {
				for i, v := range d[lo:hi] {
					o[lo+i] = g(v)
				}
			})
			out = o
		case []float64:
			out = mapSlice(d, f)
		default:
			if x.DType == onnx.Float16 || x.DType == onnx.BFloat16 {
				return viaFloat32(ctx, in, k)
			}
			return nil, ctx.errf("unsupported type %s", onnx.TypeName(x.DType))
		}
		return []*onnx.Tensor{{DType: x.DType, Shape: cloneShape(x.Shape), Data: out}}, nil
	}
	return k
}

func signedT[T integer](d []T, f func(float64) float64) []T {
	return mapSlice(d, func(v T) T { return T(f(float64(v))) })
}

// unarySigned builds a kernel for an op defined on floats and integers
// whose integer results are exact through float64 (Neg, Abs, Relu, Sign).
func unarySigned(f func(float64) float64) Kernel {
	fl := unaryFloat(func(*Context) (func(float64) float64, error) { return f, nil })
	return func(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
		if err := ctx.checkInputs(in, 1, 1); err != nil {
			return nil, err
		}
		x := in[0]
		var out any
		switch d := x.Data.(type) {
		case []int8:
			out = signedT(d, f)
		case []int16:
			out = signedT(d, f)
		case []int32:
			out = signedT(d, f)
		case []int64:
			// Neg/Abs on int64 must not lose precision through float64.
			out = mapSlice(d, func(v int64) int64 {
				r := f(float64(v))
				switch {
				case r == -float64(v):
					return -v
				case r == float64(v):
					return v
				}
				return int64(r)
			})
		case []uint8:
			out = signedT(d, f)
		case []uint16:
			if x.DType != onnx.Uint16 {
				return fl(ctx, in)
			}
			out = signedT(d, f)
		case []uint32:
			out = signedT(d, f)
		case []uint64:
			out = signedT(d, f)
		default:
			return fl(ctx, in)
		}
		return []*onnx.Tensor{{DType: x.DType, Shape: cloneShape(x.Shape), Data: out}}, nil
	}
}

func floatPredicate(mk func(*Context) func(float64) bool) Kernel {
	return func(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
		x, err := ctx.floatInput(in)
		if err != nil {
			return nil, err
		}
		v, _ := x.AsFloat64s()
		return []*onnx.Tensor{{DType: onnx.Bool, Shape: cloneShape(x.Shape), Data: mapSlice(v, mk(ctx))}}, nil
	}
}

func not(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 1, 1); err != nil {
		return nil, err
	}
	if in[0].DType != onnx.Bool {
		return nil, ctx.errf("input must be bool, got %s", in[0])
	}
	return []*onnx.Tensor{{DType: onnx.Bool, Shape: cloneShape(in[0].Shape), Data: mapSlice(in[0].Bools(), func(b bool) bool { return !b })}}, nil
}

func identity(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 1, 1); err != nil {
		return nil, err
	}
	return []*onnx.Tensor{view(in[0], cloneShape(in[0].Shape))}, nil
}

// dropout is inference-mode Dropout: the identity, with an all-true mask
// as optional second output. Training mode is refused.
func dropout(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 1, 3); err != nil {
		return nil, err
	}
	if t := opt(in, 2); t != nil {
		if t.DType != onnx.Bool || t.Len() != 1 {
			return nil, ctx.errf("training_mode must be a bool scalar, got %s", t)
		}
		if t.Bools()[0] {
			return nil, ctx.errf("training_mode=true is not supported (inference only)")
		}
	}
	if ctx.Opset < 7 && ctx.attrInt("is_test", 0) == 0 && ctx.hasAttr("is_test") {
		return nil, ctx.errf("is_test=0 is not supported (inference only)")
	}
	x := in[0]
	mask := make([]bool, x.Len())
	for i := range mask {
		mask[i] = true
	}
	return []*onnx.Tensor{view(x, cloneShape(x.Shape)), {DType: onnx.Bool, Shape: cloneShape(x.Shape), Data: mask}}, nil
}

func clipT[T number](d []T, lo, hi T) []T {
	return mapSlice(d, func(v T) T {
		if v < lo {
			return lo
		}
		if v > hi {
			return hi
		}
		return v
	})
}

func clip(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	maxIn := 3
	if ctx.Opset < 11 {
		maxIn = 1
	}
	if err := ctx.checkInputs(in, 1, maxIn); err != nil {
		return nil, err
	}
	x := in[0]
	lo, hi := math.Inf(-1), math.Inf(1)
	var ilo, ihi int64 = math.MinInt64, math.MaxInt64 // exact int64 bounds
	if ctx.Opset < 11 {
		lo = float64(ctx.attrFloat("min", -math.MaxFloat32))
		hi = float64(ctx.attrFloat("max", math.MaxFloat32))
		if x.DType != onnx.Float && x.DType != onnx.Double && x.DType != onnx.Float16 {
			return nil, ctx.errf("Clip before opset 11 takes floats, got %s", x)
		}
	} else {
		for i, p := range []*float64{&lo, &hi} {
			t := opt(in, i+1)
			if t == nil {
				continue
			}
			if t.Len() != 1 || t.DType != x.DType {
				return nil, ctx.errf("bound %d must be a scalar of the input's type, got %s", i+1, t)
			}
			v, err := t.AsFloat64s()
			if err != nil {
				return nil, ctx.errf("%v", err)
			}
			*p = v[0]
			if iv, err := t.AsInt64s(); err == nil {
				if i == 0 {
					ilo = iv[0]
				} else {
					ihi = iv[0]
				}
			}
		}
	}
	var out any
	switch d := x.Data.(type) {
	case []float32:
		out = clipT(d, float32(lo), float32(hi))
	case []float64:
		out = clipT(d, lo, hi)
	case []int32:
		out = clipT(d, int32(max(lo, math.MinInt32)), int32(min(hi, math.MaxInt32)))
	case []int64:
		out = clipT(d, ilo, ihi)
	case []int8:
		out = clipT(d, int8(max(lo, math.MinInt8)), int8(min(hi, math.MaxInt8)))
	case []uint8:
		out = clipT(d, uint8(max(lo, 0)), uint8(min(hi, math.MaxUint8)))
	default:
		if x.DType == onnx.Float16 || x.DType == onnx.BFloat16 {
			return viaFloat32(ctx, in, clip)
		}
		return nil, ctx.errf("unsupported type %s", onnx.TypeName(x.DType))
	}
	return []*onnx.Tensor{{DType: x.DType, Shape: cloneShape(x.Shape), Data: out}}, nil
}
