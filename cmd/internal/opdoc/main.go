// Command opdoc writes the op reference of docs/ops.md from the custom
// ops' schemas (ops.Reference), between the markers ops.ReferenceBegin
// and ops.ReferenceEnd. It runs from go generate in package ops:
//
//	go generate ./ops
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/linearize/linearize/ops"
)

func main() {
	path := flag.String("doc", "docs/ops.md", "the Markdown `file` holding the op reference")
	flag.Parse()
	if err := run(*path); err != nil {
		fmt.Fprintln(os.Stderr, "opdoc:", err)
		os.Exit(1)
	}
}

func run(path string) error {
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	doc, err := ops.UpdateReference(string(old))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if doc == string(old) {
		return nil
	}
	return os.WriteFile(path, []byte(doc), 0o644)
}
