package embed

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/linearize/linearize/internal/childtest"
	"github.com/linearize/linearize/internal/fsutil"
)

// goldenManifest reads the golden manifest goldenDir/name: its bytes and
// the Manifest they hold.
func goldenManifest(t *testing.T, name string) ([]byte, *Manifest) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(goldenDir, name))
	if err != nil {
		t.Fatal(err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return b, &m
}

// wantAfter is the Manifest of a folder of the complete manifest full
// after its first k parts, not complete: what a manifest listing those
// parts said (totals over them, input records through the last).
func wantAfter(full *Manifest, k int) *Manifest {
	m := *full
	m.Parts = slices.Clone(full.Parts[:k])
	m.Documents, m.Vectors, m.SkippedBad, m.Records, m.Complete = 0, 0, 0, 0, false
	for _, p := range m.Parts {
		m.Documents += p.Documents
		m.Vectors += p.Vectors
		m.SkippedBad += p.SkippedBad
		m.Records = p.Records
	}
	if k == 0 {
		m.Parts = nil
	}
	return &m
}

// partsAfter is the number of parts committed once the first n records
// of docs are fed to a writer (Finish not called).
func partsAfter(docs []goldenDoc, n int) int {
	good := 0
	for _, d := range docs[:n] {
		if !d.bad {
			good++
		}
	}
	return good / goldenPartSize
}

// goldenFolder writes goldenCorpus with parts of format f into a new
// folder, uninterrupted, and returns it.
func goldenFolder(t *testing.T, f PartFormat) string {
	t.Helper()
	dir := t.TempDir()
	w, err := OpenParts(dir, goldenHead(f))
	if err != nil {
		t.Fatal(err)
	}
	feedGolden(t, w, goldenCorpus())
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// resumeGolden continues the folder dir as a re-run does (OpenParts,
// the records after Resume's, Finish) and returns what Resume said.
func resumeGolden(t *testing.T, dir string, f PartFormat) (int64, bool) {
	t.Helper()
	w, err := OpenParts(dir, goldenHead(f))
	if err != nil {
		t.Fatal(err)
	}
	rec, _, done := w.Resume()
	if done {
		return rec, true
	}
	var rest []goldenDoc
	for _, d := range goldenCorpus() {
		if d.rec > rec {
			rest = append(rest, d)
		}
	}
	feedGolden(t, w, rest)
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	return rec, false
}

// sameFolder fails unless dir holds exactly the files of want, byte for
// byte (hidden ones too: journals, temporary files, backups).
func sameFolder(t *testing.T, what, dir string, want map[string]string) {
	t.Helper()
	got := readDir(t, dir)
	if !maps.Equal(got, want) {
		var diff []string
		for _, k := range slices.Sorted(maps.Keys(got)) {
			if w, ok := want[k]; !ok || w != got[k] {
				diff = append(diff, k)
			}
		}
		for _, k := range slices.Sorted(maps.Keys(want)) {
			if _, ok := got[k]; !ok {
				diff = append(diff, "missing "+k)
			}
		}
		t.Errorf("%s: the folder differs from an uninterrupted run's: %v", what, diff)
	}
}

// TestPartsCompleteGolden: a complete folder, .npy or .parquet parts, is
// byte for byte what the writer before part records wrote (the golden
// manifests list the parts' SHA-256, so they pin the parts too), holds
// no record, and reads as its manifest.
func TestPartsCompleteGolden(t *testing.T) {
	for _, f := range []PartFormat{PartNPY, PartParquet} {
		t.Run(string(f), func(t *testing.T) {
			golden, want := goldenManifest(t, "manifest-"+string(f)+".json")
			dir := goldenFolder(t, f)
			files := readDir(t, dir)
			if files[ManifestName] != string(golden) {
				t.Errorf("manifest.json differs from the golden one:\n%s", files[ManifestName])
			}
			var names []string
			for _, p := range want.Parts {
				sums := map[string]string{p.Name + ".parquet": p.SHA256}
				if f == PartNPY {
					sums = map[string]string{p.Name + ".npy": p.SHA256, p.Name + ".ids.txt": p.IDsSHA256}
				}
				for n, h := range sums {
					names = append(names, n)
					if sum([]byte(files[n])) != h {
						t.Errorf("%s: not the SHA-256 of the golden manifest", n)
					}
				}
			}
			names = append(names, ManifestName)
			if got := slices.Sorted(maps.Keys(files)); !slices.Equal(got, slices.Sorted(slices.Values(names))) {
				t.Errorf("the folder holds %q, want %q", got, names)
			}
			m, err := ReadManifest(dir)
			if err != nil || !reflect.DeepEqual(m, want) {
				t.Errorf("ReadManifest: %+v, %v\nwant %+v", m, err, want)
			}
		})
	}
}

// TestReadManifestStates: a folder read at every state a run leaves
// (after each input record: no manifest before the first part, then 1,
// 2, 3 parts; complete; complete with records a cut-short Finish left;
// a previous version's manifest listing 2 parts, alone and continued by
// this one; manifest.json with no record) gives the Manifest a manifest
// listing its committed parts gives, the references being the golden
// manifests the previous version wrote; a folder whose records do not
// follow on is refused, naming the record.
func TestReadManifestStates(t *testing.T) {
	_, full := goldenManifest(t, "manifest-npy.json")
	_, old2 := goldenManifest(t, "manifest-npy-2parts.json")
	if !reflect.DeepEqual(wantAfter(full, 2), old2) {
		t.Fatalf("the reference after 2 parts is not what the previous version wrote:\n%+v\n%+v", wantAfter(full, 2), old2)
	}
	docs := goldenCorpus()
	head := goldenHead(PartNPY)

	// Every prefix of the input, read as the folder is then.
	for n := 0; n <= len(docs); n++ {
		dir := t.TempDir()
		w, err := OpenParts(dir, head)
		if err != nil {
			t.Fatal(err)
		}
		feedGolden(t, w, docs[:n])
		k := partsAfter(docs, n)
		var want *Manifest
		if k > 0 {
			want = wantAfter(full, k)
		}
		m, err := ReadManifest(dir)
		if err != nil || !reflect.DeepEqual(m, want) {
			t.Errorf("after %d records (%d parts): %+v, %v\nwant %+v", n, k, m, err, want)
		}
		if got := w.Manifest(); k > 0 && !reflect.DeepEqual(&got, want) {
			t.Errorf("after %d records: the writer's manifest %+v", n, got)
		}
	}

	// The states of a run's end and of a folder made before the upgrade.
	previous := func(t *testing.T) string {
		dir := t.TempDir()
		src := goldenFolder(t, PartNPY)
		for _, p := range full.Parts[:2] {
			for _, ext := range []string{".npy", ".ids.txt"} {
				b, _ := os.ReadFile(filepath.Join(src, p.Name+ext))
				os.WriteFile(filepath.Join(dir, p.Name+ext), b, 0o644)
			}
		}
		b, _ := os.ReadFile(filepath.Join(goldenDir, "manifest-npy-2parts.json"))
		os.WriteFile(filepath.Join(dir, ManifestName), b, 0o644)
		return dir
	}
	cut := func(t *testing.T, n int) string {
		dir := t.TempDir()
		w, err := OpenParts(dir, head)
		if err != nil {
			t.Fatal(err)
		}
		feedGolden(t, w, docs[:n])
		return dir
	}
	records := func(t *testing.T, dir string) map[string]string {
		out := map[string]string{}
		for name, b := range readDir(t, dir) {
			if _, ok := recordIndex(name); ok {
				out[name] = b
			}
		}
		return out
	}
	edit := func(t *testing.T, dir, name string, fn func(*Part)) {
		var p Part
		b, _ := os.ReadFile(filepath.Join(dir, name))
		if err := json.Unmarshal(b, &p); err != nil {
			t.Fatal(err)
		}
		fn(&p)
		b, _ = json.Marshal(&p)
		os.WriteFile(filepath.Join(dir, name), b, 0o644)
	}
	for _, c := range []struct {
		name    string
		make    func(t *testing.T) string
		want    *Manifest
		err     string
		resumes bool // OpenParts, the rest, Finish: the golden folder
	}{
		{name: "complete", make: func(t *testing.T) string { return goldenFolder(t, PartNPY) }, want: full, resumes: true},
		{name: "complete, records left", make: func(t *testing.T) string {
			dir := cut(t, len(docs))
			recs := records(t, dir)
			if len(recs) != 3 {
				t.Fatalf("%d records after 3 parts", len(recs))
			}
			resumeGolden(t, dir, PartNPY)
			if len(records(t, dir)) != 0 {
				t.Fatal("Finish left records")
			}
			for name, b := range recs {
				if name != "part-00001.json" { // a removal cut short
					os.WriteFile(filepath.Join(dir, name), []byte(b), 0o644)
				}
			}
			return dir
		}, want: full, resumes: true},
		{name: "previous version, 2 parts", make: previous, want: old2, resumes: true},
		{name: "previous version continued by this one", make: func(t *testing.T) string {
			dir := previous(t)
			w, err := OpenParts(dir, head)
			if err != nil {
				t.Fatal(err)
			}
			if rec, last, done := w.Resume(); rec != 7 || last != "p\u2029q" || done {
				t.Fatalf("resume at %d after %q (%v)", rec, last, done)
			}
			var rest []goldenDoc
			for _, d := range docs[goldenCut:] {
				if d.rec <= 12 {
					rest = append(rest, d)
				}
			}
			feedGolden(t, w, rest)
			if recs := records(t, dir); len(recs) != 1 || recs["part-00002.json"] == "" {
				t.Fatalf("records %q, want part-00002.json alone", slices.Collect(maps.Keys(recs)))
			}
			return dir
		}, want: wantAfter(full, 3), resumes: true},
		{name: "manifest.json with no record", make: func(t *testing.T) string {
			dir := cut(t, len(docs))
			for name := range records(t, dir) {
				os.Remove(filepath.Join(dir, name))
			}
			return dir
		}, want: wantAfter(full, 0), resumes: true},
		{name: "a record missing", make: func(t *testing.T) string {
			dir := cut(t, len(docs))
			os.Remove(filepath.Join(dir, "part-00001.json"))
			return dir
		}, err: "the record part-00002.json follows 1 parts: part-00001.json is missing"},
		{name: "a record of another part", make: func(t *testing.T) string {
			dir := cut(t, len(docs))
			edit(t, dir, "part-00002.json", func(p *Part) { p.Name = "part-00001" })
			return dir
		}, err: `part-00002.json names the part "part-00001"`},
		{name: "a record's counts", make: func(t *testing.T) string {
			dir := cut(t, len(docs))
			edit(t, dir, "part-00001.json", func(p *Part) { p.Vectors = 2 })
			return dir
		}, err: "part-00001.json: 3 documents, 2 vectors"},
		{name: "a record without SHA-256", make: func(t *testing.T) string {
			dir := cut(t, len(docs))
			edit(t, dir, "part-00000.json", func(p *Part) { p.IDsSHA256 = "" })
			return dir
		}, err: "part-00000.json: no SHA-256"},
		{name: "a record cut short", make: func(t *testing.T) string {
			dir := cut(t, len(docs))
			os.WriteFile(filepath.Join(dir, "part-00002.json"), []byte(`{"name": "part-0`), 0o644)
			return dir
		}, err: "part-00002.json: unexpected end of JSON input"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := c.make(t)
			m, err := ReadManifest(dir)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Errorf("ReadManifest: %+v, %v; want an error with %q", m, err, c.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(m, c.want) {
				t.Errorf("ReadManifest: %+v, %v\nwant %+v", m, err, c.want)
			}
			if c.resumes {
				if _, done := resumeGolden(t, dir, PartNPY); done != c.want.Complete {
					t.Errorf("Resume: complete %v", done)
				}
				sameFolder(t, c.name, dir, readDir(t, goldenFolder(t, PartNPY)))
			}
		})
	}
}

// crashChildEnv makes the test binary write goldenCorpus into a folder
// and stop, as a kill -9 there would, at a step of one of its commits:
// "DIR\tSET\tSTEP\tI" (SET counted from 1, STEP and I as
// fsutil.CommitHook names them). It prints "STOP" and blocks until
// killed.
const crashChildEnv = "LINEARIZE_TEST_EMBED_CRASH"

func init() {
	v := os.Getenv(crashChildEnv)
	if v == "" {
		return
	}
	f := strings.Split(v, "\t")
	set, _ := strconv.Atoi(f[1])
	i, _ := strconv.Atoi(f[3])
	sets := 0
	fsutil.CommitHook = func(step string, j int) error {
		if step == "prepare" && j == 0 {
			sets++
		}
		if sets == set && step == f[2] && j == i {
			fmt.Println("STOP")
			for {
				time.Sleep(time.Hour) // until killed
			}
		}
		return nil
	}
	w, err := OpenParts(f[0], goldenHead(PartNPY))
	if err == nil {
		for _, d := range goldenCorpus() {
			if d.bad {
				w.Skip()
			} else if err = w.Add(d.rec, d.id, d.ids, d.vecs); err != nil {
				break
			}
		}
	}
	if err == nil {
		err = w.Finish()
	}
	fmt.Fprintln(os.Stderr, "the child did not stop:", err)
	os.Exit(1)
}

// commitStep is a step of a WriteSet: of the set-th set, CommitHook's
// step and i.
type commitStep struct {
	set  int
	step string
	i    int
}

// TestPartCommitCrash: a kill -9 at every step of every commit of a run
// (each part's, the first with manifest.json's head, and Finish's, whose
// last step is followed by the removal of the records) leaves a folder
// that reads as the parts committed before the commit point (or through
// it, after), and that a re-run resumes to the folder of an
// uninterrupted run, byte for byte.
func TestPartCommitCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child per step")
	}
	_, full := goldenManifest(t, "manifest-npy.json")
	want := readDir(t, goldenFolder(t, PartNPY))

	// The steps, from a run that is not stopped.
	var steps []commitStep
	sets := 0
	fsutil.CommitHook = func(step string, i int) error {
		if step == "prepare" && i == 0 {
			sets++
		}
		steps = append(steps, commitStep{sets, step, i})
		return nil
	}
	goldenFolder(t, PartNPY)
	fsutil.CommitHook = nil
	if sets != len(full.Parts) {
		t.Fatalf("%d commits for %d parts", sets, len(full.Parts))
	}
	for _, s := range steps {
		name := fmt.Sprintf("set %d %s %d", s.set, s.step, s.i)
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			killChild(t, dir, s)
			done := s.set - 1 // parts committed
			if s.step == "commit" || s.step == "cleanup" {
				done = s.set
			}
			wantM := wantAfter(full, done)
			if done == 0 {
				wantM = nil
			}
			if done == len(full.Parts) {
				wantM = full
			}
			m, err := ReadManifest(dir)
			if err != nil || !reflect.DeepEqual(m, wantM) {
				t.Fatalf("read after the kill: %+v, %v\nwant %+v", m, err, wantM)
			}
			rec, complete := resumeGolden(t, dir, PartNPY)
			if complete != (done == len(full.Parts)) || (done > 0 && rec != full.Parts[done-1].Records) {
				t.Errorf("resumed after record %d (complete %v), want after part %d", rec, complete, done)
			}
			sameFolder(t, name, dir, want)
		})
	}
}

