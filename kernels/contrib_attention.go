package kernels

import (
	"fmt"
	"math"

	"github.com/linearize/linearize/internal/gemm"
	"github.com/linearize/linearize/onnx"
)

// attnProblem is multi-head scaled dot-product attention on contiguous
// per-head operands: q [B,N,S,dk], k [B,N,T,dk], v [B,N,T,dv]. The output
// is written as [B,S,N·dv].
type attnProblem struct {
	b, n, s, t, dk, dv int
	q, k, v            []float32
	scale              float32
	// mask is an additive key mask [B, maskS, T] with maskS 1 or S, or nil.
	mask  []float32
	maskS int
	// bias is an additive [B or 1, N or 1, S, T] attention bias, or nil.
	bias    []float32
	biasB   bool // bias has a batch dimension
	biasN   bool // bias has a head dimension
	causal  bool
	pastLen int // keys before the first query, for causal masking
	filter  float32
	out     []float32
	threads int
}

// run computes softmax(scale·QKᵀ + mask + bias)·V for every (batch, head),
// spreading the pairs over the available goroutines, each with its own
// scores buffer. A panic in a worker (a bug: the inputs were validated) is
// returned as an error rather than crashing the process.
func (p *attnProblem) run() (err error) {
	pairs := p.b * p.n
	if pairs == 0 || p.s == 0 || p.dv == 0 {
		return nil // empty output
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("internal error: %v", r)
		}
	}()
	ParallelWith(pairs, max(1, p.threads), func() func(int) {
		scores := make([]float32, p.s*p.t)
		return func(bh int) { p.head(bh/p.n, bh%p.n, scores) }
	})
	return nil
}

func (p *attnProblem) head(b, h int, scores []float32) {
	bh := b*p.n + h
	s, t := p.s, p.t
	gemm.Sgemm(false, true, s, t, p.dk, p.scale, p.q[bh*s*p.dk:], p.dk, p.k[bh*t*p.dk:], p.dk, 0, scores, t, 1)
	for i := 0; i < s; i++ {
		row := scores[i*t : (i+1)*t]
		if p.mask != nil {
			mi := 0
			if p.maskS > 1 {
				mi = i
			}
			m := p.mask[(b*p.maskS+mi)*t : (b*p.maskS+mi+1)*t]
			for j := range row {
				row[j] += m[j]
			}
		}
		if p.bias != nil {
			off := 0
			if p.biasB {
				off = b
			}
			if p.biasN {
				off = off*p.n + h
			}
			br := p.bias[(off*s+i)*t : (off*s+i+1)*t]
			for j := range row {
				row[j] += br[j]
			}
		}
		if p.causal {
			for j := p.pastLen + i + 1; j < t; j++ {
				row[j] += p.filter
			}
		}
		msSoftmaxRow(row)
	}
	ld := p.n * p.dv
	gemm.Sgemm(false, false, s, p.dv, t, 1, scores, t, p.v[bh*t*p.dv:], p.dv, 0, p.out[b*s*ld+h*p.dv:], ld, 1)
}

// msSoftmaxRow replaces row by its softmax, accumulating in float64.
func msSoftmaxRow(row []float32) {
	mx := float32(math.Inf(-1))
	for _, v := range row {
		mx = max(mx, v)
	}
	var sum float64
	for j, v := range row {
		e := float32(math.Exp(float64(v - mx)))
		row[j] = e
		sum += float64(e)
	}
	inv := float32(1 / sum)
	for j := range row {
		row[j] *= inv
	}
}

// toHeads copies a [B, L, ·] activation whose row stride is ld, starting
// at column off, into per-head layout [B, N, L, d], adding bias[off:off+N·d]
// when given.
func toHeads(dst, src []float32, b, l, n, d, ld, off int, bias []float32) {
	for bi := 0; bi < b; bi++ {
		for li := 0; li < l; li++ {
			row := src[(bi*l+li)*ld+off:]
			for h := 0; h < n; h++ {
				o := dst[((bi*n+h)*l+li)*d : ((bi*n+h)*l+li+1)*d]
				copy(o, row[h*d:(h+1)*d])
				if bias != nil {
					bb := bias[off+h*d : off+(h+1)*d]
					for j := range o {
						o[j] += bb[j]
					}
				}
			}
		}
	}
}

