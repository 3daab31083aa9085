package infer

import (
	"errors"
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
	var fillErr *TextFillError
	if _, err := TextInputs(tok, []Value{{Name: "pixel_values", DType: onnx.Float}}, []string{"x"}, 0, 0); !errors.As(err, &fillErr) || fillErr.Input.Name != "pixel_values" {
		t.Errorf("unknown input: err = %v, want a TextFillError naming pixel_values", err)
	}
	if _, err := TextInputs(tok, []Value{{Name: "input_ids", DType: onnx.String}}, []string{"x"}, 0, 0); err == nil {
		t.Error("string input: no error")
	}
}

// TestTextFillable: the first input without a token role is named, with
// its type and the option that takes its value; inputs that all have a
// role pass.
func TestTextFillable(t *testing.T) {
	ids := Value{Name: "input_ids", DType: onnx.Int64}
	mask := Value{Name: "attention_mask", DType: onnx.Int64}
	task := Value{Name: "task_id", DType: onnx.Int64, Shape: []onnx.Dim{}}
	pixels := Value{Name: "pixel_values", DType: onnx.Float}
	for _, c := range []struct {
		inputs []Value
		want   string // "" for no error
	}{
		{nil, ""},
		{[]Value{ids, mask}, ""},
		{[]Value{ids, task, mask}, `input "task_id" (int64[]) is not ids, mask, token types or positions by its name, so text cannot fill it: give its value (Opt, --input task_id=VALUE)`},
		{[]Value{pixels, task}, `input "pixel_values" (float32[?...]) is not`},
	} {
		err := TextFillable(c.inputs, "Opt")
		var fillErr *TextFillError
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: %v, want nil", c.inputs, err)
		case c.want != "" && (!errors.As(err, &fillErr) || !strings.HasPrefix(err.Error(), c.want)):
			t.Errorf("%v: %v, want a TextFillError beginning %q", c.inputs, err, c.want)
		}
	}
}
