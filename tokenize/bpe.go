package tokenize

import (
	"container/heap"
	"strings"
	"unicode"
	"unicode/utf8"
)

// bytePairs is a byte-level BPE model, GPT-2's, as RoBERTa, ModernBERT and
// many other encoders write it in tokenizer.json: the text is split into
// pre-tokens by GPT-2's pattern, each pre-token's UTF-8 bytes are written
// as printable characters (byteChar) and merged pair by pair, the pair of
// lowest rank first.
type bytePairs struct {
	// merges maps a pair of symbol ids to its rank and the id of the
	// merged symbol.
	merges map[[2]int64]merge
	// byteID is the id of each byte's character, −1 when the vocabulary
	// lacks it (the byte is then dropped, as the reference drops a symbol
	// it has no id for when there is no unknown token).
	byteID [256]int64
	// prefixSpace writes a space before a stretch of text that does not
	// start with one (RoBERTa's add_prefix_space).
	prefixSpace bool
	// ignoreMerges takes a pre-token found whole in the vocabulary as it
	// is, without merging.
	ignoreMerges bool
}

type merge struct {
	rank int32
	id   int64
}

// byteChar is GPT-2's map of bytes to characters: the printable ones
// stand for themselves, the others for the characters from U+0100 on,
// in order.
var byteChar = func() (m [256]rune) {
	next := rune(256)
	for b := range 256 {
		switch {
		case b >= '!' && b <= '~', b >= 0xA1 && b <= 0xAC, b >= 0xAE && b <= 0xFF:
			m[b] = rune(b)
		default:
			m[b] = next
			next++
		}
	}
	return m
}()

// byteLevel writes s's bytes as byteChar's characters.
func byteLevel(s string) string {
	var b strings.Builder
	b.Grow(2 * len(s))
	for i := 0; i < len(s); i++ {
		b.WriteRune(byteChar[s[i]])
	}
	return b.String()
}

// An addedToken is an entry of tokenizer.json's added_tokens: matched in
// the raw text before the model sees it, and given its id whole.
type addedToken struct {
	content string
	id      int64
	lstrip  bool // the match takes the whitespace before it
	rstrip  bool // and after it
}

// eachBPE calls emit with every token of text and the byte range of the
// pre-token (or added token) it comes from, until emit returns false.
// A pre-token's range may start inside a virtual prefix space, at 0.
func (t *Tokenizer) eachBPE(text string, emit func(tok string, id int64, start, end int) bool) {
	t.eachAdded(text, func(from, to int) bool { return t.bpe.eachPreToken(t, text, from, to, emit) }, emit)
}

// eachAdded splits text at the added tokens: stretch tokenizes each
// stretch of text between them, emit gets each added token with its
// range; it stops when either returns false.
func (t *Tokenizer) eachAdded(text string, stretch func(from, to int) bool, emit func(tok string, id int64, start, end int) bool) {
	scan := newAddedScan(t.added, text)
	for pos := 0; pos <= len(text); {
		start, end, k := scan.find(pos)
		if start > pos && !stretch(pos, start) || k < 0 {
			return
		}
		// The token is written as matched, with the whitespace an lstrip or
		// rstrip token takes, as the reference writes it.
		if !emit(text[start:end], t.added[k].id, start, end) {
			return
		}
		pos = end // > start: an added token is never empty
	}
}

// newAddedScan returns a scan of text for added.
func newAddedScan(added []addedToken, text string) *addedScan {
	s := &addedScan{added: added, text: text, next: make([]int, len(added))}
	for i := range s.next {
		s.next[i] = -2 // not searched yet
	}
	return s
}

// addedScan finds the added tokens in a text from left to right: the
// leftmost, longest match at or after a position, with the whitespace an
// lstrip or rstrip token takes. Each token's next occurrence is searched
// again only once the position passes it, so a text costs one pass per
// token.
type addedScan struct {
	added []addedToken
	text  string
	next  []int // per token: its next occurrence, −1 for none, −2 not searched
}