// keyMask builds the additive mask [B, maskS, T] for the mask_index forms
// of Attention / key_padding_mask of MultiHeadAttention: 1-D [B] key
// lengths, [2B] lengths and start positions, 2-D [B,T] raw (0 masks a key),
// 3-D [B,S,T] raw.
func (ctx *Context) keyMask(m *onnx.Tensor, b, s, t int, filter float32) ([]float32, int, error) {
	if m == nil {
		return nil, 0, nil
	}
	vals, err := m.AsInt64s()
	if err != nil {
		f, ok := m.Data.([]float32)
		if !ok {
			return nil, 0, ctx.errf("mask must be an integer or float tensor, got %s", m)
		}
		vals = make([]int64, len(f))
		for i, v := range f {
			if v != 0 {
				vals[i] = 1
			}
		}
	}
	switch {
	case len(m.Shape) == 1 && (m.Shape[0] == b || m.Shape[0] == 2*b):
		out := make([]float32, b*t)
		for bi := 0; bi < b; bi++ {
			end := vals[bi]
			start := int64(0)
			if m.Shape[0] == 2*b {
				start = vals[b+bi]
			}
			for j := 0; j < t; j++ {
				if int64(j) >= end || int64(j) < start {
					out[bi*t+j] = filter
				}
			}
		}
		return out, 1, nil
	case len(m.Shape) == 2 && m.Shape[0] == b && m.Shape[1] == t:
		out := make([]float32, b*t)
		for i, v := range vals {
			if v == 0 {
				out[i] = filter
			}
		}
		return out, 1, nil
	case len(m.Shape) == 3 && m.Shape[0] == b && m.Shape[1] == s && m.Shape[2] == t:
		out := make([]float32, b*s*t)
		for i, v := range vals {
			if v == 0 {
				out[i] = filter
			}
		}
		return out, s, nil
	}
	return nil, 0, ctx.errf("mask has shape %v; supported: [%d], [%d], [%d,%d], [%d,%d,%d]", m.Shape, b, 2*b, b, t, b, s, t)
}

// attnBias checks an attention_bias [B or 1, N or 1, S, T].
func (ctx *Context) attnBias(t *onnx.Tensor, b, n, s, tl int) ([]float32, bool, bool, error) {
	if t == nil {
		return nil, false, false, nil
	}
	d, err := ctx.floatsOf(t, "attention_bias")
	if err != nil {
		return nil, false, false, err
	}
	sh := t.Shape
	if len(sh) != 4 || (sh[0] != b && sh[0] != 1) || (sh[1] != n && sh[1] != 1) || sh[2] != s || sh[3] != tl {
		return nil, false, false, ctx.errf("attention_bias has shape %v, want [%d or 1, %d or 1, %d, %d]", sh, b, n, s, tl)
	}
	return d, sh[0] == b && b > 1, sh[1] == n && n > 1, nil
}

// msAttention is com.microsoft Attention: packed QKV projection followed by
// multi-head self-attention. Inputs: input [B,S,Din], weights
// [Din, Hq+Hk+Hv], bias [Hq+Hk+Hv] (optional), mask_index (optional), past
// (unsupported), attention_bias [B|1,N|1,S,S] (optional). Attributes:
// num_heads, qkv_hidden_sizes, unidirectional, scale, mask_filter_value.
func msAttention(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 2, 7); err != nil {
		return nil, err
	}
	if opt(in, 4) != nil {
		return nil, ctx.errf("the past input is not supported by the native backend")
	}
	if ctx.Node != nil && len(ctx.Node.Output) > 1 && ctx.Node.Output[1] != "" {
		return nil, ctx.errf("the present output is not supported by the native backend")
	}
	x, err := ctx.floatsOf(in[0], "input")
	if err != nil {
		return nil, err
	}
	w, err := ctx.floatsOf(in[1], "weights")
	if err != nil {
		return nil, err
	}
	if len(in[0].Shape) != 3 || len(in[1].Shape) != 2 || in[1].Shape[0] != in[0].Shape[2] {
		return nil, ctx.errf("input %v and weights %v must be [B,S,D] and [D,·]", in[0].Shape, in[1].Shape)
	}
	b, s, din := in[0].Shape[0], in[0].Shape[1], in[0].Shape[2]
	total := in[1].Shape[1]
	n, err := ctx.numHeads()
	if err != nil {
		return nil, err
	}
	hq, hk, hv, err := ctx.qkvHiddenSizes(in[1].Shape, n)
	if err != nil {
		return nil, err
	}
	bias, err := ctx.vecOf(opt(in, 2), "bias", total)
	if err != nil {
		return nil, err
	}
	p := &attnProblem{b: b, n: n, s: s, t: s, dk: hq / n, dv: hv / n, threads: ctx.Threads}
	if err := ctx.attentionOptions(p, opt(in, 3), opt(in, 5)); err != nil {
		return nil, err
	}
	// The packed projection can exceed both inputs; the per-head copies
	// of its parts and the output are no larger. attend charges the
	// scores buffer.
	if err := ctx.budget("QKV projection", onnx.Float, []int{b, s, total}); err != nil {
		return nil, err
	}
	// One GEMM for the packed projection.
	qkv := make([]float32, b*s*total)
	gemm.Sgemm(false, false, b*s, total, din, 1, x, din, w, total, 0, qkv, total, ctx.Threads)
	p.q = make([]float32, b*s*hq)
	p.k = make([]float32, b*s*hk)
	p.v = make([]float32, b*s*hv)
	toHeads(p.q, qkv, b, s, n, p.dk, total, 0, bias)
	toHeads(p.k, qkv, b, s, n, p.dk, total, hq, bias)
	toHeads(p.v, qkv, b, s, n, p.dv, total, hq+hk, bias)
	return ctx.attend(p)
}

