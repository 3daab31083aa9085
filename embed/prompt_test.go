package embed

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/linearize/linearize/corpus"
	"github.com/linearize/linearize/tokenize"
)

// promptCase is one entry of testdata/tokenizers/prompt_cases.json: the
// ids Hugging Face tokenizers gives prompt+text, special tokens added.
type promptCase struct {
	Prompt string  `json:"prompt"`
	Text   string  `json:"text"`
	IDs    []int64 `json:"ids"`
	// Spaced are the ids of prompt+" "+text.
	Spaced []int64 `json:"spaced_ids"`
}

// TestPromptTokenization: embed tokenizes a prompt apart from the text
// (so that every chunk can begin with it), yet its pass is the ids
// sentence-transformers gets by tokenizing prompt+text as one string, for
// byte-level BPE (ModernBERT's and RoBERTa's forms), SentencePiece
// Unigram (four XLM-R forms) and WordPiece (the real MiniLM, when
// scripts/real-model.sh has laid it out), with prompts published models
// use and edge forms (no trailing space, two, a newline, non-ASCII). In
// Chunk mode every chunk begins with [CLS] and the same prompt ids, and
// the chunks' bodies are the text's ids in order. A prompt that does not
// end in white space ("classification:") is read as if a space followed
// it: as prompt+" "+text.
func TestPromptTokenization(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "testdata", "tokenizers", "prompt_cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var all map[string][]promptCase
	if err := json.Unmarshal(data, &all); err != nil {
		t.Fatal(err)
	}
	if len(all) < 7 {
		t.Fatalf("prompt_cases.json holds %d tokenizers, want 7", len(all))
	}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range all {
			if !yield(k) {
				return
			}
		}
	}) {
		t.Run(strings.ReplaceAll(name, "/", "-"), func(t *testing.T) {
			dir := filepath.Join("..", "testdata", "tokenizers", name)
			if strings.HasPrefix(name, "real/") {
				dir = filepath.Join("..", "testdata", name)
				if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
					t.Skipf("real model absent (%v); run scripts/real-model.sh", err)
				}
			}
			tok, err := tokenize.Load(filepath.Join(dir, "tokenizer.json"))
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range all[name] {
				if strings.TrimRightFunc(c.Prompt, unicode.IsSpace) == c.Prompt {
					c.IDs = c.Spaced
				}
				checkPromptCase(t, tok, c)
			}
		})
	}
}

func checkPromptCase(t *testing.T, tok *tokenize.Tokenizer, c promptCase) {
	t.Helper()
	e := &Embedder{path: "test", tok: tok, mode: Truncate, window: 4096, includePrompt: true}
	if err := e.readMarkers(); err != nil {
		t.Fatal(err)
	}
	if err := e.choosePrompt(Options{Prompt: c.Prompt}); err != nil {
		t.Fatal(err)
	}
	passes, _, err := e.plan([]string{c.Text})
	if err != nil {
		t.Fatal(err)
	}
	if len(passes) != 1 || !slices.Equal(passes[0].ids, c.IDs) {
		t.Errorf("prompt %q, text %q: pass %v, want %v (tokenizers' ids of prompt+text)", c.Prompt, c.Text, passes[0].ids, c.IDs)
		return
	}
	// Chunk mode: windows holding 3 of the text's wordpieces each.
	p := len(e.promptIDs)
	e.mode, e.window = Chunk, p+5
	passes, _, err = e.plan([]string{c.Text})
	if err != nil {
		t.Fatal(err)
	}
	head, body := c.IDs[:1+p], c.IDs[1+p:len(c.IDs)-1]
	var bodies []int64
	for _, ps := range passes {
		if !slices.Equal(ps.ids[:1+p], head) || ps.ids[len(ps.ids)-1] != c.IDs[len(c.IDs)-1] || len(ps.ids) > e.window {
			t.Errorf("prompt %q, text %q: chunk %v does not begin with [CLS] and the prompt %v and end with [SEP] in %d tokens", c.Prompt, c.Text, ps.ids, head, e.window)
			return
		}
		bodies = append(bodies, ps.ids[1+p:len(ps.ids)-1]...)
	}
	if !slices.Equal(bodies, body) {
		t.Errorf("prompt %q, text %q: chunks hold %v, want the text's ids %v", c.Prompt, c.Text, bodies, body)
	}
}

