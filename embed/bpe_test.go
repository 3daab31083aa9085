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
)

// TestEmbedByteLevelBPE embeds texts with a ModernBERT-shaped model whose
// tokenizer beside it is byte-level BPE in ModernBERT's form
// (testdata/tokenizers/modernbert-bpe), and checks each vector against
// the model run directly on the ids Hugging Face's tokenizers library
// gives those texts (testdata/tokenizers/bpe_cases.json), mean-pooled and
// normalised in float64.
func TestEmbedByteLevelBPE(t *testing.T) {
	src := filepath.Join("..", "testdata", "tokenizers")
	data, err := os.ReadFile(filepath.Join(src, "bpe_cases.json"))
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
	for _, c := range cases["modernbert-bpe"] {
		if len(c.IDs) > 12 && len(strs) < 6 {
			texts, strs = append(texts, c.IDs), append(strs, c.Text)
		}
	}
	if len(strs) < 6 {
		t.Fatalf("%d long cases", len(strs))
	}
	dir := t.TempDir()
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join(src, "modernbert-bpe", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := models.ModernBERTTinyConfig()
	cfg.Vocab = 1507 // the tokenizer's 1500 entries and 7 added tokens
	m, err := models.ModernBERT(cfg)
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
