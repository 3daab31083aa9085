package tokenize

import (
	"reflect"
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
