package models

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// maxSafetensorsHeader bounds the JSON header of a .safetensors file (the
// format's own reference implementation uses 100 MB).
const maxSafetensorsHeader = 100 << 20

// safetensorsTypes maps the format's dtype names to ONNX element types.
// F16 and BF16 tensors keep their bits ([]uint16), as onnx.Tensor does.
var safetensorsTypes = map[string]onnx.DataType{
	"F64": onnx.Double, "F32": onnx.Float, "F16": onnx.Float16, "BF16": onnx.BFloat16,
	"I64": onnx.Int64, "I32": onnx.Int32, "I16": onnx.Int16, "I8": onnx.Int8,
	"U64": onnx.Uint64, "U32": onnx.Uint32, "U16": onnx.Uint16, "U8": onnx.Uint8,
	"BOOL": onnx.Bool,
}

// ReadSafetensors reads every tensor of a .safetensors file (Hugging Face's
// weight format: an 8-byte little-endian header length, a JSON header that
// gives each tensor's dtype, shape and byte range, then the raw
// little-endian data). The header is validated before any tensor is
// decoded: sizes must match shapes, and byte ranges must lie inside the
// file and must not overlap.
func ReadSafetensors(path string) (map[string]*onnx.Tensor, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("models: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("models: %w", err)
	}
	ts, err := DecodeSafetensors(f, fi.Size())
	if err != nil {
		return nil, fmt.Errorf("models: %s: %w", path, err)
	}
	return ts, nil
}

type safetensorsEntry struct {
	name    string
	DType   string  `json:"dtype"`
	Shape   []int   `json:"shape"`
	Offsets []int64 `json:"data_offsets"`
}

