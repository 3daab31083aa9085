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

// addressSpaceLimit returns the soft RLIMIT_AS (ulimit -v) in bytes, or 0
// when unlimited or unreadable.
func addressSpaceLimit() int64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_AS, &rl); err != nil {
		return 0
	}
	if rl.Cur == 0 || rl.Cur >= 1<<62 { // RLIM_INFINITY
		return 0
	}
	return int64(rl.Cur)
}
