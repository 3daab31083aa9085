package finetune

import (
	"fmt"
	"math"
	"sync"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/internal/graphfacts"
	"github.com/linearize/linearize/onnx/onnxpb"

	"github.com/linearize/linearize/onnx"
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
)

// This file holds what the fits of projections feeding an attention op
// share: gathering mini-batch rows, projecting them, the per-(row, head)
// parallel loop, and the projection gradients.

// projectRows gathers the batch rows rows of x ([B, s, dm], row-major) and
// returns them ([len(rows)·s, dm]) and their projection xr·w + b
// ([len(rows)·s, out]).
func projectRows(rows []int, x, w, b []float64, s, dm, out int) (xr, y []float64) {
	nr := len(rows)
	xr = make([]float64, nr*s*dm)
	for r, bi := range rows {
		copy(xr[r*s*dm:(r+1)*s*dm], x[bi*s*dm:(bi+1)*s*dm])
	}
	y = make([]float64, nr*s*out)
	blas64.Implementation().Dgemm(blas.NoTrans, blas.NoTrans, nr*s, out, dm, 1, xr, dm, w, out, 0, y, out)
	for i := 0; i < nr*s; i++ {
		for c := 0; c < out; c++ {
			y[i*out+c] += b[c]
		}
	}
	return xr, y
}

// addProjectionGrads adds the gradients of a projection y = xr·w + b with
// respect to w (xrᵀ·dy) and b (the column sums of dy) into gw and gb.
func addProjectionGrads(xr, dy []float64, rows, dm, out int, gw, gb []float64) {
	blas64.Implementation().Dgemm(blas.Trans, blas.NoTrans, dm, out, rows, 1, xr, dm, dy, out, 1, gw, out)
	for i := 0; i < rows; i++ {
		for c := 0; c < out; c++ {
			gb[c] += dy[i*out+c]
		}
	}
}

// rowsNorm is the sum of the target norms of the selected rows.
func rowsNorm(rowNorm []float64, rows []int) float64 {
	var norm float64
	for _, bi := range rows {
		norm += rowNorm[bi]
	}
	return norm
}

// sumHeads runs fn for every (selected row r, head) pair on two goroutines
// (fn writes only the gradient columns of its head) and returns the sum of
// its results. newWorker gives each goroutine its own scratch state.
func sumHeads[W any](nr, h int, newWorker func() W, fn func(w W, r, hi int) float64) float64 {
	losses := make([]float64, nr*h)
	var wg sync.WaitGroup
	work := make(chan int)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := newWorker()
			for job := range work {
				losses[job] = fn(w, job/h, job%h)
			}
		}()
	}
	for job := range nr * h {
		work <- job
	}
	close(work)
	wg.Wait()
	var loss float64
	for _, l := range losses {
		loss += l
	}
	return loss
}

// qkProjections returns the Q and K projections feeding the converted node
// of ln (from what Detect proved about the original block), and claims
// their parameters in seen: a parameter shared between Q and K, with
// another layer or with any other consumer cannot be fitted.
func qkProjections(facts *graphfacts.Facts, ix *onnx.Index, inits map[string]int, ln targetNode, seen map[string]int) (q, k projection, err error) {
	n := ln.node
	if q, err = blockProjection(facts, inits, "Q", ln.block.QProj, n.Input[0]); err != nil {
		return q, k, fmt.Errorf("finetune: layer %d (%s): %w", ln.layer, n.GetName(), err)
	}
	if k, err = blockProjection(facts, inits, "K", ln.block.KProj, n.Input[1]); err != nil {
		return q, k, fmt.Errorf("finetune: layer %d (%s): %w", ln.layer, n.GetName(), err)
	}
	if q.w == k.w || (q.b != "" && q.b == k.b) {
		return q, k, fmt.Errorf("finetune: layer %d (%s): Q and K share projection parameters (packed QKV is not supported)", ln.layer, n.GetName())
	}
	for _, name := range []string{q.w, q.b, k.w, k.b} {
		if name == "" {
			continue
		}
		seen[name]++
		if seen[name] > 1 || len(ix.Consumers[name]) != 1 {
			return q, k, fmt.Errorf("finetune: layer %d (%s): projection parameter %q has other uses", ln.layer, n.GetName(), name)
		}
	}
	return q, k, nil
}

// splitError is the relative error between heads(x·w + b) and the
// captured [B,H,S,D] value t.
func splitError(x, w, b []float64, t *onnx.Tensor, nb, h, s, d, dm int) float64 {
	if t == nil || fmt.Sprint(t.Shape) != fmt.Sprint([]int{nb, h, s, d}) {
		return math.Inf(1)
	}
	hd := h * d
	proj := make([]float64, nb*s*hd)
	blas64.Implementation().Dgemm(blas.NoTrans, blas.NoTrans, nb*s, hd, dm, 1, x, dm, w, hd, 0, proj, hd)
	want := t.Floats()
	var num, den float64
	for bi := 0; bi < nb; bi++ {
		for hi := 0; hi < h; hi++ {
			for i := 0; i < s; i++ {
				for c := 0; c < d; c++ {
					g := proj[(bi*s+i)*hd+hi*d+c] + b[hi*d+c]
					r := float64(want[((bi*h+hi)*s+i)*d+c])
					num += (g - r) * (g - r)
					den += r * r
				}
			}
		}
	}
	return math.Sqrt(num / math.Max(den, 1e-30))
}

// projectionTensors decodes the weight of pr and its bias (nil when it has
// none) from out's initializers, for the fit of the given layer.
func projectionTensors(out *onnxpb.ModelProto, inits map[string]int, layer int, pr projection) (w, b *onnx.Tensor, err error) {
	if w, err = floatInitializer(out, inits, layer, pr.w); err != nil {
		return nil, nil, err
	}
	if pr.b != "" {
		if b, err = floatInitializer(out, inits, layer, pr.b); err != nil {
			return nil, nil, err
		}
	}
	return w, b, nil
}

