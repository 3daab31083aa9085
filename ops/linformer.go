package ops

import (
	"fmt"
	"math"

	"github.com/linearize/linearize/internal/gemm"
	"github.com/linearize/linearize/kernels"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// LinformerAttention (domain ai.linearize, version 1) attends to k
// mixtures of the keys and values: frozen projections E, F given as
// inputs, or, in the pooled mode, the means of k contiguous segments of
// each sequence's valid keys computed at run time.
//
// Inputs: Q [B,H,Sq,D], K [B,H,Sk,D], V [B,H,Sk,Dv], E [H or 1,k,N],
// F [H or 1,k,N] (F may be the same initializer as E; both absent in the
// pooled mode), key_bias [B or 1,1,1,Sk or 1] (optional in the Go kernel,
// always passed to the function body). Output [B,H,Sq,Dv]. Attributes:
// scale (default 1/√D in the Go kernel; the converter always sets it),
// segments (0: E and F given; k ≥ 1: the pooled mode) and sinks (pooled
// mode only).
//
// With E and F, Es = E[:, :, :Sk] and Fs = F[:, :, :Sk] (Sk ≤ N; Sk > N is
// an error), keys and values whose bias is ≤ −1e4 (or −Inf, NaN) zeroed,
// and the bias otherwise not applied:
//
//	Kp = Es·K, Vp = Fs·V, out = softmax(scale·Q·Kpᵀ)·Vp.
//
// The function body cannot raise a readable error for Sk > N: onnxruntime
// then fails with a MatMul shape mismatch inside the function.
//
// The pooled mode (segments = k ≥ 1, E and F absent) is
// LocalPooledAttention without local blocks: the sinks (the first and/or
// last valid key) are kept exact, the other m valid keys fall into k
// contiguous segments (rank r in ⌊r·k/m⌋, so the segments follow each
// sequence's actual length), and each segment c scores as the pooled key
// k̄_c with scale·q·k̄_c + log |S_c|, weighing the mean value v̄_c, in one
// softmax with the sinks. It has no maximum length, and its queries may be
// another sequence than its keys. The Go kernel and the function body are
// LocalPooledAttention's with Block 0.
const linformerDoc = "LinformerAttention: low-rank projected attention, frozen E/F or run-time segment means (see github.com/linearize/linearize/ops)."

// LinformerAttrs are the attributes of LinformerAttention. A zero Scale
// selects 1/√D.
type LinformerAttrs struct {
	Scale float32
	// Segments is k of the pooled mode (E and F absent); 0 is the mode
	// with E and F.
	Segments int
	// SinkFirst and SinkLast keep the first and the last valid key exact
	// (pooled mode only).
	SinkFirst, SinkLast bool
	// Threads bounds the goroutines the Go kernel uses (not an attribute).
	Threads int
}

// Pooled reports whether a selects the pooled mode.
func (a LinformerAttrs) Pooled() bool { return a.Segments > 0 }

// Sinks returns the sinks attribute value.
func (a LinformerAttrs) Sinks() string { return sinksValue(a.SinkFirst, a.SinkLast) }

// pooled is the LocalPooledAttention the pooled mode computes.
func (a LinformerAttrs) pooled() LocalPooledAttrs {
	return LocalPooledAttrs{Scale: a.Scale, Segments: a.Segments, SinkFirst: a.SinkFirst, SinkLast: a.SinkLast, Threads: a.Threads}
}

// linformerSchema is LinformerAttention's schema.
var linformerSchema = newSchema(OpSchema{
	Op: LinformerOp, Doc: linformerDoc, File: "ops/linformer.go",
	Inputs: qkvInputs(crossQKV,
		InputSchema{Name: "E", Optional: true, Doc: "key projection [H or 1,k,N], N ≥ Sk (absent in the pooled mode)"},
		InputSchema{Name: "F", Optional: true, Doc: "value projection [H or 1,k,N], may be E (absent in the pooled mode)"},
		keyBiasInput,
	),
	Output: "[B,H,Sq,Dv]",
}, func(a *LinformerAttrs) *int { return &a.Threads },
	scaleField(scaleDoc, func(a *LinformerAttrs) *float32 { return &a.Scale }),
	intField(AttrSchema{Name: "segments", Default: int64(0), Min: 0, Max: MaxSegments,
		Doc: "0: E and F are inputs; k ≥ 1: the pooled mode (E, F absent), where " + segmentsDoc}, func(a *LinformerAttrs) *int { return &a.Segments }),
	sinksField("pooled mode: "+sinksDoc, func(a *LinformerAttrs) (*bool, *bool) { return &a.SinkFirst, &a.SinkLast }),
)

func (a LinformerAttrs) check() error {
	if err := linformerSchema.check(&a); err != nil {
		return err
	}
	if !a.Pooled() && (a.SinkFirst || a.SinkLast) {
		return fmt.Errorf("ops: %s: sinks %q need the pooled mode (segments ≥ 1)", LinformerOp, a.Sinks())
	}
	return nil
}

func init() {
	linformerSchema.register(func(a LinformerAttrs, in []*onnx.Tensor) (*onnx.Tensor, error) {
		return Linformer(in[0], in[1], in[2], in[3], in[4], in[5], a)
	})
}

// IsPooledLinformer reports whether n is a LinformerAttention node in the
// pooled mode (segments ≥ 1).
func IsPooledLinformer(n *onnxpb.NodeProto) bool {
	return n.GetDomain() == Domain && n.GetOpType() == LinformerOp && onnx.AttrInt(n, "segments", 0) > 0
}

// ComputedOp is the custom op node n computes: its op type, but
// LocalPooledAttention (without local blocks) for a pooled
// LinformerAttention node (IsPooledLinformer), which the fine-tuner fits
// as that op.
func ComputedOp(n *onnxpb.NodeProto) string {
	if IsPooledLinformer(n) {
		return LocalPooledOp
	}
	return n.GetOpType()
}

// PooledAttrs returns the LocalPooledAttention node n computes and the
// index of its key_bias input: a LocalPooledAttention node's attributes,
// or for a pooled LinformerAttention node its LocalPooledAttention
// without local blocks (the fine-tuner fits both alike).
func PooledAttrs(n *onnxpb.NodeProto) (a LocalPooledAttrs, keyBias int, err error) {
	switch {
	case n.GetDomain() == Domain && n.GetOpType() == LocalPooledOp:
		a, err = ParseLocalPooledAttrs(n)
		return a, 3, err
	case IsPooledLinformer(n):
		la, err := linformerSchema.parse(n)
		return la.pooled(), 5, err
	}
	return a, 0, fmt.Errorf("ops: node %q (%s) is neither %s nor a pooled %s", n.GetName(), n.GetOpType(), LocalPooledOp, LinformerOp)
}

func checkProjection(name string, t *onnx.Tensor, h int) (hp, k, n int, err error) {
	if t == nil || t.DType != onnx.Float || len(t.Shape) != 3 || len(t.Floats()) != t.Len() {
		return 0, 0, 0, fmt.Errorf("ops: %s: %s must be float32 [H or 1, k, N], got %v", LinformerOp, name, t)
	}
	hp, k, n = t.Shape[0], t.Shape[1], t.Shape[2]
	if (hp != 1 && hp != h) || k < 1 {
		return 0, 0, 0, fmt.Errorf("ops: %s: %s shape %v, want [%d or 1, k ≥ 1, N]", LinformerOp, name, t.Shape, h)
	}
	return hp, k, n, nil
}

// Linformer computes LinformerAttention in float32 (see the op's
// definition above; the pooled mode with float64 sums). bias may be nil,
// and e and f are nil in the pooled mode.
func Linformer(q, k, v, e, f, bias *onnx.Tensor, a LinformerAttrs) (*onnx.Tensor, error) {
	const op = LinformerOp
	if err := a.check(); err != nil {
		return nil, err
	}
	if a.Pooled() {
		if e != nil || f != nil {
			return nil, fmt.Errorf("ops: %s: segments %d selects the pooled mode: E and F must be absent", op, a.Segments)
		}
		return localPooled(op, q, k, v, bias, a.pooled())
	}
	b, h, sq, sk, d, dv, err := attnDims(op, q, k, v)
	if err != nil {
		return nil, err
	}
	he, kk, n, err := checkProjection("E", e, h)
	if err != nil {
		return nil, err
	}
	hf, kf, nf, err := checkProjection("F", f, h)
	if err != nil {
		return nil, err
	}
	if kf != kk || nf != n {
		return nil, fmt.Errorf("ops: %s: F shape %v does not match E shape %v", op, f.Shape, e.Shape)
	}
	if !fits(kk, max(sq, d, dv)) {
		return nil, fmt.Errorf("ops: %s: projections of %d rows × %d would exceed %d elements", op, kk, max(sq, d, dv), kernels.MaxElements)
	}
	if sk > n {
		return nil, fmt.Errorf("ops: %s: sequence length %d exceeds the projections' maximum length N = %d (convert with a larger --max-len)", op, sk, n)
	}
	mask, err := newKeyMask(op, bias, b, sk)
	if err != nil {
		return nil, err
	}
	scale := resolveScale(a.Scale, d)
	if math.IsNaN(float64(scale)) || math.IsInf(float64(scale), 0) {
		return nil, fmt.Errorf("ops: %s: scale %g must be finite", op, scale)
	}
	qd, kd, vd, ed, fd := q.Floats(), k.Floats(), v.Floats(), e.Floats(), f.Floats()
	out := make([]float32, b*h*sq*dv)
	kernels.Parallel(b*h, a.Threads, func(bh int) {
		bi, hi := bh/h, bh%h
		es, fs := ed, fd
		if he > 1 {
			es = ed[hi*kk*n : (hi+1)*kk*n]
		}
		if hf > 1 {
			fs = fd[hi*kk*n : (hi+1)*kk*n]
		}
		km := append([]float32(nil), kd[bh*sk*d:(bh+1)*sk*d]...)
		vm := append([]float32(nil), vd[bh*sk*dv:(bh+1)*sk*dv]...)
		for j := 0; j < sk; j++ {
			if _, ok := mask.at(bi, j); !ok {
				clear(km[j*d : (j+1)*d])
				clear(vm[j*dv : (j+1)*dv])
			}
		}
		// E[:, :sk] is the leading sk columns of each row: lda = n.
		kp := make([]float32, kk*d)
		gemm.Sgemm(false, false, kk, d, sk, 1, es, n, km, d, 0, kp, d, 1)
		vp := make([]float32, kk*dv)
		gemm.Sgemm(false, false, kk, dv, sk, 1, fs, n, vm, dv, 0, vp, dv, 1)
		p := make([]float32, sq*kk)
		gemm.Sgemm(false, true, sq, kk, d, scale, qd[bh*sq*d:(bh+1)*sq*d], d, kp, d, 0, p, kk, 1)
		for i := 0; i < sq; i++ {
			softmaxRow(p[i*kk : (i+1)*kk])
		}
		gemm.Sgemm(false, false, sq, dv, kk, 1, p, kk, vp, dv, 0, out[bh*sq*dv:(bh+1)*sq*dv], dv, 1)
	})
	return onnx.NewFloat([]int{b, h, sq, dv}, out), nil
}

// softmaxRow replaces x by softmax(x).
func softmaxRow(x []float32) {
	top := x[0]
	for _, v := range x[1:] {
		top = max(top, v)
	}
	var sum float64
	for i, v := range x {
		e := math.Exp(float64(v - top))
		x[i] = float32(e)
		sum += e
	}
	inv := float32(1 / sum)
	for i := range x {
		x[i] *= inv
	}
}

// NewLinformerNode returns a LinformerAttention node reading inputs (Q, K,
// V, E, F, key_bias; E and F "" in the pooled mode) and writing output,
// with the attributes of a that differ from their defaults (Scale is
// always written and must not be zero).
func NewLinformerNode(name string, inputs []string, output string, a LinformerAttrs) *onnxpb.NodeProto {
	return linformerSchema.node(name, inputs, output, &a)
}

// LinformerFunction returns the FunctionProto that defines
// LinformerAttention with standard ops of the default domain at opset
// (11..23; use the model's own default-domain opset). Its inputs are Q, K,
// V, E, F, key_bias (all required) and its attribute scale (required).
func LinformerFunction(opset int64) (*onnxpb.FunctionProto, error) {
	b, err := newFnBuilder(LinformerOp, opset)
	if err != nil {
		return nil, err
	}
	scale := b.constFloatAttr("scale")
	sk := b.op("Slice", []string{b.op("Shape", []string{"K"}), b.constInts(2), b.constInts(3)})
	zeros := b.constInts(0)
	axis2 := b.constInts(2)
	es := b.op("Slice", []string{"E", zeros, sk, axis2}) // [H,k,Sk]
	fs := b.op("Slice", []string{"F", zeros, sk, axis2})
	biasT := b.transpose("key_bias", 0, 1, 3, 2) // [B,1,Sk,1]
	valid := b.op("Greater", []string{biasT, b.constFloat(maskThreshold)})
	zero := b.constFloat(0)
	km := b.op("Where", []string{valid, "K", zero})
	vm := b.op("Where", []string{valid, "V", zero})
	kp := b.op("MatMul", []string{es, km}) // [B,H,k,D]
	vp := b.op("MatMul", []string{fs, vm}) // [B,H,k,Dv]
	scores := b.op("Mul", []string{b.op("MatMul", []string{"Q", b.transpose(kp, 0, 1, 3, 2)}), scale})
	p := b.op("Softmax", []string{scores}, attrInt("axis", -1))
	b.op("MatMul", []string{p, vp})
	b.rename("out")
	return linformerSchema.function(b, linformerDoc, len(linformerSchema.Inputs)), nil
}

// LinformerFunctionFor returns the FunctionProto that defines
// LinformerAttention for nodes with the attributes a at opset (11..23):
// LinformerFunction's body with E and F, or in the pooled mode
// LocalPooledAttention's body without local blocks (segments and sinks of
// a built in; E and F declared and unused, so that nodes pass "" for
// them). Its inputs are Q, K, V, E, F, key_bias.
func LinformerFunctionFor(opset int64, a LinformerAttrs) (*onnxpb.FunctionProto, error) {
	if !a.Pooled() {
		if err := a.check(); err != nil {
			return nil, err
		}
		return LinformerFunction(opset)
	}
	doc := fmt.Sprintf("%s segments=%d sinks=%s", linformerDoc, a.Segments, a.Sinks())
	return localPooledFunction(linformerSchema, doc, opset, a.check, a.pooled())
}
