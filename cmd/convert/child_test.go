package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/linearize/linearize/internal/childtest"
)

// startChild runs this test binary as the convert command in a child
// stopped at a point of its writing (childtest.Start).
func startChild(t *testing.T, env, mark, what string) (*exec.Cmd, string, *strings.Builder) {
	t.Helper()
	return childtest.Start(t, env, mark, what)
}

// killChild kills a child of startChild (-9) and waits for it.
func killChild(c *exec.Cmd) { childtest.Kill(c) }
