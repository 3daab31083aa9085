package kernels_test

import (
	"math/rand/v2"
	"testing"

	"github.com/linearize/linearize/kernels"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// Benchmarks of the standard kernels on BERT-base shapes at sequence 128
// (hidden 768, 12 heads of 64, FFN 3072). Run with
//
//	go test ./kernels/ -run '^$' -bench Kernel -benchtime 20x

func benchKernel(b *testing.B, n *onnxpb.NodeProto, opset int64, in ...*onnx.Tensor) {
	k, err := kernels.Lookup("", n.GetOpType(), opset)
	if err != nil {
		b.Fatal(err)
	}
	ctx := &kernels.Context{Node: n, Opset: opset, Threads: 1}
	bytes := 0
	for _, t := range in {
		bytes += 4 * t.Len()
	}
	b.SetBytes(int64(bytes))
	b.ResetTimer()
	for range b.N {
		if _, err := k(ctx, in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkKernelSoftmax(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	benchKernel(b, kNode("Softmax", 1), 13, kRand(rng, 1, 12, 128, 128))
}

func BenchmarkKernelAddBias(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	benchKernel(b, kNode("Add", 1), 13, kRand(rng, 1, 128, 3072), kRand(rng, 3072))
}

func BenchmarkKernelMulSame(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	benchKernel(b, kNode("Mul", 1), 13, kRand(rng, 1, 128, 3072), kRand(rng, 1, 128, 3072))
}

func BenchmarkKernelErf(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	benchKernel(b, kNode("Erf", 1), 13, kRand(rng, 1, 128, 3072))
}

func BenchmarkKernelLayerNorm(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	benchKernel(b, kNode("LayerNormalization", 3), 17, kRand(rng, 1, 128, 768), kRand(rng, 768), kRand(rng, 768))
}

func BenchmarkKernelTransposeHeads(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	benchKernel(b, kNode("Transpose", 1, kAttr("perm", []int64{0, 2, 1, 3})), 13, kRand(rng, 1, 128, 12, 64))
}

func BenchmarkKernelTransposeKeys(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	benchKernel(b, kNode("Transpose", 1, kAttr("perm", []int64{0, 2, 3, 1})), 13, kRand(rng, 1, 128, 12, 64))
}

func BenchmarkKernelReduceMean(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	benchKernel(b, kNode("ReduceMean", 1, kAttr("axes", []int64{-1})), 13, kRand(rng, 1, 128, 768))
}

func BenchmarkKernelMatMul(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	benchKernel(b, kNode("MatMul", 1), 13, kRand(rng, 1, 128, 768), kRand(rng, 768, 768))
}
