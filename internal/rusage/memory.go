package rusage

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
)

// Memory returns the memory this process may use, in bytes: the least of
// the machine's physical memory (/proc/meminfo's MemTotal), the memory
// limit of its cgroup (v2 memory.max, v1 memory.limit_in_bytes) and its
// address-space limit (ulimit -v). Each bound that cannot be read is
// skipped; 0 means none could.
func Memory() int64 {
	var least int64
	take := func(v int64) {
		if v > 0 && (least == 0 || v < least) {
			least = v
		}
	}
	take(memTotal())
	take(cgroupLimit())
	take(addressSpaceLimit())
	return least
}

// memTotal reads MemTotal from /proc/meminfo (0 where there is none).
func memTotal() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
		if err != nil || kb <= 0 || kb > 1<<50 {
			return 0
		}
		return kb << 10
	}
	return 0
}

// cgroupLimit reads the memory limit of the cgroup the process runs in
// from the usual mount point (0 when unlimited or unreadable).
func cgroupLimit() int64 {
	for _, p := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		v, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
		if err != nil || v <= 0 || v >= 1<<62 { // "max", or v1's "unlimited" (near 2^63)
			return 0
		}
		return v
	}
	return 0
}
