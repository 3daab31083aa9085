package corpus_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/linearize/linearize/corpus"
)

// A JSONL file is read one document at a time; a text that is not
// UTF-8 comes marked, and the caller decides.
func ExampleJSONL() {
	dir, _ := os.MkdirTemp("", "corpus")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "docs.jsonl")
	os.WriteFile(path, []byte(`{"id": "a", "text": "the man"}`+"\r\n\n"+
		`{"id": 7, "text": "caf\u00e9"}`+"\n"+
		`{"id": "b", "text": "x\ud800"}`+"\n"), 0o644)

	err := corpus.JSONL(path, corpus.Options{}).Each(0, func(d corpus.Doc) error {
		fmt.Printf("%d %s %q\n", d.Rec, d.ID, d.Text)
		if d.Bad != "" {
			fmt.Println("  bad:", d.Bad)
		}
		return nil
	})
	fmt.Println(err)
	// Output:
	// 1 a "the man"
	// 2 7 "café"
	// 3 b "x�"
	//   bad: invalid UTF-8: byte 22 of line 4 is \ud800, an escaped lone surrogate (half of a UTF-16 pair, no character; fix the exporter that wrote it)
	// <nil>
}

// Open reads a --calibration path, a folder or a file of lines, all at
// once.
func ExampleOpen() {
	dir, _ := os.MkdirTemp("", "corpus")
	defer os.RemoveAll(dir)
	os.WriteFile(filepath.Join(dir, "b.md"), []byte("# Second\n\nA page."), 0o644)
	os.WriteFile(filepath.Join(dir, "a.txt"), []byte("\uFEFFFirst."), 0o644)
	os.WriteFile(filepath.Join(dir, "notes.pdf"), []byte("%PDF"), 0o644)

	src, err := corpus.Open(dir, corpus.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	docs, err := src.ReadAll()
	for _, d := range docs {
		fmt.Printf("%s %q\n", d.ID, d.Text)
	}
	fmt.Println(len(src.Paths()), err)
	// Output:
	// a.txt "First."
	// b.md "# Second\n\nA page."
	// 2 <nil>
}
