package tokenize

import (
	"errors"
	"fmt"
	"strings"
	"unicode"

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

// WordPiece is a BERT tokenizer. It is safe for concurrent use.
type WordPiece struct {
	opt     Options
	vocab   map[string]int64
	tokens  []string // id → token
	special []string // tokens matched verbatim in raw text, longest first
	unk     int64
	cls     int64
	sep     int64
	pad     int64
}

// New builds a tokenizer from a vocabulary (token → id) and options. Every
// special token named in opt except Mask must be in the vocabulary.
func New(vocab map[string]int64, opt Options) (*WordPiece, error) {
	if len(vocab) == 0 {
		return nil, errors.New("tokenize: empty vocabulary")
	}
	if opt.MaxWordChars <= 0 {
		return nil, fmt.Errorf("tokenize: MaxWordChars %d must be positive", opt.MaxWordChars)
	}
	t := &WordPiece{opt: opt, vocab: vocab}
	var max int64 = -1
	for tok, id := range vocab {
		if id < 0 {
			return nil, fmt.Errorf("tokenize: token %q has negative id %d", tok, id)
		}
		if id > max {
			max = id
		}
	}
	if max >= int64(len(vocab))*4+1024 {
		return nil, fmt.Errorf("tokenize: ids up to %d for %d tokens: vocabulary too sparse", max, len(vocab))
	}
	t.tokens = make([]string, max+1)
	for tok, id := range vocab {
		t.tokens[id] = tok
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

// Options returns the tokenizer's settings.
func (t *WordPiece) Options() Options { return t.opt }

// VocabSize is one more than the largest id.
func (t *WordPiece) VocabSize() int { return len(t.tokens) }

// ID returns the id of a token.
func (t *WordPiece) ID(token string) (int64, bool) {
	id, ok := t.vocab[token]
	return id, ok
}

// Token returns the token with the given id, or "" when there is none.
func (t *WordPiece) Token(id int64) string {
	if id < 0 || id >= int64(len(t.tokens)) {
		return ""
	}
	return t.tokens[id]
}

// PadID is the id used for padding.
func (t *WordPiece) PadID() int64 { return t.pad }

// Tokenize splits text into WordPiece tokens, without [CLS]/[SEP]. Special
// tokens written literally in the text (e.g. "[MASK]") are kept whole, as
// the reference tokenizers do.
func (t *WordPiece) Tokenize(text string) []string {
	var out []string
	t.each(text, func(tok string, _ int64) { out = append(out, tok) })
	return out
}

// IDs returns the ids of Tokenize(text).
func (t *WordPiece) IDs(text string) []int64 {
	var out []int64
	t.each(text, func(_ string, id int64) { out = append(out, id) })
	return out
}

func (t *WordPiece) each(text string, emit func(string, int64)) {
	for len(text) > 0 {
		// Find the earliest special token; the text before it is ordinary.
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
		for _, w := range t.words(plain) {
			t.wordPiece(w, emit)
		}
		if at < 0 {
			return
		}
		emit(which, t.vocab[which])
		text = text[at+len(which):]
	}
}

// words normalises text and splits it on whitespace and punctuation.
func (t *WordPiece) words(text string) []string {
	var b strings.Builder
	for _, r := range text {
		if t.opt.CleanText {
			if r == 0 || r == 0xfffd || isControl(r) {
				continue
			}
			if isSpace(r) {
				r = ' '
			}
		}
		if t.opt.ChineseChars && isCJK(r) {
			b.WriteByte(' ')
			b.WriteRune(r)
			b.WriteByte(' ')
			continue
		}
		b.WriteRune(r)
	}
	s := b.String()
	if t.opt.StripAccents {
		b.Reset()
		for _, r := range norm.NFD.String(s) {
			if !unicode.Is(unicode.Mn, r) {
				b.WriteRune(r)
			}
		}
		s = b.String()
	}
	if t.opt.Lower {
		b.Reset()
		for _, r := range s {
			if r == 'İ' { // the one unconditional multi-rune lower-case mapping
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

// wordPiece splits one word greedily into the longest vocabulary entries,
// left to right; a word that cannot be split becomes the unknown token.
func (t *WordPiece) wordPiece(word string, emit func(string, int64)) {
	runes := []rune(word)
	if len(runes) > t.opt.MaxWordChars {
		emit(t.opt.Unknown, t.unk)
		return
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
			emit(t.opt.Unknown, t.unk)
			return
		}
		start = end
	}
	for _, p := range pieces {
		emit(p.tok, p.id)
	}
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
	if r < 0x80 {
		return true
	}
	for _, tab := range unicode.Categories {
		if unicode.Is(tab, r) {
			return true
		}
	}
	return false
}

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
