// Package convert finds the multi-head self-attention blocks of a
// BERT-style ONNX graph and rewrites their softmax cores into linear
// attention ops of the ai.linearize domain (Performer, Linformer,
// local+pooled, LARA, and the windowed long-input form).
//
// Detect anchors on every Softmax (and on onnxruntime's fused
// com.microsoft Attention and MultiHeadAttention nodes) and matches the
// core
//
//	out = softmax(scale·Q·Kᵀ + bias)·V
//
// backwards and forwards with backtracking over the forms real exporters
// write: the scale after the QK product (Div or Mul), on Q, split over Q
// and Kᵀ, or on Q before its head split; K transposed by MatMul layout or
// by Einsum; additive, Where, expanded and DistilBERT masks; Softmax cast
// to float32 and back. The forms are rows of tables (patterns.go: probs,
// score, product and bias forms, and the checks on a whole core) run by
// one engine against graph facts computed once per graph
// (internal/graphfacts). A Softmax that is not matched says why: the
// failure of the reading that got furthest (Detection.Unmatched). Linear
// attention already in the model is listed in Detection.Linear, and the
// rewrites refuse such a model.
//
// ToPerformer, ToLinformer, ToLocalPooled, ToLARA and ToHedgehog replace each
// convertible core by one node of the ai.linearize domain whose definition
// travels with the model as a model-local function, so the written model
// runs in stock onnxruntime. ToLong makes a 512-position encoder read long
// inputs: positions restart every window and each query attends exactly to
// its own window (LocalPooledAttention with reach 0), so the result is the
// original up to one window and chunking window by window beyond;
// PositionLimit and ExtendPositions read and grow the position table, and
// ExtendPositions scales a rotary model's frequencies (NTK, linear, YaRN;
// RotaryFrequencies) so that it reads past its trained length.
// When they convert nothing they return an error wrapping
// ErrNothingConverted that gives each block's reason.
//
// Each conversion is declared once, in its rewrite's file: its options,
// its To function, its cost-model form and its Conversion (registry.go),
// which gives its name, op type, sizes and defaults, bench variant and
// pricing. Conversions, LookupConversion and ConversionOfOp are where the
// command line, the benchmark, the cost model and the plots look
// conversions up (docs/library.md, "Adding a conversion"). The defaults
// shared by several are named: DefaultBlock and DefaultSegments (64) and
// DefaultSinks, a Sinks set.
//
// Published models come in float16, bfloat16 and int8. Facts proved from
// constants and operators outrank declared value_info (which conversion
// tools leave with placeholder dims); each block's element type is read
// from what produces its queries, and a half-precision block gets
// constants of its own type and the op's typed function body
// (ops.TypedFunction), which computes in float32. Quantized projections
// (DynamicQuantizeLinear and MatMulInteger, QDQ pairs, DequantizeLinear
// weights) are left as they are: only the softmax core is replaced.
package convert
