package main

import (
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"testing"
	"time"
)

// TestThreadsCapped: every command with a --threads flag (found through
// its --help) refuses a count past maxThreads() and a negative one as a
// usage error naming the flag, at once, and accepts maxThreads() itself
// as far as the flag goes.
func TestThreadsCapped(t *testing.T) {
	var withThreads []string
	defer func() { helpShown = nil }()
	for name := range commands {
		helpShown = func(fs *flag.FlagSet) {
			if fs.Lookup("threads") != nil {
				withThreads = append(withThreads, name)
			}
		}
		run([]string{name, "-h"}, io.Discard, io.Discard)
	}
	helpShown = nil
	sort.Strings(withThreads)
	if len(withThreads) < 5 {
		t.Fatalf("only %v have --threads", withThreads)
	}
	if m := maxThreads(); m < 8 || m > 256 {
		t.Fatalf("maxThreads() = %d, want 8..256", m)
	}
	for _, name := range withThreads {
		for _, n := range []string{"100000", fmt.Sprint(maxThreads() + 1), "-1"} {
			start := time.Now()
			code, stdout, errOut := runCLI(name, "--threads", n, "no-such-model.onnx")
			if code != exitUsage || !strings.Contains(errOut, "--threads") || stdout != "" {
				t.Errorf("%s --threads %s: exit %d, stdout %q, stderr %q; want exit %d naming --threads", name, n, code, stdout, errOut, exitUsage)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("%s --threads %s took %v to refuse", name, n, d)
			}
		}
		// At the cap the flag passes: whatever fails next is not --threads.
		_, _, errOut := runCLI(name, "--threads", fmt.Sprint(maxThreads()), "no-such-model.onnx")
		if strings.Contains(errOut, "--threads") {
			t.Errorf("%s --threads %d (the cap) refused: %s", name, maxThreads(), errOut)
		}
	}
	t.Logf("commands with --threads: %v (cap %d)", withThreads, maxThreads())
}
