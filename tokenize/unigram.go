package tokenize

import (
	"encoding/binary"
	"errors"
	"math"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/rivo/uniseg"
	"golang.org/x/text/unicode/norm"
)

// unigram is a SentencePiece Unigram model with the normaliser and the
// Metaspace pre-tokenizer in front of it, as XLM-RoBERTa's tokenizer.json
// (bge-m3, jina-embeddings-v3, multilingual-e5) writes them: each stretch
// of text between added tokens is normalised (steps), its spaces become
// the meta symbol and it is cut before each meta symbol (meta), and each
// piece is split by Viterbi into the vocabulary entries of highest total
// score, characters no entry covers becoming the unknown token.
type unigram struct {
	steps []normStep
	meta  metaspace
	// pieces maps a vocabulary entry to its id; scores are by id.
	pieces  map[string]int64
	scores  []float64
	longest int // bytes of the longest entry
	unk     int64
	// unkScore is what an unknown character scores: the lowest score
	// less 10, the reference's penalty.
	unkScore float64
	// keepsASCII: the normaliser leaves every printable ASCII character
	// and the space as they are (safeCut's common case).
	keepsASCII bool
}

// A normStep is one normaliser of the sequence; first and last say
// whether s begins or ends the stretch of text being normalised (Strip
// looks at them).
type normStep interface {
	apply(s string, first, last bool) string
}

// metaspace is the Metaspace pre-tokenizer: spaces become replacement,
// which is written before the stretch (prepend: "always", "first": only
// before the text's first stretch, "never"), and the stretch is cut
// before each replacement when split is set. whitespaceSplit is the
// older form, a WhitespaceSplit before a Metaspace that adds the prefix:
// words split at any whitespace, each with the replacement before it.
type metaspace struct {
	replacement     string
	prepend         string
	split           bool
	whitespaceSplit bool
}

// eachUnigram calls emit with every token of text, until emit returns
// false.
func (t *Tokenizer) eachUnigram(text string, emit func(tok string, id int64, start, end int) bool) {
	t.eachAdded(text, func(from, to int) bool { return t.uni.stretch(t, text, from, to, emit) }, emit)
}

// maxStretch bounds the bytes of text normalised at once: a stretch is
// cut before whitespace where normalising and splitting the parts gives
// what the whole gives (safeCut), and a longer run with
// no such space is cut at a character cluster after maxStretch bytes
// (there the tokens may differ from the reference's, which reads the run
// whole).
var maxStretch = 16 << 10 // a variable for the tests

// stretch tokenizes text[from:to], text between added tokens, in parts
// of at most about maxStretch bytes; it returns false when emit did.
func (u *unigram) stretch(t *Tokenizer, text string, from, to int, emit func(string, int64, int, int) bool) bool {
	for at := from; at < to; {
		end := u.cutStretch(text, at, to)
		ok := u.part(t, text[at:end], at == from, end == to, at == from && u.prepends(from), func(tok string, id int64) bool {
			return emit(tok, id, at, end)
		})
		if !ok {
			return false
		}
		at = end
	}
	return true
}

// prepends reports whether the Metaspace writes its replacement before a
// stretch of text that starts at byte from.
func (u *unigram) prepends(from int) bool {
	return u.meta.prepend == "always" || u.meta.prepend == "first" && from == 0
}

// part normalises s (first and last: whether it starts and ends its
// stretch), writes its Metaspace pieces (with the replacement before them
// when prepend is set) and emits their tokens; it returns false when emit
// did.
func (u *unigram) part(t *Tokenizer, s string, first, last, prepend bool, emit func(string, int64) bool) bool {
	for _, st := range u.steps {
		s = st.apply(s, first, last)
	}
	return u.meta.pieces(s, prepend, func(piece string) bool { return u.viterbi(t, piece, emit) })
}

