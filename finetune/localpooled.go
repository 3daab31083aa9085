package finetune

import (
	"fmt"
	"math"

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
	return fitGuarded(original, converted, feed, opt, []opFit{{ops.LocalPooledOp, localPooled}})
}

// localPooled is LocalPooled reporting progress on shared when it is set.
// Its steps mirror performer's in performer.go; the shared ones are
// helpers (prepareFit, captureLayer, storeParams), the rest is per op.
func localPooled(original, converted *onnxpb.ModelProto, feed map[string]*onnx.Tensor, opt Options, shared *progress.Reporter) (*onnxpb.ModelProto, *Report, error) {
	if err := opt.defaults(5e-4); err != nil {
		return nil, nil, err
	}
	out, nodes, ix, facts, inits, err := prepareFit(original, converted, ops.LocalPooledOp, 3)
	if err != nil {
		return nil, nil, err
	}
	type layerProj struct {
		q, k, v projection
		fitV    bool
	}
	projs := make([]layerProj, len(nodes))
	seen := map[string]int{}
	for i, ln := range nodes {
		n := ln.node
		q, k, err := qkProjections(facts, ix, inits, ln, seen)
		if err != nil {
			return nil, nil, err
		}
		lp := layerProj{q: q, k: k}
		// With opt.FitValues, V is fitted too when it comes from its own
		// projection.
		if v, err := blockProjection(facts, inits, "V", ln.block.VProj, n.Input[2]); opt.FitValues && err == nil && v.w != q.w && v.w != k.w && (v.b == "" || (v.b != q.b && v.b != k.b)) {
			own := seen[v.w] == 0 && len(ix.Consumers[v.w]) == 1 && (v.b == "" || (seen[v.b] == 0 && len(ix.Consumers[v.b]) == 1))
			if own {
				lp.v, lp.fitV = v, true
				seen[v.w]++
				if v.b != "" {
					seen[v.b]++
				}
			}
		}
		projs[i] = lp
	}
	ref, err := captureTargets(original, feed, nodes, opt)
	if err != nil {
		return nil, nil, err
	}
	rep := &Report{Op: ops.LocalPooledOp, Steps: opt.Steps, LR: opt.LR}
	train, held, err := splitFor(&opt, rep, targetRows(ref, nodes))
	if err != nil {
		return nil, nil, err
	}
	prog := opt.reporter(shared, len(nodes))
	for i, ln := range nodes {
		n, pr := ln.node, projs[i]
		expose := []string{n.Input[0], n.Input[1], n.Input[2], pr.q.x, pr.k.x}
		if pr.fitV {
			expose = append(expose, pr.v.x)
		}
		got, bias, err := captureLayer(out, inits, feed, opt, ln, 3, expose...)
		if err != nil {
			return nil, nil, err
		}
		a := ops.LocalPooledAttrs{
			Scale:    onnx.AttrFloat(n, "scale", 0),
			Block:    int(onnx.AttrInt(n, "block", 0)),
			Segments: int(onnx.AttrInt(n, "segments", 0)),
		}
		if a.SinkFirst, a.SinkLast, err = ops.ParseSinks(onnx.AttrString(n, "sinks", "none")); err != nil {
			return nil, nil, fmt.Errorf("finetune: layer %d (%s): %w", ln.layer, n.GetName(), err)
		}
		p := &localPooledProblem{XQ: got[pr.q.x], XK: got[pr.k.x], V: got[n.Input[2]], Bias: bias, Y: ref[ln.target], Attrs: a}
		if p.WQ, p.BQ, err = projectionTensors(out, inits, ln.layer, pr.q); err != nil {
			return nil, nil, err
		}
		if p.WK, p.BK, err = projectionTensors(out, inits, ln.layer, pr.k); err != nil {
			return nil, nil, err
		}
		if pr.fitV {
			p.XV = got[pr.v.x]
			if p.WV, p.BV, err = projectionTensors(out, inits, ln.layer, pr.v); err != nil {
				return nil, nil, err
			}
		}
		if err := p.init(); err != nil {
			return nil, nil, fmt.Errorf("finetune: layer %d (%s): %w", ln.layer, n.GetName(), err)
		}
		checks := []struct {
			name string
			x    []float64
			w, b []float64
			d    int
		}{{n.Input[0], p.xq, p.wq, p.bq, p.d}, {n.Input[1], p.xk, p.wk, p.bk, p.d}}
		if p.fitV {
			checks = append(checks, struct {
				name string
				x    []float64
				w, b []float64
				d    int
			}{n.Input[2], p.xv, p.wv, p.bv, p.dv})
		}
		for _, c := range checks {
			if e := splitError(c.x, c.w, c.b, got[c.name], p.b, p.h, p.s, c.d, p.dm); !(e < 1e-3) {
				return nil, nil, fmt.Errorf("finetune: layer %d (%s): %q is not the head split of its projection (relative error %.3g)", ln.layer, n.GetName(), c.name, e)
			}
		}
		if p.b != rep.Rows {
			return nil, nil, fmt.Errorf("finetune: layer %d (%s): %d batch rows, the calibration has %d", ln.layer, n.GetName(), p.b, rep.Rows)
		}
		rep.Layers = append(rep.Layers, layerReport(ln.layer, n.GetName(), p.Fit(opt, train, held), len(held) > 0))
		reportLayer(prog, rep.Op, rep.Layers[len(rep.Layers)-1], len(held) > 0)
		wq, bq, wk, bk, wv, bv := p.Params()
		if err := storeParams(out, inits, ln.layer, []namedParam{{pr.q.w, wq}, {pr.q.b, bq}, {pr.k.w, wk}, {pr.k.b, bk}, {pr.v.w, wv}, {pr.v.b, bv}}); err != nil {
			return nil, nil, err
		}
	}
	return out, rep, nil
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
	lay                []lpLayout // per batch row
}

