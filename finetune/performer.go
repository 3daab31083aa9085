package finetune

import (
	"fmt"
	"math"

	"github.com/linearize/linearize/internal/progress"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
)

// Performer returns a copy of converted in which, for every
// PerformerAttention node, the Q and K projection weights and biases
// feeding the random features are fitted to the original model's
// attention on the calibration inputs feed; ω stays frozen (see the
// package documentation). Only bidirectional (causal=0) nodes with the
// positive kernel are supported. It is guarded by held-out rows as Fit is
// (Options.HeldOut).
func Performer(original, converted *onnxpb.ModelProto, feed map[string]*onnx.Tensor, opt Options) (*onnxpb.ModelProto, *Report, error) {
	return fitGuarded(original, converted, feed, opt, []opFit{performerFit})
}

// performerFit is the fit of PerformerAttention nodes; Fit runs it after
// the Linformer fit in a model that has several ops (rank 1).
var performerFit = registerFit(opFit{op: ops.PerformerOp, rank: 1, fit: performer})

// performer is Performer reporting progress on shared when it is set.
func performer(original, converted *onnxpb.ModelProto, feed map[string]*onnx.Tensor, opt Options, shared *progress.Reporter) (*onnxpb.ModelProto, *Report, error) {
	if err := opt.defaults(5e-4); err != nil {
		return nil, nil, err
	}
	out, nodes, ix, facts, inits, err := prepareFit(original, converted, ops.PerformerOp, 4)
	if err != nil {
		return nil, nil, err
	}
	type layerProj struct{ q, k projection }
	projs := make([]layerProj, len(nodes))
	seen := map[string]int{}
	for i, ln := range nodes {
		if err := checkPerformerNode(ln.node, inits); err != nil {
			return nil, nil, err
		}
		q, k, err := qkProjections(facts, ix, inits, ln, seen)
		if err != nil {
			return nil, nil, err
		}
		projs[i] = layerProj{q, k}
	}
	ref, rep, train, held, err := startLayers(original, feed, nodes, &opt, ops.PerformerOp)
	if err != nil {
		return nil, nil, err
	}
	prog := opt.reporter(shared, len(nodes))
	for i, ln := range nodes {
		pr := projs[i]
		p, err := capturePerformer(out, inits, feed, opt, ln, pr.q, pr.k, ref[ln.target], rep.Rows)
		if err != nil {
			return nil, nil, err
		}
		rep.Layers = append(rep.Layers, layerReport(ln.layer, ln.node.GetName(), p.Fit(opt, train, held), len(held) > 0))
		reportLayer(prog, rep.Op, rep.Layers[len(rep.Layers)-1], len(held) > 0)
		wq, bq, wk, bk := p.Params()
		if err := storeParams(out, inits, ln.layer, []namedParam{{pr.q.w, wq}, {pr.q.b, bq}, {pr.k.w, wk}, {pr.k.b, bk}}); err != nil {
			return nil, nil, err
		}
	}
	return out, rep, nil
}

// checkPerformerNode checks that the fit can train node n: a
// bidirectional, plain FAVOR+ node with the positive kernel whose ω is an
// initializer.
func checkPerformerNode(n *onnxpb.NodeProto, inits map[string]int) error {
	if k := onnx.AttrString(n, "kernel", string(ops.KernelPositive)); k != string(ops.KernelPositive) {
		return fmt.Errorf("finetune: node %s: kernel %q, only %q can be fitted", n.GetName(), k, ops.KernelPositive)
	}
	if onnx.AttrInt(n, "causal", 0) != 0 {
		return fmt.Errorf("finetune: node %s: causal Performer is not supported by the fit (it has no causal masking)", n.GetName())
	}
	if onnx.AttrInt(n, "center", 0) != 0 || onnx.AttrString(n, "features", string(ops.FeaturesFavorPlus)) != string(ops.FeaturesFavorPlus) || len(n.Input) > 5 {
		return fmt.Errorf("finetune: node %s: only plain FAVOR+ nodes can be fitted (no gradients yet through centring, the balance or FAVOR++/FAVOR# features; convert with --center=false --features-kind favor+ to fine-tune)", n.GetName())
	}
	if _, ok := inits[n.Input[3]]; !ok {
		return fmt.Errorf("finetune: node %s: Omega %q is not an initializer", n.GetName(), n.Input[3])
	}
	return nil
}

