package main

import (
	"os"
	"testing"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/cmd/internal/cli/clitest"
)

// TestMain lets the test binary act as a bench child, as main does: bench
// re-executes this executable with the job in its environment.
func TestMain(m *testing.M) {
	if benchChild() {
		os.Exit(exitOK)
	}
	os.Exit(m.Run())
}

// The exit codes (cli.ExitOK, ...) under the tests' short names.
const (
	exitOK       = cli.ExitOK
	exitUsage    = cli.ExitUsage
	exitBadInput = cli.ExitBadInput
	exitRuntime  = cli.ExitRuntime
)

// runCLI runs the CLI in-process; needORT skips a test when onnxruntime
// cannot be loaded.
var (
	runCLI  = clitest.Run
	needORT = clitest.NeedORT
)