// find returns the match at or after pos (lstrip whitespace no further
// back than pos): its byte range and the token's index, or len(text) and
// −1 when there is none.
func (s *addedScan) find(pos int) (start, end, k int) {
	start, k = len(s.text), -1
	for i, a := range s.added {
		if a.content == "" {
			continue
		}
		if s.next[i] == -2 || s.next[i] >= 0 && s.next[i] < pos {
			if j := strings.Index(s.text[pos:], a.content); j >= 0 {
				s.next[i] = pos + j
			} else {
				s.next[i] = -1
			}
		}
		at := s.next[i]
		if at < 0 {
			continue
		}
		if at < start || at == start && len(a.content) > len(s.added[k].content) {
			start, k = at, i
		}
	}
	if k < 0 {
		return len(s.text), len(s.text), -1
	}
	end = start + len(s.added[k].content)
	if s.added[k].lstrip {
		for start > pos {
			r, size := utf8.DecodeLastRuneInString(s.text[pos:start])
			if !unicode.IsSpace(r) {
				break
			}
			start -= size
		}
	}
	if s.added[k].rstrip {
		for end < len(s.text) {
			r, size := utf8.DecodeRuneInString(s.text[end:])
			if !unicode.IsSpace(r) {
				break
			}
			end += size
		}
	}
	return start, end, k
}

// eachPreToken splits text[from:to] into GPT-2's pre-tokens and emits the
// BPE tokens of each; it returns false when emit did.
func (b *bytePairs) eachPreToken(t *Tokenizer, text string, from, to int, emit func(string, int64, int, int) bool) bool {
	seg := text[from:to]
	p := preTokens{s: seg, space: b.prefixSpace && seg[0] != ' '}
	var buf []byte
	for {
		i, j, ok := p.next()
		if !ok {
			return true
		}
		// The pre-token's bytes in seg, and whether the virtual space
		// goes before them.
		lo, hi, space := i, j, false
		if p.space {
			if i == 0 {
				space = true
			} else {
				lo--
			}
			hi--
		}
		start, end := from+lo, from+hi
		for first := true; first || lo < hi; first = false {
			// A pre-token past maxPreToken bytes (a run of tens of
			// thousands of letters or signs) is merged in pieces, so that
			// what it costs is bounded.
			cut := min(hi, lo+maxPreToken)
			for cut < hi && cut > lo && !utf8.RuneStart(seg[cut]) {
				cut--
			}
			buf = buf[:0]
			if space && first {
				buf = append(buf, ' ')
			}
			buf = append(buf, seg[lo:cut]...)
			lo = cut
			if !b.word(t, buf, func(tok string, id int64) bool { return emit(tok, id, start, end) }) {
				return false
			}
		}
	}
}

// maxPreToken bounds the bytes merged at once: a longer pre-token is
// merged in pieces of at most this many bytes, cut at a character
// boundary. The reference merges it whole; the tokens differ only for a
// pre-token this long, which no natural text has.
const maxPreToken = 16 << 10

// preTokens iterates GPT-2's pre-tokenization pattern
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// over s, with a virtual space before it when space is set (positions
// then count it as one byte at 0).
type preTokens struct {
	s     string
	space bool
	pos   int
}

// at returns the character at position i and its size.
func (p *preTokens) at(i int) (rune, int) {
	if p.space {
		if i == 0 {
			return ' ', 1
		}
		i--
	}
	return utf8.DecodeRuneInString(p.s[i:])
}

// size is the length of the text in positions.
func (p *preTokens) size() int {
	if p.space {
		return len(p.s) + 1
	}
	return len(p.s)
}

// next returns the next pre-token's range [i, j) in positions.
func (p *preTokens) next() (i, j int, ok bool) {
	n := p.size()
	if p.pos >= n {
		return 0, 0, false
	}
	i = p.pos
	j = p.match(i, n)
	p.pos = j
	return i, j, true
}

// class of a character for the pattern.
const (
	classLetter = iota
	classNumber
	classSpace
	classOther
)

func classOf(r rune) int {
	switch {
	case unicode.IsLetter(r):
		return classLetter
	case unicode.IsNumber(r):
		return classNumber
	case unicode.IsSpace(r):
		return classSpace
	}
	return classOther
}

// match returns the end of the pattern's match at i (< n).
func (p *preTokens) match(i, n int) int {
	r, size := p.at(i)
	// 's 't 're 've 'm 'll 'd
	if r == '\'' && i+1 < n {
		for _, c := range [...]string{"s", "t", "re", "ve", "m", "ll", "d"} {
			if p.hasPrefix(i+1, n, c) {
				return i + 1 + len(c)
			}
		}
	}
	// An optional space, then a run of letters, of digits or of other
	// characters that are neither.
	if r == ' ' && i+size < n {
		r2, _ := p.at(i + size)
		if c := classOf(r2); c != classSpace {
			return p.run(i+size, n, c)
		}
	}
	if c := classOf(r); c != classSpace {
		return p.run(i, n, c)
	}
	// Whitespace: the run, less its last character when a non-space
	// follows it (that one goes with the next pre-token, or stands
	// alone before a non-space it cannot join).
	k := p.run(i, n, classSpace)
	if k == n {
		return k
	}
	if last := p.lastStart(i, k); last > i {
		return last
	}
	return k
}

