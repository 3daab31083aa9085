package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/infer/infertest"
	"github.com/linearize/linearize/onnx"
)

// TestRunRefusesBadTokenData: ids and a mask of different lengths, an id
// past bert-tiny's 1000-word vocabulary and a token type past its 2 types
// are input errors (exit 2, one line naming the input), found before
// either backend runs; the same inputs within the tables run (exit 0).
func TestRunRefusesBadTokenData(t *testing.T) {
	model := filepath.Join("..", "..", "testdata", "bert-tiny.onnx")
	dir := t.TempDir()
	file := func(name string, n int, v int64) string {
		vals := make([]int64, n)
		for i := range vals {
			vals[i] = v
		}
		p := filepath.Join(dir, name+".npy")
		if err := onnx.WriteNPY(p, onnx.NewInt64([]int{1, n}, vals)); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ids8, mask8, types8 := file("ids8", 8, 999), file("mask8", 8, 1), file("types8", 8, 1)
	cases := []struct {
		name               string
		ids, mask, types   string
		code               int
		input, alsoInWords string
	}{
		{"within the tables", ids8, mask8, types8, exitOK, "", ""},
		{"ids of 20, mask of 16", file("ids20", 20, 1), file("mask16", 16, 1), file("types20", 20, 0), exitBadInput, "attention_mask", "input_ids"},
		{"id past the vocabulary", file("ids1000", 8, 1000), mask8, types8, exitBadInput, "input_ids", "token id 1000"},
		{"token type past the table", ids8, mask8, file("types2", 8, 2), exitBadInput, "token_type_ids", "token type 2"},
	}
	for _, backend := range []string{"native", "ort"} {
		if backend == "ort" && !infertest.ORT(t) {
			continue
		}
		for _, c := range cases {
			code, _, stderr := safeRun(t, "run", model, "--backend", backend,
				"--input", "input_ids="+c.ids, "--input", "attention_mask="+c.mask, "--input", "token_type_ids="+c.types)
			if code != c.code {
				t.Errorf("%s, %s: exit %d, want %d; stderr %q", backend, c.name, code, c.code, stderr)
				continue
			}
			if c.code == exitOK {
				continue
			}
			if !strings.Contains(stderr, "--input "+c.input) || !strings.Contains(stderr, c.alsoInWords) || strings.Count(strings.TrimSuffix(stderr, "\n"), "\n") != 0 {
				t.Errorf("%s, %s: message %q should be one line naming --input %s and %q", backend, c.name, stderr, c.input, c.alsoInWords)
			}
		}
	}
}

// TestFullyMaskedNote: the note names exactly the batch rows whose mask is
// all zeros, and is empty when there are none or no mask.
func TestFullyMaskedNote(t *testing.T) {
	cases := []struct {
		batch, seq int
		mask       []int64
		want       string // "" no note, else the rows named
	}{
		{2, 3, nil, ""},
		{2, 3, []int64{1, 1, 0, 1, 0, 0}, ""},
		{2, 3, []int64{1, 1, 0, 0, 0, 0}, "batch row 1 has"},
		{3, 2, []int64{0, 0, 1, 0, 0, 0}, "batch row 0, 2 has"},
		{2, 3, []int64{0, 0, 0}, ""}, // a mask that does not fit the layout
	}
	for _, c := range cases {
		got := fullyMaskedNote(&infer.Feed{Batch: c.batch, SeqLen: c.seq, Mask: c.mask})
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("mask %v (%d × %d): note %q, want one naming %q", c.mask, c.batch, c.seq, got, c.want)
		}
	}
}
