package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestInspectTokenizer: inspect names the tokenizer beside the model and
// what it is (the kind, the entries, the frame), says when there is none,
// and says why one cannot be read, in text and in JSON.
func TestInspectTokenizer(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "..", "testdata", "bert-tiny.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	tokDir := filepath.Join("..", "..", "testdata", "tokenizers")
	for _, tc := range []struct {
		name  string
		files map[string]string // file name → source under testdata/tokenizers, or literal content
		want  string
		kind  string
	}{
		{"bpe", map[string]string{"tokenizer.json": "@modernbert-bpe/tokenizer.json"}, "(byte-level BPE, 1507 entries, [CLS] … [SEP])", "byte-level BPE"},
		{"unigram", map[string]string{"tokenizer.json": "@xlmr-unigram/tokenizer.json"}, "(Unigram, 2002 entries, <s> … </s>)", "Unigram"},
		{"wordpiece", map[string]string{"vocab.txt": "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n"}, "(WordPiece, 5 entries, [CLS] … [SEP])", "WordPiece"},
		{"none", nil, "tokenizer:    none beside the model (commands that read text need --vocab)", ""},
		{"broken", map[string]string{"tokenizer.json": `{"model":{"type":"WordLevel","vocab":{}}}`}, `cannot be read: tokenize: `, ""},
		{"prompts", map[string]string{"vocab.txt": "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n",
			"config_sentence_transformers.json": `{"prompts": {"search_query": "search_query: ", "search_document": "search_document: "}, "default_prompt_name": "search_query"}`},
			"config_sentence_transformers.json: search_document, search_query (default search_query): embed --prompt-name NAME", "WordPiece"},
		{"bad prompts", map[string]string{"vocab.txt": "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n",
			"config_sentence_transformers.json": `{"prompts": {"a": "a: "}, "default_prompt_name": "b"}`},
			`prompts cannot be read: embed: `, "WordPiece"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			model := filepath.Join(dir, "model.onnx")
			if err := os.WriteFile(model, src, 0o644); err != nil {
				t.Fatal(err)
			}
			for name, content := range tc.files {
				if from, ok := strings.CutPrefix(content, "@"); ok {
					b, err := os.ReadFile(filepath.Join(tokDir, from))
					if err != nil {
						t.Fatal(err)
					}
					content = string(b)
				}
				if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			code, out, errOut := runCLI("inspect", model)
			if code != 0 || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d, stderr %q; output lacks %q:\n%s", code, errOut, tc.want, out)
			}
			code, out, _ = runCLI("inspect", model, "--json")
			var rep struct {
				Tokenizer struct {
					Kind    string            `json:"kind"`
					Error   string            `json:"error"`
					Prompts map[string]string `json:"prompts"`
				} `json:"tokenizer"`
			}
			if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil {
				t.Fatalf("--json: exit %d, %v", code, err)
			}
			if rep.Tokenizer.Kind != tc.kind || (tc.name == "broken") != (rep.Tokenizer.Error != "") {
				t.Errorf("--json tokenizer %+v, want kind %q", rep.Tokenizer, tc.kind)
			}
			if (tc.name == "prompts") != (rep.Tokenizer.Prompts["search_query"] == "search_query: ") {
				t.Errorf("--json prompts %v", rep.Tokenizer.Prompts)
			}
		})
	}
}

// TestInspectGivenInputs: inspect names the inputs text does not fill (a
// task id) and the flag that gives them, in text and JSON; a model whose
// inputs text fills names none.
func TestInspectGivenInputs(t *testing.T) {
	path, _ := taskModel(t)
	code, out, errOut := runCLI("inspect", path)
	if want := "text does not fill task_id: commands that read text take it with --input task_id=VALUE"; code != 0 || !strings.Contains(out, want) {
		t.Fatalf("exit %d, stderr %q; output lacks %q:\n%s", code, errOut, want, out)
	}
	code, out, _ = runCLI("inspect", path, "--json")
	if code != 0 || !strings.Contains(out, `"given": [`) || !strings.Contains(out, `"task_id"`) {
		t.Errorf("--json: exit %d, no given task_id:\n%s", code, out)
	}
	code, out, _ = runCLI("inspect", filepath.Join("..", "..", "testdata", "bert-tiny.onnx"))
	if code != 0 || strings.Contains(out, "text does not fill") {
		t.Errorf("bert-tiny: exit %d, names inputs text does not fill:\n%s", code, out)
	}
}