// numHeads reads the num_heads attribute, which must be positive.
func (ctx *Context) numHeads() (int, error) {
	n := int(ctx.attrInt("num_heads", 0))
	if n <= 0 {
		return 0, ctx.errf("num_heads must be positive, got %d", n)
	}
	return n, nil
}

// qkvHiddenSizes returns Attention's hidden sizes of Q, K and V: the
// qkv_hidden_sizes attribute, else a third of the weights' columns each.
// Q and K must be as wide, and Q and V divide into the n heads.
func (ctx *Context) qkvHiddenSizes(weights []int, n int) (hq, hk, hv int, err error) {
	total := weights[1]
	hq, hk, hv = total/3, total/3, total/3
	if sizes, ok := ctx.attrInts("qkv_hidden_sizes"); ok {
		if len(sizes) != 3 {
			return 0, 0, 0, ctx.errf("qkv_hidden_sizes must have 3 values, got %v", sizes)
		}
		hq, hk, hv = int(sizes[0]), int(sizes[1]), int(sizes[2])
	}
	if hq+hk+hv != total || hq != hk || hq%n != 0 || hv%n != 0 || hq <= 0 || hv <= 0 {
		return 0, 0, 0, ctx.errf("hidden sizes q=%d k=%d v=%d do not fit weights %v and %d heads", hq, hk, hv, weights, n)
	}
	return hq, hk, hv, nil
}

// attentionOptions sets p's scale (default 1/√dk), mask filter value and
// causal masking from the attributes, and its key mask and attention
// bias from the inputs mask and bias (either may be nil); p's sizes must
// be set.
func (ctx *Context) attentionOptions(p *attnProblem, mask, bias *onnx.Tensor) error {
	p.scale = ctx.attrFloat("scale", 0)
	if p.scale == 0 {
		p.scale = float32(1 / math.Sqrt(float64(p.dk)))
	}
	p.filter = ctx.attrFloat("mask_filter_value", -10000)
	p.causal = ctx.attrInt("unidirectional", 0) != 0
	var err error
	if p.mask, p.maskS, err = ctx.keyMask(mask, p.b, p.s, p.t, p.filter); err != nil {
		return err
	}
	p.bias, p.biasB, p.biasN, err = ctx.attnBias(bias, p.b, p.n, p.s, p.t)
	return err
}

// attend charges the scores buffer each worker of p.run allocates and the
// output, computes the attention and returns it as [B, S, N·dv].
func (ctx *Context) attend(p *attnProblem) ([]*onnx.Tensor, error) {
	if err := ctx.budgetBytes("scores buffer", int64(p.s)*int64(p.t), 4); err != nil {
		return nil, err
	}
	shape := []int{p.b, p.s, p.n * p.dv}
	if err := ctx.budget("output", onnx.Float, shape); err != nil {
		return nil, err
	}
	p.out = make([]float32, p.b*p.s*p.n*p.dv)
	if err := p.run(); err != nil {
		return nil, ctx.errf("%v", err)
	}
	return []*onnx.Tensor{onnx.NewFloat(shape, p.out)}, nil
}

