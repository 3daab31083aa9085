package onnx

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/linearize/linearize/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

func TestSummarizeSmallModel(t *testing.T) {
	m := smallModel(10)
	m.ProducerName = proto.String("hand")
	m.ProducerVersion = proto.String("1.0")
	m.OpsetImport = append(m.OpsetImport, &onnxpb.OperatorSetIdProto{Domain: proto.String("com.microsoft"), Version: proto.Int64(1)})
	m.Graph.Node = append(m.Graph.Node, &onnxpb.NodeProto{OpType: proto.String("Gelu"), Domain: proto.String("com.microsoft"), Input: []string{"y"}, Output: []string{"z"}})
	m.Graph.Output = append(m.Graph.Output, MakeValueInfo("z", Float, []Dim{{Value: -1, Param: "n"}, {Value: -1}}))
	// The initializer also listed as a graph input (IR < 4 style) must not
	// appear among the inputs.
	m.Graph.Input = append(m.Graph.Input, MakeValueInfo("w", Float, []Dim{{Value: 10}}))
	// A typed-field int64 initializer: 3 elements, 24 bytes.
	m.Graph.Initializer = append(m.Graph.Initializer, &onnxpb.TensorProto{Name: proto.String("k"), DataType: proto.Int32(int32(Int64)), Dims: []int64{3}, Int64Data: []int64{1, 2, 3}})
	s := Summarize(m)
	want := Summary{
		IRVersion: 8, Producer: "hand", ProducerVersion: "1.0",
		Opsets:           []OpsetSummary{{"ai.onnx", 17}, {"com.microsoft", 1}},
		Inputs:           []ValueSummary{{"x", "float32", []string{"10"}}},
		Outputs:          []ValueSummary{{"y", "float32", []string{"10"}}, {"z", "float32", []string{"n", "?"}}},
		Ops:              map[string]map[string]int{"ai.onnx": {"Add": 1}, "com.microsoft": {"Gelu": 1}},
		NodeCount:        2,
		Initializers:     2,
		InitializerBytes: 40 + 24,
	}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("Summarize =\n%+v\nwant\n%+v", s, want)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"ir_version", "producer", "opsets", "inputs", "outputs", "ops", "node_count", "initializer_count", "initializer_bytes"} {
		if _, ok := back[k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, b)
		}
	}
}

func TestSummarizeCorpus(t *testing.T) {
	dir := corpusDir(t)
	paths, _ := filepath.Glob(filepath.Join(dir, "*.onnx"))
	for _, p := range paths {
		m, err := Load(p)
		if err != nil {
			t.Fatal(err)
		}
		s := Summarize(m)
		// Independent counts: decoded initializer sizes, plain node count
		// (the corpus graphs have no subgraphs).
		var bytes int64
		for _, tp := range m.Graph.Initializer {
			x, err := DecodeTensor(tp)
			if err != nil {
				t.Fatal(err)
			}
			bytes += int64(x.Len() * ElemSize(x.DType))
		}
		if s.InitializerBytes != bytes || s.Initializers != len(m.Graph.Initializer) {
			t.Errorf("%s: %d initializers / %d bytes, want %d / %d", filepath.Base(p), s.Initializers, s.InitializerBytes, len(m.Graph.Initializer), bytes)
		}
		if s.NodeCount != len(m.Graph.Node) {
			t.Errorf("%s: node count %d, want %d", filepath.Base(p), s.NodeCount, len(m.Graph.Node))
		}
		if len(s.Inputs) == 0 || len(s.Outputs) == 0 {
			t.Errorf("%s: no inputs or outputs in summary", filepath.Base(p))
		}
	}
}
