package embed

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/models"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// TestEmbedTokenizers embeds texts with models whose tokenizer beside them
// is not WordPiece: a ModernBERT-shaped model with byte-level BPE in
// ModernBERT's form (testdata/tokenizers/modernbert-bpe) and a BERT graph
// with SentencePiece Unigram in XLM-RoBERTa's form (xlmr-unigram, as
// bge-m3 ships it). Each vector is checked against the model run directly
// on the ids Hugging Face's tokenizers library gives those texts
// (testdata/tokenizers/*_cases.json), mean-pooled and normalised in
// float64.
func TestEmbedTokenizers(t *testing.T) {
	modern := models.ModernBERTTinyConfig()
	modern.Vocab = 1507 // the tokenizer's 1500 entries and 7 added tokens
	for _, tc := range []struct {
		name, cases string
		model       func() (*onnxpb.ModelProto, error)
	}{
		{"modernbert-bpe", "bpe_cases.json", func() (*onnxpb.ModelProto, error) { return models.ModernBERT(modern) }},
		{"xlmr-unigram", "unigram_cases.json", func() (*onnxpb.ModelProto, error) {
			return models.BERT(models.Config{Vocab: 2002, Hidden: 32, Heads: 2, Layers: 2, Intermediate: 64, MaxPositions: 512, TypeVocab: 1, Opset: 17, Seed: 3})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { embedWithTokenizer(t, tc.name, tc.cases, tc.model) })
	}
}

func embedWithTokenizer(t *testing.T, name, casesFile string, build func() (*onnxpb.ModelProto, error)) {
	src := filepath.Join("..", "testdata", "tokenizers")
	data, err := os.ReadFile(filepath.Join(src, casesFile))
	if err != nil {
		t.Fatal(err)
	}
	var cases map[string][]struct {
		Text string  `json:"text"`
		IDs  []int64 `json:"ids"`
	}
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	var texts [][]int64
	var strs []string
	for _, c := range cases[name] {
		if len(c.IDs) > 12 && len(strs) < 6 {
			texts, strs = append(texts, c.IDs), append(strs, c.Text)
		}
	}
	if len(strs) < 6 {
		t.Fatalf("%d long cases", len(strs))
	}
	dir := t.TempDir()
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join(src, name, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m, err := build()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "model.onnx")
	if err := onnx.Save(m, path, onnx.SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	e := open(t, path, Options{Mode: Truncate})
	got, err := e.Embed(strs)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := infer.Open("native", m, infer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	for i, ids := range texts {
		mask := make([]int64, len(ids))
		for j := range mask {
			mask[j] = 1
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
		D := h.Shape[2]
		mean := make([]float64, D)
		for s, x := range h.Floats() {
			mean[s%D] += float64(x) / float64(len(ids))
		}
		want := unit(mean)
		for d := range want {
			if math.Abs(float64(got[i][d])-want[d]) > 1e-5 {
				t.Fatalf("%q: component %d is %g, the model on the reference ids gives %g", strs[i], d, got[i][d], want[d])
			}
		}
	}
}
