// Package onnxpb holds the Go types of the ONNX protobuf schema
// (ModelProto, GraphProto, NodeProto, TensorProto, ...), generated from the
// official onnx-ml.proto by protoc-gen-go. Do not edit onnx-ml.pb.go; run
// `go generate ./onnx/onnxpb` after scripts/setup.sh has installed the tools.
//
// Unknown fields are kept by the generated code, so a model written by a
// newer ONNX round-trips through Load and Save unchanged.
package onnxpb

//go:generate bash ../../scripts/gen-proto.sh
