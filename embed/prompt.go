package embed

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode"

	"github.com/linearize/linearize/tokenize"
)

// stPromptsFile is the sentence-transformers file that names a model's
// prompts: {"prompts": {"search_query": "search_query: ", …},
// "default_prompt_name": null}.
const stPromptsFile = "config_sentence_transformers.json"

// stPrompts is what config_sentence_transformers.json says about prompts.
type stPrompts struct {
	file    string            // its path
	prompts map[string]string // by name
	def     string            // default_prompt_name, or ""
}

// readPrompts reads config_sentence_transformers.json from the first of
// the model's folders that has one; nil when none has.
func readPrompts(modelPath string) (*stPrompts, error) {
	for _, dir := range modelDirs(modelPath) {
		p := filepath.Join(dir, stPromptsFile)
		data, err := readBounded(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var c struct {
			Prompts map[string]string `json:"prompts"`
			Default *string           `json:"default_prompt_name"`
		}
		if err := json.Unmarshal(data, &c); err != nil {
			return nil, fmt.Errorf("embed: %s: %w", p, err)
		}
		s := &stPrompts{file: p, prompts: c.Prompts}
		if c.Default != nil && *c.Default != "" {
			s.def = *c.Default
			if _, ok := c.Prompts[s.def]; !ok {
				return nil, fmt.Errorf("embed: %s: default_prompt_name %q is not one of its prompts (%s)", p, s.def, s.names())
			}
		}
		return s, nil
	}
	return nil, nil
}

// names lists the prompt names, sorted, or says there are none.
func (s *stPrompts) names() string {
	if s == nil || len(s.prompts) == 0 {
		return "none"
	}
	return strings.Join(slices.Sorted(maps.Keys(s.prompts)), ", ")
}

// ModelPrompts returns the prompts the sentence-transformers files beside
// the model at modelPath name (config_sentence_transformers.json's
// "prompts"), the name of the one applied when none is chosen
// (default_prompt_name, or ""), and the file they come from ("" and no
// prompts when there is none).
func ModelPrompts(modelPath string) (prompts map[string]string, def, file string, err error) {
	s, err := readPrompts(modelPath)
	if err != nil || s == nil {
		return nil, "", "", err
	}
	return s.prompts, s.def, s.file, nil
}

// PromptFor returns the prompt an Embedder opened on the model at
// modelPath with Options.Prompt text and PromptName name reads every text
// after: text, else the prompt name names in the model's
// config_sentence_transformers.json, else the one its
// default_prompt_name names; "" when none.
func PromptFor(modelPath, text, name string) (string, error) {
	p, _, _, err := resolvePrompt(modelPath, text, name)
	return p, err
}

// PromptWordpieces is the number of wordpieces prompt adds to every pass
// with the tokenizer tok (its text without trailing white space).
func PromptWordpieces(tok *tokenize.Tokenizer, prompt string) int {
	core, _ := splitPrompt(prompt)
	return len(tok.IDs(core))
}

// splitPrompt cuts a prompt into the part tokenized on its own and the
// white space that begins each text (a space when the prompt ends in
// none; see choosePrompt).
func splitPrompt(prompt string) (core, space string) {
	core = strings.TrimRightFunc(prompt, unicode.IsSpace)
	if space = prompt[len(core):]; space == "" {
		space = " "
	}
	return core, space
}

// resolvePrompt is PromptFor, also returning the prompt's name and where
// it came from ("option", or the file).
func resolvePrompt(modelPath, text, name string) (prompt, promptName, from string, err error) {
	if text != "" && name != "" {
		return "", "", "", fmt.Errorf("embed: set Prompt or PromptName, not both")
	}
	if text != "" {
		return text, "", "option", nil
	}
	st, err := readPrompts(modelPath)
	if err != nil {
		return "", "", "", err
	}
	if name == "" && st != nil {
		name = st.def
	}
	if name == "" {
		return "", "", "", nil
	}
	if st == nil {
		return "", "", "", fmt.Errorf("embed: prompt %q: no %s beside model %s names any prompt", name, stPromptsFile, modelPath)
	}
	p, ok := st.prompts[name]
	if !ok {
		return "", "", "", fmt.Errorf("embed: prompt %q is not one of the prompts %s names (%s)", name, st.file, st.names())
	}
	return p, name, st.file, nil
}

// choosePrompt resolves Options.Prompt and PromptName (else the model's
// default prompt) and tokenizes the prompt: its wordpieces begin every
// pass, after [CLS].
func (e *Embedder) choosePrompt(o Options) error {
	var err error
	if e.prompt, e.promptName, e.promptFrom, err = resolvePrompt(e.path, o.Prompt, o.PromptName); err != nil {
		return err
	}
	if e.prompt == "" {
		return nil
	}
	if !e.includePrompt && (e.pooling == PoolMean || e.pooling == PoolMax) {
		// sentence-transformers leaves out of the pooling the tokens of
		// the prompt tokenized alone, special tokens added, but the last
		// ([CLS] and the prompt's wordpieces, and in byte-level BPE a
		// trailing space's), whatever the text after them; so does embed,
		// in each window (Late mode pools its chunks' wordpieces only).
		e.unpooled = 1 + len(e.tok.IDs(e.prompt))
	}
	// The prompt is tokenized without its trailing white space, which
	// begins the text instead: "search_query: " + text tokenizes as
	// "search_query:" and " " + text do, in WordPiece, byte-level BPE and
	// Metaspace pipelines alike, so that every chunk can carry the same
	// prompt wordpieces. A prompt that does not end in white space is
	// read with a space after it (as prompt+" "+text): tokenized apart,
	// its text would otherwise begin a word of its own in tokenizers
	// that mark a text's start, while tokenized with it the two may
	// merge into one word.
	var core string
	core, e.promptSpace = splitPrompt(e.prompt)
	if e.tok.SpaceBlind() {
		// The white space changes none of the text's wordpieces: each
		// text is read as it is, not copied behind it, and a text read
		// in part costs what the part does.
		e.promptSpace = ""
	}
	e.promptIDs = e.tok.IDs(core)
	if (e.mode != Long || e.longModel) && len(e.promptIDs) > e.window-3 {
		return fmt.Errorf("embed: the prompt %q has %d wordpieces, which leave none of a window of %d tokens for the text", e.prompt, len(e.promptIDs), e.window)
	}
	if e.overlap > 0 && e.overlap >= e.window-2-len(e.promptIDs) {
		return fmt.Errorf("embed: an overlap of %d wordpieces leaves no new wordpiece in a window of %d tokens (%d wordpieces with [CLS], [SEP] and the prompt's %d)", e.overlap, e.window, e.window-2-len(e.promptIDs), len(e.promptIDs))
	}
	return nil
}
