package runtime

import (
	"fmt"
	"path/filepath"
	"reflect"
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
