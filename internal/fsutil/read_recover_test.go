package fsutil

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// TestReadRecoversInterruptedSet: after a crash at any step of a
// WriteSet, the first read in the folder (ReadFile, as the model, npy and
// tokenizer readers read) sees the whole old set before the commit point
// and the whole new one after it, never half of each, though no write
// came since.
func TestReadRecoversInterruptedSet(t *testing.T) {
	for k, at := range steps {
		t.Run(at.name, func(t *testing.T) {
			paths, old, files := setFixture(t, false, false)
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
			deadWriters(t)
			recovered = sync.Map{} // a new process reads
			want := old.content
			if k >= 7 {
				want = []string{"new 0", "new 1"}
			}
			for i, p := range paths {
				got, err := ReadFile(p, 1<<20)
				if err != nil || string(got) != want[i] {
					t.Errorf("crash at %s %d: read %s: %q (%v), want %q", at.name, at.i, filepath.Base(p), got, err, want[i])
				}
			}
			entries, err := os.ReadDir(filepath.Dir(paths[0]))
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				if len(e.Name()) > len(journalPrefix) && e.Name()[:len(journalPrefix)] == journalPrefix {
					t.Errorf("crash at %s %d: the journal %s is left after the read", at.name, at.i, e.Name())
				}
			}
		})
	}
}