// capturePerformer runs out on feed for the fit of ln (projections q and
// k, target y) and returns the layer's problem, checked: the projections
// reproduce the captured Q and K, over the calibration's rows rows.
func capturePerformer(out *onnxpb.ModelProto, inits map[string]int, feed map[string]*onnx.Tensor, opt Options, ln targetNode, q, k projection, y *onnx.Tensor, rows int) (*performerProblem, error) {
	n := ln.node
	got, bias, err := captureLayer(out, inits, feed, opt, ln, 4, n.Input[0], n.Input[1], n.Input[2], q.x, k.x)
	if err != nil {
		return nil, err
	}
	// Epsilon stays 0: the op's positive, bidirectional kernel (the only
	// one checkPerformerNode lets through) is the plain ratio (its mixture
	// form needs no epsilon; see ops.PerformerAttention): fit the function
	// the converted model computes.
	p := &performerProblem{
		XQ: got[q.x], XK: got[k.x], V: got[n.Input[2]], Bias: bias, Y: y,
		Scale: float64(onnx.AttrFloat(n, "scale", 0)),
	}
	if p.Omega, err = floatInitializer(out, inits, ln.layer, n.Input[3]); err != nil {
		return nil, err
	}
	if p.WQ, p.BQ, err = projectionTensors(out, inits, ln.layer, q); err != nil {
		return nil, err
	}
	if p.WK, p.BK, err = projectionTensors(out, inits, ln.layer, k); err != nil {
		return nil, err
	}
	if err := p.init(); err != nil {
		return nil, fmt.Errorf("finetune: layer %d (%s): %w", ln.layer, n.GetName(), err)
	}
	// The projections must reproduce the captured Q and K.
	checks := []splitCheck{{n.Input[0], p.xq, p.wq, p.bq, p.d}, {n.Input[1], p.xk, p.wk, p.bk, p.d}}
	if err := checkCaptured(ln, got, checks, p.b, p.h, p.s, p.dm, rows); err != nil {
		return nil, err
	}
	return p, nil
}

// performerProblem is the fit of one layer's Q and K projections under
// frozen random features: minimise Σ‖out − Y‖²/Σ‖Y‖² over the valid query
// rows, where out is the positive-kernel PerformerAttention of
// Q = heads(XQ·WQ + BQ), K = heads(XK·WK + BK), V, Omega and Bias, and
// heads splits the last axis H·D into H heads of D.
type performerProblem struct {
	XQ, XK       *onnx.Tensor // [B,S,Dm] layer inputs of the two projections
	WQ, WK       *onnx.Tensor // [Dm, H·D]
	BQ, BK       *onnx.Tensor // [H·D] or nil
	V, Y         *onnx.Tensor // [B,H,S,Dv]
	Omega        *onnx.Tensor // [H or 1, M, D]
	Bias         *onnx.Tensor // [B or 1,1,1,S or 1] or nil
	Scale        float64      // 0: 1/√D
	Epsilon      float64      // added to the denominator (0 for the positive kernel, as in the op)
	FixedMaxima  bool         // keep the stabilising maxima of the last LossGrad (for gradient checks)
	maxQ, maxK   []float64
	b, s, dm, h  int
	d, dv, m, ho int
	xq, xk       []float64
	wq, wk       []float64
	bq, bk       []float64
	hasBQ, hasBK bool
	v, y, om     []float64
	keyBias      []float64 // [B*S]
	valid        []bool    // [B*S]
	rowNorm      []float64 // Σ‖Y‖² per batch row
}

