package main

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/linearize/linearize/corpus"
)

// TestEmbedRefusesBadText: a JSON line is exactly one object (trailing
// `}}}`, a second object or an array are refused with the line and the
// byte offset); an empty document and one that is not UTF-8 are refused
// by default, named by id with the offset of the first bad byte, and
// skipped and counted with --skip-bad-docs; a line over the bound names
// the file, the line and the bound.
func TestEmbedRefusesBadText(t *testing.T) {
	path, dir := embedModel(t)
	out := filepath.Join(dir, "out.npy")
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	trailing := write("trailing.jsonl", `{"id": "a", "text": "the man"}`+"\n"+`{"id": "b", "text": "the horse"} }}}`+"\n")
	two := write("two.jsonl", `{"id": "a", "text": "the man"} {"id": "b", "text": "food"}`+"\n")
	array := write("array.jsonl", `["the man"]`+"\n")
	mixed := write("mixed.jsonl", `{"id": "ok", "text": "the man is eating"}`+"\n"+`{"id": "blank", "text": "  \t "}`+"\n"+
		`{"id": "latin1", "text": "the caf`+"\xe9"+` food"}`+"\n"+`{"id": "ctl", "text": "\u0001\u0002"}`+"\n")
	docs := filepath.Join(dir, "docs")
	os.Mkdir(docs, 0o755)
	os.WriteFile(filepath.Join(docs, "a.txt"), []byte("the man"), 0o644)
	os.WriteFile(filepath.Join(docs, "b.txt"), []byte("na\xefve horse"), 0o644)
	lines := write("lines.txt", "the man\nfood \xff\n")
	for _, c := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"--jsonl", trailing}, exitBadInput, []string{trailing + ":2: byte 33:", "}}}", "exactly one object"}},
		{[]string{"--jsonl", two}, exitBadInput, []string{two + ":1: byte 31:", "exactly one object"}},
		{[]string{"--jsonl", array}, exitBadInput, []string{array + ":1: byte 0:", "one JSON object"}},
		{[]string{"--jsonl", mixed}, exitBadInput, []string{"3 of 4 documents cannot be embedded", "--skip-bad-docs",
			"document blank: empty", "document latin1: invalid UTF-8: byte 33 of line 3", "document ctl: empty"}},
		{[]string{"--docs", docs}, exitBadInput, []string{"document b.txt: invalid UTF-8: byte 2 of the file"}},
		{[]string{"--text-file", lines}, exitBadInput, []string{"document 2: invalid UTF-8: byte 5 of line 2"}},
		{[]string{"--text", "the man", "--text", " "}, exitBadInput, []string{"document text-2: empty"}},
		{[]string{"--jsonl", mixed, "--skip-bad-docs"}, exitOK, []string{"embedded 1 documents, skipped 3 bad (2 empty, 1 invalid UTF-8)"}},
		{[]string{"--text", " ", "--skip-bad-docs"}, exitBadInput, []string{"all 1 documents are bad (1 empty)"}},
	} {
		args := append([]string{"embed", path, "--backend", "native", "-o", out}, c.args...)
		code, stdout, stderr := runCLI(args...)
		for _, w := range c.want {
			if code != c.code || !strings.Contains(stdout+stderr, w) {
				t.Errorf("%v: exit %d, %q %q; want exit %d and %q", c.args, code, stdout, stderr, c.code, w)
			}
		}
	}
	if ids, err := os.ReadFile(filepath.Join(dir, "out.ids.txt")); err != nil || string(ids) != "ok\n" {
		t.Errorf("ids after --skip-bad-docs: %q, %v; want only ok", ids, err)
	}

	// A line over the bound: the file, the line and the bound, not
	// bufio's "token too long".
	defer func(o corpus.Options) { readBounds = o }(readBounds)
	readBounds.MaxDoc = 100
	long := write("long.jsonl", `{"id": 1, "text": "the"}`+"\n"+`{"id": 2, "text": "`+strings.Repeat("the ", 50)+`"}`+"\n")
	code, _, stderr := runCLI("embed", path, "--backend", "native", "-o", out, "--jsonl", long)
	if code != exitBadInput || !strings.Contains(stderr, long+":2: line longer than 100 bytes") || strings.Contains(stderr, "token too long") {
		t.Errorf("a line of 219 bytes over a bound of 100: exit %d, %q", code, stderr)
	}
}

// TestEmbedSaysItWaitsForAFIFOWriter: a --text-file that is a FIFO with
// no writer yet makes embed say on stderr that it waits for one; once a
// writer comes, the texts are embedded.
func TestEmbedSaysItWaitsForAFIFOWriter(t *testing.T) {
	path, dir := embedModel(t)
	fifo := filepath.Join(dir, "texts.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	var code int
	var stdout, stderr string
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		code, stdout, stderr = runCLI("embed", path, "--backend", "native", "-o", filepath.Join(dir, "out.npy"), "--text-file", fifo)
	}()
	time.Sleep(1500 * time.Millisecond) // past the notice's delay
	if err := os.WriteFile(fifo, []byte("the man\nhorses\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if code != exitOK || !strings.Contains(stderr, "waiting for a writer on the named pipe "+fifo) || !strings.Contains(stdout, "embedded 2 documents") {
		t.Errorf("embed --text-file FIFO: exit %d, %q, %q", code, stdout, stderr)
	}
}

// TestInputsBoundedByMemory: /dev/zero as a model, as an --input, as a
// --text-file or as calibration texts is refused once past its bound,
// and the bound follows the memory the process may use (here
// $GOMEMLIMIT of 64 MiB: half of it), with a message naming the file and
// the bound; before, a model was read to 2 GiB (4.5 GB resident).
func TestInputsBoundedByMemory(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip("no /dev/zero")
	}
	t.Setenv("GOMEMLIMIT", "64MiB")
	path, dir := embedModel(t)
	fifo := filepath.Join(dir, "model.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	go func() { // a FIFO fed from /dev/zero
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		defer w.Close()
		zero := make([]byte, 1<<20)
		for {
			if _, err := w.Write(zero); err != nil {
				return
			}
		}
	}()
	bound := "33554432 bytes, half the memory the process may use"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"inspect", "/dev/zero"}, "/dev/zero: longer than the bound on this input, " + bound},
		{[]string{"inspect", fifo}, fifo + ": longer than the bound on this input, " + bound},
		{[]string{"run", path, "--backend", "native", "--input", "input_ids=/dev/zero"}, "/dev/zero: longer than the bound on this input, " + bound},
		{[]string{"embed", path, "--backend", "native", "-o", filepath.Join(dir, "o.npy"), "--jsonl", "/dev/zero"}, "/dev/zero: longer than the bound on this input, " + bound},
		{[]string{"performer", path, "-o", filepath.Join(dir, "p.onnx"), "--calibration", "/dev/zero"}, "/dev/zero: longer than the bound on this input, " + bound},
		{[]string{"hedgehog", path, "-o", filepath.Join(dir, "h.onnx"), "--calibration", "/dev/zero"}, "/dev/zero: longer than the bound on this input, " + bound},
	} {
		code, _, stderr := runCLI(c.args...)
		if code != exitBadInput || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, %q; want exit 2 and %q", c.args, code, stderr, c.want)
		}
	}
}
