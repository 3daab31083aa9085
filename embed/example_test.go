package embed_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/linearize/linearize/embed"
)

// Embed two texts with the bundled tiny BERT (random weights) on the pure
// Go backend, reading them in chunks of 16 tokens. The vectors themselves
// depend on the backend's rounding, so only their shape is printed.
func Example() {
	dir, err := os.MkdirTemp("", "embed-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	model, _ := os.ReadFile(filepath.Join("..", "testdata", "bert-tiny.onnx"))
	path := filepath.Join(dir, "bert.onnx")
	os.WriteFile(path, model, 0o644)
	vocab := "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\nman\nis\neating\nfood\n.\n"
	os.WriteFile(filepath.Join(dir, "vocab.txt"), []byte(vocab), 0o644)

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