// killChild runs the crash child on dir, stopped at s, and kills it.
func killChild(t *testing.T, dir string, s commitStep) {
	t.Helper()
	env := fmt.Sprintf("%s=%s\t%d\t%s\t%d", crashChildEnv, dir, s.set, s.step, s.i)
	c, _, _ := childtest.Start(t, env, "STOP", "the step")
	childtest.Kill(c)
}

// TestPartCommitCostConstant: the bytes a part's commit writes do not
// grow with the parts before it. Parts of one document: the first
// commit writes the part's two files, its record and manifest.json's
// head; every later one the same three files of the same sizes (ids of
// one length), the 300th as the 2nd; Finish writes manifest.json
// listing every part, once. (Before part records, commit k wrote a
// manifest of k entries: the sum over a run grew as the square.)
func TestPartCommitCostConstant(t *testing.T) {
	const n = 300
	head := partsHead(1, "")
	dir := t.TempDir()
	type commit struct {
		files []string
		bytes int64
	}
	var commits []commit
	var cur commit
	fsutil.MidWriteHook = func(tmp string) {
		st, err := os.Stat(tmp)
		if err != nil {
			t.Error(err)
			return
		}
		base := strings.TrimPrefix(filepath.Base(tmp), ".")
		base = base[:strings.Index(base, ".tmp-")]
		cur.files = append(cur.files, base)
		cur.bytes += st.Size()
	}
	fsutil.CommitHook = func(step string, _ int) error {
		if step == "cleanup" {
			commits = append(commits, cur)
			cur = commit{}
		}
		return nil
	}
	t.Cleanup(func() { fsutil.MidWriteHook, fsutil.CommitHook = nil, nil })
	w, err := OpenParts(dir, head)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		id := fmt.Sprintf("doc-%06d", i)
		// Input records of one width: the record's bytes do not vary.
		if err := w.Add(int64(100001+i), id, []string{id}, [][]float32{vec(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Finish(); err != nil {
		t.Fatal(err)
	}
	fsutil.MidWriteHook, fsutil.CommitHook = nil, nil
	if len(commits) != n+1 {
		t.Fatalf("%d commits for %d parts and Finish", len(commits), n)
	}
	first, second, last := commits[0], commits[1], commits[n-1]
	if !slices.Equal(first.files, []string{"part-00000.npy", "part-00000.ids.txt", "part-00000.json", ManifestName}) {
		t.Errorf("the first commit wrote %q", first.files)
	}
	for k, c := range commits[1:n] {
		name := partName(k + 1)
		if !slices.Equal(c.files, []string{name + ".npy", name + ".ids.txt", name + ".json"}) || c.bytes != second.bytes {
			t.Fatalf("commit %d wrote %q, %d bytes; the 2nd wrote %d", k+2, c.files, c.bytes, second.bytes)
		}
	}
	fin := commits[n]
	m, err := os.Stat(filepath.Join(dir, ManifestName))
	if err != nil || !slices.Equal(fin.files, []string{ManifestName}) || fin.bytes != m.Size() {
		t.Errorf("Finish wrote %q, %d bytes (%v)", fin.files, fin.bytes, err)
	}
	var total int64
	for _, c := range commits {
		total += c.bytes
	}
	t.Logf("commit 2 and commit %d: %d bytes each (the previous protocol wrote a manifest of %d entries there, ~%d bytes); Finish %d bytes; %d bytes in all",
		n, last.bytes, n, fin.bytes*int64(n-1)/int64(n), fin.bytes, total)
	if total > int64(n)*second.bytes+first.bytes+fin.bytes {
		t.Errorf("%d bytes in all", total)
	}
	if recs, _ := recordIndexes(dir); len(recs) != 0 {
		t.Errorf("records left: %v", recs)
	}
}

// TestReadManifestBound: manifest.json is read within maxManifestBytes
// plus maxEntryBytes for each part in the folder (its .npy or .parquet
// file; bounds lowered here to a few KiB): a complete manifest longer
// than the fixed bound reads when its folder has the parts its length
// calls for, and is refused (fsutil.ErrTooLarge) with one part fewer; a
// part record past its bound is refused.
func TestReadManifestBound(t *testing.T) {
	defer func(a, b int64) { maxManifestBytes, maxEntryBytes = a, b }(maxManifestBytes, maxEntryBytes)
	golden, full := goldenManifest(t, "manifest-npy.json")
	maxManifestBytes, maxEntryBytes = 1<<10, 320 // 2245 bytes: within 1 KiB + 4 parts × 320 B, past 3 parts
	if n := int64(len(golden)); n <= maxManifestBytes || n > maxManifestBytes+4*maxEntryBytes || n <= maxManifestBytes+3*maxEntryBytes {
		t.Fatalf("the golden manifest's %d bytes do not test the bound", n)
	}
	dir := goldenFolder(t, PartNPY)
	if m, err := ReadManifest(dir); err != nil || !reflect.DeepEqual(m, full) {
		t.Errorf("with its 4 parts: %+v, %v", m, err)
	}
	os.Remove(filepath.Join(dir, full.Parts[3].Name+".npy"))
	if m, err := ReadManifest(dir); !errors.Is(err, fsutil.ErrTooLarge) {
		t.Errorf("with 3 of its 4 parts: %+v, %v; want too large", m, err)
	}

	maxManifestBytes, maxEntryBytes = 64<<20, 64<<10
	dir = t.TempDir()
	w, err := OpenParts(dir, goldenHead(PartNPY))
	if err != nil {
		t.Fatal(err)
	}
	feedGolden(t, w, goldenCorpus()[:goldenCut])
	maxManifestBytes = 300
	if m, err := ReadManifest(dir); !errors.Is(err, fsutil.ErrTooLarge) || !strings.Contains(err.Error(), "part-0000") {
		t.Errorf("records past their bound: %+v, %v", m, err)
	}
}
