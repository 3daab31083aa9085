package ops

import (
	"math"
	"slices"

	"github.com/linearize/linearize/onnx"
)

// Contrib ops of onnxruntime (domain com.microsoft) that its transformers
// optimizer leaves in BERT graphs. Their semantics follow onnxruntime's
// contrib operator documentation; the tests compare each with onnxruntime.

const msDomain = "com.microsoft"

func init() {
	Register(msDomain, "SkipLayerNormalization", 1, halfWidened(skipLayerNorm))
	Register(msDomain, "EmbedLayerNormalization", 1, halfWidened(embedLayerNorm))
}

// floatsOf returns the float32 data of an input or an error naming it.
func (ctx *Context) floatsOf(t *onnx.Tensor, what string) ([]float32, error) {
	if t == nil {
		return nil, nil
	}
	d, ok := t.Data.([]float32)
	if !ok || t.DType != onnx.Float {
		return nil, ctx.errf("%s must be float32, got %s", what, t)
	}
	return d, nil
}

// vecOf checks that an optional 1-D parameter has n elements.
func (ctx *Context) vecOf(t *onnx.Tensor, what string, n int) ([]float32, error) {
	d, err := ctx.floatsOf(t, what)
	if err != nil || d == nil {
		return d, err
	}
	if t.Len() != n {
		return nil, ctx.errf("%s has shape %v, want [%d]", what, t.Shape, n)
	}
	return d, nil
}

// layerNormRow normalizes x into y over one row: y = (x−μ)/√(σ²+ε)·γ + β,
// with statistics in float64. It returns μ and 1/√(σ²+ε).
func layerNormRow(y, x, gamma, beta []float32, eps float32) (float32, float32) {
	var sum float64
	for _, v := range x {
		sum += float64(v)
	}
	mean := sum / float64(len(x))
	var sq float64
	for _, v := range x {
		d := float64(v) - mean
		sq += d * d
	}
	inv := 1 / math.Sqrt(sq/float64(len(x))+float64(eps))
	for i, v := range x {
		r := float32((float64(v) - mean) * inv)
		if gamma != nil {
			r *= gamma[i]
		}
		if beta != nil {
			r += beta[i]
		}
		y[i] = r
	}
	return float32(mean), float32(inv)
}

// skipLayerNorm: inputs input [..,H], skip (same shape or broadcast over
// the leading dims), gamma [H], beta [H] (optional), bias [H] (optional);
// attribute epsilon (default 1e-12). Outputs: output, mean, inv_std_var
// (both [..,1]) and input+skip+bias.
func skipLayerNorm(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 3, 5); err != nil {
		return nil, err
	}
	x, err := ctx.floatsOf(in[0], "input")
	if err != nil {
		return nil, err
	}
	shape := in[0].Shape
	if len(shape) < 1 {
		return nil, ctx.errf("input must have rank ≥ 1, got %v", shape)
	}
	h := shape[len(shape)-1]
	skipT, err := broadcastTo(in[1], shape)
	if err != nil {
		return nil, ctx.errf("skip: %v", err)
	}
	skip, err := ctx.floatsOf(skipT, "skip")
	if err != nil {
		return nil, err
	}
	gamma, err := ctx.vecOf(in[2], "gamma", h)
	if err != nil {
		return nil, err
	}
	beta, err := ctx.vecOf(opt(in, 3), "beta", h)
	if err != nil {
		return nil, err
	}
	bias, err := ctx.vecOf(opt(in, 4), "bias", h)
	if err != nil {
		return nil, err
	}
	eps := ctx.attrFloat("epsilon", 1e-12)
	rows := len(x) / max(h, 1)
	out := make([]float32, len(x))
	sum := make([]float32, len(x))
	statShape := append(cloneShape(shape[:len(shape)-1]), 1)
	means := make([]float32, rows)
	invs := make([]float32, rows)
	parallelFor(rows, ctx.threads(), max(1, (1<<14)/max(h, 1)), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xs, ss, s := x[r*h:(r+1)*h], skip[r*h:(r+1)*h], sum[r*h:(r+1)*h]
			for i := range s {
				s[i] = xs[i] + ss[i]
				if bias != nil {
					s[i] += bias[i]
				}
			}
			means[r], invs[r] = layerNormRow(out[r*h:(r+1)*h], s, gamma, beta, eps)
		}
	})
	return []*onnx.Tensor{
		onnx.NewFloat(cloneShape(shape), out),
		onnx.NewFloat(statShape, means),
		onnx.NewFloat(cloneShape(statShape), invs),
		onnx.NewFloat(cloneShape(shape), sum),
	}, nil
}

