package embed

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// partsHead is a manifest head for the tests' folders.
func partsHead(partSize int, shard string) Manifest {
	return Manifest{Tool: "test", Model: FileSum{File: "m.onnx", SHA256: "aa"},
		Settings: Settings{Input: "--jsonl x", Mode: Chunk, Pooling: PoolMean, Window: 8, Dim: 2, PartSize: partSize, Shard: shard}}
}

func vec(i int) []float32 { return []float32{float32(i), float32(-i)} }

// writeDocs adds documents first…last (ids d1, d2, …) to w.
func writeDocs(t *testing.T, w *PartWriter, first, last int) {
	t.Helper()
	for i := first; i <= last; i++ {
		id := fmt.Sprint("d", i)
		if err := w.Add(int64(i), id, []string{id}, [][]float32{vec(i)}); err != nil {
			t.Fatal(err)
		}
	}
}

func readDir(t *testing.T, dir string) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = string(b)
	}
	return out
}

// TestPartWriterResumes: a writer stopped after 5 of 7 documents (parts
// of 2) keeps parts 0 and 1; a new writer resumes after record 4 and
// ends with the folder an uninterrupted writer makes, byte for byte; a
// writer of other settings is refused naming them.
func TestPartWriterResumes(t *testing.T) {
	whole, cut := t.TempDir(), t.TempDir()
	w, err := OpenParts(whole, partsHead(2, ""))
	if err != nil {
		t.Fatal(err)
	}
	writeDocs(t, w, 1, 7)
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	w, _ = OpenParts(cut, partsHead(2, ""))
	writeDocs(t, w, 1, 5) // the fifth is lost with the process
	w, err = OpenParts(cut, partsHead(2, ""))
	if err != nil {
		t.Fatal(err)
	}
	rec, last, done := w.Resume()
	if rec != 4 || last != "d4" || done {
		t.Fatalf("resume at %d after %s (complete %v), want 4 after d4", rec, last, done)
	}
	writeDocs(t, w, 5, 7)
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	a, b := readDir(t, whole), readDir(t, cut)
	if fmt.Sprint(a) != fmt.Sprint(b) || len(a) != 9 {
		t.Errorf("resumed folder differs from the whole run: %d files vs %d", len(b), len(a))
	}
	m, _ := ReadManifest(cut)
	if !m.Complete || m.Documents != 7 || len(m.Parts) != 4 || m.Parts[3].FirstID != "d7" {
		t.Errorf("manifest %+v", m)
	}
	other := partsHead(2, "")
	other.Settings.Mode, other.Model.SHA256 = Truncate, "bb"
	_, err = OpenParts(cut, other)
	var mm *MismatchError
	if !errors.As(err, &mm) || !strings.Contains(err.Error(), "mode: truncate here, chunk in the manifest") || !strings.Contains(err.Error(), "model:") {
		t.Errorf("other settings: %v", err)
	}
}

// TestVerifyAndMergeShards: the shards of one corpus verify and merge
// (every document once, vectors as written); a missing shard, a shard
// given twice, a damaged part and an id in two shards are refused.
func TestVerifyAndMergeShards(t *testing.T) {
	root := t.TempDir()
	dirs := []string{filepath.Join(root, "s0"), filepath.Join(root, "s1")}
	for s, dir := range dirs {
		w, err := OpenParts(dir, partsHead(2, fmt.Sprintf("%d/2", s)))
		if err != nil {
			t.Fatal(err)
		}
		for i := 1; i <= 9; i++ {
			id := fmt.Sprint("d", i)
			if ShardOf(id, 2) == s {
				if err := w.Add(int64(i), id, []string{id}, [][]float32{vec(i)}); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := w.Finish(); err != nil {
			t.Fatal(err)
		}
	}
	v, err := VerifyParts(dirs)
	if err != nil {
		t.Fatal(err)
	}
	if v.Documents != 9 || v.Shards != 2 {
		t.Errorf("verified %d documents of %d shards", v.Documents, v.Shards)
	}
	out := filepath.Join(root, "merged")
	if err := v.Merge(out); err != nil {
		t.Fatal(err)
	}
	got := map[string][]float32{}
	mv, err := VerifyParts([]string{out})
	if err != nil {
		t.Fatal(err)
	}
	mv.parts(func(_ string, _ Part, ids []string, vecs []float32) error {
		for i, id := range ids {
			got[id] = vecs[2*i : 2*i+2]
		}
		return nil
	})
	for i := 1; i <= 9; i++ {
		if g := got[fmt.Sprint("d", i)]; len(g) != 2 || g[0] != vec(i)[0] || g[1] != vec(i)[1] {
			t.Errorf("d%d merged as %v", i, g)
		}
	}
	for _, c := range []struct {
		dirs []string
		want string
	}{
		{dirs[:1], "shards missing: 1/2"},
		{[]string{dirs[0], dirs[0]}, "both shard 0/2"},
	} {
		if _, err := VerifyParts(c.dirs); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.dirs, err, c.want)
		}
	}
	m, _ := ReadManifest(dirs[1])
	p := filepath.Join(dirs[1], m.Parts[0].Name+".npy")
	data, _ := os.ReadFile(p)
	data[len(data)-1] ^= 1
	os.WriteFile(p, data, 0o644)
	if _, err := VerifyParts(dirs); err == nil || !strings.Contains(err.Error(), "SHA-256") {
		t.Errorf("a damaged part: %v", err)
	}
}
