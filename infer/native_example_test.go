package infer_test

import (
	"fmt"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// A one-node model y = com.microsoft:FastGelu(x) run by the native
// backend, which needs no shared library.
func ExampleNewNativeSession() {
	str := func(s string) *string { return &s }
	v17, v1 := int64(17), int64(1)
	m := &onnxpb.ModelProto{
		IrVersion: func() *int64 { v := int64(8); return &v }(),
		OpsetImport: []*onnxpb.OperatorSetIdProto{
			{Domain: str(""), Version: &v17},
			{Domain: str("com.microsoft"), Version: &v1},
		},
		Graph: &onnxpb.GraphProto{
			Name:   str("gelu"),
			Node:   []*onnxpb.NodeProto{{OpType: str("FastGelu"), Domain: str("com.microsoft"), Input: []string{"x"}, Output: []string{"y"}}},
			Input:  []*onnxpb.ValueInfoProto{onnx.MakeValueInfo("x", onnx.Float, []onnx.Dim{{Value: 3}})},
			Output: []*onnxpb.ValueInfoProto{onnx.MakeValueInfo("y", onnx.Float, []onnx.Dim{{Value: 3}})},
		},
	}
	s, err := infer.NewNativeSession(m, infer.Options{Threads: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	out, err := s.Run(map[string]*onnx.Tensor{"x": onnx.NewFloat([]int{3}, []float32{-1, 0, 2})})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%.4f\n", out["y"].Floats())
	// Output: [-0.1588 0.0000 1.9546]
}

// CompareTensors measures how far a result is from a reference.
func ExampleCompareTensors() {
	ref := onnx.NewFloat([]int{4}, []float32{1, -2, 4, 0})
	got := onnx.NewFloat([]int{4}, []float32{1, -2, 4.001, 0})
	d := infer.CompareTensors(got, ref)
	fmt.Printf("max abs %.4f, scaled %.6f, within 1e-3: %v\n", d.MaxAbs, d.Scaled, d.OK(1e-3))
	// Output: max abs 0.0010, scaled 0.000250, within 1e-3: true
}
