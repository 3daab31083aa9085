package ops

import (
	"fmt"
	"math"

	"github.com/linearize/linearize/internal/gemm"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// PerformerAttention (domain ai.linearize, version 1) approximates softmax
// attention with random features (FAVOR+).
//
// Inputs: Q [B,H,Sq,D], K [B,H,Sk,D], V [B,H,Sk,Dv], Omega [H or 1,M,D],
// key_bias [B or 1,1,1,Sk or 1] (optional in the Go kernel, always passed to
// the function body; see linear_function.go). Output [B,H,Sq,Dv].
//
// With x̃ = x·√scale, u = Omega·x̃ and h = ‖x̃‖²/2, the positive kernel uses
//
//	φ(q) = exp(u − h − max_features(u − h)) / √M
//	φ(k) = exp(u − h + b − max_{valid keys, features}(u − h + b)) / √M
//
// with one key maximum per (batch, head), and the trig kernel uses 2M
// features
//
//	φ(q) = [cos u, sin u] / √M
//	φ(k) = [cos u, sin u]·exp(h + b − max_{valid keys}(h + b)) / √M.
//
// (The query factor exp(h) of the trig estimator is constant per row and
// cancels.) Both give out = φ(Q)·(φ(K)ᵀV) / (max(φ(Q)·φ(K)ᵀ1, 0) + epsilon):
// the maxima cancel in the ratio and only prevent overflow; the max(·, 0)
// is a no-op for the positive kernel and keeps the trig estimator's
// negative denominators from producing infinities. Keys with bias ≤ −1e4
// (or −Inf, or NaN) have φ(k) = 0 exactly.
const performerDoc = "PerformerAttention: FAVOR+ linear attention (see github.com/linearize/linearize/ops)."

// Performer kernels.
const (
	KernelPositive = "positive"
	KernelTrig     = "trig"
)

// PerformerAttrs are the attributes of PerformerAttention. Zero values
// select the defaults: Scale 1/√D, Kernel "positive", Epsilon 1e-6.
type PerformerAttrs struct {
	Scale   float32
	Kernel  string
	Epsilon float32
	// Threads bounds the goroutines the Go kernel uses (not an attribute).
	Threads int
}

const defaultEpsilon = 1e-6

func init() {
	Register(Domain, PerformerOp, 1, performerKernel)
}

func performerKernel(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if len(in) < 4 || len(in) > 5 {
		return nil, fmt.Errorf("ops: %s%s: got %d inputs, want 4 or 5", PerformerOp, nodeName(ctx), len(in))
	}
	var a PerformerAttrs
	if ctx != nil && ctx.Node != nil {
		a.Scale = onnx.AttrFloat(ctx.Node, "scale", 0)
		a.Kernel = onnx.AttrString(ctx.Node, "kernel", KernelPositive)
		a.Epsilon = onnx.AttrFloat(ctx.Node, "epsilon", defaultEpsilon)
		a.Threads = ctx.Threads
	}
	var bias *onnx.Tensor
	if len(in) == 5 {
		bias = in[4]
	}
	out, err := Performer(in[0], in[1], in[2], in[3], bias, a)
	if err != nil {
		if n := nodeName(ctx); n != "" {
			return nil, fmt.Errorf("%w (%s)", err, n[1:])
		}
		return nil, err
	}
	return []*onnx.Tensor{out}, nil
}

// Performer computes PerformerAttention in float32 (see the op's
// definition above). bias may be nil.
func Performer(q, k, v, omega, bias *onnx.Tensor, a PerformerAttrs) (*onnx.Tensor, error) {
	const op = PerformerOp
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
	mask, err := newKeyMask(op, bias, b, sk)
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
	rs := float32(math.Sqrt(float64(scale)))

	out := make([]float32, b*h*sq*dv)
	qd, kd, vd, od := q.Floats(), k.Floats(), v.Floats(), omega.Floats()
	nf := m // features per token
	if kernel == KernelTrig {
		nf = 2 * m
	}
	invSqrtM := float32(1 / math.Sqrt(float64(m)))
	parallel(b*h, a.Threads, func(bh int) {
		bi, hi := bh/h, bh%h
		om := od
		if ho > 1 {
			om = od[hi*m*d : (hi+1)*m*d]
		}
		qs := qd[bh*sq*d : (bh+1)*sq*d]
		ks := kd[bh*sk*d : (bh+1)*sk*d]
		vs := vd[bh*sk*dv : (bh+1)*sk*dv]
		phiQ := features(qs, sq, d, om, m, rs, kernel, false, mask, bi, invSqrtM)
		phiK := features(ks, sk, d, om, m, rs, kernel, true, mask, bi, invSqrtM)
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
		o := out[bh*sq*dv : (bh+1)*sq*dv]
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
	})
	return onnx.NewFloat([]int{b, h, sq, dv}, out), nil
}

// features returns the [s, nf] feature matrix of the rows x [s, d]: keys of
// batch bi (stabilised by one maximum over the valid keys, masked keys
// zero) or queries (stabilised per row).
func features(x []float32, s, d int, om []float32, m int, rs float32, kernel string, isKey bool, mask *keyMask, bi int, invSqrtM float32) []float32 {
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
	// Positive kernel. For a query row, h is constant over the features
	// and cancels against the row maximum: φ(q) = exp(u − max u)/√M.
	if !isKey {
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
	// Keys: t = u − h + b, one maximum over the valid keys.
	top := float32(math.Inf(-1))
	for i := 0; i < s; i++ {
		bv, ok := valid(i)
		if !ok {
			continue
		}
		c := hh[i] - bv
		row := u[i*m : (i+1)*m]
		for j, t := range row {
			t -= c
			row[j] = t
			top = max(top, t)
		}
	}
	for i := 0; i < s; i++ {
		row := u[i*m : (i+1)*m]
		if _, ok := valid(i); !ok {
			clear(row)
			continue
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
// V, Omega, key_bias) and writing output, with the attributes set
// explicitly (scale resolved by the caller; it must not be zero).
func NewPerformerNode(name string, inputs []string, output string, a PerformerAttrs) *onnxpb.NodeProto {
	kernel := a.Kernel
	if kernel == "" {
		kernel = KernelPositive
	}
	eps := a.Epsilon
	if eps == 0 {
		eps = defaultEpsilon
	}
	return &onnxpb.NodeProto{
		Name:   proto.String(name),
		OpType: proto.String(PerformerOp),
		Domain: proto.String(Domain),
		Input:  append([]string(nil), inputs...),
		Output: []string{output},
		Attribute: []*onnxpb.AttributeProto{
			attrFloat("scale", a.Scale),
			attrString("kernel", kernel),
			attrFloat("epsilon", eps),
		},
	}
}

// PerformerFunction returns the FunctionProto that defines
// PerformerAttention with standard ops of the default domain at opset
// (11..23; use the model's own default-domain opset), for one kernel
// ("positive" or "trig"). Its inputs are Q, K, V, Omega, key_bias (all
// required), its attributes scale (required), kernel (ignored by the body)
// and epsilon (default 1e-6).
func PerformerFunction(kernel string, opset int64) (*onnxpb.FunctionProto, error) {
	if kernel == "" {
		kernel = KernelPositive
	}
	if kernel != KernelPositive && kernel != KernelTrig {
		return nil, fmt.Errorf("ops: %s function: kernel %q, want %q or %q", PerformerOp, kernel, KernelPositive, KernelTrig)
	}
	if err := checkOpset(PerformerOp, opset); err != nil {
		return nil, err
	}
	b := &fnBuilder{opset: opset}
	// The body is arranged to touch the [.., S, M] feature tensors as few
	// times as possible, since at moderate lengths those elementwise passes,
	// not the products, decide whether Performer beats exact attention:
	//   - √scale is folded into Ω (tiny) instead of Q and K;
	//   - for queries h and the row max cancel: u − h − max(u − h) = u − max(u);
	//   - 1/√M on φ(Q) and φ(K) scales numerator and denominator by 1/M,
	//     so it is dropped and ε is multiplied by M instead (exactly equal);
	//   - key features are built transposed, [B,H,M,Sk], from Kᵀ (small),
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
	var phiQ, phiKT string
	if kernel == KernelPositive {
		phiQ = b.op("Exp", []string{b.op("Sub", []string{uq, b.reduce("ReduceMax", uq, -1)})})
		// u − h + b, with padded keys' bias replaced (in the small
		// [B,1,1,Sk] tensor) by −1e30 so they never set the maximum and
		// stay finite; their rows of [V, 1] are zero, so they add nothing.
		safeBias := b.op("Where", []string{valid, "key_bias", b.constFloat(-1e30)})
		tk := b.op("Sub", []string{ukT, b.op("Sub", []string{hkT, safeBias})})
		top := b.reduce("ReduceMax", tk, 2, 3)
		phiKT = b.op("Exp", []string{b.op("Sub", []string{tk, top})})
	} else {
		phiQ = b.op("Concat", []string{b.op("Cos", []string{uq}), b.op("Sin", []string{uq})}, attrInt("axis", -1))
		g := b.op("Where", []string{valid, b.op("Add", []string{hkT, "key_bias"}), negMax}) // [B,H,1,Sk]
		top := b.reduce("ReduceMax", g, 2, 3)
		fk := b.op("Exp", []string{b.op("Sub", []string{g, top})})
		cs := b.op("Concat", []string{b.op("Cos", []string{ukT}), b.op("Sin", []string{ukT})}, attrInt("axis", 2))
		phiKT = b.op("Mul", []string{cs, fk})
	}
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
	return b.function(PerformerOp, performerDoc+" kernel="+kernel,
		[]string{"Q", "K", "V", "Omega", "key_bias"}, []string{"out"},
		[]string{"scale", "kernel"},
		[]*onnxpb.AttributeProto{attrFloat("epsilon", defaultEpsilon)}), nil
}
