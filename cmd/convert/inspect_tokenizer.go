package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/linearize/linearize/embed"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx/onnxpb"
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
	// Given are the model's inputs that text does not fill: those that
	// carry no tokens (rank 0 or 1 and no token role, as
	// jina-embeddings-v3's task_id), which commands that read text take
	// with --input.
	Given []string `json:"given,omitempty"`
	// Prompts are the prompts the sentence-transformers files beside the
	// model name (config_sentence_transformers.json), by name, and
	// DefaultPrompt the name of the one read when none is chosen.
	Prompts       map[string]string `json:"prompts,omitempty"`
	DefaultPrompt string            `json:"default_prompt,omitempty"`
	PromptsFile   string            `json:"prompts_file,omitempty"`
	PromptsError  string            `json:"prompts_error,omitempty"`
}

// buildTokenizer reads the tokenizer beside the model m at path.
func buildTokenizer(path string, m *onnxpb.ModelProto) *tokenizerReport {
	var given []string
	for _, in := range infer.GraphInputs(m) {
		if infer.InputRole(in.Name) == "" && len(in.Shape) <= 1 {
			given = append(given, in.Name)
		}
	}
	r := &tokenizerReport{Given: given}
	if prompts, def, pf, err := embed.ModelPrompts(path); err != nil {
		r.PromptsError = err.Error()
	} else if len(prompts) > 0 {
		r.Prompts, r.DefaultPrompt, r.PromptsFile = prompts, def, pf
	}
	file := tokenize.FileForModel(path)
	if file == "" {
		return r
	}
	r.File = file
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
	if r != nil && len(r.Given) > 0 {
		fmt.Fprintf(w, "              text does not fill %s: commands that read text take it with --input %s=VALUE\n", strings.Join(r.Given, ", "), r.Given[0])
	}
	if r != nil && r.PromptsError != "" {
		fmt.Fprintf(w, "              prompts cannot be read: %s\n", r.PromptsError)
	}
	if r != nil && len(r.Prompts) > 0 {
		def := "none"
		if r.DefaultPrompt != "" {
			def = r.DefaultPrompt
		}
		fmt.Fprintf(w, "              prompts in %s: %s (default %s): embed --prompt-name NAME, evaluate --query-prompt-name, --doc-prompt-name\n",
			r.PromptsFile, strings.Join(slices.Sorted(maps.Keys(r.Prompts)), ", "), def)
	}
}
