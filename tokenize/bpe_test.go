package tokenize

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// bpeCase is one reference encoding written by
// testdata/tokenizers/gen_bpe.py with Hugging Face's tokenizers library.
type bpeCase struct {
	Text        string   `json:"text"`
	IDs         []int64  `json:"ids"`
	Tokens      []string `json:"tokens"`
	ByteOffsets [][2]int `json:"byte_offsets"`
}

var bpeDir = filepath.Join("..", "testdata", "tokenizers")

func bpeCases(t testing.TB) map[string][]bpeCase { return referenceCases(t, "bpe_cases.json") }

// referenceCases reads a reference case file of testdata/tokenizers.
func referenceCases(t testing.TB, file string) map[string][]bpeCase {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(bpeDir, file))
	if err != nil {
		t.Fatal(err)
	}
	var cases map[string][]bpeCase
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	return cases
}

// refused checks that tokenizer.json data, changed by edit, is refused
// with an error naming the file and want.
func refused(t *testing.T, data []byte, edit func(j map[string]any), want string) {
	t.Helper()
	var j map[string]any
	if err := json.Unmarshal(data, &j); err != nil {
		t.Fatal(err)
	}
	edit(j)
	out, _ := json.Marshal(j)
	p := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := os.WriteFile(p, out, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(p)
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), p) {
		t.Errorf("err %v, want one naming %q and the file", err, want)
	}
}

// TestBPEReference: the byte-level BPE tokenizers in ModernBERT's form
// (TemplateProcessing, no prefix space, an lstrip [MASK] and non-special
// added tokens) and RoBERTa's (RobertaProcessing, add_prefix_space) give
// the ids and tokens of the reference library on its edge cases and on
// held-out paragraphs the tokenizers were not trained on.
func TestBPEReference(t *testing.T) {
	for name, cases := range bpeCases(t) {
		t.Run(name, func(t *testing.T) {
			tok, err := Load(filepath.Join(bpeDir, name))
			if err != nil {
				t.Fatal(err)
			}
			if len(cases) < 100 {
				t.Fatalf("%d cases", len(cases))
			}
			for _, c := range cases {
				got := tok.Encode(c.Text, 0)
				if !reflect.DeepEqual(got, c.IDs) {
					t.Errorf("%q: ids %v, the reference %v", c.Text, got, c.IDs)
					continue
				}
				if toks := tok.Tokenize(c.Text); !reflect.DeepEqual(toks, c.Tokens[1:len(c.Tokens)-1]) && len(c.Tokens) > 2 {
					t.Errorf("%q: tokens %q, the reference %q", c.Text, toks, c.Tokens)
				}
			}
		})
	}
}

