package convert

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/linearize/linearize/internal/fsutil"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// MaxContextTokens bounds a limit read from a configuration file or a doc
// string: 1 << 20 tokens. A larger value is refused as malformed, so that
// a stray or hostile file cannot make a command size its inputs by it.
const MaxContextTokens = 1 << 20

// maxConfigBytes bounds the config.json ContextLimit reads.
const maxConfigBytes = 16 << 20

// LimitKind says where a Limit was found.
type LimitKind string

// The places ContextLimit reads, in the order it reads them.
const (
	// LimitNone: no limit is known (Limit.Tokens is 0).
	LimitNone LimitKind = ""
	// LimitTable: the rows of the model's absolute position table
	// (PositionLimit).
	LimitTable LimitKind = "position table"
	// LimitMetadata: the metadata MetaMaxPositions of a rotary model
	// whose frequencies ExtendPositions scaled.
	LimitMetadata LimitKind = "metadata"
	// LimitConfig: max_position_embeddings (or n_positions) of the
	// Hugging Face config.json beside the model.
	LimitConfig LimitKind = "config.json"
	// LimitDocString: "max_position_embeddings N" or "positions N" in the
	// model's doc_string.
	LimitDocString LimitKind = "doc string"
	// LimitBuffer: an attention-bias buffer [..., L, L] the graph slices
	// to the sequence length (an exported ALiBi tensor), shorter than
	// any other limit: the graph cannot run past L.
	LimitBuffer LimitKind = "bias buffer"
)

// Limit is the longest input a model reads, in tokens ([CLS] and [SEP]
// included), and where that was found.
type Limit struct {
	// Tokens is the limit; 0 when none is known.
	Tokens int
	// Kind is where it was found.
	Kind LimitKind
	// Source says it for messages: "position table
	// embeddings.position_embeddings.weight (512 rows)", "config.json
	// beside the model (m/config.json): max_position_embeddings 8192",
	// "the model's doc string: positions 8192"; "" when Tokens is 0.
	Source string
	// File is the config.json read (Kind LimitConfig), else "".
	File string
}

// String is Tokens and Source: "8192 tokens (config.json beside the
// model (m/config.json): max_position_embeddings 8192)", or "unknown".
func (l Limit) String() string {
	if l.Tokens <= 0 {
		return "unknown"
	}
	return fmt.Sprintf("%d tokens (%s)", l.Tokens, l.Source)
}

// ContextLimit returns the longest input, in tokens including [CLS] and
// [SEP], that the model m (read from modelPath) reads, from the first of
// these that says it:
//
//  1. its absolute position table (PositionLimit): position ids past the
//     table's rows index outside it, so the graph itself sets the limit;
//  2. the metadata MetaMaxPositions, which ExtendPositions writes in a
//     rotary model whose frequencies it scaled to read that many tokens;
//  3. max_position_embeddings (or n_positions, as Nomic's configs name it)
//     in the Hugging Face config.json beside the model: in the model's
//     folder, else in the folder named like the model without its
//     extension (where convert writes a converted model's companion
//     files; the folders tokenize.LoadForModel looks in, in its order).
//     This is how a rotary or ALiBi encoder (ModernBERT, GTE, Nomic,
//     jina), which has no position table, states the length it was
//     trained for;
//  4. "max_position_embeddings N" or a field "positions N" in the
//     model's doc_string (models.ModernBERT and models.BERT write one),
//     read last because it is free text.
//
// It returns a zero Limit and no error when none says it (a model with
// rotary positions and no configuration: the caller keeps its own
// default). A position table that cannot be told (several candidates)
// sets no limit and the next source is read. A config.json that is not a
// JSON object, or whose value is not an integer from 1 to
// MaxContextTokens, is an error naming the file; a doc string whose value
// is out of that range is an error too. An empty modelPath skips the
// config.json.
//
// Whatever the source, an attention-bias buffer the graph slices to the
// sequence length (biasBufferLimit; jina-embeddings-v2 exports its ALiBi
// tensor so, at the size it was built) that is shorter sets the limit
// instead (LimitBuffer).
func ContextLimit(m *onnxpb.ModelProto, modelPath string) (Limit, error) {
	if m == nil || m.Graph == nil {
		return Limit{}, errors.New("convert: context limit: no graph")
	}
	ix := onnx.NewIndex(m.Graph)
	l, err := contextLimit(m, ix, modelPath)
	if err != nil {
		return l, err
	}
	if n, name := biasBufferLimit(ix); n > 0 && (l.Tokens == 0 || n < l.Tokens) {
		src := fmt.Sprintf("attention-bias buffer %s (%d × %d) sliced to the sequence length", name, n, n)
		if l.Tokens > 0 {
			src += fmt.Sprintf(", shorter than the %d of %s", l.Tokens, l.Source)
		}
		return Limit{Tokens: n, Kind: LimitBuffer, Source: src}, nil
	}
	return l, nil
}

// biasBufferLimit returns the size L and the name of the smallest
// floating-point constant of shape [..., L, L] (rank 3 or more, L ≥ 16)
// that a Slice reads: an attention-bias buffer registered at one size and
// cut to the sequence length, such as the ALiBi tensor [1, H, L, L] of
// jina-embeddings-v2's and MosaicBERT's remote code (which rebuild it in
// PyTorch for longer inputs, but not in an export) or GPT-2's causal mask.
// The graph cannot run past L. 0 when there is none. Only the constants'
// shapes are read.
func biasBufferLimit(ix *onnx.Index) (int, string) {
	best, name := 0, ""
	for _, n := range ix.Graph.Node {
		if n.GetOpType() != "Slice" || (n.GetDomain() != "" && n.GetDomain() != "ai.onnx") || len(n.Input) == 0 {
			continue
		}
		v := n.Input[0]
		dims, dt, _ := constantMeta(ix, v)
		r := len(dims)
		if r < 3 || dims[r-1] != dims[r-2] || dims[r-1] < 16 || !onnx.IsFloat(dt) {
			continue
		}
		if l := int(dims[r-1]); best == 0 || l < best {
			best, name = l, v
		}
	}
	return best, name
}

