package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/linearize/linearize/embed"
)

// TestEvaluatePrompts: --query-prompt begins each query and --doc-prompt
// each document, in every system (the truncate system then has an
// encoder of its own); the prompts named in the model's
// config_sentence_transformers.json give the same report as the same
// texts given literally; and the exit codes of prompts that cannot
// apply.
func TestEvaluatePrompts(t *testing.T) {
	model, docs := evalFixture(t, 6)
	base := []string{"evaluate", model, "--docs", docs, "--backend", "native", "--max-tokens", "256",
		"--buckets", "0,128,256", "--bootstrap", "20", "--systems", "truncate,chunk", "--json"}
	run := func(extra ...string) (embed.Report, string) {
		t.Helper()
		code, stdout, stderr := runCLI(append(append([]string{}, base...), extra...)...)
		if code != exitOK {
			t.Fatalf("%v: exit %d: %s", extra, code, stderr)
		}
		var rep embed.Report
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
			t.Fatalf("%v: %v", extra, err)
		}
		return rep, stderr
	}
	literal, stderr := run("--query-prompt", "river stone ", "--doc-prompt", "cloud paper ")
	for _, want := range []string{"queries: ", `prompt "river stone "`, "system truncate: ", "system chunk: "} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	for _, line := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(line, "system ") && !strings.Contains(line, `prompt "cloud paper "`) {
			t.Errorf("a system reads without the document prompt: %s", line)
		}
	}
	plain, _ := run()
	if reflect.DeepEqual(scoresOf(literal), scoresOf(plain)) {
		t.Errorf("the prompts change no score: %v", scoresOf(plain))
	}

	st := `{"prompts": {"query": "river stone ", "document": "cloud paper "}, "default_prompt_name": null}`
	if err := os.WriteFile(filepath.Join(filepath.Dir(model), "config_sentence_transformers.json"), []byte(st), 0o644); err != nil {
		t.Fatal(err)
	}
	named, stderr := run("--query-prompt-name", "query", "--doc-prompt-name", "document")
	if !reflect.DeepEqual(scoresOf(named), scoresOf(literal)) {
		t.Errorf("named prompts score %v, the same texts given literally %v", scoresOf(named), scoresOf(literal))
	}
	if !strings.Contains(stderr, `prompt "river stone " (query in `) {
		t.Errorf("stderr does not say where the query prompt came from:\n%s", stderr)
	}

	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--query-prompt", "a ", "--query-prompt-name", "query"}, exitUsage, "--query-prompt and --query-prompt-name both give the prompt"},
		{[]string{"--doc-prompt", "a ", "--doc-prompt-name", "document"}, exitUsage, "--doc-prompt and --doc-prompt-name both give the prompt"},
		{[]string{"--doc-prompt-name", "passage"}, exitBadInput, `prompt "passage" is not one of the prompts`},
		{[]string{"--query-prompt-name", "passage"}, exitBadInput, "(document, query)"},
	} {
		code, stdout, stderr := runCLI(append(append([]string{}, base...), c.args...)...)
		if code != c.code || !strings.Contains(stderr, c.msg) || stdout != "" {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, stderr, c.code, c.msg)
		}
	}
}

// scoresOf lists each system's MRR and recall@1 over all queries.
func scoresOf(r embed.Report) []embed.Score {
	var s []embed.Score
	for _, sys := range r.Systems {
		s = append(s, sys.All)
	}
	return s
}

