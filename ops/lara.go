package ops

import (
	"fmt"
	"math"

	"github.com/linearize/linearize/internal/gemm"
	"github.com/linearize/linearize/kernels"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// LaraAttention (domain ai.linearize, version 1) is LARA, the randomized
// attention of "Linear Complexity Randomized Self-attention Mechanism"
// (Zheng et al., ICML 2022): softmax attention written as an expectation
// over ω ~ N(0, I), estimated by multiple importance sampling from C
// Gaussian proposals centred at landmarks computed from Q and K at run
// time, with the proposals' noise frozen in an input so that the op is
// deterministic.
//
// Inputs: Q [B,H,S,D], K [B,H,S,D], V [B,H,S,Dv] (self-attention), Noise
// [H or 1, R, D] with R = C·Sp (Sp samples per landmark; the converter
// draws N(0, σ²) and freezes it), key_bias [B or 1,1,1,S or 1] (optional in
// the Go kernel, always passed to the function body). Output [B,H,S,Dv].
// Attributes: scale (float > 0), landmarks C ≥ 1.
//
// For one sequence and head, with x̃ = √scale·x, the m valid keys those
// whose bias b_j is above −1e4, in position order (rank 0..m−1):
//
//   - landmark c (0 ≤ c < C) stands for the valid tokens G_c: when m ≥ C
//     those of rank r with ⌊r·C/m⌋ = c (C contiguous segments that follow
//     the actual length), when m < C the one token of rank ⌊c·m/C⌋ (each
//     token then centres ⌊C/m⌋ or ⌈C/m⌉ proposals, so every sample is
//     used); q̄_c, k̄_c are the means of q̃ and k̃ over G_c and
//     μ_c = q̄_c + k̄_c;
//   - sample r = c·Sp + s is ω_r = μ_c + Noise[h, r] (proposal c(r) = c);
//   - ℓ_c(ω) = ω·μ_c − ½‖μ_c‖² is log N(ω; μ_c, I) up to terms common to
//     every proposal, and β_r = exp(ℓ_c(r)(ω_r) − logsumexp_c' ℓ_c'(ω_r))
//     the balance heuristic;
//   - key side, per sample: Z_r = Σ_j exp(k̃_j·ω_r − ½‖k̃_j‖² + b_j) and
//     f_r = Σ_j exp(k̃_j·ω_r − ½‖k̃_j‖² + b_j)·v_j / Z_r;
//   - query side: τ_ic = softmax over c of q̃_i·q̄_c, and the
//     query-specific multiple-importance weight
//     α_ir = max(β_r + τ_i,c(r) − 1/C, 1e-8);
//   - out_i = Σ_r w_ir·f_r with w_ir ∝ α_ir·exp(q̃_i·ω_r)·Z_r·exp(−ℓ_c(r)(ω_r)),
//     normalised over r (the self-normalised estimator).
//
// Why: with p_i(ω) ∝ N(ω; 0, I)·exp(q̃_i·ω)·Z(ω),
// E_{ω~N(0,I)}[exp(q̃·ω − ½‖q̃‖²)·exp(k̃·ω − ½‖k̃‖²)] = exp(scale·q·k), so
// out_i = E_{p_i}[f(ω)]; w_ir is the importance ratio p_i/N(μ_c, I) (the
// exp(−½‖ω‖²) factors and every per-query constant cancel in the
// normalisation) times the MIS weight α (Σ_c α = 1 for every ω). A per-key
// bias is exact, as in Performer. Padded keys contribute exactly zero and
// never enter a landmark. A sequence with no valid key gives zeros.
//
// Cost per query: R·(2D + 2Dv) + C·D multiply-adds, plus R·C·D per
// sequence for the proposal densities (amortised: R·C·D/S per token);
// memory is linear in S.
const laraDoc = "LaraAttention: LARA randomized attention, multiple importance sampling from Gaussian proposals at run-time segment landmarks, noise frozen (see github.com/linearize/linearize/ops)."

// LaraOp is the op type of LaraAttention.
const LaraOp = "LaraAttention"

// MaxLandmarks bounds the landmark count C.
const MaxLandmarks = 1 << 16

// LaraAttrs are the attributes of LaraAttention.
type LaraAttrs struct {
	// Scale multiplies q·k; zero selects 1/√D. It must be positive (the
	// estimator works on √scale·q and √scale·k).
	Scale float32
	// Landmarks is C, the number of landmarks and proposals (≥ 1).
	Landmarks int
	// Threads bounds the goroutines the Go kernel uses (not an attribute).
	Threads int
}

// laraSchema is LaraAttention's schema.
var laraSchema = newSchema(OpSchema{
	Op: LaraOp, Doc: laraDoc, File: "ops/lara.go",
	Inputs: qkvInputs(selfQKV,
		InputSchema{Name: "Noise", Doc: "frozen proposal noise [H or 1,R,D], R = landmarks·samples"},
		keyBiasInput,
	),
	Output: "[B,H,S,Dv]",
}, func(a *LaraAttrs) *int { return &a.Threads },
	scaleField(scaleDoc+"; must be positive", func(a *LaraAttrs) *float32 { return &a.Scale }),
	intField(AttrSchema{Name: "landmarks", Required: true, Min: 1, Max: MaxLandmarks,
		Doc: "C: landmarks (segment means of Q and K at run time), one Gaussian proposal centred at each"}, func(a *LaraAttrs) *int { return &a.Landmarks }),
)

func (a LaraAttrs) check() error {
	if err := laraSchema.check(&a); err != nil {
		return err
	}
	if a.Scale < 0 {
		return fmt.Errorf("ops: %s: scale %g must be positive and finite", LaraOp, a.Scale)
	}
	return nil
}

func init() {
	laraSchema.register(func(a LaraAttrs, in []*onnx.Tensor) (*onnx.Tensor, error) {
		return Lara(in[0], in[1], in[2], in[3], in[4], a)
	})
}

// laraLayout is what one sequence's keys decide: the valid positions, their
// biases, and the members of every landmark (indices into valid).
type laraLayout struct {
	valid   []int
	bias    []float64
	members [][]int // [landmark] → indices into valid
}

func newLaraLayout(mask *keyMask, bi, n, c int) laraLayout {
	var lay laraLayout
	for j := 0; j < n; j++ {
		if b, ok := mask.at(bi, j); ok {
			lay.valid = append(lay.valid, j)
			lay.bias = append(lay.bias, float64(b))
		}
	}
	m := len(lay.valid)
	if m == 0 {
		return lay
	}
	lay.members = make([][]int, c)
	if m >= c {
		for r := 0; r < m; r++ {
			g := r * c / m
			lay.members[g] = append(lay.members[g], r)
		}
	} else {
		for g := 0; g < c; g++ {
			lay.members[g] = []int{g * m / c}
		}
	}
	return lay
}

// checkNoise validates Noise [h or 1, R, d] for c landmarks and returns
// R.
func checkNoise(noise *onnx.Tensor, h, d, c int) (int, error) {
	const op = LaraOp
	if noise == nil {
		return 0, fmt.Errorf("ops: %s: input Noise is missing", op)
	}
	if noise.DType != onnx.Float {
		return 0, fmt.Errorf("ops: %s: Noise has type %s, want float32", op, onnx.TypeName(noise.DType))
	}
	ns := noise.Shape
	if len(ns) != 3 || (ns[0] != 1 && ns[0] != h) || ns[2] != d || ns[1] < 1 {
		return 0, fmt.Errorf("ops: %s: Noise shape %v, want [%d or 1, R, %d]", op, ns, h, d)
	}
	if len(noise.Floats()) != noise.Len() {
		return 0, fmt.Errorf("ops: %s: Noise holds %d values for shape %v", op, len(noise.Floats()), ns)
	}
	if ns[1]%c != 0 {
		return 0, fmt.Errorf("ops: %s: Noise has %d samples, not a multiple of landmarks %d", op, ns[1], c)
	}
	return ns[1], nil
}

// Lara computes LaraAttention in float32 with float64 normalisers and
// landmark sums (see the op's definition above). bias may be nil (every key
// valid).
func Lara(q, k, v, noise, bias *onnx.Tensor, a LaraAttrs) (*onnx.Tensor, error) {
	const op = LaraOp
	if err := a.check(); err != nil {
		return nil, err
	}
	b, h, n, d, dv, err := selfAttnDims(op, q, k, v)
	if err != nil {
		return nil, err
	}
	c := a.Landmarks
	r, err := checkNoise(noise, h, d, c)
	if err != nil {
		return nil, err
	}
	if !fits(n, r) || !fits(n, c) || !fits(r, c) || !fits(r, d) {
		return nil, fmt.Errorf("ops: %s: %d tokens, %d samples and %d landmarks would exceed %d elements per buffer", op, n, r, c, kernels.MaxElements)
	}
	mask, err := newKeyMask(op, bias, b, n)
	if err != nil {
		return nil, err
	}
	scale := resolveScale(a.Scale, d)
	lays := make([]laraLayout, b)
	for bi := range lays {
		lays[bi] = newLaraLayout(mask, bi, n, c)
	}
	qd, kd, vd, ed := q.Floats(), k.Floats(), v.Floats(), noise.Floats()
	out := make([]float32, b*h*n*dv)
	kernels.Parallel(b*h, a.Threads, func(bh int) {
		bi, hi := bh/h, bh%h
		p := laraHead{
			lay: &lays[bi], n: n, d: d, dv: dv, c: c, r: r, per: r / c,
			rs: float32(math.Sqrt(float64(scale))),
			qh: qd[bh*n*d : (bh+1)*n*d], kh: kd[bh*n*d : (bh+1)*n*d], vh: vd[bh*n*dv : (bh+1)*n*dv],
			eh: ed,
		}
		if noise.Shape[0] > 1 {
			p.eh = ed[hi*r*d : (hi+1)*r*d]
		}
		if len(p.lay.valid) > 0 { // else no valid key: zeros
			p.run(out[bh*n*dv : (bh+1)*n*dv])
		}
	})
	return onnx.NewFloat([]int{b, h, n, dv}, out), nil
}

// laraHead is one (batch, head) of LaraAttention with at least one valid
// key.
type laraHead struct {
	lay                 *laraLayout
	n, d, dv, c, r, per int
	rs                  float32 // √scale
	qh, kh, vh, eh      []float32
	qs, ks, vs          []float32 // scaled queries (all), scaled valid keys, their values
	qbar, mu            []float32 // landmarks q̄_c and μ_c [C, D]
	mu64                []float64
	halfMu              []float64 // ½‖μ_c‖²
	omega               []float32 // samples [R, D]
	own, beta           []float64 // ℓ_c(r)(ω_r), balance heuristic β_r
	f                   []float32 // f_r [R, Dv]
	sample              []float64 // log Z_r − ℓ_c(r)(ω_r)
}

func (p *laraHead) run(oh []float32) {
	p.scaled()
	p.landmarks()
	p.samples()
	p.keySide()
	p.querySide(oh)
}

// scaled computes q̃ (every row), k̃ of the valid keys and their values.
func (p *laraHead) scaled() {
	n, d, dv, m := p.n, p.d, p.dv, len(p.lay.valid)
	p.qs = make([]float32, n*d)
	for i, x := range p.qh {
		p.qs[i] = p.rs * x
	}
	p.ks = make([]float32, m*d)
	p.vs = make([]float32, m*dv)
	for jj, j := range p.lay.valid {
		for t := 0; t < d; t++ {
			p.ks[jj*d+t] = p.rs * p.kh[j*d+t]
		}
		copy(p.vs[jj*dv:(jj+1)*dv], p.vh[j*dv:(j+1)*dv])
	}
}

// landmarks computes q̄, k̄ and μ = q̄ + k̄ (float64 sums) and ½‖μ‖².
func (p *laraHead) landmarks() {
	c, d := p.c, p.d
	p.qbar = make([]float32, c*d)
	p.mu = make([]float32, c*d)
	p.mu64 = make([]float64, c*d)
	p.halfMu = make([]float64, c)
	for g, mem := range p.lay.members {
		for t := 0; t < d; t++ {
			var sq, sk float64
			for _, jj := range mem {
				j := p.lay.valid[jj]
				sq += float64(p.qs[j*d+t])
				sk += float64(p.ks[jj*d+t])
			}
			inv := 1 / float64(len(mem))
			p.qbar[g*d+t] = float32(sq * inv)
			p.mu[g*d+t] = float32((sq + sk) * inv)
			p.mu64[g*d+t] = float64(p.mu[g*d+t])
		}
		var s float64
		for t := 0; t < d; t++ {
			s += p.mu64[g*d+t] * p.mu64[g*d+t]
		}
		p.halfMu[g] = s / 2
	}
}

// samples computes ω_r = μ_c(r) + noise_r, their own-proposal term
// ℓ_c(r)(ω_r) and the balance heuristic β.
func (p *laraHead) samples() {
	r, c, d, per := p.r, p.c, p.d, p.per
	p.omega = make([]float32, r*d)
	for s := 0; s < r; s++ {
		g := s / per
		for t := 0; t < d; t++ {
			p.omega[s*d+t] = p.mu[g*d+t] + p.eh[s*d+t]
		}
	}
	lp := make([]float32, r*c)
	gemm.Sgemm(false, true, r, c, d, 1, p.omega, d, p.mu, d, 0, lp, c, 1)
	p.own = make([]float64, r)
	p.beta = make([]float64, r)
	for s := 0; s < r; s++ {
		g := s / per
		// ℓ_g(ω_s) recomputed in float64 for the own proposal.
		var dot float64
		for t := 0; t < d; t++ {
			dot += float64(p.omega[s*d+t]) * p.mu64[g*d+t]
		}
		p.own[s] = dot - p.halfMu[g]
		top := math.Inf(-1)
		row := lp[s*c : (s+1)*c]
		for g2 := range row {
			top = max(top, float64(row[g2])-p.halfMu[g2])
		}
		var sum float64
		for g2 := range row {
			sum += math.Exp(float64(row[g2]) - p.halfMu[g2] - top)
		}
		p.beta[s] = math.Exp(p.own[s] - top - math.Log(sum))
	}
}

// keySide computes, per sample, E[j,s] = exp(k̃_j·ω_s − ½‖k̃_j‖² + b_j −
// max_j), Z_s, f_s = Σ_j E[j,s]·v_j / Z_s and the sample term log Z_s −
// ℓ_c(s)(ω_s).
func (p *laraHead) keySide() {
	r, d, dv, m := p.r, p.d, p.dv, len(p.lay.valid)
	kw := make([]float32, m*r)
	gemm.Sgemm(false, true, m, r, d, 1, p.ks, d, p.omega, d, 0, kw, r, 1)
	halfK := make([]float64, m)
	for jj := 0; jj < m; jj++ {
		halfK[jj] = sumSquares(p.ks[jj*d:(jj+1)*d])/2 - p.lay.bias[jj]
	}
	logZ := make([]float64, r)
	zinv := make([]float32, r)
	for s := 0; s < r; s++ {
		top := math.Inf(-1)
		for jj := 0; jj < m; jj++ {
			top = max(top, float64(kw[jj*r+s])-halfK[jj])
		}
		var z float64
		for jj := 0; jj < m; jj++ {
			e := math.Exp(float64(kw[jj*r+s]) - halfK[jj] - top)
			kw[jj*r+s] = float32(e)
			z += e
		}
		logZ[s] = math.Log(z) + top
		zinv[s] = float32(1 / z)
	}
	p.f = make([]float32, r*dv)
	gemm.Sgemm(true, false, r, dv, m, 1, kw, r, p.vs, dv, 0, p.f, dv, 1)
	for s := 0; s < r; s++ {
		for t := 0; t < dv; t++ {
			p.f[s*dv+t] *= zinv[s]
		}
	}
	p.sample = make([]float64, r)
	for s := range p.sample {
		p.sample[s] = logZ[s] - p.own[s]
	}
}

// querySide computes q̃_i·ω_s, τ_i = softmax_c(q̃_i·q̄_c), the normalised
// weights w and out = w·f into oh.
func (p *laraHead) querySide(oh []float32) {
	n, r, c, d, dv := p.n, p.r, p.c, p.d, p.dv
	invC := 1 / float64(c)
	qw := make([]float32, n*r)
	gemm.Sgemm(false, true, n, r, d, 1, p.qs, d, p.omega, d, 0, qw, r, 1)
	qt := make([]float32, n*c)
	gemm.Sgemm(false, true, n, c, d, 1, p.qs, d, p.qbar, d, 0, qt, c, 1)
	tau := make([]float64, c)
	lw := make([]float64, r)
	for i := 0; i < n; i++ {
		sum := expShifted(qt[i*c:(i+1)*c], tau)
		wrow := qw[i*r : (i+1)*r]
		top := math.Inf(-1)
		for s := range lw {
			alpha := max(p.beta[s]+tau[s/p.per]/sum-invC, 1e-8)
			lw[s] = math.Log(alpha) + float64(wrow[s]) + p.sample[s]
			top = max(top, lw[s])
		}
		var den float64
		for s := range lw {
			lw[s] = math.Exp(lw[s] - top)
			den += lw[s]
		}
		for s := range lw {
			wrow[s] = float32(lw[s] / den)
		}
	}
	gemm.Sgemm(false, false, n, dv, r, 1, qw, r, p.f, dv, 0, oh, dv, 1)
}

// expShifted sets e[g] = exp(x_g − max x) and returns Σ e.
func expShifted(x []float32, e []float64) float64 {
	top := math.Inf(-1)
	for _, v := range x {
		top = max(top, float64(v))
	}
	var sum float64
	for g, v := range x {
		e[g] = math.Exp(float64(v) - top)
		sum += e[g]
	}
	return sum
}

// NewLaraNode returns a LaraAttention node reading inputs (Q, K, V, Noise,
// key_bias) and writing output, with the attributes of a (Scale must not
// be zero).
func NewLaraNode(name string, inputs []string, output string, a LaraAttrs) *onnxpb.NodeProto {
	return laraSchema.node(name, inputs, output, &a)
}

// LaraFunction returns the FunctionProto that defines LaraAttention with
// standard ops of the default domain at opset (11..23). The landmark count
// of a is built into the body (the node still carries it for the Go
// kernel); the samples per landmark come from Noise's shape at run time.
// Its inputs are Q, K, V, Noise, key_bias (all required) and its attribute
// scale is read from the node.
//
// The body keeps memory linear in S: the largest tensors are [B,H,S,R] (the
// query and key sides) and [B,H,S,C] (τ); the landmark means come from a
// one-hot [S,C] product (2·C·D multiply-adds per token beyond the
// kernel's), with each token's rank among the valid keys from a CumSum, so
// they follow the actual length under padding. Padded rows of K and V are
// zeroed before any product, so that NaN there cannot leak.
func LaraFunction(opset int64, a LaraAttrs) (*onnxpb.FunctionProto, error) {
	b, err := newFnBuilder(LaraOp, opset, a.check)
	if err != nil {
		return nil, err
	}
	c := int64(a.Landmarks)
	masked := b.constFloat(-1e30)
	zero := b.constFloat(0)
	one := b.constFloat(1)
	half := b.constFloat(0.5)
	axis3 := b.constScalarInt(3)
	rs := b.op("Sqrt", []string{b.constFloatAttr("scale")})

	// Validity over the key axis: [Bm,1,1,S] and [Bm,1,S,1].
	shapeK := b.op("Shape", []string{"K"})
	sLen := b.op("Slice", []string{shapeK, b.constInts(2), b.constInts(3)})
	dK := b.op("Slice", []string{shapeK, b.constInts(3), b.constInts(4)})
	biasFull := b.op("Expand", []string{"key_bias", b.biasShape(sLen)})
	valid := b.op("Greater", []string{biasFull, b.constFloat(maskThreshold)})
	validT := b.transpose(valid, 0, 1, 3, 2)
	validF := b.op("Cast", []string{valid}, castFloat())
	validTF := b.transpose(validF, 0, 1, 3, 2)
	biasT := b.op("Where", []string{validT, b.transpose(biasFull, 0, 1, 3, 2), zero}) // [Bm,1,S,1]

	qs := b.op("Mul", []string{"Q", rs})
	qm := b.op("Where", []string{validT, qs, zero})
	km := b.op("Where", []string{validT, b.op("Mul", []string{"K", rs}), zero})
	vm := b.op("Where", []string{validT, "V", zero})

	// Landmark membership [Bm,1,S,C]: with m ≥ C the token of rank r is in
	// ⌊r·C/m⌋, with m < C landmark g is the token of rank ⌊g·m/C⌋.
	cF := b.constFloat(float32(c))
	m := b.reduce("ReduceSum", validF, 3) // [Bm,1,1,1]
	m1 := b.op("Max", []string{m, one})
	rank := b.transpose(b.op("CumSum", []string{validF, axis3}, attrInt("exclusive", 1)), 0, 1, 3, 2) // [Bm,1,S,1]
	ids := make([]float32, c)
	for g := range ids {
		ids[g] = float32(g)
	}
	gIDs := b.constFloatTensor([]int{int(c)}, ids)
	seg := b.op("Floor", []string{b.op("Div", []string{b.op("Mul", []string{rank, cF}), m1})})
	byRank := b.op("Floor", []string{b.op("Div", []string{b.op("Mul", []string{gIDs, m}), cF})}) // [Bm,1,1,C]
	few := b.op("Less", []string{m, cF})
	member := b.op("Or", []string{
		b.op("And", []string{few, b.op("Equal", []string{rank, byRank})}),
		b.op("And", []string{b.op("Not", []string{few}), b.op("Equal", []string{seg, gIDs})}),
	})
	onehot := b.op("Mul", []string{b.op("Cast", []string{member}, castFloat()), validTF}) // [Bm,1,S,C]
	onehotT := b.transpose(onehot, 0, 1, 3, 2)                                            // [Bm,1,C,S]
	inv := b.op("Div", []string{one, b.op("Max", []string{b.transpose(b.reduce("ReduceSum", onehot, 2), 0, 1, 3, 2), one})})
	qbar := b.op("Mul", []string{b.op("MatMul", []string{onehotT, qm}), inv}) // [B,H,C,D]
	kbar := b.op("Mul", []string{b.op("MatMul", []string{onehotT, km}), inv})
	mu := b.op("Add", []string{qbar, kbar})

	// Samples: repeat each landmark Sp = R/C times, add the noise.
	rLen := b.op("Slice", []string{b.op("Shape", []string{"Noise"}), b.constInts(1), b.constInts(2)})
	per := b.op("Div", []string{rLen, b.constInts(c)})
	mu5 := b.unsqueeze(mu, 3) // [B,H,C,1,D]
	shape5 := b.op("Concat", []string{b.op("Slice", []string{b.op("Shape", []string{mu}), b.constInts(0), b.constInts(3)}), per, dK}, attrInt("axis", 0))
	muRep := b.op("Reshape", []string{b.op("Expand", []string{mu5, shape5}), b.op("Concat", []string{b.constInts(0, 0, -1), dK}, attrInt("axis", 0))}) // [B,H,R,D]
	omega := b.op("Add", []string{muRep, "Noise"})
	omegaT := b.transpose(omega, 0, 1, 3, 2) // [B,H,D,R]

	// Proposal densities ℓ [B,H,R,C], own term and balance heuristic β.
	halfMu := b.op("Mul", []string{b.reduce("ReduceSum", b.op("Mul", []string{mu, mu}), 3), half}) // [B,H,C,1]
	lp := b.op("Sub", []string{b.op("MatMul", []string{omega, b.transpose(mu, 0, 1, 3, 2)}), b.transpose(halfMu, 0, 1, 3, 2)})
	lmax := b.reduce("ReduceMax", lp, 3)
	lse := b.op("Add", []string{b.op("Log", []string{b.reduce("ReduceSum", b.op("Exp", []string{b.op("Sub", []string{lp, lmax})}), 3)}), lmax}) // [B,H,R,1]
	halfRep := b.op("Reshape", []string{b.op("Expand", []string{b.unsqueeze(halfMu, 3), b.op("Concat", []string{b.op("Slice", []string{b.op("Shape", []string{mu}), b.constInts(0), b.constInts(3)}), per, b.constInts(1)}, attrInt("axis", 0))}), b.constInts(0, 0, -1, 1)})
	own := b.op("Sub", []string{b.reduce("ReduceSum", b.op("Mul", []string{omega, muRep}), 3), halfRep}) // [B,H,R,1]
	beta := b.transpose(b.op("Exp", []string{b.op("Sub", []string{own, lse})}), 0, 1, 3, 2)              // [B,H,1,R]

	// Key side.
	halfK := b.op("Sub", []string{b.op("Mul", []string{b.reduce("ReduceSum", b.op("Mul", []string{km, km}), 3), half}), biasT}) // [B,H,S,1]
	lk := b.op("Where", []string{validT, b.op("Sub", []string{b.op("MatMul", []string{km, omegaT}), halfK}), masked})           // [B,H,S,R]
	mk := b.reduce("ReduceMax", lk, 2)                                                                                          // [B,H,1,R]
	e := b.op("Mul", []string{b.op("Exp", []string{b.op("Sub", []string{lk, mk})}), validTF})
	z := b.op("Max", []string{b.reduce("ReduceSum", e, 2), b.constFloat(1e-30)}) // [B,H,1,R]
	f := b.op("Div", []string{b.op("MatMul", []string{b.transpose(e, 0, 1, 3, 2), vm}), b.transpose(z, 0, 1, 3, 2)})
	sampleTerm := b.op("Sub", []string{b.op("Add", []string{b.op("Log", []string{z}), mk}), b.transpose(own, 0, 1, 3, 2)}) // [B,H,1,R]

	// Query side: τ, α and the self-normalised weights.
	ts := b.op("MatMul", []string{qs, b.transpose(qbar, 0, 1, 3, 2)}) // [B,H,S,C]
	te := b.op("Exp", []string{b.op("Sub", []string{ts, b.reduce("ReduceMax", ts, 3)})})
	tau := b.op("Div", []string{te, b.reduce("ReduceSum", te, 3)})
	shapeT := b.op("Concat", []string{b.op("Slice", []string{b.op("Shape", []string{tau}), b.constInts(0), b.constInts(4)}), per}, attrInt("axis", 0))
	tauRep := b.op("Reshape", []string{b.op("Expand", []string{b.unsqueeze(tau, 4), shapeT}), b.constInts(0, 0, 0, -1)}) // [B,H,S,R]
	alpha := b.op("Max", []string{b.op("Sub", []string{b.op("Add", []string{tauRep, beta}), b.constFloat(float32(1 / float64(c)))}), b.constFloat(1e-8)})
	lw := b.op("Add", []string{b.op("Add", []string{b.op("Log", []string{alpha}), b.op("MatMul", []string{qs, omegaT})}), sampleTerm})
	w := b.op("Exp", []string{b.op("Sub", []string{lw, b.reduce("ReduceMax", lw, 3)})})
	b.op("Div", []string{b.op("MatMul", []string{w, f}), b.reduce("ReduceSum", w, 3)})
	b.rename("out")
	return laraSchema.function(b, laraDoc, len(laraSchema.Inputs)), nil
}

// unsqueeze inserts a size-1 axis at axis (attribute before opset 13, input
// from 13).
func (b *fnBuilder) unsqueeze(x string, axis int64) string {
	if b.opset >= 13 {
		return b.op("Unsqueeze", []string{x, b.constInts(axis)})
	}
	return b.op("Unsqueeze", []string{x}, attrInts("axes", axis))
}