// spansUnigram is SpansLimit for a Unigram tokenizer. The text between
// added tokens is cut into the parts stretch tokenizes, and those at
// every safeCut, where the pieces tokenize as they do in the whole; a part's words are
// tokenized one by one, each with the whitespace before it, and are its
// spans when their pieces sum to the part's (the normaliser kept the
// words apart); otherwise the part is one span. Whitespace that no word
// follows counts with the last span; an added token is a span.
func (t *Tokenizer) spansUnigram(text string, n int) []Span {
	c := spanCount{n: n}
	scan := newAddedScan(t.added, text)
	u := t.uni
	// tokens counts the tokens of text[a:b] within the stretch [from, to).
	tokens := func(a, b, from, to int) int {
		k := 0
		u.part(t, text[a:b], a == from, b == to, a == from && u.prepends(from), func(string, int64) bool { k++; return true })
		return k
	}
	for pos := 0; pos <= len(text); {
		start, end, k := scan.find(pos)
		// The parts stretch cuts the text into, each cut further at every
		// safeCut: the same tokens, word by word where possible.
		for a, part := pos, pos; a < start; {
			if a == part {
				part = u.cutStretch(text, a, start)
			}
			b := u.nextCut(text, a, part)
			words := wordsIn(text, a, b)
			sum := 0
			pieces := make([]int, len(words))
			for i, w := range words {
				from := a
				if i > 0 {
					from = words[i-1][1]
				}
				to := w[1]
				if i == len(words)-1 {
					to = b
				}
				pieces[i] = tokens(from, to, pos, start)
				sum += pieces[i]
			}
			all := sum
			if len(words) != 1 {
				all = tokens(a, b, pos, start)
			}
			switch {
			case len(words) == 0:
				c.add(a, a, all)
			case sum == all:
				for i, w := range words {
					if !c.add(w[0], w[1], pieces[i]) {
						return c.out
					}
				}
			default:
				if !c.add(words[0][0], words[len(words)-1][1], all) {
					return c.out
				}
			}
			a = b
		}
		if k < 0 {
			break
		}
		if !c.add(skipSpace(text, start, end), end, 1) {
			return c.out
		}
		pos = end
	}
	return c.spans(text)
}

// nextCut returns the first safeCut in text[at+1:to], or to.
func (u *unigram) nextCut(text string, at, to int) int {
	for i := at + 1; i < to; i++ {
		if u.safeCut(text, i) {
			return i
		}
	}
	return to
}

// wordsIn returns the byte ranges of the whitespace-delimited words of
// text[a:b].
func wordsIn(text string, a, b int) [][2]int {
	var out [][2]int
	for i := skipSpace(text, a, b); i < b; i = skipSpace(text, i, b) {
		end := skipWord(text, i, b)
		out = append(out, [2]int{i, end})
		i = end
	}
	return out
}

// cutStretch returns where the part of text[at:to] starting at at ends:
// at the first safeCut past maxStretch/2 bytes, else
// at a character cluster after maxStretch bytes, else at to.
func (u *unigram) cutStretch(text string, at, to int) int {
	if to-at <= maxStretch {
		return to
	}
	for i := at + maxStretch/2; i < min(to, at+maxStretch); i++ {
		if u.safeCut(text, i) {
			return i
		}
	}
	end := at
	state := -1
	rest := text[at:to]
	for end-at < maxStretch && rest != "" {
		var c string
		c, rest, _, state = uniseg.FirstGraphemeClusterInString(rest, state)
		end += len(c)
	}
	return end
}

// firstRune is the first character of s.
func firstRune(s string) rune {
	r, _ := utf8.DecodeRuneInString(s)
	return r
}

