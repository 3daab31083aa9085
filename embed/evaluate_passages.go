package embed

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sort"
	"strings"
	"unicode"

	"github.com/linearize/linearize/tokenize"
)

// ErrTooShort is returned (wrapped, with the length required and the
// longest document's) when no document is long enough to be evaluated.
var ErrTooShort = errors.New("embed: no document is long enough")

// ErrEvalOption is returned (wrapped) for invalid EvalOptions or systems.
var ErrEvalOption = errors.New("embed: invalid evaluation option")

// Document is a text to retrieve.
type Document struct {
	ID   string `json:"id"`
	Text string `json:"text"`
}

// A Query is a passage taken out of a document: retrieving that document
// from the passage is the test.
type Query struct {
	// Doc indexes the documents Passages returns; DocID is its ID.
	Doc   int    `json:"doc"`
	DocID string `json:"doc_id"`
	// Text is the passage, its whitespace folded to single spaces.
	Text string `json:"text"`
	// Start is the wordpiece position of the passage's first wordpiece in
	// the (cut) document before any passage was removed; Tokens is its
	// length in wordpieces; Bucket indexes the buckets (Buckets[i] ≤
	// Start < Buckets[i+1]).
	Start  int `json:"start"`
	Tokens int `json:"tokens"`
	Bucket int `json:"bucket"`
	// Sentences is the number of sentences in the passage (1–3).
	Sentences int `json:"sentences"`
	// At is the byte offset in its document's text, as Passages returns
	// it (cut, and without the passages), where the passage was taken
	// out.
	At int `json:"at"`
}

// Passage selection constants: a sentence needs minWords words to be a
// passage, and a passage holds at most maxSentences sentences.
const (
	minWords     = 5
	maxSentences = 3
)

// Check reports whether o is valid (a wrapped ErrEvalOption when not),
// after filling in its defaults.
func (o EvalOptions) Check() error {
	_, err := o.defaults()
	return err
}

// defaults fills in the zero fields of o and checks it.
func (o EvalOptions) defaults() (EvalOptions, error) {
	if o.MaxTokens < 0 || o.MinTokens < 0 || o.PerBucket < 0 || o.Bootstrap < 0 || o.Batch < 0 || o.MaxPassageTokens < 0 {
		return o, fmt.Errorf("%w: negative MaxTokens, MinTokens, PerBucket, Bootstrap, Batch or MaxPassageTokens", ErrEvalOption)
	}
	if o.MaxTokens == 0 {
		o.MaxTokens = 4096
	}
	if len(o.Buckets) == 0 {
		o.Buckets = DefaultBuckets(o.MaxTokens)
	} else {
		o.Buckets = append([]int(nil), o.Buckets...)
	}
	if len(o.Buckets) < 2 {
		return o, fmt.Errorf("%w: buckets %v: need at least two edges", ErrEvalOption, o.Buckets)
	}
	for i, b := range o.Buckets {
		if b < 0 || i > 0 && b <= o.Buckets[i-1] {
			return o, fmt.Errorf("%w: bucket edges %v must be non-negative and increasing", ErrEvalOption, o.Buckets)
		}
	}
	if last := o.Buckets[len(o.Buckets)-1]; last > o.MaxTokens {
		return o, fmt.Errorf("%w: the last bucket edge %d is past MaxTokens %d (no document is read that far)", ErrEvalOption, last, o.MaxTokens)
	}
	if o.MinTokens == 0 {
		o.MinTokens = o.Buckets[len(o.Buckets)-1]
	}
	if o.PerBucket == 0 {
		o.PerBucket = 1
	}
	if o.Bootstrap == 0 {
		o.Bootstrap = 1000
	}
	if o.Batch == 0 {
		o.Batch = 8
	}
	if o.MaxPassageTokens == 0 {
		o.MaxPassageTokens = 128
	}
	return o, nil
}

// DefaultBuckets are the bucket edges used when EvalOptions.Buckets is
// empty: 0, 512, 1024, 2048, … doubling below maxTokens, then maxTokens
// (0, 512, 1K, 2K, 4K for 4096; 0, 256 for 256).
func DefaultBuckets(maxTokens int) []int {
	edges := []int{0}
	for e := 512; e < maxTokens; e *= 2 {
		edges = append(edges, e)
	}
	return append(edges, maxTokens)
}

// sentence is a run of words [from, to) of a document's spans.
type sentence struct {
	from, to   int // span indexes
	start, len int // wordpiece position and count
	ok         bool
}

