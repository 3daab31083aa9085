// Package ops holds a native Go kernel for every ONNX op linearize runs:
// the standard ops BERT-style exports use, the com.microsoft contrib ops
// onnxruntime's transformers optimizer leaves behind, and linearize's own
// ops in domain ai.linearize (PerformerAttention, LinformerAttention).
//
// Each custom op lives in one file with both its Go kernel, which is the
// reference, and the ONNX FunctionProto of standard ops that defines it for
// any runtime, so that a converted model runs in stock onnxruntime.
//
// Kernels compute in float32 (float64 where an op is given doubles) with
// full ONNX broadcasting; integer and boolean kernels serve shape math.
//
// The standard (default-domain) kernels follow each op's semantics across
// opset versions: a kernel is registered from the first version whose
// semantics it implements and reads Context.Opset where later versions
// moved an attribute to an input (Slice, Split, Squeeze, Unsqueeze, the
// Reduce ops, Clip, Pad) or changed a meaning (Softmax's axis before 13).
// Attribute values a kernel does not implement are errors, never a
// silently different answer. Data-movement ops (Transpose, Slice, Expand,
// Tile, Concat, Split, Gather, Pad) are strided copies; MatMul, Gemm and
// two-operand Einsum run on internal/gemm.
//
// The kernels are checked against the ONNX backend node tests (Debian
// package libonnx-testdata): TestConformance runs every test whose ops are
// all registered and keeps the expected and skipped test names in
// testdata/conformance_expected.txt and testdata/conformance_skip.txt.
package ops
