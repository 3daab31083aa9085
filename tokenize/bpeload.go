package tokenize

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// loadBPE reads a tokenizer.json whose model is byte-level BPE, in the
// forms RoBERTa's and ModernBERT's files take: no normaliser; a ByteLevel
// pre-tokenizer with GPT-2's pattern (use_regex), with or without
// add_prefix_space; a BPE model with no unknown-token fallback by bytes,
// no dropout and no subword prefix or suffix; a RobertaProcessing or a
// TemplateProcessing post-processor whose single-text template is one
// special token, the text, one special token ([CLS] $A [SEP], <s> $A
// </s>). Anything else is refused by name rather than tokenized
// differently from the reference.
func loadBPE(path string, data []byte) (*Tokenizer, error) {
	var j struct {
		Model struct {
			Vocab        map[string]int64  `json:"vocab"`
			Merges       []json.RawMessage `json:"merges"`
			Unk          *string           `json:"unk_token"`
			Prefix       *string           `json:"continuing_subword_prefix"`
			Suffix       *string           `json:"end_of_word_suffix"`
			Dropout      *float64          `json:"dropout"`
			ByteFallback bool              `json:"byte_fallback"`
			IgnoreMerges bool              `json:"ignore_merges"`
		} `json:"model"`
		Normalizer   json.RawMessage `json:"normalizer"`
		PreTokenizer *struct {
			Type        string `json:"type"`
			PrefixSpace bool   `json:"add_prefix_space"`
			UseRegex    *bool  `json:"use_regex"`
		} `json:"pre_tokenizer"`
		fastParts
	}
	if err := json.Unmarshal(data, &j); err != nil {
		return nil, fmt.Errorf("tokenize: %s: %w", path, err)
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("tokenize: %s: BPE: "+format, append([]any{path}, a...)...)
	}
	m := j.Model
	switch {
	case len(j.Normalizer) > 0 && string(j.Normalizer) != "null":
		return nil, bad("a normalizer (%s) is not supported", abbreviate(j.Normalizer))
	case j.PreTokenizer == nil || j.PreTokenizer.Type != "ByteLevel":
		return nil, bad("only the ByteLevel pre-tokenizer is supported")
	case j.PreTokenizer.UseRegex != nil && !*j.PreTokenizer.UseRegex:
		return nil, bad("ByteLevel without use_regex is not supported")
	case m.ByteFallback:
		return nil, bad("byte_fallback is not supported")
	case m.Dropout != nil && *m.Dropout != 0:
		return nil, bad("dropout %g is not supported", *m.Dropout)
	case m.Prefix != nil && *m.Prefix != "", m.Suffix != nil && *m.Suffix != "":
		return nil, bad("continuing_subword_prefix and end_of_word_suffix are not supported")
	case len(m.Vocab) == 0:
		return nil, bad("empty vocabulary")
	}
	vocab := make(map[string]int64, len(m.Vocab)+len(j.Added))
	for tok, id := range m.Vocab {
		vocab[tok] = id
	}
	added, err := j.addTokens(vocab, true)
	if err != nil {
		return nil, bad("%v", err)
	}
	t := &Tokenizer{vocab: vocab, added: added, bpe: &bytePairs{
		merges:       make(map[[2]int64]merge, len(m.Merges)),
		prefixSpace:  j.PreTokenizer.PrefixSpace,
		ignoreMerges: m.IgnoreMerges,
	}}
	if err := t.setTokens(); err != nil {
		return nil, bad("%v", err)
	}
	for b := range 256 {
		t.bpe.byteID[b] = -1
		if id, ok := vocab[string(byteChar[b])]; ok {
			t.bpe.byteID[b] = id
		}
	}
	for rank, raw := range m.Merges {
		a, b, err := mergePair(raw)
		if err != nil {
			return nil, bad("merge %d: %v", rank, err)
		}
		ia, oka := m.Vocab[a]
		ib, okb := m.Vocab[b]
		im, okm := m.Vocab[a+b]
		if !oka || !okb || !okm {
			return nil, bad("merge %d (%q %q): a part or the merged token is not in the vocabulary", rank, a, b)
		}
		if _, dup := t.bpe.merges[[2]int64{ia, ib}]; !dup {
			t.bpe.merges[[2]int64{ia, ib}] = merge{rank: int32(rank), id: im}
		}
	}
	unk := ""
	if m.Unk != nil {
		unk = *m.Unk
	}
	if err := t.frame(path, &j.fastParts, unk); err != nil {
		return nil, bad("%v", err)
	}
	return t, nil
}

