package embed

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// wordOffsets are the byte offsets [start, end) of the words of s, cut
// at white space.
func wordOffsets(s string) [][2]int {
	var out [][2]int
	start := -1
	for i, r := range s {
		switch {
		case unicode.IsSpace(r) && start >= 0:
			out = append(out, [2]int{start, i})
			start = -1
		case !unicode.IsSpace(r) && start < 0:
			start = i
		}
	}
	if start >= 0 {
		out = append(out, [2]int{start, len(s)})
	}
	return out
}

// TestChunkSpansAreTheChunksWords: with words of one wordpiece each, the
// span of chunk k is the words it reads, from the first byte of its first
// word to the last of its last, in every mode, with an overlap and with a
// prompt (whose wordpieces take room in every window but whose text is
// no part of the span); MaxTokens cuts the last span.
func TestChunkSpansAreTheChunksWords(t *testing.T) {
	path := modelDir(t)
	txt := "  " + strings.ReplaceAll(text(23, 2), " ", " \t ") + "\n"
	words := wordOffsets(txt)
	if len(words) != 23 {
		t.Fatalf("%d words", len(words))
	}
	span := func(lo, hi int) Span { return Span{words[lo][0], words[hi-1][1]} }
	for _, c := range []struct {
		o    Options
		want []Span
	}{
		{Options{Mode: Chunks, Window: 10}, []Span{span(0, 8), span(8, 16), span(16, 23)}},
		{Options{Mode: Late, Window: 10, Overlap: 3}, []Span{span(0, 8), span(5, 13), span(10, 18), span(15, 23)}},
		{Options{Mode: Late, Window: 10, Prompt: "horse "}, []Span{span(0, 7), span(7, 14), span(14, 21), span(21, 23)}},
		{Options{Mode: Chunks, Window: 10, MaxTokens: 12}, []Span{span(0, 8), span(8, 12)}},
		{Options{Mode: Truncate, Window: 10}, []Span{span(0, 8)}},
		{Options{Mode: Long}, []Span{span(0, 23)}},
	} {
		e := open(t, path, c.o)
		got := e.ChunkSpans([]string{txt, "", " \n"})
		name := fmt.Sprintf("%s window %d overlap %d prompt %q max %d", c.o.Mode, c.o.Window, c.o.Overlap, c.o.Prompt, c.o.MaxTokens)
		if !slices.Equal(got[0], c.want) {
			t.Errorf("%s: spans %v, want %v", name, got[0], c.want)
		}
		if !slices.Equal(got[1], []Span{{}}) || !slices.Equal(got[2], []Span{{}}) {
			t.Errorf("%s: spans of texts without words %v %v, want [{0 0}]", name, got[1], got[2])
		}
		if c.o.Mode.PerChunk() {
			vecs, err := e.EmbedChunks([]string{txt})
			if err != nil {
				t.Fatal(err)
			}
			if len(vecs[0]) != len(got[0]) {
				t.Errorf("%s: %d vectors, %d spans", name, len(vecs[0]), len(got[0]))
			}
		}
	}
}