// embedLayerNorm: inputs input_ids [B,S], segment_ids [B,S] (optional),
// word_embedding [V,H], position_embedding [P,H], segment_embedding [G,H]
// (optional), gamma [H], beta [H], mask [B,S] (optional), position_ids
// [B,S] or [1,S] (optional). Outputs: output [B,S,H], mask_index [B] (int32:
// the count of ones in each mask row, zeros without a mask) and the
// embedding sum before normalization.
func embedLayerNorm(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 1, 9); err != nil {
		return nil, err
	}
	if len(in) < 7 {
		return nil, ctx.errf("want 7 to 9 inputs, got %d", len(in))
	}
	for _, i := range []int{2, 3, 5, 6} { // segment inputs 1 and 4 are optional
		if in[i] == nil {
			return nil, ctx.errf("input %d is missing", i)
		}
	}
	if len(in[0].Shape) != 2 {
		return nil, ctx.errf("input_ids must be [batch, sequence], got %v", in[0].Shape)
	}
	b, s := in[0].Shape[0], in[0].Shape[1]
	ids, err := ctx.intsInput(in[0], "input_ids")
	if err != nil {
		return nil, err
	}
	var segs []int64
	if in[1] != nil {
		if !slices.Equal(in[1].Shape, in[0].Shape) {
			return nil, ctx.errf("segment_ids has shape %v, input_ids %v", in[1].Shape, in[0].Shape)
		}
		if segs, err = ctx.intsInput(in[1], "segment_ids"); err != nil {
			return nil, err
		}
	}
	table := func(t *onnx.Tensor, what string) ([]float32, int, int, error) {
		if t == nil {
			return nil, 0, 0, nil
		}
		d, err := ctx.floatsOf(t, what)
		if err != nil {
			return nil, 0, 0, err
		}
		if len(t.Shape) != 2 {
			return nil, 0, 0, ctx.errf("%s must be 2-D, got %v", what, t.Shape)
		}
		return d, t.Shape[0], t.Shape[1], nil
	}
	word, nw, h, err := table(in[2], "word_embedding")
	if err != nil {
		return nil, err
	}
	pos, np, hp, err := table(in[3], "position_embedding")
	if err != nil {
		return nil, err
	}
	seg, ng, hg, err := table(in[4], "segment_embedding")
	if err != nil {
		return nil, err
	}
	if hp != h || (seg != nil && hg != h) {
		return nil, ctx.errf("embedding widths differ: word %d, position %d, segment %d", h, hp, hg)
	}
	if segs != nil && seg == nil {
		return nil, ctx.errf("segment_ids given without segment_embedding")
	}
	gamma, err := ctx.vecOf(in[5], "gamma", h)
	if err != nil {
		return nil, err
	}
	beta, err := ctx.vecOf(in[6], "beta", h)
	if err != nil {
		return nil, err
	}
	var mask []int64
	if m := opt(in, 7); m != nil {
		if !slices.Equal(m.Shape, in[0].Shape) {
			return nil, ctx.errf("mask has shape %v, input_ids %v", m.Shape, in[0].Shape)
		}
		if mask, err = ctx.intsInput(m, "mask"); err != nil {
			return nil, err
		}
	}
	var posIDs []int64
	posBatch := false
	if p := opt(in, 8); p != nil {
		if posIDs, err = ctx.intsInput(p, "position_ids"); err != nil {
			return nil, err
		}
		switch {
		case len(p.Shape) == 2 && p.Shape[0] == b && p.Shape[1] == s:
			posBatch = true
		case len(p.Shape) == 2 && p.Shape[0] == 1 && p.Shape[1] == s, len(p.Shape) == 1 && p.Shape[0] == s:
		default:
			return nil, ctx.errf("position_ids has shape %v, want [%d,%d] or [1,%d]", p.Shape, b, s, s)
		}
	}
	eps := ctx.attrFloat("epsilon", 1e-12)
	out := make([]float32, b*s*h)
	sum := make([]float32, b*s*h)
	row := func(tab []float32, n int, id int64, what string) ([]float32, error) {
		if id < 0 || id >= int64(n) {
			return nil, ctx.errf("%s index %d out of range [0,%d)", what, id, n)
		}
		return tab[int(id)*h : (int(id)+1)*h], nil
	}
	for bi := 0; bi < b; bi++ {
		for si := 0; si < s; si++ {
			i := bi*s + si
			w, err := row(word, nw, ids[i], "input_ids")
			if err != nil {
				return nil, err
			}
			pid := int64(si)
			if posIDs != nil {
				if posBatch {
					pid = posIDs[i]
				} else {
					pid = posIDs[si]
				}
			}
			p, err := row(pos, np, pid, "position")
			if err != nil {
				return nil, err
			}
			var g []float32
			if segs != nil {
				if g, err = row(seg, ng, segs[i], "segment_ids"); err != nil {
					return nil, err
				}
			}
			e := sum[i*h : (i+1)*h]
			for j := range e {
				e[j] = w[j] + p[j]
				if g != nil {
					e[j] += g[j]
				}
			}
			layerNormRow(out[i*h:(i+1)*h], e, gamma, beta, eps)
		}
	}
	mi := make([]int32, b)
	if mask != nil {
		for bi := 0; bi < b; bi++ {
			for _, v := range mask[bi*s : (bi+1)*s] {
				if v == 1 {
					mi[bi]++
				}
			}
		}
	}
	return []*onnx.Tensor{
		onnx.NewFloat([]int{b, s, h}, out),
		{DType: onnx.Int32, Shape: []int{b}, Data: mi},
		onnx.NewFloat([]int{b, s, h}, sum),
	}, nil
}
