package embed_test

import (
	"fmt"
	"os"
	"strings"

	"github.com/linearize/linearize/embed"
)

// Late chunking: the text is cut into chunks of Window−2 wordpieces, as
// Chunks mode cuts it, and each chunk's vector is the mean of its
// wordpieces' hidden states in a pass over the whole text.
func ExampleEmbedder_EmbedChunks_late() {
	path, dir, err := tinyModel("the", "man", "is", "eating", "food", ".")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	e, err := embed.Open(path, embed.Options{Backend: "native", Mode: embed.Late, Window: 8})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close()
	doc := strings.Repeat("the man is eating food . ", 4) // 24 wordpieces
	chunks, err := e.EmbedChunks([]string{doc})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("mode %s, pooling %s: %d chunks of %d values\n", e.Mode(), e.Pooling(), len(chunks[0]), len(chunks[0][0]))
	// Output:
	// mode late, pooling mean: 4 chunks of 64 values
}