// fastParts are the parts of a tokenizer.json every model type has: the
// post-processor that frames a text, the added tokens, the padding.
type fastParts struct {
	PostProcessor *struct {
		Type   string            `json:"type"`
		Cls    []json.RawMessage `json:"cls"`
		Sep    []json.RawMessage `json:"sep"`
		Single []struct {
			Special *struct {
				ID string `json:"id"`
			} `json:"SpecialToken"`
			Sequence *struct {
				ID string `json:"id"`
			} `json:"Sequence"`
		} `json:"single"`
	} `json:"post_processor"`
	Added []struct {
		ID         int64  `json:"id"`
		Content    string `json:"content"`
		SingleWord bool   `json:"single_word"`
		LStrip     bool   `json:"lstrip"`
		RStrip     bool   `json:"rstrip"`
		Normalized bool   `json:"normalized"`
	} `json:"added_tokens"`
	Padding *struct {
		PadToken string `json:"pad_token"`
	} `json:"padding"`
}

// addTokens adds the added tokens to vocab and returns them; normalized
// says whether one matched in normalised text may be taken as matched in
// the raw text (true when there is no normaliser).
func (f *fastParts) addTokens(vocab map[string]int64, normalized bool) ([]addedToken, error) {
	var added []addedToken
	for _, a := range f.Added {
		switch {
		case a.Content == "":
			return nil, fmt.Errorf("added token %d is empty", a.ID)
		case a.SingleWord:
			return nil, fmt.Errorf("added token %q: single_word is not supported", a.Content)
		case a.Normalized && !normalized:
			return nil, fmt.Errorf("added token %q is matched in normalised text, which is not supported", a.Content)
		}
		vocab[a.Content] = a.ID
		added = append(added, addedToken{content: a.Content, id: a.ID, lstrip: a.LStrip, rstrip: a.RStrip})
	}
	return added, nil
}

// frame sets t's special tokens: the frame the post-processor writes
// (cls, sep), the padding (the file's own, else tokenizer_config.json's
// pad_token beside path, else a token named as the usual ones are), the
// unknown token unk and the mask.
func (t *Tokenizer) frame(path string, f *fastParts, unk string) error {
	opt := Options{Unknown: unk}
	switch p := f.PostProcessor; {
	case p == nil:
		return errors.New("no post_processor: the [CLS]/[SEP] frame is not known")
	case p.Type == "RobertaProcessing" || p.Type == "BertProcessing":
		if len(p.Cls) == 0 || len(p.Sep) == 0 {
			return fmt.Errorf("%s without cls and sep", p.Type)
		}
		opt.Classify, opt.Separator = tokenName(p.Cls[0]), tokenName(p.Sep[0])
	case p.Type == "TemplateProcessing":
		s := p.Single
		if len(s) != 3 || s[0].Special == nil || s[1].Sequence == nil || s[1].Sequence.ID != "A" || s[2].Special == nil {
			return errors.New("TemplateProcessing: only the single-text template SPECIAL $A SPECIAL is supported")
		}
		opt.Classify, opt.Separator = s[0].Special.ID, s[2].Special.ID
	default:
		return fmt.Errorf("post_processor %q is not supported", p.Type)
	}
	var cfg Options
	if data, err := readBounded(filepath.Join(filepath.Dir(path), "tokenizer_config.json")); err == nil {
		cfg, _ = applyConfig(data, Options{})
	}
	for _, name := range []string{"", cfg.Pad, "[PAD]", "<pad>", "<|padding|>"} {
		if name == "" && f.Padding != nil {
			name = f.Padding.PadToken
		}
		if hasToken(t.vocab, name) {
			opt.Pad = name
			break
		}
	}
	if hasToken(t.vocab, cfg.Mask) {
		opt.Mask = cfg.Mask
	}
	for _, s := range []struct {
		name, tok string
		dst       *int64
	}{{"classify", opt.Classify, &t.cls}, {"separator", opt.Separator, &t.sep}, {"pad", opt.Pad, &t.pad}} {
		id, ok := t.vocab[s.tok]
		if !ok {
			return fmt.Errorf("%s token %q not in the vocabulary", s.name, s.tok)
		}
		*s.dst = id
	}
	t.unk = -1
	if id, ok := t.vocab[opt.Unknown]; ok {
		t.unk = id
	}
	t.opt = opt
	return nil
}

// hasToken reports whether tok is a non-empty token of vocab.
func hasToken(vocab map[string]int64, tok string) bool {
	_, ok := vocab[tok]
	return ok && tok != ""
}

// mergePair reads a merge written as "a b" or as ["a", "b"].
func mergePair(raw json.RawMessage) (string, string, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		a, b, ok := strings.Cut(s, " ")
		if !ok || a == "" || b == "" {
			return "", "", fmt.Errorf("%q is not two tokens", s)
		}
		return a, b, nil
	}
	var pair []string
	if err := json.Unmarshal(raw, &pair); err != nil || len(pair) != 2 || pair[0] == "" || pair[1] == "" {
		return "", "", fmt.Errorf("%s is not two tokens", abbreviate(raw))
	}
	return pair[0], pair[1], nil
}

// abbreviate shortens JSON for an error message.
func abbreviate(raw json.RawMessage) string {
	if len(raw) > 80 {
		return string(raw[:77]) + "..."
	}
	return string(raw)
}
