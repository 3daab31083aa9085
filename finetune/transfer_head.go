package finetune

import (
	"math"
	"math/rand/v2"
	"slices"

	"github.com/linearize/linearize/internal/gemm"
)

// hhHead is the attention transfer of one head of one HedgehogAttention
// layer: its teacher's queries, keys, values, key biases and exact
// attention output over the calibration rows, and the head's learned
// maps (see the package documentation for the objectives and their
// gradients).
type hhHead struct {
	n, s, d, dv, f int
	scale          float64
	block, reach   int // block 0: no window
	// sinkFirst and sinkLast keep the first and last valid key exact for
	// every query; sinks lists them per row (prepare).
	sinkFirst, sinkLast bool
	sinks               [][]int
	// ceQueries > 0 trains on the attention cross-entropy of that many
	// queries per row instead of the output error.
	ceQueries int
	q, k      []float32 // [n, s, d]
	v, y      []float32 // [n, s, dv]
	beta      []float64 // [n, s] key bias
	valid     []bool    // [n, s]
	yNorm     []float64 // Σ‖y_i‖² over the valid queries of each row
	// Exact near part (block > 0), per query: log Σ_near exp(t_ij) and the
	// near softmax output.
	logZ  []float64 // [n, s]
	onear []float32 // [n, s, dv]
	// Parameters: W [d, f] row-major, bias [2f], norm (one value).
	wq, bq, gq, wk, bk, gk []float64
}

// hhGrads holds the gradients of one head's parameters.
type hhGrads struct{ wq, bq, gq, wk, bk, gk []float64 }

func (h *hhHead) params() [][]float64 {
	return [][]float64{h.wq, h.bq, h.gq, h.wk, h.bk, h.gk}
}

func (h *hhHead) newGrads() *hhGrads {
	return &hhGrads{make([]float64, len(h.wq)), make([]float64, len(h.bq)), make([]float64, 1), make([]float64, len(h.wk)), make([]float64, len(h.bk)), make([]float64, 1)}
}

func (g *hhGrads) list() [][]float64 { return [][]float64{g.wq, g.bq, g.gq, g.wk, g.bk, g.gk} }

// nblocks is the number of blocks of the key axis (1 for pure linear
// attention, whose one far state holds every key).
func (h *hhHead) nblocks() int {
	if h.block == 0 {
		return 1
	}
	return (h.s + h.block - 1) / h.block
}

func (h *hhHead) blockOf(i int) int {
	if h.block == 0 {
		return 0
	}
	return i / h.block
}

// prepare computes the row norms and the exact near part of every row.
func (h *hhHead) prepare() {
	s, d, dv := h.s, h.d, h.dv
	h.yNorm = make([]float64, h.n)
	for r := 0; r < h.n; r++ {
		for i := 0; i < s; i++ {
			if !h.valid[r*s+i] {
				continue
			}
			for _, x := range h.y[(r*s+i)*dv : (r*s+i+1)*dv] {
				h.yNorm[r] += float64(x) * float64(x)
			}
		}
	}
	h.sinks = make([][]int, h.n)
	for r := range h.sinks {
		h.sinks[r] = sinkKeys(h.valid[r*s:(r+1)*s], h.sinkFirst, h.sinkLast)
	}
	if !h.hasNear() {
		return
	}
	h.logZ = make([]float64, h.n*s)
	h.onear = make([]float32, h.n*s*dv)
	b := h.block
	if b == 0 {
		b = s // no window: one block of queries whose near keys are the sinks
	}
	width := min(s, (2*h.reach+1)*b) + 2
	scores := make([]float32, b*width)
	kb, vb := make([]float32, width*d), make([]float32, width*dv)
	keys := make([]int, 0, width)
	for r := 0; r < h.n; r++ {
		q, k, v := h.q[r*s*d:(r+1)*s*d], h.k[r*s*d:(r+1)*s*d], h.v[r*s*dv:(r+1)*s*dv]
		valid, beta := h.valid[r*s:(r+1)*s], h.beta[r*s:(r+1)*s]
		for lo := 0; lo < s; lo += b {
			n := min(s, lo+b) - lo
			keys = keys[:0]
			klo, khi := 0, 0
			if h.block > 0 {
				klo, khi = h.near(lo)
			}
			for j := klo; j < khi; j++ {
				if valid[j] {
					keys = append(keys, j)
				}
			}
			for _, j := range h.sinks[r] {
				if j < klo || j >= khi {
					keys = append(keys, j)
				}
			}
			nk := len(keys)
			if nk == 0 {
				continue
			}
			for x, j := range keys {
				copy(kb[x*d:(x+1)*d], k[j*d:(j+1)*d])
				copy(vb[x*dv:(x+1)*dv], v[j*dv:(j+1)*dv])
			}
			gemm.Sgemm(false, true, n, nk, d, float32(h.scale), q[lo*d:], d, kb, d, 0, scores, nk, 1)
			for i := 0; i < n; i++ {
				if !valid[lo+i] {
					continue
				}
				row := scores[i*nk : (i+1)*nk]
				m := math.Inf(-1)
				for x, j := range keys {
					m = max(m, float64(row[x])+beta[j])
				}
				var z float64
				for x, j := range keys {
					w := math.Exp(float64(row[x]) + beta[j] - m)
					z += w
					row[x] = float32(w)
				}
				for x := range row {
					row[x] = float32(float64(row[x]) / z)
				}
				h.logZ[r*s+lo+i] = m + math.Log(z)
			}
			gemm.Sgemm(false, false, n, dv, nk, 1, scores, nk, vb, dv, 0, h.onear[(r*s+lo)*dv:], dv, 1)
		}
	}
}