// TestPromptEmbedding: with a prompt, Truncate embeds what the same
// model without a prompt embeds for prompt+text; Chunk averages, by
// their text wordpieces, the chunks each read with the prompt before
// them; Long reads prompt+text in one pass.
func TestPromptEmbedding(t *testing.T) {
	path := modelDir(t)
	const prompt = "baby river "
	plain := open(t, path, Options{Mode: Truncate})
	for _, mode := range []Mode{Truncate, Long} {
		e := open(t, path, Options{Mode: mode, Prompt: prompt})
		for _, txt := range []string{text(20, 1), ""} {
			got, err := e.Embed([]string{txt})
			if err != nil {
				t.Fatal(err)
			}
			want, err := plain.Embed([]string{prompt + txt})
			if err != nil {
				t.Fatal(err)
			}
			near(t, fmt.Sprintf("%s, %d-word text", mode, len(strings.Fields(txt))), got[0], toF64(want[0]), 1e-5)
		}
		if e.Prompt() != prompt || !strings.Contains(e.String(), `prompt "baby river "`) {
			t.Errorf("Prompt %q, String %q: want the prompt named", e.Prompt(), e.String())
		}
	}

	// Window 10: [CLS], two prompt wordpieces, [SEP] and 6 of the text's.
	ch := open(t, path, Options{Mode: Chunk, Window: 10, Prompt: prompt})
	first, second := text(6, 0), text(4, 6)
	got, err := ch.Embed([]string{first + " " + second})
	if err != nil {
		t.Fatal(err)
	}
	tr := open(t, path, Options{Mode: Truncate, Window: 10})
	parts, err := tr.Embed([]string{prompt + first, prompt + second})
	if err != nil {
		t.Fatal(err)
	}
	want := make([]float64, len(parts[0]))
	for i, p := range parts {
		w := []float64{6, 4}[i] / 10
		u := unit(toF64(p))
		for k := range want {
			want[k] += w * u[k]
		}
	}
	near(t, "chunk", got[0], unit(want), 1e-5)
}

// writeSTPrompts writes config_sentence_transformers.json beside the
// model at path.
func writeSTPrompts(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(filepath.Dir(path), stPromptsFile), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestPromptNames: PromptName and default_prompt_name take the prompt
// from config_sentence_transformers.json, as sentence-transformers does;
// the option given wins over the default.
func TestPromptNames(t *testing.T) {
	path := modelDir(t)
	plain := open(t, path, Options{Mode: Truncate}) // before the file
	writeSTPrompts(t, path, `{"prompts": {"query": "baby river ", "passage": "the girl "}, "default_prompt_name": "passage"}`)
	txt := text(12, 3)
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{Mode: Truncate}, "the girl "},
		{Options{Mode: Truncate, PromptName: "query"}, "baby river "},
		{Options{Mode: Truncate, Prompt: "man "}, "man "},
	} {
		e := open(t, path, tc.o)
		if e.Prompt() != tc.want {
			t.Errorf("%+v: prompt %q, want %q", tc.o, e.Prompt(), tc.want)
		}
		got, err := e.Embed([]string{txt})
		if err != nil {
			t.Fatal(err)
		}
		want, err := plain.Embed([]string{tc.want + txt})
		if err != nil {
			t.Fatal(err)
		}
		near(t, tc.want, got[0], toF64(want[0]), 1e-5)
	}
}

