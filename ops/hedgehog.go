package ops

import (
	"fmt"
	"math"

	"github.com/linearize/linearize/internal/gemm"
	"github.com/linearize/linearize/kernels"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// HedgehogAttention (domain ai.linearize, version 1) is linear attention
// with a learned feature map (Hedgehog: φ = exp(±(xW + b))), optionally
// combined with exact softmax weights inside a local window of blocks; the
// window and the far field share one normaliser.
//
// Inputs, all required by the function body (the Go kernel accepts an
// empty key_bias):
//
//	0 Q [B,H,S,D]   1 K [B,H,S,D]   2 V [B,H,S,Dv]   (self-attention)
//	3 key_bias [B or 1,1,1,S or 1], added to every score of key j
//	4 q_weight [H,D,F]   5 q_bias [H,2F]   6 q_norm [H]
//	7 k_weight [H,D,F]   8 k_bias [H,2F]   9 k_norm [H]
//
// Output [B,H,S,Dv]. Attributes: scale (float; the node always carries it,
// HedgehogAttrs reads 0 as 1/√D), block b ≥ 0 (default 0), reach r ≥ 0
// (default 1), causal (0 or 1, default 0).
//
// Feature map. For head h and a row x ∈ R^D, with W = weight[h] (D×F),
// c = bias[h] (2F values) and ν = norm[h]: a = x·W ∈ R^F, n = ν·‖x‖², and
//
//	φ(x)_f     = exp( a_f + c_f     − n)   f < F
//	φ(x)_{F+f} = exp(−a_f + c_{F+f} − n)   f < F
//
// (queries use q_*, keys k_*; every feature is positive). With W =
// √scale·Ωᵀ for Gaussian Ω (F×D), c = −½·log 2F on both sides and ν =
// scale/2, φ(q)·φ(k) is the hyperbolic positive random-feature (FAVOR+)
// estimate of exp(scale·q·k): the op starts as a Performer and training
// moves W, c and ν. HedgehogLogFeatures computes log φ of one row.
//
// Weights. For query i and key j, with β_j = key_bias[b,0,0,j] (any
// additive per-key bias is exact: it multiplies the weight by e^{β_j};
// BERT's mask, 0 or a large negative, makes padded keys weigh nothing):
//
//   - b > 0: the near set N(i) holds the keys j with |⌊j/b⌋ − ⌊i/b⌋| ≤ r
//     (and j ≤ i when causal); w_ij = exp(scale·q_i·k_j + β_j) there;
//   - every other key j (j ≤ i when causal) is far:
//     w_ij = φ_q(q_i)·φ_k(k_j)·e^{β_j};
//   - b = 0: no near set; every key is far (pure linear attention, the
//     prefix j ≤ i when causal).
//
// out_i = Σ_j w_ij v_j / Σ_j w_ij, and 0 when the denominator is 0.
// Biases are first clamped to float32's finite range (NaN counts as its
// lowest value), so −Inf masks behave like −3.4e38.
//
// Stabilisation (identical in the kernel and the function body, and exact
// in the ratio): biases are taken relative to their maximum over the
// sequence, β'_j = β_j − max β; key logits t_jf = log φ_k(k_j)_f + β'_j
// are stabilised per feature column by T_f = max_j t_jf (every key,
// near or far); query logits u_if = log φ_q(q_i)_f + T_f; each query uses
// M_i = max(max_{j∈N(i)} scale·q_i·k_j + β'_j, max_f u_if), the second
// term only when query i has a far key, so every weight exp(· − M_i) is at
// most 1. A mask of −1e4, −1e9 or −3.4e38 then gives padded keys weight
// exactly 0, and a sequence whose keys are all masked averages them as
// softmax would. Limits, reached only by a causal query whose visible
// keys are all masked while later keys are not (left padding): the
// function body rounds β' in float32, so near scores of −1e4 + x are as
// precise as a float32 softmax over them (≈1e-3); and far features are
// relative to the column maxima T_f over all keys, so far keys more than
// ~87 below them (float32 body; ~700 in the Go kernel) weigh 0, and a
// query that sees only such keys gets zeros.
//
// Cost is linear in S: the far field comes from per-block states
// Σ_{j∈block} φ_k(k_j)e^{β'_j}⊗[v_j, 1] ([2F, Dv+1] per block of b) summed
// over the blocks before (exclusive prefix) and after (exclusive suffix)
// the query's window, never as a total minus the window; the near part
// is a [b, (2r+1)·b] score block per query block ((r+1)·b when causal).
// Per query: (2r+1)·b·(D+Dv) + 2F·(Dv+1) multiply-adds, plus
// 2·D·F + 2F·(Dv+1) per token for the features and states. Causal b = 0 is
// a prefix sum over keys (the function body sums chunks of 64 keys and
// multiplies inside a chunk, as Performer's causal body does).
//
// Keys and values of masked positions must be finite: their weight is
// e^{β'} = 0, and 0·NaN is NaN.
const hedgehogDoc = "HedgehogAttention: learned exp(±(xW+b)) feature-map linear attention with an optional exact local window, one normaliser (see github.com/linearize/linearize/ops)."

// HedgehogOp is the op type of HedgehogAttention.
const HedgehogOp = "HedgehogAttention"

// DefaultHedgehogReach is the reach a HedgehogAttention node without the
// attribute has (the query's block and both neighbours).
const DefaultHedgehogReach = 1

// hedgehogChunk is the chunk length of the causal block-0 function body.
const hedgehogChunk = 64

// HedgehogAttrs are the attributes of HedgehogAttention.
type HedgehogAttrs struct {
	// Scale multiplies q·k in the near set; zero selects 1/√D.
	Scale float32
	// Block is b, the block length of the exact local window; 0: no
	// window, pure linear attention.
	Block int
	// Reach is r, literally: the window of a query is its block and the r
	// blocks on each side (before it only, when causal). The zero value is
	// r = 0, the block alone; DefaultHedgehogReach is the attribute's
	// default.
	Reach int
	// Causal restricts query i to the keys j ≤ i.
	Causal bool
	// Threads bounds the goroutines the Go kernel uses (not an attribute).
	Threads int
}

// HedgehogParams are the feature-map parameters of HedgehogAttention
// (inputs 4..9): weights [H,D,F], biases [H,2F] and norms [H] of the
// query and key maps.
type HedgehogParams struct {
	QWeight, QBias, QNorm *onnx.Tensor
	KWeight, KBias, KNorm *onnx.Tensor
}

// hedgehogSchema is HedgehogAttention's schema.
var hedgehogSchema = newSchema(OpSchema{
	Op: HedgehogOp, Doc: hedgehogDoc, File: "ops/hedgehog.go",
	Inputs: qkvInputs(selfQKV,
		keyBiasInput,
		InputSchema{Name: "q_weight", Doc: "query map W [H,D,F]"},
		InputSchema{Name: "q_bias", Doc: "query map biases [H,2F]"},
		InputSchema{Name: "q_norm", Doc: "query map norm weight ν [H]"},
		InputSchema{Name: "k_weight", Doc: "key map W [H,D,F]"},
		InputSchema{Name: "k_bias", Doc: "key map biases [H,2F]"},
		InputSchema{Name: "k_norm", Doc: "key map norm weight ν [H]"},
	),
	Output: "[B,H,S,Dv]",
}, func(a *HedgehogAttrs) *int { return &a.Threads },
	scaleField(scaleDoc, func(a *HedgehogAttrs) *float32 { return &a.Scale }),
	intField(AttrSchema{Name: "block", Default: int64(0), Min: 0, Max: MaxLocalBlock,
		Doc: "b: block length of the exact local window; 0: pure linear attention"}, func(a *HedgehogAttrs) *int { return &a.Block }),
	intField(AttrSchema{Name: "reach", Default: int64(DefaultHedgehogReach), Min: 0, Max: MaxReach,
		Doc: "r: blocks on each side of the query's (before it only when causal) in the exact window"}, func(a *HedgehogAttrs) *int { return &a.Reach }),
	flagField(AttrSchema{Name: "causal", Doc: "query i sees keys j ≤ i"}, func(a *HedgehogAttrs) *bool { return &a.Causal }),
)

// HedgehogInputNames returns the op's input names in order: Q, K, V,
// key_bias, q_weight, q_bias, q_norm, k_weight, k_bias, k_norm (the
// function's signature; nodes pass their own values in this order).
func HedgehogInputNames() []string { return hedgehogSchema.InputNames(-1) }

func (a HedgehogAttrs) check() error { return hedgehogSchema.check(&a) }

// ParseHedgehogAttrs reads the attributes of a HedgehogAttention node
// (reach defaults to DefaultHedgehogReach, block and causal to 0).
func ParseHedgehogAttrs(n *onnxpb.NodeProto) (HedgehogAttrs, error) {
	return hedgehogSchema.parse(n)
}

// NewHedgehogNode returns a HedgehogAttention node reading inputs (in the
// order of HedgehogInputNames) and writing output, with the attributes of
// a that differ from their defaults (Scale is always written and must not
// be zero; Reach is literal: 0 is written, DefaultHedgehogReach is not).
func NewHedgehogNode(name string, inputs []string, output string, a HedgehogAttrs) *onnxpb.NodeProto {
	return hedgehogSchema.node(name, inputs, output, &a)
}

func init() {
	hedgehogSchema.register(func(a HedgehogAttrs, in []*onnx.Tensor) (*onnx.Tensor, error) {
		p := HedgehogParams{QWeight: in[4], QBias: in[5], QNorm: in[6], KWeight: in[7], KBias: in[8], KNorm: in[9]}
		return Hedgehog(in[0], in[1], in[2], in[3], p, a)
	})
}

// check validates the parameters for h heads of dimension d and returns
// F.
func (p HedgehogParams) check(h, d int) (int, error) {
	const op = HedgehogOp
	for _, x := range []struct {
		name string
		t    *onnx.Tensor
	}{{"q_weight", p.QWeight}, {"q_bias", p.QBias}, {"q_norm", p.QNorm}, {"k_weight", p.KWeight}, {"k_bias", p.KBias}, {"k_norm", p.KNorm}} {
		if x.t == nil {
			return 0, fmt.Errorf("ops: %s: input %s is missing", op, x.name)
		}
		if x.t.DType != onnx.Float {
			return 0, fmt.Errorf("ops: %s: %s has type %s, want float32", op, x.name, onnx.TypeName(x.t.DType))
		}
		if len(x.t.Floats()) != x.t.Len() {
			return 0, fmt.Errorf("ops: %s: %s holds %d values for shape %v", op, x.name, len(x.t.Floats()), x.t.Shape)
		}
	}
	ws := p.QWeight.Shape
	if len(ws) != 3 || ws[0] != h || ws[1] != d || ws[2] < 1 {
		return 0, fmt.Errorf("ops: %s: q_weight shape %v, want [%d, %d, F] with F ≥ 1", op, ws, h, d)
	}
	f := ws[2]
	if s := p.KWeight.Shape; len(s) != 3 || s[0] != h || s[1] != d || s[2] != f {
		return 0, fmt.Errorf("ops: %s: k_weight shape %v, want [%d, %d, %d] (as q_weight)", op, s, h, d, f)
	}
	for _, x := range []struct {
		name string
		t    *onnx.Tensor
	}{{"q_bias", p.QBias}, {"k_bias", p.KBias}} {
		if s := x.t.Shape; len(s) != 2 || s[0] != h || s[1] != 2*f {
			return 0, fmt.Errorf("ops: %s: %s shape %v, want [%d, %d]", op, x.name, s, h, 2*f)
		}
	}
	for _, x := range []struct {
		name string
		t    *onnx.Tensor
	}{{"q_norm", p.QNorm}, {"k_norm", p.KNorm}} {
		if s := x.t.Shape; len(s) != 1 || s[0] != h {
			return 0, fmt.Errorf("ops: %s: %s shape %v, want [%d]", op, x.name, s, h)
		}
	}
	return f, nil
}

// HedgehogLogFeatures writes log φ(x) of one row into logPhi, for one
// head: x holds D values, w the head's weight D×F row-major (w[c·F+f]),
// bias its 2F biases, norm its norm ν, and logPhi receives 2F values,
//
//	logPhi[f]   =  a_f + bias[f]   − ν‖x‖²
//	logPhi[F+f] = −a_f + bias[F+f] − ν‖x‖²,   a = x·w.
//
// φ = exp(logPhi) (the log is what stays finite; the op's far weight of a
// query–key pair is Σ_f exp(logφ_q,f + logφ_k,f)·e^{β_j}). It panics when
// the lengths disagree (len(bias) = len(logPhi) = 2F, len(w) = D·F).
func HedgehogLogFeatures(x, w, bias []float64, norm float64, logPhi []float64) {
	f := len(bias) / 2
	if len(bias) != 2*f || len(logPhi) != 2*f || len(w) != len(x)*f {
		panic(fmt.Sprintf("ops: HedgehogLogFeatures: %d inputs, %d weights, %d biases, %d outputs: want D, D·F, 2F, 2F", len(x), len(w), len(bias), len(logPhi)))
	}
	a := make([]float64, f)
	var sq float64
	for c, xc := range x {
		sq += xc * xc
		row := w[c*f : (c+1)*f]
		for j := range a {
			a[j] += xc * row[j]
		}
	}
	hedgehogLogs(a, sq, bias, norm, logPhi)
}

// hedgehogLogs finishes the feature map of one row from its projection a
// (F values) and squared norm sq: out[f] = a_f + c_f − ν·sq, out[F+f] =
// −a_f + c_{F+f} − ν·sq.
func hedgehogLogs[T float32 | float64](a []T, sq float64, c []T, nu float64, out []float64) {
	f := len(a)
	n := nu * sq
	for j, x := range a {
		out[j] = float64(x) + float64(c[j]) - n
		out[f+j] = -float64(x) + float64(c[f+j]) - n
	}
}

// Hedgehog computes HedgehogAttention (see the op's definition above) with
// float32 products and float64 features, states and sums. bias may be nil
// (every key bias 0).
func Hedgehog(q, k, v, bias *onnx.Tensor, p HedgehogParams, a HedgehogAttrs) (*onnx.Tensor, error) {
	const op = HedgehogOp
	if err := a.check(); err != nil {
		return nil, err
	}
	b, h, n, d, dv, err := selfAttnDims(op, q, k, v)
	if err != nil {
		return nil, err
	}
	f, err := p.check(h, d)
	if err != nil {
		return nil, err
	}
	mask, err := newKeyMask(op, bias, b, n)
	if err != nil {
		return nil, err
	}
	g := hhGeom{n: n, d: d, dv: dv, f: f, f2: 2 * f, dv1: dv + 1, blk: a.Block, r: a.Reach, causal: a.Causal, nb: 1}
	if g.blk > 0 {
		g.nb = (n + g.blk - 1) / g.blk
		g.rows = min(g.blk, n)
		g.width = min(n, (2*g.r+1)*g.blk)
	}
	if !fits(n, g.f2) || !fits(g.nb, g.f2, g.dv1) || !fits(g.rows, g.width) {
		return nil, fmt.Errorf("ops: %s: %d tokens, %d features, block %d and reach %d would exceed %d elements per buffer", op, n, g.f2, g.blk, g.r, kernels.MaxElements)
	}
	out := make([]float32, b*h*n*dv)
	if n == 0 {
		return onnx.NewFloat([]int{b, h, n, dv}, out), nil
	}
	g.scale = resolveScale(a.Scale, d)
	brel := relativeBiases(mask, b, n)
	qd, kd, vd := q.Floats(), k.Floats(), v.Floats()
	kernels.ParallelWith(b*h, a.Threads, func() func(int) {
		w := newHHHead(g)
		return func(bh int) {
			bi, hi := bh/h, bh%h
			w.br = brel[bi]
			w.qh, w.kh, w.vh = qd[bh*n*d:(bh+1)*n*d], kd[bh*n*d:(bh+1)*n*d], vd[bh*n*dv:(bh+1)*n*dv]
			w.features(p, hi)
			oh := out[bh*n*dv : (bh+1)*n*dv]
			if g.blk == 0 {
				w.linear(oh)
			} else {
				w.blocked(oh)
			}
		}
	})
	return onnx.NewFloat([]int{b, h, n, dv}, out), nil
}

// relativeBiases returns β'_j = β_j − max β per sequence, biases clamped
// to float32's range.
func relativeBiases(mask *keyMask, b, n int) [][]float64 {
	brel := make([][]float64, b)
	for bi := range brel {
		row := make([]float64, n)
		top := math.Inf(-1)
		for j := range row {
			x, _ := mask.at(bi, j)
			row[j] = clampBias(x)
			top = max(top, row[j])
		}
		for j := range row {
			row[j] -= top
		}
		brel[bi] = row
	}
	return brel
}

// hhGeom are the sizes of one Hedgehog call.
type hhGeom struct {
	n, d, dv, f, f2, dv1 int
	blk, r, nb           int
	rows, width          int // the near score block
	causal               bool
	scale                float32
}

// hhHead is one worker's scratch for a (batch, head) of Hedgehog.
type hhHead struct {
	hhGeom
	br         []float64 // β' of the sequence
	qh, kh, vh []float32
	proj       []float32
	u          []float64 // query logits u_if
	e          []float64 // key features exp(t_jf − T_f)
	U          []float64 // row maxima of u
	T          []float64 // column maxima of t
	acc        []float64
	far        []float64
	st, suf    []float64 // per-block states and their exclusive suffix sums
	pre        []float64
	local      []float32
	s          []float64
}

func newHHHead(g hhGeom) *hhHead {
	w := &hhHead{hhGeom: g,
		proj: make([]float32, g.n*g.f), u: make([]float64, g.n*g.f2), e: make([]float64, g.n*g.f2),
		U: make([]float64, g.n), T: make([]float64, g.f2), acc: make([]float64, g.dv1), far: make([]float64, g.f2*g.dv1),
	}
	if g.blk > 0 {
		w.st = make([]float64, g.nb*g.f2*g.dv1)
		if !g.causal {
			w.suf = make([]float64, g.nb*g.f2*g.dv1)
		}
		w.pre = make([]float64, g.f2*g.dv1)
		w.local = make([]float32, g.rows*g.width)
		w.s = make([]float64, g.width)
	}
	return w
}

// features computes the key features, stabilised per column, and the
// query logits u = log φ_q + T with their row maxima U, for head hi.
func (w *hhHead) features(p HedgehogParams, hi int) {
	n, d, f, f2 := w.n, w.d, w.f, w.f2
	kw, kb, kn := p.KWeight.Floats(), p.KBias.Floats(), p.KNorm.Floats()
	gemm.Sgemm(false, false, n, f, d, 1, w.kh, d, kw[hi*d*f:(hi+1)*d*f], f, 0, w.proj, f, 1)
	for c := range w.T {
		w.T[c] = math.Inf(-1)
	}
	for j := 0; j < n; j++ {
		t := w.e[j*f2 : (j+1)*f2]
		hedgehogLogs(w.proj[j*f:(j+1)*f], sumSquares(w.kh[j*d:(j+1)*d]), kb[hi*f2:(hi+1)*f2], float64(kn[hi]), t)
		for c := range t {
			t[c] += w.br[j]
			w.T[c] = max(w.T[c], t[c])
		}
	}
	for j := 0; j < n; j++ {
		t := w.e[j*f2 : (j+1)*f2]
		for c := range t {
			t[c] = math.Exp(t[c] - w.T[c])
		}
	}
	qw, qb, qn := p.QWeight.Floats(), p.QBias.Floats(), p.QNorm.Floats()
	gemm.Sgemm(false, false, n, f, d, 1, w.qh, d, qw[hi*d*f:(hi+1)*d*f], f, 0, w.proj, f, 1)
	for i := 0; i < n; i++ {
		ui := w.u[i*f2 : (i+1)*f2]
		hedgehogLogs(w.proj[i*f:(i+1)*f], sumSquares(w.qh[i*d:(i+1)*d]), qb[hi*f2:(hi+1)*f2], float64(qn[hi]), ui)
		w.U[i] = math.Inf(-1)
		for c := range ui {
			ui[c] += w.T[c]
			w.U[i] = max(w.U[i], ui[c])
		}
	}
}

// addKey adds key j's features ⊗ [v_j, 1] to a state.
func (w *hhHead) addKey(state []float64, j int) {
	dv, dv1 := w.dv, w.dv1
	vj := w.vh[j*dv : (j+1)*dv]
	for c, x := range w.e[j*w.f2 : (j+1)*w.f2] {
		if x == 0 {
			continue
		}
		row := state[c*dv1 : (c+1)*dv1]
		for t, y := range vj {
			row[t] += x * float64(y)
		}
		row[dv] += x
	}
}

// addFar adds Σ_f exp(u_if − M)·state[f] to acc.
func (w *hhHead) addFar(state []float64, i int, m float64) {
	for c, x := range w.u[i*w.f2 : (i+1)*w.f2] {
		g := math.Exp(x - m)
		if g == 0 {
			continue
		}
		row := state[c*w.dv1 : (c+1)*w.dv1]
		for t := range w.acc {
			w.acc[t] += g * row[t]
		}
	}
}

// finish writes acc's ratio into output row i (zeros for a zero
// denominator).
func (w *hhHead) finish(oh []float32, i int) {
	o := oh[i*w.dv : (i+1)*w.dv]
	if !(w.acc[w.dv] > 0) {
		clear(o)
		return
	}
	for t := range o {
		o[t] = float32(w.acc[t] / w.acc[w.dv])
	}
}

// linear is block 0: pure linear attention, one state of every key, or
// the running prefix when causal.
func (w *hhHead) linear(oh []float32) {
	clear(w.far)
	if !w.causal {
		for j := 0; j < w.n; j++ {
			w.addKey(w.far, j)
		}
	}
	for i := 0; i < w.n; i++ {
		if w.causal {
			w.addKey(w.far, i)
		}
		clear(w.acc)
		w.addFar(w.far, i, w.U[i])
		w.finish(oh, i)
	}
}

// blocked is block b > 0: per-block states, their exclusive suffix sums
// and the running prefix give each block's far field; the near window is
// exact.
func (w *hhHead) blocked(oh []float32) {
	nb, r, sz := w.nb, w.r, w.f2*w.dv1
	clear(w.st)
	for j := 0; j < w.n; j++ {
		w.addKey(w.st[(j/w.blk)*sz:(j/w.blk+1)*sz], j)
	}
	if !w.causal {
		clear(w.suf[(nb-1)*sz:])
		for c := nb - 2; c >= 0; c-- {
			dst, next, add := w.suf[c*sz:(c+1)*sz], w.suf[(c+1)*sz:(c+2)*sz], w.st[(c+1)*sz:(c+2)*sz]
			for t := range dst {
				dst[t] = next[t] + add[t]
			}
		}
	}
	clear(w.pre)
	for B := 0; B < nb; B++ {
		// pre = Σ_{c < B−r} st_c; far = pre + Σ_{c > B+r} st_c.
		if c := B - r - 1; c >= 0 {
			for t, x := range w.st[c*sz : (c+1)*sz] {
				w.pre[t] += x
			}
		}
		farAny := B-r > 0
		copy(w.far, w.pre)
		if !w.causal && B+r < nb-1 {
			farAny = true
			for t, x := range w.suf[(B+r)*sz : (B+r+1)*sz] {
				w.far[t] += x
			}
		}
		w.block(oh, B, farAny)
	}
}

// block computes the output rows of block B: exact weights in its window,
// the far field from w.far when farAny.
func (w *hhHead) block(oh []float32, B int, farAny bool) {
	n, d, dv, blk, r := w.n, w.d, w.dv, w.blk, w.r
	i0, i1 := B*blk, min(n, (B+1)*blk)
	lo, hi := max(0, (B-r)*blk), min(n, (B+r+1)*blk)
	if w.causal {
		hi = i1
	}
	width := hi - lo
	gemm.Sgemm(false, true, i1-i0, width, d, w.scale, w.qh[i0*d:], d, w.kh[lo*d:], d, 0, w.local, width, 1)
	for i := i0; i < i1; i++ {
		jEnd := hi
		if w.causal {
			jEnd = i + 1
		}
		m := math.Inf(-1)
		row := w.local[(i-i0)*width : (i-i0+1)*width]
		for j := lo; j < jEnd; j++ {
			w.s[j-lo] = float64(row[j-lo]) + w.br[j]
			m = max(m, w.s[j-lo])
		}
		if farAny {
			m = max(m, w.U[i])
		}
		clear(w.acc)
		for j := lo; j < jEnd; j++ {
			x := math.Exp(w.s[j-lo] - m)
			if x == 0 {
				continue
			}
			for t, y := range w.vh[j*dv : (j+1)*dv] {
				w.acc[t] += x * float64(y)
			}
			w.acc[dv] += x
		}
		if farAny {
			w.addFar(w.far, i, m)
		}
		w.finish(oh, i)
	}
}

// clampBias maps a key bias into float32's finite range (NaN and −Inf to
// its lowest value, +Inf to its largest).
func clampBias(x float32) float64 {
	switch {
	case !(x > -math.MaxFloat32):
		return -math.MaxFloat32
	case x > math.MaxFloat32:
		return math.MaxFloat32
	}
	return float64(x)
}

func sumSquares(x []float32) float64 {
	var s float64
	for _, v := range x {
		s += float64(v) * float64(v)
	}
	return s
}

// HedgehogFunction returns the FunctionProto that defines
// HedgehogAttention with standard ops of the default domain at opset
// (11..23). Block, Reach and Causal of a are built into the body (the
// function serves nodes with those attributes, which the node still
// carries for the Go kernel); scale is read from the node. Its inputs are
// those of HedgehogInputNames, all required.
//
// The body follows the Go kernel's stabilisation. Features are [B,H,S,2F]
// logits (MatMul with the [H,D,F] weights, Concat with their negation).
// With b > 0 the sequence is padded to nb·b positions and split into
// blocks: the near scores are [B,H,nb,b,W] products with the window of
// W = (2r+1)·b keys ((r+1)·b when causal), slots beyond the sequence
// masked; the far field multiplies the query features by the exclusive
// prefix (CumSum) of the per-block states shifted by r blocks, plus, when
// not causal, the exclusive reverse CumSum shifted the other way. b = 0
// multiplies the query features by one state of all keys, or, causal,
// sums chunks of 64 keys (exact products inside a chunk, exclusive prefix
// of chunk states across). The denominator rides along as a column of
// ones appended to V.
func HedgehogFunction(opset int64, a HedgehogAttrs) (*onnxpb.FunctionProto, error) {
	b, err := newFnBuilder(HedgehogOp, opset, a.check)
	if err != nil {
		return nil, err
	}
	lowest := b.constFloat(-math.MaxFloat32)
	zero := b.constFloat(0)
	one := b.constFloat(1)
	axis := func(v int64) string { return b.constInts(v) }

	// Lengths: S as a scalar and as [1], Dv+1 as [1].
	sLen0 := b.op("Gather", []string{b.op("Shape", []string{"K"}), b.constScalarInt(2)}, attrInt("axis", 0))
	sLen := b.op("Reshape", []string{sLen0, b.constInts(1)})
	dV1 := b.op("Add", []string{b.op("Slice", []string{b.op("Shape", []string{"V"}), b.constInts(3), b.constInts(4)}), b.constInts(1)})

	// Relative biases β' = clamp(β) − max β: [Bm,1,1,S].
	kb := b.op("Expand", []string{"key_bias", b.biasShape(sLen)})
	kb = b.op("Where", []string{b.op("Greater", []string{kb, lowest}), kb, lowest})
	kb = b.op("Min", []string{kb, b.constFloat(math.MaxFloat32)})
	brel := b.op("Sub", []string{kb, b.reduce("ReduceMax", kb, 3)})

	// Feature logits [B,H,S,2F].
	logFeat := func(x, w, c, nu string) string {
		p := b.op("MatMul", []string{x, w})
		sq := b.reduce("ReduceSum", b.op("Mul", []string{x, x}), 3)                           // [B,H,S,1]
		nn := b.op("Mul", []string{sq, b.op("Reshape", []string{nu, b.constInts(-1, 1, 1)})}) // [H,1,1]
		l := b.op("Concat", []string{p, b.op("Neg", []string{p})}, attrInt("axis", 3))
		l = b.op("Add", []string{l, b.op("Reshape", []string{c, b.constInts(0, 1, -1)})}) // [H,1,2F]
		return b.op("Sub", []string{l, nn})
	}
	tk := b.op("Add", []string{logFeat("K", "k_weight", "k_bias", "k_norm"), b.transpose(brel, 0, 1, 3, 2)})
	colMax := b.reduce("ReduceMax", tk, 2) // T [B,H,1,2F]
	e := b.op("Exp", []string{b.op("Sub", []string{tk, colMax})})
	u := b.op("Add", []string{logFeat("Q", "q_weight", "q_bias", "q_norm"), colMax})
	rowMax := b.reduce("ReduceMax", u, 3) // U [B,H,S,1]
	onesShape := b.op("Concat", []string{b.op("Slice", []string{b.op("Shape", []string{"V"}), b.constInts(0), b.constInts(3)}), b.constInts(1)}, attrInt("axis", 0))
	ones := b.op("ConstantOfShape", []string{onesShape}, attrTensor("value", onnx.NewFloat([]int{1}, []float32{1})))
	v1 := b.op("Concat", []string{"V", ones}, attrInt("axis", 3)) // [B,H,S,Dv+1]

	var nd string // [B,H,S,Dv+1]: numerators and denominator
	if a.Block == 0 && !a.Causal {
		st := b.op("MatMul", []string{b.transpose(e, 0, 1, 3, 2), v1}) // [B,H,2F,Dv+1]
		g := b.op("Exp", []string{b.op("Sub", []string{u, rowMax})})
		nd = b.op("MatMul", []string{g, st})
	} else {
		nd = hedgehogBlocked(b, a, sLen0, dV1, brel, e, u, rowMax, v1)
	}
	num := b.op("Slice", []string{nd, b.constInts(0), b.constInts(-1), axis(3)})
	den := b.op("Slice", []string{nd, b.constInts(-1), b.constInts(math.MaxInt64), axis(3)})
	safe := b.op("Where", []string{b.op("Greater", []string{den, zero}), den, one})
	b.op("Div", []string{num, safe})
	b.rename("out")
	doc := fmt.Sprintf("%s block=%d reach=%d causal=%t", hedgehogDoc, a.Block, a.Reach, a.Causal)
	return hedgehogSchema.function(b, doc, len(hedgehogSchema.Inputs)), nil
}

// hedgehogBlocked emits the blocked body (b > 0, or causal b = 0 with
// chunks of hedgehogChunk) and returns [B,H,S,Dv+1].
func hedgehogBlocked(b *fnBuilder, a HedgehogAttrs, sLen0, dV1, brel, e, u, rowMax, v1 string) string {
	lowest := b.constFloat(-math.MaxFloat32)
	zero := b.constFloat(0)
	toF := func(x string) string { return b.op("Cast", []string{x}, castFloat()) }
	p, r := int64(a.Block), int64(a.Reach)
	exact := p > 0
	if !exact {
		p, r = hedgehogChunk, 0 // causal only
	}
	i64 := func(v int64) string { return b.constScalarInt(v) }
	rangeOf := func(n string) string { return b.op("Range", []string{i64(0), n, i64(1)}) }
	nbs := b.op("Div", []string{b.op("Add", []string{sLen0, i64(p - 1)}), i64(p)}) // nb, a scalar
	padAmt0 := b.op("Sub", []string{b.op("Mul", []string{nbs, i64(p)}), sLen0})
	nb := b.op("Reshape", []string{nbs, b.constInts(1)})
	sLen := b.op("Reshape", []string{sLen0, b.constInts(1)})
	padAmt := b.op("Reshape", []string{padAmt0, b.constInts(1)})
	padS, padLast := b.padSpecs(padAmt)
	blockShape := b.op("Concat", []string{b.constInts(0, 0), nb, b.constInts(p, -1)}, attrInt("axis", 0))
	blocks := func(x string) string { // [B,H,S,W] -> [B,H,nb,p,W], zero padded
		return b.op("Reshape", []string{b.op("Pad", []string{x, padS}), blockShape})
	}
	// shift moves x ([..,nb,..] along axis 2, rank 5) by s blocks: result
	// block B holds x's block B−s, zeros where that is outside.
	shift := func(x string, s int64) string {
		if s == 0 {
			return x
		}
		pads := make([]int64, 10)
		if s > 0 {
			pads[2] = s
			return b.op("Slice", []string{b.op("Pad", []string{x, b.constInts(pads...)}), b.constInts(0), b.constInts(-s), b.constInts(2)})
		}
		pads[5+2] = -s
		return b.op("Slice", []string{b.op("Pad", []string{x, b.constInts(pads...)}), b.constInts(-s), b.constInts(math.MaxInt64), b.constInts(2)})
	}
	// window concatenates along axis 3 the blocks B−r..B+r (B−r..B when
	// causal) of x, blocked along axis 2, zeros beyond the ends.
	back := r
	if a.Causal {
		back = 0
	}
	window := func(x string, rank int) string { return b.window(x, rank, r, back) }
	eb := blocks(e)                                                      // [B,H,nb,p,2F]
	ebT := b.transpose(eb, 0, 1, 2, 4, 3)                                // [B,H,nb,2F,p]
	vb := blocks(v1)                                                     // [B,H,nb,p,Dv+1]
	ub := blocks(u)                                                      // [B,H,nb,p,2F]
	Ub := blocks(rowMax)                                                 // [B,H,nb,p,1]
	st := b.op("MatMul", []string{ebT, vb})                              // [B,H,nb,2F,Dv+1]
	pre := b.op("CumSum", []string{st, i64(2)}, attrInt("exclusive", 1)) // Σ_{c<B}
	far := shift(pre, r)                                                 // Σ_{c<B−r}
	if !a.Causal {
		suf := b.op("CumSum", []string{st, i64(2)}, attrInt("exclusive", 1), attrInt("reverse", 1))
		far = b.op("Add", []string{far, shift(suf, -r)}) // + Σ_{c>B+r}
	}

	var near, m string
	if exact {
		scale := b.constFloatAttr("scale")
		qb := blocks(b.op("Mul", []string{"Q", scale}))                                                                                                            // [B,H,nb,p,D]
		kwin := window(blocks("K"), 5)                                                                                                                             // [B,H,nb,W,D]
		vwin := window(vb, 5)                                                                                                                                      // [B,H,nb,W,Dv+1]
		bb := b.op("Reshape", []string{b.op("Pad", []string{brel, padLast}), b.op("Concat", []string{b.constInts(0, 0), nb, b.constInts(p)}, attrInt("axis", 0))}) // [Bm,1,nb,p]
		bwin := b.op("Reshape", []string{window(bb, 4), b.constInts(0, 0, 0, 1, -1)})                                                                              // [Bm,1,nb,1,W]
		exist := b.op("ConstantOfShape", []string{b.op("Concat", []string{b.constInts(1, 1, 1), sLen}, attrInt("axis", 0))},
			attrTensor("value", onnx.NewFloat([]int{1}, []float32{1}))) // [1,1,1,S]
		eblk := b.op("Reshape", []string{b.op("Pad", []string{exist, padLast}), b.op("Concat", []string{b.constInts(1, 1), nb, b.constInts(p)}, attrInt("axis", 0))})
		ok := b.op("Greater", []string{b.op("Reshape", []string{window(eblk, 4), b.constInts(0, 0, 0, 1, -1)}), b.constFloat(0.5)}) // [1,1,nb,1,W]
		if a.Causal {
			// Slot w of the window (blocks B−r..B) is key (B−r)·p + w,
			// visible to query B·p + t iff w ≤ r·p + t.
			w := (r + 1) * p
			rows := b.op("Reshape", []string{rangeOf(i64(p)), b.constInts(-1, 1)})
			cols := b.op("Reshape", []string{rangeOf(i64(w)), b.constInts(1, -1)})
			vis := b.op("Not", []string{b.op("Greater", []string{cols, b.op("Add", []string{rows, b.constInts(r * p)})})}) // [p,W]
			ok = b.op("And", []string{ok, vis})
		}
		sn := b.op("Add", []string{b.op("MatMul", []string{qb, b.transpose(kwin, 0, 1, 2, 4, 3)}), bwin}) // [B,H,nb,p,W]
		sm := b.op("Where", []string{ok, sn, lowest})
		// A far key exists for block B iff B > r or, not causal, B < nb−1−r.
		idx := rangeOf(nbs)
		farAny := b.op("Greater", []string{idx, i64(r)})
		if !a.Causal {
			farAny = b.op("Or", []string{farAny, b.op("Less", []string{idx, b.op("Sub", []string{nbs, i64(1 + r)})})})
		}
		farAny = b.op("Reshape", []string{farAny, b.constInts(1, 1, -1, 1, 1)})
		m = b.op("Max", []string{b.reduce("ReduceMax", sm, 4), b.op("Where", []string{farAny, Ub, lowest})}) // [B,H,nb,p,1]
		pn := b.op("Mul", []string{b.op("Exp", []string{b.op("Sub", []string{sm, m})}), toF(ok)})
		near = b.op("MatMul", []string{pn, vwin})
	} else {
		// Causal chunks: inside a chunk the feature products, lower
		// triangle included.
		m = Ub
		rows := b.op("Reshape", []string{rangeOf(i64(p)), b.constInts(-1, 1)})
		cols := b.op("Reshape", []string{rangeOf(i64(p)), b.constInts(1, -1)})
		lower := toF(b.op("Not", []string{b.op("Greater", []string{cols, rows})}))
		g := b.op("Exp", []string{b.op("Sub", []string{ub, m})})
		aw := b.op("Mul", []string{b.op("MatMul", []string{g, ebT}), lower}) // [B,H,nb,p,p]
		near = b.op("MatMul", []string{aw, vb})
	}
	g := b.op("Exp", []string{b.op("Min", []string{b.op("Sub", []string{ub, m}), zero})})
	nd := b.op("Add", []string{near, b.op("MatMul", []string{g, far})}) // [B,H,nb,p,Dv+1]
	flat := b.op("Reshape", []string{nd, b.op("Concat", []string{b.constInts(0, 0, -1), dV1}, attrInt("axis", 0))})
	return b.op("Slice", []string{flat, b.constInts(0), sLen, b.constInts(2)})
}
