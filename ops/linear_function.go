package ops

// This file holds what the custom ops share: the domain, the contract
// with the converters, the key mask and shape checks of the Go kernels, and
// a small builder for the ONNX FunctionProtos that define the ops in terms
// of standard ops (each op's signature is its schema, schema.go).
//
// How a converter uses the ops (the contract with package convert):
//
//   - Import the domain: opset_import {domain "ai.linearize", version 1}
//     (ImportFunction does this).
//   - Add one function definition per op type to ModelProto.functions,
//     built for the model's default-domain opset (PerformerFunctionFor,
//     LinformerFunctionFor, LocalPooledFunction, HedgehogFunction,
//     LaraFunction). The function body imports the default domain at
//     exactly that version, so the model and the function agree; opsets 11
//     to 23 are supported.
//   - The node (NewPerformerNode and the others) passes key_bias always.
//     When the graph has no padding mask the converter passes a zero
//     [1,1,1,1] float initializer. Model-local functions cannot test
//     whether an optional input is present, so the function body requires
//     it; the Go kernels accept a nil bias. An input a body does not read
//     may be "" (E and F of the pooled Linformer).
//   - scale is always set on the node (the function declares it without a
//     default, because the default 1/√D depends on the input shape), as
//     are the required attributes (LARA's landmarks, WindowAttention's
//     widths). The other attributes are left off the node at their
//     defaults, which the function declares (attribute_proto) and the Go
//     kernel reads from the schema; a list attribute without a default
//     (far_bias, alibi) is declared with an empty list, which the body
//     never reads. Attribute defaults need IR version 9: ImportFunction
//     raises a model's ir_version to FunctionIRVersion.
//   - Attributes that select a body (Performer's kernel, center and
//     features; the blocks, segments and sinks of LocalPooledAttention and
//     of the pooled Linformer; Hedgehog's block, reach and causal) are
//     built into the function at conversion time, so one model uses one
//     configuration of each op throughout. The node still carries them for
//     the Go kernel, and the function declares (and ignores) them. The same
//     holds for Performer's optional balance_q, balance_k, derf_a inputs
//     (PerformerFunctionFor builds the body of one PerformerVariant; its
//     input list is exactly the inputs the variant's nodes pass).

import (
	"fmt"
	"math"
	"strconv"

	"github.com/linearize/linearize/kernels"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// Domain is the ONNX domain of linearize's custom ops, at version 1.
const Domain = "ai.linearize"

// DomainVersion is the opset version of Domain that models must import.
const DomainVersion = 1

// Op types of the custom ops.
const (
	PerformerOp = "PerformerAttention"
	LinformerOp = "LinformerAttention"
)

// Range of default-domain opsets the function bodies can be built for.
const (
	MinFunctionOpset = 11
	MaxFunctionOpset = 23
)

// maskThreshold: a key whose additive bias is at or below this value is
// padding and contributes exactly zero.
const maskThreshold = -1e4

// FunctionIRVersion is the lowest IR version of a model whose functions
// declare attribute defaults (FunctionProto.attribute_proto, IR 9).
const FunctionIRVersion = 9

// ImportFunction adds fn to m.Functions unless a function with the same
// domain, name and overload is already there (then it returns an error if
// the two differ), and makes m import fn's domain at DomainVersion. A
// model below FunctionIRVersion is raised to it when fn declares attribute
// defaults, which every op's function does.
func ImportFunction(m *onnxpb.ModelProto, fn *onnxpb.FunctionProto) error {
	if len(fn.AttributeProto) > 0 && m.GetIrVersion() < FunctionIRVersion {
		m.IrVersion = proto.Int64(FunctionIRVersion)
	}
	dup := false
	for _, f := range m.Functions {
		if f.GetDomain() == fn.GetDomain() && f.GetName() == fn.GetName() && f.GetOverload() == fn.GetOverload() {
			if !proto.Equal(f, fn) {
				return fmt.Errorf("ops: model already defines a different function %s.%s", fn.GetDomain(), fn.GetName())
			}
			dup = true
		}
	}
	if !dup {
		m.Functions = append(m.Functions, fn)
	}
	if v := onnx.OpsetVersion(m, fn.GetDomain()); v == 0 {
		m.OpsetImport = append(m.OpsetImport, &onnxpb.OperatorSetIdProto{Domain: proto.String(fn.GetDomain()), Version: proto.Int64(DomainVersion)})
	} else if v != DomainVersion {
		return fmt.Errorf("ops: model imports %s version %d, want %d", fn.GetDomain(), v, DomainVersion)
	}
	return nil
}

// fnBuilder accumulates the nodes of a function body with fresh value names.
type fnBuilder struct {
	opset int64
	nodes []*onnxpb.NodeProto
	n     int
}

func (b *fnBuilder) fresh(base string) string {
	b.n++
	return base + "_" + strconv.Itoa(b.n)
}

// op appends a node and returns its single output.
func (b *fnBuilder) op(opType string, inputs []string, attrs ...*onnxpb.AttributeProto) string {
	out := b.fresh(opType)
	b.nodes = append(b.nodes, &onnxpb.NodeProto{
		OpType:    proto.String(opType),
		Input:     inputs,
		Output:    []string{out},
		Attribute: attrs,
	})
	return out
}

// rename makes the last node write name instead of its fresh output.
func (b *fnBuilder) rename(name string) {
	b.nodes[len(b.nodes)-1].Output[0] = name
}

func attrInts(name string, v ...int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INTS.Enum(), Ints: v}
}