// TestEmbedPrompt: embed --prompt P writes for each text what embed
// writes for P+text without a prompt (one window each), --prompt-name
// takes P from config_sentence_transformers.json, and a prompt given
// twice or not found exits 1 or 2 with nothing written.
func TestEmbedPrompt(t *testing.T) {
	model, _ := evalFixture(t, 1)
	dir := filepath.Dir(model)
	texts := []string{"the river under a bridge", "old silver lamp near the window"}
	embedTexts := func(name string, texts []string, extra ...string) []float32 {
		t.Helper()
		out := filepath.Join(dir, name+".npy")
		args := []string{"embed", model, "-o", out, "--backend", "native", "--mode", "truncate"}
		for _, s := range texts {
			args = append(args, "--text", s)
		}
		code, stdout, stderr := runCLI(append(args, extra...)...)
		if code != exitOK {
			t.Fatalf("%v: exit %d: %s", extra, code, stderr)
		}
		if p := strings.Join(extra, " "); strings.Contains(p, "prompt") && !strings.Contains(stdout, `each after the prompt "cloud paper "`) {
			t.Errorf("%v: the summary does not name the prompt: %s", extra, stdout)
		}
		_, vecs, _ := readNPYOut(t, out)
		return vecs
	}
	var joined []string
	for _, s := range texts {
		joined = append(joined, "cloud paper "+s)
	}
	want := embedTexts("joined", joined)
	got := embedTexts("prompt", texts, "--prompt", "cloud paper ")
	nearSlice(t, "--prompt", got, want, 1e-6)

	st := `{"prompts": {"document": "cloud paper "}}`
	if err := os.WriteFile(filepath.Join(dir, "config_sentence_transformers.json"), []byte(st), 0o644); err != nil {
		t.Fatal(err)
	}
	nearSlice(t, "--prompt-name", embedTexts("named", texts, "--prompt-name", "document"), want, 1e-6)

	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--prompt", "a ", "--prompt-name", "document"}, exitUsage, "--prompt and --prompt-name both give the prompt"},
		{[]string{"--prompt-name", "query"}, exitBadInput, `prompt "query" is not one of the prompts`},
	} {
		out := filepath.Join(dir, "refused.npy")
		code, _, stderr := runCLI(append([]string{"embed", model, "-o", out, "--backend", "native", "--text", "the river"}, c.args...)...)
		if code != c.code || !strings.Contains(stderr, c.msg) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, stderr, c.code, c.msg)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("%v wrote %s", c.args, out)
		}
	}
}

// nearSlice fails when got and want differ in length or by more than
// tol in any element.
func nearSlice(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if d := float64(got[i] - want[i]); d > tol || d < -tol {
			t.Fatalf("%s: value %d is %g, want %g", what, i, got[i], want[i])
		}
	}
}

// TestEvaluateQueryInput: with jina-embeddings-v3's task adapters, the
// queries are read with --query-input's task and the documents with
// --input's, by every system.
func TestEvaluateQueryInput(t *testing.T) {
	path, dir := taskModel(t)
	docs := filepath.Join(dir, "docs")
	if err := os.Mkdir(docs, 0o755); err != nil {
		t.Fatal(err)
	}
	words := strings.Fields("the man is eating food")
	for d := 0; d < 4; d++ {
		var sb strings.Builder
		for s := 0; s < 24; s++ {
			for i := 0; i < 4+(s+d)%3; i++ {
				sb.WriteString(words[(s*7+i*3+d)%len(words)] + " ")
			}
			sb.WriteString(". ")
		}
		if err := os.WriteFile(filepath.Join(docs, "doc"+string(rune('a'+d))+".txt"), []byte(sb.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"evaluate", path, "--docs", docs, "--backend", "native", "--max-tokens", "64", "--buckets", "0,32,64",
		"--bootstrap", "10", "--systems", "truncate,chunk", "--query-input", "task_id=0"}
	code, _, stderr := runCLI(append(args, "--input", "task_id=1")...)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	lines := 0
	for _, line := range strings.Split(stderr, "\n") {
		switch {
		case strings.HasPrefix(line, "queries: "):
			lines++
			if !strings.Contains(line, "inputs task_id=int64[] 0") {
				t.Errorf("the queries are not read with task 0: %s", line)
			}
		case strings.HasPrefix(line, "system "):
			lines++
			if !strings.Contains(line, "inputs task_id=int64[] 1") {
				t.Errorf("a system does not read the documents with task 1: %s", line)
			}
		}
	}
	if lines != 3 {
		t.Errorf("%d lines name the queries' and the systems' encoders, want 3:\n%s", lines, stderr)
	}
	// Without --input the documents have no task.
	code, _, stderr = runCLI(args...)
	if code != exitBadInput || !strings.Contains(stderr, `input "task_id"`) {
		t.Errorf("without --input: exit %d, %q; want exit 2 naming task_id", code, stderr)
	}
}