func (p *performerProblem) init() error {
	for _, t := range []*onnx.Tensor{p.XQ, p.XK, p.WQ, p.WK, p.V, p.Y, p.Omega} {
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
	p.Y = y
	if len(p.WQ.Shape) != 2 {
		return fmt.Errorf("projection weight %v, want [Dm, H·D]", p.WQ.Shape)
	}
	p.dm = p.WQ.Shape[0]
	if err := checkLayerInputs([]*onnx.Tensor{p.XQ, p.XK}, p.b, p.s, p.dm); err != nil {
		return err
	}
	if len(p.Omega.Shape) != 3 {
		return fmt.Errorf("omega shape %v, want [H or 1, M, D]", p.Omega.Shape)
	}
	p.ho, p.m, p.d = p.Omega.Shape[0], p.Omega.Shape[1], p.Omega.Shape[2]
	if (p.ho != 1 && p.ho != p.h) || p.m < 1 {
		return fmt.Errorf("omega shape %v for %d heads", p.Omega.Shape, p.h)
	}
	hd := p.h * p.d
	for _, w := range []*onnx.Tensor{p.WQ, p.WK} {
		if len(w.Shape) != 2 || w.Shape[0] != p.dm || w.Shape[1] != hd {
			return fmt.Errorf("projection weight %v, want [%d, %d]", w.Shape, p.dm, hd)
		}
	}
	if err := checkBiases([]*onnx.Tensor{p.BQ, p.BK}, hd); err != nil {
		return err
	}
	if p.Scale == 0 {
		p.Scale = 1 / math.Sqrt(float64(p.d))
	}
	if !(p.Scale > 0) || p.Epsilon < 0 {
		return fmt.Errorf("scale %g and epsilon %g", p.Scale, p.Epsilon)
	}
	p.xq, p.xk, p.wq, p.wk = f64(p.XQ), f64(p.XK), f64(p.WQ), f64(p.WK)
	p.v, p.y, p.om = f64(p.V), f64(p.Y), f64(p.Omega)
	p.bq, p.hasBQ = biasValues(p.BQ, hd)
	p.bk, p.hasBK = biasValues(p.BK, hd)
	if p.valid, p.keyBias, err = keyMask(p.Bias, p.b, p.s); err != nil {
		return err
	}
	if p.rowNorm, err = targetRowNorms(p.y, p.valid, p.b, p.h, p.s, p.dv); err != nil {
		return err
	}
	p.maxQ = make([]float64, p.b*p.h*p.s)
	p.maxK = make([]float64, p.b*p.h)
	return nil
}

// Params returns the current projections as float32 tensors (biases nil
// when the layer has none).
func (p *performerProblem) Params() (wq, bq, wk, bk *onnx.Tensor) {
	wq, wk = to32(p.wq, p.WQ.Shape), to32(p.wk, p.WK.Shape)
	if p.hasBQ {
		bq = to32(p.bq, p.BQ.Shape)
	}
	if p.hasBK {
		bk = to32(p.bk, p.BK.Shape)
	}
	return
}

// perfGrads holds gradients with respect to the four parameters.
type perfGrads struct{ wq, bq, wk, bk []float64 }

func (p *performerProblem) newGrads() *perfGrads {
	return &perfGrads{make([]float64, len(p.wq)), make([]float64, len(p.bq)), make([]float64, len(p.wk)), make([]float64, len(p.bk))}
}

// LossGrad returns the relative loss over the batch rows rows (all when
// nil) and, when g is non-nil, adds its gradients into g.
func (p *performerProblem) LossGrad(rows []int, g *perfGrads) float64 {
	rows = allRows(rows, p.b)
	s, hd, dm := p.s, p.h*p.d, p.dm
	nr := len(rows)
	xq, qm := projectRows(rows, p.xq, p.wq, p.bq, s, dm, hd)
	xk, km := projectRows(rows, p.xk, p.wk, p.bk, s, dm, hd)
	var dqm, dkm []float64
	if g != nil {
		dqm = make([]float64, nr*s*hd)
		dkm = make([]float64, nr*s*hd)
	}
	norm := rowsNorm(p.rowNorm, rows)
	if norm == 0 {
		return 0
	}
	loss := sumHeads(nr, p.h, p.newScratch, func(sc *perfScratch, r, hi int) float64 {
		return p.head(sc, rows[r], hi, qm[r*s*hd:], km[r*s*hd:], dqm, dkm, r, norm)
	})
	if g != nil {
		addProjectionGrads(xq, dqm, nr*s, dm, hd, g.wq, g.bq)
		addProjectionGrads(xk, dkm, nr*s, dm, hd, g.wk, g.bk)
	}
	return loss / norm
}

type perfScratch struct {
	q, k, uq, uk, kv, ks, num, den, do, dnum, dden, dq, dk, dkv, dks []float64
}

func (p *performerProblem) newScratch() *perfScratch {
	s, d, m, dv := p.s, p.d, p.m, p.dv
	return &perfScratch{
		q: make([]float64, s*d), k: make([]float64, s*d), uq: make([]float64, s*m), uk: make([]float64, s*m),
		kv: make([]float64, m*dv), ks: make([]float64, m), num: make([]float64, s*dv), den: make([]float64, s),
		do: make([]float64, s*dv), dnum: make([]float64, s*dv), dden: make([]float64, s),
		dq: make([]float64, s*d), dk: make([]float64, s*d), dkv: make([]float64, m*dv), dks: make([]float64, m),
	}
}

// head computes one (batch row, head): the squared error (unnormalised)
// and, when dqm is non-nil, the gradient with respect to the head's
// columns of the merged projections (row r of the selection).
func (p *performerProblem) head(sc *perfScratch, bi, hi int, qm, km, dqm, dkm []float64, r int, norm float64) float64 {
	om := p.om
	if p.ho > 1 {
		om = p.om[hi*p.m*p.d : (hi+1)*p.m*p.d]
	}
	p.scaledHead(sc, hi, qm, km)
	bh := bi*p.h + hi
	p.queryFeatures(sc, bh, om)
	p.keyFeatures(sc, bi, bh, om)
	loss := p.headForward(sc, bi, bh, norm)
	if dqm == nil {
		return loss
	}
	p.headBackward(sc, bi, bh, om)
	s, d, hd := p.s, p.d, p.h*p.d
	for i := 0; i < s; i++ {
		row := (r*s + i) * hd
		for c := 0; c < d; c++ {
			dqm[row+hi*d+c] = sc.dq[i*d+c]
			dkm[row+hi*d+c] = sc.dk[i*d+c]
		}
	}
	return loss
}

// scaledHead sets sc.q and sc.k to x̃ = √scale · x for the columns of head
// hi of the merged Q and K.
func (p *performerProblem) scaledHead(sc *perfScratch, hi int, qm, km []float64) {
	s, d, hd := p.s, p.d, p.h*p.d
	rs := math.Sqrt(p.Scale)
	for i := 0; i < s; i++ {
		for c := 0; c < d; c++ {
			sc.q[i*d+c] = rs * qm[i*hd+hi*d+c]
			sc.k[i*d+c] = rs * km[i*hd+hi*d+c]
		}
	}
}

// queryFeatures sets sc.uq to the query features φ(q) = exp(u − h −
// max)/√M, u = Ω·q̃ and h = ‖q̃‖²/2, with each row's own maximum (recorded
// in maxQ, or read from it with FixedMaxima).
func (p *performerProblem) queryFeatures(sc *perfScratch, bh int, om []float64) {
	s, d, m := p.s, p.d, p.m
	invSqrtM := 1 / math.Sqrt(float64(m))
	blas64.Implementation().Dgemm(blas.NoTrans, blas.Trans, s, m, d, 1, sc.q, d, om, d, 0, sc.uq, m)
	for i := 0; i < s; i++ {
		var hq float64
		for _, x := range sc.q[i*d : (i+1)*d] {
			hq += x * x
		}
		hq /= 2
		row := sc.uq[i*m : (i+1)*m]
		top := math.Inf(-1)
		for _, u := range row {
			top = math.Max(top, u-hq)
		}
		if p.FixedMaxima {
			top = p.maxQ[bh*s+i]
		} else {
			p.maxQ[bh*s+i] = top
		}
		for f, u := range row {
			row[f] = math.Exp(u-hq-top) * invSqrtM
		}
	}
}

// keyFeatures sets sc.uk to the key features φ(k) = exp(u − h + b −
// max)/√M with one maximum over the valid keys (recorded in maxK, or read
// from it with FixedMaxima); padded keys are zero.
func (p *performerProblem) keyFeatures(sc *perfScratch, bi, bh int, om []float64) {
	s, d, m := p.s, p.d, p.m
	invSqrtM := 1 / math.Sqrt(float64(m))
	blas64.Implementation().Dgemm(blas.NoTrans, blas.Trans, s, m, d, 1, sc.k, d, om, d, 0, sc.uk, m)
	top := math.Inf(-1)
	for j := 0; j < s; j++ {
		row := sc.uk[j*m : (j+1)*m]
		if !p.valid[bi*s+j] {
			continue
		}
		var hk float64
		for _, x := range sc.k[j*d : (j+1)*d] {
			hk += x * x
		}
		c := p.keyBias[bi*s+j] - hk/2
		for f := range row {
			row[f] += c
			top = math.Max(top, row[f])
		}
	}
	if p.FixedMaxima {
		top = p.maxK[bh]
	} else {
		p.maxK[bh] = top
	}
	for j := 0; j < s; j++ {
		row := sc.uk[j*m : (j+1)*m]
		if !p.valid[bi*s+j] {
			clear(row)
			continue
		}
		for f, u := range row {
			row[f] = math.Exp(u-top) * invSqrtM
		}
	}
}

// headForward computes the head's output from the features, kv = φ(K)ᵀV,
// ks = φ(K)ᵀ1, num = φ(Q)·kv and den = φ(Q)·ks + ε, and returns its
// squared error over the valid queries; it leaves the gradients of the
// loss divided by norm with respect to num and den in sc.dnum and sc.dden.
func (p *performerProblem) headForward(sc *perfScratch, bi, bh int, norm float64) float64 {
	impl := blas64.Implementation()
	s, m, dv := p.s, p.m, p.dv
	phiQ, phiK := sc.uq, sc.uk
	v := p.v[bh*s*dv : (bh+1)*s*dv]
	y := p.y[bh*s*dv : (bh+1)*s*dv]
	impl.Dgemm(blas.Trans, blas.NoTrans, m, dv, s, 1, phiK, m, v, dv, 0, sc.kv, dv)
	clear(sc.ks)
	for j := 0; j < s; j++ {
		for f, x := range phiK[j*m : (j+1)*m] {
			sc.ks[f] += x
		}
	}
	impl.Dgemm(blas.NoTrans, blas.NoTrans, s, dv, m, 1, phiQ, m, sc.kv, dv, 0, sc.num, dv)
	var loss float64
	for i := 0; i < s; i++ {
		var den float64
		for f, x := range phiQ[i*m : (i+1)*m] {
			den += x * sc.ks[f]
		}
		den += p.Epsilon
		if !(den > 0) {
			den = math.SmallestNonzeroFloat64 // no key weight at all: the row's output is 0
		}
		sc.den[i] = den
		var dd float64
		for c := 0; c < dv; c++ {
			idx := i*dv + c
			if !p.valid[bi*s+i] {
				sc.dnum[idx] = 0
				continue
			}
			o := sc.num[idx] / den
			res := o - y[idx]
			loss += res * res
			do := 2 * res / norm
			sc.dnum[idx] = do / den
			dd -= do * o / den
		}
		sc.dden[i] = dd
	}
	return loss
}

// headBackward takes sc.dnum and sc.dden back to the scaled queries and
// keys and leaves the gradients with respect to the head's unscaled Q and
// K in sc.dq and sc.dk.
func (p *performerProblem) headBackward(sc *perfScratch, bi, bh int, om []float64) {
	impl := blas64.Implementation()
	s, d, m, dv := p.s, p.d, p.m, p.dv
	rs := math.Sqrt(p.Scale)
	phiQ, phiK := sc.uq, sc.uk
	v := p.v[bh*s*dv : (bh+1)*s*dv]
	// dφ(Q) = dnum·kvᵀ + dden ⊗ ks.
	dphiQ := make([]float64, s*m)
	impl.Dgemm(blas.NoTrans, blas.Trans, s, m, dv, 1, sc.dnum, dv, sc.kv, dv, 0, dphiQ, m)
	for i := 0; i < s; i++ {
		for f := 0; f < m; f++ {
			dphiQ[i*m+f] += sc.dden[i] * sc.ks[f]
		}
	}
	// dkv = φ(Q)ᵀ dnum, dks = φ(Q)ᵀ dden, dφ(K) = V·dkvᵀ + 1 ⊗ dks.
	impl.Dgemm(blas.Trans, blas.NoTrans, m, dv, s, 1, phiQ, m, sc.dnum, dv, 0, sc.dkv, dv)
	clear(sc.dks)
	for i := 0; i < s; i++ {
		for f, x := range phiQ[i*m : (i+1)*m] {
			sc.dks[f] += x * sc.dden[i]
		}
	}
	dphiK := make([]float64, s*m)
	impl.Dgemm(blas.NoTrans, blas.Trans, s, m, dv, 1, v, dv, sc.dkv, dv, 0, dphiK, m)
	for j := 0; j < s; j++ {
		for f := 0; f < m; f++ {
			dphiK[j*m+f] += sc.dks[f]
		}
	}
	// Through φ = exp(Ωx̃ − ‖x̃‖²/2 + const): du = dφ ⊙ φ,
	// dx̃ = du·Ω − (Σ du)·x̃, dx = √scale·dx̃.
	back := func(dphi, phi, x, dx []float64, isKey bool) {
		for i := range dphi {
			dphi[i] *= phi[i]
		}
		impl.Dgemm(blas.NoTrans, blas.NoTrans, s, d, m, 1, dphi, m, om, d, 0, dx, d)
		for i := 0; i < s; i++ {
			if isKey && !p.valid[bi*s+i] {
				clear(dx[i*d : (i+1)*d])
				continue
			}
			var sum float64
			for _, u := range dphi[i*m : (i+1)*m] {
				sum += u
			}
			for c := 0; c < d; c++ {
				dx[i*d+c] = rs * (dx[i*d+c] - sum*x[i*d+c])
			}
		}
	}
	back(dphiQ, phiQ, sc.q, sc.dq, false)
	back(dphiK, phiK, sc.k, sc.dk, true)
}

// Fit runs the shared training loop (fitAdamTrace) on the Q/K projection
// parameters, with gradients from the train rows and the held rows held
// out.
func (p *performerProblem) Fit(opt Options, train, held []int) adamTrace {
	params := [][]float64{p.wq, p.bq, p.wk, p.bk}
	if !p.hasBQ {
		params[1] = nil
	}
	if !p.hasBK {
		params[3] = nil
	}
	g := p.newGrads()
	return fitAdamTrace(opt, train, held, params, [][]float64{g.wq, g.bq, g.wk, g.bk},
		func(rows []int) float64 { return p.LossGrad(rows, nil) },
		func(rows []int) { p.LossGrad(rows, g) })
}
