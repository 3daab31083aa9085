package infer

import (
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

func valueOf(vi *onnxpb.ValueInfoProto) Value {
	dt, shape, _ := onnx.TensorType(vi)
	return Value{Name: vi.GetName(), DType: dt, Shape: shape}
}

func producedOrDeclared(g *onnxpb.GraphProto, name string) bool {
	for _, n := range g.Node {
		for _, o := range n.Output {
			if o == name {
				return true
			}
		}
	}
	for _, vi := range g.Input {
		if vi.GetName() == name {
			return true
		}
	}
	for _, t := range g.Initializer {
		if t.GetName() == name {
			return true
		}
	}
	return false
}
