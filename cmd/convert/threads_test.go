package main

import (
	"testing"

	"github.com/linearize/linearize/cmd/internal/cli/clitest"
)

// TestThreadsCapped: every command with a --threads flag refuses a count
// past cli.MaxThreads() (clitest.ThreadsCapped).
func TestThreadsCapped(t *testing.T) { clitest.ThreadsCapped(t, 5) }
