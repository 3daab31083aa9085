package ops_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/linearize/linearize/ops"
)

// Benchmarks of the Go kernels at BERT-base head shapes (12 heads of 64,
// M = k = 256), one batch; compare ns/op across sequence lengths to see the
// linear growth.
func BenchmarkPerformer(b *testing.B) {
	for _, s := range []int{256, 1024} {
		b.Run(fmt.Sprintf("S=%d", s), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 1))
			q, k, v := randQKV(rng, 0.5, 1, 12, s, 64, 64)
			omega := randTensor(rng, 1, 1, 256, 64)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := ops.Performer(q, k, v, omega, nil, ops.PerformerAttrs{Threads: 2}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkLinformer(b *testing.B) {
	for _, s := range []int{256, 1024} {
		b.Run(fmt.Sprintf("S=%d", s), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 1))
			q, k, v := randQKV(rng, 0.5, 1, 12, s, 64, 64)
			e := randTensor(rng, 1.0/16, 1, 256, s)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := ops.Linformer(q, k, v, e, e, nil, ops.LinformerAttrs{Threads: 2}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