// multiHeadAttention is com.microsoft MultiHeadAttention. Inputs: query
// [B,S,D] (or packed [B,S,N,3,H] with key and value absent), key [B,L,D]
// (or packed KV [B,L,N,2,H] with value absent, or [B,N,L,H] with value
// [B,N,L,Hv]), value [B,L,Dv], bias [D+D+Dv] (optional),
// key_padding_mask (optional: [B], [2B+?], [B,L], [B,S,L]), attention_bias
// [B|1,N|1,S,L] (optional). past/present states are not supported.
func multiHeadAttention(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 1, 10); err != nil {
		return nil, err
	}
	if err := ctx.noPastState(in); err != nil {
		return nil, err
	}
	n, err := ctx.numHeads()
	if err != nil {
		return nil, err
	}
	qd, err := ctx.floatsOf(in[0], "query")
	if err != nil {
		return nil, err
	}
	var bias []float32
	if bt := opt(in, 3); bt != nil {
		if bias, err = ctx.floatsOf(bt, "bias"); err != nil {
			return nil, err
		}
	}
	p := &attnProblem{n: n, threads: ctx.Threads}
	if err := ctx.mhaOperands(p, in[0].Shape, qd, opt(in, 1), opt(in, 2), bias); err != nil {
		return nil, err
	}
	if err := ctx.attentionOptions(p, opt(in, 4), opt(in, 5)); err != nil {
		return nil, err
	}
	if p.t == 0 {
		return nil, ctx.errf("key/value sequence length is 0")
	}
	return ctx.attend(p)
}

// noPastState refuses MultiHeadAttention's past-state inputs (6 on) and
// present outputs.
func (ctx *Context) noPastState(in []*onnx.Tensor) error {
	for i := 6; i < len(in); i++ {
		if in[i] != nil {
			return ctx.errf("input %d (past state / extras) is not supported by the native backend", i)
		}
	}
	if ctx.Node != nil && len(ctx.Node.Output) > 1 {
		for _, o := range ctx.Node.Output[1:] {
			if o != "" {
				return ctx.errf("present outputs are not supported by the native backend")
			}
		}
	}
	return nil
}

// mhaOperands sets p's sizes and per-head Q, K and V (bias added) from
// MultiHeadAttention's query (shape qs, data qd), key and value, in one of
// the four layouts the op accepts.
func (ctx *Context) mhaOperands(p *attnProblem, qs []int, qd []float32, key, value *onnx.Tensor, bias []float32) error {
	switch {
	case len(qs) == 5 && key == nil && value == nil:
		return ctx.packedQKV(p, qs, qd, bias)
	case len(qs) == 3 && key != nil && len(key.Shape) == 5 && value == nil:
		return ctx.packedKV(p, qs, qd, key, bias)
	case len(qs) == 3 && key != nil && value != nil && len(key.Shape) == 3 && len(value.Shape) == 3:
		return ctx.separateKV(p, qs, qd, key, value, bias)
	case len(qs) == 3 && key != nil && value != nil && len(key.Shape) == 4 && len(value.Shape) == 4:
		return ctx.headsKV(p, qs, qd, key, value, bias)
	}
	return ctx.errf("unsupported query/key/value shapes %v, %v, %v", qs, shapeOf(key), shapeOf(value))
}

// packedQKV reads a packed query [B,S,N,3,H] holding Q, K and V.
func (ctx *Context) packedQKV(p *attnProblem, qs []int, qd, bias []float32) error {
	n := p.n
	if qs[2] != n || qs[3] != 3 {
		return ctx.errf("packed query has shape %v, want [B,S,%d,3,H]", qs, n)
	}
	b, s, h := qs[0], qs[1], qs[4]
	p.b, p.s, p.t, p.dk, p.dv = b, s, s, h, h
	p.q, p.k, p.v = make([]float32, b*n*s*h), make([]float32, b*n*s*h), make([]float32, b*n*s*h)
	if bias != nil && len(bias) != 3*n*h {
		return ctx.errf("bias has %d values, want %d", len(bias), 3*n*h)
	}
	unpackHeads([][]float32{p.q, p.k, p.v}, qd, b, s, n, h, 0, bias)
	return nil
}

// packedKV reads a query [B,S,D] and a packed key/value [B,L,N,2,H].
func (ctx *Context) packedKV(p *attnProblem, qs []int, qd []float32, key *onnx.Tensor, bias []float32) error {
	n, ks := p.n, key.Shape
	b, s, d := qs[0], qs[1], qs[2]
	if ks[0] != b || ks[2] != n || ks[3] != 2 || ks[4]*n != d {
		return ctx.errf("packed key/value has shape %v, want [%d,L,%d,2,%d]", ks, b, n, d/n)
	}
	kd, err := ctx.floatsOf(key, "key")
	if err != nil {
		return err
	}
	l, h := ks[1], ks[4]
	if bias != nil && len(bias) != 3*d {
		return ctx.errf("bias has %d values, want %d", len(bias), 3*d)
	}
	p.b, p.s, p.t, p.dk, p.dv = b, s, l, h, h
	p.q = make([]float32, b*s*d)
	toHeads(p.q, qd, b, s, n, h, d, 0, bias)
	p.k, p.v = make([]float32, b*n*l*h), make([]float32, b*n*l*h)
	unpackHeads([][]float32{p.k, p.v}, kd, b, l, n, h, 1, bias)
	return nil
}

