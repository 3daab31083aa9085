package ops

import (
	"fmt"
	"math"

	"github.com/linearize/linearize/internal/gemm"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// LinformerAttention (domain ai.linearize, version 1) attends to k learned
// (or random) mixtures of the keys and values.
//
// Inputs: Q [B,H,Sq,D], K [B,H,Sk,D], V [B,H,Sk,Dv], E [H or 1,k,N],
// F [H or 1,k,N] (F may be the same initializer as E), key_bias [B or
// 1,1,1,Sk or 1] (optional in the Go kernel, always passed to the function
// body). Output [B,H,Sq,Dv]. Attribute scale (default 1/√D in the Go
// kernel; the converter always sets it).
//
// With Es = E[:, :, :Sk] and Fs = F[:, :, :Sk] (Sk ≤ N; Sk > N is an
// error), keys and values whose bias is ≤ −1e4 (or −Inf, NaN) zeroed, and
// the bias otherwise not applied:
//
//	Kp = Es·K, Vp = Fs·V, out = softmax(scale·Q·Kpᵀ)·Vp.
//
// The function body cannot raise a readable error for Sk > N: onnxruntime
// then fails with a MatMul shape mismatch inside the function.
const linformerDoc = "LinformerAttention: low-rank projected attention (see github.com/linearize/linearize/ops)."

// LinformerAttrs are the attributes of LinformerAttention. A zero Scale
// selects 1/√D.
type LinformerAttrs struct {
	Scale float32
	// Threads bounds the goroutines the Go kernel uses (not an attribute).
	Threads int
}

func init() {
	Register(Domain, LinformerOp, 1, halfWidened(linformerKernel))
}

func linformerKernel(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	bias, err := attentionBias(ctx, LinformerOp, in, 5)
	if err != nil {
		return nil, err
	}
	var a LinformerAttrs
	if ctx != nil && ctx.Node != nil {
		a.Scale = onnx.AttrFloat(ctx.Node, "scale", 0)
		a.Threads = ctx.Threads
	}
	out, err := Linformer(in[0], in[1], in[2], in[3], in[4], bias, a)
	return attentionOut(ctx, out, err)
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
// definition above). bias may be nil.
func Linformer(q, k, v, e, f, bias *onnx.Tensor, a LinformerAttrs) (*onnx.Tensor, error) {
	const op = LinformerOp
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
		return nil, fmt.Errorf("ops: %s: projections of %d rows × %d would exceed %d elements", op, kk, max(sq, d, dv), maxElements)
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
	parallel(b*h, a.Threads, func(bh int) {
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
// V, E, F, key_bias) and writing output, with scale set explicitly (it must
// not be zero).
func NewLinformerNode(name string, inputs []string, output string, a LinformerAttrs) *onnxpb.NodeProto {
	return &onnxpb.NodeProto{
		Name:      proto.String(name),
		OpType:    proto.String(LinformerOp),
		Domain:    proto.String(Domain),
		Input:     append([]string(nil), inputs...),
		Output:    []string{output},
		Attribute: []*onnxpb.AttributeProto{attrFloat("scale", a.Scale)},
	}
}

// LinformerFunction returns the FunctionProto that defines
// LinformerAttention with standard ops of the default domain at opset
// (11..23; use the model's own default-domain opset). Its inputs are Q, K,
// V, E, F, key_bias (all required) and its attribute scale (required).
func LinformerFunction(opset int64) (*onnxpb.FunctionProto, error) {
	if err := checkOpset(LinformerOp, opset); err != nil {
		return nil, err
	}
	b := &fnBuilder{opset: opset}
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
	return b.function(LinformerOp, linformerDoc,
		[]string{"Q", "K", "V", "E", "F", "key_bias"}, []string{"out"},
		[]string{"scale"}, nil), nil
}