func loadBPETest(t testing.TB, name string) *Tokenizer {
	t.Helper()
	tok, err := Load(filepath.Join(bpeDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestBPESpans: a BPE tokenizer's spans are the text's whitespace-
// delimited words, their pieces sum to the text's tokens, the first k
// spans hold its first tokens (each token counted with the word its
// pre-token's first non-space byte is in), and SpansLimit(n) is Spans
// cut after the span that passes n.
func TestBPESpans(t *testing.T) {
	for _, name := range []string{"modernbert-bpe", "roberta-bpe"} {
		tok := loadBPETest(t, name)
		for _, c := range bpeCases(t)[name] {
			text := c.Text
			spans := tok.Spans(text)
			total := 0
			prevEnd := 0
			for _, s := range spans {
				total += s.Pieces
				if s.Start < prevEnd || s.End <= s.Start && len(text) > 0 || s.End > len(text) {
					t.Fatalf("%s %q: span %+v after %d", name, text, s, prevEnd)
				}
				for _, r := range text[s.Start:s.End] {
					if isSpace(r) && len(spans) > 1 {
						t.Fatalf("%s %q: span %+v holds whitespace", name, text, s)
					}
				}
				prevEnd = s.End
			}
			if want := len(tok.IDs(text)); total != want {
				t.Fatalf("%s %q: spans hold %d pieces, the text has %d tokens", name, text, total, want)
			}
			for n := 1; n <= 12; n++ {
				got := tok.SpansLimit(text, n)
				sum := 0
				for i, s := range got {
					sum += s.Pieces
					if s.Start != spans[i].Start || s.End != spans[i].End || i < len(got)-1 && s.Pieces != spans[i].Pieces {
						t.Fatalf("%s %q: SpansLimit(%d)[%d] = %+v, Spans gives %+v", name, text, n, i, s, spans[i])
					}
				}
				if len(got) < len(spans) && sum <= n {
					t.Fatalf("%s %q: SpansLimit(%d) stopped at %d pieces", name, text, n, sum)
				}
			}
		}
	}
}

// TestBPEMergesAsStrings: merges written "a b" (the older tokenizer.json
// form) read as the ["a", "b"] pairs do.
func TestBPEMergesAsStrings(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(bpeDir, "modernbert-bpe", "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	var j map[string]any
	if err := json.Unmarshal(data, &j); err != nil {
		t.Fatal(err)
	}
	model := j["model"].(map[string]any)
	merges := model["merges"].([]any)
	for i, m := range merges {
		p := m.([]any)
		merges[i] = p[0].(string) + " " + p[1].(string)
	}
	out, _ := json.Marshal(j)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), out, 0o644); err != nil {
		t.Fatal(err)
	}
	old, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	cases := bpeCases(t)["modernbert-bpe"]
	for _, c := range cases {
		if got := old.Encode(c.Text, 0); !reflect.DeepEqual(got, c.IDs) {
			t.Fatalf("%q: %v, want %v", c.Text, got, c.IDs)
		}
	}
}

// TestBPERefuses: forms the tokenizer does not implement are refused by
// name, never tokenized differently from the reference.
func TestBPERefuses(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(bpeDir, "roberta-bpe", "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, want string
		edit       func(j map[string]any)
	}{
		{"normalizer", "normalizer", func(j map[string]any) { j["normalizer"] = map[string]any{"type": "NFC"} }},
		{"metaspace", "ByteLevel pre-tokenizer", func(j map[string]any) { j["pre_tokenizer"] = map[string]any{"type": "Metaspace"} }},
		{"no regex", "use_regex", func(j map[string]any) { j["pre_tokenizer"].(map[string]any)["use_regex"] = false }},
		{"byte fallback", "byte_fallback", func(j map[string]any) { j["model"].(map[string]any)["byte_fallback"] = true }},
		{"dropout", "dropout", func(j map[string]any) { j["model"].(map[string]any)["dropout"] = 0.1 }},
		{"suffix", "end_of_word_suffix", func(j map[string]any) { j["model"].(map[string]any)["end_of_word_suffix"] = "</w>" }},
		{"no processor", "post_processor", func(j map[string]any) { j["post_processor"] = nil }},
		{"template", "SPECIAL $A SPECIAL", func(j map[string]any) {
			j["post_processor"] = map[string]any{"type": "TemplateProcessing", "single": []any{map[string]any{"Sequence": map[string]any{"id": "A"}}}}
		}},
		{"bad merge", "merge 0", func(j map[string]any) { j["model"].(map[string]any)["merges"].([]any)[0] = []any{"Ġ", "not-a-token"} }},
		{"single word", "single_word", func(j map[string]any) { j["added_tokens"].([]any)[4].(map[string]any)["single_word"] = true }},
	} {
		t.Run(tc.name, func(t *testing.T) { refused(t, data, tc.edit, tc.want) })
	}
}

// TestBPELimit: a 64 MiB text, of words or one run of letters, costs what
// its first tokens do with a limit: IDsLimit allocates no more than a
// megabyte (a pre-token past maxPreToken bytes is merged in pieces), and
// the pieces of a long run are what merging its pieces one by one gives.
func TestBPELimit(t *testing.T) {
	tok := loadBPETest(t, "modernbert-bpe")
	huge := map[string]string{
		"words":    strings.Repeat("unaffable café, 中文 ", (64<<20)/24),
		"one word": strings.Repeat("a", 64<<20),
	}
	for name, text := range huge {
		n, alloc, took := measure(func() int { return len(tok.IDsLimit(text, 128)) })
		if n != 128 || alloc > 1<<20 || took > 5*time.Second {
			t.Errorf("IDsLimit(128) of 64 MiB of %s: %d tokens, %d bytes allocated, %v; want 128, at most 1 MiB, 5 s", name, n, alloc, took)
		}
	}
	long := strings.Repeat("ab", maxPreToken) // two pieces of maxPreToken bytes
	want := append(tok.IDs(long[:maxPreToken]), tok.IDs(long[maxPreToken:])...)
	if got := tok.IDs(long); !reflect.DeepEqual(got, want) {
		t.Errorf("a run of %d letters: %d tokens, its two halves %d", len(long), len(got), len(want))
	}
}

// FuzzBPE checks that any text (valid UTF-8 or not) tokenizes without
// panicking into known ids framed by [CLS] and [SEP], that its spans hold
// every token, and that IDsLimit is a prefix of IDs.
func FuzzBPE(f *testing.F) {
	for _, s := range []string{"", "Hello, world!", "don't  stop\t\n", "中文 café [MASK]", "\x00\xff\xfe", "a\u0301\u0301", "  a    b |||EMAIL_ADDRESS|||", "'s's '"} {
		f.Add(s)
	}
	tok := loadBPETest(f, "modernbert-bpe")
	f.Fuzz(func(t *testing.T, s string) { checkInvariants(t, tok, s) })
}

// checkInvariants checks what holds for any text: its ids are framed by
// the tokenizer's [CLS] and [SEP] and are all known, its spans hold every
// token, and IDsLimit(3) is the first three of its ids.
func checkInvariants(t *testing.T, tok *Tokenizer, s string) {
	ids := tok.Encode(s, 0)
	if len(ids) < 2 || ids[0] != tok.cls || ids[len(ids)-1] != tok.sep {
		t.Fatalf("%q: not framed: %v", s, ids)
	}
	for _, id := range ids {
		if tok.Token(id) == "" {
			t.Fatalf("%q: unknown id %d", s, id)
		}
	}
	total := 0
	for _, sp := range tok.Spans(s) {
		total += sp.Pieces
	}
	if total != len(ids)-2 {
		t.Fatalf("%q: spans hold %d pieces of %d tokens", s, total, len(ids)-2)
	}
	if got, want := tok.IDsLimit(s, 3), ids[1:1+min(3, len(ids)-2)]; !slices.Equal(got, want) {
		t.Fatalf("%q: IDsLimit(3) = %v, IDs %v", s, got, ids[1:len(ids)-1])
	}
}
