package kernels

import (
	"math"

	"github.com/linearize/linearize/internal/gemm"
	"github.com/linearize/linearize/onnx"
)

// geluErf is the exact GELU, x·Φ(x), computed in float64.
func geluErf(x float32) float32 {
	v := float64(x)
	return float32(0.5 * v * (1 + math.Erf(v/math.Sqrt2)))
}

// geluTanh is the tanh approximation 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
func geluTanh(x float32) float32 {
	v := float64(x)
	return float32(0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v))))
}

// geluWithBias applies f to input + bias, bias (optional) being 1-D and
// broadcast along the last axis.
func (ctx *Context) geluWithBias(x, bias *onnx.Tensor, f func(float32) float32) ([]*onnx.Tensor, error) {
	xd, err := ctx.floatsOf(x, "input")
	if err != nil {
		return nil, err
	}
	out := make([]float32, len(xd))
	if bias == nil {
		parallelFor(len(xd), ctx.threads(), 1<<14, func(lo, hi int) {
			for i, v := range xd[lo:hi] {
				out[lo+i] = f(v)
			}
		})
		return []*onnx.Tensor{onnx.NewFloat(cloneShape(x.Shape), out)}, nil
	}
	bd, err := ctx.floatsOf(bias, "bias")
	if err != nil {
		return nil, err
	}
	n := len(bd)
	if len(bias.Shape) != 1 || len(x.Shape) == 0 || x.Shape[len(x.Shape)-1] != n {
		return nil, ctx.errf("bias has shape %v, want [%d] matching the last axis of input %v", bias.Shape, n, x.Shape)
	}
	rows := len(xd) / max(n, 1)
	parallelFor(rows, ctx.threads(), max(1, (1<<14)/max(n, 1)), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, or := xd[r*n:(r+1)*n], out[r*n:(r+1)*n]
			for i, v := range xr {
				or[i] = f(v + bd[i])
			}
		}
	})
	return []*onnx.Tensor{onnx.NewFloat(cloneShape(x.Shape), out)}, nil
}

func msGelu(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 1, 1); err != nil {
		return nil, err
	}
	return ctx.geluWithBias(in[0], nil, geluErf)
}

func biasGelu(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 2, 2); err != nil {
		return nil, err
	}
	return ctx.geluWithBias(in[0], in[1], geluErf)
}

func fastGelu(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 1, 2); err != nil {
		return nil, err
	}
	return ctx.geluWithBias(in[0], opt(in, 1), geluTanh)
}

// fusedMatMul computes alpha·op(A)·op(B) with numpy-style batch
// broadcasting; attributes alpha, transA, transB (transBatchA/B are not
// supported and rejected when set).
func fusedMatMul(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 2, 2); err != nil {
		return nil, err
	}
	if ctx.attrInt("transBatchA", 0) != 0 || ctx.attrInt("transBatchB", 0) != 0 {
		return nil, ctx.errf("transBatchA/transBatchB are not supported by the native backend")
	}
	a, err := ctx.floatsOf(in[0], "A")
	if err != nil {
		return nil, err
	}
	b, err := ctx.floatsOf(in[1], "B")
	if err != nil {
		return nil, err
	}
	as, bs := cloneShape(in[0].Shape), cloneShape(in[1].Shape)
	if len(as) < 2 || len(bs) < 2 {
		// 1-D operands follow MatMul: promote, then drop the added axis.
		return nil, ctx.errf("operands must have rank ≥ 2, got %v and %v", as, bs)
	}
	ta, tb := ctx.attrInt("transA", 0) != 0, ctx.attrInt("transB", 0) != 0
	alpha := ctx.attrFloat("alpha", 1)
	ra, ca := as[len(as)-2], as[len(as)-1]
	rb, cb := bs[len(bs)-2], bs[len(bs)-1]
	m, k := ra, ca
	if ta {
		m, k = ca, ra
	}
	k2, n := rb, cb
	if tb {
		k2, n = cb, rb
	}
	if k != k2 {
		return nil, ctx.errf("inner dimensions differ: op(A) is %d×%d, op(B) is %d×%d", m, k, k2, n)
	}
	return batchedGemm(ctx, as[:len(as)-2], bs[:len(bs)-2], a, b, ta, tb, m, n, k, alpha)
}

// batchedGemm multiplies broadcast batches of matrices.
func batchedGemm(ctx *Context, abatch, bbatch []int, a, b []float32, ta, tb bool, m, n, k int, alpha float32) ([]*onnx.Tensor, error) {
	batch, err := broadcastShapes(abatch, bbatch)
	if err != nil {
		return nil, ctx.errf("batch dimensions: %v", err)
	}
	if err := ctx.budget("output", onnx.Float, append(cloneShape(batch), m, n)); err != nil {
		return nil, err
	}
	nb := prod(batch)
	out := make([]float32, nb*m*n)
	sa, sb := bstrides(abatch, batch), bstrides(bbatch, batch)
	lda, ldb := k, n
	if ta {
		lda = m
	}
	if tb {
		ldb = k
	}
	idx := make([]int, len(batch))
	for i := 0; i < nb; i++ {
		oa, ob := 0, 0
		for d := range idx {
			oa += idx[d] * sa[d]
			ob += idx[d] * sb[d]
		}
		gemm.Sgemm(ta, tb, m, n, k, alpha, a[oa*m*k:], lda, b[ob*k*n:], ldb, 0, out[i*m*n:], n, ctx.Threads)
		for d := len(idx) - 1; d >= 0; d-- {
			idx[d]++
			if idx[d] < batch[d] {
				break
			}
			idx[d] = 0
		}
	}
	return []*onnx.Tensor{onnx.NewFloat(append(cloneShape(batch), m, n), out)}, nil
}
