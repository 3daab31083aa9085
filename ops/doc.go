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
package ops
