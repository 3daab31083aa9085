// Package models builds BERT-style ONNX graphs in the shapes real exporters
// write, with random (seeded) or supplied weights, at any width, depth and
// position-table length.
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
// The builder is deterministic: the same Config gives the same model bytes.
// Its models feed the converter's tests and the benchmark (convert bench),
// so that long-input measurements need no downloads.
package models
