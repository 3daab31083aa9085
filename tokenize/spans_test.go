package tokenize

import (
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestSpans checks Spans against Tokenize of the whole text: the spans'
// tokens, concatenated, are the text's tokens; each span holds no
// whitespace and the text between spans is whitespace only.
func TestSpans(t *testing.T) {
	words := map[string]int64{"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4, "un": 5, "##aff": 6, "##able": 7,
		"a": 8, "##a": 9, "中": 10, "cafe": 11, ",": 12, "hello": 13, "world": 14, "!": 15, ".": 16, "i": 17, "##̇": 18, "the": 19}
	tok, err := New(words, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		"", "   ", "Hello, world!", "unaffable  unaffable.\n\nthe end", "中文 café [MASK]x", "\x00\xff\xfe a",
		"a \u0301\u0301a", "İİ ##", "[UNK][SEP]x", "\thello\u00a0world\u2003!", "hello\x01world a.b,c", "the[MASK] [CLS]the",
	} {
		spans := tok.Spans(s)
		var got []string
		n, prev := 0, 0
		for _, sp := range spans {
			if sp.Start < prev || sp.End <= sp.Start || sp.End > len(s) {
				t.Fatalf("%q: bad span %+v after %d", s, sp, prev)
			}
			if strings.TrimSpace(s[prev:sp.Start]) != "" || strings.ContainsAny(s[sp.Start:sp.End], " \t\n") {
				t.Errorf("%q: span %+v is not a whitespace-delimited word", s, sp)
			}
			toks := tok.Tokenize(s[sp.Start:sp.End])
			if len(toks) != sp.Pieces {
				t.Errorf("%q: span %q has %d pieces, Tokenize gives %d", s, s[sp.Start:sp.End], sp.Pieces, len(toks))
			}
			got = append(got, toks...)
			n += sp.Pieces
			prev = sp.End
		}
		if strings.TrimSpace(s[prev:]) != "" {
			t.Errorf("%q: text after the last span: %q", s, s[prev:])
		}
		want := tok.Tokenize(s)
		if n != len(want) || !reflect.DeepEqual(got, want) && len(want)+len(got) > 0 {
			t.Errorf("%q: spans give %v (%d pieces), Tokenize %v", s, got, n, want)
		}
	}
}

// TestSpaceBlind: SpaceBlind is true for WordPiece alone, and a
// tokenizer that says so gives the same ids with white space before the
// text. Byte-level BPE marks a word after a space, so for it a leading
// space changes the ids (Unigram's normaliser may strip it, but
// SpaceBlind does not promise it).
func TestSpaceBlind(t *testing.T) {
	wp, err := New(map[string]int64{"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "the": 4, "man": 5, "is": 6, "eat": 7, "##ing": 8, ".": 9}, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	bpe := loadBPETest(t, "modernbert-bpe")
	uni, err := Load(filepath.Join(bpeDir, "xlmr-unigram"))
	if err != nil {
		t.Fatal(err)
	}
	const text = "the man is eating."
	for _, c := range []struct {
		tok   *Tokenizer
		blind bool
	}{{wp, true}, {bpe, false}, {uni, false}} {
		same := slices.Equal(c.tok.IDs(" \t"+text), c.tok.IDs(text))
		if c.tok.SpaceBlind() != c.blind || c.blind && !same {
			t.Errorf("%s: SpaceBlind %v, ids alike with a leading space %v; want SpaceBlind %v", c.tok.Kind(), c.tok.SpaceBlind(), same, c.blind)
		}
		if c.tok == bpe && same {
			t.Errorf("byte-level BPE gives the same ids with a leading space: the copy behind a prompt would not be needed")
		}
	}
}