// hasNear says whether some keys are attended exactly (a window or sinks).
func (h *hhHead) hasNear() bool { return h.block > 0 || h.sinkFirst || h.sinkLast }

// sinkKeys returns the first and/or last valid key (once if the same).
func sinkKeys(valid []bool, first, last bool) []int {
	var out []int
	lo, hi := -1, -1
	for j, ok := range valid {
		if ok {
			if lo < 0 {
				lo = j
			}
			hi = j
		}
	}
	if lo < 0 {
		return nil
	}
	if first {
		out = append(out, lo)
	}
	if last && (!first || hi != lo) {
		out = append(out, hi)
	}
	return out
}

// near returns the keys [lo, hi) query i attends exactly.
func (h *hhHead) near(i int) (lo, hi int) {
	c := i / h.block
	return max(0, (c-h.reach)*h.block), min(h.s, (c+h.reach+1)*h.block)
}

// hhScratch is one worker's buffers for rowLoss (float32 matrices, sums
// in float64).
type hhScratch struct {
	wq, wk, gw  []float32 // [d, f]
	ak, aq, dx  []float32 // [s, f]
	phk, e, du  []float32 // [s, 2f]
	num, g      []float32 // [s, dv]
	st, fs, dfs []float32 // [nb, 2f, dv]
	sz, fz, dfz []float32 // [nb, 2f]
	prefix      []float64 // [(nb+1)·2f·dv]
	// Cross-entropy objective: the selected queries ([ce, d], [ce, 2f])
	// and their logits, far weights and gradient factors ([ce, s]).
	qs, es, tmp   []float32
	lt, wf, cw    []float32
	alpha, den    []float64 // [s]
	gdo, sqq, sqk []float64 // [s]
}

func (h *hhHead) newScratch() *hhScratch {
	s, d, f, dv := h.s, h.d, h.f, h.dv
	f2, nb := 2*f, h.nblocks()
	return &hhScratch{
		wq: make([]float32, d*f), wk: make([]float32, d*f), gw: make([]float32, d*f),
		ak: make([]float32, s*f), aq: make([]float32, s*f), dx: make([]float32, s*f),
		phk: make([]float32, s*f2), e: make([]float32, s*f2), du: make([]float32, s*f2),
		num: make([]float32, s*dv), g: make([]float32, s*dv),
		st: make([]float32, nb*f2*dv), fs: make([]float32, nb*f2*dv), dfs: make([]float32, nb*f2*dv),
		sz: make([]float32, nb*f2), fz: make([]float32, nb*f2), dfz: make([]float32, nb*f2),
		prefix: make([]float64, (nb+1)*f2*dv),
		alpha:  make([]float64, s), den: make([]float64, s), gdo: make([]float64, s), sqq: make([]float64, s), sqk: make([]float64, s),
		qs: make([]float32, s*d), es: make([]float32, s*f2), tmp: make([]float32, s*f2),
	}
}

// span returns the positions [lo, lo+n) of block c.
func (h *hhHead) span(c int) (lo, n int) {
	if h.block == 0 {
		return 0, h.s
	}
	lo = c * h.block
	return lo, min(h.s, lo+h.block) - lo
}

