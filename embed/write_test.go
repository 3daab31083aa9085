package embed

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/linearize/linearize/corpus"
)

// writeCorpus writes n documents (ids d1…dn, of 3 to 24 words) as JSONL
// in dir, the line of document bad (when positive) not JSON.
func writeCorpus(t *testing.T, dir string, n, bad int) string {
	t.Helper()
	var b strings.Builder
	for i := 1; i <= n; i++ {
		if i == bad {
			b.WriteString("{not json\n")
			continue
		}
		fmt.Fprintf(&b, "{\"id\": \"d%d\", \"text\": %q}\n", i, text(3+i*7%22, i))
	}
	path := filepath.Join(dir, "docs.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// writeOpts are the tests' settings: parts of 3 documents.
func writeOpts() WriteOptions {
	return WriteOptions{Input: "--jsonl docs.jsonl", Tool: "test", PartSize: 3}
}

// folderIDs reads the ids of a folder of parts, in order.
func folderIDs(t *testing.T, dir string) []string {
	t.Helper()
	m, err := ReadManifest(dir)
	if err != nil || m == nil || !m.Complete {
		t.Fatalf("%s: manifest %+v, %v", dir, m, err)
	}
	var ids []string
	for _, p := range m.Parts {
		got, _, err := m.ReadPart(dir, p)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, got...)
	}
	return ids
}

// TestWriteFolderAndFile: a folder output holds parts of PartSize
// documents and a complete manifest; a file output (.npy and its ids
// file) holds the same vectors, byte for byte what merging the folder
// into a file writes, and leaves no part folder; a corpus within one
// part writes its file from memory.
func TestWriteFolderAndFile(t *testing.T) {
	path := modelDir(t)
	e := open(t, path, Options{Window: 16})
	dir := t.TempDir()
	src := corpus.JSONL(writeCorpus(t, dir, 11, 0), corpus.Options{})

	folder := filepath.Join(dir, "vecs")
	rep, err := Write(e, src, folder+"/", writeOpts())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Documents != 11 || rep.Vectors != 11 || rep.ResumedParts != 0 || rep.Done {
		t.Errorf("folder: report %+v", rep)
	}
	m, err := ReadManifest(folder)
	if err != nil || m == nil || !m.Complete || m.Documents != 11 || len(m.Parts) != 4 || m.Parts[3].Documents != 2 ||
		m.Settings.Window != 16 || m.Settings.Backend != "native" || m.Settings.PartFormat != PartNPY || m.Tool != "test" ||
		len(m.Tokenizer) != 1 || m.Tokenizer[0].File != "vocab.txt" {
		t.Fatalf("folder: manifest %+v, %v", m, err)
	}

	file := filepath.Join(dir, "vecs.npy")
	if rep, err := Write(e, src, file, writeOpts()); err != nil || rep.Documents != 11 {
		t.Fatalf("file: %+v, %v", rep, err)
	}
	if _, err := os.Stat(FilePartsDir(file)); !os.IsNotExist(err) {
		t.Errorf("the part folder of %s is left: %v", file, err)
	}
	v, err := VerifyParts([]string{folder})
	if err != nil {
		t.Fatal(err)
	}
	merged := filepath.Join(dir, "merged.npy")
	if err := v.Merge(merged); err != nil {
		t.Fatal(err)
	}
	for _, p := range [][2]string{{file, merged}, {IDsPath(file), IDsPath(merged)}} {
		a, _ := os.ReadFile(p[0])
		b, _ := os.ReadFile(p[1])
		if len(a) == 0 || string(a) != string(b) {
			t.Errorf("%s (%d bytes) differs from the merged folder's %s (%d bytes)", p[0], len(a), p[1], len(b))
		}
	}

	small := filepath.Join(dir, "small.jsonl")
	o := writeOpts()
	o.PartSize = 100
	if rep, err := Write(e, src, small, o); err != nil || rep.Documents != 11 {
		t.Fatalf("small: %+v, %v", rep, err)
	}
	if _, err := os.Stat(FilePartsDir(small)); !os.IsNotExist(err) {
		t.Errorf("a run within one part made %s: %v", FilePartsDir(small), err)
	}
	// A folder that cannot be made is a failure of the run, not of the
	// input.
	if _, err := Write(e, src, filepath.Join(dir, "no", "vecs")+"/", writeOpts()); err == nil || errors.Is(err, ErrBadInput) {
		t.Errorf("a folder in a missing folder: %v; want an error that is not ErrBadInput", err)
	}
}

// TestWriteResumes: a run stopped by a line that is not JSON (bad input)
// keeps its finished parts; once the line is fixed the same call resumes
// after them and ends byte for byte with the output of a run that never
// stopped, for a folder and for a file; a complete output is done; other
// settings on the parts are refused naming them.
func TestWriteResumes(t *testing.T) {
	path := modelDir(t)
	e := open(t, path, Options{Window: 16})
	for _, out := range []string{"vecs/", "vecs.parquet"} {
		t.Run(out, func(t *testing.T) {
			dir := t.TempDir()
			whole, cut := filepath.Join(dir, "whole", out), filepath.Join(dir, "cut", out)
			os.Mkdir(filepath.Dir(whole), 0o755)
			os.Mkdir(filepath.Dir(cut), 0o755)
			jsonl := writeCorpus(t, dir, 13, 0)
			if _, err := Write(e, corpus.JSONL(jsonl, corpus.Options{}), whole, writeOpts()); err != nil {
				t.Fatal(err)
			}

			writeCorpus(t, dir, 13, 8)
			rep, err := Write(e, corpus.JSONL(jsonl, corpus.Options{}), cut, writeOpts())
			if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), "docs.jsonl:8") || rep != nil {
				t.Fatalf("a line not JSON: %+v, %v; want ErrBadInput naming line 8", rep, err)
			}
			parts := strings.TrimSuffix(cut, "/")
			if out == "vecs.parquet" {
				parts = FilePartsDir(cut)
			}
			m, err := ReadManifest(parts)
			if err != nil || m == nil || len(m.Parts) != 2 || m.Complete {
				t.Fatalf("after the failure: manifest %+v, %v; want 2 parts kept", m, err)
			}
			other := writeOpts()
			other.PartSize = 4
			if _, err := Write(e, corpus.JSONL(jsonl, corpus.Options{}), cut, other); !errors.Is(err, ErrBadInput) ||
				!strings.Contains(err.Error(), "part_size: 4 here, 3 in the manifest") {
				t.Errorf("other settings: %v", err)
			}

			writeCorpus(t, dir, 13, 0)
			rep, err = Write(e, corpus.JSONL(jsonl, corpus.Options{}), cut, writeOpts())
			if err != nil || rep.Documents != 7 || rep.ResumedParts != 2 || rep.ResumedDocuments != 6 || rep.Done {
				t.Fatalf("resume: %+v, %v", rep, err)
			}
			if a, b := filesIn(t, filepath.Dir(whole)), filesIn(t, filepath.Dir(cut)); fmt.Sprint(a) != fmt.Sprint(b) {
				t.Errorf("the resumed output (%v) differs from the uninterrupted one (%v)", slices.Sorted(maps.Keys(b)), slices.Sorted(maps.Keys(a)))
			}
			rep, err = Write(e, corpus.JSONL(jsonl, corpus.Options{}), cut, writeOpts())
			if out == "vecs/" && (err != nil || !rep.Done || rep.ResumedDocuments != 13 || rep.ResumedParts != 5) {
				t.Errorf("a complete folder: %+v, %v", rep, err)
			}
			if out != "vecs/" && (err != nil || rep.Done || rep.Documents != 13) {
				// The parts went with the file written: a new run.
				t.Errorf("a written file: %+v, %v", rep, err)
			}
		})
	}
}

