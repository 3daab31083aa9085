package graphfacts

import (
	"math"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// Quantized projections. onnxruntime's quantization tools replace a
// projection x·W by one of these forms, which the facts read as the
// projection they compute:
//
//   - quantize_dynamic: DynamicQuantizeLinear(x) → MatMulInteger(xq, Wq,
//     xzp, wzp) → Cast(float) → Mul(x_scale·w_scale), the rescale;
//   - the com.microsoft fusions of it: MatMulIntegerToFloat(xq, Wq, xs,
//     ws, xzp, wzp, bias) and DynamicQuantizeMatMul(x, Wq, ws, wzp, bias);
//   - QOperator format: QLinearMatMul(xq, xs, xzp, Wq, ws, wzp, ys, yzp),
//     then DequantizeLinear;
//   - QDQ format (quantize_static): DequantizeLinear(QuantizeLinear(x)) on
//     the activation and DequantizeLinear(Wq) on the weight of a float
//     MatMul; weight-only quantization keeps only the latter;
//   - com.microsoft MatMulNBits(x, packed W, scales, ...) with attributes
//     K and N: 4-bit weights.
//
// Quantizing and dequantizing keep a value's shape, and an integer
// product has its float product's shape.

const msDomain = "com.microsoft"

// matmulOperands returns the data operand and the weight operand of a
// node that computes a matrix product of them: MatMul, MatMulInteger,
// QLinearMatMul and the com.microsoft MatMulIntegerToFloat and
// DynamicQuantizeMatMul. ok is false for any other node.
func matmulOperands(n *onnxpb.NodeProto) (a, b string, ok bool) {
	if n == nil {
		return "", "", false
	}
	op := n.GetOpType()
	switch {
	case DefaultDomain(n) && (op == "MatMul" || op == "MatMulInteger"):
		return Input(n, 0), Input(n, 1), true
	case DefaultDomain(n) && op == "QLinearMatMul":
		return Input(n, 0), Input(n, 3), true
	case n.GetDomain() == msDomain && (op == "MatMulIntegerToFloat" || op == "DynamicQuantizeMatMul"):
		return Input(n, 0), Input(n, 1), true
	}
	return "", "", false
}

// IsQuantizedMatMul reports whether n is one of the integer (or
// low-bit) matrix products of the quantized forms: MatMulInteger,
// QLinearMatMul, MatMulIntegerToFloat, DynamicQuantizeMatMul or
// MatMulNBits.
func IsQuantizedMatMul(n *onnxpb.NodeProto) bool {
	if n == nil {
		return false
	}
	if _, _, ok := matmulOperands(n); ok {
		return n.GetOpType() != "MatMul"
	}
	return n.GetDomain() == msDomain && n.GetOpType() == "MatMulNBits"
}

// isQuantizer reports whether n quantizes or dequantizes its input 0
// (QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, in the
// default or com.microsoft domain): output 0 has input 0's shape.
func isQuantizer(n *onnxpb.NodeProto) bool {
	if n == nil || (!DefaultDomain(n) && n.GetDomain() != msDomain) {
		return false
	}
	switch n.GetOpType() {
	case "QuantizeLinear", "DequantizeLinear":
		return true
	case "DynamicQuantizeLinear":
		return DefaultDomain(n)
	}
	return false
}

// quantizerDims is provedDims for a quantizer: output 0 has input 0's
// shape, DynamicQuantizeLinear's scale and zero point are scalars.
func (f *Facts) quantizerDims(n *onnxpb.NodeProto, v string, _ []int64, depth int) ([]int64, bool) {
	if len(n.Output) > 0 && n.Output[0] == v {
		return f.dims(Input(n, 0), depth+1), false
	}
	if n.GetOpType() == "DynamicQuantizeLinear" {
		return []int64{}, false // y_scale and y_zero_point are scalars
	}
	return nil, false
}

// integerProductDims is provedDims for an integer product: its float
// product's shape.
func (f *Facts) integerProductDims(n *onnxpb.NodeProto, _ string, declared []int64, depth int) ([]int64, bool) {
	a, b, _ := matmulOperands(n)
	return f.productDims(a, b, declared, depth), false
}

// nbitsDims is provedDims for MatMulNBits: a [..., K] times the unpacked
// [K, N] weight.
func (f *Facts) nbitsDims(n *onnxpb.NodeProto, _ string, _ []int64, depth int) ([]int64, bool) {
	nOut := onnx.AttrInt(n, "N", 0)
	a := f.dims(Input(n, 0), depth+1)
	if nOut <= 0 || len(a) < 1 {
		return nil, false
	}
	out := append([]int64(nil), a...)
	out[len(out)-1] = nOut
	return out, false
}

// FloatSource follows v back through quantizers (QuantizeLinear,
// DequantizeLinear, DynamicQuantizeLinear's output 0) to the value they
// quantize: the float activation an integer product reads, or the value
// a QDQ pair (DequantizeLinear(QuantizeLinear(x)), as quantize_static
// writes around a MatMul input) stands for. v itself when it is not
// quantized.
func (f *Facts) FloatSource(v string) string {
	for i := 0; i < MaxDepth; i++ {
		n := f.Ix.Producer[v]
		if !isQuantizer(n) || len(n.Output) == 0 || n.Output[0] != v {
			return v
		}
		v = Input(n, 0)
	}
	return v
}

// rescaled returns x when n is the rescale of an integer product,
// Mul(Cast(p), s) (either operand order) with p a MatMulInteger: the
// product of the quantized operands made float again, which is the
// projection up to quantization; "" otherwise.
func (f *Facts) rescaled(n *onnxpb.NodeProto) string {
	if n == nil || n.GetOpType() != "Mul" || !DefaultDomain(n) {
		return ""
	}
	for i := 0; i < 2; i++ {
		x := Input(n, i)
		c := f.Ix.Producer[x]
		if c == nil || !FloatCast(c) {
			continue
		}
		if IsQuantizedMatMul(f.Ix.Producer[Input(c, 0)]) {
			return x
		}
	}
	return ""
}

// quantizedWidth is projWidth for the quantized forms (quantWidth).
func (f *Facts) quantizedWidth(n *onnxpb.NodeProto, _ string, depth int) int64 {
	w, _ := f.quantWidth(n, depth)
	return w
}

// quantWidth is projWidthWalk for the quantized forms: the output width
// of an integer product by a constant weight, −1 otherwise. ok is false
// when n is none of them.
func (f *Facts) quantWidth(n *onnxpb.NodeProto, depth int) (w int64, ok bool) {
	if isQuantizer(n) {
		return f.projWidth(Input(n, 0), depth+1), true
	}
	if n.GetDomain() == msDomain && n.GetOpType() == "MatMulNBits" {
		if k := onnx.AttrInt(n, "N", 0); k > 0 {
			return k, true
		}
		return -1, true
	}
	if _, b, isMM := matmulOperands(n); isMM && n.GetOpType() != "MatMul" {
		if d := f.weightDims(b); len(d) == 2 {
			return d[1], true
		}
		return -1, true
	}
	return -1, false
}

// quantProjection is ProjectionOf's reading of an integer product n:
// the projection of the float activation it quantizes by its constant
// weight (and bias, for the com.microsoft fusions). ok is false when n
// is not one or its weight is not constant.
func (f *Facts) quantProjection(n *onnxpb.NodeProto, p Projection) (Projection, bool) {
	a, b, isMM := matmulOperands(n)
	if n.GetDomain() == msDomain && n.GetOpType() == "MatMulNBits" {
		a, b, isMM = Input(n, 0), Input(n, 1), true
	}
	if !isMM || !f.ConstDerived(b) || f.ConstDerived(a) {
		return p, false
	}
	bias := ""
	switch n.GetOpType() {
	case "MatMulIntegerToFloat":
		bias = Input(n, 6)
	case "DynamicQuantizeMatMul":
		bias = Input(n, 4)
	case "MatMulNBits":
		bias = Input(n, 5)
	}
	if bias != "" {
		if p.Bias != "" || !f.ConstDerived(bias) {
			return p, false
		}
		p.Bias = bias
	}
	p.Node, p.Input, p.Weight, p.Quantized = n.GetName(), f.FloatSource(a), b, n.GetOpType()
	if p.Node == "" && len(n.Output) > 0 {
		p.Node = n.GetOpType() + "(" + n.Output[0] + ")"
	}
	return p, true
}

// shapeKeeping are onnxruntime's fused ops (com.microsoft, written by its
// transformer optimizer) whose output 0 has input 0's shape; the
// SkipLayerNormalizations' output 3 (input + skip + bias) too.
var shapeKeeping = []string{
	"SkipLayerNormalization", "SkipSimplifiedLayerNormalization", "LayerNormalization",
	"SimplifiedLayerNormalization", "FastGelu", "BiasGelu", "Gelu", "QuickGelu",
	"BiasAdd",
}

// shapeKeepingDims is provedDims for the shape-keeping com.microsoft ops.
func (f *Facts) shapeKeepingDims(n *onnxpb.NodeProto, v string, _ []int64, depth int) ([]int64, bool) {
	if len(n.Output) == 0 || (n.Output[0] != v && !(len(n.Output) > 3 && n.Output[3] == v)) {
		return nil, false // mean, inverse standard deviation
	}
	return f.dims(Input(n, 0), depth+1), false
}

// quantizeFold is Scalar's rule for QuantizeLinear and DequantizeLinear:
// it folds n of a scalar with a scalar scale and zero point (a constant
// quantized as quantize_static writes it,
// DequantizeLinear(QuantizeLinear(c))): q = saturate(round(x/s) + zp) in
// the zero point's type (uint8 when absent; onnx.QuantRange), rounding
// half to even, and x = (q − zp)·s.
func (f *Facts) quantizeFold(n *onnxpb.NodeProto, name string, _ fold, depth int) (float64, bool) {
	if n.GetOpType() == "DynamicQuantizeLinear" || len(n.Output) == 0 || n.Output[0] != name {
		return 0, false // a scale or zero point computed at run time
	}
	x, ok1 := f.scalar(Input(n, 0), depth+1)
	s, ok2 := f.scalar(Input(n, 1), depth+1)
	if !ok1 || !ok2 {
		return 0, false
	}
	zp, lo, hi := 0.0, 0.0, 255.0
	if z := Input(n, 2); z != "" {
		t, ok := Constant(f.Ix, z)
		v, okV := f.scalar(z, depth+1)
		if !ok || !okV {
			return 0, false
		}
		zp = v
		if lo, hi, ok = onnx.QuantRange(t.DType); !ok {
			return 0, false
		}
	}
	if n.GetOpType() == "DequantizeLinear" {
		return (x - zp) * s, true
	}
	if s == 0 {
		return 0, false
	}
	return min(max(math.RoundToEven(x/s)+zp, lo), hi), true
}

// quantizedUnits is bshapeMode for QuantizeLinear and DequantizeLinear n
// of a value with units in(0): its shape, and its values vary where the
// input's do, and along the quantized axis for a per-axis scale.
func (f *Facts) quantizedUnits(n *onnxpb.NodeProto, in func(int) []int64, _ int, shapeMode bool) []int64 {
	x := in(0)
	if x == nil || len(n.Output) == 0 {
		return nil
	}
	out := append([]int64(nil), x...)
	if shapeMode || f.oneElement(Input(n, 1)) {
		return out
	}
	axis := onnx.AttrInt(n, "axis", 1)
	if axis < 0 {
		axis += int64(len(out))
	}
	if axis < 0 || axis >= int64(len(out)) {
		return nil
	}
	out[axis] = -1
	return out
}

// oneElement reports whether v is proved to hold one element (a
// per-tensor scale).
func (f *Facts) oneElement(v string) bool {
	d := f.Dims(v)
	if d == nil {
		return false
	}
	for _, x := range d {
		if x != 1 {
			return false
		}
	}
	return true
}
