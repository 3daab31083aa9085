package infer

import (
	"reflect"
	"strings"
	"testing"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/tokenize"
)

func tinyTokenizer(t *testing.T) *tokenize.Tokenizer {
	t.Helper()
	v := map[string]int64{"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "hello": 4, "world": 5, "!": 6}
	tok, err := tokenize.New(v, tokenize.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestInputRole(t *testing.T) {
	for name, want := range map[string]string{
		"input_ids": RoleIDs, "attention_mask": RoleMask, "token_type_ids": RoleTokenType, "position_ids": RolePosition,
		"input_mask": RoleMask, "segment_ids": RoleTokenType, "ids": RoleIDs, "pixel_values": "",
	} {
		if got := InputRole(name); got != want {
			t.Errorf("InputRole(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestTextInputs(t *testing.T) {
	tok := tinyTokenizer(t)
	dyn := []onnx.Dim{{Value: -1, Param: "batch"}, {Value: -1, Param: "sequence"}}
	inputs := []Value{
		{Name: "input_ids", DType: onnx.Int64, Shape: dyn},
		{Name: "attention_mask", DType: onnx.Int32, Shape: dyn},
		{Name: "token_type_ids", DType: onnx.Int64, Shape: dyn},
	}
	ti, err := TextInputs(tok, inputs, []string{"Hello world!", "hello"}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if ti.Batch != 2 || ti.SeqLen != 5 {
		t.Fatalf("batch %d × %d, want 2 × 5", ti.Batch, ti.SeqLen)
	}
	if got, want := ti.Feed["input_ids"].Int64s(), []int64{2, 4, 5, 6, 3, 2, 4, 3, 0, 0}; !reflect.DeepEqual(got, want) {
		t.Errorf("ids %v, want %v", got, want)
	}
	if m := ti.Feed["attention_mask"]; m.DType != onnx.Int32 || !reflect.DeepEqual(m.Data, []int32{1, 1, 1, 1, 1, 1, 1, 1, 0, 0}) {
		t.Errorf("mask %v %v", m, m.Data)
	}
	if got := ti.Feed["token_type_ids"].Int64s(); !reflect.DeepEqual(got, make([]int64, 10)) {
		t.Errorf("token types %v", got)
	}
	if err := CheckInputs(inputs, ti.Feed); err != nil {
		t.Error(err)
	}
	// A fixed declared length wins over the longest text.
	fixed := []Value{{Name: "input_ids", DType: onnx.Int64, Shape: []onnx.Dim{{Value: -1}, {Value: 7}}}}
	ti, err = TextInputs(tok, fixed, []string{"hello"}, 0, 0)
	if err != nil || ti.SeqLen != 7 {
		t.Errorf("declared length: %v %v", ti, err)
	}
	if _, err := TextInputs(tok, []Value{{Name: "pixel_values", DType: onnx.Float}}, []string{"x"}, 0, 0); err == nil || !strings.Contains(err.Error(), "pixel_values") {
		t.Errorf("unknown input: err = %v", err)
	}
	if _, err := TextInputs(tok, []Value{{Name: "input_ids", DType: onnx.String}}, []string{"x"}, 0, 0); err == nil {
		t.Error("string input: no error")
	}
}
