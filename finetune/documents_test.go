package finetune

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/tokenize"
)

// DocumentWindows cuts documents into rows of whole text, framed as a
// whole or every frame tokens, takes rows round robin across documents,
// and HoldOut holds out whole documents.
func TestDocumentWindows(t *testing.T) {
	vocab := map[string]int64{"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3}
	for i := 0; i < 40; i++ {
		vocab[fmt.Sprintf("w%d", i)] = int64(10 + i)
	}
	tok, err := tokenize.New(vocab, tokenize.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	words := func(lo, n int) string {
		var b []string
		for i := lo; i < lo+n; i++ {
			b = append(b, fmt.Sprintf("w%d", i))
		}
		return strings.Join(b, " ")
	}
	docs := []string{words(0, 13), words(20, 5), words(30, 1)}
	inputs := []infer.Value{{Name: "input_ids", DType: onnx.Int64}, {Name: "attention_mask", DType: onnx.Int64}}
	for _, c := range []struct {
		name               string
		seqLen, frame, max int
		want               [][]int64 // ids of each row, unpadded
		doc                []int
	}{
		{"whole rows", 8, 0, 0, [][]int64{
			{2, 10, 11, 12, 13, 14, 15, 3}, {2, 30, 31, 32, 33, 34, 3}, {2, 40, 3},
			{2, 16, 17, 18, 19, 20, 21, 3}, {2, 22, 3}}, []int{0, 1, 2, 0, 0}},
		{"framed every 4", 8, 4, 0, [][]int64{
			{2, 10, 11, 3, 2, 12, 13, 3}, {2, 30, 31, 3, 2, 32, 33, 3}, {2, 40, 3},
			{2, 14, 15, 3, 2, 16, 17, 3}, {2, 34, 3}, {2, 18, 19, 3, 2, 20, 21, 3}, {2, 22, 3}}, []int{0, 1, 2, 0, 1, 0, 0}},
		{"capped", 8, 0, 2, [][]int64{{2, 10, 11, 12, 13, 14, 15, 3}, {2, 30, 31, 32, 33, 34, 3}}, []int{0, 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cal, err := DocumentWindows(tok, inputs, docs, c.seqLen, c.frame, c.max)
			if err != nil {
				t.Fatal(err)
			}
			if cal.Rows != len(c.want) || !slices.Equal(cal.Doc, c.doc) {
				t.Fatalf("%d rows from documents %v, want %d from %v", cal.Rows, cal.Doc, len(c.want), c.doc)
			}
			ids, mask := cal.Feed["input_ids"].Data.([]int64), cal.Feed["attention_mask"].Data.([]int64)
			tokens := 0
			for r, w := range c.want {
				row, m := ids[r*c.seqLen:(r+1)*c.seqLen], mask[r*c.seqLen:(r+1)*c.seqLen]
				for i := range row {
					want, valid := int64(0), int64(0)
					if i < len(w) {
						want, valid = w[i], 1
					}
					if row[i] != want || m[i] != valid {
						t.Fatalf("row %d: ids %v mask %v, want %v", r, row, m, w)
					}
				}
				tokens += len(w)
			}
			if cal.Tokens != tokens {
				t.Errorf("%d tokens, want %d", cal.Tokens, tokens)
			}
		})
	}
	cal, err := DocumentWindows(tok, inputs, docs, 8, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	held := cal.HoldOut(0.5) // every second document: document 1
	for r, d := range cal.Doc {
		if held[r] != (d == 1) {
			t.Errorf("row %d of document %d: held %v", r, d, held[r])
		}
	}
	if _, err := DocumentWindows(tok, inputs, docs, 8, 3, 0); err == nil {
		t.Error("frames of 3 in rows of 8 accepted")
	}
}
