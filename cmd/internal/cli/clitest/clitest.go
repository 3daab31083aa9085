// Package clitest holds the checks every binary built on cli runs in its
// tests (the --help texts and flag defaults, the --threads cap, the exit
// codes of bad command lines) and the helpers they share.
package clitest

import (
	"bytes"
	"testing"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/infer"
)

// Run runs the command line in-process (cli.Run) and returns its exit
// code and output.
func Run(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = cli.Run(args, &o, &e)
	return code, o.String(), e.String()
}

// NeedORT skips the test when onnxruntime cannot be loaded.
func NeedORT(t *testing.T) {
	t.Helper()
	if err := infer.ORTAvailable(); err != nil {
		t.Skipf("onnxruntime unavailable (run scripts/setup.sh): %v", err)
	}
}
