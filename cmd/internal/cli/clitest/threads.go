package clitest

import (
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/linearize/linearize/cmd/internal/cli"
)

// ThreadsCapped checks that every command with a --threads flag (found
// through its --help) refuses a count past cli.MaxThreads() and a negative
// one as a usage error naming the flag, at once, and accepts MaxThreads()
// itself as far as the flag goes. At least the given number of commands
// must have the flag.
func ThreadsCapped(t *testing.T, least int) {
	t.Helper()
	var withThreads []string
	defer func() { cli.HelpShown = nil }()
	for _, name := range cli.Names() {
		cli.HelpShown = func(fs *flag.FlagSet) {
			if fs.Lookup("threads") != nil {
				withThreads = append(withThreads, name)
			}
		}
		cli.Run([]string{name, "-h"}, io.Discard, io.Discard)
	}
	cli.HelpShown = nil
	sort.Strings(withThreads)
	if len(withThreads) < least {
		t.Fatalf("only %v have --threads", withThreads)
	}
	if m := cli.MaxThreads(); m < 8 || m > 256 {
		t.Fatalf("MaxThreads() = %d, want 8..256", m)
	}
	for _, name := range withThreads {
		for _, n := range []string{"100000", fmt.Sprint(cli.MaxThreads() + 1), "-1"} {
			start := time.Now()
			code, stdout, errOut := Run(name, "--threads", n, "no-such-model.onnx")
			if code != cli.ExitUsage || !strings.Contains(errOut, "--threads") || stdout != "" {
				t.Errorf("%s --threads %s: exit %d, stdout %q, stderr %q; want exit %d naming --threads", name, n, code, stdout, errOut, cli.ExitUsage)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("%s --threads %s took %v to refuse", name, n, d)
			}
		}
		// At the cap the flag passes: whatever fails next is not --threads.
		_, _, errOut := Run(name, "--threads", fmt.Sprint(cli.MaxThreads()), "no-such-model.onnx")
		if strings.Contains(errOut, "--threads") {
			t.Errorf("%s --threads %d (the cap) refused: %s", name, cli.MaxThreads(), errOut)
		}
	}
	t.Logf("commands with --threads: %v (cap %d)", withThreads, cli.MaxThreads())
}
