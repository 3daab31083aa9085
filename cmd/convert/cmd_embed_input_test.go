package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/embed"
)

// TestEmbedRefusesLoneSurrogates: a JSON line whose text (or id) holds
// an escaped lone surrogate, which encoding/json would read as U+FFFD
// without a word, is refused as invalid UTF-8 is, naming the document
// and the byte offset, or with --skip-bad-docs skipped and counted
// with the invalid UTF-8; a surrogate pair is a character and embeds.
func TestEmbedRefusesLoneSurrogates(t *testing.T) {
	path, dir := embedModel(t)
	in := filepath.Join(dir, "docs.jsonl")
	lines := `{"id": "ok", "text": "the man \ud83d\ude00"}` + "\n" +
		`{"id": "lone", "text": "the man \ud800 food"}` + "\n" +
		`{"id": "low", "text": "\udc00the horse"}` + "\n" +
		`{"id": "latin1", "text": "the caf` + "\xe9" + ` \ud800"}` + "\n"
	if err := os.WriteFile(in, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.npy")
	for _, c := range []struct {
		args []string
		code int
		want []string
	}{
		{nil, exitBadInput, []string{"3 of 4 documents cannot be embedded", "--skip-bad-docs",
			`document lone: invalid UTF-8: byte 32 of line 2 is \ud800, an escaped lone surrogate`,
			`document low: invalid UTF-8: byte 23 of line 3 is \udc00, an escaped lone surrogate`,
			"document latin1: invalid UTF-8: byte 33 of line 4 is not UTF-8"}},
		{[]string{"--skip-bad-docs"}, exitOK, []string{"embedded 1 documents, skipped 3 bad (3 invalid UTF-8)"}},
	} {
		code, stdout, stderr := runCLI(append([]string{"embed", path, "--backend", "native", "--jsonl", in, "-o", out}, c.args...)...)
		for _, w := range c.want {
			if code != c.code || !strings.Contains(stdout+stderr, w) {
				t.Errorf("%v: exit %d, %q %q; want exit %d and %q", c.args, code, stdout, stderr, c.code, w)
			}
		}
	}
	if ids, err := os.ReadFile(filepath.Join(dir, "out.ids.txt")); err != nil || string(ids) != "ok\n" {
		t.Errorf("ids after --skip-bad-docs: %q, %v; want only ok", ids, err)
	}
}

// TestEmbedRefusesDuplicateIDs: an id used twice in a --jsonl file or on
// stdin is refused naming both lines, exit 2 (corpus's TestDuplicateIDs
// checks how the lines are found).
func TestEmbedRefusesDuplicateIDs(t *testing.T) {
	path, dir := embedModel(t)
	in := filepath.Join(dir, "docs.jsonl")
	lines := `{"id": "a", "text": "the man"}` + "\n" + `{"id": 7, "text": "horses"}` + "\n\n" +
		`{"id": "b", "text": "food"}` + "\n" + `{"id": "7", "text": "the food"}` + "\n"
	if err := os.WriteFile(in, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.npy")
	want := in + `:5: id "7" was already used on line 2`
	if code, _, stderr := runCLI("embed", path, "--backend", "native", "--jsonl", in, "-o", out); code != exitBadInput || !strings.Contains(stderr, want) {
		t.Errorf("file: exit %d, %q; want %q", code, stderr, want)
	}
	f, err := os.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	stdin := os.Stdin
	os.Stdin = f
	code, _, stderr := runCLI("embed", path, "--backend", "native", "--jsonl", "-", "-o", out)
	os.Stdin = stdin
	if want := `-:5: id "7" was already used on line 2`; code != exitBadInput || !strings.Contains(stderr, want) {
		t.Errorf("stdin: exit %d, %q; want %q", code, stderr, want)
	}
}

// TestEmbedFlushesRunsOfBadDocs: a long run of bad documents skipped
// with --skip-bad-docs is flushed every few batches' worth (memory holds
// a bounded number of them, without their texts), and the parts count
// every skipped one.
func TestEmbedFlushesRunsOfBadDocs(t *testing.T) {
	path, dir := embedModel(t)
	var b strings.Builder
	for i := 1; i <= 100; i++ {
		fmt.Fprintf(&b, "{\"id\": \"blank%d\", \"text\": \"   \"}\n", i)
	}
	b.WriteString(`{"id": "a", "text": "the man"}` + "\n" + `{"id": "b", "text": "horses"}` + "\n" + `{"id": "c", "text": "food"}` + "\n")
	in := filepath.Join(dir, "docs.jsonl")
	if err := os.WriteFile(in, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "parts")
	code, stdout, stderr := runCLI("embed", path, "--backend", "native", "--jsonl", in, "-o", out+"/", "--skip-bad-docs", "--batch", "1", "--part-size", "2")
	if code != exitOK || !strings.Contains(stdout, "embedded 3 documents, skipped 100 bad (100 empty)") {
		t.Fatalf("exit %d: %s %s", code, stdout, stderr)
	}
	// Batch 1 is flushed at 8 documents (or a part's 2), a run of bad
	// ones at 32.
	var flushes []string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "embed: batch ") {
			flushes = append(flushes, l[strings.Index(l, ": documents")+2:strings.Index(l, " (")])
		}
	}
	want := "[documents 1–32, 0 embedded documents 33–64, 0 embedded documents 65–96, 0 embedded documents 97–102, 2 embedded documents 103–103, 3 embedded]"
	if fmt.Sprint(flushes) != want {
		t.Errorf("flushes %v, want %s", flushes, want)
	}
	m, err := embed.ReadManifest(out)
	if err != nil || m == nil || m.SkippedBad != 100 || m.Documents != 3 || len(m.Parts) != 2 || m.Parts[0].SkippedBad != 100 {
		t.Errorf("manifest %+v, %v", m, err)
	}
}
