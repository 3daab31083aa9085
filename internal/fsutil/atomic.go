package fsutil

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// WriteFileAtomic writes data to a temporary file beside path and renames it
// into place, so that path holds either its old content or all of data.
func WriteFileAtomic(path string, data []byte) error {
	return WriteAtomic(path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// ErrAborted is matched by errors.Is when a write fails because
// AbortWrites was called (the process is being stopped by a signal).
var ErrAborted = errors.New("write aborted: the process is stopping")

// MidWriteHook, when set (by tests only), is called with the temporary
// file's path after fill has written the content and before the file is
// synced and renamed: a test can block there to stop the process mid-write.
var MidWriteHook func(tmp string)

// The temporary files of the writes in progress, which AbortWrites removes.
var temps = struct {
	sync.Mutex
	live    map[string]bool
	aborted bool
}{live: map[string]bool{}}

// WriteAtomic is WriteFileAtomic with the content written by fill, through
// a buffer, to the temporary file. Its errors read "writing PATH: ...".
//
// The temporary file is named TempName(path, os.Getpid()) with a random
// suffix. Before it is created, the temporary files of the same path left
// by processes that no longer run (a kill -9, a power cut) are removed
// (RemoveStaleTemps); those of live processes are left alone. A signal
// handler calls AbortWrites to remove the temporary files of writes in
// progress before the process exits.
func WriteAtomic(path string, fill func(io.Writer) error) error {
	return awaitExit(writeAtomic(path, fill))
}

// abortGrace is how long a write that AbortWrites stopped waits before
// it returns ErrAborted: the signal handler that called AbortWrites ends
// the process meanwhile, with the signal's exit code rather than the
// write error's (tests shorten it).
var abortGrace = 2 * time.Second

// awaitExit returns err, after abortGrace when it is ErrAborted.
func awaitExit(err error) error {
	if errors.Is(err, ErrAborted) {
		time.Sleep(abortGrace)
	}
	return err
}

func writeAtomic(path string, fill func(io.Writer) error) error {
	RemoveStaleTemps(path)
	f, err := createTemp(path)
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			temps.Lock()
			delete(temps.live, tmp)
			os.Remove(tmp)
			temps.Unlock()
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<20)
	if err := fill(bw); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if MidWriteHook != nil {
		bw.Flush()
		MidWriteHook(tmp)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Chmod(0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	// Renaming under the lock: AbortWrites either removes the temporary
	// file before it is renamed (and the rename is not attempted) or
	// finds the write complete.
	temps.Lock()
	defer temps.Unlock()
	if temps.aborted {
		return fmt.Errorf("writing %s: %w", path, ErrAborted)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	delete(temps.live, tmp)
	ok = true
	return nil
}

// createTemp creates and registers the temporary file for path.
func createTemp(path string) (*os.File, error) {
	temps.Lock()
	defer temps.Unlock()
	if temps.aborted {
		return nil, ErrAborted
	}
	f, err := os.CreateTemp(filepath.Dir(path), TempName(path, os.Getpid())+"*")
	if err != nil {
		return nil, err
	}
	temps.live[f.Name()] = true
	return f, nil
}

// AbortWrites removes the temporary file of every write in progress and
// makes every write fail from then on (ErrAborted), so that none renames a
// file into place or leaves one behind. A WriteSet commit in progress
// rolls back to the old files first (AbortWrites waits for it). A signal
// handler calls it just before the process exits. It returns the paths
// it removed.
func AbortWrites() []string {
	abortRequested.Store(true) // a WriteSet commit rolls back, then unlocks
	temps.Lock()
	defer temps.Unlock()
	temps.aborted = true
	var removed []string
	for p := range temps.live {
		if err := os.Remove(p); err == nil {
			removed = append(removed, p)
		}
		delete(temps.live, p)
	}
	return removed
}

// TempName is the name (without its random suffix) of a temporary file
// that process pid writes before renaming it to path:
// ".BASE.tmp-PID@HOST-", in path's folder. The host name tells temporary
// files of processes on other machines (a shared folder) or in other
// containers apart: only those of this host are ever judged by their PID.
func TempName(path string, pid int) string {
	return "." + filepath.Base(path) + ".tmp-" + strconv.Itoa(pid) + "@" + hostTag() + "-"
}

var hostTag = sync.OnceValue(func() string {
	h, _ := os.Hostname()
	if len(h) > 40 {
		h = h[:40]
	}
	b := []byte(h)
	for i, c := range b {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_') {
			b[i] = '_'
		}
	}
	if len(b) == 0 {
		return "_"
	}
	return string(b)
})

// RemoveStaleTemps removes the temporary files of path (named as
// TempName names them) that were left by processes of this host that no
// longer run, and returns their paths. Before that it completes the
// WriteSet commits such processes left unfinished in path's folder and
// removes the old files they set aside (see WriteSet). It
// never touches the file of a live process (this one included), of
// another host, or a file whose name does not carry a PID (as earlier
// versions named them: nothing tells whether their writer still runs).
// Errors are ignored: the write that calls it goes on either way.
func RemoveStaleTemps(path string) []string {
	dir := filepath.Dir(path)
	recoverSets(dir) // before its temporary files and backups are judged
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var removed []string
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() {
			continue
		}
		prefix := "." + filepath.Base(path) + ".tmp-"
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		pid, host, ok := parseOwner(name[len(prefix):])
		if !ok || !ownerGone(pid, host) {
			continue
		}
		p := filepath.Join(dir, name)
		if os.Remove(p) == nil {
			removed = append(removed, p)
		}
	}
	return removed
}

// parseOwner splits "PID@HOST-RANDOM".
func parseOwner(s string) (pid int, host string, ok bool) {
	at := strings.IndexByte(s, '@')
	dash := strings.LastIndexByte(s, '-')
	if at <= 0 || dash < at || dash == len(s)-1 {
		return 0, "", false
	}
	pid, err := strconv.Atoi(s[:at])
	if err != nil || pid <= 0 || strconv.Itoa(pid) != s[:at] {
		return 0, "", false
	}
	return pid, s[at+1 : dash], true
}
