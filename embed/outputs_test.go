package embed

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// threeHeads rewrites the tiny model at path the way bge-m3's ONNX exports
// with dense, sparse and ColBERT heads are written: its outputs become
// sparse_vecs (relu(h·w), [batch, seq, 1]), dense (the hidden state at
// [CLS], [batch, dim]) and colbert_vecs (h·W, [batch, seq, dim]), in that
// order, and last_hidden_state is no output any more. With dense false
// the dense output is left out.
func threeHeads(t *testing.T, path string, dense bool) {
	t.Helper()
	m, err := onnx.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	g := m.Graph
	const h = 64
	add := func(name string, v *onnx.Tensor) {
		tp, err := onnx.EncodeTensor(name, v)
		if err != nil {
			t.Fatal(err)
		}
		g.Initializer = append(g.Initializer, tp)
	}
	w1 := make([]float32, h)
	w2 := make([]float32, h*h)
	for i := range w1 {
		w1[i] = float32(i%7-3) / 10
	}
	for i := range w2 {
		w2[i] = float32(i%11-5) / 20
	}
	add("sparse_w", onnx.NewFloat([]int{h, 1}, w1))
	add("colbert_w", onnx.NewFloat([]int{h, h}, w2))
	add("cls_index", onnx.NewInt64([]int{}, []int64{0}))
	node := func(op string, in []string, out string, attrs ...*onnxpb.AttributeProto) {
		g.Node = append(g.Node, &onnxpb.NodeProto{OpType: proto.String(op), Name: proto.String(out), Input: in, Output: []string{out}, Attribute: attrs})
	}
	node("MatMul", []string{"last_hidden_state", "sparse_w"}, "sparse_logits")
	node("Relu", []string{"sparse_logits"}, "sparse_vecs")
	node("Gather", []string{"last_hidden_state", "cls_index"}, "dense", &onnxpb.AttributeProto{Name: proto.String("axis"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(1)})
	node("MatMul", []string{"last_hidden_state", "colbert_w"}, "colbert_vecs")
	b, s := onnx.Dim{Value: -1, Param: "batch"}, onnx.Dim{Value: -1, Param: "sequence"}
	g.Output = []*onnxpb.ValueInfoProto{onnx.MakeValueInfo("sparse_vecs", onnx.Float, []onnx.Dim{b, s, {Value: 1}})}
	if dense {
		g.Output = append(g.Output, onnx.MakeValueInfo("dense", onnx.Float, []onnx.Dim{b, {Value: h}}))
	}
	g.Output = append(g.Output, onnx.MakeValueInfo("colbert_vecs", onnx.Float, []onnx.Dim{b, s, {Value: h}}))
	if err := onnx.Save(m, path, onnx.SaveOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestOutputChoice: of a model with dense, sparse and ColBERT heads and no
// hidden-state output, the dense [batch, dim] output is read as the
// model's own vector (PoolOutput), whatever the mode: the vectors are the
// normalised hidden state at [CLS] of the unmodified model run directly.
// Without a dense output the per-token heads are not taken for hidden
// states: Open refuses, listing the outputs, until one is named.
func TestOutputChoice(t *testing.T) {
	orig := modelDir(t)
	path := filepath.Join(filepath.Dir(orig), "m3.onnx")
	data, err := os.ReadFile(orig)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	threeHeads(t, path, true)
	text := "the man is eating food"
	for _, mode := range []Mode{Truncate, Chunk, Long} {
		e := open(t, path, Options{Mode: mode})
		if e.Output() != "dense" || e.Pooling() != PoolOutput {
			t.Fatalf("%s: output %s, pooling %s; want dense, %s", mode, e.Output(), e.Pooling(), PoolOutput)
		}
		got, err := e.Embed([]string{text})
		if err != nil {
			t.Fatal(err)
		}
		near(t, string(mode), got[0], clsReference(t, orig, text), 1e-5)
	}
	if _, err := Open(path, Options{Backend: "native", Pooling: PoolMean}); err == nil || !strings.Contains(err.Error(), "output dense is pooled already") {
		t.Errorf("pooling mean of the dense output: %v, want a refusal", err)
	}

	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	threeHeads(t, path, false)
	_, err = Open(path, Options{Backend: "native"})
	if err == nil || !strings.Contains(err.Error(), "outputs sparse_vecs, colbert_vecs); name the one to read") {
		t.Errorf("ColBERT and sparse heads only: %v, want a refusal listing them", err)
	}
	if e := open(t, path, Options{Output: "colbert_vecs"}); e.Pooling() != PoolMean {
		t.Errorf("colbert_vecs named: pooling %s, want mean", e.Pooling())
	}
}

// clsReference runs the model at path directly on [CLS] text [SEP] and
// returns its last hidden state at [CLS], normalised.
func clsReference(t *testing.T, path, text string) []float64 {
	t.Helper()
	h := directHidden(t, path, text)
	return unit(toF64(h.Floats()[:h.Shape[2]]))
}

// withSentenceOutput adds to the tiny model at path an output
// sentence_embedding, [batch, dim], the hidden state at [CLS] (as an
// export with its sentence-transformers modules writes its final vector),
// after last_hidden_state.
func withSentenceOutput(t *testing.T, path string) {
	t.Helper()
	m, err := onnx.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	g := m.Graph
	tp, err := onnx.EncodeTensor("cls_index", onnx.NewInt64([]int{}, []int64{0}))
	if err != nil {
		t.Fatal(err)
	}
	g.Initializer = append(g.Initializer, tp)
	g.Node = append(g.Node, &onnxpb.NodeProto{OpType: proto.String("Gather"), Name: proto.String("sentence"),
		Input: []string{"last_hidden_state", "cls_index"}, Output: []string{"sentence_embedding"},
		Attribute: []*onnxpb.AttributeProto{{Name: proto.String("axis"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(1)}}})
	g.Output = append(g.Output, onnx.MakeValueInfo("sentence_embedding", onnx.Float, []onnx.Dim{{Value: -1, Param: "batch"}, {Value: 64}}))
	if err := onnx.Save(m, path, onnx.SaveOptions{}); err != nil {
		t.Fatal(err)
	}
}

// writeModules writes sentence-transformers files beside the model at
// path: modules.json listing a Transformer, a mean Pooling and, with
// dense, a Dense module after it.
func writeModules(t *testing.T, path string, dense bool) {
	t.Helper()
	dir := filepath.Dir(path)
	mods := `[{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
	 {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}`
	if dense {
		mods += `, {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}`
	}
	if err := os.WriteFile(filepath.Join(dir, "modules.json"), []byte(mods+"]"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "1_Pooling"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := `{"word_embedding_dimension": 64, "pooling_mode_mean_tokens": true}`
	if err := os.WriteFile(filepath.Join(dir, "1_Pooling", "config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestModulesAfterPooling: when the sentence-transformers files list a
// module after the pooling that embed does not apply (Dense), pooled
// hidden states are not the model's vectors: the export's sentence
// output is read instead (its vectors are that output's, here the
// normalised hidden state at [CLS]), and a model without one is refused,
// naming the module. Without such a module the hidden states are pooled
// as the files say.
func TestModulesAfterPooling(t *testing.T) {
	path := modelDir(t)
	writeModules(t, path, true)
	_, err := Open(path, Options{Backend: "native"})
	if err == nil || !strings.Contains(err.Error(), "lists Dense (2_Dense) after the pooling, which embed does not apply") {
		t.Errorf("Dense without a sentence output: %v, want a refusal naming it", err)
	}

	withSentenceOutput(t, path)
	e := open(t, path, Options{})
	if e.Output() != "sentence_embedding" || e.Pooling() != PoolOutput {
		t.Fatalf("with Dense: output %s, pooling %s; want sentence_embedding, %s", e.Output(), e.Pooling(), PoolOutput)
	}
	text := "the man is eating food"
	got, err := e.Embed([]string{text})
	if err != nil {
		t.Fatal(err)
	}
	near(t, "sentence_embedding", got[0], clsReference(t, modelDir(t), text), 1e-5)

	writeModules(t, path, false)
	if e := open(t, path, Options{}); e.Output() != "last_hidden_state" || e.Pooling() != PoolMean {
		t.Errorf("without Dense: output %s, pooling %s; want last_hidden_state, mean", e.Output(), e.Pooling())
	}
}
