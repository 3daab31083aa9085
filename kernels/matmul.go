package kernels

import (
	"github.com/linearize/linearize/internal/gemm"
	"github.com/linearize/linearize/onnx"
)

// matMul is numpy matmul: 1-D operands are promoted to matrices and the
// added dimension removed; leading (batch) dimensions broadcast.
func matMul(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	a, b, err := ctx.twoInputs(in)
	if err != nil {
		return nil, err
	}
	if a.DType == onnx.Float16 || a.DType == onnx.BFloat16 {
		return viaFloat32(ctx, in, matMul)
	}
	if len(a.Shape) == 0 || len(b.Shape) == 0 {
		return nil, ctx.errf("inputs must have rank ≥ 1, got %v and %v", a.Shape, b.Shape)
	}
	g, err := ctx.matmulShapes(a.Shape, b.Shape)
	if err != nil {
		return nil, err
	}
	out, err := ctx.newTensor(a.DType, g.full)
	if err != nil {
		return nil, err
	}
	nb := prod(g.batch)
	if err := ctx.budgetBytes("batch offsets", int64(nb), 8); err != nil {
		return nil, err
	}
	g.offsets()
	m, n, k, aoff, boff := g.m, g.n, g.k, g.aoff, g.boff
	switch cd := out.Data.(type) {
	case []float32:
		ad, bd := a.Floats(), b.Floats()
		if prod(g.bBatch) == 1 && prod(g.aBatch) == nb {
			// b is one matrix shared by every batch entry of a: one GEMM with
			// the batch folded into the rows.
			gemm.Sgemm(false, false, nb*m, n, k, 1, ad, max(k, 1), bd, max(n, 1), 0, cd, max(n, 1), ctx.threads())
			break
		}
		for i := range nb {
			gemm.Sgemm(false, false, m, n, k, 1, ad[aoff[i]*m*k:], max(k, 1), bd[boff[i]*k*n:], max(n, 1), 0, cd[i*m*n:], max(n, 1), ctx.threads())
		}
	case []float64:
		matmulLoop(cd, a.Data.([]float64), b.Data.([]float64), aoff, boff, m, n, k)
	case []int32:
		matmulLoop(cd, a.Data.([]int32), b.Data.([]int32), aoff, boff, m, n, k)
	case []int64:
		matmulLoop(cd, a.Data.([]int64), b.Data.([]int64), aoff, boff, m, n, k)
	case []uint32:
		matmulLoop(cd, a.Data.([]uint32), b.Data.([]uint32), aoff, boff, m, n, k)
	case []uint64:
		matmulLoop(cd, a.Data.([]uint64), b.Data.([]uint64), aoff, boff, m, n, k)
	default:
		return nil, ctx.errf("unsupported type %s", onnx.TypeName(a.DType))
	}
	out.Shape = g.out
	return []*onnx.Tensor{out}, nil
}

// mmGeom is the geometry of a numpy matmul of A and B: m×k by k×n
// matrices over broadcast batch dimensions.
type mmGeom struct {
	m, n, k        int
	aBatch, bBatch []int // batch dims of A and B (after promoting 1-D operands)
	batch          []int // their broadcast
	full           []int // output shape: batch, m, n
	out            []int // output shape without the dims promotion added
	aoff, boff     []int // matrix index in A and B of each output batch entry (offsets)
}

// matmulShapes checks the shapes a and b (rank ≥ 1) of a matmul's
// operands: 1-D operands are promoted to matrices (a row, b a column),
// the inner dimensions must agree and the batch dimensions broadcast.
func (ctx *Context) matmulShapes(a, b []int) (*mmGeom, error) {
	as, bs := a, b
	if len(as) == 1 {
		as = []int{1, as[0]}
	}
	if len(bs) == 1 {
		bs = []int{bs[0], 1}
	}
	g := &mmGeom{m: as[len(as)-2], k: as[len(as)-1], n: bs[len(bs)-1],
		aBatch: as[:len(as)-2], bBatch: bs[:len(bs)-2]}
	if bs[len(bs)-2] != g.k {
		return nil, ctx.errf("inner dimensions differ: %v × %v", a, b)
	}
	batch, err := broadcastShapes(g.aBatch, g.bBatch)
	if err != nil {
		return nil, ctx.errf("batch dimensions: %v", err)
	}
	g.batch = batch
	g.full = append(cloneShape(batch), g.m, g.n)
	g.out = cloneShape(g.full)
	if len(a) == 1 {
		g.out = append(g.out[:len(g.out)-2], g.n)
	}
	if len(b) == 1 {
		g.out = g.out[:len(g.out)-1]
	}
	return g, nil
}

