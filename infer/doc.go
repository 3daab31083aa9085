// Package infer runs ONNX models from Go.
//
// Two backends implement the same Session interface:
//
//   - "ort": onnxruntime through github.com/yalue/onnxruntime_go, with the
//     shared library that scripts/setup.sh installs (see LibraryPath). It
//     needs cgo: in a build without cgo (CGO_ENABLED=0, cross-compiles) or
//     with the linearize_noort tag, Open("ort") returns an error saying so
//     and DefaultBackend is "native";
//   - "native": a pure-Go interpreter over the kernels registered in
//     package kernels (the standard ops, and the custom ops of package
//     ops), which needs no shared library and serves as an independent
//     second implementation.
//
// On top of them the package compares backends and models value by value.
package infer
