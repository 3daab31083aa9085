package gemm

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// BenchmarkSgemmVsGonum compares this package's Sgemm (with every
// micro-kernel this CPU can run) with gonum's pure-Go blas32 implementation (the other candidate the issue names) on the
// shapes of a BERT-base layer at sequence 128, one thread each, and checks
// that both compute the same product.
//
//	go test ./internal/gemm -run XXX -bench VsGonum -benchtime 10x
func BenchmarkSgemmVsGonum(b *testing.B) {
	rng := rand.New(rand.NewPCG(21, 22))
	var impl gonum.Implementation
	for _, s := range []struct{ m, n, k int }{{128, 768, 768}, {128, 3072, 768}, {128, 768, 3072}} {
		a, bb := randSlice(rng, s.m*s.k), randSlice(rng, s.k*s.n)
		c1, c2 := make([]float32, s.m*s.n), make([]float32, s.m*s.n)
		Sgemm(false, false, s.m, s.n, s.k, 1, a, s.k, bb, s.n, 0, c1, s.n, 1)
		impl.Sgemm(blas.NoTrans, blas.NoTrans, s.m, s.n, s.k, 1, a, s.k, bb, s.n, 0, c2, s.n)
		for i := range c1 {
			if d := c1[i] - c2[i]; d > 1e-3 || d < -1e-3 {
				b.Fatalf("%v: results differ at %d: %v vs %v", s, i, c1[i], c2[i])
			}
		}
		flops := 2 * float64(s.m*s.n*s.k)
		saved := impl
		for _, kn := range Kernels() {
			if err := UseKernel(kn); err != nil {
				b.Fatal(err)
			}
			b.Run(fmt.Sprintf("%s/%dx%dx%d", kn, s.m, s.n, s.k), func(b *testing.B) {
				for b.Loop() {
					Sgemm(false, false, s.m, s.n, s.k, 1, a, s.k, bb, s.n, 0, c1, s.n, 1)
				}
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOPS")
			})
		}
		impl = saved
		b.Run(fmt.Sprintf("gonum/%dx%dx%d", s.m, s.n, s.k), func(b *testing.B) {
			for b.Loop() {
				impl.Sgemm(blas.NoTrans, blas.NoTrans, s.m, s.n, s.k, 1, a, s.k, bb, s.n, 0, c2, s.n)
			}
			b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOPS")
		})
	}
}
