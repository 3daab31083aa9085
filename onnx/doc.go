// Package onnx reads, writes and inspects ONNX models for linearize.
//
// It is the bottom layer of the project: the generated protobuf types live in
// onnx/onnxpb, and this package adds what every other package needs on top of
// them:
//
//   - Load and Save of a ModelProto, with external data resolved strictly
//     inside the model's folder, bounded sizes for untrusted files, and
//     atomic writes (temp file + rename) that never overwrite the input;
//   - Tensor, a dense Go tensor, with exact conversion to and from
//     TensorProto (raw_data and typed fields, little-endian) and .npy files;
//   - graph helpers: producer/consumer index, topological order, dead-node
//     removal, unique names, opset lookup, attribute access and constant
//     folding of Constant nodes and initializers;
//   - Summarize, the at-a-glance description that convert inspect prints.
//
// Errors are values prefixed with "onnx: " and name the file, tensor or node
// they concern.
package onnx
