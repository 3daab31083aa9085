package tokenize

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Options configures normalisation and special tokens. The zero value is
// not useful; start from DefaultOptions.
type Options struct {
	// Lower lower-cases the text (uncased models).
	Lower bool
	// StripAccents removes combining marks after canonical decomposition.
	// Hugging Face's default (strip_accents: null) follows Lower.
	StripAccents bool
	// ChineseChars splits CJK ideographs into tokens of their own.
	ChineseChars bool
	// CleanText removes control characters and maps whitespace to spaces.
	CleanText bool
	// MaxWordChars: words longer than this (in characters) become Unknown.
	MaxWordChars int
	// Prefix marks a subword that continues a word ("##").
	Prefix string
	// Special tokens.
	Unknown, Classify, Separator, Pad, Mask string
}

// DefaultOptions are the settings of bert-base-uncased and its descendants.
func DefaultOptions() Options {
	return Options{
		Lower: true, StripAccents: true, ChineseChars: true, CleanText: true,
		MaxWordChars: 100, Prefix: "##",
		Unknown: "[UNK]", Classify: "[CLS]", Separator: "[SEP]", Pad: "[PAD]", Mask: "[MASK]",
	}
}

// Tokenizer is a BERT WordPiece, a byte-level BPE or a SentencePiece
// Unigram tokenizer (Kind). It is safe for concurrent use.
type Tokenizer struct {
	opt     Options
	vocab   map[string]int64
	tokens  []string // id → token
	special []string // tokens matched verbatim in raw text, longest first
	unk     int64
	cls     int64
	sep     int64
	pad     int64
	// bpe, when set, makes this a byte-level BPE tokenizer: added tokens
	// are matched in the raw text (added), the rest is split by bpe; opt
	// then names only the special tokens.
	bpe   *bytePairs
	added []addedToken
	// uni, when set, makes this a SentencePiece Unigram tokenizer, with
	// added tokens as for bpe.
	uni *unigram
}

// New builds a tokenizer from a vocabulary (token → id) and options. Every
// special token named in opt except Mask must be in the vocabulary.
func New(vocab map[string]int64, opt Options) (*Tokenizer, error) {
	if len(vocab) == 0 {
		return nil, errors.New("tokenize: empty vocabulary")
	}
	if opt.MaxWordChars <= 0 {
		return nil, fmt.Errorf("tokenize: MaxWordChars %d must be positive", opt.MaxWordChars)
	}
	t := &Tokenizer{opt: opt, vocab: vocab}
	if err := t.setTokens(); err != nil {
		return nil, fmt.Errorf("tokenize: %w", err)
	}
	for _, s := range []struct {
		name string
		tok  string
		dst  *int64
	}{{"unknown", opt.Unknown, &t.unk}, {"classify", opt.Classify, &t.cls}, {"separator", opt.Separator, &t.sep}, {"pad", opt.Pad, &t.pad}} {
		id, ok := vocab[s.tok]
		if !ok {
			return nil, fmt.Errorf("tokenize: %s token %q not in vocabulary", s.name, s.tok)
		}
		*s.dst = id
	}
	for _, s := range []string{opt.Pad, opt.Unknown, opt.Classify, opt.Separator, opt.Mask} {
		if _, ok := vocab[s]; ok && s != "" {
			t.special = append(t.special, s)
		}
	}
	return t, nil
}

// setTokens fills t.tokens, the id → token table of t.vocab.
func (t *Tokenizer) setTokens() error {
	var top int64 = -1
	for tok, id := range t.vocab {
		if id < 0 {
			return fmt.Errorf("token %q has negative id %d", tok, id)
		}
		top = max(top, id)
	}
	if top >= int64(len(t.vocab))*4+1024 {
		return fmt.Errorf("ids up to %d for %d tokens: vocabulary too sparse", top, len(t.vocab))
	}
	t.tokens = make([]string, top+1)
	// In name order, so that two names of one id leave the same one
	// whatever order the map gives.
	names := make([]string, 0, len(t.vocab))
	for tok := range t.vocab {
		names = append(names, tok)
	}
	sort.Strings(names)
	for _, tok := range names {
		t.tokens[t.vocab[tok]] = tok
	}
	return nil
}

// Options returns the tokenizer's settings.
func (t *Tokenizer) Options() Options { return t.opt }