// TestPromptRefused: each way a prompt cannot apply is an error naming
// what is wrong, and Open opens nothing.
func TestPromptRefused(t *testing.T) {
	path := modelDir(t)
	for _, tc := range []struct {
		st   string // config_sentence_transformers.json, "" for none
		pool string // 1_Pooling/config.json with modules.json, "" for none
		o    Options
		want string
	}{
		{"", "", Options{PromptName: "query"}, `prompt "query": no config_sentence_transformers.json beside model`},
		{`{"prompts": {"query": "q: ", "doc": "d: "}}`, "", Options{PromptName: "passage"}, `prompt "passage" is not one of the prompts`},
		{`{"prompts": {"query": "q: ", "doc": "d: "}}`, "", Options{PromptName: "passage"}, "(doc, query)"},
		{`{"prompts": {"query": "q: "}, "default_prompt_name": "doc"}`, "", Options{}, `default_prompt_name "doc" is not one of its prompts`},
		{`{"prompts": [1]}`, "", Options{PromptName: "query"}, "config_sentence_transformers.json: json"},
		{"", "", Options{Prompt: "a", PromptName: "b"}, "set Prompt or PromptName, not both"},
		{"", `{"pooling_mode_mean_tokens": true, "include_prompt": false}`, Options{Prompt: "man "}, "sets include_prompt false"},
		{"", "", Options{Mode: Truncate, Window: 5, Prompt: "the man is "}, "leave none of a window of 5 tokens"},
		{"", "", Options{Mode: Chunk, Window: 8, Overlap: 3, Prompt: "the man is "}, "an overlap of 3 wordpieces leaves no new wordpiece"},
	} {
		dir := filepath.Dir(path)
		for _, f := range []string{stPromptsFile, "modules.json"} {
			os.Remove(filepath.Join(dir, f))
		}
		if tc.st != "" {
			writeSTPrompts(t, path, tc.st)
		}
		if tc.pool != "" {
			if err := os.MkdirAll(filepath.Join(dir, "1_Pooling"), 0o755); err != nil {
				t.Fatal(err)
			}
			mods := `[{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}, {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]`
			if err := os.WriteFile(filepath.Join(dir, "modules.json"), []byte(mods), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "1_Pooling", "config.json"), []byte(tc.pool), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		tc.o.Backend = "native"
		e, err := Open(path, tc.o)
		if err == nil {
			e.Close()
			t.Errorf("%+v: opened, want an error containing %q", tc.o, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "embed: ") {
			t.Errorf("%+v: %v, want an error containing %q", tc.o, err, tc.want)
		}
	}
	// include_prompt false does not matter to CLS pooling, nor without a
	// prompt.
	for _, o := range []Options{{Prompt: "man ", Pooling: PoolCLS}, {}} {
		open(t, path, o)
	}
}

// TestPromptManifest: a folder's manifest records the prompt, so that a
// run with another prompt does not resume it.
func TestPromptManifest(t *testing.T) {
	path := modelDir(t)
	texts := []string{text(10, 1), text(7, 2)}
	dir := filepath.Join(t.TempDir(), "vecs") + "/"
	e := open(t, path, Options{Prompt: "baby river "})
	if _, err := Write(e, corpus.Texts(texts), dir, WriteOptions{Input: "--text", Tool: "test", PartSize: 1}); err != nil {
		t.Fatal(err)
	}
	m, err := ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.Settings.Prompt != "baby river " {
		t.Errorf("manifest prompt %q, want the prompt", m.Settings.Prompt)
	}
	other := open(t, path, Options{Prompt: "the girl "})
	_, err = Write(other, corpus.Texts(append(texts, "the horse")), dir, WriteOptions{Input: "--text", Tool: "test", PartSize: 1})
	var mismatch *MismatchError
	if !errors.As(err, &mismatch) || !strings.Contains(err.Error(), `prompt: "the girl " here, "baby river " in the manifest`) {
		t.Errorf("resuming with another prompt: %v, want a mismatch naming the prompt", err)
	}
}
