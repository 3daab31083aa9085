package tokenize

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"

	"golang.org/x/text/unicode/norm"
)

// loadUnigram reads a tokenizer.json whose model is SentencePiece
// Unigram, in the forms XLM-RoBERTa's conversion writes: a normaliser that
// is Precompiled (SentencePiece's charsmap), Replace, Strip or a Unicode
// form, alone or in a Sequence; a Metaspace pre-tokenizer (prepend_scheme
// always, first or never, or the older add_prefix_space), alone or after
// a WhitespaceSplit; a Unigram model without byte fallback; the frame of
// a RobertaProcessing or TemplateProcessing post-processor. Anything else
// is refused by name.
func loadUnigram(path string, data []byte) (*Tokenizer, error) {
	var j struct {
		Model struct {
			Vocab        [][2]json.RawMessage `json:"vocab"`
			Unk          *int64               `json:"unk_id"`
			ByteFallback bool                 `json:"byte_fallback"`
		} `json:"model"`
		Normalizer   json.RawMessage `json:"normalizer"`
		PreTokenizer json.RawMessage `json:"pre_tokenizer"`
		fastParts
	}
	if err := json.Unmarshal(data, &j); err != nil {
		return nil, fmt.Errorf("tokenize: %s: %w", path, err)
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("tokenize: %s: Unigram: "+format, append([]any{path}, a...)...)
	}
	m := j.Model
	switch {
	case m.ByteFallback:
		return nil, bad("byte_fallback is not supported")
	case len(m.Vocab) == 0:
		return nil, bad("empty vocabulary")
	case m.Unk == nil || *m.Unk < 0 || *m.Unk >= int64(len(m.Vocab)):
		return nil, bad("unk_id missing or out of the vocabulary")
	}
	u := &unigram{pieces: make(map[string]int64, len(m.Vocab)), scores: make([]float64, len(m.Vocab)), unk: *m.Unk}
	vocab := make(map[string]int64, len(m.Vocab))
	for id, e := range m.Vocab {
		var piece string
		var score float64
		if json.Unmarshal(e[0], &piece) != nil || json.Unmarshal(e[1], &score) != nil || math.IsNaN(score) || math.IsInf(score, 0) {
			return nil, bad("vocabulary entry %d is not [piece, score]", id)
		}
		if _, dup := u.pieces[piece]; !dup {
			u.pieces[piece] = int64(id)
			vocab[piece] = int64(id)
		}
		u.scores[id] = score
		u.longest = min(max(u.longest, len(piece)), maxPiece)
	}
	u.unkScore = minScore(u.scores) - 10
	var err error
	if u.steps, err = normSteps(j.Normalizer); err != nil {
		return nil, bad("%v", err)
	}
	if u.meta, err = parseMetaspace(j.PreTokenizer); err != nil {
		return nil, bad("%v", err)
	}
	u.keepsASCII = true
	for c := byte(' '); c < 0x7f; c++ {
		if s := string(rune(c)); u.normalize(s) != s {
			u.keepsASCII = false
		}
	}
	added, err := j.addTokens(vocab, len(u.steps) == 0)
	if err != nil {
		return nil, bad("%v", err)
	}
	t := &Tokenizer{vocab: vocab, added: added, uni: u}
	if err := t.setTokens(); err != nil {
		return nil, bad("%v", err)
	}
	if err := t.frame(path, &j.fastParts, t.tokens[u.unk]); err != nil {
		return nil, bad("%v", err)
	}
	return t, nil
}

// maxPiece bounds the bytes of a vocabulary entry Viterbi looks for, so
// that a file with a huge entry cannot make each position cost that many
// lookups. SentencePiece's entries are 16 characters at most by default
// (max_sentencepiece_length); a longer entry is never matched.
const maxPiece = 256