// safeCut reports whether text may be cut before byte i: the character
// there normalises to a space, and the one before it to text that does
// not end in whitespace. Normalising the parts then gives what the whole
// gives (the normalisers read here work on one character cluster at a
// time, and whitespace starts a cluster), no run of spaces that Replace
// folds spans the cut, and the cut falls where Metaspace and
// WhitespaceSplit cut too. A space after printable ASCII, which every
// normaliser read here leaves as it is, is the common case.
func (u *unigram) safeCut(text string, i int) bool {
	if i <= 0 || i >= len(text) || !utf8.RuneStart(text[i]) {
		return false
	}
	if text[i] == ' ' && text[i-1] > ' ' && text[i-1] < 0x7f && u.keepsASCII {
		return true
	}
	r, size := utf8.DecodeRuneInString(text[i:])
	if !isSpace(r) || u.normalize(text[i:i+size]) != " " {
		return false
	}
	p, psize := utf8.DecodeLastRuneInString(text[:i])
	if isSpace(p) || p == utf8.RuneError && psize <= 1 {
		return false
	}
	n := u.normalize(text[i-psize : i])
	last, _ := utf8.DecodeLastRuneInString(n)
	return n != "" && !isSpace(last)
}

// normalize applies the normaliser to s, a piece inside a stretch.
func (u *unigram) normalize(s string) string {
	for _, st := range u.steps {
		s = st.apply(s, false, false)
	}
	return s
}

// pieces writes the Metaspace form of normalised text s and calls f with
// each piece; it returns false when f did.
func (m metaspace) pieces(s string, first bool, f func(string) bool) bool {
	if m.whitespaceSplit {
		// Each word gets the replacement before it ("always"), or only a
		// word at the start of the text ("first", when first is set).
		atStart := first && s != "" && !isSpace(firstRune(s))
		for i, w := range strings.FieldsFunc(s, isSpace) {
			if m.prepend == "always" || i == 0 && atStart {
				w = m.replacement + w
			}
			if !f(w) {
				return false
			}
		}
		return true
	}
	s = strings.ReplaceAll(s, " ", m.replacement)
	if s == "" {
		return true
	}
	if first && !strings.HasPrefix(s, m.replacement) {
		s = m.replacement + s
	}
	if !m.split {
		return f(s)
	}
	// Cut before every replacement but one at the start: each piece but
	// perhaps the first starts with it.
	for start := 0; ; {
		j := strings.Index(s[start+1:], m.replacement)
		if j < 0 {
			return f(s[start:])
		}
		if !f(s[start : start+1+j]) {
			return false
		}
		start += 1 + j
	}
}

// viterbi splits one piece into the entries of highest total score and
// emits them; it returns false when emit did.
func (u *unigram) viterbi(t *Tokenizer, s string, emit func(string, int64) bool) bool {
	if s == "" {
		return true
	}
	type node struct {
		score float64
		from  int // where the best entry ending here starts, −1: unreached
		id    int64
	}
	best := make([]node, len(s)+1)
	for i := range best {
		best[i].from = -1
	}
	best[0].from = 0
	for at := 0; at < len(s); {
		_, size := utf8.DecodeRuneInString(s[at:])
		here := best[at].score
		single := false
		for n := 1; n <= u.longest && at+n <= len(s); n++ {
			id, ok := u.pieces[s[at:at+n]]
			if !ok {
				continue
			}
			if x := &best[at+n]; x.from < 0 || here+u.scores[id] > x.score {
				x.score, x.from, x.id = here+u.scores[id], at, id
			}
			if n == size {
				single = true
			}
		}
		if !single {
			if x := &best[at+size]; x.from < 0 || here+u.unkScore > x.score {
				x.score, x.from, x.id = here+u.unkScore, at, u.unk
			}
		}
		at += size
	}
	// Back from the end; a run of unknown characters is one token, as the
	// reference's Unigram always fuses them.
	var path []int // ends of the chosen entries, last first
	for end := len(s); end > 0; end = best[end].from {
		path = append(path, end)
	}
	for i := len(path) - 1; i >= 0; i-- {
		end := path[i]
		n := best[end]
		if n.id == u.unk {
			for i > 0 && best[path[i-1]].id == u.unk {
				i--
			}
			if !emit(t.tokens[u.unk], u.unk) {
				return false
			}
			continue
		}
		if !emit(t.tokens[n.id], n.id) {
			return false
		}
	}
	return true
}

// precompiled is SentencePiece's normaliser as tokenizer.json stores it
// (precompiled_charsmap): a double-array trie (Darts-clone's layout) from
// byte strings to offsets of their normalised forms in a table of
// NUL-terminated strings.
type precompiled struct {
	units []uint32
	table []byte
}

