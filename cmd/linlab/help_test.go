package main

import (
	"testing"

	"github.com/linearize/linearize/cmd/internal/cli/clitest"
)

// defaultsDiffer lists the flags whose default is not the same in every
// linlab command that defines them, with the reason (see clitest.Help).
var defaultsDiffer = map[string]string{
	"features":   "features-error sweeps M up to 4096 on synthetic inputs; report-real converts the real model at each M, up to 1024",
	"threads":    "bench-backends times with a fixed 2 threads so that timings compare; features-error's 0 is one per CPU",
	"lengths":    "bench-backends runs the whole model on both backends (128,512); report-real measures lengths in document mode only (empty)",
	"num-layers": "build-model takes its preset's depth (0); bench-backends times 2 layers",
}

// TestHelp checks every command's --help and the defaults of flags that
// share a name (clitest.Help).
func TestHelp(t *testing.T) { clitest.Help(t, defaultsDiffer) }

// TestThreadsCapped: every command with a --threads flag refuses a count
// past cli.MaxThreads() (clitest.ThreadsCapped).
func TestThreadsCapped(t *testing.T) { clitest.ThreadsCapped(t, 2) }
