//go:build linux || darwin

package rusage

import (
	"runtime"
	"syscall"
)

// PeakRSS returns the process's peak resident set size so far in bytes
// (0 when it cannot be read).
func PeakRSS() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	if runtime.GOOS == "darwin" { // bytes there, KiB on Linux
		return int64(ru.Maxrss)
	}
	return int64(ru.Maxrss) << 10
}
