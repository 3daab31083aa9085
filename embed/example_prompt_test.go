package embed_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/linearize/linearize/embed"
)

// A model trained with prompts names them in the
// config_sentence_transformers.json beside it; PromptName picks one, whose
// wordpieces then begin every pass, and Dim keeps the first values of each
// vector (a Matryoshka model's smaller vectors).
func ExampleOptions_prompt() {
	path, dir, err := tinyModel("search", "_", "query", "document", ":", "the", "man", "is", "eating", "food")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	st := `{"prompts": {"search_query": "search_query: ", "search_document": "search_document: "}, "default_prompt_name": null}`
	if err := os.WriteFile(filepath.Join(dir, "config_sentence_transformers.json"), []byte(st), 0o644); err != nil {
		fmt.Println(err)
		return
	}
	prompts, def, _, err := embed.ModelPrompts(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%d prompts, default %q\n", len(prompts), def)

	e, err := embed.Open(path, embed.Options{Backend: "native", PromptName: "search_query", Dim: 16})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close()
	vecs, err := e.Embed([]string{"the man is eating food"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("prompt %q, %d values\n", e.Prompt(), len(vecs[0]))
	// Output:
	// 2 prompts, default ""
	// prompt "search_query: ", 16 values
}