// filesIn maps every file under dir (hidden folders included) to its
// content.
func filesIn(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestWriteShards: two shards' folders hold every document of the
// corpus once, each the documents ShardOf gives it, and verify as the
// shards of one run.
func TestWriteShards(t *testing.T) {
	path := modelDir(t)
	e := open(t, path, Options{Window: 16})
	dir := t.TempDir()
	src := corpus.JSONL(writeCorpus(t, dir, 12, 0), corpus.Options{})
	var all []string
	var dirs []string
	for i := range 2 {
		out := filepath.Join(dir, fmt.Sprintf("shard%d", i))
		o := writeOpts()
		o.Shard = fmt.Sprintf("%d/2", i)
		rep, err := Write(e, src, out+"/", o)
		if err != nil {
			t.Fatal(err)
		}
		ids := folderIDs(t, out)
		if rep.Documents != len(ids) || len(ids) == 0 || len(ids) == 12 {
			t.Errorf("shard %d: %d documents reported, %v written", i, rep.Documents, ids)
		}
		for _, id := range ids {
			if ShardOf(id, 2) != i {
				t.Errorf("shard %d holds %s, of shard %d", i, id, ShardOf(id, 2))
			}
		}
		all = append(all, ids...)
		dirs = append(dirs, out)
	}
	slices.Sort(all)
	var want []string
	for i := 1; i <= 12; i++ {
		want = append(want, fmt.Sprint("d", i))
	}
	slices.Sort(want)
	if !slices.Equal(all, want) {
		t.Errorf("the shards hold %v, want every document once: %v", all, want)
	}
	if v, err := VerifyParts(dirs); err != nil || v.Shards != 2 || v.Documents != 12 {
		t.Errorf("verify: %+v, %v", v, err)
	}
}

// TestWriteSkipsBad: documents with no wordpieces or not UTF-8 are
// refused naming each (ErrBadInput), or with SkipBad skipped and counted
// by reason in the report and the manifest; a corpus of bad documents
// only is refused.
func TestWriteSkipsBad(t *testing.T) {
	path := modelDir(t)
	e := open(t, path, Options{Window: 16})
	texts := []string{"the man", "   ", "the girl", "caf\xe9", "w1 w2", "\t"}
	src := corpus.Texts(texts)
	out := filepath.Join(t.TempDir(), "vecs")
	_, err := Write(e, src, out+"/", writeOpts())
	if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), "2 of 5 documents cannot be embedded") ||
		!strings.Contains(err.Error(), "document text-2: empty") || !strings.Contains(err.Error(), "document text-4: invalid UTF-8") {
		t.Errorf("bad documents: %v", err)
	}
	os.RemoveAll(out)
	o := writeOpts()
	o.SkipBad = true
	rep, err := Write(e, src, out+"/", o)
	if err != nil {
		t.Fatal(err)
	}
	if n, why := rep.SkippedBad(); rep.Documents != 3 || n != 3 || why != "2 empty, 1 invalid UTF-8" || rep.Skipped[BadEmpty] != 2 {
		t.Errorf("report %+v: skipped %d (%s)", rep, n, why)
	}
	if ids := folderIDs(t, out); fmt.Sprint(ids) != "[text-1 text-3 text-5]" {
		t.Errorf("ids %v", ids)
	}
	if m, _ := ReadManifest(out); m.SkippedBad != 3 || !m.Settings.SkipBad {
		t.Errorf("manifest %+v", m)
	}
	_, err = Write(e, corpus.Texts([]string{" ", "\xff"}), filepath.Join(t.TempDir(), "v.npy"), o)
	if !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), "all 2 documents are bad (1 empty, 1 invalid UTF-8); nothing to embed") {
		t.Errorf("only bad documents: %v", err)
	}
}
