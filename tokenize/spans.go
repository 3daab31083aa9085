package tokenize

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
func (t *WordPiece) Spans(text string) []Span { return t.SpansLimit(text, 0) }

// SpansLimit is Spans up to the first span whose pieces take the total
// past n wordpieces, that span included (n ≤ 0: all spans). The pieces of
// that last span are counted only until they pass n. Like IDsLimit, it
// reads no further into the text, so a huge text costs what its first n
// wordpieces do.
func (t *WordPiece) SpansLimit(text string, n int) []Span {
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