// Passages cuts every document to its first o.MaxTokens wordpieces,
// skips the documents that had fewer than o.MinTokens wordpieces, and
// draws from each remaining one, for each bucket, o.PerBucket passages of
// 1–3 consecutive sentences whose first wordpiece lies in the bucket; the
// passages of a document do not overlap. It returns the passages as
// queries and the kept documents, cut and with every passage removed, in
// their input order (len(docs) − len(returned) were skipped). The draw is
// seeded by o.Seed and the document's ID, so it does not depend on the
// other documents.
//
// Sentences end at '.', '!' or '?' (before closing quotes or brackets)
// followed by whitespace, or at a blank line; a sentence of fewer than 5
// words, or one that looks like code or markup, is never part of a
// passage, and a passage has at most o.MaxPassageTokens wordpieces.
func Passages(tok *tokenize.Tokenizer, docs []Document, o EvalOptions) ([]Query, []Document, error) {
	if tok == nil {
		return nil, nil, fmt.Errorf("%w: no tokenizer", ErrEvalOption)
	}
	o, err := o.defaults()
	if err != nil {
		return nil, nil, err
	}
	if len(docs) == 0 {
		return nil, nil, fmt.Errorf("%w: no documents given (each needs at least %d wordpieces)", ErrTooShort, o.MinTokens)
	}
	var queries []Query
	var kept []Document
	longest, longestID := -1, ""
	for _, d := range docs {
		// Words past MaxTokens are never read (nor past MinTokens, to
		// tell a short document): a document of any length costs what
		// its first wordpieces do.
		spans := tok.SpansLimit(d.Text, max(o.MaxTokens, o.MinTokens))
		total := 0
		for _, s := range spans {
			total += s.Pieces
		}
		if total > longest {
			longest, longestID = total, d.ID
		}
		if total < o.MinTokens {
			continue
		}
		qs, text := docPassages(d, spans, o)
		for i := range qs {
			qs[i].Doc = len(kept)
		}
		queries = append(queries, qs...)
		kept = append(kept, Document{ID: d.ID, Text: text})
	}
	if len(kept) == 0 {
		return nil, nil, fmt.Errorf("%w: each needs at least %d wordpieces; the longest of the %d documents (%s) has %d", ErrTooShort, o.MinTokens, len(docs), longestID, longest)
	}
	if len(queries) == 0 {
		return nil, nil, fmt.Errorf("%w: %d documents have at least %d wordpieces, but none has a sentence of %d or more words that is not code", ErrTooShort, len(kept), o.MinTokens, minWords)
	}
	return queries, kept, nil
}

// docPassages draws one document's passages and returns them with the
// document's text cut and without them.
func docPassages(d Document, spans []tokenize.Span, o EvalOptions) ([]Query, string) {
	text := d.Text
	// Cut: keep the words whose pieces all lie in the first MaxTokens.
	pos := 0
	n := 0
	for n < len(spans) && pos+spans[n].Pieces <= o.MaxTokens {
		pos += spans[n].Pieces
		n++
	}
	if n == 0 {
		return nil, ""
	}
	cut := n < len(spans)
	spans = spans[:n]
	text = text[:spans[n-1].End]
	sents := splitSentences(text, spans)
	if cut && !endsSentence(text[spans[n-1].Start:]) { // the last sentence lost its end
		sents[len(sents)-1].ok = false
	}
	type cand struct{ i, k int } // sentences [i, i+k)
	firstSent := map[int]int{}   // a passage's Start → its first sentence
	h := fnv.New64a()
	h.Write([]byte(d.ID))
	rng := rand.New(rand.NewPCG(o.Seed, h.Sum64()))
	used := make([]bool, len(sents))
	var queries []Query
	// The last bucket draws first: a passage may run past the end of its
	// bucket, and would otherwise take the next bucket's few sentences.
	for b := len(o.Buckets) - 2; b >= 0; b-- {
		lo, hi := o.Buckets[b], o.Buckets[b+1]
		var cands []cand
		for i, s := range sents {
			if s.start < lo || s.start >= hi {
				continue
			}
			size := 0
			for k := 1; k <= maxSentences && i+k <= len(sents) && sents[i+k-1].ok; k++ {
				size += sents[i+k-1].len
				if size > o.MaxPassageTokens {
					break
				}
				cands = append(cands, cand{i, k})
			}
		}
		rng.Shuffle(len(cands), func(x, y int) { cands[x], cands[y] = cands[y], cands[x] })
		got := 0
		for _, c := range cands {
			if got == o.PerBucket {
				break
			}
			free := true
			for j := c.i; j < c.i+c.k; j++ {
				free = free && !used[j]
			}
			if !free {
				continue
			}
			for j := c.i; j < c.i+c.k; j++ {
				used[j] = true
			}
			firstSent[sents[c.i].start] = c.i
			first, last := sents[c.i], sents[c.i+c.k-1]
			queries = append(queries, Query{
				DocID:     d.ID,
				Text:      strings.Join(strings.Fields(text[spans[first.from].Start:spans[last.to-1].End]), " "),
				Start:     first.start,
				Tokens:    last.start + last.len - first.start,
				Bucket:    b,
				Sentences: c.k,
			})
			got++
		}
	}
	sort.SliceStable(queries, func(i, j int) bool { return queries[i].Start < queries[j].Start })
	starts := map[int]int{} // a passage's first sentence → its query
	for j, q := range queries {
		starts[firstSent[q.Start]] = j
	}
	// Remove the passages.
	var b strings.Builder
	at := 0
	for i := range sents {
		if !used[i] {
			continue
		}
		from, to := spans[sents[i].from].Start, spans[sents[i].to-1].End
		b.WriteString(text[at:from])
		if j, ok := starts[i]; ok {
			queries[j].At = b.Len()
		}
		at = to
	}
	b.WriteString(text[at:])
	return queries, b.String()
}

