package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// refGemm is a float64 reference of C = alpha·op(A)·op(B) + beta·C.
func refGemm(transA, transB bool, m, n, k int, alpha float64, a []float32, lda int, b []float32, ldb int, beta float64, c []float32, ldc int) []float64 {
	out := make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for p := 0; p < k; p++ {
				var av, bv float32
				if transA {
					av = a[p*lda+i]
				} else {
					av = a[i*lda+p]
				}
				if transB {
					bv = b[j*ldb+p]
				} else {
					bv = b[p*ldb+j]
				}
				s += float64(av) * float64(bv)
			}
			out[i*n+j] = alpha*s + beta*float64(c[i*ldc+j])
		}
	}
	return out
}

func randSlice(rng *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(rng.NormFloat64())
	}
	return s
}

func kernels() []microKernel { return available }

func TestSgemm(t *testing.T) {
	saved := impl
	defer func() { impl = saved }()
	rng := rand.New(rand.NewPCG(1, 2))
	type shape struct{ m, n, k int }
	shapes := []shape{
		{1, 1, 1}, {1, 7, 3}, {5, 1, 9}, {2, 3, 0}, {6, 16, 1}, {6, 16, 5},
		{7, 17, 13}, {12, 32, 64}, {13, 33, 257}, {61, 45, 300}, {121, 70, 31},
		{130, 20, 520}, {18, 40, 70}, {30, 35, 300}, {3, 200, 40}, {64, 64, 64}, {100, 3100, 5}, {33, 90, 600},
	}
	for _, k := range kernels() {
		impl = k
		for _, s := range shapes {
			for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
				for _, threads := range []int{1, 2, 3} {
					ab := []struct{ alpha, beta float32 }{{1, 0}, {0.5, 1}, {-1.5, 0.25}}[rng.IntN(3)]
					// Row strides with padding to exercise lda/ldb/ldc.
					ra, ca := s.m, s.k
					if tr[0] {
						ra, ca = s.k, s.m
					}
					rb, cb := s.k, s.n
					if tr[1] {
						rb, cb = s.n, s.k
					}
					lda, ldb, ldc := ca+rng.IntN(3), cb+rng.IntN(3), s.n+rng.IntN(3)
					a := randSlice(rng, max(1, ra*lda))
					b := randSlice(rng, max(1, rb*ldb))
					c := randSlice(rng, max(1, s.m*ldc))
					want := refGemm(tr[0], tr[1], s.m, s.n, s.k, float64(ab.alpha), a, lda, b, ldb, float64(ab.beta), c, ldc)
					got := append([]float32(nil), c...)
					Sgemm(tr[0], tr[1], s.m, s.n, s.k, ab.alpha, a, lda, b, ldb, ab.beta, got, ldc, threads)
					name := fmt.Sprintf("%s/%dx%dx%d/tA=%v,tB=%v/threads=%d", k.name, s.m, s.n, s.k, tr[0], tr[1], threads)
					tol := 1e-5 * math.Sqrt(float64(s.k)+1) * 4
					for i := 0; i < s.m; i++ {
						for j := 0; j < s.n; j++ {
							w := want[i*s.n+j]
							if d := math.Abs(float64(got[i*ldc+j]) - w); d > tol*(1+math.Abs(w)) {
								t.Fatalf("%s: C[%d,%d] = %v, want %v", name, i, j, got[i*ldc+j], w)
							}
						}
						// Padding columns of C must be untouched.
						for j := s.n; j < ldc; j++ {
							if got[i*ldc+j] != c[i*ldc+j] {
								t.Fatalf("%s: padding C[%d,%d] changed", name, i, j)
							}
						}
					}
				}
			}
		}
	}
}

// TestSgemmThreadsDeterministic checks that the thread count does not change
// a single bit of the result.
func TestSgemmThreadsDeterministic(t *testing.T) {
	t.Logf("kernels: %v, in use: %s", len(available), Kernel())
	rng := rand.New(rand.NewPCG(3, 4))
	m, n, k := 130, 300, 700
	a, b := randSlice(rng, m*k), randSlice(rng, k*n)
	c1 := make([]float32, m*n)
	Sgemm(false, false, m, n, k, 1, a, k, b, n, 0, c1, n, 1)
	for _, th := range []int{2, 3, 4} {
		c2 := make([]float32, m*n)
		Sgemm(false, false, m, n, k, 1, a, k, b, n, 0, c2, n, th)
		for i := range c1 {
			if c1[i] != c2[i] {
				t.Fatalf("threads=%d: element %d differs: %v vs %v", th, i, c2[i], c1[i])
			}
		}
	}
}

