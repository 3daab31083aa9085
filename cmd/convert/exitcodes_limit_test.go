package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPastTheModelsLimitIsBadInput: every command that runs a model on
// texts or inputs of a given length refuses a length beyond the model's
// limit (here the tiny BERT's 128-row position table) the same way: exit
// 2 (a model the flags do not fit, docs/reliability.md), one line naming
// the limit, nothing on stdout, no output written. One kind of fault, one
// exit code, whichever flag sets the length (--seq-len, a text, --window,
// --calibration-max-len).
func TestPastTheModelsLimitIsBadInput(t *testing.T) {
	model, dir := feedModel(t) // the vocabulary holds "the" and "man"
	long := strings.Repeat("the man ", 200)
	texts := filepath.Join(dir, "long.txt")
	jsonl := filepath.Join(dir, "long.jsonl")
	if err := os.WriteFile(texts, []byte(long+"\n"+long+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(jsonl, []byte(`{"id": "a", "text": "`+long+`"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.onnx")
	vecs := filepath.Join(dir, "v.npy")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", model, "--random-inputs", "--seq-len", "1000"}, "128 positions"},
		{[]string{"run", model, "--text-file", texts, "--seq-len", "1000"}, "128 positions"},
		{[]string{"run", model, "--text-file", texts, "--max-len", "1000"}, "128 positions"},
		{[]string{"validate", model, "--random-inputs", "--seq-len", "1000"}, "128 positions"},
		{[]string{"compare", model, model, "--random-inputs", "--seq-len", "1000"}, "128 positions"},
		{[]string{"compare-backends", model, "--random-inputs", "--seq-len", "1000"}, "128 positions"},
		{[]string{"finetune", model, model, "-o", out, "--random-inputs", "--seq-len", "1000"}, "128 positions"},
		{[]string{"embed", model, "--jsonl", jsonl, "--window", "1000", "-o", vecs}, "128 tokens"},
		{[]string{"hedgehog", model, "-o", out, "--calibration", texts, "--seq-len", "1000"}, "128 tokens"},
		{[]string{"performer", model, "-o", out, "--calibration", texts, "--calibration-max-len", "1000"}, "128 positions"},
	} {
		code, stdout, stderr := runCLI(c.args...)
		name := strings.Join(c.args[:1], " ")
		if code != exitBadInput || !strings.Contains(stderr, c.want) {
			t.Errorf("%s: exit %d, stderr %q; want %d naming %q", strings.Join(c.args, " "), code, stderr, exitBadInput, c.want)
		}
		if stdout != "" || strings.Count(strings.TrimSuffix(stderr, "\n"), "\n") != 0 {
			t.Errorf("%s: stdout %q, stderr %q: want nothing on stdout and one line", name, stdout, stderr)
		}
		for _, o := range []string{out, vecs} {
			if _, err := os.Lstat(o); err == nil {
				t.Errorf("%s wrote %s", name, o)
				os.Remove(o)
			}
		}
	}
}