// startLayers is what every fit does between finding its nodes and
// fitting them: it captures the targets of nodes on the original model
// and starts the report of op with the row split of those targets' batch
// (opt's defaults already resolved).
func startLayers(original *onnxpb.ModelProto, feed map[string]*onnx.Tensor, nodes []targetNode, opt *Options, op string) (ref map[string]*onnx.Tensor, rep *Report, train, held []int, err error) {
	if ref, err = captureTargets(original, feed, nodes, *opt); err != nil {
		return nil, nil, nil, nil, err
	}
	rep = &Report{Op: op, Steps: opt.Steps, LR: opt.LR}
	if train, held, err = splitFor(opt, rep, targetRows(ref, nodes)); err != nil {
		return nil, nil, nil, nil, err
	}
	return ref, rep, train, held, nil
}

// splitCheck is a captured input of a node (name) and the projection
// heads(x·w + b), of head size d, it must be.
type splitCheck struct {
	name    string
	x, w, b []float64
	d       int
}

// checkCaptured checks that the projections of the fit of ln reproduce
// the values the run captured (got), split into h heads of nb rows of s
// positions from width dm, and that those nb rows are the calibration's
// rows.
func checkCaptured(ln targetNode, got map[string]*onnx.Tensor, checks []splitCheck, nb, h, s, dm, rows int) error {
	n := ln.node
	for _, c := range checks {
		if e := splitError(c.x, c.w, c.b, got[c.name], nb, h, s, c.d, dm); !(e < 1e-3) {
			return fmt.Errorf("finetune: layer %d (%s): %q is not the head split of its projection (relative error %.3g)", ln.layer, n.GetName(), c.name, e)
		}
	}
	if nb != rows {
		return fmt.Errorf("finetune: layer %d (%s): %d batch rows, the calibration has %d", ln.layer, n.GetName(), nb, rows)
	}
	return nil
}

// checkLayerInputs checks that every layer input of a projection holds b
// rows of s positions of width dm: [b,s,dm] or flattened to [b·s,dm].
func checkLayerInputs(xs []*onnx.Tensor, b, s, dm int) error {
	for _, x := range xs {
		if len(x.Shape) < 2 || x.Shape[len(x.Shape)-1] != dm || x.Len() != b*s*dm {
			return fmt.Errorf("layer input %v, want [%d,%d,%d] or [%d,%d]", x.Shape, b, s, dm, b*s, dm)
		}
	}
	return nil
}

// checkBiases checks that every projection bias given (not nil) is a
// float32 vector of n values.
func checkBiases(bs []*onnx.Tensor, n int) error {
	for _, b := range bs {
		if b != nil && (b.DType != onnx.Float || b.Len() != n) {
			return fmt.Errorf("projection bias %v, want [%d]", b.Shape, n)
		}
	}
	return nil
}

// biasValues returns a projection bias in float64 and whether the layer
// has one; a layer without one gets n zeros (fitted, but never stored).
func biasValues(b *onnx.Tensor, n int) ([]float64, bool) {
	if b == nil {
		return make([]float64, n), false
	}
	return f64(b), true
}

// projection is the MatMul (+ Add) that produces a Q, K or V input of a
// converted node: value = split_heads(X·W + Bias).
type projection struct {
	x, w, b string // layer input, weight [Dm, H·D], bias [H·D] ("" if none)
}

// blockProjection returns the projection the role input ("Q", "K", "V")
// of a converted node is computed from: the one convert.Detect proved for
// the original block (pr), or, for a fused core whose projections the
// conversion itself wrote, the one the graph facts of the converted model
// find behind the node's input v. It is checked to be one the fit can
// update in the converted model (indexed by f.Ix, initializers inits): a
// MatMul (or a plain Gemm) by a weight initializer [Dm, H·D], plus a bias
// initializer if any. Whether the head split and any factors between the
// projection and the node's input are the standard ones is checked
// numerically later, against the captured value.
func blockProjection(f *graphfacts.Facts, inits map[string]int, role string, pr *convert.Projection, v string) (projection, error) {
	if pr == nil {
		found, ok := f.ProjectionOf(v)
		if !ok {
			return projection{}, fmt.Errorf("%s (%q) is not computed from a projection X·W (+ b)", role, v)
		}
		pr = &found
	}
	ix := f.Ix
	p := projection{x: pr.Input, w: pr.Weight, b: pr.Bias}
	if _, ok := inits[p.w]; !ok {
		return p, fmt.Errorf("%s projection %s: weight %q is not an initializer", role, pr.Node, p.w)
	}
	if _, ok := inits[p.b]; p.b != "" && !ok {
		return p, fmt.Errorf("%s projection %s: bias %q is not an initializer", role, pr.Node, p.b)
	}
	if pr.Transposed {
		return p, fmt.Errorf("%s projection %s: weight %q is held transposed (Gemm transB=1); only [Dm, H·D] weights can be fitted", role, pr.Node, p.w)
	}
	for _, n := range ix.Consumers[p.w] {
		switch op := n.GetOpType(); {
		case op == "MatMul":
		case op == "Gemm" && onnx.AttrInt(n, "transA", 0) == 0 && onnx.AttrInt(n, "transB", 0) == 0 &&
			onnx.AttrFloat(n, "alpha", 1) == 1 && onnx.AttrFloat(n, "beta", 1) == 1:
		default:
			return p, fmt.Errorf("%s projection: weight %q is read by %s node %s; only MatMul or plain Gemm projections can be fitted", role, p.w, op, n.GetName())
		}
	}
	return p, nil
}
