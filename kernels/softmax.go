package kernels

import (
	"math"

	"github.com/linearize/linearize/onnx"
)

// softmaxKernel handles both axis conventions: before opset 13 the input
// is flattened to 2-D at axis (default 1) and each row is normalised; from
// 13 on, the single axis (default −1) is normalised.
func softmaxKernel(log bool) Kernel {
	var k Kernel
	k = func(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
		if out, done, err := ctx.halfPrologue(in, 1, 1, k); done {
			return out, err
		}
		x := in[0]
		outer, d, inner, err := ctx.softmaxGroups(x.Shape)
		if err != nil {
			return nil, err
		}
		var data any
		switch v := x.Data.(type) {
		case []float32:
			out := make([]float32, len(v))
			if inner == 1 {
				parallelFor(outer, ctx.threads(), max(1, (1<<14)/max(d, 1)), func(lo, hi int) {
					softmaxRows32(out[lo*d:hi*d], v[lo*d:hi*d], hi-lo, d, log)
				})
			} else {
				softmaxStrided(out, v, outer, d, inner, log)
			}
			data = out
		case []float64:
			out := make([]float64, len(v))
			softmaxStrided(out, v, outer, d, inner, log)
			data = out
		default:
			return nil, ctx.errf("unsupported type %s", onnx.TypeName(x.DType))
		}
		return []*onnx.Tensor{{DType: x.DType, Shape: cloneShape(x.Shape), Data: data}}, nil
	}
	return k
}

// softmaxGroups splits shape into outer × d × inner for Softmax, LogSoftmax
// and Hardmax, normalised along d: before opset 13 the input is flattened
// to 2-D at axis (default 1), from 13 on d is the single axis (default −1).
func (ctx *Context) softmaxGroups(shape []int) (outer, d, inner int, err error) {
	r := len(shape)
	if r == 0 {
		return 1, 1, 1, nil
	}
	modern := ctx.Opset >= 13 || ctx.Opset == 0
	def := int64(1)
	if modern {
		def = -1
	}
	axis, err := ctx.normAxis(ctx.attrInt("axis", def), r)
	if err != nil {
		return 0, 0, 0, err
	}
	if modern {
		return prod(shape[:axis]), shape[axis], prod(shape[axis+1:]), nil
	}
	return prod(shape[:axis]), prod(shape[axis:]), 1, nil
}

// softmaxRows32 normalises contiguous rows of length d.
func softmaxRows32(dst, src []float32, rows, d int, log bool) {
	for i := range rows {
		x := src[i*d : i*d+d]
		y := dst[i*d : i*d+d]
		m := float32(math.Inf(-1))
		for _, v := range x {
			if v > m {
				m = v
			}
		}
		var sum float64
		for j, v := range x {
			e := exp32(v - m)
			y[j] = e
			sum += float64(e)
		}
		if log {
			ls := float32(math.Log(sum))
			for j, v := range x {
				y[j] = v - m - ls
			}
			continue
		}
		inv := float32(1 / sum)
		for j := range y {
			y[j] *= inv
		}
	}
}

func softmaxStrided[T float](dst, src []T, outer, d, inner int, log bool) {
	for o := range outer {
		for i := range inner {
			base := o*d*inner + i
			m := math.Inf(-1)
			for j := range d {
				m = max(m, float64(src[base+j*inner]))
			}
			var sum float64
			for j := range d {
				sum += math.Exp(float64(src[base+j*inner]) - m)
			}
			for j := range d {
				p := base + j*inner
				if log {
					dst[p] = T(float64(src[p]) - m - math.Log(sum))
				} else {
					dst[p] = T(math.Exp(float64(src[p])-m) / sum)
				}
			}
		}
	}
}
