//go:build linux || darwin || freebsd

package idset

import (
	"syscall"
	"unsafe"
)

// allocSlots is n zeroed slots mapped apart from Go's heap (anonymous
// private pages, zero until written), and the function that unmaps them;
// a failed mapping falls back to the heap (and no function).
func allocSlots(n int) ([]uint64, func()) {
	b, err := syscall.Mmap(-1, 0, 8*n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return make([]uint64, n), nil
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), n), func() { syscall.Munmap(b) }
}
