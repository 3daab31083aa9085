package kernels

import (
	"math"

	"github.com/linearize/linearize/onnx"
)

// layerNorm normalises X over the axes from axis on:
// Y = (X − mean) / √(var + ε) · Scale + B, with optional outputs Mean and
// InvStdDev shaped like X with the normalised axes set to 1.
func layerNorm(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if out, done, err := ctx.halfPrologue(in, 2, 3, layerNorm); done {
		return out, err
	}
	x := in[0]
	r := len(x.Shape)
	axis, err := ctx.normAxis(ctx.attrInt("axis", -1), r)
	if err != nil {
		return nil, err
	}
	eps := float64(ctx.attrFloat("epsilon", 1e-5))
	rows, d := prod(x.Shape[:axis]), prod(x.Shape[axis:])
	norm := x.Shape[axis:]
	scale, err := broadcastTo(in[1], norm)
	if err != nil {
		return nil, ctx.errf("scale: %v", err)
	}
	var bias *onnx.Tensor
	if b := opt(in, 2); b != nil {
		if bias, err = broadcastTo(b, norm); err != nil {
			return nil, ctx.errf("bias: %v", err)
		}
	}
	for _, t := range []*onnx.Tensor{scale, bias} {
		if t != nil && t.DType != x.DType {
			return nil, ctx.errf("scale and bias must be %s like X, got %s", onnx.TypeName(x.DType), t)
		}
	}
	statShape := cloneShape(x.Shape)
	for k := axis; k < r; k++ {
		statShape[k] = 1
	}
	var y, mean, inv *onnx.Tensor
	switch xv := x.Data.(type) {
	case []float32:
		var b []float32
		if bias != nil {
			b = bias.Floats()
		}
		yd, md, id := layerNormT(xv, scale.Floats(), b, rows, d, eps, ctx.threads())
		y, mean, inv = onnx.NewFloat(cloneShape(x.Shape), yd), onnx.NewFloat(statShape, md), onnx.NewFloat(cloneShape(statShape), id)
	case []float64:
		var b []float64
		if bias != nil {
			b = bias.Data.([]float64)
		}
		yd, md, id := layerNormT(xv, scale.Data.([]float64), b, rows, d, eps, ctx.threads())
		y = &onnx.Tensor{DType: onnx.Double, Shape: cloneShape(x.Shape), Data: yd}
		mean = &onnx.Tensor{DType: onnx.Double, Shape: statShape, Data: md}
		inv = &onnx.Tensor{DType: onnx.Double, Shape: cloneShape(statShape), Data: id}
	default:
		return nil, ctx.errf("unsupported type %s", onnx.TypeName(x.DType))
	}
	return []*onnx.Tensor{y, mean, inv}, nil
}

func layerNormT[T float](x, scale, bias []T, rows, d int, eps float64, threads int) (y, mean, inv []T) {
	y = make([]T, len(x))
	mean, inv = make([]T, rows), make([]T, rows)
	scale = scale[:d]
	if bias != nil {
		bias = bias[:d]
	}
	parallelFor(rows, threads, max(1, (1<<14)/max(d, 1)), func(lo, hi int) {
		layerNormRows(x, scale, bias, y, mean, inv, lo, hi, d, eps)
	})
	return y, mean, inv
}

func layerNormRows[T float](x, scale, bias, y, mean, inv []T, lo, hi, d int, eps float64) {
	for i := lo; i < hi; i++ {
		row := x[i*d : i*d+d]
		out := y[i*d : i*d+d]
		var s float64
		for _, v := range row {
			s += float64(v)
		}
		m := s / float64(d)
		var ss float64
		for _, v := range row {
			c := float64(v) - m
			ss += c * c
		}
		is := 1 / math.Sqrt(ss/float64(d)+eps)
		mean[i], inv[i] = T(m), T(is)
		mt, it := T(m), T(is)
		if bias != nil {
			for j, v := range row {
				out[j] = (v-mt)*it*scale[j] + bias[j]
			}
		} else {
			for j, v := range row {
				out[j] = (v - mt) * it * scale[j]
			}
		}
	}
}