// normSteps reads a normaliser: null, one step or a Sequence of steps.
func normSteps(raw json.RawMessage) ([]normStep, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var n struct {
		Type        string            `json:"type"`
		Normalizers []json.RawMessage `json:"normalizers"`
		Charsmap    *string           `json:"precompiled_charsmap"`
		Pattern     struct {
			String *string `json:"String"`
			Regex  *string `json:"Regex"`
		} `json:"pattern"`
		Content string `json:"content"`
		Left    bool   `json:"strip_left"`
		Right   bool   `json:"strip_right"`
	}
	if err := json.Unmarshal(raw, &n); err != nil {
		return nil, fmt.Errorf("normalizer: %w", err)
	}
	switch n.Type {
	case "Sequence":
		var steps []normStep
		for _, r := range n.Normalizers {
			s, err := normSteps(r)
			if err != nil {
				return nil, err
			}
			steps = append(steps, s...)
		}
		return steps, nil
	case "Precompiled":
		if n.Charsmap == nil || *n.Charsmap == "" {
			return nil, nil // no charsmap: no normalisation
		}
		b, err := base64.StdEncoding.DecodeString(*n.Charsmap)
		if err != nil {
			return nil, fmt.Errorf("precompiled_charsmap: %w", err)
		}
		p, err := parsePrecompiled(b)
		if err != nil {
			return nil, err
		}
		return []normStep{p}, nil
	case "Replace":
		switch {
		case n.Pattern.String != nil && *n.Pattern.String != "":
			return []normStep{replace{literal: *n.Pattern.String, content: n.Content}}, nil
		case n.Pattern.Regex != nil:
			re, err := regexp.Compile(*n.Pattern.Regex)
			if err != nil {
				return nil, fmt.Errorf("normalizer Replace: pattern %q: %w", *n.Pattern.Regex, err)
			}
			return []normStep{replace{re: re, content: n.Content}}, nil
		}
		return nil, errors.New("normalizer Replace without a pattern")
	case "Strip":
		return []normStep{strip{left: n.Left, right: n.Right}}, nil
	case "NFC":
		return []normStep{unicodeForm{norm.NFC}}, nil
	case "NFD":
		return []normStep{unicodeForm{norm.NFD}}, nil
	case "NFKC":
		return []normStep{unicodeForm{norm.NFKC}}, nil
	case "NFKD":
		return []normStep{unicodeForm{norm.NFKD}}, nil
	}
	return nil, fmt.Errorf("normalizer %q is not supported", n.Type)
}

// parseMetaspace reads the pre-tokenizer: Metaspace, or a Sequence of
// WhitespaceSplit and Metaspace (the older conversion).
func parseMetaspace(raw json.RawMessage) (metaspace, error) {
	var p struct {
		Type          string            `json:"type"`
		Replacement   string            `json:"replacement"`
		PrependScheme string            `json:"prepend_scheme"`
		PrefixSpace   *bool             `json:"add_prefix_space"`
		Split         *bool             `json:"split"`
		PreTokenizers []json.RawMessage `json:"pretokenizers"`
	}
	if len(raw) == 0 || string(raw) == "null" {
		return metaspace{}, fmt.Errorf("no pre_tokenizer: only Metaspace is supported")
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return metaspace{}, fmt.Errorf("pre_tokenizer: %w", err)
	}
	if p.Type == "Sequence" {
		var first struct {
			Type string `json:"type"`
		}
		if len(p.PreTokenizers) != 2 || json.Unmarshal(p.PreTokenizers[0], &first) != nil || first.Type != "WhitespaceSplit" {
			return metaspace{}, fmt.Errorf("pre_tokenizer Sequence: only WhitespaceSplit then Metaspace is supported")
		}
		m, err := parseMetaspace(p.PreTokenizers[1])
		if err != nil {
			return m, err
		}
		m.whitespaceSplit = true
		return m, nil
	}
	if p.Type != "Metaspace" {
		return metaspace{}, fmt.Errorf("pre_tokenizer %q: only Metaspace is supported", p.Type)
	}
	m := metaspace{replacement: p.Replacement, prepend: p.PrependScheme, split: p.Split == nil || *p.Split}
	if m.replacement == "" {
		m.replacement = "▁"
	}
	if m.prepend == "" {
		m.prepend = "always"
		if p.PrefixSpace != nil && !*p.PrefixSpace {
			m.prepend = "never"
		}
	}
	switch m.prepend {
	case "always", "first", "never":
	default:
		return m, fmt.Errorf("pre_tokenizer Metaspace: prepend_scheme %q is not supported", m.prepend)
	}
	return m, nil
}