// DecodeSafetensors reads a safetensors stream of the given total size.
// Errors carry no package prefix so the caller can name the file.
func DecodeSafetensors(r io.Reader, size int64) (map[string]*onnx.Tensor, error) {
	var lenBuf [8]byte
	if size < 8 {
		return nil, fmt.Errorf("safetensors: %d bytes, too short for a header", size)
	}
	if _, err := io.ReadFull(r, lenBuf[:]); err != nil {
		return nil, fmt.Errorf("safetensors: header length: %w", err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > maxSafetensorsHeader || int64(n) > size-8 {
		return nil, fmt.Errorf("safetensors: header length %d exceeds the file (%d bytes) or the %d-byte limit", n, size, maxSafetensorsHeader)
	}
	hdr := make([]byte, n)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, fmt.Errorf("safetensors: header: %w", err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(hdr, &raw); err != nil {
		return nil, fmt.Errorf("safetensors: header JSON: %w", err)
	}
	dataLen := size - 8 - int64(n)
	var entries []*safetensorsEntry
	for name, msg := range raw {
		if name == "__metadata__" {
			var meta map[string]string
			if err := json.Unmarshal(msg, &meta); err != nil {
				return nil, fmt.Errorf("safetensors: __metadata__: %w", err)
			}
			continue
		}
		e := &safetensorsEntry{name: name}
		if err := json.Unmarshal(msg, e); err != nil {
			return nil, fmt.Errorf("safetensors: tensor %q: %w", name, err)
		}
		dt, ok := safetensorsTypes[e.DType]
		if !ok {
			return nil, fmt.Errorf("safetensors: tensor %q: unsupported dtype %q", name, e.DType)
		}
		count := onnx.NumElements(e.Shape)
		if count < 0 || int64(count) > dataLen {
			return nil, fmt.Errorf("safetensors: tensor %q: invalid shape %v for %d data bytes", name, e.Shape, dataLen)
		}
		if len(e.Offsets) != 2 || e.Offsets[0] < 0 || e.Offsets[1] < e.Offsets[0] || e.Offsets[1] > dataLen {
			return nil, fmt.Errorf("safetensors: tensor %q: data offsets %v outside the %d data bytes", name, e.Offsets, dataLen)
		}
		if want := int64(count) * int64(onnx.ElemSize(dt)); e.Offsets[1]-e.Offsets[0] != want {
			return nil, fmt.Errorf("safetensors: tensor %q: %d bytes for %s%v, want %d", name, e.Offsets[1]-e.Offsets[0], e.DType, e.Shape, want)
		}
		entries = append(entries, e)
	}
	sort.Slice(entries, func(i, j int) bool {
		if entries[i].Offsets[0] != entries[j].Offsets[0] {
			return entries[i].Offsets[0] < entries[j].Offsets[0]
		}
		return entries[i].name < entries[j].name
	})
	var pos int64
	out := make(map[string]*onnx.Tensor, len(entries))
	for _, e := range entries {
		if e.Offsets[0] < pos {
			return nil, fmt.Errorf("safetensors: tensor %q overlaps the previous tensor", e.name)
		}
		if gap := e.Offsets[0] - pos; gap > 0 {
			if _, err := io.CopyN(io.Discard, r, gap); err != nil {
				return nil, fmt.Errorf("safetensors: tensor %q: %w", e.name, err)
			}
		}
		buf := make([]byte, e.Offsets[1]-e.Offsets[0])
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, fmt.Errorf("safetensors: tensor %q: %w", e.name, err)
		}
		pos = e.Offsets[1]
		t, err := decodeLE(safetensorsTypes[e.DType], e.Shape, buf)
		if err != nil {
			return nil, fmt.Errorf("safetensors: tensor %q: %w", e.name, err)
		}
		out[e.name] = t
	}
	return out, nil
}

// decodeLE turns little-endian bytes into a tensor; a bool byte must be
// 0 or 1.
func decodeLE(dt onnx.DataType, shape []int, b []byte) (*onnx.Tensor, error) {
	t, err := onnx.DecodeRaw(dt, shape, b)
	if err != nil {
		return nil, err
	}
	if dt == onnx.Bool {
		for i, x := range b {
			if x > 1 {
				return nil, fmt.Errorf("bool byte %d at element %d", x, i)
			}
		}
	}
	return t, nil
}

// ToFloat32 converts a float tensor (float16, bfloat16, float32, float64)
// to float32; other types are an error.
func ToFloat32(t *onnx.Tensor) (*onnx.Tensor, error) {
	shape := append([]int(nil), t.Shape...)
	switch d := t.Data.(type) {
	case []float32:
		return onnx.NewFloat(shape, d), nil
	case []float64:
		f := make([]float32, len(d))
		for i, v := range d {
			f[i] = float32(v)
		}
		return onnx.NewFloat(shape, f), nil
	case []uint16:
		conv := onnx.HalfToFloat
		switch t.DType {
		case onnx.Float16:
		case onnx.BFloat16:
			conv = onnx.BFloat16ToFloat
		default:
			return nil, fmt.Errorf("models: %s is not a float tensor", onnx.TypeName(t.DType))
		}
		f := make([]float32, len(d))
		for i, v := range d {
			f[i] = conv(v)
		}
		return onnx.NewFloat(shape, f), nil
	}
	return nil, fmt.Errorf("models: %s is not a float tensor", onnx.TypeName(t.DType))
}

// PretrainedConfig reads a Hugging Face BERT folder's config.json and
// returns the matching Config (opset 17, weights not yet loaded).
func PretrainedConfig(dir string) (Config, error) {
	p := filepath.Join(dir, "config.json")
	data, err := os.ReadFile(p)
	if err != nil {
		return Config{}, fmt.Errorf("models: %w", err)
	}
	var c struct {
		ModelType    string  `json:"model_type"`
		Vocab        int     `json:"vocab_size"`
		Hidden       int     `json:"hidden_size"`
		Heads        int     `json:"num_attention_heads"`
		Layers       int     `json:"num_hidden_layers"`
		Intermediate int     `json:"intermediate_size"`
		MaxPositions int     `json:"max_position_embeddings"`
		TypeVocab    int     `json:"type_vocab_size"`
		Act          string  `json:"hidden_act"`
		Eps          float64 `json:"layer_norm_eps"`
		PosType      string  `json:"position_embedding_type"`
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return Config{}, fmt.Errorf("models: %s: %w", p, err)
	}
	if c.ModelType != "bert" {
		return Config{}, fmt.Errorf("models: %s: model_type %q, want bert", p, c.ModelType)
	}
	if c.Act != "" && c.Act != "gelu" {
		return Config{}, fmt.Errorf("models: %s: hidden_act %q, only gelu (erf) is built", p, c.Act)
	}
	if c.PosType != "" && c.PosType != "absolute" {
		return Config{}, fmt.Errorf("models: %s: position_embedding_type %q, only absolute is built", p, c.PosType)
	}
	cfg := Config{Vocab: c.Vocab, Hidden: c.Hidden, Heads: c.Heads, Layers: c.Layers,
		Intermediate: c.Intermediate, MaxPositions: c.MaxPositions, TypeVocab: c.TypeVocab,
		Opset: 17, Seed: 1, LNEps: float32(c.Eps)}
	if err := cfg.Validate(); err != nil {
		return Config{}, fmt.Errorf("%w (%s)", err, p)
	}
	return cfg, nil
}

// Pretrained builds the BERT graph of a Hugging Face BertModel folder
// (config.json + model.safetensors) with its trained weights. Every
// parameter BERT uses must be in the file (none is drawn at random);
// buffers such as embeddings.position_ids are ignored.
func Pretrained(dir string) (*onnxpb.ModelProto, Config, error) {
	cfg, err := PretrainedConfig(dir)
	if err != nil {
		return nil, cfg, err
	}
	p := filepath.Join(dir, "model.safetensors")
	ts, err := ReadSafetensors(p)
	if err != nil {
		return nil, cfg, err
	}
	// Some checkpoints prefix names with the architecture ("bert.").
	ws := map[string]*onnx.Tensor{}
	for name, t := range ts {
		name = strings.TrimPrefix(name, "bert.")
		if strings.HasSuffix(name, "position_ids") {
			continue
		}
		if t.DType != onnx.Float {
			if t, err = ToFloat32(t); err != nil {
				return nil, cfg, fmt.Errorf("models: %s: %s: %w", p, name, err)
			}
		}
		ws[name] = t
	}
	for _, name := range bertParamNames(cfg.Layers) {
		if _, ok := ws[name]; !ok {
			return nil, cfg, fmt.Errorf("models: %s: weight %q missing", p, name)
		}
	}
	cfg.Weights = ws
	m, err := BERT(cfg)
	if err != nil {
		return nil, cfg, fmt.Errorf("%w (%s)", err, p)
	}
	return m, cfg, nil
}

// bertParamNames lists the state-dict names of a BertModel's parameters.
func bertParamNames(layers int) []string {
	names := []string{
		"embeddings.word_embeddings.weight", "embeddings.position_embeddings.weight",
		"embeddings.token_type_embeddings.weight", "embeddings.LayerNorm.weight", "embeddings.LayerNorm.bias",
		"pooler.dense.weight", "pooler.dense.bias",
	}
	for l := 0; l < layers; l++ {
		p := "encoder.layer." + strconv.Itoa(l) + "."
		for _, s := range []string{"attention.self.query", "attention.self.key", "attention.self.value",
			"attention.output.dense", "attention.output.LayerNorm", "intermediate.dense", "output.dense", "output.LayerNorm"} {
			names = append(names, p+s+".weight", p+s+".bias")
		}
	}
	return names
}
