//go:build unix

package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

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
	c := exec.Command(os.Args[0], "-test.run=^$")
	c.Env = append(os.Environ(), interruptChildEnv+"="+strings.Join(args, "\t"))
	var stderr strings.Builder
	c.Stderr = &stderr
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if tmp, ok := strings.CutPrefix(sc.Text(), "MIDWRITE "); ok {
				line <- tmp
			}
		}
		close(line)
	}()
	select {
	case tmp, ok := <-line:
		if !ok {
			c.Wait()
			t.Fatalf("the child ended before writing: %s", stderr.String())
		}
		return c, tmp, &stderr
	case <-time.After(60 * time.Second):
		c.Process.Kill()
		c.Wait()
		t.Fatalf("the child did not reach the write in 60 s: %s", stderr.String())
	}
	return nil, "", nil
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