// lpLayout is the key structure of one sequence: sinks, each key's
// segment (−1 for sinks and padding), segment sizes and per-block counts.
type lpLayout struct {
	sinks []int
	seg   []int
	total []int
	block [][]int
}

func (p *localPooledProblem) init() error {
	for _, t := range []*onnx.Tensor{p.XQ, p.XK, p.WQ, p.WK, p.V, p.Y} {
		if t == nil || t.DType != onnx.Float {
			return fmt.Errorf("missing or non-float32 tensor")
		}
	}
	if len(p.V.Shape) != 4 {
		return fmt.Errorf("values V %v, want [B,H,S,Dv]", p.V.Shape)
	}
	p.b, p.h, p.s, p.dv = p.V.Shape[0], p.V.Shape[1], p.V.Shape[2], p.V.Shape[3]
	y, err := headsLayout(p.Y, p.b, p.h, p.s, p.dv)
	if err != nil {
		return err
	}
	if len(p.WQ.Shape) != 2 || p.WQ.Shape[1]%p.h != 0 {
		return fmt.Errorf("projection weight %v, want [Dm, H·D] with H = %d", p.WQ.Shape, p.h)
	}
	p.dm, p.d = p.WQ.Shape[0], p.WQ.Shape[1]/p.h
	hd := p.h * p.d
	for _, x := range []*onnx.Tensor{p.XQ, p.XK} {
		if len(x.Shape) < 2 || x.Shape[len(x.Shape)-1] != p.dm || x.Len() != p.b*p.s*p.dm {
			return fmt.Errorf("layer input %v, want [%d,%d,%d] or [%d,%d]", x.Shape, p.b, p.s, p.dm, p.b*p.s, p.dm)
		}
	}
	if len(p.WK.Shape) != 2 || p.WK.Shape[0] != p.dm || p.WK.Shape[1] != hd {
		return fmt.Errorf("projection weight %v, want [%d, %d]", p.WK.Shape, p.dm, hd)
	}
	for _, b := range []*onnx.Tensor{p.BQ, p.BK} {
		if b != nil && (b.DType != onnx.Float || b.Len() != hd) {
			return fmt.Errorf("projection bias %v, want [%d]", b.Shape, hd)
		}
	}
	if p.Attrs.Segments < 1 || p.Attrs.Block < 0 {
		return fmt.Errorf("block %d and segments %d", p.Attrs.Block, p.Attrs.Segments)
	}
	p.scale = float64(p.Attrs.Scale)
	if p.scale == 0 {
		p.scale = 1 / math.Sqrt(float64(p.d))
	}
	p.xq, p.xk, p.wq, p.wk = f64(p.XQ), f64(p.XK), f64(p.WQ), f64(p.WK)
	p.y = f64(y)
	hdv := p.h * p.dv
	if p.XV != nil {
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
		p.bv = make([]float64, hdv)
		if p.BV != nil {
			p.bv, p.hasBV = f64(p.BV), true
		}
	} else {
		v := f64(p.V)
		p.vm = make([]float64, p.b*p.s*hdv)
		for bi := 0; bi < p.b; bi++ {
			for hi := 0; hi < p.h; hi++ {
				for i := 0; i < p.s; i++ {
					copy(p.vm[(bi*p.s+i)*hdv+hi*p.dv:][:p.dv], v[((bi*p.h+hi)*p.s+i)*p.dv:][:p.dv])
				}
			}
		}
	}
	p.bq, p.bk = make([]float64, hd), make([]float64, hd)
	if p.BQ != nil {
		p.bq, p.hasBQ = f64(p.BQ), true
	}
	if p.BK != nil {
		p.bk, p.hasBK = f64(p.BK), true
	}
	if p.valid, _, err = keyMask(p.Bias, p.b, p.s); err != nil {
		return err
	}
	if p.rowNorm, err = targetRowNorms(p.y, p.valid, p.b, p.h, p.s, p.dv); err != nil {
		return err
	}
	p.lay = make([]lpLayout, p.b)
	for bi := range p.lay {
		p.lay[bi] = newLayout(p.valid[bi*p.s:(bi+1)*p.s], p.Attrs)
	}
	return nil
}

