//go:build unix

package infer

import (
	"syscall"
	"time"
)

// processCPU returns the user+system CPU time the process has used (for
// BenchmarkBackends), or 0 when the OS does not say.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
