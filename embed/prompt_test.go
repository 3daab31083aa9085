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

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/corpus"
	"github.com/linearize/linearize/onnx"
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
	// PromptIDs are the ids of the prompt alone, special tokens added:
	// sentence-transformers leaves all but the last of them out of the
	// pooling when include_prompt is false.
	PromptIDs []int64 `json:"prompt_ids"`
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
// it: as prompt+" "+text. With include_prompt false, mean pooling leaves
// out as many tokens as sentence-transformers does (its prompt_length).
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
	if e.unpooled != 0 {
		t.Errorf("prompt %q: %d tokens left out of the pooling with include_prompt true", c.Prompt, e.unpooled)
	}
	ex := &Embedder{path: "test", tok: tok, mode: Truncate, window: 4096, pooling: PoolMean}
	if err := ex.readMarkers(); err != nil {
		t.Fatal(err)
	}
	if err := ex.choosePrompt(Options{Prompt: c.Prompt}); err != nil {
		t.Fatal(err)
	}
	if ex.unpooled != len(c.PromptIDs)-1 {
		t.Errorf("prompt %q: %d tokens left out of the pooling with include_prompt false, want %d (sentence-transformers' prompt_length: the ids of %v but the last)", c.Prompt, ex.unpooled, len(c.PromptIDs)-1, c.PromptIDs)
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
		o    Options
		want string
	}{
		{"", Options{PromptName: "query"}, `prompt "query": no config_sentence_transformers.json beside model`},
		{`{"prompts": {"query": "q: ", "doc": "d: "}}`, Options{PromptName: "passage"}, `prompt "passage" is not one of the prompts`},
		{`{"prompts": {"query": "q: ", "doc": "d: "}}`, Options{PromptName: "passage"}, "(doc, query)"},
		{`{"prompts": {"query": "q: "}, "default_prompt_name": "doc"}`, Options{}, `default_prompt_name "doc" is not one of its prompts`},
		{`{"prompts": [1]}`, Options{PromptName: "query"}, "config_sentence_transformers.json: json"},
		{"", Options{Prompt: "a", PromptName: "b"}, "set Prompt or PromptName, not both"},
		{"", Options{Mode: Truncate, Window: 5, Prompt: "the man is "}, "leave none of a window of 5 tokens"},
		{"", Options{Mode: Chunk, Window: 8, Overlap: 3, Prompt: "the man is "}, "an overlap of 3 wordpieces leaves no new wordpiece"},
	} {
		dir := filepath.Dir(path)
		os.Remove(filepath.Join(dir, stPromptsFile))
		if tc.st != "" {
			writeSTPrompts(t, path, tc.st)
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
}

// writeSTPooling writes modules.json and 1_Pooling/config.json (body)
// beside the model at path: a Transformer and a Pooling module.
func writeSTPooling(t *testing.T, path, body string) {
	t.Helper()
	dir := filepath.Dir(path)
	if err := os.MkdirAll(filepath.Join(dir, "1_Pooling"), 0o755); err != nil {
		t.Fatal(err)
	}
	mods := `[{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}, {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]`
	if err := os.WriteFile(filepath.Join(dir, "modules.json"), []byte(mods), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "1_Pooling", "config.json"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// hiddenRows pools rows [from, end) of h, a direct run's last hidden
// state [1, tokens, dim], by kind (mean or max), in float64.
func hiddenRows(h *onnx.Tensor, kind Pooling, from int) []float64 {
	n, D := h.Shape[1], h.Shape[2]
	x := h.Floats()
	v := make([]float64, D)
	for s := from; s < n; s++ {
		for d := range D {
			y := float64(x[s*D+d])
			switch {
			case kind == PoolMax && s == from:
				v[d] = y
			case kind == PoolMax:
				v[d] = max(v[d], y)
			default:
				v[d] += y / float64(n-from)
			}
		}
	}
	return v
}

// TestPromptNotPooled: a model whose Pooling config sets include_prompt
// false has [CLS] and the prompt's wordpieces left out of its mean and
// max pooling, in every window, as sentence-transformers leaves out its
// prompt_length first tokens. Each vector is checked against a direct
// run of the model on prompt+text pooled from position 1+p on ([SEP]
// included): in Truncate and Long mode, in Chunk mode chunk by chunk,
// for an empty text (its [SEP] alone), and on a `convert long` model
// window by window (each window read as the original reads that chunk
// alone). CLS pooling takes [CLS] as before.
func TestPromptNotPooled(t *testing.T) {
	path := modelDir(t)
	const prompt, p = "baby river ", 2 // two wordpieces of the tiny vocabulary
	writeSTPooling(t, path, `{"pooling_mode_mean_tokens": true, "include_prompt": false}`)
	txt := text(20, 1)
	for _, c := range []struct {
		mode Mode
		kind Pooling
		txt  string
	}{
		{Truncate, PoolMean, txt}, {Long, PoolMean, txt}, {Truncate, PoolMax, txt},
		{Long, PoolMax, txt}, {Truncate, PoolMean, ""}, {Truncate, PoolCLS, txt},
	} {
		name := fmt.Sprintf("%s, %s, %d words", c.mode, c.kind, len(strings.Fields(c.txt)))
		o := Options{Mode: c.mode, Prompt: prompt, Raw: true}
		if c.kind != PoolMean {
			o.Pooling = c.kind
		}
		e := open(t, path, o)
		got, err := e.Embed([]string{c.txt})
		if err != nil {
			t.Fatal(err)
		}
		h := directHidden(t, path, prompt+c.txt)
		want := hiddenRows(h, c.kind, 1+p)
		if c.kind == PoolCLS {
			want = toF64(h.Floats()[:h.Shape[2]])
			if e.PromptUnpooled() {
				t.Errorf("%s: PromptUnpooled with CLS pooling", name)
			}
		}
		near(t, name, got[0], want, 1e-5)
		if c.kind != PoolCLS && (!e.PromptUnpooled() || !strings.Contains(e.String(), "not pooled: include_prompt false")) {
			t.Errorf("%s: %s does not say the prompt is not pooled", name, e)
		}
		if c.kind == PoolMean && c.txt != "" {
			if all := hiddenRows(h, PoolMean, 0); maxDiff(got[0], toFloat32(all)) < 1e-3 {
				t.Errorf("%s: the vector is the mean over every token", name)
			}
		}
	}

	// Chunk mode, window 10: chunks of 6 and 4 wordpieces, each pooled
	// from its own pass, weighted by its wordpieces.
	ch := open(t, path, Options{Mode: Chunk, Window: 10, Prompt: prompt})
	first, second := text(6, 0), text(4, 6)
	got, err := ch.Embed([]string{first + " " + second})
	if err != nil {
		t.Fatal(err)
	}
	want := make([]float64, len(got[0]))
	for i, part := range []string{first, second} {
		u := unit(hiddenRows(directHidden(t, path, prompt+part), PoolMean, 1+p))
		for k := range want {
			want[k] += []float64{6, 4}[i] / 10 * u[k]
		}
	}
	near(t, "chunk", got[0], unit(want), 1e-5)

	// A `convert long` model: three windows of 128 tokens, each [CLS],
	// the prompt, its wordpieces and [SEP]; its vector is the mean of
	// every window's wordpieces and [SEP].
	long := writeLong(t, path, convert.LongOptions{MaxLength: 512})
	le := open(t, long, Options{Prompt: prompt, Raw: true})
	w := le.Window() - 2 - p
	n := 2*w + 40
	got, err = le.Embed([]string{text(n, 5)})
	if err != nil {
		t.Fatal(err)
	}
	want = make([]float64, len(got[0]))
	total := 0
	for lo := 0; lo < n; lo += w {
		k := min(w, n-lo)
		v := hiddenRows(directHidden(t, path, prompt+text(k, 5+lo)), PoolMean, 1+p)
		for d := range want {
			want[d] += v[d] * float64(k+1)
		}
		total += k + 1
	}
	for d := range want {
		want[d] /= float64(total)
	}
	near(t, "long model", got[0], want, 2e-5)
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
