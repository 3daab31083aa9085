// Package runtime runs ONNX models from Go.
//
// Two backends implement the same Session interface:
//
//   - "ort": onnxruntime through github.com/yalue/onnxruntime_go, with the
//     shared library that scripts/setup.sh installs (see LibraryPath);
//   - "native": a pure-Go interpreter over the kernels in package ops, which
//     needs no shared library and serves as an independent second
//     implementation.
//
// On top of them the package compares backends and models value by value.
package runtime
