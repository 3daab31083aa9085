package kernels

import (
	"math"

	"github.com/linearize/linearize/onnx"
)

// groupNorm normalises X [N, C, D...] over each group of C/num_groups
// channels together; scale and bias are per group before opset 21 and per
// channel from 21.
func groupNorm(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 3, 3); err != nil {
		return nil, err
	}
	x := in[0]
	if len(x.Shape) < 2 {
		return nil, ctx.errf("X must have rank ≥ 2 ([N, C, D...]), got %v", x.Shape)
	}
	c := x.Shape[1]
	g := ctx.attrInt("num_groups", 0)
	if g < 1 || int64(c)%g != 0 {
		return nil, ctx.errf("num_groups %d does not divide the %d channels", g, c)
	}
	per := c // scale and bias entries
	if ctx.Opset > 0 && ctx.Opset < 21 {
		per = int(g)
	}
	for i, t := range in[1:] {
		if len(t.Shape) != 1 || t.Shape[0] != per {
			return nil, ctx.errf("input %d must have shape [%d], got %v", i+1, per, t.Shape)
		}
	}
	return ctx.planeNorm(in, int(g), c/per)
}

// planeNorm normalises X [N, C, D...] over groups of C/groups consecutive
// channels (all their spatial elements together), in float64, and applies
// scale and bias entry ch/chPer to channel ch.
// (InstanceNormalization, in nn.go, is the case of one channel per group.)
func (ctx *Context) planeNorm(in []*onnx.Tensor, groups, chPer int) ([]*onnx.Tensor, error) {
	x, scale, bias := in[0], in[1], in[2]
	if !onnx.IsFloat(x.DType) {
		return nil, ctx.errf("unsupported type %s", onnx.TypeName(x.DType))
	}
	if scale.DType != x.DType || bias.DType != x.DType {
		return nil, ctx.errf("scale and bias must be %s like X, got %s and %s", onnx.TypeName(x.DType), scale, bias)
	}
	eps := float64(ctx.attrFloat("epsilon", 1e-5))
	xs, err := x.AsFloat64s()
	if err != nil {
		return nil, ctx.errf("%v", err)
	}
	sc, _ := scale.AsFloat64s()
	bs, _ := bias.AsFloat64s()
	y, err := ctx.newTensor(x.DType, cloneShape(x.Shape))
	if err != nil {
		return nil, err
	}
	n, c := x.Shape[0], x.Shape[1]
	pin := prod(x.Shape[2:])
	size := c / groups * pin // elements per group
	yf, fast := y.Data.([]float32)
	for b := 0; b < n; b++ {
		for gi := 0; gi < groups; gi++ {
			off := (b*c + gi*(c/groups)) * pin
			seg := xs[off : off+size]
			var mean, v float64
			for _, e := range seg {
				mean += e
			}
			if size > 0 {
				mean /= float64(size)
			}
			for _, e := range seg {
				v += (e - mean) * (e - mean)
			}
			if size > 0 {
				v /= float64(size)
			}
			inv := 1 / math.Sqrt(v+eps)
			for i, e := range seg {
				ch := gi*(c/groups) + i/pin
				r := (e-mean)*inv*sc[ch/chPer] + bs[ch/chPer]
				if fast {
					yf[off+i] = float32(r)
				} else {
					setFloat(y, off+i, r)
				}
			}
		}
	}
	return []*onnx.Tensor{y}, nil
}