// run returns the end of the run of characters of class c from i.
func (p *preTokens) run(i, n, c int) int {
	for i < n {
		r, size := p.at(i)
		if classOf(r) != c {
			break
		}
		i += size
	}
	return i
}

// lastStart returns the position of the last character of [i, k).
func (p *preTokens) lastStart(i, k int) int {
	last := i
	for x := i; x < k; {
		_, size := p.at(x)
		last = x
		x += size
	}
	return last
}

// hasPrefix reports whether the text at i starts with the ASCII string c.
func (p *preTokens) hasPrefix(i, n int, c string) bool {
	if i+len(c) > n {
		return false
	}
	for k := 0; k < len(c); k++ {
		r, _ := p.at(i + k)
		if r != rune(c[k]) {
			return false
		}
	}
	return true
}

// word emits the BPE tokens of one pre-token's bytes; it returns false
// when emit did.
func (b *bytePairs) word(t *Tokenizer, raw []byte, emit func(string, int64) bool) bool {
	if b.ignoreMerges {
		if id, ok := t.vocab[byteLevel(string(raw))]; ok {
			return emit(t.tokens[id], id)
		}
	}
	syms := make([]symbol, 0, len(raw))
	for _, c := range raw {
		if id := b.byteID[c]; id >= 0 {
			syms = append(syms, symbol{id: id, prev: len(syms) - 1, next: len(syms) + 1})
		}
	}
	if len(syms) == 0 {
		return true
	}
	syms[len(syms)-1].next = -1
	var q mergeQueue
	for i := 0; i+1 < len(syms); i++ {
		if m, ok := b.merges[[2]int64{syms[i].id, syms[i+1].id}]; ok {
			q = append(q, candidate{rank: m.rank, pos: i, left: syms[i].id, right: syms[i+1].id, id: m.id})
		}
	}
	heap.Init(&q)
	for q.Len() > 0 {
		c := heap.Pop(&q).(candidate)
		s := &syms[c.pos]
		// Stale: one side was merged into something else since.
		if s.gone || s.id != c.left || s.next < 0 || syms[s.next].id != c.right {
			continue
		}
		r := s.next
		s.id = c.id
		s.next = syms[r].next
		syms[r].gone = true
		if s.next >= 0 {
			syms[s.next].prev = c.pos
		}
		if s.prev >= 0 {
			if m, ok := b.merges[[2]int64{syms[s.prev].id, s.id}]; ok {
				heap.Push(&q, candidate{rank: m.rank, pos: s.prev, left: syms[s.prev].id, right: s.id, id: m.id})
			}
		}
		if s.next >= 0 {
			if m, ok := b.merges[[2]int64{s.id, syms[s.next].id}]; ok {
				heap.Push(&q, candidate{rank: m.rank, pos: c.pos, left: s.id, right: syms[s.next].id, id: m.id})
			}
		}
	}
	for i := 0; i >= 0 && i < len(syms); i = syms[i].next {
		if !emit(t.tokens[syms[i].id], syms[i].id) {
			return false
		}
	}
	return true
}

// A symbol is one part of a word being merged, in a list linked by
// index.
type symbol struct {
	id         int64
	prev, next int
	gone       bool // merged into the symbol before it
}

// A candidate is a merge of the symbols at pos and the one after it,
// valid while they still hold left and right.
type candidate struct {
	rank        int32
	pos         int
	left, right int64
	id          int64
}

// mergeQueue orders candidates by rank, then position: the reference's
// order.
type mergeQueue []candidate

func (q mergeQueue) Len() int { return len(q) }
func (q mergeQueue) Less(i, j int) bool {
	if q[i].rank != q[j].rank {
		return q[i].rank < q[j].rank
	}
	return q[i].pos < q[j].pos
}
func (q mergeQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *mergeQueue) Push(x any)   { *q = append(*q, x.(candidate)) }
func (q *mergeQueue) Pop() any {
	old := *q
	c := old[len(old)-1]
	*q = old[:len(old)-1]
	return c
}
