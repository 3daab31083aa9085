package kernels

// builtin lists the kernels of the ONNX standard ops and of onnxruntime's
// contrib ops (msDomain) this package serves, each with the opset version
// it serves from: Lookup picks, for a model's opset, the newest entry at
// or below it. The unary float functions (elementwise.go, misc.go) and the
// reductions (reduce.go) register themselves from their own tables.
var builtin = []struct {
	domain, op string
	since      int64
	kernel     Kernel
}{
	// binary.go: elementwise arithmetic, comparison and logic.
	{"", "Add", 7, arith(opAdd)},
	{"", "Sub", 7, arith(opSub)},
	{"", "Mul", 7, arith(opMul)},
	{"", "Div", 7, arith(opDiv)},
	{"", "Pow", 7, pow},
	{"", "PRelu", 7, prelu},
	{"", "Equal", 7, compare(func(c int) bool { return c == 0 }, true)},
	{"", "Less", 7, compare(func(c int) bool { return c < 0 }, false)},
	{"", "Greater", 7, compare(func(c int) bool { return c > 0 }, false)},
	{"", "LessOrEqual", 12, compare(func(c int) bool { return c <= 0 }, false)},
	{"", "GreaterOrEqual", 12, compare(func(c int) bool { return c >= 0 }, false)},
	{"", "And", 7, logic(func(x, y bool) bool { return x && y })},
	{"", "Or", 7, logic(func(x, y bool) bool { return x || y })},
	{"", "Xor", 7, logic(func(x, y bool) bool { return x != y })},
	{"", "Max", 8, variadic("Max")},
	{"", "Min", 8, variadic("Min")},
	{"", "Sum", 8, variadic("Sum")},
	{"", "Mean", 8, variadic("Mean")},
	{"", "Where", 9, where},
	// cast.go: casts.
	{"", "Cast", 6, castOp},
	{"", "CastLike", 15, castLike},
	// contrib_attention.go: onnxruntime's attention.
	{msDomain, "Attention", 1, HalfWidened(msAttention)},
	{msDomain, "MultiHeadAttention", 1, HalfWidened(multiHeadAttention)},
	// contrib_gelu.go: onnxruntime's fused activations.
	{msDomain, "Gelu", 1, HalfWidened(msGelu)},
	{msDomain, "BiasGelu", 1, HalfWidened(biasGelu)},
	{msDomain, "FastGelu", 1, HalfWidened(fastGelu)},
	{msDomain, "FusedMatMul", 1, HalfWidened(fusedMatMul)},
	// contrib_norm.go: onnxruntime's fused normalizations.
	{msDomain, "SkipLayerNormalization", 1, HalfWidened(skipLayerNorm)},
	{msDomain, "EmbedLayerNormalization", 1, HalfWidened(embedLayerNorm)},
	// control.go: control flow.
	{"", "If", 1, ifOp},
	{"", "Loop", 1, loopOp},
	// conv.go: convolution.
	{"", "Conv", 1, conv},
	// convtranspose.go: transposed convolution.
	{"", "ConvTranspose", 1, convTranspose},
	// einsum.go: Einsum.
	{"", "Einsum", 12, einsum},
	// groupnorm.go: group normalization.
	{"", "GroupNormalization", 18, groupNorm},
	// indexing.go: indexing and scatter.
	{"", "GatherND", 11, gatherND},
	{"", "ScatterND", 11, scatterND},
	{"", "ScatterElements", 11, scatterElements},
	{"", "TopK", 10, topK},
	{"", "Compress", 9, compress},
	// matmul.go: matrix products.
	{"", "MatMul", 1, matMul},
	{"", "Gemm", 7, gemmOp},
	// movement.go: data movement.
	{"", "Transpose", 1, transpose},
	{"", "Concat", 4, concat},
	{"", "Slice", 1, slice},
	{"", "Split", 2, split},
	{"", "Expand", 8, expand},
	{"", "Tile", 6, tile},
	{"", "Gather", 1, gather},
	{"", "GatherElements", 11, gatherElements},
	{"", "Pad", 2, pad},
	// nn.go: normalization, pooling and rearrangement.
	{"", "BatchNormalization", 9, batchNorm},
	{"", "InstanceNormalization", 6, instanceNorm},
	{"", "GlobalAveragePool", 1, globalPool(false)},
	{"", "GlobalMaxPool", 1, globalPool(true)},
	{"", "DepthToSpace", 1, depthToSpace},
	{"", "SpaceToDepth", 1, spaceToDepth},
	{"", "ReverseSequence", 10, reverseSequence},
	// normalization.go: layer normalization.
	// LayerNormalization is standard from opset 17; onnxruntime also accepts
	// it in the default domain at earlier opsets, and exported graphs use
	// that, so it is registered from opset 1.
	{"", "LayerNormalization", 1, layerNorm},
	// pool.go: pooling.
	{"", "AveragePool", 1, pooling(averagePool)},
	{"", "MaxPool", 1, pooling(maxPool)},
	// resize.go: resize.
	// Opset 10's Resize (no roi, no coordinate modes) is not covered.
	{"", "Resize", 11, resize},
	// sequence.go: ranges, cumulative sums and masks.
	{"", "Range", 11, rangeOp},
	{"", "CumSum", 11, cumSum},
	{"", "Trilu", 14, trilu},
	{"", "NonZero", 9, nonZero},
	{"", "OneHot", 9, oneHot},
	// shape.go: shapes.
	{"", "Shape", 1, shapeOp},
	{"", "Size", 1, sizeOp},
	{"", "Reshape", 5, reshape},
	{"", "Flatten", 1, flatten},
	{"", "Squeeze", 1, squeeze},
	{"", "Unsqueeze", 1, unsqueeze},
	{"", "Constant", 1, constant},
	{"", "ConstantOfShape", 9, constantOfShape},
	// softmax.go: softmax.
	{"", "Softmax", 1, softmaxKernel(false)},
	{"", "LogSoftmax", 1, softmaxKernel(true)},
	// quant.go: quantization.
	{"", "DequantizeLinear", 10, dequantizeLinear},
	{"", "QuantizeLinear", 10, quantizeLinear},
	{"", "DequantizeLinear", 13, dequantizeLinear},
	{"", "QuantizeLinear", 13, quantizeLinear},
	{"", "DequantizeLinear", 19, dequantizeLinear},
	{"", "QuantizeLinear", 19, quantizeLinear},
	{"", "DequantizeLinear", 21, dequantizeLinear},
	{"", "QuantizeLinear", 21, quantizeLinear},
	{"", "DynamicQuantizeLinear", 11, dynamicQuantizeLinear},
	{"", "MatMulInteger", 10, matMulInteger},
	{"", "QLinearMatMul", 10, qlinearMatMul},
	{"", "QLinearMatMul", 21, qlinearMatMul},
	// onnxruntime's own QuantizeLinear and DequantizeLinear (its quantizer
	// emits them for 16-bit types before opset 21): per tensor or per axis.
	{msDomain, "QuantizeLinear", 1, quantizeLinear},
	{msDomain, "DequantizeLinear", 1, dequantizeLinear},
	{msDomain, "MatMulIntegerToFloat", 1, matMulIntegerToFloat},
	{msDomain, "DynamicQuantizeMatMul", 1, dynamicQuantizeMatMul},
}

func init() {
	for _, e := range builtin {
		Register(e.domain, e.op, e.since, e.kernel)
	}
}
