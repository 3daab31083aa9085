package fsutil

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// setState is what a test's set of files holds: the content of each
// target ("" for no file) and every name in their folders.
type setState struct {
	content []string
	names   []string
}

func readSet(t *testing.T, paths []string) setState {
	t.Helper()
	var s setState
	dirs := map[string]bool{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		switch {
		case err == nil:
			s.content = append(s.content, string(b))
		case errors.Is(err, os.ErrNotExist):
			s.content = append(s.content, "")
		default:
			t.Fatal(err)
		}
		dirs[filepath.Dir(p)] = true
	}
	for d := range dirs {
		for _, n := range names(t, d) {
			s.names = append(s.names, filepath.Join(d, n))
		}
	}
	sort.Strings(s.names)
	return s
}

func (s setState) String() string {
	return fmt.Sprintf("contents %q, files %v", s.content, s.names)
}

func same(a, b setState) bool { return a.String() == b.String() }

// setFixture makes a folder (or two, when twoDirs) with the old set: the
// first target holds "old 0"; the second holds "old 1", or does not
// exist when missing. It returns the targets, the old state and the
// new files to write.
func setFixture(t *testing.T, missing, twoDirs bool) (paths []string, old setState, files []SetFile) {
	t.Helper()
	dir := t.TempDir()
	dir2 := dir
	if twoDirs {
		dir2 = t.TempDir()
	}
	paths = []string{filepath.Join(dir, "vecs.npy"), filepath.Join(dir2, "vecs.ids.txt")}
	if err := os.WriteFile(paths[0], []byte("old 0"), 0o644); err != nil {
		t.Fatal(err)
	}
	if !missing {
		if err := os.WriteFile(paths[1], []byte("old 1"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old = readSet(t, paths)
	for i, p := range paths {
		files = append(files, FileBytes(p, []byte(fmt.Sprintf("new %d", i))))
	}
	return paths, old, files
}

// newState is the state after a complete write of the fixture's set.
func newState(t *testing.T, paths []string) setState {
	t.Helper()
	s := setState{content: []string{"new 0", "new 1"}}
	dirs := map[string]bool{}
	for _, p := range paths {
		if !dirs[filepath.Dir(p)] {
			dirs[filepath.Dir(p)] = true
		}
		s.names = append(s.names, p)
	}
	sort.Strings(s.names)
	return s
}

// TestWriteSet: a set is written whole, over old files and where there
// were none, and leaves nothing beside; paths named twice and
// directories are refused before anything is written.
func TestWriteSet(t *testing.T) {
	for _, missing := range []bool{false, true} {
		paths, _, files := setFixture(t, missing, false)
		if err := WriteSet(files...); err != nil {
			t.Fatal(err)
		}
		if got, want := readSet(t, paths), newState(t, paths); !same(got, want) {
			t.Errorf("missing=%v: %v, want %v", missing, got, want)
		}
	}
	paths, _, files := setFixture(t, false, false)
	if err := WriteSet(files[0], files[0]); err == nil || !strings.Contains(err.Error(), "named twice") {
		t.Errorf("a path named twice: %v", err)
	}
	sub := filepath.Join(filepath.Dir(paths[0]), "sub")
	os.Mkdir(sub, 0o755)
	old := readSet(t, paths)
	if err := WriteSet(files[0], FileBytes(sub, nil)); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("a directory: %v", err)
	}
	if got := readSet(t, paths); !same(got, old) {
		t.Errorf("refused sets changed the files: %v, want %v", got, old)
	}
}

// steps are the points where CommitHook is called, in order; the commit
// point is between "replace" 1 and "commit".
var steps = []struct {
	name string
	i    int
}{{"prepare", 0}, {"prepare", 1}, {"journal", -1}, {"backup", 0}, {"backup", 1}, {"replace", 0}, {"replace", 1}, {"commit", -1}, {"cleanup", -1}}

func withHook(t *testing.T, h func(step string, i int) error) {
	CommitHook = h
	t.Cleanup(func() { CommitHook = nil })
}

// TestWriteSetFailsAtEachStep: a failure at any step before the commit
// point (and a fill that fails) leaves the old set whole and nothing
// beside it; past the commit point the new set stands.
func TestWriteSetFailsAtEachStep(t *testing.T) {
	boom := errors.New("boom")
	for _, links := range []bool{true, false} {
		for _, missing := range []bool{false, true} {
			for k, at := range steps {
				if missing && at.name == "backup" && at.i == 1 {
					continue // nothing to set aside
				}
				name := fmt.Sprintf("links=%v/missing=%v/%s-%d", links, missing, at.name, at.i)
				t.Run(name, func(t *testing.T) {
					if !links {
						noLinks(t)
					}
					paths, old, files := setFixture(t, missing, false)
					reached := false
					withHook(t, func(step string, i int) error {
						if step == at.name && i == at.i {
							reached = true
							// Half done: the test must catch a state
							// that is neither set.
							return boom
						}
						return nil
					})
					err := WriteSet(files...)
					if !reached {
						t.Fatalf("step %s %d not reached", at.name, at.i)
					}
					want := old
					if k >= 7 { // past the commit point
						want = newState(t, paths)
						if err != nil {
							t.Errorf("error %v after the commit point", err)
						}
					} else if !errors.Is(err, boom) {
						t.Errorf("error %v, want boom", err)
					}
					if got := readSet(t, paths); !same(got, want) {
						t.Errorf("after a failure at %s %d: %v, want %v", at.name, at.i, got, want)
					}
				})
			}
		}
	}
	t.Run("fill fails", func(t *testing.T) {
		paths, old, files := setFixture(t, false, false)
		files[1].Fill = func(w io.Writer) error {
			io.WriteString(w, "partial")
			return boom
		}
		if err := WriteSet(files...); !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "writing "+paths[1]+": ") {
			t.Errorf("error %v, want writing %s: boom", err, paths[1])
		}
		if got := readSet(t, paths); !same(got, old) {
			t.Errorf("%v, want %v", got, old)
		}
	})
	t.Run("ids file is a directory", func(t *testing.T) {
		// The target turns into a directory after the check: the rename
		// over it fails, and the first file is put back.
		paths, _, files := setFixture(t, true, false)
		old := readSet(t, paths)
		withHook(t, func(step string, i int) error {
			if step == "journal" {
				os.Mkdir(paths[1], 0o755)
				os.WriteFile(filepath.Join(paths[1], "x"), nil, 0o644)
			}
			return nil
		})
		if err := WriteSet(files...); err == nil {
			t.Fatal("no error renaming over a directory")
		}
		os.Remove(filepath.Join(paths[1], "x"))
		os.Remove(paths[1])
		if got := readSet(t, paths); !same(got, old) {
			t.Errorf("%v, want %v", got, old)
		}
	})
}

// noLinks makes backups moves, as on a file system without hard links.
func noLinks(t *testing.T) {
	link = func(string, string) error { return &os.LinkError{Op: "link", Err: syscall.EPERM} }
	t.Cleanup(func() { link = os.Link })
}

// deadWriters makes every writer count as ended, so that this process's
// own crashed commit is recovered as another's would be.
func deadWriters(t *testing.T) {
	ownerGone = func(int, string) bool { return true }
	t.Cleanup(func() {
		ownerGone = func(pid int, host string) bool {
			return host == hostTag() && pid != os.Getpid() && !processAlive(pid)
		}
	})
}

// TestWriteSetCrashRecovered: a crash (kill -9, power cut) at any step
// leaves what it leaves; the next write into the folder finds the
// journal and restores the old set (before the commit point) or
// completes the new one (after it), leaving nothing beside. With two
// folders, the next write into either does it.
func TestWriteSetCrashRecovered(t *testing.T) {
	for _, c := range []struct {
		links, missing, twoDirs, moveDir bool
	}{
		{links: true}, {links: true, missing: true}, {links: false}, {links: true, twoDirs: true},
		{links: false, missing: true, twoDirs: true}, {links: true, moveDir: true},
	} {
		for k, at := range steps {
			if c.missing && at.name == "backup" && at.i == 1 {
				continue
			}
			name := fmt.Sprintf("%+v/%s-%d", c, at.name, at.i)
			t.Run(name, func(t *testing.T) {
				if !c.links {
					noLinks(t)
				}
				paths, old, files := setFixture(t, c.missing, c.twoDirs)
				withHook(t, func(step string, i int) error {
					if step == at.name && i == at.i {
						return errCrash
					}
					return nil
				})
				if err := WriteSet(files...); !errors.Is(err, errCrash) {
					t.Fatalf("WriteSet returned %v, want the simulated crash", err)
				}
				CommitHook = nil
				crashed := readSet(t, paths)
				if at.name == "replace" && at.i == 0 && (crashed.content[0] != "new 0" || crashed.content[1] == "new 1") {
					t.Fatalf("the crash mid-commit left %v: not half the set, the test shows nothing", crashed)
				}
				want := old
				if k >= 7 {
					want = newState(t, paths)
				}
				if c.moveDir {
					// The folder is reached by another path now.
					moved := filepath.Join(t.TempDir(), "moved")
					if err := os.Rename(filepath.Dir(paths[0]), moved); err != nil {
						t.Fatal(err)
					}
					for i := range paths {
						paths[i] = filepath.Join(moved, filepath.Base(paths[i]))
					}
					want = relocate(want, moved)
				}
				deadWriters(t)
				// A write into the last folder of the set restores the
				// set; the next write of the set's targets (what the
				// next run does first) leaves nothing else behind.
				RemoveStaleTemps(paths[len(paths)-1])
				if got := readSet(t, paths); strings.Join(got.content, "|") != strings.Join(want.content, "|") {
					t.Errorf("crash at %s %d, left %v; recovered to %v, want %v", at.name, at.i, crashed, got, want)
				}
				for _, p := range paths {
					RemoveStaleTemps(p)
				}
				if got := readSet(t, paths); !same(got, want) {
					t.Errorf("crash at %s %d, left %v; cleaned to %v, want %v", at.name, at.i, crashed, got, want)
				}
			})
		}
	}
}

// relocate moves the names of a state into folder dir.
func relocate(s setState, dir string) setState {
	out := setState{content: s.content}
	for _, n := range s.names {
		out.names = append(out.names, filepath.Join(dir, filepath.Base(n)))
	}
	sort.Strings(out.names)
	return out
}

// TestWriteSetRecoveryKeepsLaterFiles: a recovery rolling back a target
// that did not exist before removes it only if it is the crashed set's
// file, not one written there since.
func TestWriteSetRecoveryKeepsLaterFiles(t *testing.T) {
	paths, _, files := setFixture(t, true, false)
	withHook(t, func(step string, i int) error {
		if step == "replace" && i == 1 {
			return errCrash
		}
		return nil
	})
	if err := WriteSet(files...); err != errCrash {
		t.Fatal(err)
	}
	CommitHook = nil
	// Another program replaces the second target by then.
	if err := os.Remove(paths[1]); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(paths[1], []byte("someone else's"), 0o644); err != nil {
		t.Fatal(err)
	}
	deadWriters(t)
	RemoveStaleTemps(paths[0])
	got := readSet(t, paths)
	if got.content[0] != "old 0" || got.content[1] != "someone else's" || len(got.names) != 2 {
		t.Errorf("recovered to %v, want old 0 and the later file, nothing else", got)
	}
}

// TestWriteSetJournalCutShort: a journal the crash cut short (written
// before any target was touched) is removed, with the temporary files.
func TestWriteSetJournalCutShort(t *testing.T) {
	paths, old, _ := setFixture(t, false, false)
	dir := filepath.Dir(paths[0])
	for _, n := range []string{journalPrefix + "999999@" + hostTag() + "-1", TempName(paths[0], 999999) + "2"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(`{"version":1,"journ`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	deadWriters(t)
	RemoveStaleTemps(paths[0])
	if got := readSet(t, paths); !same(got, old) {
		t.Errorf("%v, want %v", got, old)
	}
}

// TestWriteSetAbort: a signal (AbortWrites) during the commit, between
// two renames, rolls the set back to the old files before the process
// exits.
func TestWriteSetAbort(t *testing.T) {
	defer func() {
		temps.Lock()
		temps.aborted = false
		temps.Unlock()
		abortRequested.Store(false)
		abortGrace = 2 * time.Second
	}()
	abortGrace = 0
	paths, old, files := setFixture(t, false, false)
	done := make(chan []string)
	withHook(t, func(step string, i int) error {
		if step == "replace" && i == 0 {
			go func() { done <- AbortWrites() }()
			for !Aborting() {
				// AbortWrites has asked; it waits for this commit.
				runtime.Gosched()
			}
		}
		return nil
	})
	if err := WriteSet(files...); !errors.Is(err, ErrAborted) {
		t.Errorf("WriteSet returned %v, want ErrAborted", err)
	}
	<-done
	if got := readSet(t, paths); !same(got, old) {
		t.Errorf("after a signal mid-commit: %v, want the old set %v", got, old)
	}
}

// TestWriteSetIgnoresForeignJournal: a journal naming files that are not
// a set's temporary files and backups beside their targets (not one
// WriteSet wrote) is removed without touching any file it names.
func TestWriteSetIgnoresForeignJournal(t *testing.T) {
	dir, elsewhere := t.TempDir(), t.TempDir()
	victim := filepath.Join(elsewhere, "precious.txt")
	if err := os.WriteFile(victim, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(dir, "out.json")
	jp := filepath.Join(dir, journalPrefix+"999999@"+hostTag()+"-7")
	j := fmt.Sprintf(`{"version":1,"journals":[%q],"files":[{"path":%q,"temp":%q,"backup":%q}]}`,
		jp, target, filepath.Join(dir, ".out.json.tmp-999999@"+hostTag()+"-1"), victim)
	if err := os.WriteFile(jp, []byte(j), 0o600); err != nil {
		t.Fatal(err)
	}
	deadWriters(t)
	RemoveStaleTemps(target)
	if b, err := os.ReadFile(victim); err != nil || string(b) != "keep" {
		t.Errorf("the file a foreign journal named: %q, %v", b, err)
	}
	if ns := names(t, dir); len(ns) != 0 {
		t.Errorf("the folder holds %v, want nothing (the journal removed, no target made)", ns)
	}
}
