package kernels

import (
	"math"
	"slices"

	"github.com/linearize/linearize/onnx"
)

// Contrib ops of onnxruntime (domain com.microsoft) that its transformers
// optimizer leaves in BERT graphs. Their semantics follow onnxruntime's
// contrib operator documentation; the tests compare each with onnxruntime.

const msDomain = "com.microsoft"

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
	e := &embedding{b: b, s: s}
	var err error
	if e.ids, err = ctx.intsInput(in[0], "input_ids"); err != nil {
		return nil, err
	}
	if e.segs, err = ctx.idsLike(in[1], in[0], "segment_ids"); err != nil {
		return nil, err
	}
	if err := ctx.embeddingTables(e, in[2], in[3], in[4]); err != nil {
		return nil, err
	}
	gamma, err := ctx.vecOf(in[5], "gamma", e.h)
	if err != nil {
		return nil, err
	}
	beta, err := ctx.vecOf(in[6], "beta", e.h)
	if err != nil {
		return nil, err
	}
	mask, err := ctx.idsLike(opt(in, 7), in[0], "mask")
	if err != nil {
		return nil, err
	}
	if err := ctx.positionIDs(e, opt(in, 8)); err != nil {
		return nil, err
	}
	eps := ctx.attrFloat("epsilon", 1e-12)
	h := e.h
	out := make([]float32, b*s*h)
	sum := make([]float32, b*s*h)
	for i := range b * s {
		if err := ctx.embed(e, i, sum[i*h:(i+1)*h]); err != nil {
			return nil, err
		}
		layerNormRow(out[i*h:(i+1)*h], sum[i*h:(i+1)*h], gamma, beta, eps)
	}
	return []*onnx.Tensor{
		onnx.NewFloat([]int{b, s, h}, out),
		{DType: onnx.Int32, Shape: []int{b}, Data: maskIndex(mask, b, s)},
		onnx.NewFloat([]int{b, s, h}, sum),
	}, nil
}

// embedding holds EmbedLayerNormalization's ids [B,S] and tables of
// width h: word [nw,h], position [np,h] and segment [ng,h] (nil without
// segments).
type embedding struct {
	b, s, h        int
	ids, segs      []int64
	posIDs         []int64 // nil: position s for token s
	posBatch       bool    // posIDs is [B,S] rather than [S]
	word, pos, seg []float32
	nw, np, ng     int
}

// idsLike reads an optional integer input that must have the shape of
// input_ids.
func (ctx *Context) idsLike(t, ids *onnx.Tensor, what string) ([]int64, error) {
	if t == nil {
		return nil, nil
	}
	if !slices.Equal(t.Shape, ids.Shape) {
		return nil, ctx.errf("%s has shape %v, input_ids %v", what, t.Shape, ids.Shape)
	}
	return ctx.intsInput(t, what)
}

// embeddingTables checks the word, position and (optional) segment
// tables: 2-D, of one width.
func (ctx *Context) embeddingTables(e *embedding, word, pos, seg *onnx.Tensor) error {
	var hp, hg int
	var err error
	if e.word, e.nw, e.h, err = ctx.embeddingTable(word, "word_embedding"); err != nil {
		return err
	}
	if e.pos, e.np, hp, err = ctx.embeddingTable(pos, "position_embedding"); err != nil {
		return err
	}
	if e.seg, e.ng, hg, err = ctx.embeddingTable(seg, "segment_embedding"); err != nil {
		return err
	}
	if hp != e.h || (e.seg != nil && hg != e.h) {
		return ctx.errf("embedding widths differ: word %d, position %d, segment %d", e.h, hp, hg)
	}
	if e.segs != nil && e.seg == nil {
		return ctx.errf("segment_ids given without segment_embedding")
	}
	return nil
}

// embeddingTable returns a 2-D float32 table and its rows and width
// (nothing for nil).
func (ctx *Context) embeddingTable(t *onnx.Tensor, what string) ([]float32, int, int, error) {
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

// positionIDs reads the optional position_ids, [B,S], [1,S] or [S].
func (ctx *Context) positionIDs(e *embedding, p *onnx.Tensor) error {
	if p == nil {
		return nil
	}
	var err error
	if e.posIDs, err = ctx.intsInput(p, "position_ids"); err != nil {
		return err
	}
	b, s := e.b, e.s
	switch {
	case len(p.Shape) == 2 && p.Shape[0] == b && p.Shape[1] == s:
		e.posBatch = true
	case len(p.Shape) == 2 && p.Shape[0] == 1 && p.Shape[1] == s, len(p.Shape) == 1 && p.Shape[0] == s:
	default:
		return ctx.errf("position_ids has shape %v, want [%d,%d] or [1,%d]", p.Shape, b, s, s)
	}
	return nil
}

// embed writes into dst the sum of the word, position and segment
// embeddings of token i (batch i/S, position i%S).
func (ctx *Context) embed(e *embedding, i int, dst []float32) error {
	w, err := ctx.tableRow(e.word, e.nw, e.h, e.ids[i], "input_ids")
	if err != nil {
		return err
	}
	pid := int64(i % e.s)
	if e.posIDs != nil {
		if e.posBatch {
			pid = e.posIDs[i]
		} else {
			pid = e.posIDs[i%e.s]
		}
	}
	p, err := ctx.tableRow(e.pos, e.np, e.h, pid, "position")
	if err != nil {
		return err
	}
	var g []float32
	if e.segs != nil {
		if g, err = ctx.tableRow(e.seg, e.ng, e.h, e.segs[i], "segment_ids"); err != nil {
			return err
		}
	}
	for j := range dst {
		dst[j] = w[j] + p[j]
		if g != nil {
			dst[j] += g[j]
		}
	}
	return nil
}

// tableRow returns row id of a table of n rows of width h.
func (ctx *Context) tableRow(tab []float32, n, h int, id int64, what string) ([]float32, error) {
	if id < 0 || id >= int64(n) {
		return nil, ctx.errf("%s index %d out of range [0,%d)", what, id, n)
	}
	return tab[int(id)*h : (int(id)+1)*h], nil
}

// maskIndex counts the ones in each row of a [B,S] mask (zeros without
// one).
func maskIndex(mask []int64, b, s int) []int32 {
	mi := make([]int32, b)
	if mask == nil {
		return mi
	}
	for bi := 0; bi < b; bi++ {
		for _, v := range mask[bi*s : (bi+1)*s] {
			if v == 1 {
				mi[bi]++
			}
		}
	}
	return mi
}
