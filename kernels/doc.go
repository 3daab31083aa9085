// Package kernels provides the pure-Go ONNX kernels that linearize's
// native backend runs, and the registry every kernel registers in.
//
// The package holds a kernel for the standard (default-domain) ops that
// BERT-style exports use and for the com.microsoft contrib ops that
// onnxruntime's transformers optimizer leaves behind. linearize's own ops
// (domain ai.linearize) live in package ops, which registers their
// kernels here; an interpreter looks a node's kernel up with Lookup
// whatever its domain (the native backend in package infer imports ops
// for that).
//
// Kernels compute in float32 (float64 where an op is given doubles) with
// full ONNX broadcasting; integer and boolean kernels serve shape math.
// HalfWidened lets a float32 kernel take float16 and bfloat16 inputs, as
// the contrib ops and the custom ops do.
//
// The standard kernels follow each op's semantics across opset versions:
// a kernel is registered from the first version whose semantics it
// implements and reads Context.Opset where later versions moved an
// attribute to an input (Slice, Split, Squeeze, Unsqueeze, the Reduce ops,
// Clip, Pad) or changed a meaning (Softmax's axis before 13). Attribute
// values a kernel does not implement are errors, never a silently
// different answer. Data-movement ops (Transpose, Slice, Expand, Tile,
// Concat, Split, Gather, Pad) are strided copies; MatMul, Gemm and
// two-operand Einsum run on internal/gemm, and so does Conv (im2col, one
// GEMM per image and group).
//
// If and Loop evaluate their GraphProto attributes with Subgraph: a
// subgraph reads its own values first and the enclosing graphs' values
// through Context.Scope, which the interpreter running the node provides
// (the native backend in package infer, or an enclosing subgraph).
//
// A tensor whose size a model's values decide is checked against the
// tensor budget (MaxTensorBytes) before it is allocated, and no tensor may
// hold more than MaxElements elements, so that a malformed model is an
// error rather than an out-of-memory crash. Parallel and ParallelWith are
// the kernels' parallel loops, which re-raise a worker's panic in the
// caller.
//
// The kernels are checked against the ONNX backend node tests (Debian
// package libonnx-testdata): TestConformance runs every test whose ops are
// all registered and keeps the expected and skipped test names in
// testdata/conformance_expected.txt and testdata/conformance_skip.txt.
package kernels