// contextLimit is ContextLimit without the bias buffers.
func contextLimit(m *onnxpb.ModelProto, ix *onnx.Index, modelPath string) (Limit, error) {
	if pt, rows, limit, err := positionLimit(ix); err == nil && pt != nil && limit > 0 {
		src := fmt.Sprintf("position table %s (%d rows)", pt.table, rows)
		if limit != rows {
			src = fmt.Sprintf("position table %s (%d rows, less the %d before the first position)", pt.table, rows, rows-limit)
		}
		return Limit{Tokens: limit, Kind: LimitTable, Source: src}, nil
	}
	for _, p := range m.GetMetadataProps() {
		if p.GetKey() != MetaMaxPositions {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(p.GetValue()))
		if err != nil || n < 1 || n > MaxContextTokens {
			return Limit{}, fmt.Errorf("convert: context limit: metadata %s = %q is not a number of tokens from 1 to %d", MetaMaxPositions, p.GetValue(), MaxContextTokens)
		}
		return Limit{Tokens: n, Kind: LimitMetadata, Source: fmt.Sprintf("metadata %s %d (rotary frequencies scaled by convert extend-positions)", MetaMaxPositions, n)}, nil
	}
	if modelPath != "" {
		l, err := configLimit(modelPath)
		if err != nil || l.Tokens > 0 {
			return l, err
		}
	}
	return docStringLimit(m.GetDocString())
}

// configDirs are the folders whose config.json ContextLimit reads for
// the model at modelPath, in order (those of tokenize.LoadForModel).
func configDirs(modelPath string) []string {
	return []string{filepath.Dir(modelPath), strings.TrimSuffix(modelPath, filepath.Ext(modelPath))}
}

// configLimit reads the limit of the first config.json of configDirs:
// zero when there is none or it names no limit.
func configLimit(modelPath string) (Limit, error) {
	for _, dir := range configDirs(modelPath) {
		p := filepath.Join(dir, "config.json")
		data, err := fsutil.ReadRegular(p, maxConfigBytes)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return Limit{}, fmt.Errorf("convert: context limit: %s: %w", p, err)
		}
		key, n, err := configTokens(data)
		if err != nil {
			return Limit{}, fmt.Errorf("convert: context limit: %s: %w", p, err)
		}
		if n == 0 {
			return Limit{}, nil
		}
		return Limit{Tokens: n, Kind: LimitConfig, File: p,
			Source: fmt.Sprintf("config.json beside the model (%s): %s %d", p, key, n)}, nil
	}
	return Limit{}, nil
}

// configKeys are the keys of a config.json that state the limit, in the
// order they are read.
var configKeys = []string{"max_position_embeddings", "n_positions"}

// configTokens returns the first of configKeys that data (a JSON object)
// has and its value; 0 when it has none.
func configTokens(data []byte) (string, int, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil || obj == nil {
		if err == nil {
			err = errors.New("null")
		}
		return "", 0, fmt.Errorf("not a JSON object (%v)", err)
	}
	for _, key := range configKeys {
		raw, ok := obj[key]
		if !ok {
			continue
		}
		d := json.NewDecoder(bytes.NewReader(raw))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			return "", 0, fmt.Errorf("%s: %w", key, err)
		}
		num, ok := v.(json.Number)
		if !ok {
			return "", 0, fmt.Errorf("%s is %s, want an integer from 1 to %d", key, raw, MaxContextTokens)
		}
		n, err := tokensValue(num.String())
		if err != nil {
			return "", 0, fmt.Errorf("%s %w", key, err)
		}
		return key, n, nil
	}
	return "", 0, nil
}

// tokensValue parses a limit: an integer from 1 to MaxContextTokens
// (8192.0 is one; 8192.5 is not).
func tokensValue(s string) (int, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f != math.Trunc(f) || f < 1 || f > MaxContextTokens {
		return 0, fmt.Errorf("is %s, want an integer from 1 to %d", s, MaxContextTokens)
	}
	return int(f), nil
}

// docLimitRE finds a limit in a doc string: max_position_embeddings
// anywhere (also as a quoted JSON key), or "positions" as a field of a
// list (after the start, a comma, a semicolon, a colon or a parenthesis), as
// models.ModernBERT writes "…, vocab 1000, positions 8192, window 128, …".
var docLimitRE = []*regexp.Regexp{
	regexp.MustCompile(`\bmax_position_embeddings"?\s*[:=]?\s*(\d+)\b`),
	regexp.MustCompile(`(?:^|[,;:(]\s*)positions\s*[:=]?\s*(\d+)\b`),
}

// docStringLimit reads the limit a doc string records; zero when it
// records none.
func docStringLimit(doc string) (Limit, error) {
	for _, re := range docLimitRE {
		sm := re.FindStringSubmatch(doc)
		if sm == nil {
			continue
		}
		phrase := strings.TrimLeft(strings.TrimSpace(sm[0]), ",;:( ")
		n, err := tokensValue(sm[1])
		if err != nil {
			return Limit{}, fmt.Errorf("convert: context limit: the model's doc string records %q, whose value %w", phrase, err)
		}
		return Limit{Tokens: n, Kind: LimitDocString, Source: "the model's doc string: " + phrase}, nil
	}
	return Limit{}, nil
}
