package infer

import (
	"fmt"
	"strings"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/tokenize"
)

// Roles of a BERT-style model's token-level inputs, as InputRole reads
// them from the inputs' names.
const (
	RoleIDs       = "ids"
	RoleMask      = "mask"
	RoleTokenType = "token_type"
	RolePosition  = "position"
)

// InputRole guesses what a token-level input holds from its name:
// RolePosition (position_ids), RoleTokenType (token_type_ids,
// segment_ids), RoleMask (attention_mask, input_mask) or RoleIDs
// (input_ids); "" when the name says nothing.
func InputRole(name string) string {
	n := strings.ToLower(name)
	switch {
	case strings.Contains(n, "position"):
		return RolePosition
	case strings.Contains(n, "type") || strings.Contains(n, "segment"):
		return RoleTokenType
	case strings.Contains(n, "mask"):
		return RoleMask
	case strings.Contains(n, "ids") || strings.Contains(n, "input") || strings.Contains(n, "token"):
		return RoleIDs
	}
	return ""
}

// TextFillError reports a model input that text cannot fill: its name
// gives it no token role (InputRole), as jina-embeddings-v3's scalar
// task_id. Its value is given instead; Option names the option that takes
// it in the caller's API ("Inputs", "WindowOptions.Inputs").
type TextFillError struct {
	Input  Value
	Option string
}

func (e *TextFillError) Error() string {
	return fmt.Sprintf("input %q (%s) is not ids, mask, token types or positions by its name, so text cannot fill it: give its value (%s, --input %s=VALUE)",
		e.Input.Name, describe(e.Input), e.Option, e.Input.Name)
}

// TextFillable reports a *TextFillError for the first of inputs that text
// cannot fill (see InputRole), nil when text fills them all. option names
// the option that takes such an input's value in the caller's API.
func TextFillable(inputs []Value, option string) error {
	for _, in := range inputs {
		if InputRole(in.Name) == "" {
			return &TextFillError{Input: in, Option: option}
		}
	}
	return nil
}

// TokenInputs are a model's token-level inputs and the padding mask that
// goes with them.
type TokenInputs struct {
	Feed    map[string]*onnx.Tensor
	Batch   int
	SeqLen  int
	Mask    []int64 // [Batch, SeqLen], 1 on real tokens
	Lengths []int   // real tokens per row
	Cut     []bool  // rows whose text was longer than the row (truncated)
}

// TextInputs tokenizes texts and fills every input of the model by role
// (see InputRole): ids, attention mask, token types (zeros), positions
// (0, 1, … in every row). The sequence
// length is seqLen when positive, else the length the model declares, else
// the longest text (at most maxLen tokens when maxLen > 0). A text longer
// than the sequence length n is truncated to exactly n tokens: [CLS], its
// first n−2 tokens, [SEP]; shorter texts are padded (Lengths says which).
// Integer inputs get the declared element type (int64 or int32).
func TextInputs(tok *tokenize.Tokenizer, inputs []Value, texts []string, seqLen, maxLen int) (*TokenInputs, error) {
	if seqLen <= 0 {
		seqLen = declaredSeqLen(inputs)
	}
	b, err := tok.EncodeBatch(texts, seqLen, maxLen)
	if err != nil {
		return nil, fmt.Errorf("infer: %w", err)
	}
	feed, err := TokenFeed(inputs, b.Size, b.SeqLen, b.InputIDs, b.AttentionMask)
	if err != nil {
		return nil, err
	}
	ti := &TokenInputs{Feed: feed, Batch: b.Size, SeqLen: b.SeqLen, Mask: b.AttentionMask, Lengths: b.Lengths, Cut: b.Cut}
	return ti, nil
}

// TokenFeed fills every input of a BERT-style model by role (see
// InputRole) for rows sequences of seqLen tokens: ids and mask as given
// ([rows, seqLen]), token types zeros, positions 0, 1, … in every row.
// Integer inputs get the declared element type (IntTensor).
func TokenFeed(inputs []Value, rows, seqLen int, ids, mask []int64) (map[string]*onnx.Tensor, error) {
	feed := map[string]*onnx.Tensor{}
	for _, in := range inputs {
		var data []int64
		switch InputRole(in.Name) {
		case RoleIDs:
			data = ids
		case RoleMask:
			data = mask
		case RoleTokenType:
			data = make([]int64, rows*seqLen)
		case RolePosition:
			data = make([]int64, rows*seqLen)
			for i := range data {
				data[i] = int64(i % seqLen)
			}
		default:
			return nil, fmt.Errorf("infer: %w", &TextFillError{Input: in, Option: "Inputs"})
		}
		t, err := IntTensor(in, []int{rows, seqLen}, data)
		if err != nil {
			return nil, err
		}
		feed[in.Name] = t
	}
	return feed, nil
}

// declaredSeqLen is the fixed second dimension of the first rank-2 input
// that has one, or 0.
func declaredSeqLen(inputs []Value) int {
	for _, in := range inputs {
		if len(in.Shape) == 2 && in.Shape[1].Value > 0 {
			return int(in.Shape[1].Value)
		}
	}
	return 0
}

// IntTensor makes the tensor of a [batch, sequence] token-level input of
// the given shape from data, in the input's declared element type (int64,
// int32 or float32).
func IntTensor(in Value, shape []int, data []int64) (*onnx.Tensor, error) {
	if len(in.Shape) != 0 && len(in.Shape) != 2 {
		return nil, fmt.Errorf("infer: input %q has rank %d, want [batch, sequence]", in.Name, len(in.Shape))
	}
	if len(in.Shape) == 2 && in.Shape[0].Value > 0 && int(in.Shape[0].Value) != shape[0] {
		return nil, fmt.Errorf("infer: input %q takes batch %d, got %d texts", in.Name, in.Shape[0].Value, shape[0])
	}
	switch in.DType {
	case onnx.Int64, onnx.Undefined:
		return onnx.NewInt64(shape, append([]int64(nil), data...)), nil
	case onnx.Int32:
		d := make([]int32, len(data))
		for i, v := range data {
			d[i] = int32(v)
		}
		return &onnx.Tensor{DType: onnx.Int32, Shape: shape, Data: d}, nil
	case onnx.Float:
		d := make([]float32, len(data))
		for i, v := range data {
			d[i] = float32(v)
		}
		return onnx.NewFloat(shape, d), nil
	}
	return nil, fmt.Errorf("infer: input %q is %s; text inputs are int64, int32 or float32", in.Name, onnx.TypeName(in.DType))
}