// farSums sets far[c] = Σ_{c' : |c'−c| > reach} x[c'] for every block c
// (each of width w), with float64 prefix sums; with pure linear attention
// (one block holding every key) far is x.
func (h *hhHead) farSums(x, far []float32, p []float64, w int) {
	nb := h.nblocks()
	if h.block == 0 {
		copy(far, x[:w])
		return
	}
	clear(p[:w])
	for c := 0; c < nb; c++ {
		dst, prev, src := p[(c+1)*w:(c+2)*w], p[c*w:(c+1)*w], x[c*w:(c+1)*w]
		for i := range dst {
			dst[i] = prev[i] + float64(src[i])
		}
	}
	total := p[nb*w : (nb+1)*w]
	for c := 0; c < nb; c++ {
		l, rr := max(0, c-h.reach), min(nb, c+h.reach+1)
		left, right := p[l*w:(l+1)*w], p[rr*w:(rr+1)*w]
		dst := far[c*w : (c+1)*w]
		for i := range dst {
			dst[i] = float32(left[i] + total[i] - right[i])
		}
	}
}

// logFeatures writes, for every valid row of x ([s, d]) with a = x·W
// given ([s, f]), the log-features ±a + bias − norm·‖x‖² + shift[i] into
// lf ([s, 2f]) and ‖x_i‖² into sq; invalid rows are left alone.
func logFeatures(x, a []float32, bias []float64, norm float64, shift []float64, valid []bool, d, f int, lf []float32, sq []float64) {
	for i, ok := range valid {
		if !ok {
			continue
		}
		var n float64
		for _, v := range x[i*d : (i+1)*d] {
			n += float64(v) * float64(v)
		}
		sq[i] = n
		base := shift[i] - norm*n
		ai, li := a[i*f:(i+1)*f], lf[i*2*f:(i+1)*2*f]
		for t, at := range ai {
			li[t] = float32(float64(at) + bias[t] + base)
			li[f+t] = float32(-float64(at) + bias[f+t] + base)
		}
	}
}

// mapGrad adds the gradient of the log-features dl ([s, 2f], zero on
// invalid rows) of the rows x ([s, d], squared norms sq) to one map's
// gradients.
func (h *hhHead) mapGrad(x, dl []float32, sq []float64, gw, gb, gg []float64, sc *hhScratch) {
	h.mapGradRows(h.s, x, dl, sq, gw, gb, gg, sc)
}

// mapGradRows is mapGrad over the first s rows of x, dl and sq.
func (h *hhHead) mapGradRows(s int, x, dl []float32, sq []float64, gw, gb, gg []float64, sc *hhScratch) {
	d, f := h.d, h.f
	var gn float64
	for i := 0; i < s; i++ {
		li := dl[i*2*f : (i+1)*2*f]
		var row float64
		for t := 0; t < f; t++ {
			sc.dx[i*f+t] = li[t] - li[f+t]
		}
		for t, v := range li {
			gb[t] += float64(v)
			row += float64(v)
		}
		gn -= sq[i] * row
	}
	gg[0] += gn
	gemm.Sgemm(true, false, d, f, s, 1, x, d, sc.dx, f, 0, sc.gw, f, 1)
	for i, v := range sc.gw {
		gw[i] += float64(v)
	}
}

// keyFeatures sets sc.phk to the key features of row r,
// φ̃_k(k_j) = exp(log φ_k(k_j) + β_j − cK), zero for invalid keys and
// sinks (which are attended exactly), and returns the shift cK (−∞ when
// the row has no valid key).
func (h *hhHead) keyFeatures(r int, sc *hhScratch) float64 {
	s, d, f := h.s, h.d, h.f
	f2 := 2 * f
	k := h.k[r*s*d : (r+1)*s*d]
	valid, beta := h.valid[r*s:(r+1)*s], h.beta[r*s:(r+1)*s]
	for i, w := range h.wk {
		sc.wk[i] = float32(w)
	}
	gemm.Sgemm(false, false, s, f, d, 1, k, d, sc.wk, f, 0, sc.ak, f, 1)
	logFeatures(k, sc.ak, h.bk, h.gk[0], beta, valid, d, f, sc.phk, sc.sqk)
	cK := math.Inf(-1)
	for j, ok := range valid {
		if ok {
			for _, x := range sc.phk[j*f2 : (j+1)*f2] {
				cK = max(cK, float64(x))
			}
		}
	}
	if math.IsInf(cK, -1) {
		return cK
	}
	sink := h.sinks[r]
	for j, ok := range valid {
		row := sc.phk[j*f2 : (j+1)*f2]
		ok = ok && !slices.Contains(sink, j)
		for t := range row {
			if ok {
				row[t] = float32(math.Exp(float64(row[t]) - cK))
			} else {
				row[t] = 0
			}
		}
	}
	return cK
}