// splitSentences groups a text's spans into sentences and marks those
// that may be part of a passage.
func splitSentences(text string, spans []tokenize.Span) []sentence {
	var out []sentence
	start, pos := 0, 0
	from := 0
	for i, s := range spans {
		pos += s.Pieces
		end := i+1 == len(spans)
		if !end {
			end = endsSentence(text[s.Start:s.End]) || blankLine(text[s.End:spans[i+1].Start])
		}
		if !end {
			continue
		}
		out = append(out, sentence{from: from, to: i + 1, start: start, len: pos - start,
			ok: passageLike(text, spans, from, i+1)})
		from, start = i+1, pos
	}
	return out
}

// abbreviations end in '.' without ending a sentence.
var abbreviations = map[string]bool{"e.g.": true, "i.e.": true, "etc.": true, "vs.": true, "cf.": true, "mr.": true,
	"mrs.": true, "ms.": true, "dr.": true, "st.": true, "no.": true, "fig.": true, "approx.": true}

// endsSentence reports whether a word ends a sentence: it ends in '.',
// '!' or '?', perhaps followed by closing quotes or brackets, and is not
// a common abbreviation or an initial ("J.").
func endsSentence(w string) bool {
	t := strings.TrimRight(w, "\"')]}’”»")
	if t == "" {
		return false
	}
	switch t[len(t)-1] {
	case '!', '?':
		return true
	case '.':
	default:
		return false
	}
	if abbreviations[strings.ToLower(t)] {
		return false
	}
	r := []rune(t)
	return !(len(r) == 2 && unicode.IsUpper(r[0]))
}

// blankLine reports whether whitespace between two words holds an empty
// line.
func blankLine(gap string) bool {
	i := strings.IndexByte(gap, '\n')
	return i >= 0 && strings.IndexByte(gap[i+1:], '\n') >= 0
}

// codeMarks are substrings that mark code or markup; two or more of
// codeChars do too.
var codeMarks = []string{">>>", "{", "}", "();", "==", "!=", "->", "=>", "</", "/>", "::", "`", "\\", "__", "$ ", "&&", "||", "://"}

const codeChars = "=;{}<>|*^~#[]"

// passageLike reports whether the sentence of spans [from, to) may be
// part of a passage: at least minWords words, no code marks and at most
// one of codeChars, at least 80 % letters among its non-space
// characters, and no word starting an indented line (a code block in
// plain text).
func passageLike(text string, spans []tokenize.Span, from, to int) bool {
	if to-from < minWords {
		return false
	}
	s := text[spans[from].Start:spans[to-1].End]
	for _, m := range codeMarks {
		if strings.Contains(s, m) {
			return false
		}
	}
	letters, other, code := 0, 0, 0
	for _, r := range s {
		if strings.ContainsRune(codeChars, r) {
			code++
		}
		switch {
		case unicode.IsLetter(r):
			letters++
		case !unicode.IsSpace(r):
			other++
		}
	}
	if letters < 4*other || code >= 2 {
		return false
	}
	for i := from; i < to; i++ {
		gapStart := 0
		if i > 0 {
			gapStart = spans[i-1].End
		}
		gap := text[gapStart:spans[i].Start]
		if j := strings.LastIndexByte(gap, '\n'); j >= 0 || i == 0 {
			indent := gap[j+1:]
			if strings.Contains(indent, "\t") || len(indent) >= 4 {
				return false
			}
		}
	}
	return true
}