// TestChunkSpansWordPiece: with the real all-MiniLM-L6-v2 WordPiece
// tokenizer, where words split into several wordpieces and punctuation
// is a word of its own, each chunk's span tokenizes to wordpieces that
// hold the chunk's own in order, beginning in the span's first word and
// ending in its last (a chunk cut inside a word shares it).
func TestChunkSpansWordPiece(t *testing.T) {
	vocab := filepath.Join("..", "testdata", "real", "minilm")
	if _, err := os.Stat(filepath.Join(vocab, "vocab.txt")); err != nil {
		t.Skip("the real tokenizer tier is missing: run scripts/setup.sh")
	}
	path := modelDir(t)
	txt := "Antidisestablishmentarianism, they said; was (unbelievably) the longest word — in 1990's dictionaries. Naïve café owners disagreed!"
	for _, o := range []Options{{Mode: Chunks, Window: 7}, {Mode: Late, Window: 9, Overlap: 3}} {
		o.Vocab = vocab
		e := open(t, path, o)
		tok := e.Tokenizer()
		ids := tok.IDs(txt)
		spans := e.ChunkSpans([]string{txt})[0]
		chunks := e.chunks(len(ids))
		if len(spans) != len(chunks) || len(chunks) < 4 {
			t.Fatalf("%s: %d spans for %d chunks", o.Mode, len(spans), len(chunks))
		}
		for k, sp := range spans {
			part := txt[sp.Start:sp.End]
			got := tok.IDs(part)
			first := tok.IDs(strings.Fields(part)[0])
			last := tok.IDs(strings.Fields(part)[len(strings.Fields(part))-1])
			want := ids[chunks[k][0]:chunks[k][1]]
			at := slices.IndexFunc(got, func(int64) bool { return false })
			for i := 0; i+len(want) <= len(got); i++ {
				if slices.Equal(got[i:i+len(want)], want) {
					at = i
					break
				}
			}
			if at < 0 || at >= len(first) || len(got)-(at+len(want)) >= len(last) {
				t.Errorf("%s: chunk %d %q: its wordpieces %v are not within the span's %v, starting in its first word and ending in its last", o.Mode, k, part, want, got)
			}
		}
	}
}

// TestChunkSpansBounds: over seeded random texts of words, punctuation,
// accents, CJK, emoji and odd white space, read by a WordPiece, a
// byte-level BPE and a Unigram tokenizer, with and without a prompt,
// every chunk has a span inside the text, on rune boundaries, beginning
// and ending no earlier than the chunk before it, and as many spans as
// EmbedChunks would give vectors.
func TestChunkSpansBounds(t *testing.T) {
	path := modelDir(t)
	pieces := []string{"the", "man", "Naïve", "café", "東京", "🙂", ",", ".", "—", "x1", "don't", "  ", "\t", "\n", " ", "\u00a0", "ﬁ", "A.B"}
	rng := rand.New(rand.NewPCG(7, 11))
	texts := []string{"", " ", "\n\t"}
	for range 40 {
		var b strings.Builder
		for range rng.IntN(80) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
			if rng.IntN(3) > 0 {
				b.WriteByte(' ')
			}
		}
		texts = append(texts, b.String())
	}
	kinds := map[string]bool{}
	for _, vocab := range []string{"", filepath.Join("..", "testdata", "tokenizers", "modernbert-bpe"), filepath.Join("..", "testdata", "tokenizers", "xlmr-unigram")} {
		for _, prompt := range []string{"", "query: "} {
			e := open(t, path, Options{Mode: Chunks, Window: 9, Overlap: 2, Vocab: vocab, Prompt: prompt})
			kinds[e.Tokenizer().Kind()] = true
			all := e.ChunkSpans(texts)
			for i, txt := range texts {
				n := len(e.tok.IDs(e.promptSpace + txt))
				if len(all[i]) != len(e.chunks(n)) {
					t.Fatalf("%s %q: text %q: %d spans for %d chunks", vocab, prompt, txt, len(all[i]), len(e.chunks(n)))
				}
				prev := Span{}
				for k, sp := range all[i] {
					if sp.Start < prev.Start || sp.End < prev.End || sp.Start > sp.End || sp.End > len(txt) ||
						!utf8.RuneStart(byteAt(txt, sp.Start)) || !utf8.RuneStart(byteAt(txt, sp.End)) {
						t.Fatalf("%s %q: text %q: span %d %v after %v is out of order or bounds", vocab, prompt, txt, k, sp, prev)
					}
					prev = sp
				}
			}
		}
	}
	if len(kinds) != 3 {
		t.Errorf("tokenizers of kinds %v, want three", kinds)
	}
}

// byteAt is s[i], or a rune start at the end of s.
func byteAt(s string, i int) byte {
	if i >= len(s) {
		return 0
	}
	return s[i]
}
