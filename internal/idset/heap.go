//go:build !(linux || darwin || freebsd)

package idset

// allocSlots is n zeroed slots on Go's heap (no function frees them).
func allocSlots(n int) ([]uint64, func()) { return make([]uint64, n), nil }
