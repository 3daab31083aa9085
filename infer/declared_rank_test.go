package infer_test

import (
	"reflect"
	"testing"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// TestORTTrustsRuntimeRank: a graph output declared as a scalar whose
// producer's rank is unknown before run time (Squeeze without axes)
// comes back with the shape onnxruntime computes, not the declared one,
// on both backends.
func TestORTTrustsRuntimeRank(t *testing.T) {
	if err := infer.ORTAvailable(); err != nil {
		t.Skipf("onnxruntime unavailable (run scripts/setup.sh): %v", err)
	}
	g := &onnxpb.GraphProto{
		Name: proto.String("declared_scalar"),
		Node: []*onnxpb.NodeProto{{OpType: proto.String("Squeeze"), Input: []string{"x"}, Output: []string{"y"}}},
		Input: []*onnxpb.ValueInfoProto{onnx.MakeValueInfo("x", onnx.Float,
			[]onnx.Dim{{Value: -1, Param: "a"}, {Value: -1, Param: "b"}, {Value: -1, Param: "c"}})},
		Output: []*onnxpb.ValueInfoProto{onnx.MakeValueInfo("y", onnx.Float, []onnx.Dim{})},
	}
	m := &onnxpb.ModelProto{IrVersion: proto.Int64(8), Graph: g,
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(17)}}}
	x := onnx.NewFloat([]int{1, 2, 3}, []float32{1, 2, 3, 4, 5, 6})
	for _, backend := range []string{"ort", "native"} {
		s, err := infer.Open(backend, m, infer.Options{Threads: 1})
		if err != nil {
			t.Fatalf("%s: %v", backend, err)
		}
		out, err := s.Run(map[string]*onnx.Tensor{"x": x})
		s.Close()
		if err != nil {
			t.Fatalf("%s: %v", backend, err)
		}
		y := out["y"]
		if !reflect.DeepEqual(y.Shape, []int{2, 3}) || !reflect.DeepEqual(y.Floats(), x.Floats()) {
			t.Errorf("%s: y = %v %v, want [2 3] %v", backend, y.Shape, y.Floats(), x.Floats())
		}
	}
}
