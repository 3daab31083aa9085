// Package convert finds the multi-head self-attention blocks of a
// BERT-style ONNX graph and rewrites their softmax cores into linear
// attention (Performer or Linformer) ops of the ai.linearize domain.
//
// Detect anchors on every Softmax (and on onnxruntime's fused
// com.microsoft Attention and MultiHeadAttention nodes) and matches the
// core
//
//	out = softmax(scale·Q·Kᵀ + bias)·V
//
// backwards and forwards with backtracking over the forms real exporters
// write: the scale after the QK product (Div or Mul), on Q, or split over Q
// and Kᵀ; K transposed by MatMul layout or by Einsum; additive, Where and
// DistilBERT masks. Every check that fails is reported, so a Softmax that
// is not matched says why (Detection.Unmatched).
//
// ToPerformer and ToLinformer replace each convertible core by one node of the
// ai.linearize domain whose definition travels with the model as a
// model-local function, so the written model runs in stock onnxruntime.
package convert
