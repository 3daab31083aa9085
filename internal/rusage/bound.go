package rusage

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
)

// fallbackMemory stands for the memory the process may use where none
// of its bounds can be read.
const fallbackMemory = 8 << 30

// Available returns the memory this process may use, in bytes: Memory
// (physical memory, cgroup limit, ulimit -v less what is mapped already),
// bounded by $GOMEMLIMIT where it is set (the user's limit; not a soft
// limit the program sets itself to pace the collector); 8 GiB where none
// can be read.
func Available() int64 {
	m := Memory()
	if lim := goMemLimit(); lim > 0 && (m == 0 || lim < m) {
		m = lim
	}
	if m <= 0 {
		m = fallbackMemory
	}
	return m
}

// goMemLimit reads $GOMEMLIMIT as the runtime does (a byte count with an
// optional B, KiB, MiB, GiB or TiB suffix; "off"), 0 where unset or
// unreadable.
func goMemLimit() int64 {
	s := strings.TrimSpace(os.Getenv("GOMEMLIMIT"))
	shift := 0
	for _, u := range []struct {
		suffix string
		shift  int
	}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}} {
		if t, ok := strings.CutSuffix(s, u.suffix); ok {
			s, shift = t, u.shift
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64>>shift {
		return 0
	}
	return n << shift
}

// ReadBound returns the most bytes a command reads into memory from the
// inputs limit bounds: limit, or half the memory the process may use
// (Available) when that is less. Inputs whose size is known are checked
// against it before any byte is read; the others (a pipe, a device) are
// read in pieces and refused once past it, so that no input can take
// the process to Go's fatal out-of-memory.
func ReadBound(limit int64) int64 {
	return max(min(limit, Available()/2), 1)
}

// Bound describes the bound ReadBound(limit) gives, for messages: "2147483648
// bytes" or "536870912 bytes, half the memory the process may use".
func Bound(limit int64) string {
	b := ReadBound(limit)
	if b < limit {
		return fmt.Sprintf("%d bytes, half the memory the process may use (physical memory, cgroup limit, ulimit -v, $GOMEMLIMIT)", b)
	}
	return fmt.Sprintf("%d bytes", b)
}
