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
// own; a Unigram tokenizer normalises the text first, which may join or
// split words. Their spans are the words all the same, each counting the
// tokens of the text before it up to its end (whitespace at the end, the
// last word's), counted in the text as a whole; a Unigram span holds
// several words where its normaliser did not keep them apart, and an
// added token is a span of its own.
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
	c := spanCount{n: n}
	t.eachBPE(text, func(_ string, _ int64, start, end int) bool {
		f := skipSpace(text, start, end)
		if f == end {
			return c.add(f, f, 1)
		}
		if last := c.last(); last != nil && f < last.End {
			return c.add(f, last.End, 1)
		}
		return c.add(f, skipWord(text, f, len(text)), 1)
	})
	return c.spans(text)
}

// spanCount gathers the spans of a text as its tokens are given to words.
type spanCount struct {
	out            []Span
	total, pending int
	n              int // stop after the span that passes n tokens (0: never)
}

// last is the last span so far, or nil.
func (c *spanCount) last() *Span {
	if len(c.out) == 0 {
		return nil
	}
	return &c.out[len(c.out)-1]
}

// add gives k tokens to the word [start, end), a new span unless it is
// the last one, or, when start == end, to the next word; it reports
// whether the spans so far hold no more than n tokens.
func (c *spanCount) add(start, end, k int) bool {
	if start == end {
		c.pending += k
		return true
	}
	if last := c.last(); last == nil || start >= last.End {
		c.out = append(c.out, Span{Start: start, End: end})
	}
	c.out[len(c.out)-1].Pieces += c.pending + k
	c.total += c.pending + k
	c.pending = 0
	return c.n <= 0 || c.total <= c.n
}

// spans returns the spans, tokens that no word followed counting with the
// last (or with a span of the whole text when there is none).
func (c *spanCount) spans(text string) []Span {
	if c.pending > 0 && (c.n <= 0 || c.total <= c.n) {
		if len(c.out) == 0 {
			c.out = append(c.out, Span{Start: 0, End: len(text)})
		}
		c.out[len(c.out)-1].Pieces += c.pending
	}
	return c.out
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

// skipWord returns the first position of text[i:end] that is whitespace,
// or end.
func skipWord(text string, i, end int) int {
	for i < end {
		r, size := utf8.DecodeRuneInString(text[i:])
		if isSpace(r) {
			break
		}
		i += size
	}
	return i
}
