package infer

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// embedModel: ids -Cast-> Unsqueeze -> Gather(table of `rows` rows).
func embedModel(rows int) *onnxpb.ModelProto {
	table, _ := onnx.EncodeTensor("table", onnx.NewFloat([]int{rows, 2}, make([]float32, 2*rows)))
	axes, _ := onnx.EncodeTensor("axes", onnx.NewInt64([]int{1}, []int64{0}))
	to := &onnxpb.AttributeProto{Name: proto.String("to"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(int64(onnx.Int64))}
	return &onnxpb.ModelProto{
		IrVersion:   proto.Int64(8),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(17)}},
		Graph: &onnxpb.GraphProto{
			Node: []*onnxpb.NodeProto{
				{OpType: proto.String("Cast"), Input: []string{"input_ids"}, Output: []string{"c"}, Attribute: []*onnxpb.AttributeProto{to}},
				{OpType: proto.String("Unsqueeze"), Input: []string{"c", "axes"}, Output: []string{"u"}},
				{OpType: proto.String("Gather"), Input: []string{"table", "u"}, Output: []string{"e"}},
			},
			Initializer: []*onnxpb.TensorProto{table, axes},
			Input: []*onnxpb.ValueInfoProto{
				onnx.MakeValueInfo("input_ids", onnx.Int32, []onnx.Dim{{Value: -1, Param: "batch"}, {Value: -1, Param: "sequence"}}),
				onnx.MakeValueInfo("attention_mask", onnx.Int64, []onnx.Dim{{Value: -1, Param: "batch"}, {Value: -1, Param: "sequence"}}),
				onnx.MakeValueInfo("token_type_ids", onnx.Int64, []onnx.Dim{{Value: -1}, {Value: -1}}),
				onnx.MakeValueInfo("position_ids", onnx.Int64, []onnx.Dim{{Value: 1}, {Value: -1, Param: "sequence"}}),
				onnx.MakeValueInfo("past", onnx.Float, []onnx.Dim{{Value: 2}, {Value: -1, Param: "batch"}, {Value: -1, Param: "past_len"}}),
				onnx.MakeValueInfo("mask2", onnx.Float, []onnx.Dim{{Value: -1, Param: "batch"}, {Value: -1, Param: "past_len+seq_len"}}),
				onnx.MakeValueInfo("flag", onnx.Bool, []onnx.Dim{{Value: 4}}),
			},
			Output: []*onnxpb.ValueInfoProto{onnx.MakeValueInfo("e", onnx.Float, nil)},
		},
	}
}

func declaredInputs(m *onnxpb.ModelProto) []Value {
	var vs []Value
	for _, vi := range m.Graph.Input {
		vs = append(vs, valueOf(vi))
	}
	return vs
}

func TestRandomInputs(t *testing.T) {
	m := embedModel(50)
	opts := RandomOptions{Batch: 3, SeqLen: 40, PastLen: 5, Seed: 9}
	feed, err := RandomInputs(m, declaredInputs(m), opts)
	if err != nil {
		t.Fatal(err)
	}
	shapes := map[string]string{
		"input_ids": "[3 40]", "attention_mask": "[3 40]", "token_type_ids": "[3 40]",
		"position_ids": "[1 40]", "past": "[2 3 5]", "mask2": "[3 45]", "flag": "[4]",
	}
	for name, want := range shapes {
		if got := fmt.Sprint(feed[name].Shape); got != want {
			t.Errorf("%s: shape %s, want %s", name, got, want)
		}
	}
	ids := feed["input_ids"].Data.([]int32)
	hi := int32(0)
	for _, v := range ids {
		if v < 0 || v >= 50 {
			t.Fatalf("token id %d outside the 50-row table", v)
		}
		hi = max(hi, v)
	}
	if hi < 25 { // 120 uniform draws below 50 essentially never stay below 25
		t.Errorf("token ids do not spread over the table: max %d", hi)
	}
	for _, v := range feed["attention_mask"].Int64s() {
		if v != 1 {
			t.Fatal("attention mask is not all ones")
		}
	}
	for _, v := range feed["token_type_ids"].Int64s() {
		if v != 0 {
			t.Fatal("token types are not all zeros")
		}
	}
	for i, v := range feed["position_ids"].Int64s() {
		if v != int64(i%40)%2 { // no table: positions wrap below the {0,1} default bound
			t.Fatalf("position_ids[%d] = %d", i, v)
		}
	}
	for _, v := range feed["mask2"].Floats() {
		if v != 1 {
			t.Fatal("float mask is not all ones")
		}
	}
	again, err := RandomInputs(m, declaredInputs(m), opts)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(feed, again) {
		t.Error("same seed gave different inputs")
	}
	opts.Seed++
	other, err := RandomInputs(m, declaredInputs(m), opts)
	if err != nil {
		t.Fatal(err)
	}
	if reflect.DeepEqual(feed["past"], other["past"]) {
		t.Error("a different seed gave the same normal values")
	}
	if err := CheckInputs(declaredInputs(m), feed); err != nil {
		t.Errorf("random inputs fail the declared types: %v", err)
	}
	unknown := []Value{{Name: "x", DType: onnx.Float}}
	if _, err := RandomInputs(m, unknown, opts); err == nil {
		t.Error("RandomInputs accepted an input of unknown rank")
	}
}

