package tokenize

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/linearize/linearize/internal/fsutil"
)

// maxFile bounds the tokenizer files read (the largest real ones are a
// few MB).
const maxFile = 64 << 20

// Load reads the tokenizer of a model folder: tokenizer.json when present
// (a Hugging Face "fast" tokenizer with a WordPiece, byte-level BPE or
// Unigram model, see LoadJSON), else vocab.txt
// with the settings of tokenizer_config.json when present. path may also
// name one of those files directly.
func Load(path string) (*Tokenizer, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("tokenize: %w", err)
	}
	if fi.IsDir() {
		file := fileIn(path)
		if file == "" {
			return nil, fmt.Errorf("tokenize: %s: %w", path, errNoTokenizer)
		}
		path = file
	}
	return loadFile(path)
}

// errNoTokenizer: a folder holds neither tokenizer file.
var errNoTokenizer = errors.New("no tokenizer.json or vocab.txt")

// fileIn is the tokenizer file Load reads from folder dir: tokenizer.json,
// else vocab.txt, else "" when neither is there.
func fileIn(dir string) string {
	for _, f := range []string{"tokenizer.json", "vocab.txt"} {
		p := filepath.Join(dir, f)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	return ""
}

// loadFile reads a tokenizer.json (by its extension) or a vocab.txt.
func loadFile(path string) (*Tokenizer, error) {
	if filepath.Ext(path) == ".json" {
		return LoadJSON(path)
	}
	return LoadVocab(path, configBeside(path))
}

// FileForModel returns the tokenizer file LoadForModel reads for the ONNX
// model at modelPath (a tokenizer.json or vocab.txt), or "" when there is
// none.
func FileForModel(modelPath string) string {
	for _, c := range modelDirs(modelPath) {
		if file := fileIn(c); file != "" {
			return file
		}
	}
	return ""
}

// LoadForModel reads the tokenizer that belongs to the ONNX model at
// modelPath: from the first folder holding a tokenizer.json or vocab.txt
// of the model's own folder and the folder named like the model without
// its extension (testdata/real/minilm.onnx → testdata/real/minilm/), as
// Load reads a folder.
func LoadForModel(modelPath string) (*Tokenizer, error) {
	if file := FileForModel(modelPath); file != "" {
		return loadFile(file)
	}
	cands := modelDirs(modelPath)
	return nil, fmt.Errorf("tokenize: %w in %s or %s", errNoTokenizer, cands[0], cands[1])
}

// Find reads the tokenizer a command's --vocab flag names: the one at
// vocab (see Load) or, when vocab is empty, the one beside the model at
// modelPath (see LoadForModel). When none is beside the model, the error
// says to pass --vocab PATH.
func Find(vocab, modelPath string) (*Tokenizer, error) {
	if vocab != "" {
		return Load(vocab)
	}
	t, err := LoadForModel(modelPath)
	if errors.Is(err, errNoTokenizer) {
		return nil, fmt.Errorf("%w; pass --vocab PATH", err)
	}
	return t, err
}

func configBeside(vocab string) Options {
	opt := DefaultOptions()
	p := filepath.Join(filepath.Dir(vocab), "tokenizer_config.json")
	data, err := readBounded(p)
	if err != nil {
		return opt
	}
	opt, _ = applyConfig(data, opt)
	return opt
}

func readBounded(path string) ([]byte, error) {
	// At most maxFile bytes, and no more than the process may hold; a
	// FIFO without a writer is announced, a device read to the bound.
	return fsutil.ReadFile(path, maxFile)
}

// LoadVocab reads a vocab.txt (one token per line, the line number is the
// id) with the given options.
func LoadVocab(path string, opt Options) (*Tokenizer, error) {
	data, err := readBounded(path)
	if err != nil {
		return nil, fmt.Errorf("tokenize: %w", err)
	}
	vocab, err := ReadVocab(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("tokenize: %s: %w", path, err)
	}
	t, err := New(vocab, opt)
	if err != nil {
		return nil, fmt.Errorf("%w (vocabulary %s)", err, path)
	}
	return t, nil
}

// ReadVocab parses the vocab.txt format: one token per line, ids counted
// from 0. A token that appears twice keeps its first id.
func ReadVocab(r io.Reader) (map[string]int64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	vocab := map[string]int64{}
	var id int64
	for sc.Scan() {
		tok := strings.TrimRight(sc.Text(), "\r")
		if _, dup := vocab[tok]; !dup {
			vocab[tok] = id
		}
		id++
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(vocab) == 0 {
		return nil, errors.New("empty vocabulary")
	}
	return vocab, nil
}

// tokenName reads a special-token entry that is either a string or an
// object with a "content" field.
func tokenName(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var o struct {
		Content string `json:"content"`
	}
	if json.Unmarshal(raw, &o) == nil {
		return o.Content
	}
	return ""
}

// setNormalization applies the BERT normaliser settings of either
// config file (nil: not given): accents are stripped as text is
// lowercased unless strip says otherwise.
func (opt *Options) setNormalization(lower, strip, chinese *bool) {
	if lower != nil {
		opt.Lower = *lower
	}
	opt.StripAccents = opt.Lower
	if strip != nil {
		opt.StripAccents = *strip
	}
	if chinese != nil {
		opt.ChineseChars = *chinese
	}
}

// applyConfig reads tokenizer_config.json settings over opt.
func applyConfig(data []byte, opt Options) (Options, error) {
	var c struct {
		Lower        *bool           `json:"do_lower_case"`
		Strip        *bool           `json:"strip_accents"`
		Chinese      *bool           `json:"tokenize_chinese_chars"`
		Unk          json.RawMessage `json:"unk_token"`
		Cls          json.RawMessage `json:"cls_token"`
		Sep          json.RawMessage `json:"sep_token"`
		Pad          json.RawMessage `json:"pad_token"`
		Mask         json.RawMessage `json:"mask_token"`
		Class        string          `json:"tokenizer_class"`
		DoBasicToken *bool           `json:"do_basic_tokenize"`
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return opt, err
	}
	opt.setNormalization(c.Lower, c.Strip, c.Chinese)
	for _, s := range []struct {
		raw json.RawMessage
		dst *string
	}{{c.Unk, &opt.Unknown}, {c.Cls, &opt.Classify}, {c.Sep, &opt.Separator}, {c.Pad, &opt.Pad}, {c.Mask, &opt.Mask}} {
		if name := tokenName(s.raw); name != "" {
			*s.dst = name
		}
	}
	return opt, nil
}

// LoadJSON reads a Hugging Face tokenizer.json whose model is WordPiece,
// with BertNormalizer (or no normaliser), byte-level BPE (ByteLevel
// pre-tokenizer, no normaliser; see loadBPE) or SentencePiece Unigram
// (Metaspace pre-tokenizer; see loadUnigram).
func LoadJSON(path string) (*Tokenizer, error) {
	data, err := readBounded(path)
	if err != nil {
		return nil, fmt.Errorf("tokenize: %w", err)
	}
	var kind struct {
		Model struct {
			Type string `json:"type"`
		} `json:"model"`
	}
	if err := json.Unmarshal(data, &kind); err != nil {
		return nil, fmt.Errorf("tokenize: %s: %w", path, err)
	}
	switch kind.Model.Type {
	case "WordPiece":
	case "BPE":
		return loadBPE(path, data)
	case "Unigram":
		return loadUnigram(path, data)
	default:
		return nil, fmt.Errorf("tokenize: %s: model type %q, only WordPiece, BPE and Unigram are supported", path, kind.Model.Type)
	}
	var j struct {
		Model struct {
			Type     string           `json:"type"`
			Unk      string           `json:"unk_token"`
			Prefix   *string          `json:"continuing_subword_prefix"`
			MaxChars int              `json:"max_input_chars_per_word"`
			Vocab    map[string]int64 `json:"vocab"`
		} `json:"model"`
		Normalizer *struct {
			Type      string `json:"type"`
			Clean     *bool  `json:"clean_text"`
			Chinese   *bool  `json:"handle_chinese_chars"`
			Strip     *bool  `json:"strip_accents"`
			Lowercase *bool  `json:"lowercase"`
		} `json:"normalizer"`
		PreTokenizer *struct {
			Type string `json:"type"`
		} `json:"pre_tokenizer"`
		PostProcessor *struct {
			Type string                               `json:"type"`
			Cls  []json.RawMessage                    `json:"cls"`
			Sep  []json.RawMessage                    `json:"sep"`
			Spec map[string]struct{ Tokens []string } `json:"special_tokens"`
		} `json:"post_processor"`
		Padding *struct {
			PadToken string `json:"pad_token"`
		} `json:"padding"`
	}
	if err := json.Unmarshal(data, &j); err != nil {
		return nil, fmt.Errorf("tokenize: %s: %w", path, err)
	}
	opt := DefaultOptions()
	if j.Model.Unk != "" {
		opt.Unknown = j.Model.Unk
	}
	if j.Model.Prefix != nil {
		opt.Prefix = *j.Model.Prefix
	}
	if j.Model.MaxChars > 0 {
		opt.MaxWordChars = j.Model.MaxChars
	}
	if n := j.Normalizer; n != nil {
		if n.Type != "BertNormalizer" {
			return nil, fmt.Errorf("tokenize: %s: normalizer %q, only BertNormalizer is supported", path, n.Type)
		}
		opt.setNormalization(n.Lowercase, n.Strip, n.Chinese)
		if n.Clean != nil {
			opt.CleanText = *n.Clean
		}
	} else {
		opt.Lower, opt.StripAccents, opt.ChineseChars, opt.CleanText = false, false, false, false
	}
	if p := j.PreTokenizer; p != nil && p.Type != "BertPreTokenizer" {
		return nil, fmt.Errorf("tokenize: %s: pre-tokenizer %q, only BertPreTokenizer is supported", path, p.Type)
	}
	if p := j.PostProcessor; p != nil {
		switch p.Type {
		case "BertProcessing":
			if len(p.Cls) > 0 {
				if s := tokenName(p.Cls[0]); s != "" {
					opt.Classify = s
				}
			}
			if len(p.Sep) > 0 {
				if s := tokenName(p.Sep[0]); s != "" {
					opt.Separator = s
				}
			}
		case "TemplateProcessing":
			// The BERT template: special tokens keyed by their own names.
		}
	}
	if j.Padding != nil && j.Padding.PadToken != "" {
		opt.Pad = j.Padding.PadToken
	}
	t, err := New(j.Model.Vocab, opt)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	return t, nil
}