// rowLoss returns Σ‖out_i − y_i‖² over the valid queries of row r and,
// when g is set, adds inv times its gradient to g. The maxima subtracted
// for stability (cK over the keys, m_i per query) are constants that
// cancel in the ratio, so they carry no gradient.
func (h *hhHead) rowLoss(r int, g *hhGrads, inv float64, sc *hhScratch) float64 {
	s, d, dv, f := h.s, h.d, h.dv, h.f
	f2, nb := 2*f, h.nblocks()
	q, k, v, y := h.q[r*s*d:(r+1)*s*d], h.k[r*s*d:(r+1)*s*d], h.v[r*s*dv:(r+1)*s*dv], h.y[r*s*dv:(r+1)*s*dv]
	valid := h.valid[r*s : (r+1)*s]
	for i, w := range h.wq {
		sc.wq[i] = float32(w)
	}
	cK := h.keyFeatures(r, sc)
	if math.IsInf(cK, -1) {
		return 0
	}
	// Block states Σ φ̃_k ⊗ v and Σ φ̃_k, and the far states of each query
	// block.
	for c := 0; c < nb; c++ {
		lo, n := h.span(c)
		gemm.Sgemm(true, false, f2, dv, n, 1, sc.phk[lo*f2:], f2, v[lo*dv:], dv, 0, sc.st[c*f2*dv:], dv, 1)
		z := sc.sz[c*f2 : (c+1)*f2]
		clear(z)
		for j := lo; j < lo+n; j++ {
			for t, x := range sc.phk[j*f2 : (j+1)*f2] {
				z[t] += x
			}
		}
	}
	h.farSums(sc.st, sc.fs, sc.prefix, f2*dv)
	h.farSums(sc.sz, sc.fz, sc.prefix, f2)
	// Query features, with each query's own maximum m_i (over its far
	// log-weights and its near log-partition).
	gemm.Sgemm(false, false, s, f, d, 1, q, d, sc.wq, f, 0, sc.aq, f, 1)
	for i := range sc.alpha {
		sc.alpha[i] = cK
	}
	logFeatures(q, sc.aq, h.bq, h.gq[0], sc.alpha, valid, d, f, sc.e, sc.sqq)
	for i, ok := range valid {
		row := sc.e[i*f2 : (i+1)*f2]
		if !ok {
			clear(row)
			sc.alpha[i] = 0
			continue
		}
		m := math.Inf(-1)
		for _, x := range row {
			m = max(m, float64(x))
		}
		sc.alpha[i] = 0
		if h.hasNear() {
			lz := h.logZ[r*s+i]
			m = max(m, lz)
			sc.alpha[i] = math.Exp(lz - m)
		}
		for t := range row {
			row[t] = float32(math.Exp(float64(row[t]) - m))
		}
	}
	for c := 0; c < nb; c++ {
		lo, n := h.span(c)
		gemm.Sgemm(false, false, n, dv, f2, 1, sc.e[lo*f2:], f2, sc.fs[c*f2*dv:], dv, 0, sc.num[lo*dv:], dv, 1)
	}
	var loss float64
	for i, ok := range valid {
		gi := sc.g[i*dv : (i+1)*dv]
		if !ok {
			clear(gi)
			continue
		}
		c := h.blockOf(i)
		fz := sc.fz[c*f2 : (c+1)*f2]
		den := sc.alpha[i]
		for t, x := range sc.e[i*f2 : (i+1)*f2] {
			den += float64(x) * float64(fz[t])
		}
		sc.den[i] = den
		var gdo float64
		for x := 0; x < dv; x++ {
			num := float64(sc.num[i*dv+x])
			if h.hasNear() {
				num += sc.alpha[i] * float64(h.onear[(r*s+i)*dv+x])
			}
			out := num / den
			diff := out - float64(y[i*dv+x])
			loss += diff * diff
			gx := 2 * inv * diff
			gi[x] = float32(gx)
			gdo += gx * out
		}
		sc.gdo[i] = gdo
	}
	if g == nil {
		return loss
	}
	// Queries: d out_i/d e_it = (FS_t − out_i·FZ_t)/den_i, and each far
	// state's gradient collects (e_it/den_i)·g_i.
	for c := 0; c < nb; c++ {
		lo, n := h.span(c)
		gemm.Sgemm(false, true, n, f2, dv, 1, sc.g[lo*dv:], dv, sc.fs[c*f2*dv:], dv, 0, sc.du[lo*f2:], f2, 1)
	}
	clear(sc.dfz)
	for i, ok := range valid {
		du, e := sc.du[i*f2:(i+1)*f2], sc.e[i*f2:(i+1)*f2]
		if !ok {
			clear(du)
			continue
		}
		c := h.blockOf(i)
		fz, dfz := sc.fz[c*f2:(c+1)*f2], sc.dfz[c*f2:(c+1)*f2]
		for t := range e {
			w := float64(e[t]) / sc.den[i]
			e[t] = float32(w)
			du[t] = float32(w * (float64(du[t]) - sc.gdo[i]*float64(fz[t])))
			dfz[t] -= float32(w * sc.gdo[i])
		}
	}
	for c := 0; c < nb; c++ {
		lo, n := h.span(c)
		gemm.Sgemm(true, false, f2, dv, n, 1, sc.e[lo*f2:], f2, sc.g[lo*dv:], dv, 0, sc.dfs[c*f2*dv:], dv, 1)
	}
	h.mapGrad(q, sc.du, sc.sqq, g.wq, g.bq, g.gq, sc)
	// Keys: block c' of keys feeds the far state of every query block
	// farther than reach, so its gradient is the far sum of the far-state
	// gradients (the relation is symmetric).
	h.farSums(sc.dfs, sc.fs, sc.prefix, f2*dv)
	h.farSums(sc.dfz, sc.fz, sc.prefix, f2)
	for c := 0; c < nb; c++ {
		lo, n := h.span(c)
		gemm.Sgemm(false, true, n, f2, dv, 1, v[lo*dv:], dv, sc.fs[c*f2*dv:], dv, 0, sc.du[lo*f2:], f2, 1)
	}
	for j, ok := range valid {
		du, p := sc.du[j*f2:(j+1)*f2], sc.phk[j*f2:(j+1)*f2]
		if !ok {
			clear(du)
			continue
		}
		fz := sc.fz[h.blockOf(j)*f2 : (h.blockOf(j)+1)*f2]
		for t := range du {
			du[t] = p[t] * (du[t] + fz[t])
		}
	}
	h.mapGrad(k, sc.du, sc.sqk, g.wk, g.bk, g.gk, sc)
	return loss
}

