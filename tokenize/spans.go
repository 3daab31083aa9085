package tokenize

import "unicode/utf8"

// A Span is one whitespace-delimited word of a text: its byte offsets in
// the text as given (before any normalisation) and the number of
// wordpieces it tokenizes into (0 for a word made only of characters the
// tokenizer drops, such as control characters).
type Span struct {
	Start, End int
	Pieces     int
}

// Spans splits text at whitespace (the characters the tokenizer treats as
// spaces) and returns each word's byte span and wordpiece count. Every
// word boundary the tokenizer uses (whitespace, punctuation, CJK
// characters) falls inside a span or at its ends, and the special tokens
// contain no whitespace, so concatenating Tokenize of every span gives
// Tokenize(text): the pieces of the spans sum to len(Tokenize(text)), and
// the first k spans' pieces are the text's first wordpieces. Callers use
// it to map wordpiece positions back to text offsets.
//
// A byte-level BPE tokenizer writes a word's leading space into its first
// token, and whitespace that does not precede a word as tokens of its
// own: its spans are the words all the same, each counting the tokens of
// its pre-tokens and of the whitespace before it (whitespace at the end,
// the last word's), counted in the text as a whole.
func (t *Tokenizer) Spans(text string) []Span { return t.SpansLimit(text, 0) }

// SpansLimit is Spans up to the first span whose pieces take the total
// past n wordpieces, that span included (n ≤ 0: all spans). The pieces of
// that last span are counted only until they pass n. Like IDsLimit, it
// reads no further into the text, so a huge text costs what its first n
// wordpieces do.
func (t *Tokenizer) SpansLimit(text string, n int) []Span {
	switch {
	case t.bpe != nil:
		return t.spansBPE(text, n)
	case t.uni != nil:
		return t.spansUnigram(text, n)
	}
	var out []Span
	start, total := -1, 0
	flush := func(end int) bool {
		k := 0
		t.each(text[start:end], func(string, int64) bool { k++; return n <= 0 || total+k <= n })
		out = append(out, Span{Start: start, End: end, Pieces: k})
		start = -1
		total += k
		return n <= 0 || total <= n
	}
	for i, r := range text {
		if isSpace(r) {
			if start >= 0 && !flush(i) {
				return out
			}
			continue
		}
		if start < 0 {
			start = i
		}
	}
	if start >= 0 {
		flush(len(text))
	}
	return out
}

// spansBPE is SpansLimit for a byte-level BPE tokenizer: each token goes
// to the word holding the first non-space byte of its pre-token (or added
// token); a token of whitespace alone goes to the next word, or to the
// last one at the end of the text.
func (t *Tokenizer) spansBPE(text string, n int) []Span {
	var out []Span
	total, pending := 0, 0
	t.eachBPE(text, func(_ string, _ int64, start, end int) bool {
		f := skipSpace(text, start, end)
		if f == end {
			pending++
		} else {
			if len(out) == 0 || f >= out[len(out)-1].End {
				w := f
				for w < len(text) {
					r, size := utf8.DecodeRuneInString(text[w:])
					if isSpace(r) {
						break
					}
					w += size
				}
				out = append(out, Span{Start: f, End: w})
			}
			out[len(out)-1].Pieces += pending + 1
			total += pending + 1
			pending = 0
		}
		return n <= 0 || total <= n
	})
	if pending > 0 && (n <= 0 || total <= n) {
		if len(out) == 0 {
			out = append(out, Span{Start: 0, End: len(text)})
		}
		out[len(out)-1].Pieces += pending
	}
	return out
}

// skipSpace returns the first position of text[i:end] that is not
// whitespace, or end.
func skipSpace(text string, i, end int) int {
	for i < end {
		r, size := utf8.DecodeRuneInString(text[i:])
		if !isSpace(r) {
			break
		}
		i += size
	}
	return i
}
