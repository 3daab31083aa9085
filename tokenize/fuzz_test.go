package tokenize

import (
	"testing"
	"unicode/utf8"
)

// FuzzTokenize checks that any text (valid UTF-8 or not) tokenizes without
// panicking into known ids framed by [CLS] and [SEP], and that truncation
// holds.
func FuzzTokenize(f *testing.F) {
	for _, s := range []string{"", "Hello, world!", "unaffable", "中文 café [MASK]", "\x00\xff\xfe", "a\u0301\u0301", "İİ ##", "[UNK][SEP]x"} {
		f.Add(s)
	}
	words := map[string]int64{"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4, "un": 5, "##aff": 6, "##able": 7, "a": 8, "##a": 9, "中": 10, "cafe": 11, ",": 12, "hello": 13}
	tok, err := New(words, DefaultOptions())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ids := tok.Encode(s, 0)
		if len(ids) < 2 || ids[0] != 2 || ids[len(ids)-1] != 3 {
			t.Fatalf("%q: not framed: %v", s, ids)
		}
		for _, id := range ids {
			if tok.Token(id) == "" {
				t.Fatalf("%q: unknown id %d", s, id)
			}
		}
		if n := len(tok.Encode(s, 5)); n > 5 {
			t.Fatalf("%q: %d ids with max length 5", s, n)
		}
		if utf8.ValidString(s) && len(tok.Tokenize(s)) > utf8.RuneCountInString(s)+1 {
			t.Fatalf("%q: more tokens than characters", s)
		}
	})
}