// inNear says whether key j is attended exactly by query i of row r.
func (h *hhHead) inNear(r, i, j int) bool {
	if h.block > 0 {
		if lo, hi := h.near(i); j >= lo && j < hi {
			return true
		}
	}
	return slices.Contains(h.sinks[r], j)
}

// rowCE returns the attention cross-entropy against the teacher,
// Σ_i KL(P_i ‖ A_i), over the queries sel of row r (valid ones), where
// P_i = softmax_j(scale·q_i·k_j + β_j) over the valid keys and A_i the
// head's attention weights; with g set it adds inv times its gradient.
// For a far key, ∂/∂ log w_ij = A_ij − P_ij, and w_ij = ẽ_i·φ̃_k(k_j) is a
// product of exponentiated features, so the gradients of both maps'
// log-features are products of matrices:
//
//	du_i = ẽ_i ⊙ (C·Φ̃_k)_i,  dl_j = φ̃_k(k_j) ⊙ (Cᵀ·Ẽ)_j,  C_ij = (A_ij − P_ij)/w_ij.
func (h *hhHead) rowCE(r int, sel []int, g *hhGrads, inv float64, sc *hhScratch) float64 {
	s, d, f := h.s, h.d, h.f
	f2, ns := 2*f, len(sel)
	if ns == 0 {
		return 0
	}
	q, k := h.q[r*s*d:(r+1)*s*d], h.k[r*s*d:(r+1)*s*d]
	valid, beta := h.valid[r*s:(r+1)*s], h.beta[r*s:(r+1)*s]
	cK := h.keyFeatures(r, sc)
	if math.IsInf(cK, -1) {
		return 0
	}
	if len(sc.lt) < ns*s {
		sc.lt, sc.wf, sc.cw = make([]float32, ns*s), make([]float32, ns*s), make([]float32, ns*s)
	}
	for x, i := range sel {
		copy(sc.qs[x*d:(x+1)*d], q[i*d:(i+1)*d])
	}
	for i, w := range h.wq {
		sc.wq[i] = float32(w)
	}
	gemm.Sgemm(false, false, ns, f, d, 1, sc.qs, d, sc.wq, f, 0, sc.aq, f, 1)
	mu := sc.alpha[:ns]
	clear(mu)
	all := make([]bool, ns)
	for i := range all {
		all[i] = true
	}
	logFeatures(sc.qs[:ns*d], sc.aq, h.bq, h.gq[0], mu, all, d, f, sc.es, sc.sqq)
	for x := 0; x < ns; x++ {
		row := sc.es[x*f2 : (x+1)*f2]
		m := math.Inf(-1)
		for _, v := range row {
			m = max(m, float64(v))
		}
		mu[x] = m
		for t := range row {
			row[t] = float32(math.Exp(float64(row[t]) - m))
		}
	}
	gemm.Sgemm(false, true, ns, s, d, float32(h.scale), sc.qs, d, k, d, 0, sc.lt, s, 1)
	gemm.Sgemm(false, true, ns, s, f2, 1, sc.es, f2, sc.phk, f2, 0, sc.wf, s, 1)
	var loss float64
	ls := make([]float64, s)
	for x, i := range sel {
		lt, wf, cw := sc.lt[x*s:(x+1)*s], sc.wf[x*s:(x+1)*s], sc.cw[x*s:(x+1)*s]
		clear(cw)
		mt, ms := math.Inf(-1), math.Inf(-1)
		for j, ok := range valid {
			if !ok {
				continue
			}
			t := float64(lt[j]) + beta[j]
			lt[j] = float32(t)
			mt = max(mt, t)
			switch {
			case h.inNear(r, i, j):
				ls[j] = t
			case wf[j] > 0:
				ls[j] = math.Log(float64(wf[j])) + mu[x] + cK
			default:
				ls[j] = math.Inf(-1)
			}
			ms = max(ms, ls[j])
		}
		var zt, zs float64
		for j, ok := range valid {
			if ok {
				zt += math.Exp(float64(lt[j]) - mt)
				zs += math.Exp(ls[j] - ms)
			}
		}
		lzt, lzs := mt+math.Log(zt), ms+math.Log(zs)
		for j, ok := range valid {
			if !ok {
				continue
			}
			lp := float64(lt[j]) - lzt
			p := math.Exp(lp)
			if p > 0 {
				loss += p * (lp - (ls[j] - lzs))
			}
			if g != nil && !h.inNear(r, i, j) && wf[j] > 0 {
				a := math.Exp(ls[j] - lzs)
				cw[j] = float32(inv * (a - p) / float64(wf[j]))
			}
		}
	}
	if g == nil {
		return loss
	}
	// du = Ẽ ⊙ (C·Φ̃_k) for the selected queries, dl = Φ̃_k ⊙ (Cᵀ·Ẽ).
	gemm.Sgemm(false, false, ns, f2, s, 1, sc.cw, s, sc.phk, f2, 0, sc.tmp, f2, 1)
	for i := range sc.tmp[:ns*f2] {
		sc.tmp[i] *= sc.es[i]
	}
	h.mapGradRows(ns, sc.qs, sc.tmp, sc.sqq, g.wq, g.bq, g.gq, sc)
	gemm.Sgemm(true, false, s, f2, ns, 1, sc.cw, s, sc.es, f2, 0, sc.du, f2, 1)
	for i := range sc.du {
		sc.du[i] *= sc.phk[i]
	}
	h.mapGrad(k, sc.du, sc.sqk, g.wk, g.bk, g.gk, sc)
	return loss
}

