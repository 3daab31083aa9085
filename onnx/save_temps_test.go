//go:build unix

package onnx

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/linearize/linearize/internal/fsutil"
)

// TestSaveRemovesStaleTemps: Save removes the temporary file that a
// killed writer (a process that no longer runs) left beside the output,
// and keeps the one of a live process (this one).
func TestSaveRemovesStaleTemps(t *testing.T) {
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Skipf("cannot run true: %v", err)
	}
	dead := c.Process.Pid
	if err := syscall.Kill(dead, 0); err == nil {
		t.Skipf("PID %d is in use again", dead)
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "out.onnx")
	stale := filepath.Join(dir, fsutil.TempName(out, dead)+"1234")
	live := filepath.Join(dir, fsutil.TempName(out, os.Getpid())+"5678")
	for _, p := range []string{stale, live} {
		if err := os.WriteFile(p, make([]byte, 4096), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := Save(smallModel(4), out, SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the dead writer's temporary file %s is still there (%v)", filepath.Base(stale), err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("the live writer's temporary file was removed: %v", err)
	}
	if _, err := Load(out); err != nil {
		t.Errorf("saved model: %v", err)
	}
	es, _ := os.ReadDir(dir)
	if len(es) != 2 {
		t.Errorf("%d entries in the folder, want 2 (the output and the live temporary file)", len(es))
	}
}