// separateKV reads a query [B,S,D], key [B,L,D] and value [B,L,Dv].
func (ctx *Context) separateKV(p *attnProblem, qs []int, qd []float32, key, value *onnx.Tensor, bias []float32) error {
	n := p.n
	b, s, d := qs[0], qs[1], qs[2]
	ks, vs := key.Shape, value.Shape
	if ks[0] != b || vs[0] != b || ks[2] != d || vs[1] != ks[1] || d%n != 0 || vs[2]%n != 0 {
		return ctx.errf("query %v, key %v, value %v do not fit %d heads", qs, ks, vs, n)
	}
	kd, err := ctx.floatsOf(key, "key")
	if err != nil {
		return err
	}
	vd, err := ctx.floatsOf(value, "value")
	if err != nil {
		return err
	}
	l, dvAll := ks[1], vs[2]
	if bias != nil && len(bias) != 2*d+dvAll {
		return ctx.errf("bias has %d values, want %d", len(bias), 2*d+dvAll)
	}
	p.b, p.s, p.t, p.dk, p.dv = b, s, l, d/n, dvAll/n
	p.q, p.k, p.v = make([]float32, b*s*d), make([]float32, b*l*d), make([]float32, b*l*dvAll)
	toHeads(p.q, qd, b, s, n, p.dk, d, 0, bias)
	var kb, vb []float32
	if bias != nil {
		kb, vb = bias[d:2*d], bias[2*d:]
	}
	toHeads(p.k, kd, b, l, n, p.dk, d, 0, kb)
	toHeads(p.v, vd, b, l, n, p.dv, dvAll, 0, vb)
	return nil
}

// headsKV reads a query [B,S,D] and key and value already split into
// heads, [B,N,L,H] and [B,N,L,Hv]; the bias applies to Q only.
func (ctx *Context) headsKV(p *attnProblem, qs []int, qd []float32, key, value *onnx.Tensor, bias []float32) error {
	n := p.n
	b, s, d := qs[0], qs[1], qs[2]
	ks, vs := key.Shape, value.Shape
	if ks[0] != b || ks[1] != n || ks[3]*n != d || vs[0] != b || vs[1] != n || vs[2] != ks[2] {
		return ctx.errf("query %v, key %v, value %v do not fit %d heads", qs, ks, vs, n)
	}
	var err error
	if p.k, err = ctx.floatsOf(key, "key"); err != nil {
		return err
	}
	if p.v, err = ctx.floatsOf(value, "value"); err != nil {
		return err
	}
	if bias != nil && len(bias) < d {
		return ctx.errf("bias has %d values, want at least %d", len(bias), d)
	}
	p.b, p.s, p.t, p.dk, p.dv = b, s, ks[2], ks[3], vs[3]
	p.q = make([]float32, b*s*d)
	toHeads(p.q, qd, b, s, n, p.dk, d, 0, bias)
	return nil
}

// unpackHeads copies a packed [B, L, N, C, H] activation into the C
// per-head buffers dst, each [B, N, L, H], adding to part c the bias
// values from (c0+c)·N·H + head·H when bias is given.
func unpackHeads(dst [][]float32, src []float32, b, l, n, h, c0 int, bias []float32) {
	parts := len(dst)
	for bi := 0; bi < b; bi++ {
		for li := 0; li < l; li++ {
			for hi := 0; hi < n; hi++ {
				for c, d := range dst {
					from := src[(((bi*l+li)*n+hi)*parts+c)*h:]
					o := d[((bi*n+hi)*l+li)*h : ((bi*n+hi)*l+li+1)*h]
					copy(o, from[:h])
					if bias != nil {
						bb := bias[(c0+c)*n*h+hi*h:]
						for j := range o {
							o[j] += bb[j]
						}
					}
				}
			}
		}
	}
}

func shapeOf(t *onnx.Tensor) []int {
	if t == nil {
		return nil
	}
	return t.Shape
}