// loss returns Σ squared error and Σ‖y‖² over rows.
func (h *hhHead) loss(rows []int, sc *hhScratch) (sq, norm float64) {
	for _, r := range rows {
		sq += h.rowLoss(r, nil, 0, sc)
		norm += h.yNorm[r]
	}
	return sq, norm
}

// grad sets g to the gradient of the objective over rows: with
// h.ceQueries = 0 the relative squared error of the output,
// Σ‖out − y‖²/Σ‖y‖²; otherwise the mean attention cross-entropy over
// h.ceQueries valid queries per row, evenly spaced from a random offset.
func (h *hhHead) grad(rows []int, g *hhGrads, sc *hhScratch, rng *rand.Rand) {
	for _, x := range g.list() {
		clear(x)
	}
	if h.ceQueries > 0 {
		sels := make([][]int, len(rows))
		total := 0
		for x, r := range rows {
			var valid []int
			for i, ok := range h.valid[r*h.s : (r+1)*h.s] {
				if ok {
					valid = append(valid, i)
				}
			}
			if len(valid) > h.ceQueries {
				step := float64(len(valid)) / float64(h.ceQueries)
				off := rng.Float64() * step
				sel := make([]int, h.ceQueries)
				for t := range sel {
					sel[t] = valid[int(off+float64(t)*step)]
				}
				valid = sel
			}
			sels[x] = valid
			total += len(valid)
		}
		for x, r := range rows {
			h.rowCE(r, sels[x], g, 1/float64(max(total, 1)), sc)
		}
		return
	}
	var norm float64
	for _, r := range rows {
		norm += h.yNorm[r]
	}
	if norm == 0 {
		return
	}
	for _, r := range rows {
		h.rowLoss(r, g, 1/norm, sc)
	}
}

