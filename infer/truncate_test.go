package infer

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/linearize/linearize/corpus"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/tokenize"
)

// checkTruncated requires every row of ti to hold exactly n real tokens:
// [CLS], the first n−2 tokens of the untruncated encoding, [SEP].
func checkTruncated(t *testing.T, ti *TokenInputs, full [][]int64, n int, sep int64) {
	t.Helper()
	if ti.SeqLen != n || ti.Batch != len(full) {
		t.Fatalf("batch %d × %d, want %d × %d", ti.Batch, ti.SeqLen, len(full), n)
	}
	ids := ti.Feed["input_ids"].Int64s()
	for b, f := range full {
		if ti.Lengths[b] != n {
			t.Errorf("n=%d row %d: %d real tokens", n, b, ti.Lengths[b])
		}
		for j := 0; j < n; j++ {
			if ti.Mask[b*n+j] != 1 {
				t.Fatalf("n=%d row %d: position %d masked", n, b, j)
			}
		}
		row := ids[b*n : (b+1)*n]
		if !reflect.DeepEqual(row[:n-1], f[:n-1]) || row[n-1] != sep {
			t.Errorf("n=%d row %d: ids are not [CLS] + the untruncated prefix + [SEP]:\n%v\n%v", n, b, row, f[:n])
		}
	}
}

func TestTextInputsTruncate(t *testing.T) {
	tok := tinyTokenizer(t)
	dyn := []onnx.Dim{{Value: -1}, {Value: -1}}
	inputs := []Value{{Name: "input_ids", DType: onnx.Int64, Shape: dyn}, {Name: "attention_mask", DType: onnx.Int64, Shape: dyn}}
	texts := []string{"hello world ! world hello ! hello", "world world hello ! ! hello world world"}
	var full [][]int64
	for _, s := range texts {
		full = append(full, tok.Encode(s, 0))
	}
	for _, n := range []int{2, 3, 5, 9} {
		ti, err := TextInputs(tok, inputs, texts, n, 0)
		if err != nil {
			t.Fatal(err)
		}
		checkTruncated(t, ti, full, n, 3)
	}
	// maxLen caps the longest text when no length is fixed.
	ti, err := TextInputs(tok, inputs, texts, 0, 6)
	if err != nil || ti.SeqLen != 6 || ti.Lengths[0] != 6 || ti.Lengths[1] != 6 {
		t.Errorf("maxLen 6: %+v %v", ti, err)
	}
}

// TestRealDocsTruncate tokenizes the long real documents of
// scripts/real-text.sh with the real model's tokenizer at 128, 256 and 512
// tokens: every document fills each length exactly, and its ids are the
// untruncated encoding's prefix.
func TestRealDocsTruncate(t *testing.T) {
	dir := filepath.Join("..", "testdata", "real", "docs")
	if _, err := os.Stat(filepath.Join(dir, "heldout.txt")); err != nil {
		t.Skipf("real documents absent (%v); run scripts/real-model.sh", err)
	}
	tok, err := tokenize.LoadForModel(realModel)
	if err != nil {
		t.Skipf("real tokenizer absent (%v); run scripts/real-model.sh", err)
	}
	sep, _ := tok.ID("[SEP]")
	dyn := []onnx.Dim{{Value: -1}, {Value: -1}}
	inputs := []Value{{Name: "input_ids", DType: onnx.Int64, Shape: dyn}, {Name: "attention_mask", DType: onnx.Int64, Shape: dyn}}
	for name, want := range map[string]int{"heldout.txt": 32, "calibration.txt": 64} {
		docs, err := corpus.Lines(filepath.Join(dir, name), corpus.Options{}).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		texts := make([]string, len(docs))
		for i, d := range docs {
			texts[i] = d.Text
		}
		if len(texts) < want {
			t.Errorf("%s: %d documents, want at least %d (scripts/real-text.sh's defaults)", name, len(texts), want)
		}
		var full [][]int64
		for _, s := range texts {
			f := tok.Encode(s, 0)
			if len(f) <= 512 {
				t.Errorf("%s: document of %d tokens (%.40q…) does not exceed 512", name, len(f), s)
			}
			full = append(full, f)
		}
		for _, n := range []int{128, 256, 512} {
			ti, err := TextInputs(tok, inputs, texts, n, 512)
			if err != nil {
				t.Fatal(err)
			}
			checkTruncated(t, ti, full, n, sep)
		}
		if m := regexp.MustCompile(":[a-z]+:`").FindString(strings.Join(texts, " ")); m != "" {
			t.Errorf("%s: reST role markup %q left in the documents", name, m)
		}
	}
}
