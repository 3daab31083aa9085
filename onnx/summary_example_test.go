package onnx_test

import (
	"fmt"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

func ExampleSummarize() {
	// y = Relu(x) for x of shape [batch, 4].
	m := &onnxpb.ModelProto{
		IrVersion:    proto.Int64(8),
		ProducerName: proto.String("example"),
		OpsetImport:  []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(17)}},
		Graph: &onnxpb.GraphProto{
			Node:   []*onnxpb.NodeProto{{OpType: proto.String("Relu"), Input: []string{"x"}, Output: []string{"y"}}},
			Input:  []*onnxpb.ValueInfoProto{onnx.MakeValueInfo("x", onnx.Float, []onnx.Dim{{Value: -1, Param: "batch"}, {Value: 4}})},
			Output: []*onnxpb.ValueInfoProto{onnx.MakeValueInfo("y", onnx.Float, []onnx.Dim{{Value: -1, Param: "batch"}, {Value: 4}})},
		},
	}
	s := onnx.Summarize(m)
	fmt.Println(s.Producer, s.Opsets[0].Domain, s.Opsets[0].Version)
	fmt.Println(s.Inputs[0].Name, s.Inputs[0].DType, s.Inputs[0].Shape)
	fmt.Println(s.Ops, s.NodeCount)
	// Output:
	// example ai.onnx 17
	// x float32 [batch 4]
	// map[ai.onnx:map[Relu:1]] 1
}
