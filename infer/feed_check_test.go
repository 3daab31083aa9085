package infer

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// tableModel declares BERT's four token-level inputs, [batch, sequence]
// each, and gathers ids, token types and positions from tables of the
// given rows.
func tableModel(words, types, positions int) *onnxpb.ModelProto {
	dyn := []onnx.Dim{{Value: -1, Param: "batch"}, {Value: -1, Param: "sequence"}}
	g := &onnxpb.GraphProto{Name: proto.String("g")}
	for _, in := range []struct {
		input, table string
		rows         int
	}{{"input_ids", "word", words}, {"token_type_ids", "type", types}, {"position_ids", "pos", positions}} {
		tp, _ := onnx.EncodeTensor(in.table, onnx.NewFloat([]int{in.rows, 2}, make([]float32, 2*in.rows)))
		g.Initializer = append(g.Initializer, tp)
		g.Node = append(g.Node, &onnxpb.NodeProto{OpType: proto.String("Gather"), Input: []string{in.table, in.input}, Output: []string{in.table + "_e"}})
		g.Output = append(g.Output, onnx.MakeValueInfo(in.table+"_e", onnx.Float, nil))
	}
	for _, name := range []string{"input_ids", "attention_mask", "token_type_ids", "position_ids"} {
		g.Input = append(g.Input, onnx.MakeValueInfo(name, onnx.Int64, dyn))
	}
	return &onnxpb.ModelProto{IrVersion: proto.Int64(8), Graph: g,
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(17)}}}
}

// TestFeedSpecChecksTokenInputs: inputs whose lengths disagree, and ids,
// token types or positions outside the tables they index, are refused by
// Build (no Kind: the data is at fault) with an error naming the input and
// the value, before any runtime sees them; values at the tables' last rows
// build.
func TestFeedSpecChecksTokenInputs(t *testing.T) {
	m := tableModel(30, 2, 8)
	dir := t.TempDir()
	file := func(name string, shape []int, vals ...int64) string {
		p := filepath.Join(dir, name+".npy")
		if err := onnx.WriteNPY(p, onnx.NewInt64(shape, vals)); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ids4 := file("ids4", []int{1, 4}, 2, 7, 29, 3)
	mask4 := file("mask4", []int{1, 4}, 1, 1, 1, 1)
	mask5 := file("mask5", []int{1, 5}, 1, 1, 1, 1, 1)
	types4 := file("types4", []int{1, 4}, 0, 0, 1, 1)
	pos4 := file("pos4", []int{1, 4}, 0, 1, 2, 7)
	inputs := func(kv ...string) map[string]string {
		m := map[string]string{"input_ids": ids4, "attention_mask": mask4, "token_type_ids": types4, "position_ids": pos4}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	cases := []struct {
		name         string
		spec         FeedSpec
		field, input string
		found        string // "" builds
	}{
		{"all within the tables", FeedSpec{Inputs: inputs()}, "", "", ""},
		{"mask longer than the ids", FeedSpec{Inputs: inputs("attention_mask", mask5)}, "Inputs", "attention_mask",
			`shape [1 5] has sequence 5 (dimension 1), but input "input_ids" has sequence 4`},
		{"a file against random inputs of another length", FeedSpec{Random: true, Inputs: map[string]string{"input_ids": ids4}}, "Inputs", "input_ids",
			`shape [1 4] has sequence 4, but input "attention_mask" has sequence 16`},
		{"id past the vocabulary", FeedSpec{Inputs: inputs("input_ids", file("ids30", []int{1, 4}, 2, 30, 4, 3))}, "Inputs", "input_ids",
			"token id 30 (element 1) is outside the 30 rows of the embedding table it indexes (0..29)"},
		{"negative id", FeedSpec{Inputs: inputs("input_ids", file("idsneg", []int{1, 4}, 2, 4, 4, -1))}, "Inputs", "input_ids",
			"token id -1 (element 3)"},
		{"token type past its table", FeedSpec{Inputs: inputs("token_type_ids", file("types2", []int{1, 4}, 0, 2, 0, 0))}, "Inputs", "token_type_ids",
			"token type 2 (element 1) is outside the 2 rows"},
		{"position past its table", FeedSpec{Inputs: inputs("position_ids", file("pos8", []int{1, 4}, 5, 6, 7, 8))}, "Inputs", "position_ids",
			"position 8 (element 3) is outside the 8 rows"},
		// The tokenizer's ids (up to 6) against a 5-row word table.
		{"texts past a smaller vocabulary", FeedSpec{Texts: []string{"hello world !"}, Tokenizer: tinyTokenizer(t)}, "Texts", "input_ids",
			`input "input_ids": token id 5 (element 2) is outside the 5 rows`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			model := m
			if c.spec.Tokenizer != nil {
				model = tableModel(5, 2, 8)
			}
			_, err := c.spec.Build(model, "")
			if c.found == "" {
				if err != nil {
					t.Fatalf("want no error, got %v", err)
				}
				return
			}
			var fe *FeedError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a *FeedError", err)
			}
			if fe.Kind != nil || fe.Field != c.field || fe.Input != c.input {
				t.Errorf("%#v, want no kind, field %q, input %q", fe, c.field, c.input)
			}
			if !strings.Contains(err.Error(), c.found) {
				t.Errorf("message %q lacks %q", err, c.found)
			}
		})
	}
}
