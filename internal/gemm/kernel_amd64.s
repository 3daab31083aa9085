//go:build amd64 && !purego

#include "textflag.h"

// func cpuid(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL eaxArg+0(FP), AX
	MOVL ecxArg+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET

// func xgetbv() (eax, edx uint32)
TEXT ·xgetbv(SB), NOSPLIT, $0-8
	MOVL $0, CX
	XGETBV
	MOVL AX, eax+0(FP)
	MOVL DX, edx+4(FP)
	RET

// One step of the 6×16 kernel: B row in Y0,Y1; A column broadcast.
#define STEP(aoff, boff) \
	VMOVUPS boff(DI), Y0; \
	VMOVUPS boff+32(DI), Y1; \
	VBROADCASTSS aoff(SI), Y2; \
	VBROADCASTSS aoff+4(SI), Y3; \
	VFMADD231PS Y0, Y2, Y4; \
	VFMADD231PS Y1, Y2, Y5; \
	VFMADD231PS Y0, Y3, Y6; \
	VFMADD231PS Y1, Y3, Y7; \
	VBROADCASTSS aoff+8(SI), Y2; \
	VBROADCASTSS aoff+12(SI), Y3; \
	VFMADD231PS Y0, Y2, Y8; \
	VFMADD231PS Y1, Y2, Y9; \
	VFMADD231PS Y0, Y3, Y10; \
	VFMADD231PS Y1, Y3, Y11; \
	VBROADCASTSS aoff+16(SI), Y2; \
	VBROADCASTSS aoff+20(SI), Y3; \
	VFMADD231PS Y0, Y2, Y12; \
	VFMADD231PS Y1, Y2, Y13; \
	VFMADD231PS Y0, Y3, Y14; \
	VFMADD231PS Y1, Y3, Y15

#define STORE(lo, hi) \
	VADDPS (DX), lo, lo; \
	VMOVUPS lo, (DX); \
	VADDPS 32(DX), hi, hi; \
	VMOVUPS hi, 32(DX); \
	ADDQ R8, DX

// func kernel6x16(k int, a, b, c *float32, ldc int)
TEXT ·kernel6x16(SB), NOSPLIT, $0-40
	MOVQ k+0(FP), CX
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DI
	MOVQ c+24(FP), DX
	MOVQ ldc+32(FP), R8
	SHLQ $2, R8
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	VXORPS Y12, Y12, Y12
	VXORPS Y13, Y13, Y13
	VXORPS Y14, Y14, Y14
	VXORPS Y15, Y15, Y15
	MOVQ CX, BX
	SHRQ $2, BX
	ANDQ $3, CX
	TESTQ BX, BX
	JZ tail

loop4:
	STEP(0, 0)
	STEP(24, 64)
	STEP(48, 128)
	STEP(72, 192)
	ADDQ $96, SI
	ADDQ $256, DI
	DECQ BX
	JNZ loop4

tail:
	TESTQ CX, CX
	JZ store

loop1:
	STEP(0, 0)
	ADDQ $24, SI
	ADDQ $64, DI
	DECQ CX
	JNZ loop1

store:
	STORE(Y4, Y5)
	STORE(Y6, Y7)
	STORE(Y8, Y9)
	STORE(Y10, Y11)
	STORE(Y12, Y13)
	STORE(Y14, Y15)
	VZEROUPPER
	RET