func BenchmarkSgemm(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, kn := range Kernels()[1:] {
		if err := UseKernel(kn); err != nil {
			b.Fatal(err)
		}
		for _, s := range []struct{ m, n, k, threads int }{
			{128, 768, 768, 1}, {512, 3072, 768, 1}, {512, 3072, 768, 2}, {128, 128, 64, 1},
		} {
			a, bb := randSlice(rng, s.m*s.k), randSlice(rng, s.k*s.n)
			c := make([]float32, s.m*s.n)
			b.Run(fmt.Sprintf("%s/%dx%dx%d/t%d", Kernel(), s.m, s.n, s.k, s.threads), func(b *testing.B) {
				for b.Loop() {
					Sgemm(false, false, s.m, s.n, s.k, 1, a, s.k, bb, s.n, 0, c, s.n, s.threads)
				}
				b.ReportMetric(2*float64(s.m*s.n*s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOPS")
			})
		}
	}
	_ = UseKernel(Kernels()[len(Kernels())-1])
}

// TestSgemmBetaZeroIgnoresC checks that beta = 0 never reads C (NaN in C
// must not leak into the result), for every kernel and the small path.
func TestSgemmBetaZeroIgnoresC(t *testing.T) {
	saved := impl
	defer func() { impl = saved }()
	rng := rand.New(rand.NewPCG(8, 9))
	for _, kn := range kernels() {
		impl = kn
		for _, s := range [][3]int{{3, 3, 3}, {13, 37, 300}, {40, 70, 9}} {
			m, n, k := s[0], s[1], s[2]
			a, b := randSlice(rng, m*k), randSlice(rng, k*n)
			c := make([]float32, m*n)
			for i := range c {
				c[i] = float32(math.NaN())
			}
			Sgemm(false, false, m, n, k, 1, a, k, b, n, 0, c, n, 2)
			want := refGemm(false, false, m, n, k, 1, a, k, b, n, 0, make([]float32, m*n), n)
			for i := range c {
				if math.Abs(float64(c[i])-want[i]) > 1e-4*(1+math.Abs(want[i])) {
					t.Fatalf("%s %v: C[%d] = %v, want %v", kn.name, s, i, c[i], want[i])
				}
			}
		}
	}
}

// TestSgemmConstant checks that a registered constant B gives bit-identical
// results to the same call without registration, for whole matrices,
// sub-matrices, transposes and thread counts, and that release really
// drops the packed copy.
func TestSgemmConstant(t *testing.T) {
	saved := impl
	defer func() { impl = saved }()
	rng := rand.New(rand.NewPCG(10, 11))
	for _, kn := range kernels() {
		impl = kn
		for _, s := range [][3]int{{20, 70, 300}, {130, 96, 40}, {7, 33, 600}} {
			m, n, k := s[0], s[1], s[2]
			for _, transB := range []bool{false, true} {
				a := randSlice(rng, m*k)
				b := randSlice(rng, k*n+5)
				ldb := n
				if transB {
					ldb = k
				}
				for _, threads := range []int{1, 2} {
					want := make([]float32, m*n)
					Sgemm(false, transB, m, n, k, 1, a, k, b, ldb, 0, want, n, threads)
					release := RegisterConstant(b)
					for rep := 0; rep < 2; rep++ { // first call packs, second reuses
						got := make([]float32, m*n)
						Sgemm(false, transB, m, n, k, 1, a, k, b, ldb, 0, got, n, threads)
						for i := range got {
							if got[i] != want[i] {
								t.Fatalf("%s %v transB=%v threads=%d rep %d: C[%d] = %v, want %v", kn.name, s, transB, threads, rep, i, got[i], want[i])
							}
						}
					}
					release()
					// After release a changed B must be seen.
					b[0] += 1
					Sgemm(false, transB, m, n, k, 1, a, k, b, ldb, 0, want, n, threads)
					ref := refGemm(false, transB, m, n, k, 1, a, k, b, ldb, 0, make([]float32, m*n), n)
					if math.Abs(float64(want[0])-ref[0]) > 1e-3*(1+math.Abs(ref[0])) {
						t.Fatalf("%s: stale packed B used after release", kn.name)
					}
				}
			}
		}
	}
}

// TestConstantLookup registers several matrices and checks that each (and
// a sub-slice of one) is found, and that unregistered storage is not.
func TestConstantLookup(t *testing.T) {
	bufs := [][]float32{make([]float32, 64*64), make([]float32, 32*32), make([]float32, 128)}
	var rel []func()
	for _, b := range bufs {
		rel = append(rel, RegisterConstant(b))
	}
	defer func() {
		for _, r := range rel {
			r()
		}
	}()
	for i, b := range bufs[:2] {
		if constantPack(matrix{b, 8, false}, 8, 8) == nil {
			t.Errorf("buffer %d not found", i)
		}
	}
	if constantPack(matrix{bufs[0][100:], 8, false}, 8, 8) == nil {
		t.Error("sub-slice of a registered buffer not found")
	}
	if constantPack(matrix{make([]float32, 64), 8, false}, 8, 8) != nil {
		t.Error("unregistered buffer reported as constant")
	}
	rel[1]()
	if constantPack(matrix{bufs[1], 8, false}, 8, 8) != nil {
		t.Error("released buffer still constant")
	}
}
