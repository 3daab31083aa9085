package graphfacts

import "github.com/linearize/linearize/onnx/onnxpb"

// The per-op rules of the facts, keyed by domain and op type as
// kernels/registry.go keys its kernels: for each op, how each kind of fact
// of its outputs follows from what is known of its inputs. Each rule is
// one small function; the init function below is the table. A fact without
// a rule for an op is unknown through it (Units and Broadcast then fall
// back to the value's declared shape).
//
// The walks that read a shape tensor's entries or follow one chain of ops
// to a projection (ShapeValue, PreScale, ProjectionOf, RotaryInput,
// sizeOf, ...) keep their own short lists of the ops they pass. Where an
// op passes one input's values on unchanged only given what is proved of
// the node (a Gather selecting one tensor of a torch.stack, a Concat
// whose other inputs are empty), its copy rule says which input (CopyOf),
// and the walks to a projection follow it.

// dimsRule derives the dims of output v of n (provedDims): −1 where not
// proved, nil if not even the rank is; with suffix only the trailing axes
// are proved. declared is v's declared shape (may be nil).
type dimsRule func(f *Facts, n *onnxpb.NodeProto, v string, declared []int64, depth int) (d []int64, suffix bool)

// unitsRule derives the broadcast shape of n's output (bshapeMode): in
// shapeMode its rank and size-one axes, else the axes its values vary
// along; in(i) is input i's.
type unitsRule func(f *Facts, n *onnxpb.NodeProto, in func(int) []int64, depth int, shapeMode bool) []int64

// fold is a numeric fact of a value: (*Facts).scalar or (*Facts).uniform.
type fold func(f *Facts, v string, depth int) (float64, bool)

// foldRule derives the fold get of output v of n from get of n's inputs
// (Scalar and Uniform share the rules that read the same for both).
type foldRule func(f *Facts, n *onnxpb.NodeProto, v string, get fold, depth int) (float64, bool)

// widthRule derives the output width of the projection feeding output v
// of n (projWidth), −1 if unknown.
type widthRule func(f *Facts, n *onnxpb.NodeProto, v string, depth int) int64

// copyRule returns the input of n whose values output v of n is, element
// for element and axis for axis (CopyOf), or "" when none is proved.
type copyRule func(f *Facts, n *onnxpb.NodeProto, v string, depth int) string

// opRules are the rules of one op type; nil: the fact is unknown through
// the op.
type opRules struct {
	dims    dimsRule
	units   unitsRule
	scalar  foldRule
	uniform foldRule
	width   widthRule
	copies  copyRule
}

var rules = map[string]*opRules{} // "domain:op"

// noRules are the rules of an op without any.
var noRules opRules

func ruleKey(domain, op string) string {
	if domain == "ai.onnx" {
		domain = ""
	}
	return domain + ":" + op
}

// rulesOf returns the rules of n's op (none for nil).
func rulesOf(n *onnxpb.NodeProto) *opRules {
	if n == nil {
		return &noRules
	}
	if r := rules[ruleKey(n.GetDomain(), n.GetOpType())]; r != nil {
		return r
	}
	return &noRules
}

// entry returns the rules of op in domain, adding them empty the first
// time.
func entry(domain, op string) *opRules {
	k := ruleKey(domain, op)
	r := rules[k]
	if r == nil {
		r = &opRules{}
		rules[k] = r
	}
	return r
}

// register sets, for each of ops in domain, the rules r gives (its
// non-nil fields).
func register(domain string, r opRules, ops ...string) {
	for _, op := range ops {
		e := entry(domain, op)
		if r.dims != nil {
			e.dims = r.dims
		}
		if r.units != nil {
			e.units = r.units
		}
		if r.scalar != nil {
			e.scalar = r.scalar
		}
		if r.uniform != nil {
			e.uniform = r.uniform
		}
		if r.width != nil {
			e.width = r.width
		}
		if r.copies != nil {
			e.copies = r.copies
		}
	}
}

// The quantizers (QuantizeLinear, DequantizeLinear and the default
// domain's DynamicQuantizeLinear: isQuantizer) and the integer products
// of each domain (matmulOperands, MatMulNBits), as quant.go reads them.
var (
	quantizers        = []string{"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"}
	msQuantizers      = []string{"QuantizeLinear", "DequantizeLinear"}
	integerProducts   = []string{"MatMulInteger", "QLinearMatMul"}
	msIntegerProducts = []string{"MatMulIntegerToFloat", "DynamicQuantizeMatMul"}
)

// unaryOps are the default-domain ops whose output 0 has input 0's
// shape.
var unaryOps = []string{"Identity", "Cast", "Dropout", "Softmax", "LogSoftmax", "Erf", "Tanh", "Relu", "Sigmoid", "Gelu",
	"Neg", "Sqrt", "Exp", "Log", "Abs", "Reciprocal", "Not", "LayerNormalization", "SimplifiedLayerNormalization", "Cos", "Sin"}