func attrInt(name string, v int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(v)}
}

func attrFloat(name string, v float32) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_FLOAT.Enum(), F: proto.Float32(v)}
}

func attrString(name, v string) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_STRING.Enum(), S: []byte(v)}
}

// constFloat emits a scalar float constant.
func (b *fnBuilder) constFloat(v float32) string {
	if b.opset < 12 { // value_float arrived in Constant-12
		return b.op("Constant", nil, attrTensor("value", onnx.NewFloat(nil, []float32{v})))
	}
	return b.op("Constant", nil, attrFloat("value_float", v))
}

// constInts emits a 1-D int64 constant.
func (b *fnBuilder) constInts(v ...int64) string {
	if b.opset < 12 {
		return b.op("Constant", nil, attrTensor("value", onnx.NewInt64([]int{len(v)}, v)))
	}
	return b.op("Constant", nil, attrInts("value_ints", v...))
}

// constFloatAttr emits a scalar float whose value is the function's
// attribute ref. Before opset 12 Constant has no float attribute, so the
// value is read through LeakyRelu's alpha: −LeakyRelu(−1; alpha) = alpha.
func (b *fnBuilder) constFloatAttr(ref string) string {
	if b.opset < 12 {
		a := &onnxpb.AttributeProto{Name: proto.String("alpha"), Type: onnxpb.AttributeProto_FLOAT.Enum(), RefAttrName: proto.String(ref)}
		return b.op("Neg", []string{b.op("LeakyRelu", []string{b.constFloat(-1)}, a)})
	}
	a := &onnxpb.AttributeProto{Name: proto.String("value_float"), Type: onnxpb.AttributeProto_FLOAT.Enum(), RefAttrName: proto.String(ref)}
	return b.op("Constant", nil, a)
}

// attrTensor returns a tensor attribute holding a float32 scalar or an
// int64 vector.
func attrTensor(name string, t *onnx.Tensor) *onnxpb.AttributeProto {
	tp := &onnxpb.TensorProto{DataType: proto.Int32(int32(t.DType))}
	for _, d := range t.Shape {
		tp.Dims = append(tp.Dims, int64(d))
	}
	tp.FloatData = t.Floats()
	tp.Int64Data = t.Int64s()
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_TENSOR.Enum(), T: tp}
}

// reduce emits ReduceSum or ReduceMax over axes with keepdims=1, in the
// form the opset defines (axes as an input from opset 13 for ReduceSum and
// from opset 18 for the others).
func (b *fnBuilder) reduce(opType, x string, axes ...int64) string {
	inputAxes := b.opset >= 18 || (opType == "ReduceSum" && b.opset >= 13)
	if inputAxes {
		return b.op(opType, []string{x, b.constInts(axes...)}, attrInt("keepdims", 1))
	}
	return b.op(opType, []string{x}, attrInts("axes", axes...), attrInt("keepdims", 1))
}

func (b *fnBuilder) transpose(x string, perm ...int64) string {
	return b.op("Transpose", []string{x}, attrInts("perm", perm...))
}

// function wraps the body into a FunctionProto of Domain.
func (b *fnBuilder) function(name, doc string, inputs, outputs, attrs []string, defaults []*onnxpb.AttributeProto) *onnxpb.FunctionProto {
	return &onnxpb.FunctionProto{
		Name:           proto.String(name),
		Domain:         proto.String(Domain),
		DocString:      proto.String(doc),
		Input:          inputs,
		Output:         outputs,
		Attribute:      attrs,
		AttributeProto: defaults,
		Node:           b.nodes,
		OpsetImport:    []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(b.opset)}},
	}
}

