package fsutil

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// deadPID returns the PID of a process that has ended (and been reaped).
func deadPID(t *testing.T) int {
	t.Helper()
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Skipf("cannot run true: %v", err)
	}
	pid := c.Process.Pid
	if processAlive(pid) {
		t.Skipf("PID %d of an ended process is in use again", pid)
	}
	return pid
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var ns []string
	for _, e := range es {
		ns = append(ns, e.Name())
	}
	sort.Strings(ns)
	return ns
}

// TestStaleTempsRemoved: a write removes the temporary files of its path
// left by dead processes of this host, and keeps those of live processes,
// of other hosts, of other paths, and those without a PID.
func TestStaleTempsRemoved(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "out.onnx")
	dead := TempName(p, deadPID(t)) + "123"
	live := TempName(p, os.Getpid()) + "456"
	parent := TempName(p, os.Getppid()) + "789"
	other := "." + filepath.Base(p) + ".tmp-1@" + hostTag() + "x-1" // another host
	legacy := ".out.onnx.tmp-2417783"                               // no PID: earlier versions
	otherPath := TempName(filepath.Join(dir, "other.onnx"), deadPID(t)) + "1"
	for _, n := range []string{dead, live, parent, other, legacy, otherPath} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := WriteFileAtomic(p, []byte("model")); err != nil {
		t.Fatal(err)
	}
	got := names(t, dir)
	want := []string{live, parent, other, legacy, otherPath, "out.onnx"}
	sort.Strings(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("after the write the folder holds\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if b, _ := os.ReadFile(p); string(b) != "model" {
		t.Errorf("output %q, want model", b)
	}
}

func TestParseOwner(t *testing.T) {
	for s, want := range map[string]int{
		"12@h-3": 12, "12@a-b-3": 12, "0@h-3": 0, "-1@h-3": 0, "12@h-": 0,
		"12h-3": 0, "012@h-3": 0, "12-3": 0, "+12@h-3": 0, "99999999999999999999@h-1": 0,
	} {
		pid, _, ok := parseOwner(s)
		if ok != (want > 0) || pid != want {
			t.Errorf("parseOwner(%q) = %d, %v; want %d", s, pid, ok, want)
		}
	}
}

// TestAbortWrites: AbortWrites removes the temporary file of a write in
// progress, which then fails without creating its target; later writes
// fail too.
func TestAbortWrites(t *testing.T) {
	defer func() {
		MidWriteHook = nil
		temps.Lock()
		temps.aborted = false
		temps.Unlock()
		abortRequested.Store(false)
		abortGrace = 2 * time.Second
	}()
	abortGrace = 0
	dir := t.TempDir()
	p := filepath.Join(dir, "out.onnx")
	reached := make(chan string)
	release := make(chan bool)
	MidWriteHook = func(tmp string) {
		reached <- tmp
		<-release
	}
	done := make(chan error)
	go func() {
		done <- WriteAtomic(p, func(w io.Writer) error {
			_, err := w.Write(make([]byte, 3<<20))
			return err
		})
	}()
	tmp := <-reached
	if !strings.HasPrefix(filepath.Base(tmp), TempName(p, os.Getpid())) {
		t.Errorf("temporary file %s does not carry this process's PID (%s...)", tmp, TempName(p, os.Getpid()))
	}
	if st, err := os.Stat(tmp); err != nil || st.Size() != 3<<20 {
		t.Fatalf("mid-write temporary file: %v, %v", st, err)
	}
	removed := AbortWrites()
	if len(removed) != 1 || removed[0] != tmp {
		t.Errorf("AbortWrites removed %v, want [%s]", removed, tmp)
	}
	close(release)
	if err := <-done; !errors.Is(err, ErrAborted) {
		t.Errorf("aborted write returned %v, want ErrAborted", err)
	}
	if ns := names(t, dir); len(ns) != 0 {
		t.Errorf("folder holds %v after an aborted write, want nothing", ns)
	}
	MidWriteHook = nil
	if err := WriteFileAtomic(p, nil); !errors.Is(err, ErrAborted) {
		t.Errorf("write after AbortWrites returned %v, want ErrAborted", err)
	}
}
