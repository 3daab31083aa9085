package finetune

import (
	"fmt"
	"math"

	"github.com/linearize/linearize/internal/graphfacts"
	"github.com/linearize/linearize/internal/progress"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

// LocalPooled returns a copy of converted in which, for every
// LocalPooledAttention node, the Q and K (and with opt.FitValues, when V
// has a projection of its own, V) projection weights and biases are fitted
// to the original model's attention on the calibration inputs feed. The
// op's structure (blocks, segments, sinks) stays as converted: the fit
// teaches the queries and keys to score the segment means (and the exact
// keys beside them) the way the full softmax scored the keys the means
// stand for. It is guarded by held-out rows as Fit is (Options.HeldOut).
func LocalPooled(original, converted *onnxpb.ModelProto, feed map[string]*onnx.Tensor, opt Options) (*onnxpb.ModelProto, *Report, error) {
	return fitGuarded(original, converted, feed, opt, []opFit{localPooledFit})
}

// localPooledFit is the fit of the nodes that compute
// LocalPooledAttention (ops.ComputedOp: pooled Linformer nodes too); Fit
// runs it last (rank 2).
var localPooledFit = registerFit(opFit{op: ops.LocalPooledOp, rank: 2, fit: localPooled})

// localPooled is LocalPooled reporting progress on shared when it is set.
// Its steps mirror performer's in performer.go; the shared ones are
// helpers (prepareFit, startLayers, captureLayer, checkCaptured,
// storeParams), the rest is per op.
func localPooled(original, converted *onnxpb.ModelProto, feed map[string]*onnx.Tensor, opt Options, shared *progress.Reporter) (*onnxpb.ModelProto, *Report, error) {
	if err := opt.defaults(5e-4); err != nil {
		return nil, nil, err
	}
	out, nodes, ix, facts, inits, err := prepareFit(original, converted, ops.LocalPooledOp, 3)
	if err != nil {
		return nil, nil, err
	}
	projs := make([]lpProjections, len(nodes))
	seen := map[string]int{}
	for i, ln := range nodes {
		if projs[i], err = localPooledProjections(facts, ix, inits, ln, seen, opt.FitValues); err != nil {
			return nil, nil, err
		}
	}
	op := ops.LocalPooledOp // or LinformerAttention in its pooled mode, fitted alike
	if len(nodes) > 0 {
		op = nodes[0].node.GetOpType()
	}
	ref, rep, train, held, err := startLayers(original, feed, nodes, &opt, op)
	if err != nil {
		return nil, nil, err
	}
	prog := opt.reporter(shared, len(nodes))
	for i, ln := range nodes {
		pr := projs[i]
		p, err := captureLocalPooled(out, inits, feed, opt, ln, pr, ref[ln.target], rep.Rows)
		if err != nil {
			return nil, nil, err
		}
		rep.Layers = append(rep.Layers, layerReport(ln.layer, ln.node.GetName(), p.Fit(opt, train, held), len(held) > 0))
		reportLayer(prog, rep.Op, rep.Layers[len(rep.Layers)-1], len(held) > 0)
		wq, bq, wk, bk, wv, bv := p.Params()
		if err := storeParams(out, inits, ln.layer, []namedParam{{pr.q.w, wq}, {pr.q.b, bq}, {pr.k.w, wk}, {pr.k.b, bk}, {pr.v.w, wv}, {pr.v.b, bv}}); err != nil {
			return nil, nil, err
		}
	}
	return out, rep, nil
}

// lpProjections are the projections a LocalPooledAttention node's fit
// updates: Q and K, and V when fitV.
type lpProjections struct {
	q, k, v projection
	fitV    bool
}

// localPooledProjections returns the projections of ln's fit and claims
// their parameters in seen (see qkProjections). With fitValues, V is
// fitted too when it comes from a projection of its own: not Q's or K's,
// and read by nothing else.
func localPooledProjections(facts *graphfacts.Facts, ix *onnx.Index, inits map[string]int, ln targetNode, seen map[string]int, fitValues bool) (lpProjections, error) {
	q, k, err := qkProjections(facts, ix, inits, ln, seen)
	if err != nil {
		return lpProjections{}, err
	}
	lp := lpProjections{q: q, k: k}
	if !fitValues {
		return lp, nil
	}
	v, err := blockProjection(facts, inits, "V", ln.block.VProj, ln.node.Input[2])
	if err != nil || v.w == q.w || v.w == k.w || (v.b != "" && (v.b == q.b || v.b == k.b)) {
		return lp, nil
	}
	own := func(name string) bool { return seen[name] == 0 && len(ix.Consumers[name]) == 1 }
	if !own(v.w) || (v.b != "" && !own(v.b)) {
		return lp, nil
	}
	lp.v, lp.fitV = v, true
	seen[v.w]++
	if v.b != "" {
		seen[v.b]++
	}
	return lp, nil
}

// captureLocalPooled runs out on feed for the fit of ln (projections pr,
// target y) and returns the layer's problem, checked: the projections
// reproduce the captured Q, K (and V), over the calibration's rows rows.
func captureLocalPooled(out *onnxpb.ModelProto, inits map[string]int, feed map[string]*onnx.Tensor, opt Options, ln targetNode, pr lpProjections, y *onnx.Tensor, rows int) (*localPooledProblem, error) {
	n := ln.node
	expose := []string{n.Input[0], n.Input[1], n.Input[2], pr.q.x, pr.k.x}
	if pr.fitV {
		expose = append(expose, pr.v.x)
	}
	a, biasInput, err := ops.PooledAttrs(n) // LocalPooledAttention, or a pooled LinformerAttention
	if err != nil {
		return nil, fmt.Errorf("finetune: layer %d (%s): %w", ln.layer, n.GetName(), err)
	}
	got, bias, err := captureLayer(out, inits, feed, opt, ln, biasInput, expose...)
	if err != nil {
		return nil, err
	}
	p := &localPooledProblem{XQ: got[pr.q.x], XK: got[pr.k.x], V: got[n.Input[2]], Bias: bias, Y: y, Attrs: a}
	if p.WQ, p.BQ, err = projectionTensors(out, inits, ln.layer, pr.q); err != nil {
		return nil, err
	}
	if p.WK, p.BK, err = projectionTensors(out, inits, ln.layer, pr.k); err != nil {
		return nil, err
	}
	if pr.fitV {
		p.XV = got[pr.v.x]
		if p.WV, p.BV, err = projectionTensors(out, inits, ln.layer, pr.v); err != nil {
			return nil, err
		}
	}
	if err := p.init(); err != nil {
		return nil, fmt.Errorf("finetune: layer %d (%s): %w", ln.layer, n.GetName(), err)
	}
	checks := []splitCheck{{n.Input[0], p.xq, p.wq, p.bq, p.d}, {n.Input[1], p.xk, p.wk, p.bk, p.d}}
	if p.fitV {
		checks = append(checks, splitCheck{n.Input[2], p.xv, p.wv, p.bv, p.dv})
	}
	if err := checkCaptured(ln, got, checks, p.b, p.h, p.s, p.dm, rows); err != nil {
		return nil, err
	}
	return p, nil
}

// localPooledProblem is the fit of one layer's Q and K projections under a
// fixed LocalPooledAttention structure: minimise Σ‖out − Y‖²/Σ‖Y‖² over the
// valid query rows, where out is LocalPooledAttention(Q, K, V, Bias) with
// Q = heads(XQ·WQ + BQ) and K = heads(XK·WK + BK).
type localPooledProblem struct {
	XQ, XK *onnx.Tensor // [B,S,Dm] (or [B·S,Dm]) layer inputs of the projections
	WQ, WK *onnx.Tensor // [Dm, H·D]
	BQ, BK *onnx.Tensor // [H·D] or nil
	V, Y   *onnx.Tensor // [B,H,S,Dv]; Y may be head-merged [B,S,H·Dv]
	// XV, WV and BV, when XV is set, make V = heads(XV·WV + BV) a fitted
	// projection too (V then only gives the shapes).
	XV, WV, BV *onnx.Tensor
	Bias       *onnx.Tensor // [B or 1,1,1,S or 1] or nil
	Attrs      ops.LocalPooledAttrs

	b, s, dm, h, d, dv int
	scale              float64
	xq, xk, wq, wk     []float64
	bq, bk             []float64
	hasBQ, hasBK       bool
	fitV, hasBV        bool
	xv, wv, bv         []float64
	vm                 []float64 // [B,S,H·Dv]: V head-merged (captured, when V is not fitted)
	y                  []float64
	valid              []bool
	rowNorm            []float64
	lay                []ops.LocalPooledLayout // per batch row
}

func (p *localPooledProblem) init() error {
	y, err := p.checkShapes()
	if err != nil {
		return err
	}
	p.scale = float64(p.Attrs.Scale)
	if p.scale == 0 {
		p.scale = 1 / math.Sqrt(float64(p.d))
	}
	p.xq, p.xk, p.wq, p.wk = f64(p.XQ), f64(p.XK), f64(p.WQ), f64(p.WK)
	p.y = f64(y)
	if err := p.initValues(); err != nil {
		return err
	}
	hd := p.h * p.d
	p.bq, p.hasBQ = biasValues(p.BQ, hd)
	p.bk, p.hasBK = biasValues(p.BK, hd)
	if p.valid, _, err = keyMask(p.Bias, p.b, p.s); err != nil {
		return err
	}
	if p.rowNorm, err = targetRowNorms(p.y, p.valid, p.b, p.h, p.s, p.dv); err != nil {
		return err
	}
	p.lay = make([]ops.LocalPooledLayout, p.b)
	for bi := range p.lay {
		p.lay[bi] = ops.NewLocalPooledLayout(p.valid[bi*p.s:(bi+1)*p.s], p.Attrs)
	}
	return nil
}

// checkShapes checks the tensors of the Q/K fit and the attributes, sets
// the sizes, and returns the target in the [B,H,S,Dv] layout.
func (p *localPooledProblem) checkShapes() (*onnx.Tensor, error) {
	for _, t := range []*onnx.Tensor{p.XQ, p.XK, p.WQ, p.WK, p.V, p.Y} {
		if t == nil || t.DType != onnx.Float {
			return nil, fmt.Errorf("missing or non-float32 tensor")
		}
	}
	if len(p.V.Shape) != 4 {
		return nil, fmt.Errorf("values V %v, want [B,H,S,Dv]", p.V.Shape)
	}
	p.b, p.h, p.s, p.dv = p.V.Shape[0], p.V.Shape[1], p.V.Shape[2], p.V.Shape[3]
	y, err := headsLayout(p.Y, p.b, p.h, p.s, p.dv)
	if err != nil {
		return nil, err
	}
	if len(p.WQ.Shape) != 2 || p.WQ.Shape[1]%p.h != 0 {
		return nil, fmt.Errorf("projection weight %v, want [Dm, H·D] with H = %d", p.WQ.Shape, p.h)
	}
	p.dm, p.d = p.WQ.Shape[0], p.WQ.Shape[1]/p.h
	hd := p.h * p.d
	if err := checkLayerInputs([]*onnx.Tensor{p.XQ, p.XK}, p.b, p.s, p.dm); err != nil {
		return nil, err
	}
	if len(p.WK.Shape) != 2 || p.WK.Shape[0] != p.dm || p.WK.Shape[1] != hd {
		return nil, fmt.Errorf("projection weight %v, want [%d, %d]", p.WK.Shape, p.dm, hd)
	}
	if err := checkBiases([]*onnx.Tensor{p.BQ, p.BK}, hd); err != nil {
		return nil, err
	}
	if p.Attrs.Segments < 1 || p.Attrs.Block < 0 {
		return nil, fmt.Errorf("block %d and segments %d", p.Attrs.Block, p.Attrs.Segments)
	}
	return y, nil
}

// initValues sets up the values: the V projection when it is fitted
// (XV set), else the captured V, head-merged.
func (p *localPooledProblem) initValues() error {
	hdv := p.h * p.dv
	if p.XV == nil {
		v := f64(p.V)
		p.vm = make([]float64, p.b*p.s*hdv)
		for bi := 0; bi < p.b; bi++ {
			for hi := 0; hi < p.h; hi++ {
				for i := 0; i < p.s; i++ {
					copy(p.vm[(bi*p.s+i)*hdv+hi*p.dv:][:p.dv], v[((bi*p.h+hi)*p.s+i)*p.dv:][:p.dv])
				}
			}
		}
		return nil
	}
	if p.WV == nil || p.WV.DType != onnx.Float || len(p.WV.Shape) != 2 || p.WV.Shape[0] != p.dm || p.WV.Shape[1] != hdv {
		return fmt.Errorf("value projection weight %v, want [%d, %d]", p.WV, p.dm, hdv)
	}
	if p.XV.DType != onnx.Float || p.XV.Len() != p.b*p.s*p.dm {
		return fmt.Errorf("value layer input %v, want [%d,%d,%d]", p.XV.Shape, p.b, p.s, p.dm)
	}
	if p.BV != nil && (p.BV.DType != onnx.Float || p.BV.Len() != hdv) {
		return fmt.Errorf("value projection bias %v, want [%d]", p.BV.Shape, hdv)
	}
	p.fitV, p.xv, p.wv = true, f64(p.XV), f64(p.WV)
	p.bv, p.hasBV = biasValues(p.BV, hdv)
	return nil
}

// Params returns the current projections as float32 tensors (biases nil
// when the layer has none, V's nil when V is not fitted).
func (p *localPooledProblem) Params() (wq, bq, wk, bk, wv, bv *onnx.Tensor) {
	wq, wk = to32(p.wq, p.WQ.Shape), to32(p.wk, p.WK.Shape)
	if p.hasBQ {
		bq = to32(p.bq, p.BQ.Shape)
	}
	if p.hasBK {
		bk = to32(p.bk, p.BK.Shape)
	}
	if p.fitV {
		wv = to32(p.wv, p.WV.Shape)
		if p.hasBV {
			bv = to32(p.bv, p.BV.Shape)
		}
	}
	return
}

// Fit runs the shared training loop (fitAdamTrace) on the projection
// parameters, with gradients from the train rows and the held rows held
// out.
func (p *localPooledProblem) Fit(opt Options, train, held []int) adamTrace {
	params := [][]float64{p.wq, p.bq, p.wk, p.bk, p.wv, p.bv}
	if !p.hasBQ {
		params[1] = nil
	}
	if !p.hasBK {
		params[3] = nil
	}
	if !p.fitV {
		params[4] = nil
	}
	if !p.hasBV {
		params[5] = nil
	}
	g := p.newGrads()
	return fitAdamTrace(opt, train, held, params, g,
		func(rows []int) float64 { return p.LossGrad(rows, nil) },
		func(rows []int) { p.LossGrad(rows, g) })
}

// newGrads returns gradient buffers for WQ, BQ, WK, BK, WV and BV.
func (p *localPooledProblem) newGrads() [][]float64 {
	return [][]float64{make([]float64, len(p.wq)), make([]float64, len(p.bq)), make([]float64, len(p.wk)), make([]float64, len(p.bk)),
		make([]float64, len(p.wv)), make([]float64, len(p.bv))}
}

// LossGrad returns the relative loss over the batch rows rows (all when
// nil) and, when g is non-nil (from newGrads), adds the gradients with
// respect to WQ, BQ, WK, BK and (when V is fitted) WV, BV into g.
func (p *localPooledProblem) LossGrad(rows []int, g [][]float64) float64 {
	rows = allRows(rows, p.b)
	s, hd, hdv, dm := p.s, p.h*p.d, p.h*p.dv, p.dm
	nr := len(rows)
	xq, qm := projectRows(rows, p.xq, p.wq, p.bq, s, dm, hd)
	xk, km := projectRows(rows, p.xk, p.wk, p.bk, s, dm, hd)
	var xv, vm []float64
	if p.fitV {
		xv, vm = projectRows(rows, p.xv, p.wv, p.bv, s, dm, hdv)
	} else {
		vm = make([]float64, nr*s*hdv)
		for r, bi := range rows {
			copy(vm[r*s*hdv:(r+1)*s*hdv], p.vm[bi*s*hdv:(bi+1)*s*hdv])
		}
	}
	var dqm, dkm, dvm []float64
	if g != nil {
		dqm = make([]float64, nr*s*hd)
		dkm = make([]float64, nr*s*hd)
		if p.fitV {
			dvm = make([]float64, nr*s*hdv)
		}
	}
	norm := rowsNorm(p.rowNorm, rows)
	if norm == 0 {
		return 0
	}
	loss := sumHeads(nr, p.h, func() struct{} { return struct{}{} }, func(_ struct{}, r, hi int) float64 {
		var dq, dk, dv []float64
		if dqm != nil {
			dq, dk = dqm[r*s*hd:], dkm[r*s*hd:]
		}
		if dvm != nil {
			dv = dvm[r*s*hdv:]
		}
		return p.head(rows[r], hi, qm[r*s*hd:], km[r*s*hd:], vm[r*s*hdv:], dq, dk, dv, norm)
	})
	if g != nil {
		addProjectionGrads(xq, dqm, nr*s, dm, hd, g[0], g[1])
		addProjectionGrads(xk, dkm, nr*s, dm, hd, g[2], g[3])
		if dvm != nil {
			addProjectionGrads(xv, dvm, nr*s, dm, hdv, g[4], g[5])
		}
	}
	return loss / norm
}

// head computes one (batch row, head) of the op in float64: the squared
// error over valid queries (unnormalised) and, when dqm is non-nil, adds
// the gradients with respect to the head's columns of the merged Q and K
// (rows of this batch row) into dqm and dkm, and of V into dvm when that is
// non-nil.
//
// With s_e = scale·q·κ_e + a_e over the entries e of query i (exact keys
// κ = k_j, segment means κ = k̄_c with a = log cnt), p = softmax(s) and
// out = Σ p_e ν_e: ∂L/∂s_e = p_e·g·(ν_e − out) for g = ∂L/∂out, ∂L/∂q =
// scale·Σ ∂L/∂s_e κ_e, ∂L/∂κ_e = scale·∂L/∂s_e·q, and a mean passes its
// gradient to each of its |S_c| keys divided by |S_c|; likewise ∂L/∂ν_e =
// p_e·g for the values.
func (p *localPooledProblem) head(bi, hi int, qm, km, vm, dqm, dkm, dvm []float64, norm float64) float64 {
	e := p.newLPHead(bi, hi, qm, km, vm, dqm, dkm, dvm)
	for i := 0; i < p.s; i++ {
		if !p.valid[bi*p.s+i] || !e.gather(i) {
			continue
		}
		e.attend(i)
		e.residual(i, norm)
		if e.grad {
			e.backward(i)
		}
	}
	if e.grad {
		e.scatterMeans()
	}
	return e.loss
}

// lpEntry is one key a query attends: an exact key (j ≥ 0, c = −1) or a
// segment mean (j = −1, segment c), with its score, then its weight.
type lpEntry struct {
	key, val []float64
	j, c     int
	s        float64
}

// grad returns the gradient buffer of the entry's key (or value), of
// width w: its columns col.. of row j of exact (rows of stride values)
// for an exact key, else row c of pooled, the segment means' gradient.
func (en lpEntry) grad(exact []float64, stride, col, w int, pooled []float64) []float64 {
	if en.j >= 0 {
		return exact[en.j*stride+col : en.j*stride+col+w]
	}
	return pooled[en.c*w : (en.c+1)*w]
}

// lpHead is the work of localPooledProblem.head on one (batch row, head):
// its views of the merged Q, K, V and of their gradients, the segment
// means, and the current query's entries, output and output gradient.
type lpHead struct {
	p             *localPooledProblem
	lay           *ops.LocalPooledLayout
	bh, col, vcol int
	qm, km, vm    []float64
	grad          bool      // gradients of Q and K wanted
	dqm, dkm, dvm []float64 // dvm nil: V not fitted
	kbar, vbar    []float64 // segment means of the keys [K,D] and values [K,Dv]
	dkbar, dvbar  []float64 // their gradients
	es            []lpEntry
	nExact        int   // es[:nExact] are exact keys, the rest means
	cnt           []int // keys each segment mean stands for, for this query
	out, gy       []float64
	loss          float64
}

// newLPHead sets up the work on batch row bi, head hi, with the segment
// means of its keys and values.
func (p *localPooledProblem) newLPHead(bi, hi int, qm, km, vm, dqm, dkm, dvm []float64) *lpHead {
	kk, d, dv := p.Attrs.Segments, p.d, p.dv
	e := &lpHead{p: p, lay: &p.lay[bi], bh: bi*p.h + hi, col: hi * d, vcol: hi * dv,
		qm: qm, km: km, vm: vm, grad: dqm != nil, dqm: dqm, dkm: dkm, dvm: dvm,
		kbar: make([]float64, kk*d), vbar: make([]float64, kk*dv),
		cnt: make([]int, kk), out: make([]float64, dv), gy: make([]float64, dv)}
	for j, c := range e.lay.Seg {
		if c < 0 {
			continue
		}
		for t, x := range e.k(j) {
			e.kbar[c*d+t] += x / float64(e.lay.Total[c])
		}
		for t, x := range e.v(j) {
			e.vbar[c*dv+t] += x / float64(e.lay.Total[c])
		}
	}
	if e.grad {
		e.dkbar = make([]float64, kk*d)
	}
	if dvm != nil {
		e.dvbar = make([]float64, kk*dv)
	}
	return e
}

func (e *lpHead) q(i int) []float64 {
	hd := e.p.h * e.p.d
	return e.qm[i*hd+e.col : i*hd+e.col+e.p.d]
}

func (e *lpHead) k(j int) []float64 {
	hd := e.p.h * e.p.d
	return e.km[j*hd+e.col : j*hd+e.col+e.p.d]
}

func (e *lpHead) v(j int) []float64 {
	hdv := e.p.h * e.p.dv
	return e.vm[j*hdv+e.vcol : j*hdv+e.vcol+e.p.dv]
}

func (e *lpHead) y(i int) []float64 {
	s, dv := e.p.s, e.p.dv
	return e.p.y[(e.bh*s+i)*dv : (e.bh*s+i+1)*dv]
}

// gather lists the entries query i attends: the exact keys of its block
// and both neighbours, the sinks, then the mean of every segment with
// keys left outside those blocks. It reports whether there is any.
func (e *lpHead) gather(i int) bool {
	s, d, dv, blk := e.p.s, e.p.d, e.p.dv, e.p.Attrs.Block
	e.es = e.es[:0]
	lo, hi, B := 0, 0, 0
	if blk > 0 {
		B = i / blk
		lo, hi = max(0, (B-1)*blk), min(s, (B+2)*blk)
	}
	for j := lo; j < hi; j++ {
		if e.lay.Seg[j] >= 0 {
			e.es = append(e.es, lpEntry{key: e.k(j), val: e.v(j), j: j, c: -1})
		}
	}
	for _, j := range e.lay.Sinks {
		e.es = append(e.es, lpEntry{key: e.k(j), val: e.v(j), j: j, c: -1})
	}
	e.nExact = len(e.es)
	e.lay.FarCounts(B, 1, e.cnt)
	for c, n := range e.cnt {
		if n > 0 {
			e.es = append(e.es, lpEntry{key: e.kbar[c*d : (c+1)*d], val: e.vbar[c*dv : (c+1)*dv], j: -1, c: c})
		}
	}
	return len(e.es) > 0
}

// attend scores query i's entries (a mean's score raised by the log of
// the keys it stands for), turns the scores into softmax weights and sets
// the output.
func (e *lpHead) attend(i int) {
	qi := e.q(i)
	top := math.Inf(-1)
	for x := range e.es {
		var dot float64
		for t, a := range e.es[x].key {
			dot += qi[t] * a
		}
		e.es[x].s = e.p.scale * dot
		if x >= e.nExact {
			e.es[x].s += math.Log(float64(e.cnt[e.es[x].c]))
		}
		top = max(top, e.es[x].s)
	}
	var den float64
	for x := range e.es {
		e.es[x].s = math.Exp(e.es[x].s - top)
		den += e.es[x].s
	}
	clear(e.out)
	for x := range e.es {
		e.es[x].s /= den // now p_e
		for t, a := range e.es[x].val {
			e.out[t] += e.es[x].s * a
		}
	}
}

// residual adds query i's squared error to the loss and sets the output
// gradient (of the loss divided by norm).
func (e *lpHead) residual(i int, norm float64) {
	yi := e.y(i)
	for t := range e.out {
		diff := e.out[t] - yi[t]
		e.loss += diff * diff
		e.gy[t] = 2 * diff / norm
	}
}

// backward adds query i's gradients: to its query, to each exact key
// (value) or segment mean it attends, as the head's comment derives.
func (e *lpHead) backward(i int) {
	d, dv, hd, hdv := e.p.d, e.p.dv, e.p.h*e.p.d, e.p.h*e.p.dv
	qi := e.q(i)
	var gout float64
	for t := range e.out {
		gout += e.gy[t] * e.out[t]
	}
	dq := e.dqm[i*hd+e.col : i*hd+e.col+d]
	for _, en := range e.es {
		var gv float64
		for t, a := range en.val {
			gv += e.gy[t] * a
		}
		ds := en.s * (gv - gout) * e.p.scale
		for t := range dq {
			dq[t] += ds * en.key[t]
		}
		dkey := en.grad(e.dkm, hd, e.col, d, e.dkbar)
		for t := range dkey {
			dkey[t] += ds * qi[t]
		}
		if e.dvm == nil {
			continue
		}
		dval := en.grad(e.dvm, hdv, e.vcol, dv, e.dvbar)
		for t := range dval {
			dval[t] += en.s * e.gy[t]
		}
	}
}

// scatterMeans passes each segment mean's key (and value) gradient back
// to the keys (values) it averages, divided by their number.
func (e *lpHead) scatterMeans() {
	d, dv, hd, hdv := e.p.d, e.p.dv, e.p.h*e.p.d, e.p.h*e.p.dv
	for j, c := range e.lay.Seg {
		if c < 0 {
			continue
		}
		dk := e.dkm[j*hd+e.col : j*hd+e.col+d]
		for t := range dk {
			dk[t] += e.dkbar[c*d+t] / float64(e.lay.Total[c])
		}
		if e.dvm != nil {
			dval := e.dvm[j*hdv+e.vcol : j*hdv+e.vcol+dv]
			for t := range dval {
				dval[t] += e.dvbar[c*dv+t] / float64(e.lay.Total[c])
			}
		}
	}
}
