// Package models builds BERT-style and ModernBERT-style ONNX graphs in the
// shapes real exporters write, with random (seeded) or supplied weights,
// at any width, depth and position-table length.
//
// BERT emits the graph the PyTorch exporter writes for a Hugging Face
// BertModel with eager attention: embedding Gathers (position ids sliced
// from a constant position_ids buffer), a legacy additive mask
// (1 − mask)·min_float32, per layer Q/K/V projections split into heads by a
// Shape/Gather/Unsqueeze/Concat/Reshape chain, scaled dot-product scores,
// Softmax over the last axis, head merge, residual + LayerNorm, and an FFN
// with the exact (Erf) Gelu. LayerNormalization is a single op from opset
// 17 and the ReduceMean/Sub/Pow/Add/Sqrt/Div decomposition below it.
//
// ModernBERT emits the graph the TorchScript exporter writes for a Hugging
// Face ModernBertModel with eager attention (the form of
// testdata/fixtures/modernbert_eager_op17.onnx, op for op): a token Gather
// and bias-free LayerNorm (no position table), then pre-norm layers (layer
// 0 without attn_norm) with a packed Wqkv MatMul viewed [B,S,3,H,D],
// Split on the 3 and Squeezed, rotary embeddings in the rotate-half form
// (cos and sin of Range positions times the inverse frequencies of θ =
// 160000 for global layers, 10000 for local ones; q·cos +
// Concat(−x2, x1)·sin through Slice/Neg/Concat), scores
// MatMul(q, kᵀ)·(1/√D) plus an additive bias, Softmax, Wo, and a GeGLU MLP
// (Wi to 2·intermediate, chunked by Slice, exact Gelu of the input times
// the gate). Layer i attends globally when i % GlobalEvery == 0. The
// biases are built as transformers' masking utilities export them: from
// index vectors batch [B,1,1,1], query [1,1,S,1] and key [1,1,1,S] (Range
// over sizes taken by Shape), the padding mask attention_mask[batch, key]
// (Flatten, Gather), the rule query ≥ 0, and for local layers the band
// LessOrEqual(Abs(Sub(query, key)), window/2), combined by And, expanded
// to [B,1,S,S] and made additive by Where(allowed, 0, min_float32).
//
// The builders are deterministic: the same config gives the same model bytes.
// Its models feed the converter's tests and the benchmark (convert bench),
// so that long-input measurements need no downloads.
package models
