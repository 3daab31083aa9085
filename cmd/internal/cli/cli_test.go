package cli

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/internal/fsutil"
)

// TestRecoveringPanic: a command that panics while it writes an output
// exits ExitRuntime (not the 2 of a Go panic, which is bad input's code),
// says it is a bug with the panic's value and stack, and leaves neither
// the output nor its temporary file. (It aborts every write of this test
// binary, so it is the package's only test that writes.)
func TestRecoveringPanic(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "model.onnx")
	var stderr bytes.Buffer
	code := recovering(&stderr, func() int {
		_ = fsutil.WriteAtomic(out, func(w io.Writer) error {
			if _, err := w.Write([]byte("half a model")); err != nil {
				return err
			}
			panic("index out of range [0] with length 0")
		})
		return ExitOK
	})
	if code != ExitRuntime {
		t.Errorf("exit %d, want %d", code, ExitRuntime)
	}
	msg := stderr.String()
	if !strings.Contains(msg, "internal error, a bug") || !strings.Contains(msg, "index out of range") || !strings.Contains(msg, "cli_test.go") {
		t.Errorf("stderr %q: want the bug, the panic's value and its stack", msg)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("left %v behind", entries)
	}
	if code := recovering(&stderr, func() int { return ExitBadInput }); code != ExitBadInput {
		t.Errorf("a run that returns %d: exit %d", ExitBadInput, code)
	}
}
