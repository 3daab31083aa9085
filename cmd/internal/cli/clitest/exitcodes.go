package clitest

import (
	"os"
	"strings"
	"testing"

	"github.com/linearize/linearize/cmd/internal/cli"
)

// Case is a command line that must fail with an exit code and a message
// naming Want (the flag or the file at fault). It is an alias of an
// unnamed struct type so that a table of cases can be written without
// field names.
type Case = struct {
	Args []string
	Code int
	Want string
}

// ExitCodes runs every case and checks its exit code, that the one-line
// message names Want, that nothing is printed on stdout and that out (the
// -o of the cases) was not written. Every registered command must have a
// case.
func ExitCodes(t *testing.T, out string, cases []Case) {
	t.Helper()
	covered := map[string]bool{}
	for _, c := range cases {
		covered[c.Args[0]] = true
		code, stdout, stderr := Run(c.Args...)
		if code != c.Code || !strings.Contains(stderr, c.Want) {
			t.Errorf("%s: exit %d, stderr %q; want exit %d and a message naming %q", strings.Join(c.Args, " "), code, stderr, c.Code, c.Want)
		}
		if stdout != "" {
			t.Errorf("%s: stdout %q, want nothing", strings.Join(c.Args, " "), stdout)
		}
		if strings.Count(strings.TrimSuffix(stderr, "\n"), "\n") != 0 {
			t.Errorf("%s: the message is not one line: %q", strings.Join(c.Args, " "), stderr)
		}
		if _, err := os.Lstat(out); err == nil {
			t.Errorf("%s wrote %s", strings.Join(c.Args, " "), out)
			os.Remove(out)
		}
	}
	for _, name := range cli.Names() {
		if !covered[name] {
			t.Errorf("no bad-input case for %s", name)
		}
	}
}
