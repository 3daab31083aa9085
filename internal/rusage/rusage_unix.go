//go:build linux || darwin

package rusage

import (
	"os"
	"runtime"
	"strconv"
	"strings"
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
	// The address space already taken (the runtime's reservations, shared
	// libraries such as onnxruntime, per-thread malloc arenas) is not
	// available to tensors: under ulimit -v 3000000 a process holding 1.3
	// GB of mappings could not allocate a second 680 MB tensor.
	limit := int64(rl.Cur)
	if used := vmSize(); used > 0 {
		limit = max(limit-used, limit/16)
	}
	return limit
}

// vmSize reads the process's mapped address space (VmSize in
// /proc/self/status), 0 where unreadable.
func vmSize() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, "VmSize:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
		if err != nil || kb <= 0 {
			return 0
		}
		return kb << 10
	}
	return 0
}