// offsets sets aoff and boff: for each entry of the broadcast batch, the
// index of the matrix of A and of B it reads.
func (g *mmGeom) offsets() {
	g.aoff, g.boff = batchOffsets(g.aBatch, g.batch), batchOffsets(g.bBatch, g.batch)
}

// batchOffsets returns, for each entry of the broadcast batch, the index
// of the matrix of an operand with batch dims s.
func batchOffsets(s, batch []int) []int {
	st := bstrides(s, batch)
	off := make([]int, prod(batch))
	idx := make([]int, len(batch))
	for i := range off {
		for j, v := range idx {
			off[i] += v * st[j]
		}
		nextIndex(idx, batch)
	}
	return off
}

func (ctx *Context) threads() int {
	if ctx == nil {
		return 1
	}
	return ctx.Threads
}

func matmulLoop[T number](c, a, b []T, aoff, boff []int, m, n, k int) {
	for bi := range aoff {
		ao, bo, co := aoff[bi]*m*k, boff[bi]*k*n, bi*m*n
		for i := range m {
			row := c[co+i*n : co+i*n+n]
			for p := range k {
				av := a[ao+i*k+p]
				brow := b[bo+p*n : bo+p*n+n]
				for j, bv := range brow {
					row[j] += av * bv
				}
			}
		}
	}
}

// gemmOp is Y = alpha·op(A)·op(B) + beta·C with C broadcast to (M, N).
func gemmOp(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 2, 3); err != nil {
		return nil, err
	}
	a, b, c := in[0], in[1], opt(in, 2)
	if a.DType != b.DType || (c != nil && c.DType != a.DType) {
		return nil, ctx.errf("input types differ")
	}
	if a.DType == onnx.Float16 || a.DType == onnx.BFloat16 {
		return viaFloat32(ctx, in, gemmOp)
	}
	if len(a.Shape) != 2 || len(b.Shape) != 2 {
		return nil, ctx.errf("A and B must be matrices, got %v and %v", a.Shape, b.Shape)
	}
	ta, tb := ctx.attrInt("transA", 0) != 0, ctx.attrInt("transB", 0) != 0
	alpha, beta := ctx.attrFloat("alpha", 1), ctx.attrFloat("beta", 1)
	m, k := a.Shape[0], a.Shape[1]
	if ta {
		m, k = k, m
	}
	k2, n := b.Shape[0], b.Shape[1]
	if tb {
		k2, n = n, k2
	}
	if k != k2 {
		return nil, ctx.errf("inner dimensions differ: %v × %v (transA=%v transB=%v)", a.Shape, b.Shape, ta, tb)
	}
	var y *onnx.Tensor
	var err error
	if c != nil && beta != 0 {
		if y, err = broadcastTo(c, []int{m, n}); err != nil {
			return nil, ctx.errf("C: %v", err)
		}
		if y == c {
			y = c.Clone()
		}
	} else {
		if y, err = ctx.newTensor(a.DType, []int{m, n}); err != nil {
			return nil, err
		}
		beta = 0
	}
	switch yd := y.Data.(type) {
	case []float32:
		gemm.Sgemm(ta, tb, m, n, k, alpha, a.Floats(), max(a.Shape[1], 1), b.Floats(), max(b.Shape[1], 1), beta, yd, max(n, 1), ctx.threads())
	case []float64:
		ad, bd := a.Data.([]float64), b.Data.([]float64)
		for i := range m {
			for j := range n {
				var s float64
				for p := range k {
					av, bv := ad[i*k+p], bd[p*n+j]
					if ta {
						av = ad[p*m+i]
					}
					if tb {
						bv = bd[j*k+p]
					}
					s += av * bv
				}
				yd[i*n+j] = float64(alpha)*s + float64(beta)*yd[i*n+j]
			}
		}
	default:
		return nil, ctx.errf("unsupported type %s", onnx.TypeName(a.DType))
	}
	return []*onnx.Tensor{y}, nil
}