// hhFit is the result of one head's transfer: squared errors and norms
// before and after, on the training and held-out evaluation rows, and the
// steps taken.
type hhFit struct {
	trainBefore, trainAfter, heldBefore, heldAfter [2]float64 // {Σ sq err, Σ‖y‖²}
	steps                                          int
}

// fit trains the head by Adam on mini-batches of train rows (the shared
// loop, adamLoop), after the far field's mass is searched (searchMass),
// keeping the parameters of the lowest error on the held-out rows (on the
// training evaluation rows when none are held out) among the start and
// the checkpoints, and stopping after patience checkpoints without
// improvement (0: never). Its errors before are those of the head as
// given, before the search.
func (h *hhHead) fit(o TransferOptions, train, held []int, rng *rand.Rand) hhFit {
	sc := h.newScratch()
	g := h.newGrads()
	trainEval := spread(train, o.EvalRows)
	heldEval := spread(held, o.EvalRows)
	guard := heldEval
	if len(guard) == 0 {
		guard = trainEval
	}
	guardErr := func() float64 {
		sq, _ := h.loss(guard, sc)
		return sq
	}
	var r hhFit
	r.trainBefore[0], r.trainBefore[1] = h.loss(trainEval, sc)
	r.heldBefore[0], r.heldBefore[1] = h.loss(heldEval, sc)
	h.searchMass(spread(train, 8), sc)
	loop := adamLoop{steps: o.Steps, every: o.CheckEvery, patience: o.Patience, lr: o.LR}
	r.steps, _, _ = loop.run(h.params(), g.list(), guardErr(),
		func() []int { return pick(rng, train, o.Windows) },
		func(rows []int) { h.grad(rows, g, sc, rng) },
		guardErr)
	r.trainAfter[0], r.trainAfter[1] = h.loss(trainEval, sc)
	r.heldAfter[0], r.heldAfter[1] = h.loss(heldEval, sc)
	return r
}

// searchMass adds to both maps' biases the one offset δ/2 (the far
// field's log-mass δ) that minimises the error on rows, by a grid search
// refined twice (δ in [−24, 24], final step 0.25; 0 if nothing is
// better): Adam then starts with the far field weighing what it should
// against the exact near part.
func (h *hhHead) searchMass(rows []int, sc *hhScratch) {
	bq, bk := slices.Clone(h.bq), slices.Clone(h.bk)
	try := func(delta float64) float64 {
		for i := range h.bq {
			h.bq[i], h.bk[i] = bq[i]+delta/2, bk[i]+delta/2
		}
		sq, norm := h.loss(rows, sc)
		return sq / math.Max(norm, 1e-300)
	}
	best, bestL := 0.0, try(0)
	center := 0.0
	for _, step := range []float64{4, 1, 0.25} {
		c := center
		for k := -6; k <= 6; k++ {
			if step < 4 && (k < -3 || k > 3) {
				continue
			}
			if d := c + float64(k)*step; d != 0 {
				if l := try(d); l < bestL {
					best, bestL = d, l
				}
			}
		}
		center = best
	}
	try(best)
}
