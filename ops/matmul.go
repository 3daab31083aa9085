package ops

import (
	"github.com/linearize/linearize/internal/gemm"
	"github.com/linearize/linearize/onnx"
)

func init() {
	Register("", "MatMul", 1, matMul)
	Register("", "Gemm", 7, gemmOp)
}

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
	as, bs := a.Shape, b.Shape
	if len(as) == 1 {
		as = []int{1, as[0]}
	}
	if len(bs) == 1 {
		bs = []int{bs[0], 1}
	}
	m, k := as[len(as)-2], as[len(as)-1]
	k2, n := bs[len(bs)-2], bs[len(bs)-1]
	if k != k2 {
		return nil, ctx.errf("inner dimensions differ: %v × %v", a.Shape, b.Shape)
	}
	batch, err := broadcastShapes(as[:len(as)-2], bs[:len(bs)-2])
	if err != nil {
		return nil, ctx.errf("batch dimensions: %v", err)
	}
	shape := append(cloneShape(batch), m, n)
	out, err := ctx.newTensor(a.DType, shape)
	if err != nil {
		return nil, err
	}
	// Matrix offsets of each batch entry in a and b.
	sa, sb := bstrides(as[:len(as)-2], batch), bstrides(bs[:len(bs)-2], batch)
	nb := prod(batch)
	if err := ctx.budgetBytes("batch offsets", int64(nb), 8); err != nil {
		return nil, err
	}
	aoff, boff := make([]int, nb), make([]int, nb)
	idx := make([]int, len(batch))
	for i := range nb {
		for j, v := range idx {
			aoff[i] += v * sa[j]
			boff[i] += v * sb[j]
		}
		for j := len(idx) - 1; j >= 0; j-- {
			idx[j]++
			if idx[j] < batch[j] {
				break
			}
			idx[j] = 0
		}
	}
	switch cd := out.Data.(type) {
	case []float32:
		ad, bd := a.Floats(), b.Floats()
		if prod(bs[:len(bs)-2]) == 1 && prod(as[:len(as)-2]) == nb {
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
	// Drop the dimensions 1-D promotion added.
	if len(a.Shape) == 1 {
		shape = append(shape[:len(shape)-2], shape[len(shape)-1])
	}
	if len(b.Shape) == 1 {
		shape = shape[:len(shape)-1]
	}
	out.Shape = shape
	return []*onnx.Tensor{out}, nil
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
