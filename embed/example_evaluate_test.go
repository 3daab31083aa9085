package embed_test

import (
	"fmt"
	"os"
	"strings"

	"github.com/linearize/linearize/embed"
)

// Evaluate asks, on your own documents, whether reading them whole beats
// truncation and chunking: passages are drawn from each document and
// removed, and each system must retrieve the document a passage came
// from. Here the bundled tiny BERT (random weights, the pure-Go backend)
// reads six documents truncated to its first 16 tokens and in chunks of
// 16; the scores of random weights mean nothing, so only the shape of the
// report is printed. `convert evaluate` runs this and prints
// Report.Markdown.
func ExampleEvaluate() {
	words := strings.Fields("the man is eating food a horse runs in field and sleeps near river child reads book")
	path, dir, err := tinyModel(append([]string{"."}, words...)...) // tinyModel: example_test.go
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)

	var docs []embed.Document
	for d := 0; d < 6; d++ {
		var b strings.Builder
		for s := 0; s < 12; s++ { // twelve sentences of six words
			for i := 0; i < 6; i++ {
				b.WriteString(words[(d*7+s*3+i*(d+2))%len(words)] + " ")
			}
			b.WriteString(". ")
		}
		docs = append(docs, embed.Document{ID: fmt.Sprintf("doc-%d", d), Text: b.String()})
	}

	open := func(mode embed.Mode) embed.System {
		return embed.System{Name: string(mode), Open: func() (embed.Encoder, error) {
			return embed.Open(path, embed.Options{Backend: "native", Mode: mode, Window: 16})
		}}
	}
	query, err := embed.Open(path, embed.Options{Backend: "native", Mode: embed.Truncate, Window: 16})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer query.Close()
	rep, err := embed.Evaluate(query.Tokenizer(), docs, query, []embed.System{open(embed.Truncate), open(embed.Chunk)},
		embed.EvalOptions{MaxTokens: 64, Buckets: []int{0, 32, 64}, Bootstrap: 100, Seed: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%d documents, %d passages, reference %s\n", rep.Documents, rep.Queries, rep.Reference)
	for _, b := range rep.Buckets {
		fmt.Printf("passages starting at %s tokens: %d\n", b.Label(), b.Queries)
	}
	for _, s := range rep.Systems {
		fmt.Printf("%s: %d ranks, compared with the reference: %v\n", s.Name, len(s.Ranks), s.Delta != nil)
	}
	// Output:
	// 6 documents, 12 passages, reference chunk
	// passages starting at 0–32 tokens: 6
	// passages starting at 32–64 tokens: 6
	// truncate: 12 ranks, compared with the reference: true
	// chunk: 12 ranks, compared with the reference: false
}
