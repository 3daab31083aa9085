package embed_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/linearize/linearize/corpus"
	"github.com/linearize/linearize/embed"
)

// names lists the files of dir.
func names(dir string) string {
	ents, _ := os.ReadDir(dir)
	var s []string
	for _, e := range ents {
		s = append(s, e.Name())
	}
	return strings.Join(s, " ")
}

// Embed four texts, one of them blank, into a folder of parts of two
// documents each, then into one JSON lines file, with the bundled tiny
// BERT (random weights) on the pure Go backend. A second run into the
// complete folder has nothing to do; a run that stopped would resume
// after its finished parts.
func ExampleWrite() {
	dir, err := os.MkdirTemp("", "embed-write-example")
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

	e, err := embed.Open(path, embed.Options{Backend: "native"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close()
	docs := corpus.Texts([]string{"The man is eating food.", "the food", "   ", "the man"})
	o := embed.WriteOptions{Input: "four texts", PartSize: 2, SkipBad: true}

	folder := filepath.Join(dir, "vecs")
	rep, err := embed.Write(e, docs, folder+"/", o)
	if err != nil {
		fmt.Println(err)
		return
	}
	n, why := rep.SkippedBad()
	fmt.Printf("%d documents, %d vectors, %d skipped (%s)\n", rep.Documents, rep.Vectors, n, why)
	fmt.Println("vecs/:", names(folder))

	rep, err = embed.Write(e, docs, folder+"/", o)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("again: done %v, %d documents in %d parts\n", rep.Done, rep.ResumedDocuments, rep.ResumedParts)

	rep, err = embed.Write(e, docs, filepath.Join(dir, "vecs.jsonl"), o)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("vecs.jsonl: %d documents\n", rep.Documents)
	fmt.Println(names(dir))
	// Output:
	// 3 documents, 3 vectors, 1 skipped (1 empty)
	// vecs/: manifest.json part-00000.ids.txt part-00000.npy part-00001.ids.txt part-00001.npy
	// again: done true, 3 documents in 2 parts
	// vecs.jsonl: 3 documents
	// bert.onnx vecs vecs.jsonl vocab.txt
}
