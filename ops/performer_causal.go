package ops

import (
	"fmt"
	"math"

	"github.com/linearize/linearize/kernels"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// # Causal mode (attribute causal=1)
//
// PerformerAttention with causal=1 is Performer's unidirectional mode for
// decoders: query i attends to the valid keys j ≤ i only,
//
//	out_i = φ(q_i)·Σ_{j≤i} φ_i(k_j)v_jᵀ / (max(φ(q_i)·Σ_{j≤i} φ_i(k_j), 0) + epsilon),
//
// and is 0 when no valid key j ≤ i exists. It needs Sq = Sk (self-attention)
// and is defined for the positive kernel with plain FAVOR+ features only:
// centring (center=1) and FAVOR++ use means over every token of the
// sequence, so a query would see statistics of later tokens; the trig
// kernel, the balance and the DERF features are refused too (they have no
// causal body yet).
//
// Stabiliser. The bidirectional op subtracts one maximum over all valid
// keys; for causal attention that maximum would make the outputs depend on
// later tokens through rounding. The causal op uses the running maximum
// instead: with t_j = u_j − h_j + b_j the key logits (one per feature) and
// m_j = max over features of t_j,
//
//	R_i = max_{valid j ≤ i} m_j,   φ_i(k_j) = exp(t_j − R_i) / √M.
//
// R_i cancels in the ratio like the bidirectional maximum (it is one
// constant for every key query i sees), it only reads keys j ≤ i, and it
// keeps every exponent ≤ 0, so nothing overflows and the largest key the
// query sees has a feature equal to 1/√M (epsilon is relative to that
// scale, as in the bidirectional op). The output at position i is
// therefore computed from positions ≤ i only, bit for bit, in the Go
// kernel and in the function body.
//
// Attribute chunk (default 64) is the chunk length C of the function body
// (see PerformerCausalFunction); the result does not depend on it (up to
// rounding), and the Go kernel only checks that it is positive.

// DefaultChunk is the default chunk length of the causal function body.
const DefaultChunk = 64

// MaxChunk bounds the chunk attribute (the body holds [C, C] products per
// chunk).
const MaxChunk = 4096

// checkCausal validates the options of a causal PerformerAttention.
func checkCausal(in PerformerInputs, a PerformerAttrs, kernel PerformerKernel, sq, sk int) error {
	const op = PerformerOp
	if a.Chunk < 0 || a.Chunk > MaxChunk {
		return fmt.Errorf("ops: %s: chunk %d must be in 1..%d", op, a.Chunk, MaxChunk)
	}
	if kernel != KernelPositive {
		return fmt.Errorf("ops: %s: causal=1 needs the %q kernel, not %q", op, KernelPositive, kernel)
	}
	if a.Center {
		return fmt.Errorf("ops: %s: causal=1 cannot be combined with center=1: centring uses the means over all tokens, so a query would see later tokens", op)
	}
	if f := a.Features; f != "" && f != FeaturesFavorPlus {
		if f == FeaturesFavorPP {
			return fmt.Errorf("ops: %s: causal=1 cannot be combined with features %q: its parameter A comes from statistics over all tokens, so a query would see later tokens; use features %q", op, f, FeaturesFavorPlus)
		}
		return fmt.Errorf("ops: %s: causal=1 supports features %q only, not %q", op, FeaturesFavorPlus, f)
	}
	if in.BalanceQ != nil || in.BalanceK != nil || in.DerfA != nil {
		return fmt.Errorf("ops: %s: causal=1 takes no balance_q, balance_k or derf_a inputs", op)
	}
	if sq != sk {
		return fmt.Errorf("ops: %s: causal=1 needs as many queries as keys (self-attention), got %d and %d", op, sq, sk)
	}
	return nil
}

// performerCausal computes the causal op for checked inputs: per (batch,
// head) a prefix sum over the keys in float64, kept at the scale of the
// running maximum (rescaled when it grows).
func performerCausal(in PerformerInputs, mask *keyMask, b, h, s, d, dv, m, ho int, scale, eps float32, threads int) *onnx.Tensor {
	out := make([]float32, b*h*s*dv)
	qd, kd, vd, od := in.Q.Floats(), in.K.Floats(), in.V.Floats(), in.Omega.Floats()
	rs := float32(math.Sqrt(float64(scale)))
	invSqrtM := float32(1 / math.Sqrt(float64(m)))
	kernels.Parallel(b*h, threads, func(bh int) {
		bi, hi := bh/h, bh%h
		om := od
		if ho > 1 {
			om = od[hi*m*d : (hi+1)*m*d]
		}
		qs := qd[bh*s*d : (bh+1)*s*d]
		ks := kd[bh*s*d : (bh+1)*s*d]
		vs := vd[bh*s*dv : (bh+1)*s*dv]
		// Query features exp(u − max u)/√M, as in the bidirectional op.
		phiQ := features(qs, s, d, om, m, rs, KernelPositive, false, mask, bi, invSqrtM)
		kv := make([]float64, m*dv) // Σ exp(t_j − R)·v_j over the keys so far
		z := make([]float64, m)     // Σ exp(t_j − R)
		t := make([]float64, m)
		acc := make([]float64, dv)
		R := math.Inf(-1)
		o := out[bh*s*dv : (bh+1)*s*dv]
		for j := 0; j < s; j++ {
			if bv, ok := mask.at(bi, j); ok {
				top := keyLogits(ks[j*d:(j+1)*d], om, m, d, rs, bv, t)
				R = raiseMax(R, top, kv, z)
				vr := vs[j*dv : (j+1)*dv]
				for f := 0; f < m; f++ {
					e := math.Exp(t[f] - R)
					z[f] += e
					row := kv[f*dv : (f+1)*dv]
					for c, x := range vr {
						row[c] += e * float64(x)
					}
				}
			}
			// Query j: φ(q)·state/√M (the state's features lack 1/√M).
			pq := phiQ[j*m : (j+1)*m]
			var den float64
			num := o[j*dv : (j+1)*dv]
			clear(acc)
			for f, x := range pq {
				if x == 0 {
					continue
				}
				xf := float64(x)
				den += xf * z[f]
				row := kv[f*dv : (f+1)*dv]
				for c := range acc {
					acc[c] += xf * row[c]
				}
			}
			// pq carries 1/√M; the state's 1/√M is applied here.
			den = max(den*float64(invSqrtM), 0) + float64(eps)
			for c := range acc {
				num[c] = float32(acc[c] * float64(invSqrtM) / den)
			}
		}
	})
	return onnx.NewFloat([]int{b, h, s, dv}, out)
}

// PerformerCausalFunction returns the FunctionProto that defines causal
// PerformerAttention (positive kernel, FAVOR+ features) at opset (11..23)
// with chunk length chunk (0: DefaultChunk). Its inputs are Q, K, V,
// Omega, key_bias and its attributes scale, kernel, causal, chunk (the
// last three select this body and are ignored by it) and epsilon (default
// 1e-6).
//
// The sequence is padded to nc·C positions and split into nc chunks of C.
// Memory stays linear in the length: the largest tensors are the [.., S, M]
// features, the [nc, C, C] products inside the chunks and the per-chunk
// sums [nc, M, Dv+1]; there is no [S, M, Dv] tensor. With φ̂(k_j) =
// exp(t_j − m_j) (each key stabilised by its own maximum m_j) and R_i the
// running maximum of m_j over valid j ≤ i:
//
//   - inside a chunk, the exact masked product
//     Σ_{j ≤ i in the chunk} (φ(q_i)·φ̂(k_j))·exp(m_j − R_i)·[v_j, 1]
//     on [C, C] (lower-triangular mask);
//   - across chunks, the per-chunk sums S_c = Σ_{j∈c} exp(m_j − M_c)·
//     φ̂(k_j)ᵀ[v_j, 1] (M_c the chunk's maximum) are brought to one scale
//     as S_c·exp(M_c) in float64 (whose range, e^±708, holds any realistic
//     logit), summed by an exclusive CumSum over the chunk axis, and
//     returned to float32 at the scale of P_c, the maximum over the
//     previous chunks; query i adds φ(q_i)·state_c·exp(P_c − R_i).
//
// R_i and P_c come from masked maxima on [C, C] and [nc, nc] (the latter
// is tiny: nc = S/C). Every term for query i reads positions ≤ i only.
// Logits beyond ±700 (absurd key biases or norms) are clamped in the
// float64 step; the body stays finite.
func PerformerCausalFunction(chunk int, opset int64) (*onnxpb.FunctionProto, error) {
	const op = PerformerOp
	if chunk == 0 {
		chunk = DefaultChunk
	}
	if chunk < 1 || chunk > MaxChunk {
		return nil, fmt.Errorf("ops: %s function: chunk %d must be in 1..%d", op, chunk, MaxChunk)
	}
	b, err := newFnBuilder(op, opset)
	if err != nil {
		return nil, err
	}
	C := int64(chunk)
	i64 := func(v int64) string { // int64 scalar
		return b.op("Constant", nil, attrTensor("value", onnx.NewInt64(nil, []int64{v})))
	}
	toF := func(x string) string { return b.op("Cast", []string{x}, attrInt("to", int64(onnx.Float))) }
	toD := func(x string) string { return b.op("Cast", []string{x}, attrInt("to", int64(onnx.Double))) }
	negBig := b.constFloat(-1e30)

	scale := b.constFloatAttr("scale")
	rs := b.op("Sqrt", []string{scale})
	eps := b.constFloatAttr("epsilon")
	mdim := b.op("Slice", []string{b.op("Shape", []string{"Omega"}), b.constInts(1), b.constInts(2)})
	epsM := b.op("Mul", []string{eps, toF(mdim)})
	omegaST := b.transpose(b.op("Mul", []string{"Omega", rs}), 0, 2, 1) // [H',D,M]·√scale
	halfScale := b.op("Mul", []string{scale, b.constFloat(0.5)})

	// Lengths: S, nc = ⌈S/C⌉, pad = nc·C − S.
	sLen := b.op("Gather", []string{b.op("Shape", []string{"Q"}), i64(2)}, attrInt("axis", 0)) // scalar
	nc := b.op("Div", []string{b.op("Add", []string{sLen, i64(C - 1)}), i64(C)})
	pad := b.op("Sub", []string{b.op("Mul", []string{nc, i64(C)}), sLen})
	one1 := func(x string) string { return b.op("Reshape", []string{x, b.constInts(1)}) } // scalar → [1]
	nc1, pad1, s1 := one1(nc), one1(pad), one1(sLen)
	padSeq := b.op("Concat", []string{b.constInts(0, 0, 0, 0, 0, 0), pad1, b.constInts(0)}, attrInt("axis", 0))
	qp := b.op("Pad", []string{"Q", padSeq})
	kp := b.op("Pad", []string{"K", padSeq})
	vp := b.op("Pad", []string{"V", padSeq})
	// Key bias [B',1,1,S] with the padding positions masked; padded keys
	// (and the chunk padding) get −1e30 in place of their bias, so they
	// never set a maximum, and zero rows of [V, 1].
	kb := b.op("Expand", []string{"key_bias", b.op("Concat", []string{b.constInts(1, 1, 1), s1}, attrInt("axis", 0))})
	padKey := b.op("Concat", []string{b.constInts(0, 0, 0, 0, 0, 0, 0), pad1}, attrInt("axis", 0))
	kb = b.op("Pad", []string{kb, padKey, negBig})
	valid := b.op("Greater", []string{kb, b.constFloat(maskThreshold)})
	safe := b.transpose(b.op("Where", []string{valid, kb, negBig}), 0, 1, 3, 2) // [B',1,Sp,1]
	validT := b.transpose(valid, 0, 1, 3, 2)

	// Features: φ(q) = exp(u − max u), φ̂(k) = exp(t − m), m = max_f t.
	uq := b.op("MatMul", []string{qp, omegaST}) // [B,H,Sp,M]
	phiQ := b.op("Exp", []string{b.op("Sub", []string{uq, b.reduce("ReduceMax", uq, 3)})})
	hk := b.op("Mul", []string{b.reduce("ReduceSum", b.op("Mul", []string{kp, kp}), 3), halfScale}) // [B,H,Sp,1]
	tk := b.op("Sub", []string{b.op("MatMul", []string{kp, omegaST}), b.op("Sub", []string{hk, safe})})
	mk := b.reduce("ReduceMax", tk, 3) // [B,H,Sp,1]
	phiK := b.op("Exp", []string{b.op("Sub", []string{tk, mk})})
	v1 := b.op("Concat", []string{vp, b.op("ConstantOfShape", []string{b.op("Concat", []string{b.op("Slice", []string{b.op("Shape", []string{vp}), b.constInts(0), b.constInts(3)}), b.constInts(1)}, attrInt("axis", 0))},
		attrTensor("value", onnx.NewFloat([]int{1}, []float32{1})))}, attrInt("axis", 3))
	v1 = b.op("Mul", []string{v1, toF(validT)}) // [B,H,Sp,Dv+1]

	// Chunks: [B,H,nc,C,·].
	chunked := b.op("Concat", []string{b.constInts(0, 0), nc1, b.constInts(C, -1)}, attrInt("axis", 0))
	cq := b.op("Reshape", []string{phiQ, chunked})
	ck := b.op("Reshape", []string{phiK, chunked})
	cm := b.op("Reshape", []string{mk, chunked}) // [B,H,nc,C,1]
	cv := b.op("Reshape", []string{v1, chunked})
	ckT := b.transpose(ck, 0, 1, 2, 4, 3) // [B,H,nc,M,C]
	cmT := b.transpose(cm, 0, 1, 2, 4, 3) // [B,H,nc,1,C]

	// Masks: lower[i][j] = j ≤ i on [C,C]; before[c][c'] = c' < c on [nc,nc].
	idx := func(n string) (rows, cols string) {
		r := b.op("Range", []string{i64(0), n, i64(1)})
		return b.op("Reshape", []string{r, b.constInts(-1, 1)}), b.op("Reshape", []string{r, b.constInts(1, -1)})
	}
	rowsC, colsC := idx(i64(C))
	lower := b.op("Not", []string{b.op("Greater", []string{colsC, rowsC})})
	rowsN, colsN := idx(nc)
	before := b.op("Less", []string{colsN, rowsN})

	// Running maxima: inside the chunk, then over the previous chunks.
	rin := b.reduce("ReduceMax", b.op("Where", []string{lower, cmT, negBig}), 4) // [B,H,nc,C,1]
	mc := b.reduce("ReduceMax", cm, 3)                                           // [B,H,nc,1,1]
	mcRow := b.op("Reshape", []string{mc, b.constInts(0, 0, 1, -1)})             // [B,H,1,nc]
	prev := b.reduce("ReduceMax", b.op("Where", []string{before, mcRow, negBig}), 3)
	prev = b.op("Reshape", []string{prev, b.constInts(0, 0, -1, 1, 1)}) // [B,H,nc,1,1]
	R := b.op("Max", []string{prev, rin})                               // [B,H,nc,C,1]

	// Inside the chunks: (φ(Q)·φ̂(K)ᵀ ⊙ exp(m_j − R_i) masked)·[V, 1].
	scores := b.op("MatMul", []string{cq, ckT}) // [B,H,nc,C,C]
	w := b.op("Exp", []string{b.op("Where", []string{lower, b.op("Sub", []string{cmT, R}), negBig})})
	intra := b.op("MatMul", []string{b.op("Mul", []string{scores, w}), cv}) // [B,H,nc,C,Dv+1]

	// Across chunks: exclusive prefix sums of the chunk sums (float64).
	wk := b.op("Exp", []string{b.op("Sub", []string{cm, mc})})           // [B,H,nc,C,1]
	sums := b.op("MatMul", []string{ckT, b.op("Mul", []string{cv, wk})}) // [B,H,nc,M,Dv+1]
	up := b.op("Exp", []string{toD(b.op("Min", []string{mc, b.constFloat(700)}))})
	cum := b.op("CumSum", []string{b.op("Mul", []string{toD(sums), up}), i64(2)}, attrInt("exclusive", 1))
	pt := b.op("Max", []string{prev, b.constFloat(-700)})
	down := b.op("Exp", []string{b.op("Neg", []string{toD(pt)})})
	state := toF(b.op("Mul", []string{cum, down})) // [B,H,nc,M,Dv+1] at scale P_c
	fac := b.op("Exp", []string{b.op("Min", []string{b.op("Sub", []string{pt, R}), b.constFloat(0)})})
	inter := b.op("Mul", []string{b.op("MatMul", []string{cq, state}), fac})

	nd := b.op("Reshape", []string{b.op("Add", []string{intra, inter}), b.op("Shape", []string{v1})}) // [B,H,Sp,Dv+1]
	nd = b.op("Slice", []string{nd, b.constInts(0), s1, b.constInts(2)})
	num := b.op("Slice", []string{nd, b.constInts(0), b.constInts(-1), b.constInts(-1)})
	den := b.op("Slice", []string{nd, b.constInts(-1), b.constInts(math.MaxInt64), b.constInts(-1)})
	den = b.op("Add", []string{b.op("Relu", []string{den}), epsM})
	b.op("Div", []string{num, den})
	b.rename("out")
	doc := fmt.Sprintf("%s kernel=%s causal=1 chunk=%d", performerDoc, KernelPositive, chunk)
	return performerSchema.function(b, doc, 5), nil
}

// keyLogits writes the causal op's logits of one key, t_f = ω_f·k̃ −
// ‖k̃‖²/2 + b with k̃ = rs·k, into t (m values) and returns their maximum.
func keyLogits(k, om []float32, m, d int, rs, b float32, t []float64) float64 {
	var hh float64
	for _, x := range k {
		x *= rs
		hh += float64(x) * float64(x)
	}
	top := math.Inf(-1)
	for f := 0; f < m; f++ {
		var u float64
		for c, w := range om[f*d : (f+1)*d] {
			u += float64(w) * float64(k[c]*rs)
		}
		t[f] = u - hh/2 + float64(b)
		top = math.Max(top, t[f])
	}
	return top
}

// raiseMax returns the running maximum after a key whose largest logit is
// top: when top exceeds R, every sum accumulated against R is rescaled to
// the new maximum.
func raiseMax(R, top float64, sums ...[]float64) float64 {
	if top <= R {
		return R
	}
	if !math.IsInf(R, -1) {
		g := math.Exp(R - top)
		for _, s := range sums {
			for i := range s {
				s[i] *= g
			}
		}
	}
	return top
}
