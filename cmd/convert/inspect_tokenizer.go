package main

import (
	"fmt"
	"io"

	"github.com/linearize/linearize/tokenize"
)

// tokenizerReport is what inspect says of the tokenizer beside the model,
// the one every command that reads text uses unless --vocab names
// another: its file, its kind and size and the tokens that frame a text,
// or why it cannot be read, or that there is none.
type tokenizerReport struct {
	File      string `json:"file,omitempty"`
	Kind      string `json:"kind,omitempty"`
	Entries   int    `json:"entries,omitempty"`
	Classify  string `json:"classify,omitempty"`
	Separator string `json:"separator,omitempty"`
	Error     string `json:"error,omitempty"`
}

// buildTokenizer reads the tokenizer beside the model at path.
func buildTokenizer(path string) *tokenizerReport {
	file := tokenize.FileForModel(path)
	if file == "" {
		return &tokenizerReport{}
	}
	r := &tokenizerReport{File: file}
	tok, err := tokenize.Load(file)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	o := tok.Options()
	r.Kind, r.Entries, r.Classify, r.Separator = tok.Kind(), tok.VocabSize(), o.Classify, o.Separator
	return r
}

// printTokenizer writes the tokenizer line.
func printTokenizer(w io.Writer, r *tokenizerReport) {
	switch {
	case r == nil:
	case r.File == "":
		fmt.Fprintln(w, "tokenizer:    none beside the model (commands that read text need --vocab)")
	case r.Error != "":
		fmt.Fprintf(w, "tokenizer:    %s cannot be read: %s\n", r.File, r.Error)
	default:
		fmt.Fprintf(w, "tokenizer:    %s (%s, %d entries, %s … %s)\n", r.File, r.Kind, r.Entries, r.Classify, r.Separator)
	}
}