func init() {
	// Dims.
	register("", opRules{dims: (*Facts).broadcastDims}, "Mul", "Div", "Add", "Sub", "Pow", "Where")
	register("", opRules{dims: (*Facts).expandDims}, "Expand")
	register("", opRules{dims: (*Facts).firstDims}, unaryOps...)
	register("", opRules{dims: (*Facts).gatherDims}, "Gather")
	register("", opRules{dims: (*Facts).shapeDims}, "Shape")
	register("", opRules{dims: (*Facts).sliceDims}, "Slice")
	register("", opRules{dims: (*Facts).matmulDims}, "MatMul")
	register("", opRules{dims: (*Facts).gemmDims}, "Gemm")
	register("", opRules{dims: (*Facts).transposeDims}, "Transpose")
	register("", opRules{dims: (*Facts).reshapeDims}, "Reshape")
	register("", opRules{dims: (*Facts).einsumDims}, "Einsum")
	register("", opRules{dims: (*Facts).splitOutDims}, "Split")
	register("", opRules{dims: (*Facts).squeezeDims}, "Squeeze", "Unsqueeze")
	register("", opRules{dims: (*Facts).concatDims}, "Concat")
	register("", opRules{dims: (*Facts).convDims}, "Conv")

	// Units and Broadcast.
	register("", opRules{units: (*Facts).varyingUnits}, "Range", "Shape", "NonZero")
	register("", opRules{units: (*Facts).firstUnits}, "Cast", "Not", "Neg", "Identity", "Sqrt", "Abs", "Exp", "Log", "Reciprocal",
		"IsNaN", "IsInf", "Sign", "Floor", "Ceil", "Softmax", "Slice")
	register("", opRules{units: (*Facts).broadcastUnits}, "Add", "Sub", "Mul", "Div", "And", "Or", "Xor", "Equal", "LessOrEqual", "Pow",
		"Min", "Max", "Mod", "Where", "BitwiseAnd", "BitwiseOr")
	register("", opRules{units: (*Facts).unsqueezeUnits}, "Unsqueeze")
	register("", opRules{units: (*Facts).squeezeUnits}, "Squeeze")
	register("", opRules{units: (*Facts).gatherUnits}, "Gather")
	register("", opRules{units: (*Facts).flattenUnits}, "Flatten")
	register("", opRules{units: (*Facts).compareUnits}, "GreaterOrEqual", "Greater", "Less")
	register("", opRules{units: (*Facts).shapedUnits}, "Reshape", "ConstantOfShape", "Expand")
	register("", opRules{units: (*Facts).concatUnits}, "Concat")
	register("", opRules{units: (*Facts).gatherNDUnits}, "GatherND")
	register("", opRules{units: (*Facts).transposeUnits}, "Transpose")

	// Scalar.
	register("", opRules{scalar: (*Facts).sizeFold}, "Gather", "Slice")
	register("", opRules{scalar: sqrtFold}, "Sqrt")
	register("", opRules{scalar: reciprocalFold}, "Reciprocal")
	register("", opRules{scalar: negFold}, "Neg")
	register("", opRules{scalar: floorFold}, "Floor", "Ceil")
	register("", opRules{scalar: castFold}, "Cast")
	register("", opRules{scalar: firstFold}, "Identity", "Reshape", "Unsqueeze", "Squeeze", "Expand")
	register("", opRules{scalar: arithmeticFold}, "Mul", "Div", "Add", "Sub", "Pow")

	// Uniform.
	register("", opRules{uniform: firstFold}, "Identity", "Expand", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Tile", "Transpose")
	register("", opRules{uniform: truthCastFold}, "Cast")
	register("", opRules{uniform: constantOfShapeFold}, "ConstantOfShape")
	register("", opRules{uniform: notFold}, "Not")
	register("", opRules{uniform: logicFold}, "And", "Or")
	register("", opRules{uniform: whereFold}, "Where")
	register("", opRules{uniform: negFold}, "Neg")
	register("", opRules{uniform: arithmeticFold}, "Add", "Sub", "Mul", "Div")
	register("", opRules{uniform: compareFold}, "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual")

	// Projection width.
	register("", opRules{width: (*Facts).firstWidth}, "Transpose", "Reshape", "Identity", "Cast")
	register("", opRules{width: (*Facts).operandWidth}, "Add", "Mul", "Div")
	register("", opRules{width: (*Facts).splitWidth}, "Split")
	register("", opRules{width: (*Facts).einsumWidth}, "Einsum")
	register("", opRules{width: (*Facts).convWidth}, "Conv")
	register("", opRules{width: (*Facts).productWidth}, "MatMul", "Gemm")

	// Copies (copies.go).
	register("", opRules{copies: (*Facts).stackCopy}, "Gather")
	register("", opRules{copies: (*Facts).concatCopy}, "Concat")

	// The quantized forms and onnxruntime's fusions (quant.go).
	quantizer := opRules{dims: (*Facts).quantizerDims, scalar: (*Facts).quantizeFold, width: (*Facts).quantizedWidth}
	register("", quantizer, quantizers...)
	register(msDomain, quantizer, msQuantizers...)
	register("", opRules{units: (*Facts).quantizedUnits}, "QuantizeLinear", "DequantizeLinear")
	integerProduct := opRules{dims: (*Facts).integerProductDims, width: (*Facts).quantizedWidth}
	register("", integerProduct, integerProducts...)
	register(msDomain, integerProduct, msIntegerProducts...)
	register(msDomain, opRules{dims: (*Facts).nbitsDims, width: (*Facts).quantizedWidth}, "MatMulNBits")
	register(msDomain, opRules{dims: (*Facts).shapeKeepingDims}, shapeKeeping...)
}