// biasShape returns [Bm,1,1,S]: key_bias's batch extent and the key
// length sLen ([1]).
func (b *fnBuilder) biasShape(sLen string) string {
	bm := b.op("Slice", []string{b.op("Shape", []string{"key_bias"}), b.constInts(0), b.constInts(1)})
	return b.op("Concat", []string{bm, b.constInts(1, 1), sLen}, attrInt("axis", 0))
}

// padSpecs returns the Pad amounts that append padAmt ([1]) positions to
// axis 2 (padS) and to axis 3 (padLast) of a rank-4 tensor.
func (b *fnBuilder) padSpecs(padAmt string) (padS, padLast string) {
	padS = b.op("Concat", []string{b.constInts(0, 0, 0, 0, 0, 0), padAmt, b.constInts(0)}, attrInt("axis", 0))
	padLast = b.op("Concat", []string{b.constInts(0, 0, 0, 0, 0, 0, 0), padAmt}, attrInt("axis", 0))
	return padS, padLast
}

// shiftedBlocks returns the before+after+1 copies of x (rank rank,
// blocked along axis) in which block B holds x's block B−before+s, for
// s = 0..before+after, zeros beyond the ends.
func (b *fnBuilder) shiftedBlocks(x string, rank int, axis, before, after int64) []string {
	last := before + after
	if last == 0 {
		return []string{x}
	}
	pads := make([]int64, 2*rank)
	pads[axis], pads[int64(rank)+axis] = before, after
	padded := b.op("Pad", []string{x, b.constInts(pads...)})
	ax := b.constInts(axis)
	var out []string
	for s := int64(0); s <= last; s++ {
		end := s - last
		if end == 0 {
			end = math.MaxInt64
		}
		out = append(out, b.op("Slice", []string{padded, b.constInts(s), b.constInts(end), ax}))
	}
	return out
}

// window concatenates along axis 3 the blocks B−before..B+after of x
// (rank rank, blocked along axis 2), zeros beyond the ends: the keys a
// block of queries sees.
func (b *fnBuilder) window(x string, rank int, before, after int64) string {
	parts := b.shiftedBlocks(x, rank, 2, before, after)
	if len(parts) == 1 {
		return parts[0]
	}
	return b.op("Concat", parts, attrInt("axis", 3))
}

func checkOpset(op string, opset int64) error {
	if opset < MinFunctionOpset || opset > MaxFunctionOpset {
		return fmt.Errorf("ops: %s function body: default-domain opset %d is not supported (want %d..%d)", op, opset, MinFunctionOpset, MaxFunctionOpset)
	}
	return nil
}

// newFnBuilder returns the builder of a function body of op at opset,
// after checking opset and then each of checks (the attributes the body is
// built for).
func newFnBuilder(op string, opset int64, checks ...func() error) (*fnBuilder, error) {
	if err := checkOpset(op, opset); err != nil {
		return nil, err
	}
	for _, check := range checks {
		if err := check(); err != nil {
			return nil, err
		}
	}
	return &fnBuilder{opset: opset}, nil
}

// keyMask returns, for each (batch, key) pair, whether the key is valid,
// and the bias value of valid keys, from a key_bias of shape [B or 1, 1, 1,
// Sk or 1] (nil: every key valid, zero bias). It is laid out as
// [batch][key] with batch-major stride sk.
type keyMask struct {
	b, sk int
	bias  []float32 // nil: no bias
	bb    int       // bias batch extent (1 or b)
	bs    int       // bias key extent (1 or sk)
}

func newKeyMask(op string, bias *onnx.Tensor, b, sk int) (*keyMask, error) {
	m := &keyMask{b: b, sk: sk}
	if bias == nil {
		return m, nil
	}
	if bias.DType != onnx.Float {
		return nil, fmt.Errorf("ops: %s: key_bias has type %s, want float32", op, onnx.TypeName(bias.DType))
	}
	s := bias.Shape
	if len(s) != 4 || s[1] != 1 || s[2] != 1 || (s[0] != 1 && s[0] != b) || (s[3] != 1 && s[3] != sk) {
		return nil, fmt.Errorf("ops: %s: key_bias shape %v, want [%d or 1, 1, 1, %d or 1]", op, s, b, sk)
	}
	m.bias = bias.Floats()
	if len(m.bias) != s[0]*s[3] {
		return nil, fmt.Errorf("ops: %s: key_bias holds %d values for shape %v", op, len(m.bias), s)
	}
	m.bb, m.bs = s[0], s[3]
	return m, nil
}