// parsePrecompiled reads a charsmap: the trie's size in bytes (uint32,
// little-endian), the trie's units, then the table.
func parsePrecompiled(b []byte) (*precompiled, error) {
	if len(b) < 4 {
		return nil, errors.New("precompiled_charsmap shorter than its header")
	}
	size := binary.LittleEndian.Uint32(b)
	if size%4 != 0 || uint64(size) > uint64(len(b)-4) || size == 0 {
		return nil, errors.New("precompiled_charsmap: trie size out of range")
	}
	p := &precompiled{units: make([]uint32, size/4), table: b[4+size:]}
	for i := range p.units {
		p.units[i] = binary.LittleEndian.Uint32(b[4+4*i:])
	}
	return p, nil
}

// lookup returns the normalised form of the shortest key that is a
// prefix of s (the reference takes the first match of a common-prefix
// search), or false.
func (p *precompiled) lookup(s string) (string, bool) {
	u := p.units
	at := uint32(0)
	unit := u[0]
	at ^= unitOffset(unit)
	for i := 0; i < len(s); i++ {
		at ^= uint32(s[i])
		if at >= uint32(len(u)) {
			return "", false
		}
		unit = u[at]
		if unitLabel(unit) != uint32(s[i]) {
			return "", false
		}
		at ^= unitOffset(unit)
		if at >= uint32(len(u)) {
			return "", false
		}
		if unit>>8&1 == 1 { // has a leaf: a key ends here
			v := int(u[at] & (1<<31 - 1))
			if v >= len(p.table) {
				return "", false
			}
			end := v
			for end < len(p.table) && p.table[end] != 0 {
				end++
			}
			return string(p.table[v:end]), true
		}
	}
	return "", false
}

func unitOffset(u uint32) uint32 { return (u >> 10) << ((u & (1 << 9)) >> 6) }
func unitLabel(u uint32) uint32  { return u & (1<<31 | 0xFF) }

// apply normalises s cluster by cluster, as the reference does: a
// cluster of fewer than 6 bytes is looked up whole, else (or when it has
// no entry) character by character.
func (p *precompiled) apply(s string, _, _ bool) string {
	var b strings.Builder
	b.Grow(len(s))
	state := -1
	for s != "" {
		var c string
		c, s, _, state = uniseg.FirstGraphemeClusterInString(s, state)
		if len(c) < 6 {
			if n, ok := p.lookup(c); ok {
				b.WriteString(n)
				continue
			}
		}
		for i := 0; i < len(c); {
			_, size := utf8.DecodeRuneInString(c[i:])
			part := c[i : i+size]
			i += size
			if n, ok := p.lookup(part); ok {
				b.WriteString(n)
			} else {
				b.WriteString(part)
			}
		}
	}
	return b.String()
}

// replace is the Replace normaliser: every match of a literal string or
// a regular expression becomes content.
type replace struct {
	literal string
	re      *regexp.Regexp
	content string
}

func (r replace) apply(s string, _, _ bool) string {
	if r.re != nil {
		return r.re.ReplaceAllLiteralString(s, r.content)
	}
	return strings.ReplaceAll(s, r.literal, r.content)
}

// strip is the Strip normaliser: whitespace off the left and right ends
// of the stretch.
type strip struct{ left, right bool }

func (st strip) apply(s string, first, last bool) string {
	if st.left && first {
		s = strings.TrimLeftFunc(s, isSpace)
	}
	if st.right && last {
		s = strings.TrimRightFunc(s, isSpace)
	}
	return s
}

// unicodeForm is a Unicode normalisation form (NFC, NFD, NFKC, NFKD).
type unicodeForm struct{ f norm.Form }

func (u unicodeForm) apply(s string, _, _ bool) string { return u.f.String(s) }

// minScore is the lowest of scores.
func minScore(scores []float64) float64 {
	m := math.Inf(1)
	for _, s := range scores {
		m = min(m, s)
	}
	return m
}
