package tokenize

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func unigramCases(t testing.TB) map[string][]bpeCase {
	return referenceCases(t, "unigram_cases.json")
}

// TestUnigramReference: SentencePiece Unigram tokenizers in XLM-RoBERTa's
// form (SentencePiece's precompiled normaliser, Metaspace, <s> $A </s>),
// with the replacement written before every stretch of text or only the
// first, give the ids of the reference library on its edge cases
// (compatibility forms, combining sequences, unknown characters, added
// tokens inside text, whitespace of every kind) and on held-out text, and
// its tokens where no character is unknown.
func TestUnigramReference(t *testing.T) {
	for name, cases := range unigramCases(t) {
		t.Run(name, func(t *testing.T) {
			tok, err := Load(filepath.Join(bpeDir, name))
			if err != nil {
				t.Fatal(err)
			}
			if len(cases) < 60 {
				t.Fatalf("%d cases", len(cases))
			}
			unk, _ := tok.ID(tok.Options().Unknown)
			for _, c := range cases {
				if got := tok.Encode(c.Text, 0); !reflect.DeepEqual(got, c.IDs) {
					t.Errorf("%q: ids %v, the reference %v (%q)", c.Text, got, c.IDs, c.Tokens)
					continue
				}
				// The reference writes an unknown token as the text it
				// stands for, this tokenizer as <unk>: tokens are compared
				// where there is none.
				if !slices.Contains(c.IDs, unk) {
					if got := tok.Tokenize(c.Text); len(c.Tokens) > 2 && !reflect.DeepEqual(got, c.Tokens[1:len(c.Tokens)-1]) {
						t.Errorf("%q: tokens %q, the reference %q", c.Text, got, c.Tokens)
					}
				}
			}
		})
	}
}

// TestUnigramSpans: a Unigram tokenizer's spans are words (or added
// tokens), their pieces sum to the text's tokens, and SpansLimit(n) is
// Spans cut after the span that passes n.
func TestUnigramSpans(t *testing.T) {
	for name, cases := range unigramCases(t) {
		tok, err := Load(filepath.Join(bpeDir, name))
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cases {
			text := c.Text
			spans := tok.Spans(text)
			total, prevEnd := 0, 0
			for _, s := range spans {
				total += s.Pieces
				if s.Start < prevEnd || s.End > len(text) || s.End < s.Start {
					t.Fatalf("%s %q: span %+v after %d", name, text, s, prevEnd)
				}
				prevEnd = s.End
			}
			if want := len(tok.IDs(text)); total != want {
				t.Fatalf("%s %q: spans hold %d pieces, the text has %d tokens (%+v)", name, text, total, want, spans)
			}
			for n := 1; n <= 8; n++ {
				got := tok.SpansLimit(text, n)
				for i, s := range got {
					if s.Start != spans[i].Start || s.End != spans[i].End || i < len(got)-1 && s.Pieces != spans[i].Pieces {
						t.Fatalf("%s %q: SpansLimit(%d)[%d] = %+v, Spans gives %+v", name, text, n, i, s, spans[i])
					}
				}
			}
		}
	}
}

// TestUnigramLimit: with a limit, a 64 MiB text costs what its first
// tokens do, whether it has spaces or is one run of letters (normalised
// and split in parts of at most maxStretch bytes).
func TestUnigramLimit(t *testing.T) {
	tok, err := Load(filepath.Join(bpeDir, "xlmr-unigram"))
	if err != nil {
		t.Fatal(err)
	}
	huge := map[string]string{
		"words":    strings.Repeat("unaffable café, 中文 ", (64<<20)/24),
		"one word": strings.Repeat("a", 64<<20),
	}
	for name, text := range huge {
		n, alloc, took := measure(func() int { return len(tok.IDsLimit(text, 128)) })
		if n != 128 || alloc > 2<<20 || took > 5*time.Second {
			t.Errorf("IDsLimit(128) of 64 MiB of %s: %d tokens, %d bytes allocated, %v; want 128, at most 2 MiB, 5 s", name, n, alloc, took)
		}
	}
}

// FuzzUnigram checks that any text tokenizes without panicking into known
// ids framed by <s> and </s>, that its spans hold every token, and that
// IDsLimit is a prefix of IDs.
func FuzzUnigram(f *testing.F) {
	for _, s := range []string{"", "Hello, world!", "don't  stop\t\n", "中文 café <mask>", "\x00\xff\xfe", "e\u0301\u0302", "ＡＢＣ ﬁ ①", "👩‍👩‍👧 𠀋"} {
		f.Add(s)
	}
	tok, err := Load(filepath.Join(bpeDir, "xlmr-unigram"))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string) { checkInvariants(t, tok, s) })
}

