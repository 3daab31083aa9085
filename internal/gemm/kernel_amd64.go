//go:build amd64 && !purego

package gemm

import "unsafe"

// cpuid and xgetbv are implemented in kernel_amd64.s.
func cpuid(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)
func xgetbv() (eax, edx uint32)

// kernel6x16 computes C[6×16] += A·B for packed panels of depth k ≥ 1
// (a: k×6, b: k×16), C row stride ldc elements; with add false it stores
// C = A·B instead.
//
//go:noescape
func kernel6x16(k int, a, b, c *float32, ldc int, add bool)

// kernel12x32 computes C[12×32] += A·B for packed panels of depth k ≥ 1
// (a: k×12, b: k×32), C row stride ldc elements; add as for kernel6x16.
//
//go:noescape
func kernel12x32(k int, a, b, c *float32, ldc int, add bool)

// copyRows copies rows×width floats from src (row stride ld) to dst
// (contiguous); width must be a positive multiple of 8. It needs AVX.
//
//go:noescape
func copyRows(dst, src *float32, rows, ld, width int)

// hasAVX512F reports whether the CPU and OS support AVX-512 Foundation
// (ZMM state enabled in XCR0).
func hasAVX512F() bool {
	if !hasAVX2FMA() {
		return false
	}
	if xcr0, _ := xgetbv(); xcr0&0xe6 != 0xe6 {
		return false
	}
	_, ebx7, _, _ := cpuid(7, 0)
	return ebx7&(1<<16) != 0
}

// hasAVX2FMA reports whether the CPU and OS support AVX2 and FMA3.
func hasAVX2FMA() bool {
	maxID, _, _, _ := cpuid(0, 0)
	if maxID < 7 {
		return false
	}
	_, _, ecx1, _ := cpuid(1, 0)
	const fma, osxsave, avx = 1 << 12, 1 << 27, 1 << 28
	if ecx1&(fma|osxsave|avx) != fma|osxsave|avx {
		return false
	}
	if xcr0, _ := xgetbv(); xcr0&6 != 6 { // XMM and YMM state enabled
		return false
	}
	_, ebx7, _, _ := cpuid(7, 0)
	return ebx7&(1<<5) != 0
}

var avx2Kernel = microKernel{
	name: "avx2-fma 6x16",
	mr:   6,
	nr:   16,
	full: func(k int, a, b, c []float32, ldc int, add bool) {
		if k == 0 {
			if !add {
				for i := 0; i < 6; i++ {
					clear(c[i*ldc : i*ldc+16])
				}
			}
			return
		}
		// Bounds the assembly relies on.
		_ = a[6*k-1]
		_ = b[16*k-1]
		_ = c[5*ldc+15]
		kernel6x16(k, unsafe.SliceData(a), unsafe.SliceData(b), unsafe.SliceData(c), ldc, add)
	},
}

var avx512Kernel = microKernel{
	name: "avx512 12x32",
	mr:   12,
	nr:   32,
	full: func(k int, a, b, c []float32, ldc int, add bool) {
		if k == 0 {
			if !add {
				for i := 0; i < 12; i++ {
					clear(c[i*ldc : i*ldc+32])
				}
			}
			return
		}
		_ = a[12*k-1]
		_ = b[32*k-1]
		_ = c[11*ldc+31]
		kernel12x32(k, unsafe.SliceData(a), unsafe.SliceData(b), unsafe.SliceData(c), ldc, add)
	},
}

// copyPanelAVX copies a full kb×nr panel of a row-major B.
func copyPanelAVX(dst, src []float32, kb, ld, nr int) {
	_ = dst[kb*nr-1]
	_ = src[(kb-1)*ld+nr-1]
	copyRows(unsafe.SliceData(dst), unsafe.SliceData(src), kb, ld, nr)
}

func init() {
	if hasAVX2FMA() {
		avx2Kernel.copyPanel = copyPanelAVX
		avx512Kernel.copyPanel = copyPanelAVX
		available = append(available, avx2Kernel)
	}
	if hasAVX512F() {
		available = append(available, avx512Kernel)
	}
	switch {
	case hasAVX512F():
		impl = avx512Kernel
	case hasAVX2FMA():
		impl = avx2Kernel
	}
}
