package tokenize_test

import (
	"fmt"

	"github.com/linearize/linearize/tokenize"
)

func Example() {
	// A real model's tokenizer comes from tokenize.Load(modelDir); a tiny
	// vocabulary shows the algorithm.
	vocab := map[string]int64{"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3,
		"linear": 4, "attention": 5, "scale": 6, "##s": 7, "!": 8}
	tok, err := tokenize.New(vocab, tokenize.DefaultOptions())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(tok.Tokenize("Linear attention SCALES!"))
	b, _ := tok.EncodeBatch([]string{"Linear attention scales!", "Attention"}, 0, 0)
	for i := 0; i < b.Size; i++ {
		fmt.Println(b.InputIDs[i*b.SeqLen:(i+1)*b.SeqLen], b.AttentionMask[i*b.SeqLen:(i+1)*b.SeqLen])
	}
	// Output:
	// [linear attention scale ##s !]
	// [2 4 5 6 7 8 3] [1 1 1 1 1 1 1]
	// [2 5 3 0 0 0 0] [1 1 1 0 0 0 0]
}

// ExampleLoad reads a tokenizer.json of each kind beside a model: here the
// byte-level BPE of ModernBERT's form (Ġ marks a leading space) and
// XLM-RoBERTa's SentencePiece Unigram (▁ marks a word's start), both
// small ones trained for the tests. The text is one of the reference
// cases of testdata/tokenizers, so TestBPEReference and
// TestUnigramReference check these tokens against Hugging Face's
// tokenizers library.
func ExampleLoad() {
	for _, dir := range []string{"modernbert-bpe", "xlmr-unigram"} {
		tok, err := tokenize.Load("../testdata/tokenizers/" + dir)
		if err != nil {
			fmt.Println(err)
			return
		}
		text := "Linear attention reads long documents."
		fmt.Printf("%s: %q\n", dir, tok.Tokenize(text))
		fmt.Println(len(tok.Encode(text, 0)), "ids with", tok.Options().Classify, "and", tok.Options().Separator)
	}
	// Output:
	// modernbert-bpe: ["Linear" "Ġattention" "Ġreads" "Ġlong" "Ġdocuments" "."]
	// 8 ids with [CLS] and [SEP]
	// xlmr-unigram: ["▁" "Linear" "▁attention" "▁reads" "▁long" "▁documents" "."]
	// 9 ids with <s> and </s>
}
