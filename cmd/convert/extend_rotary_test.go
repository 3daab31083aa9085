package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// rotaryDir copies the rotary fixture testdata/rope/NAME.onnx (a
// ModernBERT trained for 32 tokens) into a folder with a vocab.txt and,
// when config is set, a config.json stating that length.
func rotaryDir(t *testing.T, name string, config bool) (model string, words []string) {
	t.Helper()
	dir := t.TempDir()
	data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "rope", name+".onnx"))
	if err != nil {
		t.Fatal(err)
	}
	model = filepath.Join(dir, "m.onnx")
	if err := os.WriteFile(model, data, 0o644); err != nil {
		t.Fatal(err)
	}
	vocab := []string{"[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"}
	for i := len(vocab); i < 64; i++ {
		w := fmt.Sprintf("w%d", i)
		vocab, words = append(vocab, w), append(words, w)
	}
	if err := os.WriteFile(filepath.Join(dir, "vocab.txt"), []byte(strings.Join(vocab, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if config {
		if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"max_position_embeddings": 32}`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return model, words
}

// TestExtendRotaryCLI: extend-positions scales a rotary model from the
// length its config.json states, and embed then reads texts up to the
// new length in one pass, refusing longer ones by the metadata's limit;
// the exit codes of a length it cannot know and a table method.
func TestExtendRotaryCLI(t *testing.T) {
	for _, form := range []string{"base", "cached_base"} {
		model, words := rotaryDir(t, form, true)
		out := filepath.Join(filepath.Dir(model), "ext.onnx")
		code, stdout, stderr := runCLI("extend-positions", model, "-o", out, "--max-positions", "128")
		if code != exitOK || !strings.Contains(stdout, "rotary positions: 32 → 128 tokens (×4, method ntk)") {
			t.Fatalf("%s: exit %d, %q %q", form, code, stdout, stderr)
		}
		text := func(n int) string {
			s := make([]string, n)
			for i := range s {
				s[i] = words[(i*7)%len(words)]
			}
			return strings.Join(s, " ")
		}
		for _, c := range []struct {
			model string
			words int
			code  int
			msg   string
		}{
			{out, 120, exitOK, "embedded 1 documents"},
			{model, 120, exitBadInput, "admits 32 tokens per pass (config.json beside the model"},
			{model, 120, exitBadInput, "a rotary model reads longer inputs after `convert extend-positions"},
			{out, 130, exitBadInput, "admits 128 tokens per pass (metadata linearize.max_positions 128"},
			{out, 130, exitBadInput, "scale the original again with a larger --max-positions"},
		} {
			vecs := filepath.Join(t.TempDir(), "v.npy")
			code, stdout, stderr := runCLI("embed", c.model, "--text", text(c.words), "--mode", "long", "--backend", "native", "-o", vecs)
			if code != c.code || !strings.Contains(stdout+stderr, c.msg) {
				t.Errorf("%s: embed %s, %d words: exit %d, %q %q; want %d and %q", form, filepath.Base(c.model), c.words, code, stdout, stderr, c.code, c.msg)
			}
		}
	}

	// A conversion grows the positions first, from the same flags.
	model, _ := rotaryDir(t, "base", true)
	lp := filepath.Join(filepath.Dir(model), "lp.onnx")
	if code, stdout, stderr := runCLI("local-pooled", model, "-o", lp, "--max-positions", "128", "--block", "8"); code != exitOK ||
		!strings.Contains(stdout, "rotary positions: 32 → 128 tokens") || !strings.Contains(stdout, "3 converted") {
		t.Errorf("local-pooled --max-positions 128: exit %d, %q %q", code, stdout, stderr)
	}

	bare, _ := rotaryDir(t, "base", false)
	out := filepath.Join(filepath.Dir(bare), "ext.onnx")
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{nil, exitBadInput, "the length the rotary model was trained for is unknown"},
		{[]string{"--trained-length", "32", "--position-method", "copy"}, exitUsage, "--position-method \"copy\": the model has rotary positions"},
		{[]string{"--trained-length", "-1"}, exitUsage, "--trained-length -1"},
		{[]string{"--trained-length", "128"}, exitBadInput, "must exceed the 128 tokens the model was trained for"},
	} {
		code, _, stderr := runCLI(append([]string{"extend-positions", bare, "-o", out, "--max-positions", "128"}, c.args...)...)
		if code != c.code || !strings.Contains(stderr, c.msg) {
			t.Errorf("%v: exit %d, %q; want %d and %q", c.args, code, stderr, c.code, c.msg)
		}
		if _, err := os.Stat(out); err == nil {
			t.Fatalf("%v wrote %s", c.args, out)
		}
	}
	if code, stdout, stderr := runCLI("extend-positions", bare, "-o", out, "--max-positions", "128", "--trained-length", "32", "--position-method", "yarn"); code != exitOK || !strings.Contains(stdout, "method yarn") {
		t.Errorf("--trained-length 32 --position-method yarn: exit %d, %q %q", code, stdout, stderr)
	}
}

// TestInspectPositions: inspect says how long an input a model reads and
// from where, lists a rotary model's embeddings with the blocks each
// rotates, and names the command that reads past the limit; after
// extend-positions the limit is the metadata's.
func TestInspectPositions(t *testing.T) {
	model, _ := rotaryDir(t, "base", true)
	code, out, stderr := runCLI("inspect", model)
	for _, want := range []string{
		"positions:    limit 32 tokens (config.json beside the model",
		"rotary: θ 160000 over 8 dims (blocks 0,2); θ 10000 over 8 dims (blocks 1, sliding windows only)",
		"extend-positions --max-positions N scales the rotary frequencies",
	} {
		if code != exitOK || !strings.Contains(out, want) {
			t.Errorf("exit %d, %q; inspect lacks %q:\n%s", code, stderr, want, out)
		}
	}
	ext := filepath.Join(filepath.Dir(model), "ext.onnx")
	if code, _, stderr := runCLI("extend-positions", model, "-o", ext, "--max-positions", "96"); code != exitOK {
		t.Fatalf("extend-positions: %s", stderr)
	}
	code, out, _ = runCLI("inspect", ext, "--json")
	if code != exitOK || !strings.Contains(out, `"limit": 96`) || !strings.Contains(out, `"kind": "metadata"`) || !strings.Contains(out, `"rotary": [`) {
		t.Errorf("inspect --json of the extended model: exit %d\n%s", code, out)
	}
	code, out, _ = runCLI("inspect", filepath.Join("..", "..", "testdata", "bert-tiny.onnx"))
	if code != exitOK || !strings.Contains(out, "positions:    limit 128 tokens (position table") || strings.Contains(out, "rotary:") {
		t.Errorf("inspect of an absolute-position model: exit %d\n%s", code, out)
	}
}
