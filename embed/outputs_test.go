package embed

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/tokenize"
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
	m, err := onnx.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenize.LoadForModel(path)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := infer.Open("native", m, infer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	ids := tok.Encode(text, 0)
	mask := make([]int64, len(ids))
	for i := range mask {
		mask[i] = 1
	}
	feed, err := infer.TokenFeed(sess.Inputs(), 1, len(ids), ids, mask)
	if err != nil {
		t.Fatal(err)
	}
	res, err := sess.Run(feed, "last_hidden_state")
	if err != nil {
		t.Fatal(err)
	}
	h := res["last_hidden_state"]
	return unit(toF64(h.Floats()[:h.Shape[2]]))
}
