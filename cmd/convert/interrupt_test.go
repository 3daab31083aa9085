//go:build unix

package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/internal/fsutil"
)

// interruptChildEnv makes the test binary act as the convert command
// (see init) with the arguments in the variable, tab-separated, and stop
// mid-write of its output: it prints "MIDWRITE tmp" and blocks until a
// signal ends it.
const interruptChildEnv = "LINEARIZE_TEST_INTERRUPT_CHILD"

func init() {
	args := os.Getenv(interruptChildEnv)
	if args == "" {
		return
	}
	fsutil.MidWriteHook = func(tmp string) {
		fmt.Printf("MIDWRITE %s\n", tmp)
		select {}
	}
	cli.CleanupOnSignal(os.Stderr)
	os.Exit(cli.Run(strings.Split(args, "\t"), os.Stdout, os.Stderr))
}

// startMidWrite runs the CLI with args in a child that stops while writing
// its output, and returns it with the temporary file it is writing.
func startMidWrite(t *testing.T, args ...string) (*exec.Cmd, string, *strings.Builder) {
	t.Helper()
	return startChild(t, interruptChildEnv+"="+strings.Join(args, "\t"), "MIDWRITE ", "writing")
}

// TestSignalRemovesPartialOutput: SIGTERM or SIGINT during the write of
// -o removes the temporary file, leaves the output as it was, and exits
// with 128 + the signal's number.
func TestSignalRemovesPartialOutput(t *testing.T) {
	model := filepath.Join("..", "..", "testdata", "bert-tiny.onnx")
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "long.onnx")
			if err := os.WriteFile(out, []byte("old output"), 0o644); err != nil {
				t.Fatal(err)
			}
			c, tmp, stderr := startMidWrite(t, "extend-positions", model, "-o", out, "--max-positions", "300", "--position-method", "interpolate")
			if st, err := os.Stat(tmp); err != nil || st.Size() == 0 {
				t.Fatalf("mid-write: temporary file %s: %v, %v", tmp, st, err)
			}
			if err := c.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			err := c.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 128+int(sig) {
				t.Errorf("child ended with %v, want exit %d; stderr: %s", err, 128+int(sig), stderr)
			}
			if !strings.Contains(stderr.String(), "stopped by") || !strings.Contains(stderr.String(), filepath.Base(tmp)) {
				t.Errorf("stderr does not say the command stopped and what it removed: %s", stderr)
			}
			if ns := folderNames(t, dir); len(ns) != 1 || ns[0] != "long.onnx" {
				t.Errorf("the folder holds %v, want only long.onnx", ns)
			}
			if b, _ := os.ReadFile(out); string(b) != "old output" {
				t.Errorf("the output was changed: %.40q", b)
			}
		})
	}
}

// TestKilledWriteCleanedByNextRun: a kill -9 mid-write leaves the
// temporary file (nothing can remove it then); the next run writing the
// same output removes it and writes the output.
func TestKilledWriteCleanedByNextRun(t *testing.T) {
	model := filepath.Join("..", "..", "testdata", "bert-tiny.onnx")
	dir := t.TempDir()
	out := filepath.Join(dir, "long.onnx")
	args := []string{"extend-positions", model, "-o", out, "--max-positions", "300", "--position-method", "interpolate"}
	c, tmp, _ := startMidWrite(t, args...)
	c.Process.Kill()
	c.Wait()
	if _, err := os.Stat(tmp); err != nil {
		t.Fatalf("after kill -9 the temporary file is gone (%v): the test shows nothing", err)
	}
	if code, _, errOut := runCLI(args...); code != 0 {
		t.Fatalf("next run: exit %d: %s", code, errOut)
	}
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Errorf("the next run left the killed run's temporary file %s (%v)", filepath.Base(tmp), err)
	}
	if ns := folderNames(t, dir); len(ns) != 1 || ns[0] != "long.onnx" {
		t.Errorf("the folder holds %v, want only long.onnx", ns)
	}
}
