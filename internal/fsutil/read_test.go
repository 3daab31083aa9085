package fsutil

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/linearize/linearize/internal/rusage"
)

// TestReadFileBoundedByMemory: /dev/zero (no size, no end) is refused
// once past the bound, and the bound follows the memory the process may
// use: under a Go memory limit of 64 MiB it is 32 MiB, and reading it
// allocates about that, not the 2 GiB the fixed bound would allow.
func TestReadFileBoundedByMemory(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip("no /dev/zero")
	}
	t.Setenv("GOMEMLIMIT", "64MiB")
	if b := rusage.ReadBound(2 << 30); b != 32<<20 {
		t.Fatalf("ReadBound(2 GiB) under a 64 MiB memory limit = %d, want 32 MiB", b)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := ReadFile("/dev/zero", 2<<30)
	runtime.ReadMemStats(&after)
	var tl *TooLargeError
	if !errors.As(err, &tl) || tl.Path != "/dev/zero" || tl.Bound != 32<<20 || !strings.Contains(err.Error(), "33554432 bytes, half the memory") {
		t.Fatalf("ReadFile(/dev/zero) = %v, want a *TooLargeError naming the file and the bound of 32 MiB", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 40<<20 {
		t.Errorf("refusing /dev/zero allocated %d bytes, want about the bound (32 MiB)", alloc)
	}
	// A regular file over the bound is refused before it is read.
	p := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(p, make([]byte, 1000), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(p, 999); !errors.As(err, &tl) || tl.Size != 1000 || !strings.Contains(err.Error(), p) {
		t.Errorf("1000-byte file with a bound of 999: %v", err)
	}
	if data, err := ReadFile(p, 1000); err != nil || len(data) != 1000 {
		t.Errorf("1000-byte file with a bound of 1000: %d bytes, %v", len(data), err)
	}
	// Read a line at a time, the total is bounded too.
	sc := bufio.NewScanner(LimitReader(strings.NewReader(strings.Repeat("line\n", 100)), "lines.txt", 250))
	n := 0
	for sc.Scan() {
		n++
	}
	if !errors.As(sc.Err(), &tl) || n > 50 || !strings.Contains(sc.Err().Error(), "lines.txt") {
		t.Errorf("500 bytes of lines with a bound of 250: %d lines, %v", n, sc.Err())
	}
}

// TestOpenSaysItWaitsForAWriter: opening a FIFO that has no writer
// calls WaitingForWriter with its path, and the read goes on once a
// writer comes.
func TestOpenSaysItWaitsForAWriter(t *testing.T) {
	p := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	waited := make(chan string, 1)
	defer func(f func(string), d time.Duration) { WaitingForWriter, waitNoticeAfter = f, d }(WaitingForWriter, waitNoticeAfter)
	WaitingForWriter, waitNoticeAfter = func(path string) { waited <- path }, 10*time.Millisecond
	var data []byte
	var err error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); data, err = ReadFile(p, 1<<20) }()
	select {
	case got := <-waited:
		if got != p {
			t.Errorf("WaitingForWriter(%q), want %q", got, p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no notice while waiting for a writer")
	}
	if err := os.WriteFile(p, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err != nil || string(data) != "hello" {
		t.Errorf("read %q, %v after the writer came", data, err)
	}
}
