package convert

import (
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// elemTypes finds the element type of values from what produces them, so
// that a float16 or bfloat16 model gets constants and casts of its own
// precision. Like the dims, what operators prove outranks what value_info
// declares: float16 conversion tools are known to leave stale float
// declarations behind.
type elemTypes struct {
	ix   *onnx.Index
	memo map[string]onnx.DataType
}

func newElemTypes(ix *onnx.Index) *elemTypes {
	return &elemTypes{ix: ix, memo: map[string]onnx.DataType{}}
}

// of returns v's element type, 0 (undefined) when nothing tells.
func (e *elemTypes) of(v string) onnx.DataType {
	// An explicit stack: chains of elementwise ops run thousands of nodes
	// deep in large models.
	if dt, ok := e.memo[v]; ok {
		return dt
	}
	stack := []string{v}
	onStack := map[string]bool{v: true}
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		dt, need := e.step(x)
		if need == "" || onStack[need] { // a cycle reads as unknown
			if need != "" {
				dt = e.declared(x)
			}
			e.memo[x] = dt
			delete(onStack, x)
			stack = stack[:len(stack)-1]
			continue
		}
		onStack[need] = true
		stack = append(stack, need)
	}
	return e.memo[v]
}

// step returns x's type when it is decided without another value's type;
// otherwise need names the value whose type decides it (already known to
// the memo when step is asked again).
func (e *elemTypes) step(x string) (dt onnx.DataType, need string) {
	if t, ok := e.ix.Initializers[x]; ok {
		return onnx.DataType(t.GetDataType()), ""
	}
	n := e.ix.Producer[x]
	if n == nil {
		return e.declared(x), ""
	}
	if !defaultDomain(n) {
		if from := contribTypeFrom(n); from != "" && n.GetDomain() == "com.microsoft" {
			if dt, ok := e.memo[from]; ok && dt != 0 {
				return dt, ""
			} else if !ok {
				return 0, from
			}
		}
		return e.declared(x), ""
	}
	if t, ok := constant(e.ix, x); ok && n.GetOpType() == "Constant" {
		return t.DType, ""
	}
	from, fixed := typeRule(n, x)
	if fixed != 0 {
		return fixed, ""
	}
	if from == "" {
		return e.declared(x), ""
	}
	if dt, ok := e.memo[from]; ok {
		if dt == 0 {
			return e.declared(x), ""
		}
		return dt, ""
	}
	return 0, from
}

func (e *elemTypes) declared(x string) onnx.DataType {
	if vi, ok := e.ix.ValueInfo[x]; ok {
		if dt, _, ok := onnx.TensorType(vi); ok {
			return dt
		}
	}
	return 0
}

// typeRule gives the element type of output v of default-domain node n:
// a fixed type, or the input whose type it takes ("" when unknown).
func typeRule(n *onnxpb.NodeProto, v string) (from string, fixed onnx.DataType) {
	out := 0
	for i, o := range n.Output {
		if o == v {
			out = i
		}
	}
	switch n.GetOpType() {
	case "Cast":
		return "", onnx.DataType(onnx.AttrInt(n, "to", 0))
	case "CastLike", "DequantizeLinear":
		return inp(n, 1), 0
	case "Shape", "Size", "NonZero", "ArgMax", "ArgMin":
		return "", onnx.Int64
	case "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Not", "And", "Or", "Xor", "IsNaN", "IsInf":
		return "", onnx.Bool
	case "MatMulInteger", "ConvInteger":
		return "", onnx.Int32
	case "DynamicQuantizeLinear":
		if out == 1 {
			return "", onnx.Float
		}
		return "", onnx.Uint8
	case "QuantizeLinear":
		if inp(n, 2) != "" {
			return inp(n, 2), 0
		}
		return "", onnx.Uint8
	case "Where":
		return inp(n, 1), 0
	case "ConstantOfShape":
		return "", constantOfShapeType(n)
	case "TopK":
		if out == 1 {
			return "", onnx.Int64
		}
	case "Dropout":
		if out > 0 { // the mask
			return "", onnx.Bool
		}
	}
	return inp(n, 0), 0
}

func constantOfShapeType(n *onnxpb.NodeProto) onnx.DataType {
	for _, a := range n.Attribute {
		if a.GetName() == "value" && a.T != nil {
			return onnx.DataType(a.T.GetDataType())
		}
	}
	return onnx.Float
}

// contribTypeFrom names the input whose element type the float outputs
// of an onnxruntime contrib op take ("" when they do not follow one):
// the normalised/activated/attended input for most, the word table for
// EmbedLayerNormalization, the scale for the quantized matmuls.
func contribTypeFrom(n *onnxpb.NodeProto) string {
	switch n.GetOpType() {
	case "SkipLayerNormalization", "SkipSimplifiedLayerNormalization", "SimplifiedLayerNormalization",
		"LayerNormalization", "FastGelu", "BiasGelu", "Gelu", "QuickGelu", "BiasAdd", "BiasSplitGelu",
		"FusedMatMul", "Attention", "MultiHeadAttention", "GroupQueryAttention", "RotaryEmbedding":
		return inp(n, 0)
	case "EmbedLayerNormalization":
		return inp(n, 2)
	case "MatMulIntegerToFloat":
		return inp(n, 2)
	case "DynamicQuantizeMatMul", "QAttention":
		return inp(n, 0)
	}
	return ""
}
