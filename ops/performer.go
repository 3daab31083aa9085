package ops

import (
	"fmt"
	"math"

	"github.com/linearize/linearize/internal/gemm"
	"github.com/linearize/linearize/kernels"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// PerformerAttention (domain ai.linearize, version 1) approximates softmax
// attention with random features (FAVOR+ and its sharper relatives).
//
// Inputs: Q [B,H,Sq,D], K [B,H,Sk,D], V [B,H,Sk,Dv], Omega [H or 1,M,D],
// key_bias [B or 1,1,1,Sk or 1] (optional in the Go kernel, always passed to
// the function body; see linear_function.go), and optionally
// balance_q, balance_k [H or 1,D,D] (both or neither) and derf_a
// [H or 1,1,D] (only with features "sderf"/"aderf"). Output [B,H,Sq,Dv].
//
// With x̃ = x·√scale, u = Omega·x̃ and h = ‖x̃‖²/2, the positive kernel
// estimates softmax attention with the features f(q) = exp(u − h),
// f(k) = exp(u − h + b) (zero for masked keys):
//
//	out_i = Σ_j κ_ij v_j / Σ_j κ_ij,  κ_ij = Σ_r f(q_i)_r f(k_j)_r,
//
// the ratio itself, with no epsilon: positive features make every
// denominator positive, and both the kernel and the function body compute
// the ratio in a form where it cannot underflow (below). A row whose batch
// has no valid key is 0. The trig kernel uses 2M features
//
//	φ(q) = [cos u, sin u] / √M
//	φ(k) = [cos u, sin u]·exp(h + b − max_{valid keys}(h + b)) / √M
//
// (the query factor exp(h) of the trig estimator is constant per row and
// cancels) and out = φ(Q)·(φ(K)ᵀV) / (max(φ(Q)·φ(K)ᵀ1, 0) + epsilon):
// epsilon is relative to the largest key weight (1 after the key
// maximum), and the max(·, 0) keeps the trig estimator's negative
// denominators from producing infinities. With causal=1 (and chunk) query
// i sees the keys j ≤ i only: see performer_causal.go; the causal op keeps
// the earlier stabilisation (query row maximum, running key maximum over
// keys and features, 1/√M) and out = φ(Q)·(φ(K)ᵀV) / (max(φ(Q)·φ(K)ᵀ1,
// 0) + epsilon), so its rows can still collapse at large norms. Keys with
// bias ≤ −1e4 (or −Inf, or NaN) have f(k) = 0 exactly. (FAVOR+'s 1/√M on
// each feature, and any constant per query row or per (batch, head), cancel
// in the positive kernel's ratio.)
//
// # The denominator (positive kernel)
//
// The estimator is computed as a mixture: with key logits t_jr = log
// f(k_j)_r and query logits ℓ_ir = log f(q_i)_r,
//
//	out_i = Σ_r α_ir μ_r,  α_i = softmax_r(ℓ_ir + L_r),  L_r = log Σ_j e^{t_jr},
//	μ_r = Σ_j e^{t_jr − L_r} v_j,
//
// which is the ratio above exactly. Every key column is stabilised by its
// own maximum over the keys (so each Σ_j e^{t_jr − max_j t_jr} ≥ 1) and
// every query row by the softmax, so the denominator is 1 by construction:
// no row collapses however large the norms (an earlier form, with one key
// maximum over all keys and features and an absolute epsilon = 1e-6,
// collapsed most rows to near zero at norms ×10 because their
// denominators fell below epsilon). The only guard left is against an
// exact zero, the batch without valid keys. The epsilon attribute is kept
// for the trig kernel and the causal op and does not change the positive
// kernel's output. PerformerGuardedRows counts, for a node's inputs, the
// rows the guard decides (infer.ValidateOps reports them).
//
// # Exact transformations (positive kernel)
//
// Softmax attention softmax_j(q̃_i·k̃_j + b_j) is unchanged by three
// transformations (key centring, query centring, a linear balance) that make the random-feature estimator far more
// accurate on pretrained models, whose queries and keys share large mean
// components and have very different spreads. Per (batch, head), over the
// valid tokens (bias > −1e4; queries use the same mask when Sq = Sk, and
// all count otherwise, as in cross-attention):
//
//   - center=1: k' = k̃ − mean(k̃) (one vector added to every key adds a
//     constant to each query's scores, which the softmax removes), and
//     q' = q̃ − q̄ with q̄ = mean(q̃): q̃·k' = q'·k' + q̄·k', and the second
//     term is a per-key bias, added to b_j (per-key biases are exact
//     under random features, like the mask);
//   - balance_q = T, balance_k = T⁻ᵀ: q' → q'·T, k' → k'·T⁻ᵀ (row vectors)
//     leave every q'·k' unchanged; the kernel checks T·balance_kᵀ = I.
//     T is frozen at conversion (fitted on calibration text by package
//     features: it minimises the mean of ‖x + y‖² over query–key pairs,
//     the exponent of FAVOR+'s relative variance).
//
// # Feature maps (attribute features, positive kernel)
//
// All are positive random features f(ω, x) with E_ω[f(ω, x)·f(ω, y)] =
// exp(x·y) for ω ~ N(0, I_D); with x, y the transformed scaled query and key,
// logits ℓ(x) = ω̂_r·x + β_r (queries) and ω̂_r·y + β_r − ‖y‖²/2 + b'_j
// (keys) are stabilised like u − h above (constants per row or per
// (batch, head), such as −‖x‖²/2 of a query or the normalisers C, cancel):
//
//   - "favor+" (default): ω̂ = ω, β = 0 (Performer's FAVOR+).
//   - "favor++": the optimal positive random features of "Chefs' Random
//     Tables" (Likhosherstov et al., NeurIPS 2022), f = C·exp(A‖ω‖² +
//     √(1−4A)·ω·x − ‖x‖²/2) with C = (1−4A)^{D/4}: ω̂ = √(1−4A)·ω, β = A‖ω‖²,
//     A = (1 − 2ρ − √((2ρ+1)² + 8ρ))/16 minimising the mean log second
//     moment for ρ = mean over valid (query, key) pairs of ‖x + y‖²/D. ρ is
//     computed at run time per (batch, head): it costs O(S·D) (the mean
//     squared norms of x and y and their means), it adapts A to each
//     sequence (a 512-token document and a short sentence have different
//     statistics), and it keeps padding invariance because it uses the
//     valid tokens only.
//   - "sderf" / "aderf": the dense-exponential random features of FAVOR#
//     (Likhosherstov et al., 2023) in the basis the balance defines,
//     f = C·exp(Σ_c a_c ω_c² + Σ_c √(1−4a_c)·ω_c x_c − ‖x‖²/2) with
//     C = Π(1−4a_c)^{1/4}: ω̂ = ω ⊙ √(1−4a), β_r = Σ_c a_c ω_rc², a = derf_a
//     (every a_c < 1/4). A per-coordinate A is only worth having in a basis
//     fitted to the data, so both need balance_q/balance_k: symmetric DERF
//     (sderf) uses one rotation for queries and keys (balance_q =
//     balance_k, orthogonal), asymmetric DERF (aderf) any T. derf_a and T
//     are frozen at conversion from calibration statistics (the
//     attention-weighted pair moments are not computable at run time).
const performerDoc = "PerformerAttention: FAVOR+ linear attention (see github.com/linearize/linearize/ops)."

// PerformerKernel is the Performer's softmax-kernel estimator (attribute kernel).
type PerformerKernel string

// Performer kernels.
const (
	KernelPositive PerformerKernel = "positive" // exp features (FAVOR+ and its variants)
	KernelTrig     PerformerKernel = "trig"     // sin/cos features
)

// FeatureMap is the positive kernel's feature map (attribute features).
type FeatureMap string

// Feature maps of the positive kernel.
const (
	FeaturesFavorPlus FeatureMap = "favor+"  // FAVOR+
	FeaturesFavorPP   FeatureMap = "favor++" // optimal positive features, A per sequence
	FeaturesSDERF     FeatureMap = "sderf"   // FAVOR# symmetric dense-exponential
	FeaturesADERF     FeatureMap = "aderf"   // FAVOR# asymmetric dense-exponential
)

// PerformerAttrs are the attributes of PerformerAttention. Zero values
// select the defaults: Scale 1/√D, Kernel "positive", Epsilon 1e-6,
// Center false (attribute center=0), Features "favor+".
type PerformerAttrs struct {
	Scale    float32
	Kernel   PerformerKernel
	Epsilon  float32
	Center   bool
	Features FeatureMap
	// Causal selects the unidirectional mode (attribute causal=1; see
	// performer_causal.go) and Chunk the chunk length of its function
	// body (attribute chunk, 0: DefaultChunk).
	Causal bool
	Chunk  int
	// Threads bounds the goroutines the Go kernel uses (not an attribute).
	Threads int
}

// PerformerInputs are the inputs of PerformerAttention. Bias, BalanceQ,
// BalanceK and DerfA may be nil.
type PerformerInputs struct {
	Q, K, V, Omega, Bias *onnx.Tensor
	// BalanceQ = T and BalanceK = T⁻ᵀ, [H or 1, D, D]: queries become q·T
	// and keys k·T⁻ᵀ (row vectors).
	BalanceQ, BalanceK *onnx.Tensor
	// DerfA holds the per-coordinate DERF parameters a, [H or 1, 1, D].
	DerfA *onnx.Tensor
}

const defaultEpsilon = 1e-6

// performerSchema is PerformerAttention's schema.
var performerSchema = newSchema(OpSchema{
	Op: PerformerOp, Doc: performerDoc, File: "ops/performer.go",
	Inputs: qkvInputs(crossQKV,
		InputSchema{Name: "Omega", Doc: "random features ω [H or 1,M,D], frozen at conversion"},
		keyBiasInput,
		InputSchema{Name: "balance_q", Optional: true, Doc: "T [H or 1,D,D]: queries become q·T (with balance_k)"},
		InputSchema{Name: "balance_k", Optional: true, Doc: "T⁻ᵀ [H or 1,D,D]: keys become k·T⁻ᵀ (with balance_q)"},
		InputSchema{Name: "derf_a", Optional: true, Doc: "DERF parameters a [H or 1,1,D], each below 1/4 (features sderf and aderf)"},
	),
	Output: "[B,H,Sq,Dv]",
}, func(a *PerformerAttrs) *int { return &a.Threads },
	scaleField(scaleDoc, func(a *PerformerAttrs) *float32 { return &a.Scale }),
	zeroIsDefault(stringField(AttrSchema{Name: "kernel", Default: string(KernelPositive), Values: []string{string(KernelPositive), string(KernelTrig)},
		Doc: "softmax-kernel estimator: positive (exp features) or trig (sin/cos)"}, func(a *PerformerAttrs) *PerformerKernel { return &a.Kernel })),
	zeroIsDefault(floatField(AttrSchema{Name: "epsilon", Default: float32(defaultEpsilon),
		Doc: "denominator guard of the trig kernel and the causal op (unused by the positive kernel)"}, func(a *PerformerAttrs) *float32 { return &a.Epsilon })),
	flagField(AttrSchema{Name: "center", Doc: "centre queries and keys over the valid tokens (exact)"}, func(a *PerformerAttrs) *bool { return &a.Center }),
	zeroIsDefault(stringField(AttrSchema{Name: "features", Default: string(FeaturesFavorPlus),
		Values: []string{string(FeaturesFavorPlus), string(FeaturesFavorPP), string(FeaturesSDERF), string(FeaturesADERF)},
		Doc:    "positive kernel's feature map"}, func(a *PerformerAttrs) *FeatureMap { return &a.Features })),
	flagField(AttrSchema{Name: "causal", Doc: "query i sees keys j ≤ i (prefix sums)"}, func(a *PerformerAttrs) *bool { return &a.Causal }),
	zeroIsDefault(intField(AttrSchema{Name: "chunk", Default: int64(DefaultChunk), Min: 1, Max: MaxChunk,
		Doc: "chunk length of the causal function body"}, func(a *PerformerAttrs) *int { return &a.Chunk })),
)

// balanceTol bounds |balance_q·balance_kᵀ − I| (and, for sderf,
// |balance_q − balance_k|): far above float32 rounding of a fitted T and
// its inverse, far below any mistake in wiring them.
const balanceTol = 1e-3

func init() {
	performerSchema.register(func(a PerformerAttrs, in []*onnx.Tensor) (*onnx.Tensor, error) {
		return PerformerWith(performerInputs(in), a)
	})
}

// performerInputs names a node's inputs, padded to every input.
func performerInputs(in []*onnx.Tensor) PerformerInputs {
	return PerformerInputs{Q: in[0], K: in[1], V: in[2], Omega: in[3], Bias: in[4], BalanceQ: in[5], BalanceK: in[6], DerfA: in[7]}
}

// performerCall reads a node's inputs and attributes.
func performerCall(ctx *kernels.Context, in []*onnx.Tensor) (PerformerInputs, PerformerAttrs, error) {
	a, in, err := performerSchema.call(ctx, in)
	if err != nil {
		return PerformerInputs{}, a, err
	}
	return performerInputs(in), a, nil
}

// Performer computes PerformerAttention in float32 (see the op's
// definition above) without balance or DERF parameters. bias may be nil.
func Performer(q, k, v, omega, bias *onnx.Tensor, a PerformerAttrs) (*onnx.Tensor, error) {
	return PerformerWith(PerformerInputs{Q: q, K: k, V: v, Omega: omega, Bias: bias}, a)
}

// performerPlan is a checked call of the op.
type performerPlan struct {
	in                     PerformerInputs
	a                      PerformerAttrs
	b, h, sq, sk, d, dv, m int
	ho                     int // Omega's head extent
	mask                   *keyMask
	eps, scale             float32
	gen                    *variant // the positive kernel (non-causal), nil otherwise
}

// planPerformer validates the inputs and attributes.
func planPerformer(in PerformerInputs, a PerformerAttrs) (*performerPlan, error) {
	const op = PerformerOp
	q, k, v, omega := in.Q, in.K, in.V, in.Omega
	b, h, sq, sk, d, dv, err := attnDims(op, q, k, v)
	if err != nil {
		return nil, err
	}
	if omega == nil || omega.DType != onnx.Float || len(omega.Shape) != 3 {
		return nil, fmt.Errorf("ops: %s: Omega must be float32 [H or 1, M, D], got %v", op, omega)
	}
	ho, m := omega.Shape[0], omega.Shape[1]
	if (ho != 1 && ho != h) || omega.Shape[2] != d || m < 1 || len(omega.Floats()) != omega.Len() {
		return nil, fmt.Errorf("ops: %s: Omega shape %v, want [%d or 1, M ≥ 1, %d]", op, omega.Shape, h, d)
	}
	// Features are [S, M] (trig: [S, 2M]) per head, φ(K)ᵀV is [2M, Dv].
	if !fits(2, m, max(sq, sk, dv)) {
		return nil, fmt.Errorf("ops: %s: features of %d tokens × %d would exceed %d elements", op, max(sq, sk, dv), 2*m, kernels.MaxElements)
	}
	mask, err := newKeyMask(op, in.Bias, b, sk)
	if err != nil {
		return nil, err
	}
	kernel := a.Kernel
	if kernel == "" {
		kernel = KernelPositive
	}
	if kernel != KernelPositive && kernel != KernelTrig {
		return nil, fmt.Errorf("ops: %s: kernel %q, want %q or %q", op, kernel, KernelPositive, KernelTrig)
	}
	eps := a.Epsilon
	if eps == 0 {
		eps = defaultEpsilon
	}
	if !(eps > 0) || math.IsInf(float64(eps), 0) {
		return nil, fmt.Errorf("ops: %s: epsilon %g must be positive and finite", op, eps)
	}
	scale := resolveScale(a.Scale, d)
	if !(scale > 0) || math.IsInf(float64(scale), 0) {
		return nil, fmt.Errorf("ops: %s: scale %g must be positive and finite", op, scale)
	}
	p := &performerPlan{in: in, a: a, b: b, h: h, sq: sq, sk: sk, d: d, dv: dv, m: m, ho: ho, mask: mask, eps: eps, scale: scale}
	if a.Causal {
		if err := checkCausal(in, a, kernel, sq, sk); err != nil {
			return nil, err
		}
		return p, nil
	}
	p.gen, err = checkVariant(in, a, kernel, h, sq, sk, d, mask)
	if err != nil {
		return nil, err
	}
	if p.gen == nil && kernel == KernelPositive {
		p.gen = &variant{features: FeaturesFavorPlus}
	}
	return p, nil
}

// PerformerWith computes PerformerAttention in float32 from all its inputs.
func PerformerWith(in PerformerInputs, a PerformerAttrs) (*onnx.Tensor, error) {
	p, err := planPerformer(in, a)
	if err != nil {
		return nil, err
	}
	b, h, sq, sk, d, dv, m, ho := p.b, p.h, p.sq, p.sk, p.d, p.dv, p.m, p.ho
	if a.Causal {
		return performerCausal(in, p.mask, b, h, sq, d, dv, m, ho, p.scale, p.eps, a.Threads), nil
	}
	if p.gen != nil {
		return p.gen.run(in, p.mask, b, h, sq, sk, d, dv, m, ho, p.scale, a.Threads), nil
	}
	// The trig kernel.
	out := make([]float32, b*h*sq*dv)
	vd := in.V.Floats()
	kernels.Parallel(b*h, a.Threads, func(bh int) {
		phiQ, phiK := p.trigFeatures(bh)
		attend(phiQ, phiK, vd[bh*sk*dv:(bh+1)*sk*dv], sq, sk, 2*m, dv, p.eps, out[bh*sq*dv:(bh+1)*sq*dv])
	})
	return onnx.NewFloat([]int{b, h, sq, dv}, out), nil
}

// omega returns Omega of head hi, [m, d].
func (p *performerPlan) omega(hi int) []float32 {
	od := p.in.Omega.Floats()
	if p.ho > 1 {
		return od[hi*p.m*p.d : (hi+1)*p.m*p.d]
	}
	return od
}

// trigFeatures returns the trig kernel's φ(Q) [sq, 2m] and φ(K) [sk, 2m]
// of one (batch, head).
func (p *performerPlan) trigFeatures(bh int) (phiQ, phiK []float32) {
	bi, hi := bh/p.h, bh%p.h
	sq, sk, d, m := p.sq, p.sk, p.d, p.m
	rs := float32(math.Sqrt(float64(p.scale)))
	invSqrtM := float32(1 / math.Sqrt(float64(m)))
	om := p.omega(hi)
	qs := p.in.Q.Floats()[bh*sq*d : (bh+1)*sq*d]
	ks := p.in.K.Floats()[bh*sk*d : (bh+1)*sk*d]
	phiQ = features(qs, sq, d, om, m, rs, KernelTrig, false, p.mask, bi, invSqrtM)
	phiK = features(ks, sk, d, om, m, rs, KernelTrig, true, p.mask, bi, invSqrtM)
	return phiQ, phiK
}

// PerformerAttention guards rows (GuardedRows).
var _ = registerGuard(PerformerOp, PerformerGuardedRows)

// PerformerGuardedRows recomputes the denominators of a PerformerAttention
// call (ctx carries the node, in its inputs, as for the kernel) and
// counts the output rows the guard decides rather than the estimator:
//
//   - positive kernel: rows whose batch has no valid key (the estimator
//     is undefined there and the op returns 0); the mixture form keeps
//     every other denominator exact, so none underflows;
//   - trig kernel: rows with max(den, 0) < epsilon, den = φ(q)·φ(K)ᵀ1 in
//     the op's units (epsilon then at least halves the row, or the
//     estimate is not positive at all);
//   - causal op: rows with den < epsilon, den = φ(q)·Σ_{j≤i} φ(k_j) with
//     the causal op's running stabiliser (the rows that collapse toward
//     zero at large norms).
//
// rows is B·H·Sq. The cost is that of the features (no values are read).
func PerformerGuardedRows(ctx *kernels.Context, in []*onnx.Tensor) (guarded, rows int, err error) {
	pin, a, err := performerCall(ctx, in)
	if err != nil {
		return 0, 0, err
	}
	p, err := planPerformer(pin, a)
	if err != nil {
		return 0, 0, err
	}
	rows = p.b * p.h * p.sq
	counts := make([]int, p.b*p.h)
	kernels.Parallel(p.b*p.h, a.Threads, func(bh int) {
		switch {
		case a.Causal:
			counts[bh] = p.causalGuarded(bh)
		case p.gen != nil:
			bi := bh / p.h
			for j := 0; j < p.sk; j++ {
				if _, ok := p.mask.at(bi, j); ok {
					return
				}
			}
			counts[bh] = p.sq
		default:
			phiQ, phiK := p.trigFeatures(bh)
			nf := 2 * p.m
			ksum := make([]float64, nf)
			for j := 0; j < p.sk; j++ {
				for f, x := range phiK[j*nf : (j+1)*nf] {
					ksum[f] += float64(x)
				}
			}
			for i := 0; i < p.sq; i++ {
				var den float64
				for f, x := range phiQ[i*nf : (i+1)*nf] {
					den += float64(x) * ksum[f]
				}
				if !(max(den, 0) >= float64(p.eps)) {
					counts[bh]++
				}
			}
		}
	})
	for _, c := range counts {
		guarded += c
	}
	return guarded, rows, nil
}

// causalGuarded counts the rows of one (batch, head) of the causal op whose
// denominator is below epsilon: the recurrence of performerCausal without
// the values.
func (p *performerPlan) causalGuarded(bh int) int {
	bi, hi := bh/p.h, bh%p.h
	s, d, m := p.sq, p.d, p.m
	rs := float32(math.Sqrt(float64(p.scale)))
	invSqrtM := float32(1 / math.Sqrt(float64(m)))
	om := p.omega(hi)
	qs := p.in.Q.Floats()[bh*s*d : (bh+1)*s*d]
	ks := p.in.K.Floats()[bh*s*d : (bh+1)*s*d]
	phiQ := features(qs, s, d, om, m, rs, KernelPositive, false, p.mask, bi, invSqrtM)
	z := make([]float64, m)
	t := make([]float64, m)
	R := math.Inf(-1)
	n := 0
	for j := 0; j < s; j++ {
		if bv, ok := p.mask.at(bi, j); ok {
			top := keyLogits(ks[j*d:(j+1)*d], om, m, d, rs, bv, t)
			R = raiseMax(R, top, z)
			for f := 0; f < m; f++ {
				z[f] += math.Exp(t[f] - R)
			}
		}
		var den float64
		for f, x := range phiQ[j*m : (j+1)*m] {
			den += float64(x) * z[f]
		}
		if !(den*float64(invSqrtM) >= float64(p.eps)) {
			n++
		}
	}
	return n
}

// attend writes o = φ(Q)·(φ(K)ᵀV) / (max(φ(Q)·φ(K)ᵀ1, 0) + eps) for one
// (batch, head): phiQ [sq, nf], phiK [sk, nf], vs [sk, dv], o [sq, dv].
func attend(phiQ, phiK, vs []float32, sq, sk, nf, dv int, eps float32, o []float32) {
	// kv = φ(K)ᵀ V [nf, dv]; ksum = φ(K)ᵀ 1 [nf].
	kv := make([]float32, nf*dv)
	gemm.Sgemm(true, false, nf, dv, sk, 1, phiK, nf, vs, dv, 0, kv, dv, 1)
	ksum := make([]float32, nf)
	for j := 0; j < sk; j++ {
		row := phiK[j*nf : (j+1)*nf]
		for f, x := range row {
			ksum[f] += x
		}
	}
	gemm.Sgemm(false, false, sq, dv, nf, 1, phiQ, nf, kv, dv, 0, o, dv, 1)
	for i := 0; i < sq; i++ {
		var den float32
		for f, x := range phiQ[i*nf : (i+1)*nf] {
			den += x * ksum[f]
		}
		den = max(den, 0) + eps
		row := o[i*dv : (i+1)*dv]
		for j := range row {
			row[j] /= den
		}
	}
}

// variant is a checked choice of the exact transformations and the
// feature map (the general positive path of the kernel).
type variant struct {
	center   bool
	features FeatureMap
	tq, tk   []float32 // [ht, d, d] or nil
	ht       int
	derfA    []float32 // [ha, d] or nil
	ha       int
}

// checkVariant validates the options beyond plain FAVOR+; it returns nil
// for plain FAVOR+ and the trig kernel, which take the original path.
func checkVariant(in PerformerInputs, a PerformerAttrs, kernel PerformerKernel, h, sq, sk, d int, mask *keyMask) (*variant, error) {
	const op = PerformerOp
	feat := a.Features
	if feat == "" {
		feat = FeaturesFavorPlus
	}
	switch feat {
	case FeaturesFavorPlus, FeaturesFavorPP, FeaturesSDERF, FeaturesADERF:
	default:
		return nil, fmt.Errorf("ops: %s: features %q, want %q, %q, %q or %q", op, feat, FeaturesFavorPlus, FeaturesFavorPP, FeaturesSDERF, FeaturesADERF)
	}
	balance := in.BalanceQ != nil || in.BalanceK != nil
	if !a.Center && !balance && feat == FeaturesFavorPlus && in.DerfA == nil {
		return nil, nil
	}
	if kernel != KernelPositive {
		return nil, fmt.Errorf("ops: %s: center, balance and features %q need the %q kernel, not %q", op, feat, KernelPositive, kernel)
	}
	v := &variant{center: a.Center, features: feat}
	if balance {
		if err := v.checkBalance(in.BalanceQ, in.BalanceK, h, d); err != nil {
			return nil, err
		}
	}
	if err := v.checkDerf(in.DerfA, balance, h, d); err != nil {
		return nil, err
	}
	return v, nil
}

// checkBalance validates balance_q = T and balance_k = T⁻ᵀ ([H or 1, d,
// d], T·balance_kᵀ = I, and for sderf balance_q = balance_k) and keeps them.
func (v *variant) checkBalance(tq, tk *onnx.Tensor, h, d int) error {
	const op = PerformerOp
	if tq == nil || tk == nil {
		return fmt.Errorf("ops: %s: balance_q and balance_k go together", op)
	}
	for _, t := range []*onnx.Tensor{tq, tk} {
		if t.DType != onnx.Float || len(t.Shape) != 3 || (t.Shape[0] != 1 && t.Shape[0] != h) || t.Shape[1] != d || t.Shape[2] != d || len(t.Floats()) != t.Len() {
			return fmt.Errorf("ops: %s: balance must be float32 [%d or 1, %d, %d], got %v", op, h, d, d, t)
		}
	}
	if tq.Shape[0] != tk.Shape[0] {
		return fmt.Errorf("ops: %s: balance_q %v and balance_k %v have different head extents", op, tq.Shape, tk.Shape)
	}
	v.tq, v.tk, v.ht = tq.Floats(), tk.Floats(), tq.Shape[0]
	for hi := 0; hi < v.ht; hi++ {
		worst, asym := inverseTransposeError(v.tq[hi*d*d:(hi+1)*d*d], v.tk[hi*d*d:(hi+1)*d*d], d)
		if !(worst <= balanceTol) {
			return fmt.Errorf("ops: %s: balance_k is not balance_q⁻ᵀ in head %d (max |T_q·T_kᵀ − I| = %.3g)", op, hi, worst)
		}
		if v.features == FeaturesSDERF && !(asym <= balanceTol) {
			return fmt.Errorf("ops: %s: features %q is symmetric: balance_q must equal balance_k (an orthogonal matrix), head %d differs by %.3g", op, v.features, hi, asym)
		}
	}
	return nil
}

// inverseTransposeError returns max |tq·tkᵀ − I| and max |tq − tk| of two
// d×d matrices.
func inverseTransposeError(tq, tk []float32, d int) (worst, asym float64) {
	for r := 0; r < d; r++ {
		for c := 0; c < d; c++ {
			var s float64
			for x := 0; x < d; x++ {
				s += float64(tq[r*d+x]) * float64(tk[c*d+x])
			}
			if r == c {
				s--
			}
			worst = math.Max(worst, math.Abs(s))
			asym = math.Max(asym, math.Abs(float64(tq[r*d+c]-tk[r*d+c])))
		}
	}
	return worst, asym
}

// checkDerf validates derf_a (present exactly for sderf and aderf, which
// also need the balance) and keeps it.
func (v *variant) checkDerf(t *onnx.Tensor, balance bool, h, d int) error {
	const op = PerformerOp
	feat := v.features
	if feat != FeaturesSDERF && feat != FeaturesADERF {
		if t != nil {
			return fmt.Errorf("ops: %s: derf_a is an input of features %q and %q only, not %q", op, FeaturesSDERF, FeaturesADERF, feat)
		}
		return nil
	}
	if !balance {
		return fmt.Errorf("ops: %s: features %q needs balance_q and balance_k (derf_a is given in their basis)", op, feat)
	}
	if t == nil || t.DType != onnx.Float || len(t.Shape) != 3 || (t.Shape[0] != 1 && t.Shape[0] != h) || t.Shape[1] != 1 || t.Shape[2] != d || len(t.Floats()) != t.Len() {
		return fmt.Errorf("ops: %s: features %q needs derf_a float32 [%d or 1, 1, %d], got %v", op, feat, h, d, t)
	}
	for _, x := range t.Floats() {
		if !(x < 0.25) || math.IsInf(float64(x), 0) {
			return fmt.Errorf("ops: %s: derf_a holds %g, want finite values below 1/4", op, x)
		}
	}
	v.derfA, v.ha = t.Floats(), t.Shape[0]
	return nil
}

// transformed is one (batch, head) after the exact transformations: x
// [sq, d] and y [sk, d] are the scaled (√scale), centred and balanced
// queries and keys, kb the per-key log-weights (bias plus the centring
// compensation) and ok the valid keys (invalid keys have zero rows).
type transformed struct {
	x, y   []float32
	kb     []float64
	ok     []bool
	qw     []bool // queries counted in the per-sequence means
	nq, nk int
}

// transform applies centring and balance to one (batch, head).
func (v *variant) transform(qs, ks []float32, bi, hi, sq, sk, d int, scale float32, mask *keyMask) *transformed {
	t := &transformed{x: make([]float32, sq*d), y: make([]float32, sk*d), kb: make([]float64, sk), ok: make([]bool, sk), qw: make([]bool, sq)}
	sd := math.Sqrt(float64(scale))
	for j := 0; j < sk; j++ {
		bv, ok := mask.at(bi, j)
		t.ok[j], t.kb[j] = ok, float64(bv)
		if ok {
			t.nk++
		}
	}
	// Self-attention (Sq = Sk): queries share the keys' mask. Otherwise
	// (cross-attention) every query counts. Only centring and FAVOR++
	// look at it, and neither's exactness depends on it.
	perSeq := (v.center || v.features == FeaturesFavorPP) && sq == sk
	for i := 0; i < sq; i++ {
		ok := true
		if perSeq {
			_, ok = mask.at(bi, i)
		}
		t.qw[i] = ok
		if ok {
			t.nq++
		}
	}
	qbar := make([]float64, d)
	kbar := make([]float64, d)
	if v.center {
		for j := 0; j < sk; j++ {
			if t.ok[j] {
				for c, x := range ks[j*d : (j+1)*d] {
					kbar[c] += float64(x)
				}
			}
		}
		for i := 0; i < sq; i++ {
			if t.qw[i] {
				for c, x := range qs[i*d : (i+1)*d] {
					qbar[c] += float64(x)
				}
			}
		}
		for c := range kbar {
			kbar[c] /= float64(max(t.nk, 1))
			qbar[c] /= float64(max(t.nq, 1))
		}
	}
	var tq, tk []float32
	if v.tq != nil {
		o := 0
		if v.ht > 1 {
			o = hi * d * d
		}
		tq, tk = v.tq[o:o+d*d], v.tk[o:o+d*d]
	}
	row := make([]float64, d)
	apply := func(dst []float32, src []float32, mean []float64, tm []float32) {
		for c := range row {
			row[c] = float64(src[c]) - mean[c]
		}
		if tm == nil {
			for c, x := range row {
				dst[c] = float32(sd * x)
			}
			return
		}
		for c := 0; c < d; c++ {
			var s float64
			for r, x := range row {
				s += x * float64(tm[r*d+c])
			}
			dst[c] = float32(sd * s)
		}
	}
	for i := 0; i < sq; i++ {
		apply(t.x[i*d:(i+1)*d], qs[i*d:(i+1)*d], qbar, tq)
	}
	for j := 0; j < sk; j++ {
		if !t.ok[j] {
			continue
		}
		apply(t.y[j*d:(j+1)*d], ks[j*d:(j+1)*d], kbar, tk)
		if v.center {
			// q̄·k' in the scaled space: scale·Σ q̄_c (k_c − k̄_c).
			var s float64
			for c, x := range ks[j*d : (j+1)*d] {
				s += qbar[c] * (float64(x) - kbar[c])
			}
			t.kb[j] += float64(scale) * s
		}
	}
	return t
}

// params returns the effective projection ω̂ [m, d] and per-feature
// offsets β [m] of the feature map for one (batch, head).
func (v *variant) params(om []float32, t *transformed, hi, m, d int) (omEff []float32, beta []float64) {
	beta = make([]float64, m)
	switch v.features {
	case FeaturesFavorPlus:
		return om, beta
	case FeaturesFavorPP:
		A := favorPPA(t, d)
		s := math.Sqrt(1 - 4*A)
		omEff = make([]float32, m*d)
		for r := 0; r < m; r++ {
			var n2 float64
			for c, w := range om[r*d : (r+1)*d] {
				n2 += float64(w) * float64(w)
				omEff[r*d+c] = float32(s * float64(w))
			}
			beta[r] = A * n2
		}
		return omEff, beta
	}
	a := v.derfA
	if v.ha > 1 {
		a = a[hi*d : (hi+1)*d]
	}
	omEff = make([]float32, m*d)
	for r := 0; r < m; r++ {
		for c, w := range om[r*d : (r+1)*d] {
			ac := float64(a[c])
			omEff[r*d+c] = float32(math.Sqrt(1-4*ac) * float64(w))
			beta[r] += ac * float64(w) * float64(w)
		}
	}
	return omEff, beta
}

// OptimalPositiveA returns FAVOR++'s optimal A for the statistic ρ (the
// mean of ‖x + y‖²/D over query–key pairs): the root below 1/8 of
// 16A² + (4ρ − 2)A − ρ = 0, which minimises the mean log second moment
// log(1−4A) − ½log(1−8A) + 2(1−4A)ρ/(1−8A) (per coordinate, up to terms
// free of A). It is 0 at ρ = 0 and negative for ρ > 0.
func OptimalPositiveA(rho float64) float64 {
	rho = max(rho, 0)
	return (1 - 2*rho - math.Sqrt((2*rho+1)*(2*rho+1)+8*rho)) / 16
}

// favorPPA computes ρ = mean over valid (query, key) pairs of ‖x+y‖²/d
// = (mean‖x‖² + mean‖y‖² + 2·x̄·ȳ)/d and returns OptimalPositiveA(ρ).
func favorPPA(t *transformed, d int) float64 {
	xm := make([]float64, d)
	ym := make([]float64, d)
	qq := rowSums(t.x, t.qw, d, xm)
	kk := rowSums(t.y, t.ok, d, ym)
	nq, nk := float64(max(t.nq, 1)), float64(max(t.nk, 1))
	var cross float64
	for c := range xm {
		cross += xm[c] / nq * ym[c] / nk
	}
	return OptimalPositiveA((qq/nq + kk/nk + 2*cross) / float64(d))
}

// rowSums adds the rows i of x ([n, d]) with ok[i] to sum and returns the
// sum of their squared norms.
func rowSums(x []float32, ok []bool, d int, sum []float64) float64 {
	var sq float64
	for i, valid := range ok {
		if !valid {
			continue
		}
		for c, v := range x[i*d : (i+1)*d] {
			sq += float64(v) * float64(v)
			sum[c] += float64(v)
		}
	}
	return sq
}

// run computes the positive kernel (plain FAVOR+ and every variant): the
// exact transformations, then the feature map, then the estimator in its
// mixture form (see mixture).
func (v *variant) run(in PerformerInputs, mask *keyMask, b, h, sq, sk, d, dv, m, ho int, scale float32, threads int) *onnx.Tensor {
	out := make([]float32, b*h*sq*dv)
	qd, kd, vd, od := in.Q.Floats(), in.K.Floats(), in.V.Floats(), in.Omega.Floats()
	kernels.Parallel(b*h, threads, func(bh int) {
		bi, hi := bh/h, bh%h
		om := od
		if ho > 1 {
			om = od[hi*m*d : (hi+1)*m*d]
		}
		t := v.transform(qd[bh*sq*d:(bh+1)*sq*d], kd[bh*sk*d:(bh+1)*sk*d], bi, hi, sq, sk, d, scale, mask)
		omEff, beta := v.params(om, t, hi, m, d)
		mixture(t, omEff, beta, vd[bh*sk*dv:(bh+1)*sk*dv], sq, sk, d, dv, m, out[bh*sq*dv:(bh+1)*sq*dv])
	})
	return onnx.NewFloat([]int{b, h, sq, dv}, out)
}

// mixture writes the positive estimator of one (batch, head) to o [sq, dv]
// in its mixture form. With key logits t_jr = ω̂_r·y_j + β_r − ‖y_j‖²/2 +
// kb_j (valid keys only) and query logits ω̂_r·x_i + β_r,
//
//	out_i = Σ_j Σ_r e^{ℓ_ir + t_jr} v_j / Σ_j Σ_r e^{ℓ_ir + t_jr}
//	      = Σ_r α_ir μ_r,  α_i = softmax_r(ℓ_ir + L_r),
//	      μ_r = Σ_j e^{t_jr − L_r} v_j,  L_r = log Σ_j e^{t_jr},
//
// exactly. Each key column is stabilised by its own maximum m_r (e^{t − m_r}
// has a 1 in every column, so Z_r = Σ_j e^{t_jr − m_r} ≥ 1 and L_r = m_r +
// log Z_r is exact) and each query row by the softmax, so the estimator's
// denominator is 1 by construction and never underflows, whatever the
// norms. A (batch, head) without valid keys gives zeros.
func mixture(t *transformed, omEff []float32, beta []float64, vs []float32, sq, sk, d, dv, m int, o []float32) {
	if t.nk == 0 {
		clear(o)
		return
	}
	// Key logits, [sk, m]; invalid keys are skipped.
	lk := make([]float32, sk*m)
	gemm.Sgemm(false, true, sk, m, d, 1, t.y, d, omEff, d, 0, lk, m, 1)
	top := make([]float32, m)
	for r := range top {
		top[r] = float32(math.Inf(-1))
	}
	for j := 0; j < sk; j++ {
		if !t.ok[j] {
			continue
		}
		var h2 float64
		for _, y := range t.y[j*d : (j+1)*d] {
			h2 += float64(y) * float64(y)
		}
		off := t.kb[j] - h2/2
		row := lk[j*m : (j+1)*m]
		for r := range row {
			row[r] = float32(float64(row[r]) + beta[r] + off)
			top[r] = max(top[r], row[r])
		}
	}
	z := make([]float64, m)
	for j := 0; j < sk; j++ {
		row := lk[j*m : (j+1)*m]
		if !t.ok[j] {
			clear(row)
			continue
		}
		for r, x := range row {
			row[r] = expNeg(x - top[r])
			z[r] += float64(row[r])
		}
	}
	// μ = (eᵀV)/Z, [m, dv]; L_r − max L (a constant over the features,
	// which the query softmax removes).
	mu := make([]float32, m*dv)
	gemm.Sgemm(true, false, m, dv, sk, 1, lk, m, vs, dv, 0, mu, dv, 1)
	lse := make([]float64, m)
	lmax := math.Inf(-1)
	for r := range z {
		row := mu[r*dv : (r+1)*dv]
		for c := range row {
			row[c] = float32(float64(row[c]) / z[r])
		}
		lse[r] = float64(top[r]) + math.Log(z[r]) + beta[r]
		lmax = math.Max(lmax, lse[r])
	}
	// Query weights α, [sq, m].
	alpha := make([]float32, sq*m)
	gemm.Sgemm(false, true, sq, m, d, 1, t.x, d, omEff, d, 0, alpha, m, 1)
	for i := 0; i < sq; i++ {
		row := alpha[i*m : (i+1)*m]
		best := float32(math.Inf(-1))
		for r := range row {
			row[r] = float32(float64(row[r]) + lse[r] - lmax)
			best = max(best, row[r])
		}
		var sum float64
		for r, x := range row {
			row[r] = expNeg(x - best)
			sum += float64(row[r])
		}
		inv := float32(1 / sum)
		for r := range row {
			row[r] *= inv
		}
	}
	gemm.Sgemm(false, false, sq, dv, m, 1, alpha, m, mu, dv, 0, o, dv, 1)
}

// features returns the [s, nf] feature matrix of the rows x [s, d]: keys of
// batch bi (trig kernel only: stabilised by one maximum over the valid
// keys, masked keys zero) or queries (stabilised per row).
func features(x []float32, s, d int, om []float32, m int, rs float32, kernel PerformerKernel, isKey bool, mask *keyMask, bi int, invSqrtM float32) []float32 {
	u := make([]float32, s*m)
	gemm.Sgemm(false, true, s, m, d, rs, x, d, om, d, 0, u, m, 1)
	hh := make([]float32, s)
	for i := 0; i < s; i++ {
		var acc float32
		for _, xv := range x[i*d : (i+1)*d] {
			xv *= rs
			acc += xv * xv
		}
		hh[i] = acc / 2
	}
	valid := func(i int) (float32, bool) {
		if !isKey {
			return 0, true
		}
		return mask.at(bi, i)
	}
	if kernel == KernelTrig {
		phi := make([]float32, s*2*m)
		// Key factor exp(h + b − max_valid(h + b)); query factor 1.
		top := float32(math.Inf(-1))
		if isKey {
			for i := 0; i < s; i++ {
				if bv, ok := valid(i); ok {
					top = max(top, hh[i]+bv)
				}
			}
		}
		for i := 0; i < s; i++ {
			f := invSqrtM
			if isKey {
				bv, ok := valid(i)
				if !ok {
					continue
				}
				f *= float32(math.Exp(float64(hh[i] + bv - top)))
			}
			dst := phi[i*2*m : (i+1)*2*m]
			for j, uv := range u[i*m : (i+1)*m] {
				sn, cs := math.Sincos(float64(uv))
				dst[j] = float32(cs) * f
				dst[m+j] = float32(sn) * f
			}
		}
		return phi
	}
	// Positive kernel, queries only (the causal op's; the bidirectional op
	// uses mixture). For a query row, h is constant over the features and
	// cancels against the row maximum: φ(q) = exp(u − max u)/√M.
	for i := 0; i < s; i++ {
		row := u[i*m : (i+1)*m]
		top := row[0]
		for _, t := range row[1:] {
			top = max(top, t)
		}
		for j, t := range row {
			row[j] = expNeg(t-top) * invSqrtM
		}
	}
	return u
}

// expNeg returns eˣ for x ≤ 0 in float32 with a relative error below
// 3e-7, and 0 for x < −87 (where eˣ is below float32's normal range).
// Range reduction x = k·ln2 + r with |r| ≤ ln2/2, then a degree-7 Taylor
// polynomial for eʳ.
func expNeg(x float32) float32 {
	if x < -87 {
		return 0
	}
	const (
		log2e = 1.44269504088896341
		ln2hi = 0.693359375
		ln2lo = -2.12194440e-4
	)
	k := int32(x*log2e - 0.5) // round to nearest for x ≤ 0
	kf := float32(k)
	r := x - kf*ln2hi - kf*ln2lo
	p := 1 + r*(1+r*(1.0/2+r*(1.0/6+r*(1.0/24+r*(1.0/120+r*(1.0/720+r*(1.0/5040)))))))
	return p * math.Float32frombits(uint32(k+127)<<23)
}

// NewPerformerNode returns a PerformerAttention node reading inputs (Q, K,
// V, Omega, key_bias and the variant's further inputs) and writing
// output, with the attributes of a that differ from their defaults (scale,
// resolved by the caller, is always written; it must not be zero).
func NewPerformerNode(name string, inputs []string, output string, a PerformerAttrs) *onnxpb.NodeProto {
	return performerSchema.node(name, inputs, output, &a)
}

// PerformerFunction returns the FunctionProto that defines
// PerformerAttention with standard ops of the default domain at opset
// (11..23; use the model's own default-domain opset), for one kernel
// ("positive" or "trig"). Its inputs are Q, K, V, Omega, key_bias (all
// required), its attributes scale (required), kernel (ignored by the body)
// and epsilon (default 1e-6; read by the trig body only, see the op's
// definition).
func PerformerFunction(kernel PerformerKernel, opset int64) (*onnxpb.FunctionProto, error) {
	return PerformerFunctionFor(PerformerVariant{Kernel: kernel}, opset)
}

// PerformerVariant selects the body of the PerformerAttention function. A
// model holds one function per op type, so one model uses one variant
// throughout (as with the kernel attribute).
type PerformerVariant struct {
	Kernel   PerformerKernel // "positive" (default) or "trig"
	Center   bool            // nodes carry center=1
	Balance  bool            // nodes pass balance_q and balance_k
	Features FeatureMap      // "favor+" (default), "favor++", "sderf" or "aderf"
	// Causal selects the causal body (nodes carry causal=1; positive
	// kernel and plain FAVOR+ only) and Chunk its chunk length (0:
	// DefaultChunk); see PerformerCausalFunction.
	Causal bool
	Chunk  int
}

// PerformerFunctionFor returns the FunctionProto that defines
// PerformerAttention for one variant at opset (11..23). The plain FAVOR+
// variants (no centring, no balance, favor+) are PerformerFunction's
// bodies. Every other variant has the inputs Q, K, V, Omega, key_bias,
// then balance_q, balance_k when Balance (required for sderf and aderf),
// then derf_a for sderf and aderf, and declares the attributes scale,
// kernel, center and features (the last three select the body here and
// are ignored by it) and epsilon (default 1e-6). A Causal variant is
// PerformerCausalFunction's body.
func PerformerFunctionFor(v PerformerVariant, opset int64) (*onnxpb.FunctionProto, error) {
	kernel := v.Kernel
	if kernel == "" {
		kernel = KernelPositive
	}
	feat := v.Features
	if feat == "" {
		feat = FeaturesFavorPlus
	}
	if v.Causal {
		if kernel != KernelPositive || v.Center || v.Balance || feat != FeaturesFavorPlus {
			return nil, fmt.Errorf("ops: %s function: the causal body is defined for the %q kernel with features %q only (no center, no balance), got kernel %q center %v balance %v features %q",
				PerformerOp, KernelPositive, FeaturesFavorPlus, kernel, v.Center, v.Balance, feat)
		}
		return PerformerCausalFunction(v.Chunk, opset)
	}
	if kernel == KernelPositive || v.Center || v.Balance || feat != FeaturesFavorPlus {
		return performerPositiveFunction(v, kernel, feat, opset)
	}
	if kernel != KernelTrig {
		return nil, fmt.Errorf("ops: %s function: kernel %q, want %q or %q", PerformerOp, kernel, KernelPositive, KernelTrig)
	}
	b, err := newFnBuilder(PerformerOp, opset)
	if err != nil {
		return nil, err
	}
	// The trig body:
	//   - √scale is folded into Ω (tiny) instead of Q and K;
	//   - 1/√M on φ(Q) and φ(K) scales numerator and denominator by 1/M,
	//     so it is dropped and ε is multiplied by M instead (exactly equal);
	//   - key features are built transposed, [B,H,2M,Sk], from Kᵀ (small),
	//     where key_bias [B,1,1,Sk] broadcasts as it is;
	//   - the denominator rides along the numerator's product as a column
	//     of ones appended to V; padded keys are zeroed in that [Sk, Dv+1]
	//     operand, so they contribute exactly nothing to either.
	scale := b.constFloatAttr("scale")
	rs := b.op("Sqrt", []string{scale})
	eps := b.constFloatAttr("epsilon")
	mdim := b.op("Slice", []string{b.op("Shape", []string{"Omega"}), b.constInts(1), b.constInts(2)})
	mf := b.op("Cast", []string{mdim}, attrInt("to", int64(onnx.Float)))
	epsM := b.op("Mul", []string{eps, mf})
	omegaS := b.op("Mul", []string{"Omega", rs}) // [H,M,D]·√scale
	omegaST := b.transpose(omegaS, 0, 2, 1)      // [H,D,M]
	halfScale := b.op("Mul", []string{scale, b.constFloat(0.5)})

	valid := b.op("Greater", []string{"key_bias", b.constFloat(maskThreshold)}) // [B,1,1,Sk]
	negMax := b.constFloat(-math.MaxFloat32)

	uq := b.op("MatMul", []string{"Q", omegaST})                                                     // [B,H,Sq,M]
	kT := b.transpose("K", 0, 1, 3, 2)                                                               // [B,H,D,Sk]
	ukT := b.op("MatMul", []string{omegaS, kT})                                                      // [B,H,M,Sk]
	hkT := b.op("Mul", []string{b.reduce("ReduceSum", b.op("Mul", []string{kT, kT}), 2), halfScale}) // [B,H,1,Sk]
	phiQ := b.op("Concat", []string{b.op("Cos", []string{uq}), b.op("Sin", []string{uq})}, attrInt("axis", -1))
	g := b.op("Where", []string{valid, b.op("Add", []string{hkT, "key_bias"}), negMax}) // [B,H,1,Sk]
	top := b.reduce("ReduceMax", g, 2, 3)
	fk := b.op("Exp", []string{b.op("Sub", []string{g, top})})
	cs := b.op("Concat", []string{b.op("Cos", []string{ukT}), b.op("Sin", []string{ukT})}, attrInt("axis", 2))
	phiKT := b.op("Mul", []string{cs, fk})
	// [V, 1] with padded keys' rows zeroed: [B,H,Sk,Dv+1].
	shapeV := b.op("Slice", []string{b.op("Shape", []string{"V"}), b.constInts(0), b.constInts(3)})
	onesShape := b.op("Concat", []string{shapeV, b.constInts(1)}, attrInt("axis", 0))
	one, _ := onnx.EncodeTensor("one", onnx.NewFloat([]int{1}, []float32{1}))
	ones := b.op("ConstantOfShape", []string{onesShape}, &onnxpb.AttributeProto{
		Name: proto.String("value"), Type: onnxpb.AttributeProto_TENSOR.Enum(), T: one})
	v1 := b.op("Concat", []string{"V", ones}, attrInt("axis", -1))
	keep := b.op("Cast", []string{b.transpose(valid, 0, 1, 3, 2)}, attrInt("to", int64(onnx.Float))) // [B,1,Sk,1]
	v1 = b.op("Mul", []string{v1, keep})
	kv := b.op("MatMul", []string{phiKT, v1}) // [B,H,F,Dv+1]
	nd := b.op("MatMul", []string{phiQ, kv})  // [B,H,Sq,Dv+1]
	num := b.op("Slice", []string{nd, b.constInts(0), b.constInts(-1), b.constInts(-1)})
	den := b.op("Slice", []string{nd, b.constInts(-1), b.constInts(math.MaxInt64), b.constInts(-1)})
	den = b.op("Add", []string{b.op("Relu", []string{den}), epsM})
	b.op("Div", []string{num, den})
	b.rename("out")
	return performerSchema.function(b, performerDoc+" kernel="+string(kernel), 5), nil
}

// performerPositiveFunction builds the positive body (plain FAVOR+ and
// every variant): the exact transformations, then the feature map, then
// the estimator in the mixture form of the Go kernel (see mixture):
//
//	keys:    t = ω̂·y + β − ‖y‖²/2 + b, [M, Sk] per (batch, head);
//	         e = exp(t − max_keys t) (one maximum per feature);
//	         [eV, Z] = e·[V, 1];  μ = eV/Z;  L = max_keys t + log Z
//	queries: α = Softmax_features(ω̂·x + β + L − max L);  out = α·μ
//
// so the [.., S, M] feature tensors are touched only by the products, the
// keys' ReduceMax, Sub and Exp and the queries' Softmax, and there is no
// denominator to divide by (it is 1 by construction). Per-feature offsets
// β, the per-key offsets and L ride along the products as extra columns
// ("augmented" operands):
//
//	queries: [x, 1] · [ω̂; β + L − max L]ᵀ
//	keys:    [y, 1, off] · [ω̂; β; 1]ᵀ  (no β column for favor+)
//
// with off_j = b_j (+ centring bias) − ‖y_j‖²/2, or −1e30 for padded keys
// (their logits are then exactly −1e30, so e = 0 for them whenever a valid
// key exists; with none, μ is multiplied by 0); for favor++ ω̂ = √(1−4A)·ω
// and β = A‖ω‖² (A per batch and head, computed here); for DERF ω̂ = ω ⊙
// √(1−4a) and β = Σ a_c ω_c². √scale is folded into Ω, and ‖y‖² is taken
// before the FAVOR++ scaling. Plain FAVOR+ keeps PerformerFunction's
// interface (inputs Q, K, V, Omega, key_bias; attributes scale, kernel,
// epsilon); epsilon is declared but unused by the positive kernel.
func performerPositiveFunction(v PerformerVariant, kernel PerformerKernel, feat FeatureMap, opset int64) (*onnxpb.FunctionProto, error) {
	const op = PerformerOp
	if kernel != KernelPositive {
		return nil, fmt.Errorf("ops: %s function: center, balance and features %q need the %q kernel, not %q", op, feat, KernelPositive, kernel)
	}
	derf := feat == FeaturesSDERF || feat == FeaturesADERF
	switch feat {
	case FeaturesFavorPlus, FeaturesFavorPP, FeaturesSDERF, FeaturesADERF:
	default:
		return nil, fmt.Errorf("ops: %s function: features %q, want %q, %q, %q or %q", op, feat, FeaturesFavorPlus, FeaturesFavorPP, FeaturesSDERF, FeaturesADERF)
	}
	if derf && !v.Balance {
		return nil, fmt.Errorf("ops: %s function: features %q needs the balance inputs", op, feat)
	}
	b, err := newFnBuilder(op, opset)
	if err != nil {
		return nil, err
	}
	plain := !v.Center && !v.Balance && feat == FeaturesFavorPlus
	inputs := []string{"Q", "K", "V", "Omega", "key_bias"}
	if v.Balance {
		inputs = append(inputs, "balance_q", "balance_k")
	}
	if derf {
		inputs = append(inputs, "derf_a")
	}
	scale := b.constFloatAttr("scale")
	rs := b.op("Sqrt", []string{scale})
	halfScale := b.op("Mul", []string{scale, b.constFloat(0.5)})
	zero := b.constFloat(0)
	one, _ := onnx.EncodeTensor("one", onnx.NewFloat([]int{1}, []float32{1}))
	onesLike := func(x string, rank int64) string { // ones of x's shape with the last axis 1
		sh := b.op("Concat", []string{b.op("Slice", []string{b.op("Shape", []string{x}), b.constInts(0), b.constInts(rank - 1)}), b.constInts(1)}, attrInt("axis", 0))
		return b.op("ConstantOfShape", []string{sh}, &onnxpb.AttributeProto{
			Name: proto.String("value"), Type: onnxpb.AttributeProto_TENSOR.Enum(), T: one})
	}

	valid := b.op("Greater", []string{"key_bias", b.constFloat(maskThreshold)}) // [B,1,1,Sk]
	validT := b.transpose(valid, 0, 1, 3, 2)                                    // [B,1,Sk,1]
	onesK := onesLike("K", 4)                                                   // [B,H,Sk,1]
	onesQ := onesLike("Q", 4)                                                   // [B,H,Sq,1]
	var wK, nK, wQ, nQ, qValidT string
	if v.Center || feat == FeaturesFavorPP {
		// Valid-token weights and counts (at least 1), [B,H,S,1] and
		// [B,H,1,1]. Queries share the keys' mask when Sq = Sk; with
		// Sq ≠ Sk (cross-attention) every query counts: the mask is read
		// at min(i, its length − 1), and the comparison of the lengths
		// overrides it.
		wK = b.op("Where", []string{validT, onesK, zero})
		nK = b.op("Max", []string{b.reduce("ReduceSum", wK, 2), b.constFloat(1)})
		dim := func(x string, axis int64) string { // scalar int64
			return b.op("Gather", []string{b.op("Shape", []string{x}), b.op("Constant", nil, attrTensor("value", onnx.NewInt64(nil, []int64{axis})))}, attrInt("axis", 0))
		}
		sqLen, skLen, maskLen := dim("Q", 2), dim("K", 2), dim("key_bias", 3)
		oneI := b.op("Constant", nil, attrTensor("value", onnx.NewInt64(nil, []int64{1})))
		idx := b.op("Range", []string{b.op("Constant", nil, attrTensor("value", onnx.NewInt64(nil, []int64{0}))), sqLen, oneI})
		last := b.op("Sub", []string{maskLen, oneI})
		idx = b.op("Where", []string{b.op("Less", []string{idx, maskLen}), idx, last})
		qValid := b.op("Gather", []string{valid, idx}, attrInt("axis", 3)) // [B,1,1,Sq]
		qValid = b.op("Or", []string{qValid, b.op("Not", []string{b.op("Equal", []string{sqLen, skLen})})})
		qValidT = b.transpose(qValid, 0, 1, 3, 2) // [B,1,Sq,1]
		wQ = b.op("Where", []string{qValidT, onesQ, zero})
		nQ = b.op("Max", []string{b.reduce("ReduceSum", wQ, 2), b.constFloat(1)})
	}
	qc := "Q"
	kc := b.op("Where", []string{validT, "K", zero}) // padded keys zeroed
	var centBias string
	if v.Center {
		kbar := b.op("Div", []string{b.reduce("ReduceSum", kc, 2), nK}) // [B,H,1,D]
		qbar := b.op("Div", []string{b.reduce("ReduceSum", b.op("Where", []string{qValidT, "Q", zero}), 2), nQ})
		kc = b.op("Sub", []string{kc, kbar})
		qc = b.op("Sub", []string{"Q", qbar})
		// scale·q̄·k'_j, [B,H,Sk,1].
		centBias = b.op("Mul", []string{b.op("MatMul", []string{kc, b.transpose(qbar, 0, 1, 3, 2)}), scale})
	}
	if v.Balance {
		qc = b.op("MatMul", []string{qc, "balance_q"})
		kc = b.op("MatMul", []string{kc, "balance_k"})
	}
	// off = b − ‖y‖²/2 (+ centring bias), −1e30 on padded keys: [B,H,Sk,1].
	hk := b.op("Mul", []string{b.reduce("ReduceSum", b.op("Mul", []string{kc, kc}), 3), halfScale})
	off := b.op("Sub", []string{b.transpose("key_bias", 0, 1, 3, 2), hk})
	if centBias != "" {
		off = b.op("Add", []string{off, centBias})
	}
	off = b.op("Where", []string{validT, off, b.constFloat(-1e30)})

	omegaS := b.op("Mul", []string{"Omega", rs}) // [H',M,D]·√scale
	// ω̂ ([H',M,D], or [B,H,M,D] for favor++) and β ([H',M,1] or
	// [B,H,M,1]; none for favor+).
	var omHat, beta string
	var betaRank int64
	switch {
	case feat == FeaturesFavorPlus:
		omHat = omegaS
	case derf:
		sa := b.op("Sqrt", []string{b.op("Sub", []string{b.constFloat(1), b.op("Mul", []string{"derf_a", b.constFloat(4)})})}) // [H',1,D]
		omHat = b.op("Mul", []string{omegaS, sa})                                                                              // [H'',M,D]
		beta = b.reduce("ReduceSum", b.op("Mul", []string{b.op("Mul", []string{"Omega", "Omega"}), "derf_a"}), 2)              // [H'',M,1]
		betaRank = 3
	default: // favor++
		// ρ = scale·(mean‖q‖² + mean‖k‖² + 2·q̄·k̄)/D over the valid tokens.
		// Means over the valid rows (Where, so that whatever padded rows
		// hold cannot reach them).
		meanOf := func(x, ok, n string) string {
			return b.op("Div", []string{b.reduce("ReduceSum", b.op("Where", []string{ok, x, zero}), 2), n})
		}
		qq := meanOf(b.reduce("ReduceSum", b.op("Mul", []string{qc, qc}), 3), qValidT, nQ) // [B,H,1,1]
		kk := meanOf(b.reduce("ReduceSum", b.op("Mul", []string{kc, kc}), 3), validT, nK)
		cross := b.reduce("ReduceSum", b.op("Mul", []string{meanOf(qc, qValidT, nQ), meanOf(kc, validT, nK)}), 3)
		ddim := b.op("Cast", []string{b.op("Slice", []string{b.op("Shape", []string{"Q"}), b.constInts(3), b.constInts(4)})}, attrInt("to", int64(onnx.Float)))
		sum := b.op("Add", []string{b.op("Add", []string{qq, kk}), b.op("Mul", []string{cross, b.constFloat(2)})})
		rho := b.op("Div", []string{b.op("Mul", []string{sum, scale}), ddim})
		rho = b.op("Max", []string{rho, zero})
		// A = (1 − 2ρ − √((2ρ+1)² + 8ρ))/16.
		r2 := b.op("Add", []string{b.op("Mul", []string{rho, b.constFloat(2)}), b.constFloat(1)})
		disc := b.op("Sqrt", []string{b.op("Add", []string{b.op("Mul", []string{r2, r2}), b.op("Mul", []string{rho, b.constFloat(8)})})})
		A := b.op("Div", []string{b.op("Sub", []string{b.op("Sub", []string{b.constFloat(1), b.op("Mul", []string{rho, b.constFloat(2)})}), disc}), b.constFloat(16)})
		s := b.op("Sqrt", []string{b.op("Sub", []string{b.constFloat(1), b.op("Mul", []string{A, b.constFloat(4)})})}) // [B,H,1,1]
		norm2 := b.reduce("ReduceSum", b.op("Mul", []string{"Omega", "Omega"}), 2)                                     // [H',M,1]
		omHat = b.op("Mul", []string{omegaS, s})                                                                       // [B,H,M,D]
		beta = b.op("Mul", []string{norm2, A})                                                                         // [B,H,M,1]
		betaRank = 4
	}
	// Keys: t = [y, (1,) off]·[ω̂; (β;) 1]ᵀ, [B,H,M,Sk].
	var omK, ka string
	if beta == "" {
		omK = b.op("Concat", []string{omHat, onesLike(omHat, 3)}, attrInt("axis", -1))
		ka = b.op("Concat", []string{kc, off}, attrInt("axis", -1))
	} else {
		omK = b.op("Concat", []string{omHat, beta, onesLike(beta, betaRank)}, attrInt("axis", -1))
		ka = b.op("Concat", []string{kc, onesK, off}, attrInt("axis", -1))
	}
	ukT := b.op("MatMul", []string{omK, b.transpose(ka, 0, 1, 3, 2)})
	top := b.reduce("ReduceMax", ukT, 3) // [B,H,M,1]
	e := b.op("Exp", []string{b.op("Sub", []string{ukT, top})})
	ez := b.op("MatMul", []string{e, b.op("Concat", []string{"V", onesK}, attrInt("axis", -1))}) // [B,H,M,Dv+1]
	z := b.op("Slice", []string{ez, b.constInts(-1), b.constInts(math.MaxInt64), b.constInts(-1)})
	// μ = eV/Z, times 0 where no key is valid ([B,1,1,1]).
	anyValid := b.reduce("ReduceMax", b.op("Cast", []string{valid}, attrInt("to", int64(onnx.Float))), 3)
	mu := b.op("Mul", []string{b.op("Div", []string{b.op("Slice", []string{ez, b.constInts(0), b.constInts(-1), b.constInts(-1)}), z}), anyValid})
	// Queries: the column β + L − max L, [B,H,M,1].
	lse := b.op("Add", []string{top, b.op("Log", []string{z})})
	lse = b.op("Sub", []string{lse, b.reduce("ReduceMax", lse, 2)})
	if beta != "" {
		lse = b.op("Add", []string{lse, beta})
	}
	// ω̂ broadcast to [B,H,M,D] to take the per-(batch, head) column.
	omShape := b.op("Concat", []string{
		b.op("Slice", []string{b.op("Shape", []string{"Q"}), b.constInts(0), b.constInts(2)}),
		b.op("Slice", []string{b.op("Shape", []string{omHat}), b.constInts(-2), b.constInts(math.MaxInt64)}),
	}, attrInt("axis", 0))
	omQ := b.op("Concat", []string{b.op("Expand", []string{omHat, omShape}), lse}, attrInt("axis", -1)) // [B,H,M,D+1]
	qa := b.op("Concat", []string{qc, onesQ}, attrInt("axis", -1))
	uq := b.op("MatMul", []string{qa, b.transpose(omQ, 0, 1, 3, 2)}) // [B,H,Sq,M]
	alpha := b.op("Softmax", []string{uq}, attrInt("axis", 3))
	b.op("MatMul", []string{alpha, mu})
	b.rename("out")
	if plain {
		return performerSchema.function(b, performerDoc+" kernel="+string(kernel), len(inputs)), nil
	}
	doc := fmt.Sprintf("%s kernel=%s center=%v balance=%v features=%s", performerDoc, kernel, v.Center, v.Balance, feat)
	return performerSchema.function(b, doc, len(inputs)), nil
}

// PerformerExactFunction returns a FunctionProto with PerformerAttention's
// name, inputs (Q, K, V, Omega, key_bias) and attributes whose body is
// exact softmax attention, softmax(scale·Q·Kᵀ + key_bias)·V (Omega is
// unused). Put in place of the Performer function, it turns a converted
// model back into the original computation while keeping the converted
// graph's wiring: every node's Q, K and key_bias are then the original
// model's activations in [B,H,S,D] layout, which is how calibration
// statistics are captured (package finetune).
func PerformerExactFunction(opset int64) (*onnxpb.FunctionProto, error) {
	b, err := newFnBuilder(PerformerOp, opset)
	if err != nil {
		return nil, err
	}
	scores := b.op("Mul", []string{b.op("MatMul", []string{"Q", b.transpose("K", 0, 1, 3, 2)}), b.constFloatAttr("scale")})
	// Softmax before opset 13 flattens from axis on: with axis 3 that is
	// the key axis alone, the same as opset 13's per-axis softmax.
	p := b.op("Softmax", []string{b.op("Add", []string{scores, "key_bias"})}, attrInt("axis", 3))
	b.op("MatMul", []string{p, "V"})
	b.rename("out")
	return performerSchema.function(b, "PerformerAttention computed exactly (softmax attention; calibration capture)", 5), nil
}