// Kind names the tokenizer's algorithm: "WordPiece", "byte-level BPE" or
// "Unigram".
func (t *Tokenizer) Kind() string {
	switch {
	case t.bpe != nil:
		return "byte-level BPE"
	case t.uni != nil:
		return "Unigram"
	}
	return "WordPiece"
}

// SpaceBlind reports whether white space before a text changes none of
// its tokens: true for WordPiece, which splits at white space before
// anything else; false for byte-level BPE and Unigram, which mark a word
// that follows a space.
func (t *Tokenizer) SpaceBlind() bool { return t.bpe == nil && t.uni == nil }

// VocabSize is one more than the largest id.
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// ID returns the id of a token.
func (t *Tokenizer) ID(token string) (int64, bool) {
	id, ok := t.vocab[token]
	return id, ok
}

// Token returns the token with the given id, or "" when there is none.
func (t *Tokenizer) Token(id int64) string {
	if id < 0 || id >= int64(len(t.tokens)) {
		return ""
	}
	return t.tokens[id]
}

// PadID is the id used for padding.
func (t *Tokenizer) PadID() int64 { return t.pad }

// Tokenize splits text into tokens, without the [CLS]/[SEP] frame.
// Special tokens written literally in the text (e.g. "[MASK]") are kept
// whole, as the reference tokenizers do.
func (t *Tokenizer) Tokenize(text string) []string {
	var out []string
	t.each(text, func(tok string, _ int64) bool { out = append(out, tok); return true })
	return out
}

// IDs returns the ids of Tokenize(text).
func (t *Tokenizer) IDs(text string) []int64 { return t.IDsLimit(text, 0) }

// IDsLimit returns the ids of the first n wordpieces of Tokenize(text)
// (n ≤ 0: all of them). It reads only as much of the text as those n
// need: a text of any length with a small n takes time and memory
// bounded by n and the longest word (at most MaxWordChars characters are
// kept of a word; a longer one is [UNK]), never by the text's length.
// A byte-level BPE or Unigram tokenizer keeps the memory bound (it works
// on parts of at most 16 KiB), but looks for each of its added tokens
// once through the rest of the text: its time grows with the text's
// length, by one search per added token.
func (t *Tokenizer) IDsLimit(text string, n int) []int64 {
	var out []int64
	if n > 0 {
		out = make([]int64, 0, min(n, 1024))
	}
	t.each(text, func(_ string, id int64) bool {
		out = append(out, id)
		return n <= 0 || len(out) < n
	})
	return out
}

// streamChunk is how many bytes of text each step of each reads (tests
// make it small to cut the text at every place).
var streamChunk = 4 << 10

// each calls emit with every wordpiece of text in order, until emit
// returns false. The text is read in pieces of streamChunk bytes, so
// stopping early leaves the rest of the text unread: what it allocates is
// bounded by the pieces emitted, not by the text.
func (t *Tokenizer) each(text string, emit func(string, int64) bool) {
	switch {
	case t.bpe != nil:
		t.eachBPE(text, func(tok string, id int64, _, _ int) bool { return emit(tok, id) })
		return
	case t.uni != nil:
		t.eachUnigram(text, func(tok string, id int64, _, _ int) bool { return emit(tok, id) })
		return
	}
	longest := 0
	for _, s := range t.special {
		longest = max(longest, len(s))
	}
	s := stream{t: t, emit: emit}
	for pos := 0; pos < len(text) && !s.stop; {
		end := min(pos+streamChunk, len(text))
		for end < len(text) && !utf8.RuneStart(text[end]) {
			end++
		}
		// The earliest special token starting before end, the longest
		// at the same place; the search looks only far enough past end to
		// see a token that starts before it.
		window := text[pos:min(len(text), end+longest)]
		at, which := -1, ""
		for _, sp := range t.special {
			if i := strings.Index(window, sp); i >= 0 && pos+i < end && (at < 0 || pos+i < at || (pos+i == at && len(sp) > len(which))) {
				at, which = pos+i, sp
			}
		}
		if at < 0 {
			s.write(text[pos:end])
			pos = end
			continue
		}
		s.write(text[pos:at])
		s.flush()
		if s.stop || !emit(which, t.vocab[which]) {
			return
		}
		pos = at + len(which)
	}
	s.flush()
}

