// Package testdata holds small fixtures. Regenerate the bundled model with
//
//	go generate ./testdata
//
// bert-tiny.onnx is models.TinyConfig() written by `linlab build-model
// --preset tiny` (hidden 64, 4 heads, 2 layers, FFN 256, vocabulary 1000,
// 128 positions, opset 17, seed 1); models' tests fail when it is stale.
package testdata

//go:generate go run ../cmd/linlab build-model --preset tiny -o bert-tiny.onnx