// TestUnigramRefuses: forms the Unigram tokenizer does not implement, and
// broken files, are refused naming the file and what is wrong.
func TestUnigramRefuses(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(bpeDir, "xlmr-unigram-converter", "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, want string
		edit       func(j map[string]any)
	}{
		{"byte fallback", "byte_fallback", func(j map[string]any) { j["model"].(map[string]any)["byte_fallback"] = true }},
		{"no unk", "unk_id", func(j map[string]any) { delete(j["model"].(map[string]any), "unk_id") }},
		{"lowercase", `normalizer "Lowercase"`, func(j map[string]any) { j["normalizer"] = map[string]any{"type": "Lowercase"} }},
		{"charsmap", "precompiled_charsmap", func(j map[string]any) {
			j["normalizer"] = map[string]any{"type": "Precompiled", "precompiled_charsmap": "AAAA"}
		}},
		{"regex", "pattern", func(j map[string]any) {
			j["normalizer"] = map[string]any{"type": "Replace", "pattern": map[string]any{"Regex": "(?<=a)b"}, "content": "c"}
		}},
		{"byte level", "only Metaspace", func(j map[string]any) { j["pre_tokenizer"] = map[string]any{"type": "ByteLevel"} }},
		{"prepend", "prepend_scheme", func(j map[string]any) { j["pre_tokenizer"].(map[string]any)["prepend_scheme"] = "sometimes" }},
		{"vocab entry", "vocabulary entry 5", func(j map[string]any) { j["model"].(map[string]any)["vocab"].([]any)[5] = []any{"x", "y"} }},
		{"no processor", "post_processor", func(j map[string]any) { j["post_processor"] = nil }},
	} {
		t.Run(tc.name, func(t *testing.T) { refused(t, data, tc.edit, tc.want) })
	}
}

// TestUnigramPartsMatchWhole: a text normalised and split in parts (cut
// where safeCut allows) gives the tokens of the text read whole, and
// spans that hold them all, for every variant, on English, Chinese with line breaks and no
// spaces, and whitespace the normaliser maps to spaces or removes.
func TestUnigramPartsMatchWhole(t *testing.T) {
	texts := []string{
		strings.Repeat("The quick brown fox, jumps over the lazy dog.  Twice\tover. ", 40),
		strings.Repeat("中文的句子没有空格。\n日本語の文章もそうです。\r\n", 60),
		strings.Repeat("a \u200b b\u3000c\u00a0d ｅ ﬁ  ①  ", 80),
		strings.Repeat("x", 40) + " " + strings.Repeat("中", 15) + "\n" + strings.Repeat("y ", 100),
	}
	defer func(n int) { maxStretch = n }(maxStretch)
	for name := range unigramCases(t) {
		tok, err := Load(filepath.Join(bpeDir, name))
		if err != nil {
			t.Fatal(err)
		}
		for _, text := range texts {
			maxStretch = 1 << 30
			want, wantSpans := tok.IDs(text), tok.Spans(text)
			// Every run without a place to cut is shorter than n/2, so
			// that the parts need no cut inside a word.
			for _, n := range []int{100, 250, 1000} {
				maxStretch = n
				if got := tok.IDs(text); !reflect.DeepEqual(got, want) {
					t.Fatalf("%s, parts of %d bytes, %.40q…: %d tokens, the whole text %d", name, n, text, len(got), len(want))
				}
				total := 0
				for _, s := range tok.Spans(text) {
					total += s.Pieces
				}
				if total != len(want) {
					t.Fatalf("%s, parts of %d bytes, %.40q…: spans hold %d of %d tokens (whole: %d spans)", name, n, text, total, len(want), len(wantSpans))
				}
			}
		}
	}
}

// TestUnigramSpansLongRun: a run with nowhere safe to cut, longer than a
// part, is cut at the same character clusters by Spans as by IDs, so the
// spans hold every token (a cut inside a character, as nextCut once made,
// counts the pieces of broken bytes).
func TestUnigramSpansLongRun(t *testing.T) {
	defer func(n int) { maxStretch = n }(maxStretch)
	maxStretch = 100
	tok, err := Load(filepath.Join(bpeDir, "xlmr-unigram"))
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{strings.Repeat("中", 150), "a " + strings.Repeat("é", 170) + " b", strings.Repeat("日本語", 70)} {
		total := 0
		for _, s := range tok.Spans(text) {
			total += s.Pieces
		}
		if want := len(tok.IDs(text)); total != want {
			t.Errorf("%.20q… (%d bytes): spans hold %d pieces, the text has %d tokens", text, len(text), total, want)
		}
	}
}