// stream turns a stretch of text without special tokens into wordpieces
// as it is written, piece by piece: it normalises the text (clean, CJK
// spacing, NFD and accent stripping, lower case: the steps of the
// reference, in its order) and splits it into words on whitespace and
// punctuation. Writing the text in any pieces gives the wordpieces of
// the whole: cleaned text waits for the next NFD boundary, and a word
// for its end.
type stream struct {
	t    *Tokenizer
	emit func(string, int64) bool
	stop bool // emit returned false

	clean []byte // cleaned text not yet normalised (after the last NFD boundary)
	nfd   []byte // scratch for its normalised form
	word  []byte // the word so far, at most MaxWordChars characters of it
	runes int    // characters of the word so far, counted past MaxWordChars
}

// write adds text (cut at a character boundary) to the stream.
func (s *stream) write(text string) {
	if s.stop || text == "" {
		return
	}
	o := &s.t.opt
	for i, r := range text {
		if r < utf8.RuneSelf { // the common case, without table lookups
			switch c := text[i]; {
			case o.CleanText && (c == '\t' || c == '\n' || c == '\r'):
				c = ' '
				fallthrough
			case c >= ' ' && c != 0x7f || !o.CleanText:
				s.clean = append(s.clean, c)
			}
			continue
		}
		if o.CleanText {
			if r == 0 || r == 0xfffd || isControl(r) {
				continue
			}
			if isSpace(r) {
				r = ' '
			}
		}
		if o.ChineseChars && isCJK(r) {
			s.clean = append(s.clean, ' ')
			s.clean = utf8.AppendRune(s.clean, r)
			s.clean = append(s.clean, ' ')
			continue
		}
		s.clean = utf8.AppendRune(s.clean, r)
	}
	if !o.StripAccents {
		s.feed(s.clean)
		s.clean = s.clean[:0]
		return
	}
	// Normalise up to the last boundary: what follows may still combine
	// with the next piece. A run without a boundary (thousands of
	// combining marks) is normalised as it stands once it is long.
	cut := norm.NFD.LastBoundary(s.clean)
	if cut <= 0 {
		if len(s.clean) < 4*streamChunk+64 {
			return
		}
		cut = len(s.clean)
	}
	s.normalise(s.clean[:cut])
	s.clean = s.clean[:copy(s.clean, s.clean[cut:])]
}

// flush ends the stretch: what waits is normalised and the last word
// ends.
func (s *stream) flush() {
	if len(s.clean) > 0 && !s.stop {
		if s.t.opt.StripAccents {
			s.normalise(s.clean)
		} else {
			s.feed(s.clean)
		}
	}
	s.clean = s.clean[:0]
	s.endWord()
}

// normalise feeds the NFD form of b without its combining marks.
func (s *stream) normalise(b []byte) {
	s.nfd = norm.NFD.Append(s.nfd[:0], b...)
	s.feed(s.nfd)
}

// feed splits normalised text (whole characters) into words, lower-
// casing and stripping accents as the options say.
func (s *stream) feed(b []byte) {
	o := &s.t.opt
	for len(b) > 0 && !s.stop {
		if c := b[0]; c < utf8.RuneSelf { // no accents, no tables
			b = b[1:]
			if o.Lower && 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			s.split(rune(c))
			continue
		}
		r, size := utf8.DecodeRune(b)
		b = b[size:]
		if o.StripAccents && unicode.Is(unicode.Mn, r) {
			continue
		}
		if o.Lower {
			if r == 'İ' { // the one unconditional multi-rune lower-case mapping
				s.split('i')
				s.split('\u0307')
				continue
			}
			r = unicode.ToLower(r)
		}
		s.split(r)
	}
}

// split adds one normalised character to the words.
func (s *stream) split(r rune) {
	if r < utf8.RuneSelf && asciiLetter[r] {
		s.runes++
		switch {
		case s.runes <= s.t.opt.MaxWordChars:
			s.word = append(s.word, byte(r))
		case s.runes == s.t.opt.MaxWordChars+1:
			s.stop = !s.emit(s.t.opt.Unknown, s.t.unk)
		}
		return
	}
	switch {
	case isSpace(r):
		s.endWord()
	case isPunct(r):
		s.endWord()
		if !s.stop {
			var b [utf8.UTFMax]byte
			s.stop = !s.t.wordPiece(string(b[:utf8.EncodeRune(b[:], r)]), s.emit)
		}
	default:
		s.runes++
		switch {
		case s.runes <= s.t.opt.MaxWordChars:
			s.word = utf8.AppendRune(s.word, r)
		case s.runes == s.t.opt.MaxWordChars+1:
			// The word is [UNK] whatever follows: say so now, so that a
			// limit reached here reads no more of it.
			s.stop = !s.emit(s.t.opt.Unknown, s.t.unk)
		}
	}
}