// newLayout derives the op's key structure from one sequence's validity,
// as ops.LocalPooled defines it. It repeats the layout loop of
// ops/localpooled.go, which is unexported and reads the op's mask;
// TestLocalPooledForward checks the two agree.
func newLayout(valid []bool, a ops.LocalPooledAttrs) lpLayout {
	n, k := len(valid), a.Segments
	var l lpLayout
	first, last := -1, -1
	for j, ok := range valid {
		if ok {
			if first < 0 {
				first = j
			}
			last = j
		}
	}
	if a.SinkFirst && first >= 0 {
		l.sinks = append(l.sinks, first)
	}
	if a.SinkLast && last >= 0 && !(a.SinkFirst && last == first) {
		l.sinks = append(l.sinks, last)
	}
	isSink := func(j int) bool {
		for _, s := range l.sinks {
			if s == j {
				return true
			}
		}
		return false
	}
	m := 0
	for j, ok := range valid {
		if ok && !isSink(j) {
			m++
		}
	}
	l.seg = make([]int, n)
	l.total = make([]int, k)
	r := 0
	for j, ok := range valid {
		l.seg[j] = -1
		if ok && !isSink(j) {
			l.seg[j] = r * k / m
			l.total[l.seg[j]]++
			r++
		}
	}
	if b := a.Block; b > 0 {
		l.block = make([][]int, (n+b-1)/b)
		for B := range l.block {
			l.block[B] = make([]int, k)
		}
		for j, c := range l.seg {
			if c >= 0 {
				l.block[j/b][c]++
			}
		}
	}
	return l
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
	s, d, dv, hd, hdv := p.s, p.d, p.dv, p.h*p.d, p.h*p.dv
	lay := &p.lay[bi]
	kk, blk := p.Attrs.Segments, p.Attrs.Block
	col := hi * d
	q := func(i int) []float64 { return qm[i*hd+col : i*hd+col+d] }
	k := func(j int) []float64 { return km[j*hd+col : j*hd+col+d] }
	bh := bi*p.h + hi
	vcol := hi * dv
	v := func(j int) []float64 { return vm[j*hdv+vcol : j*hdv+vcol+dv] }
	y := func(i int) []float64 { return p.y[(bh*s+i)*dv : (bh*s+i+1)*dv] }
	kbar := make([]float64, kk*d)
	vbar := make([]float64, kk*dv)
	for j, c := range lay.seg {
		if c < 0 {
			continue
		}
		for t, x := range k(j) {
			kbar[c*d+t] += x / float64(lay.total[c])
		}
		for t, x := range v(j) {
			vbar[c*dv+t] += x / float64(lay.total[c])
		}
	}
	grad := dqm != nil
	var dkbar, dvbar []float64
	if grad {
		dkbar = make([]float64, kk*d)
	}
	if dvm != nil {
		dvbar = make([]float64, kk*dv)
	}
	type entry struct {
		key, val []float64
		j, c     int // key index (exact) or segment (pooled, j = −1)
		s        float64
	}
	var es []entry
	cnt := make([]int, kk)
	out := make([]float64, dv)
	var loss float64
	for i := 0; i < s; i++ {
		if !p.valid[bi*s+i] {
			continue
		}
		es = es[:0]
		lo, hi := 0, 0
		B := 0
		if blk > 0 {
			B = i / blk
			lo, hi = max(0, (B-1)*blk), min(s, (B+2)*blk)
		}
		for j := lo; j < hi; j++ {
			if lay.seg[j] >= 0 {
				es = append(es, entry{key: k(j), val: v(j), j: j, c: -1})
			}
		}
		for _, j := range lay.sinks {
			es = append(es, entry{key: k(j), val: v(j), j: j, c: -1})
		}
		nExact := len(es)
		for c := range cnt {
			cnt[c] = lay.total[c]
			if blk > 0 {
				for bb := max(0, B-1); bb <= min(len(lay.block)-1, B+1); bb++ {
					cnt[c] -= lay.block[bb][c]
				}
			}
			if cnt[c] > 0 {
				es = append(es, entry{key: kbar[c*d : (c+1)*d], val: vbar[c*dv : (c+1)*dv], j: -1, c: c})
			}
		}
		if len(es) == 0 {
			continue
		}
		qi := q(i)
		top := math.Inf(-1)
		for x := range es {
			var dot float64
			for t, a := range es[x].key {
				dot += qi[t] * a
			}
			es[x].s = p.scale * dot
			if x >= nExact {
				es[x].s += math.Log(float64(cnt[es[x].c]))
			}
			top = max(top, es[x].s)
		}
		var den float64
		for x := range es {
			es[x].s = math.Exp(es[x].s - top)
			den += es[x].s
		}
		clear(out)
		for x := range es {
			es[x].s /= den // now p_e
			for t, a := range es[x].val {
				out[t] += es[x].s * a
			}
		}
		gy := make([]float64, dv)
		for t := range out {
			diff := out[t] - y(i)[t]
			loss += diff * diff
			gy[t] = 2 * diff / norm
		}
		if !grad {
			continue
		}
		var gout float64
		for t := range out {
			gout += gy[t] * out[t]
		}
		dq := dqm[i*hd+col : i*hd+col+d]
		for _, e := range es {
			var gv float64
			for t, a := range e.val {
				gv += gy[t] * a
			}
			ds := e.s * (gv - gout) * p.scale
			for t := range dq {
				dq[t] += ds * e.key[t]
			}
			var dkey []float64
			if e.j >= 0 {
				dkey = dkm[e.j*hd+col : e.j*hd+col+d]
			} else {
				dkey = dkbar[e.c*d : (e.c+1)*d]
			}
			for t := range dkey {
				dkey[t] += ds * qi[t]
			}
			if dvm != nil {
				var dval []float64
				if e.j >= 0 {
					dval = dvm[e.j*hdv+vcol : e.j*hdv+vcol+dv]
				} else {
					dval = dvbar[e.c*dv : (e.c+1)*dv]
				}
				for t := range dval {
					dval[t] += e.s * gy[t]
				}
			}
		}
	}
	if grad {
		// Each pooled key's and value's gradient goes back to the tokens it
		// averages; the two loops differ only in buffers and widths, and stay
		// inline in this per-(row, head) inner loop.
		for j, c := range lay.seg {
			if c < 0 {
				continue
			}
			dk := dkm[j*hd+col : j*hd+col+d]
			for t := range dk {
				dk[t] += dkbar[c*d+t] / float64(lay.total[c])
			}
			if dvm != nil {
				dval := dvm[j*hdv+vcol : j*hdv+vcol+dv]
				for t := range dval {
					dval[t] += dvbar[c*dv+t] / float64(lay.total[c])
				}
			}
		}
	}
	return loss
}
