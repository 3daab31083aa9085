package convert

import (
	"math"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// maxFoldDepth bounds the constant subgraphs scalarOf folds.
const maxFoldDepth = 12

// scalarOf returns the value of name when it is a single-element constant,
// or a small constant expression over one (Sqrt, Cast, Reciprocal, Div,
// Mul, Pow, Neg, Identity, Reshape/Unsqueeze/Squeeze of a scalar), as
// exporters write the score scale (keras: Div(scores, Sqrt(Cast(D)))).
func scalarOf(ix *onnx.Index, name string) (float64, bool) {
	return scalarFold(ix, name, 0)
}

func scalarFold(ix *onnx.Index, name string, depth int) (float64, bool) {
	if depth > maxFoldDepth {
		return 0, false
	}
	if t, ok := constant(ix, name); ok {
		if t.Len() != 1 {
			return 0, false
		}
		v, err := t.AsFloat64s()
		if err != nil || len(v) != 1 {
			return 0, false
		}
		return v[0], true
	}
	n := ix.Producer[name]
	if n == nil || !defaultDomain(n) {
		return 0, false
	}
	arg := func(i int) (float64, bool) {
		if i >= len(n.Input) || inp(n, i) == "" {
			return 0, false
		}
		return scalarFold(ix, inp(n, i), depth+1)
	}
	switch n.GetOpType() {
	case "Sqrt":
		if a, ok := arg(0); ok && a >= 0 {
			return math.Sqrt(a), true
		}
	case "Reciprocal":
		if a, ok := arg(0); ok && a != 0 {
			return 1 / a, true
		}
	case "Neg":
		if a, ok := arg(0); ok {
			return -a, true
		}
	case "Cast", "Identity", "Reshape", "Unsqueeze", "Squeeze", "Expand":
		if a, ok := arg(0); ok {
			if n.GetOpType() == "Cast" && castsToInt(n) {
				return math.Trunc(a), true
			}
			return a, true
		}
	case "Mul", "Div", "Add", "Sub", "Pow":
		a, ok1 := arg(0)
		b, ok2 := arg(1)
		if !ok1 || !ok2 {
			return 0, false
		}
		switch n.GetOpType() {
		case "Mul":
			return a * b, true
		case "Div":
			if b != 0 {
				return a / b, true
			}
		case "Add":
			return a + b, true
		case "Sub":
			return a - b, true
		case "Pow":
			return math.Pow(a, b), true
		}
	}
	return 0, false
}

func castsToInt(n *onnxpb.NodeProto) bool {
	switch onnx.DataType(onnx.AttrInt(n, "to", 0)) {
	case onnx.Int8, onnx.Int16, onnx.Int32, onnx.Int64, onnx.Uint8, onnx.Uint16, onnx.Uint32, onnx.Uint64:
		return true
	}
	return false
}

// intsOf returns the value of an integer constant (initializer or Constant
// node).
func intsOf(ix *onnx.Index, name string) ([]int64, bool) {
	t, ok := constant(ix, name)
	if !ok {
		return nil, false
	}
	v, err := t.AsInt64s()
	if err != nil {
		return nil, false
	}
	return v, true
}

func defaultDomain(n *onnxpb.NodeProto) bool {
	d := n.GetDomain()
	return d == "" || d == "ai.onnx"
}

// inp returns input i of n, or "" when n has fewer inputs (a malformed
// node then simply fails to match instead of panicking).
func inp(n *onnxpb.NodeProto, i int) string {
	if n == nil || i < 0 || i >= len(n.Input) {
		return ""
	}
	return n.Input[i]
}

// constant is ix.Constant that also rejects a malformed value (nil, or
// data that does not match its shape), so callers may index it freely.
func constant(ix *onnx.Index, name string) (t *onnx.Tensor, ok bool) {
	if n := ix.Producer[name]; n != nil && n.GetOpType() == "Constant" {
		// A Constant whose value attribute carries no tensor is not a
		// constant (onnx.ConstantNodeValue does not expect it).
		for _, a := range n.Attribute {
			if a.GetName() == "value" && a.T == nil {
				return nil, false
			}
		}
	}
	t, ok = ix.Constant(name)
	if !ok || t == nil || t.Check() != nil {
		return nil, false
	}
	return t, true
}