// at returns the bias of key j in batch i and whether the key is valid.
func (m *keyMask) at(i, j int) (float32, bool) {
	if m.bias == nil {
		return 0, true
	}
	if m.bb == 1 {
		i = 0
	}
	if m.bs == 1 {
		j = 0
	}
	v := m.bias[i*m.bs+j]
	// NaN compares false and so counts as padding.
	return v, v > maskThreshold
}

// attnDims checks Q [B,H,Sq,D], K [B,H,Sk,D], V [B,H,Sk,Dv] and returns
// B, H, Sq, Sk, D, Dv.
// selfAttnDims is attnDims for the self-attention ops (LocalPooled, LARA,
// Hedgehog), whose queries and keys are the same n positions.
func selfAttnDims(op string, q, k, v *onnx.Tensor) (b, h, n, d, dv int, err error) {
	b, h, sq, sk, d, dv, err := attnDims(op, q, k, v)
	if err == nil && sq != sk {
		err = fmt.Errorf("ops: %s: %d queries and %d keys: the op is self-attention (the same positions)", op, sq, sk)
	}
	return b, h, sk, d, dv, err
}

func attnDims(op string, q, k, v *onnx.Tensor) (b, h, sq, sk, d, dv int, err error) {
	for _, t := range []struct {
		name string
		t    *onnx.Tensor
	}{{"Q", q}, {"K", k}, {"V", v}} {
		if t.t == nil {
			return 0, 0, 0, 0, 0, 0, fmt.Errorf("ops: %s: input %s is missing", op, t.name)
		}
		if t.t.DType != onnx.Float {
			return 0, 0, 0, 0, 0, 0, fmt.Errorf("ops: %s: %s has type %s, want float32", op, t.name, onnx.TypeName(t.t.DType))
		}
		if len(t.t.Shape) != 4 {
			return 0, 0, 0, 0, 0, 0, fmt.Errorf("ops: %s: %s has shape %v, want rank 4 [B,H,S,D]", op, t.name, t.t.Shape)
		}
		if len(t.t.Floats()) != t.t.Len() {
			return 0, 0, 0, 0, 0, 0, fmt.Errorf("ops: %s: %s holds %d values for shape %v", op, t.name, len(t.t.Floats()), t.t.Shape)
		}
	}
	b, h, sq, d = q.Shape[0], q.Shape[1], q.Shape[2], q.Shape[3]
	sk, dv = k.Shape[2], v.Shape[3]
	if k.Shape[0] != b || k.Shape[1] != h || k.Shape[3] != d {
		return 0, 0, 0, 0, 0, 0, fmt.Errorf("ops: %s: K shape %v does not match Q shape %v", op, k.Shape, q.Shape)
	}
	if v.Shape[0] != b || v.Shape[1] != h || v.Shape[2] != sk {
		return 0, 0, 0, 0, 0, 0, fmt.Errorf("ops: %s: V shape %v does not match K shape %v", op, v.Shape, k.Shape)
	}
	if !fits(b, h, sq, dv) {
		return 0, 0, 0, 0, 0, 0, fmt.Errorf("ops: %s: output [%d,%d,%d,%d] would exceed %d elements", op, b, h, sq, dv, kernels.MaxElements)
	}
	return b, h, sq, sk, d, dv, nil
}

// fits reports whether a tensor whose dimensions are dims holds at most
// kernels.MaxElements elements, without overflowing on the way.
func fits(dims ...int) bool {
	n := 1
	for _, d := range dims {
		if d < 0 || (d != 0 && n > kernels.MaxElements/d) {
			return false
		}
		n *= d
	}
	return true
}

// resolveScale returns the attribute scale, or 1/√d when it is zero.
func resolveScale(scale float32, d int) float32 {
	if scale != 0 {
		return scale
	}
	if d == 0 {
		return 1
	}
	return float32(1 / math.Sqrt(float64(d)))
}

// nodeName is the node's name for error messages.
func nodeName(ctx *kernels.Context) string {
	if ctx == nil || ctx.Node == nil || ctx.Node.GetName() == "" {
		return ""
	}
	return " node " + strconv.Quote(ctx.Node.GetName())
}

// attentionOut is a custom attention kernel's result, its error naming the
// node.
func attentionOut(ctx *kernels.Context, out *onnx.Tensor, err error) ([]*onnx.Tensor, error) {
	if err != nil {
		if n := nodeName(ctx); n != "" {
			return nil, fmt.Errorf("%w (%s)", err, n[1:])
		}
		return nil, err
	}
	return []*onnx.Tensor{out}, nil
}