// TestRandomInputsCorpusTable checks token ids against the word table of
// a corpus model, found here by scanning for the Gather it feeds.
func TestRandomInputsCorpusTable(t *testing.T) {
	d, _ := filepath.Abs(filepath.Join("..", "..", "shared", "corpus", "ort-fusion", "embed_layer_norm_format3.onnx"))
	m, err := onnx.Load(d)
	if err != nil {
		t.Skipf("corpus model absent (CI clones the project beside shared/): %v", err)
	}
	var rows int64 = -1
	for _, n := range m.Graph.Node {
		if n.GetOpType() == "Gather" && n.Input[1] == "input_ids" {
			for _, init := range m.Graph.Initializer {
				if init.GetName() == n.Input[0] {
					rows = init.GetDims()[0]
				}
			}
		}
	}
	if rows < 0 {
		t.Fatal("no word-embedding Gather in the corpus model")
	}
	feed, err := RandomInputs(m, declaredInputs(m), RandomOptions{Batch: 4, SeqLen: 3, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range feed["input_ids"].Int64s() {
		if v < 0 || v >= rows {
			t.Fatalf("token id %d outside the %d-row word table", v, rows)
		}
	}
}

// TestRandomInputsEmbedLayerNorm finds the tables of a fused
// com.microsoft:EmbedLayerNormalization node.
func TestRandomInputsEmbedLayerNorm(t *testing.T) {
	tensor := func(name string, rows int) *onnxpb.TensorProto {
		tp, _ := onnx.EncodeTensor(name, onnx.NewFloat([]int{rows, 1}, make([]float32, rows)))
		return tp
	}
	dims := []onnx.Dim{{Value: 2}, {Value: 64}}
	m := &onnxpb.ModelProto{Graph: &onnxpb.GraphProto{
		Node: []*onnxpb.NodeProto{{
			OpType: proto.String("EmbedLayerNormalization"), Domain: proto.String("com.microsoft"),
			Input:  []string{"ids", "seg", "word", "pos", "segtab", "gamma", "beta", "", "pos_ids"},
			Output: []string{"out", "mask_index"},
		}},
		Initializer: []*onnxpb.TensorProto{tensor("word", 7), tensor("pos", 100), tensor("segtab", 3)},
		Input: []*onnxpb.ValueInfoProto{
			onnx.MakeValueInfo("ids", onnx.Int32, dims),
			onnx.MakeValueInfo("seg", onnx.Int32, dims),
			onnx.MakeValueInfo("pos_ids", onnx.Int32, dims),
		},
	}}
	// seg and pos_ids are not named like types or positions here, so
	// they are drawn as ids below their own tables.
	feed, err := RandomInputs(m, declaredInputs(m), RandomOptions{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	for name, rows := range map[string]int32{"ids": 7, "seg": 3, "pos_ids": 100} {
		hi := int32(0)
		for _, v := range feed[name].Data.([]int32) {
			if v < 0 || v >= rows {
				t.Fatalf("%s: value %d outside the %d-row table", name, v, rows)
			}
			hi = max(hi, v)
		}
		if hi < rows/2 {
			t.Errorf("%s: values do not spread over the %d-row table (max %d)", name, rows, hi)
		}
	}
}

// bertInputsModel declares BERT's three token-level inputs and nothing
// else.
func bertInputsModel() *onnxpb.ModelProto {
	dyn := []onnx.Dim{{Value: -1, Param: "batch"}, {Value: -1, Param: "sequence"}}
	return &onnxpb.ModelProto{Graph: &onnxpb.GraphProto{Input: []*onnxpb.ValueInfoProto{
		onnx.MakeValueInfo("input_ids", onnx.Int64, dyn),
		onnx.MakeValueInfo("attention_mask", onnx.Int64, dyn),
		onnx.MakeValueInfo("token_type_ids", onnx.Int64, dyn),
	}}}
}

func TestFeedSpecBuild(t *testing.T) {
	m := bertInputsModel()
	tok := tinyTokenizer(t)
	// Random inputs with the defaults; the same spec gives the same feed.
	f, err := FeedSpec{Random: true, Seed: 3}.Build(m, "")
	if err != nil {
		t.Fatal(err)
	}
	if f.Batch != DefaultFeedBatch || f.SeqLen != DefaultFeedSeqLen || f.Description != "batch 1 × 16 (random inputs, seed 3)" || len(f.Mask) != 16 {
		t.Errorf("random: %d × %d %q mask %v", f.Batch, f.SeqLen, f.Description, f.Mask)
	}
	if again, _ := (FeedSpec{Random: true, Seed: 3}).Build(m, ""); !reflect.DeepEqual(f, again) {
		t.Error("the same spec built different feeds")
	}
	// Texts, one file among them; a tensor file for one input.
	dir := t.TempDir()
	texts := filepath.Join(dir, "texts.txt")
	os.WriteFile(texts, []byte("hello\n"), 0o644)
	f, err = FeedSpec{Texts: []string{"Hello world!"}, TextFiles: []string{texts}, Tokenizer: tok}.Build(m, "")
	if err != nil {
		t.Fatal(err)
	}
	if f.Batch != 2 || f.SeqLen != 5 || !reflect.DeepEqual(f.Lengths, []int{5, 3}) || f.Description != "2 texts, 5 tokens each after padding" {
		t.Errorf("texts: %d × %d %v %q", f.Batch, f.SeqLen, f.Lengths, f.Description)
	}
	types := filepath.Join(dir, "types.npy")
	if err := onnx.WriteNPY(types, onnx.NewInt64([]int{1, 4}, []int64{0, 0, 1, 1})); err != nil {
		t.Fatal(err)
	}
	f, err = FeedSpec{Texts: []string{"hello"}, SeqLen: 4, Inputs: map[string]string{"token_type_ids": types}, Tokenizer: tok}.Build(m, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Tensors["token_type_ids"].Int64s(); !reflect.DeepEqual(got, []int64{0, 0, 1, 1}) {
		t.Errorf("token types from the file: %v", got)
	}
}

func TestFeedSpecErrors(t *testing.T) {
	m := bertInputsModel()
	missing := filepath.Join(t.TempDir(), "missing.npy")
	cases := []struct {
		spec                FeedSpec
		kind                error
		field, input, found string
	}{
		{FeedSpec{Random: true, Texts: []string{"x"}}, ErrFeedConflict, "Texts", "", "Texts: cannot be combined with Random"},
		{FeedSpec{Random: true, TextFiles: []string{"f"}}, ErrFeedConflict, "TextFiles", "", "cannot be combined with Random"},
		{FeedSpec{Random: true, SeqLen: -1}, ErrFeedValue, "SeqLen", "", "SeqLen: -1 is negative"},
		{FeedSpec{Random: true, Batch: -2}, ErrFeedValue, "Batch", "", "-2 is negative"},
		{FeedSpec{Texts: []string{"x"}, MaxLen: 1}, ErrFeedValue, "MaxLen", "", "at least 2 tokens"},
		{FeedSpec{}, ErrInputNotGiven, "", "input_ids", `input "input_ids" not given`},
		{FeedSpec{Random: true, Inputs: map[string]string{"input_ids": missing}}, nil, "Inputs", "input_ids", "missing.npy"},
		{FeedSpec{Random: true, Inputs: map[string]string{"nope": missing}}, nil, "Inputs", "nope", `no input "nope" (inputs: input_ids, attention_mask, token_type_ids)`},
		{FeedSpec{TextFiles: []string{missing}}, nil, "TextFiles", "", "missing.npy"},
		{FeedSpec{Texts: []string{"x"}, Vocab: missing}, nil, "Vocab", "", "missing.npy"},
		{FeedSpec{Texts: []string{"x"}}, nil, "Vocab", "", "pass --vocab PATH"}, // none beside the model
	}
	for _, c := range cases {
		_, err := c.spec.Build(m, filepath.Join(t.TempDir(), "m.onnx"))
		var fe *FeedError
		if !errors.As(err, &fe) {
			t.Errorf("%+v: error %v is not a *FeedError", c.spec, err)
			continue
		}
		if (c.kind != nil && !errors.Is(err, c.kind)) || fe.Field != c.field || fe.Input != c.input {
			t.Errorf("%+v: %#v, want kind %v field %q input %q", c.spec, fe, c.kind, c.field, c.input)
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "infer: ") || !strings.Contains(msg, c.found) || strings.Count(msg, "infer: ") != 1 {
			t.Errorf("%+v: message %q, want one prefix and %q", c.spec, msg, c.found)
		}
	}
}

// TestFeedSpecLimit: with Limit set, a longer --seq-len is a value error,
// texts or tensor files that make longer sequences are refused (no Kind:
// the files are at fault), both matching ErrTooLong; MaxLen and the random
// inputs' length default to the limit; within it nothing changes.
func TestFeedSpecLimit(t *testing.T) {
	m := bertInputsModel()
	tok := tinyTokenizer(t)
	long := strings.Repeat("hello world ", 20) // 40 wordpieces, 42 tokens
	dir := t.TempDir()
	ids := filepath.Join(dir, "ids.npy")
	if err := onnx.WriteNPY(ids, onnx.NewInt64([]int{1, 12}, make([]int64, 12))); err != nil {
		t.Fatal(err)
	}
	textFile := filepath.Join(dir, "texts.txt")
	os.WriteFile(textFile, []byte(long+"\n"), 0o644)
	cases := []struct {
		spec  FeedSpec
		kind  error
		field string
		found string
	}{
		{FeedSpec{Random: true, SeqLen: 11, Limit: 10}, ErrFeedValue, "SeqLen", "11 tokens, more than the 10 positions"},
		{FeedSpec{Texts: []string{long}, MaxLen: 64, Tokenizer: tok, Limit: 10}, nil, "Texts", "the longest text has 42 tokens, more than the 10 positions"},
		{FeedSpec{TextFiles: []string{textFile}, MaxLen: 64, Tokenizer: tok, Limit: 10}, nil, "TextFiles", "42 tokens"},
		{FeedSpec{Random: true, Inputs: map[string]string{"input_ids": ids}, Limit: 10}, nil, "Inputs", "12 tokens, more than the 10 positions"},
	}
	for _, c := range cases {
		_, err := c.spec.Build(m, "")
		var fe *FeedError
		if !errors.As(err, &fe) || !errors.Is(err, ErrTooLong) {
			t.Errorf("%+v: error %v, want a *FeedError matching ErrTooLong", c.spec, err)
			continue
		}
		if (c.kind != nil) != (fe.Kind != nil) || (c.kind != nil && !errors.Is(err, c.kind)) || fe.Field != c.field {
			t.Errorf("%+v: %#v, want kind %v field %q", c.spec, fe, c.kind, c.field)
		}
		if !strings.Contains(err.Error(), c.found) {
			t.Errorf("%+v: message %q lacks %q", c.spec, err, c.found)
		}
	}
	// Defaults follow the limit: a long text is cut to it, random inputs
	// are no longer than it.
	f, err := FeedSpec{Texts: []string{long}, Tokenizer: tok, Limit: 10}.Build(m, "")
	if err != nil || f.SeqLen != 10 {
		t.Errorf("text with the default MaxLen under Limit 10: %v, %v; want 10 tokens", f, err)
	}
	f, err = FeedSpec{Texts: []string{long}, Tokenizer: tok, Limit: 30}.Build(m, "")
	if err != nil || f.SeqLen != 30 {
		t.Errorf("text with the default MaxLen under Limit 30: %v, %v; want 30 tokens", f, err)
	}
	f, err = FeedSpec{Random: true, Limit: 8}.Build(m, "")
	if err != nil || f.SeqLen != 8 {
		t.Errorf("random inputs under Limit 8: %v, %v; want 8 tokens", f, err)
	}
	// Within the limit, or without one, the spec builds as before.
	for _, s := range []FeedSpec{
		{Random: true, SeqLen: 10, Limit: 10},
		{Texts: []string{long}, MaxLen: 64, Tokenizer: tok},
		{Random: true, Inputs: map[string]string{"input_ids": ids}, Limit: 12},
	} {
		if _, err := s.Build(m, ""); err != nil {
			t.Errorf("%+v: %v", s, err)
		}
	}
}

// TestInputValue: a number fills an input of one element in its declared
// type and rank; an input of more elements, or of a type a number does
// not write, is refused naming it; a spec that is no number is a file.
func TestInputValue(t *testing.T) {
	scalar := []onnx.Dim{}
	one := []onnx.Dim{{Value: 1}}
	sym := []onnx.Dim{{Value: -1, Param: "n"}}
	for _, c := range []struct {
		dt    onnx.DataType
		shape []onnx.Dim
		spec  string
		want  *onnx.Tensor
		err   string
	}{
		{onnx.Int64, scalar, "4", onnx.NewInt64([]int{}, []int64{4}), ""},
		{onnx.Int64, one, "-3", onnx.NewInt64([]int{1}, []int64{-3}), ""},
		{onnx.Int64, nil, "+7", onnx.NewInt64([]int{}, []int64{7}), ""},
		{onnx.Int32, sym, "5", &onnx.Tensor{DType: onnx.Int32, Shape: []int{1}, Data: []int32{5}}, ""},
		{onnx.Float, scalar, "0.25", onnx.NewFloat([]int{}, []float32{0.25}), ""},
		{onnx.Double, one, "1e-3", &onnx.Tensor{DType: onnx.Double, Shape: []int{1}, Data: []float64{1e-3}}, ""},
		{onnx.Int64, scalar, "4.5", nil, `"4.5" is not an integer`},
		{onnx.Int32, scalar, "3000000000", nil, "out of range"},
		{onnx.Int64, []onnx.Dim{{Value: 2}}, "4", nil, "a number fills only an input of one element"},
		{onnx.Int64, []onnx.Dim{{Value: -1}, {Value: -1}}, "4", nil, "a number fills only an input of one element"},
		{onnx.Bool, scalar, "1", nil, "a number fills only integer and float32/float64 inputs"},
		{onnx.Int64, scalar, "./4", nil, "./4"},   // a path: the file is read (and is missing)
		{onnx.Int64, scalar, "inf", nil, "inf"},   // not written as a number: a path
		{onnx.Float, scalar, "-.5e", nil, "-.5e"}, // no number: a path
	} {
		v := Value{Name: "task_id", DType: c.dt, Shape: c.shape}
		got, err := InputValue(v, c.spec)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s %v %q: %v, want an error saying %q", onnx.TypeName(c.dt), c.shape, c.spec, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s %v %q: %v", onnx.TypeName(c.dt), c.shape, c.spec, err)
			continue
		}
		if got.DType != c.want.DType || !slices.Equal(got.Shape, c.want.Shape) || fmt.Sprint(got.Data) != fmt.Sprint(c.want.Data) {
			t.Errorf("%s %v %q: %v %v, want %v %v", onnx.TypeName(c.dt), c.shape, c.spec, got, got.Data, c.want, c.want.Data)
		}
	}
}
