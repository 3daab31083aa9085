package cli

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"time"

	"github.com/linearize/linearize/internal/rusage"
)

// printStats is set by --stats, which every command accepts.
var printStats bool

// largestFile returns the largest existing regular file among args (the
// input model, usually), taken before the command runs; the value of -o
// (an output that may already exist) does not count.
func largestFile(args []string) (name string, size int64) {
	for i, a := range args {
		if i > 0 && (args[i-1] == "-o" || args[i-1] == "--o") {
			continue
		}
		if st, err := os.Stat(a); err == nil && st.Mode().IsRegular() && st.Size() > size {
			name, size = a, st.Size()
		}
	}
	return name, size
}

// reportStats prints the command's wall time and the process's peak
// resident memory, and the ratio of that peak to the largest input file,
// so conversion cost on a big model is measured by the command itself.
func reportStats(w io.Writer, name string, wall time.Duration, largestName string, largest int64) {
	peak := rusage.PeakRSS()
	line := fmt.Sprintf("stats: %s %s: wall %.2f s", Name, name, wall.Seconds())
	if peak > 0 {
		line += fmt.Sprintf(", peak RSS %.0f MiB", float64(peak)/(1<<20))
		if largest > 0 {
			line += fmt.Sprintf(" = %.2f× %s (%.0f MiB)", float64(peak)/float64(largest), largestName, float64(largest)/(1<<20))
		}
	}
	fmt.Fprintln(w, line)
}

// boundMemory gives the garbage collector a soft memory limit of 1.25× the
// input model plus 128 MiB for the commands that only rewrite a model
// (unless GOMEMLIMIT is set): their live heap is about the model plus its
// largest tensor, and with the default pacing the heap would grow to twice
// that before collecting. On BERT-base (418 MiB) this takes a conversion's
// peak RSS from 1.9× to about 1.5× the file for a few percent more time.
func boundMemory(c *Command, inputSize int64) {
	if !c.Rewrites || inputSize <= 0 || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	debug.SetMemoryLimit(inputSize + inputSize/4 + 128<<20)
}
