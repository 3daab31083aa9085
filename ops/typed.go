package ops

import (
	"fmt"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// Precision of the custom ops. Models published in float16 or bfloat16
// feed the attention ops half-precision Q, K, V and masks. The ops compute
// in float32 whatever their inputs: exp of scores, sums over thousands of
// keys and the normaliser lose too much in 11 or 8 bits of mantissa. The
// function bodies therefore widen every input to float32 first and narrow
// the output last (TypedFunction), and the Go kernels do the same
// (kernels.HalfWidened). Weights the converters add (projections, feature
// maps) stay float32 in either case.

// Floating reports whether dt is one of the element types the custom ops
// accept: float32, float16 or bfloat16.
func Floating(dt onnx.DataType) bool {
	return dt == onnx.Float || dt == onnx.Float16 || dt == onnx.BFloat16
}

// TypedFunction returns fn for a model whose attention runs in dt: every
// input the body reads is cast to float32 before the body and every output
// is cast to dt after it. For float32, fn itself is returned. The function keeps its
// name, so a model holds one precision of each op.
func TypedFunction(fn *onnxpb.FunctionProto, dt onnx.DataType) (*onnxpb.FunctionProto, error) {
	if dt == onnx.Float {
		return fn, nil
	}
	if !Floating(dt) {
		return nil, fmt.Errorf("ops: %s function body: element type %s is not supported (want float32, float16 or bfloat16)", fn.GetName(), onnx.TypeName(dt))
	}
	out := proto.Clone(fn).(*onnxpb.FunctionProto)
	used := map[string]bool{}
	for _, n := range out.Node {
		for _, x := range n.Input {
			used[x] = true
		}
	}
	rename := map[string]string{}
	var head []*onnxpb.NodeProto
	for _, x := range out.Input {
		if !used[x] {
			// An input the body does not read (E and F of the pooled
			// Linformer, which nodes pass as ""): nothing to cast.
			continue
		}
		wide := x + "/float32"
		rename[x] = wide
		head = append(head, castNode(x, wide, onnx.Float))
	}
	var tail []*onnxpb.NodeProto
	for _, y := range out.Output {
		wide := y + "/float32"
		if _, ok := rename[y]; ok {
			return nil, fmt.Errorf("ops: %s function body: output %q is also an input", fn.GetName(), y)
		}
		rename[y] = wide
		tail = append(tail, castNode(wide, y, dt))
	}
	for _, n := range out.Node {
		renameAll(n.Input, rename)
		renameAll(n.Output, rename)
	}
	out.Node = append(append(head, out.Node...), tail...)
	return out, nil
}

// FunctionType returns the element type TypedFunction built fn for: the
// type its last node, a Cast writing its first output, narrows to;
// float32 for a body that ends otherwise (built for float32).
func FunctionType(fn *onnxpb.FunctionProto) onnx.DataType {
	if len(fn.GetNode()) == 0 || len(fn.GetOutput()) == 0 {
		return onnx.Float
	}
	last := fn.Node[len(fn.Node)-1]
	if last.GetOpType() != "Cast" || last.GetDomain() != "" || len(last.Output) != 1 || last.Output[0] != fn.Output[0] {
		return onnx.Float
	}
	if dt := onnx.DataType(onnx.AttrInt(last, "to", int64(onnx.Float))); Floating(dt) {
		return dt
	}
	return onnx.Float
}

func castNode(from, to string, dt onnx.DataType) *onnxpb.NodeProto {
	return &onnxpb.NodeProto{
		OpType: proto.String("Cast"), Input: []string{from}, Output: []string{to},
		Attribute: []*onnxpb.AttributeProto{attrInt("to", int64(dt))},
	}
}

func renameAll(names []string, rename map[string]string) {
	for i, s := range names {
		if r, ok := rename[s]; ok {
			names[i] = r
		}
	}
}
