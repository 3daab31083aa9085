// Package gemm multiplies float32 matrices for the native backend.
//
// Sgemm follows the Goto/BLIS scheme: op(B) is packed into k×nr column
// panels and op(A) into mr×k row panels (alpha folded in), blocks are sized
// for the caches, and a register-blocked micro-kernel computes one mr×nr
// tile of C at a time. On amd64 the micro-kernel is written in Go
// assembly: 12×32 with twenty-four ZMM accumulators where AVX-512 is
// available, else 6×16 with twelve YMM accumulators where AVX2 and FMA
// are; elsewhere (or with the purego build tag) a pure-Go 2×4 kernel is
// used. The choice is made once at start-up from CPUID, see Kernel.
//
// RegisterConstant lets callers mark matrices that never change (model
// weights) so that they are packed once and reused across calls.
package gemm

import (
	"fmt"
	"sync"
)

// Cache blocking parameters (in elements).
const (
	kc = 256  // depth of a packed panel: a kr×nr B panel (16 KiB) stays in L1
	mc = 120  // rows of A packed at once (a multiple of every mr): 120 KiB in L2
	nc = 3072 // columns of B packed at once
)

// Kernel names the micro-kernel in use: "avx512 12x32", "avx2-fma 6x16"
// or "go 2x4".
func Kernel() string { return impl.name }

// microKernel describes one register-blocked kernel.
type microKernel struct {
	name   string
	mr, nr int
	// full computes C[mr×nr] += Apanel·Bpanel (add) or C = Apanel·Bpanel
	// (!add) for packed panels of depth k, C row stride ldc.
	full func(k int, a, b, c []float32, ldc int, add bool)
	// copyPanel, when set, copies a full kb×nr panel of a row-major
	// (untransposed) B with row stride ld into dst.
	copyPanel func(dst, src []float32, kb, ld, nr int)
}

var impl microKernel = genericKernel

// available lists every kernel this CPU can run (for tests).
var available = []microKernel{genericKernel}

// small is the m·n·k below which packing does not pay.
const small = 8 * 8 * 8

// Sgemm computes C = alpha·op(A)·op(B) + beta·C for row-major matrices,
// where op(X) is X or Xᵀ. op(A) is m×k, op(B) is k×n, C is m×n; lda, ldb and
// ldc are the row strides of A, B and C as stored. threads bounds the
// goroutines used (≤ 1: serial).
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int, threads int) {
	if m <= 0 || n <= 0 {
		return
	}
	A := matrix{a, lda, transA}
	B := matrix{b, ldb, transB}
	if k <= 0 || alpha == 0 || m*n*k <= small {
		scaleC(m, n, beta, c, ldc)
		if k > 0 && alpha != 0 {
			naive(m, n, k, alpha, A, B, c, ldc)
		}
		return
	}
	// With beta = 0 the first depth block overwrites C, so C is never
	// cleared separately (nor read: NaNs in it do not propagate).
	overwrite := beta == 0
	if !overwrite {
		scaleC(m, n, beta, c, ldc)
	}
	pk := constantPack(B, k, n)
	// Split C into a grid of at most threads parts. Columns are split first
	// (each part then packs only its own share of B), rows when n is narrow.
	if threads < 1 {
		threads = 1
	}
	if work := m * n * k / (64 * 64 * 64); threads > work {
		threads = max(1, work)
	}
	pn, pm := threads, 1
	for pn > 1 && n/pn < 2*impl.nr {
		pn--
	}
	pm = threads / pn
	for pm > 1 && m/pm < 2*impl.mr {
		pm--
	}
	if pn*pm <= 1 {
		run(m, n, k, alpha, A, B, c, ldc, overwrite, pk, 0)
		return
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var panicked any
	for pi := 0; pi < pm; pi++ {
		i0, i1 := split(m, pm, pi, impl.mr)
		for pj := 0; pj < pn; pj++ {
			j0, j1 := split(n, pn, pj, impl.nr)
			if i0 == i1 || j0 == j1 {
				continue
			}
			wg.Add(1)
			go func(i0, i1, j0, j1 int) {
				defer wg.Done()
				// A panic (an operand shorter than its dimensions say) is
				// raised again in the caller's goroutine, where the
				// native backend recovers it, instead of killing the
				// process from here.
				defer func() {
					if r := recover(); r != nil {
						mu.Lock()
						if panicked == nil {
							panicked = r
						}
						mu.Unlock()
					}
				}()
				run(i1-i0, j1-j0, k, alpha, A.rows(i0), B.cols(j0), c[i0*ldc+j0:], ldc, overwrite, pk, j0)
			}(i0, i1, j0, j1)
		}
	}
	wg.Wait()
	if panicked != nil {
		panic(panicked)
	}
}

// split returns the p-th of parts ranges of [0,n), boundaries rounded to
// multiples of unit.
func split(n, parts, p, unit int) (int, int) {
	units := (n + unit - 1) / unit
	lo := min(n, units*p/parts*unit)
	hi := min(n, units*(p+1)/parts*unit)
	return lo, hi
}

// matrix is a row-major operand that may be read transposed.
type matrix struct {
	d     []float32
	ld    int
	trans bool
}

// at returns op(X)[i][j].
func (x matrix) at(i, j int) float32 {
	if x.trans {
		return x.d[j*x.ld+i]
	}
	return x.d[i*x.ld+j]
}

// rows returns op(X) without its first i rows.
func (x matrix) rows(i int) matrix {
	if i == 0 {
		return x
	}
	if x.trans {
		return matrix{x.d[i:], x.ld, true}
	}
	return matrix{x.d[i*x.ld:], x.ld, false}
}

// cols returns op(X) without its first j columns.
func (x matrix) cols(j int) matrix {
	if j == 0 {
		return x
	}
	if x.trans {
		return matrix{x.d[j*x.ld:], x.ld, true}
	}
	return matrix{x.d[j:], x.ld, false}
}

func scaleC(m, n int, beta float32, c []float32, ldc int) {
	if beta == 1 {
		return
	}
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(row)
			continue
		}
		for j := range row {
			row[j] *= beta
		}
	}
}