// asciiLetter marks the ASCII characters that are part of a word (not
// space, punctuation or a control character).
var asciiLetter = func() (a [utf8.RuneSelf]bool) {
	for r := range rune(utf8.RuneSelf) {
		a[r] = !isSpace(r) && !isPunct(r) && !isControl(r)
	}
	return a
}()

// endWord emits the wordpieces of the word so far (one longer than
// MaxWordChars was emitted as [UNK] when it grew past it).
func (s *stream) endWord() {
	if s.runes == 0 || s.stop {
		s.word, s.runes = s.word[:0], 0
		return
	}
	if s.runes <= s.t.opt.MaxWordChars { // a longer one was [UNK] already
		s.stop = !s.t.wordPiece(string(s.word), s.emit)
	}
	s.word, s.runes = s.word[:0], 0
}

// wordPiece splits one word greedily into the longest vocabulary entries,
// left to right; a word that cannot be split becomes the unknown token.
// It returns false when emit did.
func (t *Tokenizer) wordPiece(word string, emit func(string, int64) bool) bool {
	runes := []rune(word)
	if len(runes) > t.opt.MaxWordChars {
		return emit(t.opt.Unknown, t.unk)
	}
	type piece struct {
		tok string
		id  int64
	}
	var pieces []piece
	for start := 0; start < len(runes); {
		end := len(runes)
		found := false
		for ; end > start; end-- {
			sub := string(runes[start:end])
			if start > 0 {
				sub = t.opt.Prefix + sub
			}
			if id, ok := t.vocab[sub]; ok {
				pieces = append(pieces, piece{sub, id})
				found = true
				break
			}
		}
		if !found {
			return emit(t.opt.Unknown, t.unk)
		}
		start = end
	}
	for _, p := range pieces {
		if !emit(p.tok, p.id) {
			return false
		}
	}
	return true
}

// isSpace follows the reference: \t, \n, \r and Unicode White_Space.
func isSpace(r rune) bool {
	switch r {
	case ' ', '\t', '\n', '\r':
		return true
	}
	return unicode.IsSpace(r)
}

// isControl: Unicode "other" categories (Cc, Cf, Co, Cs, unassigned),
// except the whitespace controls \t, \n, \r.
func isControl(r rune) bool {
	switch r {
	case '\t', '\n', '\r':
		return false
	}
	if unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co, unicode.Cs) {
		return true
	}
	return !assigned(r)
}

func assigned(r rune) bool {
	return r < 0x80 || unicode.In(r, assignedTables...)
}

// assignedTables are the major categories, whose union is every assigned
// character (unicode.Categories' tables, seven lookups instead of forty).
var assignedTables = []*unicode.RangeTable{unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Z, unicode.C}

// isPunct: every ASCII non-alphanumeric printable character (so $ + < = > ^
// ` | ~ count) and the Unicode punctuation categories.
func isPunct(r rune) bool {
	if (r >= 33 && r <= 47) || (r >= 58 && r <= 64) || (r >= 91 && r <= 96) || (r >= 123 && r <= 126) {
		return true
	}
	return unicode.IsPunct(r)
}

// isCJK reports the CJK Unified Ideographs blocks BERT splits per character.
func isCJK(r rune) bool {
	return (r >= 0x4E00 && r <= 0x9FFF) ||
		(r >= 0x3400 && r <= 0x4DBF) ||
		(r >= 0x20000 && r <= 0x2A6DF) ||
		(r >= 0x2A700 && r <= 0x2B73F) ||
		(r >= 0x2B740 && r <= 0x2B81F) ||
		(r >= 0x2B820 && r <= 0x2CEAF) ||
		(r >= 0xF900 && r <= 0xFAFF) ||
		(r >= 0x2F800 && r <= 0x2FA1F)
}
