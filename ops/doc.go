// Package ops holds a native Go kernel for every ONNX op linearize runs:
// the standard ops BERT-style exports use, the com.microsoft contrib ops
// onnxruntime's transformers optimizer leaves behind, and linearize's own
// ops in domain ai.linearize (PerformerAttention, LinformerAttention,
// LocalPooledAttention, LaraAttention, HedgehogAttention).
//
// Each custom op lives in one file with both its Go kernel, which is the
// reference, and the ONNX FunctionProto of standard ops that defines it for
// any runtime, so that a converted model runs in stock onnxruntime.
//
// Kernels compute in float32 (float64 where an op is given doubles) with
// full ONNX broadcasting; integer and boolean kernels serve shape math.
// The ai.linearize ops take float32, float16 and bfloat16 inputs and
// compute in float32 whatever the input type: TypedFunction builds the
// function body of a half-precision model (each input cast to float32,
// the output cast back) and the Go kernels widen half inputs the same way.
//
// The standard (default-domain) kernels follow each op's semantics across
// opset versions: a kernel is registered from the first version whose
// semantics it implements and reads Context.Opset where later versions
// moved an attribute to an input (Slice, Split, Squeeze, Unsqueeze, the
// Reduce ops, Clip, Pad) or changed a meaning (Softmax's axis before 13).
// Attribute values a kernel does not implement are errors, never a
// silently different answer. Data-movement ops (Transpose, Slice, Expand,
// Tile, Concat, Split, Gather, Pad) are strided copies; MatMul, Gemm and
// two-operand Einsum run on internal/gemm, and so does Conv (im2col, one
// GEMM per image and group).
//
// If and Loop evaluate their GraphProto attributes with Subgraph: a
// subgraph reads its own values first and the enclosing graphs' values
// through Context.Scope, which the interpreter running the node provides
// (the native backend in package infer, or an enclosing subgraph).
//
// The kernels are checked against the ONNX backend node tests (Debian
// package libonnx-testdata): TestConformance runs every test whose ops are
// all registered and keeps the expected and skipped test names in
// testdata/conformance_expected.txt and testdata/conformance_skip.txt.
//
// # Linear attention's denominator
//
// A linear-attention estimate is a ratio, out_i = Σ_j κ_ij v_j / Σ_j κ_ij,
// and how the ratio is guarded is part of an op's definition, identical in
// the kernel and the function body. PerformerAttention's positive kernel
// has no epsilon: its features are positive, so the denominator is
// positive wherever a key is valid, and the ratio is computed as a
// mixture, out_i = Σ_r α_ir μ_r with α_i a softmax over the features and
// μ_r the values averaged under feature r, stabilised per feature column
// and per query row, so that the denominator is 1 by construction and no
// row collapses whatever the norms. An absolute epsilon after one global
// key maximum, the earlier form, turned most rows into near-zeros at query
// and key norms ×10, because their denominators, representable but tiny
// relative to the one key that set the maximum, fell below it. The only
// guard left is against an exact zero (a batch without valid keys gives
// 0). The trig kernel, whose estimates can be negative, and the causal
// op, with its running maximum, keep out = num/(max(den, 0) + epsilon);
// PerformerGuardedRows counts the rows that guard decides, and
// infer.ValidateOps fails a node where they are more than a small share.
package ops