// naive accumulates C += alpha·op(A)·op(B) directly.
func naive(m, n, k int, alpha float32, A, B matrix, c []float32, ldc int) {
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		for p := 0; p < k; p++ {
			av := alpha * A.at(i, p)
			if B.trans {
				for j := range row {
					row[j] += av * B.d[j*B.ld+p]
				}
			} else {
				brow := B.d[p*B.ld : p*B.ld+n]
				for j, bv := range brow {
					row[j] += av * bv
				}
			}
		}
	}
}

var bufPool = sync.Pool{New: func() any { return new(buffers) }}

type buffers struct{ a, b []float32 }

func grow(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

// run is the serial blocked algorithm: C += alpha·op(A)·op(B), or C =
// alpha·op(A)·op(B) when overwrite is set. pk, when not nil, is op(B) of
// the whole call packed in advance, of which this part starts at column
// j0 (a multiple of nr).
func run(m, n, k int, alpha float32, A, B matrix, c []float32, ldc int, overwrite bool, pk *packedB, j0 int) {
	mr, nr := impl.mr, impl.nr
	buf := bufPool.Get().(*buffers)
	defer bufPool.Put(buf)
	var tile [12 * 32]float32 // edge tiles: mr·nr ≤ 384
	for jc := 0; jc < n; jc += nc {
		nb := min(nc, n-jc)
		nbp := (nb + nr - 1) / nr * nr
		for pc := 0; pc < k; pc += kc {
			kb := min(kc, k-pc)
			add := pc > 0 || !overwrite
			var bpack []float32
			if pk != nil {
				bpack = pk.panels(pc/kc, kb, j0+jc)[:nbp*kb]
			} else {
				buf.b = grow(buf.b, nbp*kb)
				packB(buf.b, B, pc, jc, kb, nb, nr)
				bpack = buf.b
			}
			for ic := 0; ic < m; ic += mc {
				mb := min(mc, m-ic)
				mbp := (mb + mr - 1) / mr * mr
				buf.a = grow(buf.a, mbp*kb)
				packA(buf.a, A, ic, pc, mb, kb, mr, alpha)
				for jr := 0; jr < nb; jr += nr {
					bp := bpack[jr*kb : (jr+nr)*kb]
					nn := min(nr, nb-jr)
					for ir := 0; ir < mb; ir += mr {
						ap := buf.a[ir*kb : (ir+mr)*kb]
						mm := min(mr, mb-ir)
						co := (ic+ir)*ldc + jc + jr
						if mm == mr && nn == nr {
							impl.full(kb, ap, bp, c[co:], ldc, add)
							continue
						}
						t := tile[:mr*nr]
						impl.full(kb, ap, bp, t, nr, false)
						for i := 0; i < mm; i++ {
							crow := c[co+i*ldc : co+i*ldc+nn]
							trow := t[i*nr : i*nr+nn]
							if !add {
								copy(crow, trow)
								continue
							}
							for j := range crow {
								crow[j] += trow[j]
							}
						}
					}
				}
			}
		}
	}
}

// packB writes op(B)[pc:pc+kb, jc:jc+nb] as panels of nr columns: panel q
// holds kb rows of nr consecutive values, zero-padded past nb.
func packB(dst []float32, B matrix, pc, jc, kb, nb, nr int) {
	for j0 := 0; j0 < nb; j0 += nr {
		panel := dst[j0*kb : (j0+nr)*kb]
		nn := min(nr, nb-j0)
		if !B.trans && nn == nr && impl.copyPanel != nil && kb > 0 {
			impl.copyPanel(panel, B.d[pc*B.ld+jc+j0:], kb, B.ld, nr)
			continue
		}
		if !B.trans {
			for p := 0; p < kb; p++ {
				src := B.d[(pc+p)*B.ld+jc+j0:]
				row := panel[p*nr : p*nr+nr]
				copy(row[:nn], src[:nn])
				clear(row[nn:])
			}
			continue
		}
		if nn < nr {
			clear(panel)
		}
		for j := 0; j < nn; j++ {
			src := B.d[(jc+j0+j)*B.ld+pc:]
			src = src[:kb]
			for p, v := range src {
				panel[p*nr+j] = v
			}
		}
	}
}

// packA writes alpha·op(A)[ic:ic+mb, pc:pc+kb] as panels of mr rows: panel
// holds kb columns of mr consecutive values, zero-padded past mb.
func packA(dst []float32, A matrix, ic, pc, mb, kb, mr int, alpha float32) {
	for i0 := 0; i0 < mb; i0 += mr {
		panel := dst[i0*kb : (i0+mr)*kb]
		mm := min(mr, mb-i0)
		if mm < mr {
			clear(panel)
		}
		if A.trans {
			for p := 0; p < kb; p++ {
				src := A.d[(pc+p)*A.ld+ic+i0:]
				src = src[:mm]
				col := panel[p*mr : p*mr+mm]
				for i, v := range src {
					col[i] = alpha * v
				}
			}
			continue
		}
		if mm == mr && (mr == 12 || mr == 6) {
			packRows(panel, A.d[(ic+i0)*A.ld+pc:], A.ld, kb, mm)
			if alpha != 1 {
				for i := range panel {
					panel[i] *= alpha
				}
			}
			continue
		}
		if alpha == 1 {
			for i := 0; i < mm; i++ {
				src := A.d[(ic+i0+i)*A.ld+pc:]
				src = src[:kb]
				for p, v := range src {
					panel[p*mr+i] = v
				}
			}
			continue
		}
		for i := 0; i < mm; i++ {
			src := A.d[(ic+i0+i)*A.ld+pc:]
			src = src[:kb]
			for p, v := range src {
				panel[p*mr+i] = alpha * v
			}
		}
	}
}

// packRows interleaves mr (6 or 12) rows of a (row stride ld, kb values
// each) into panel: panel[p·mr+i] = a[i·ld+p]. Reading the rows side by
// side keeps the writes sequential.
func packRows(panel, a []float32, ld, kb, mr int) {
	row := func(i int) []float32 { return a[i*ld : i*ld+kb] }
	r0, r1, r2, r3, r4, r5 := row(0), row(1), row(2), row(3), row(4), row(5)
	if mr == 6 {
		for p := 0; p < kb; p++ {
			c := panel[p*6 : p*6+6 : p*6+6]
			c[0], c[1], c[2], c[3], c[4], c[5] = r0[p], r1[p], r2[p], r3[p], r4[p], r5[p]
		}
		return
	}
	r6, r7, r8, r9, r10, r11 := row(6), row(7), row(8), row(9), row(10), row(11)
	for p := 0; p < kb; p++ {
		c := panel[p*12 : p*12+12 : p*12+12]
		c[0], c[1], c[2], c[3], c[4], c[5] = r0[p], r1[p], r2[p], r3[p], r4[p], r5[p]
		c[6], c[7], c[8], c[9], c[10], c[11] = r6[p], r7[p], r8[p], r9[p], r10[p], r11[p]
	}
}

// genericKernel is the pure-Go 2×4 micro-kernel: eight scalar
// accumulators plus the six operands of a step fit the sixteen floating-
// point registers, so nothing spills (a 4×4 tile is slower for that
// reason).
var genericKernel = microKernel{name: "go 2x4", mr: 2, nr: 4, full: kernel2x4}

func kernel2x4(k int, a, b, c []float32, ldc int, add bool) {
	var c00, c01, c02, c03, c10, c11, c12, c13 float32
	a = a[:2*k]
	b = b[:4*k]
	for p := 0; p < k; p++ {
		bp := b[4*p : 4*p+4 : 4*p+4]
		a0, a1 := a[2*p], a[2*p+1]
		b0, b1, b2, b3 := bp[0], bp[1], bp[2], bp[3]
		c00 += a0 * b0
		c01 += a0 * b1
		c02 += a0 * b2
		c03 += a0 * b3
		c10 += a1 * b0
		c11 += a1 * b1
		c12 += a1 * b2
		c13 += a1 * b3
	}
	if !add {
		clear(c[0:4])
		clear(c[ldc : ldc+4])
	}
	r := c[0:4:4]
	r[0] += c00
	r[1] += c01
	r[2] += c02
	r[3] += c03
	r = c[ldc : ldc+4 : ldc+4]
	r[0] += c10
	r[1] += c11
	r[2] += c12
	r[3] += c13
}

// Kernels lists the micro-kernels this CPU can run, slowest first.
func Kernels() []string {
	names := make([]string, len(available))
	for i, k := range available {
		names[i] = k.name
	}
	return names
}

// UseKernel selects a micro-kernel by name (one of Kernels) for all later
// calls; it is meant for benchmarks and tests, not for concurrent use with
// Sgemm.
func UseKernel(name string) error {
	for _, k := range available {
		if k.name == name {
			impl = k
			return nil
		}
	}
	return fmt.Errorf("gemm: kernel %q not available (have %v)", name, Kernels())
}
