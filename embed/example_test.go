package embed_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/linearize/linearize/embed"
)

// Embed two texts with the bundled tiny BERT (random weights) on the pure
// Go backend, reading them in chunks of 16 tokens. The vectors themselves
// depend on the backend's rounding, so only their shape is printed.
func Example() {
	path, dir, err := tinyModel("the", "man", "is", "eating", "food", ".")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)

	e, err := embed.Open(path, embed.Options{Backend: "native", Mode: embed.Chunk, Window: 16})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close()
	vecs, err := e.Embed([]string{"The man is eating food.", "the food"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("mode %s, pooling %s, limit %d: %d vectors of %d\n", e.Mode(), e.Pooling(), e.Limit(), len(vecs), e.Dim())
	fmt.Printf("self-similarity %.3f\n", embed.Cosine(vecs[0], vecs[0]))
	// Output:
	// mode chunk, pooling mean, limit 128: 2 vectors of 64
	// self-similarity 1.000
}

// tinyModel copies the bundled tiny BERT (random weights) into a new
// temporary folder, beside a vocab.txt of BERT's five special tokens and
// words, and returns the model's path and the folder, which the caller
// removes.
func tinyModel(words ...string) (path, dir string, err error) {
	dir, err = os.MkdirTemp("", "embed-example")
	if err != nil {
		return "", "", err
	}
	model, _ := os.ReadFile(filepath.Join("..", "testdata", "bert-tiny.onnx"))
	path = filepath.Join(dir, "bert.onnx")
	os.WriteFile(path, model, 0o644)
	vocab := append([]string{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}, words...)
	os.WriteFile(filepath.Join(dir, "vocab.txt"), []byte(strings.Join(vocab, "\n")+"\n"), 0o644)
	return path, dir, nil
}
