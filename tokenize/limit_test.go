package tokenize

import (
	"math/rand"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// oldIDs is the tokenizer as it was before it streamed: the whole text
// normalised at once, then split into words. The streaming tokenizer must
// give the same ids for any text, cut into pieces anywhere.
func oldIDs(t *Tokenizer, text string) []int64 {
	var out []int64
	emit := func(_ string, id int64) bool { out = append(out, id); return true }
	for len(text) > 0 {
		at, which := -1, ""
		for _, s := range t.special {
			if i := strings.Index(text, s); i >= 0 && (at < 0 || i < at || (i == at && len(s) > len(which))) {
				at, which = i, s
			}
		}
		plain := text
		if at >= 0 {
			plain = text[:at]
		}
		for _, w := range oldWords(t.opt, plain) {
			t.wordPiece(w, emit)
		}
		if at < 0 {
			break
		}
		emit(which, t.vocab[which])
		text = text[at+len(which):]
	}
	return out
}

func oldWords(o Options, text string) []string {
	var b strings.Builder
	for _, r := range text {
		if o.CleanText {
			if r == 0 || r == 0xfffd || isControl(r) {
				continue
			}
			if isSpace(r) {
				r = ' '
			}
		}
		if o.ChineseChars && isCJK(r) {
			b.WriteByte(' ')
			b.WriteRune(r)
			b.WriteByte(' ')
			continue
		}
		b.WriteRune(r)
	}
	s := b.String()
	if o.StripAccents {
		b.Reset()
		for _, r := range norm.NFD.String(s) {
			if !unicode.Is(unicode.Mn, r) {
				b.WriteRune(r)
			}
		}
		s = b.String()
	}
	if o.Lower {
		b.Reset()
		for _, r := range s {
			if r == 'İ' {
				b.WriteString("i\u0307")
				continue
			}
			b.WriteRune(unicode.ToLower(r))
		}
		s = b.String()
	}
	var words []string
	start := -1
	for i, r := range s {
		switch {
		case isSpace(r):
			if start >= 0 {
				words = append(words, s[start:i])
				start = -1
			}
		case isPunct(r):
			if start >= 0 {
				words = append(words, s[start:i])
				start = -1
			}
			words = append(words, string(r))
		default:
			if start < 0 {
				start = i
			}
		}
	}
	if start >= 0 {
		words = append(words, s[start:])
	}
	return words
}

func limitVocab(t *testing.T, o Options) *Tokenizer {
	t.Helper()
	words := "[PAD] [UNK] [CLS] [SEP] [MASK] un ##aff ##able a ##a b ##b e ##e i ##i ##̇ cafe café , . ! ` ; 中 文 hello world"
	vocab := map[string]int64{}
	for i, w := range strings.Fields(words) {
		vocab[w] = int64(i)
	}
	o.MaxWordChars = 12
	tok, err := New(vocab, o)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestStreamingMatchesWhole: every text, read in pieces of 1 to 9 bytes
// or the default, gives the ids of the whole text normalised at once,
// under every combination of the normalisation options; and IDsLimit(n)
// is the first n of them.
func TestStreamingMatchesWhole(t *testing.T) {
	alphabet := []string{"a", "b", "e", "i", " ", "\t", "\n", ",", ".", "`", ";", "\u0301", "\u0316", "\u0307", "é", "É", "İ", "中", "文", "\uF900",
		"\u1FEF", "\u037E", "\u2000", "\x00", "\x01", "\u200b", "\xff", "\xe2\x82", "\ufffd", "[MASK]", "[UNK]", "[SEP", "[", "]", "un", "affable", "café", "Hello"}
	rng := rand.New(rand.NewSource(1))
	texts := []string{"", "a", "unaffable", "[MASK][MASK]", "Café [SEP] 中文!", strings.Repeat("a", 40) + " b",
		"a" + strings.Repeat("\u0316\u0301", 40) + "b", "e\u0301\x01\u0316 İİ", strings.Repeat("é", 30)}
	for i := 0; i < 400; i++ {
		var b strings.Builder
		for n := rng.Intn(40); n > 0; n-- {
			b.WriteString(alphabet[rng.Intn(len(alphabet))])
		}
		texts = append(texts, b.String())
	}
	defer func(c int) { streamChunk = c }(streamChunk)
	for mask := 0; mask < 16; mask++ {
		o := DefaultOptions()
		o.Lower, o.StripAccents, o.ChineseChars, o.CleanText = mask&1 != 0, mask&2 != 0, mask&4 != 0, mask&8 != 0
		tok := limitVocab(t, o)
		for _, chunk := range []int{1, 2, 3, 5, 9, 4 << 10} {
			streamChunk = chunk
			for _, s := range texts {
				want := oldIDs(tok, s)
				if got := tok.IDs(s); !reflect.DeepEqual(got, want) && (len(got) > 0 || len(want) > 0) {
					t.Fatalf("options %04b, pieces of %d bytes, %q: IDs = %v, the whole text gives %v", mask, chunk, s, got, want)
				}
				for _, n := range []int{1, 2, 7} {
					got := tok.IDsLimit(s, n)
					if w := want[:min(n, len(want))]; !reflect.DeepEqual(got, w) && (len(got) > 0 || len(w) > 0) {
						t.Fatalf("options %04b, %q: IDsLimit(%d) = %v, want %v", mask, s, n, got, w)
					}
				}
			}
		}
	}
}

// TestLimitReadsOnlyWhatItKeeps: a 64 MiB text with a limit of 128
// wordpieces tokenizes in bounded time and memory. Before IDsLimit the
// whole text was normalised first (hundreds of MiB for 64 MiB of text);
// now the bytes allocated do not depend on the text's length. The same
// holds for Encode with a maximum length, and for a text that is one
// enormous word (it is [UNK] as soon as it passes MaxWordChars).
func TestLimitReadsOnlyWhatItKeeps(t *testing.T) {
	tok := limitVocab(t, DefaultOptions())
	huge := map[string]string{
		"words":    strings.Repeat("unaffable café, 中文 ", (64<<20)/24),
		"one word": strings.Repeat("a", 64<<20),
	}
	for name, text := range huge {
		for _, call := range []struct {
			what string
			f    func() int
		}{
			{"IDsLimit(128)", func() int { return len(tok.IDsLimit(text, 128)) }},
			{"Encode(130)", func() int { return len(tok.Encode(text, 130)) - 2 }},
		} {
			n, alloc, took := measure(call.f)
			if n < 1 || n > 128 {
				t.Errorf("%s of %s: %d wordpieces, want 1..128", call.what, name, n)
			}
			// A few KiB of text are read (the first pieces); the old
			// tokenizer allocated over 256 MiB here.
			if alloc > 1<<20 {
				t.Errorf("%s of %d MiB of %s allocated %d bytes, want at most 1 MiB", call.what, len(text)>>20, name, alloc)
			}
			// The words are read no further than the limit; one word must
			// be read to its end (what follows it might be kept), in
			// linear time.
			if limit := map[string]time.Duration{"words": 2 * time.Second}[name]; limit > 0 && took > limit || took > 20*time.Second {
				t.Errorf("%s of %d MiB of %s took %v", call.what, len(text)>>20, name, took)
			}
		}
	}
	// One word that never passes MaxWordChars (a letter and millions of
	// accents the tokenizer strips) must be read to its end, but in
	// pieces: what is allocated is a small part of the text, not copies
	// of it.
	marks := "a" + strings.Repeat("\u0301", 8<<20)
	n, alloc, _ := measure(func() int { return len(tok.IDsLimit(marks, 128)) })
	if n != 1 || alloc > uint64(len(marks))/4 {
		t.Errorf("IDsLimit(128) of %d MiB of combining marks: %d wordpieces, %d bytes allocated; want 1, at most %d", len(marks)>>20, n, alloc, len(marks)/4)
	}
}

// measure runs f and returns its result, the bytes it allocated and the
// time it took.
func measure(f func() int) (int, uint64, time.Duration) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	n := f()
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	return n, after.TotalAlloc - before.TotalAlloc, took
}

// TestSpansLimit: SpansLimit(n) is Spans up to the span that passes n
// wordpieces, and a huge text costs what its first n wordpieces do.
func TestSpansLimit(t *testing.T) {
	tok := limitVocab(t, DefaultOptions())
	text := "unaffable café,  中文 [MASK] hello\tworld " + strings.Repeat("a", 30) + " b\x01 \x01 e"
	all := tok.Spans(text)
	for n := 1; n < 20; n++ {
		got := tok.SpansLimit(text, n)
		total := 0
		for i, s := range got {
			total += s.Pieces
			if s.Start != all[i].Start || s.End != all[i].End || i < len(got)-1 && s.Pieces != all[i].Pieces {
				t.Fatalf("SpansLimit(%d)[%d] = %+v, Spans gives %+v", n, i, s, all[i])
			}
		}
		if len(got) < len(all) && (total <= n || total-got[len(got)-1].Pieces > n) {
			t.Errorf("SpansLimit(%d): %d of %d spans with %d pieces: want the first span that passes %d last", n, len(got), len(all), total, n)
		}
	}
	huge := strings.Repeat("unaffable café, 中文 ", (64<<20)/24)
	n, alloc, took := measure(func() int { return len(tok.SpansLimit(huge, 128)) })
	if n < 10 || n > 129 || alloc > 1<<20 || took > 2*time.Second {
		t.Errorf("SpansLimit(128) of 64 MiB: %d spans, %d bytes, %v; want at most 129 spans, 1 MiB, 2 s", n, alloc, took)
	}
}
