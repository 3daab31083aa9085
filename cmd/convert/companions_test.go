package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/internal/fsutil"
)

// TestSaveModelCopiesTokenizer: a model written to another folder by a
// rewriting command, extend-positions or finetune gets the input's
// tokenizer in the folder named like it, so that run --text works on it
// without --vocab; the next command in a chain carries it on; a copy that
// fails is a warning, not a failed conversion.
func TestSaveModelCopiesTokenizer(t *testing.T) {
	path, _ := feedModel(t) // vocab.txt beside bert.onnx
	out := t.TempDir()
	runText := func(model string) {
		t.Helper()
		code, stdout, errOut := runCLI("run", model, "--backend", "native", "--text", "the man is eating food.")
		if code != 0 || !strings.Contains(stdout, "input_ids int64[1 8]") {
			t.Errorf("run --text %s: exit %d: %s%s", filepath.Base(model), code, stdout, errOut)
		}
	}
	write := func(want bool, args ...string) string {
		t.Helper()
		code, stdout, errOut := runCLI(args...)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", strings.Join(args, " "), code, errOut)
		}
		dst := ""
		for i, a := range args {
			if a == "-o" {
				dst = strings.TrimSuffix(args[i+1], ".onnx")
			}
		}
		if got := strings.Contains(stdout, "copied tokenizer files to "+dst+"\n"); got != want {
			t.Errorf("%s: says it copied the tokenizer: %v, want %v:\n%s", args[0], got, want, stdout)
		}
		if want {
			if _, err := os.Stat(filepath.Join(dst, "vocab.txt")); err != nil {
				t.Errorf("%s: %v", args[0], err)
			}
		}
		return dst + ".onnx"
	}
	perf := write(true, "performer", path, "-o", filepath.Join(out, "perf.onnx"))
	runText(perf)
	ext := write(true, "extend-positions", path, "-o", filepath.Join(t.TempDir(), "ext.onnx"), "--max-positions", "256")
	runText(ext)
	// A chain: the written model's own copy travels on.
	lin := write(true, "linformer", ext, "-o", filepath.Join(t.TempDir(), "lin.onnx"))
	runText(lin)
	// finetune takes the tokenizer of the converted model.
	fit := write(true, "finetune", ext, lin, "-o", filepath.Join(t.TempDir(), "fit.onnx"),
		"--backend", "native", "--text", "the man is eating food.", "--steps", "2")
	runText(fit)
	// … or, when that has none, the original's.
	bare := filepath.Join(t.TempDir(), "bare.onnx")
	if data, err := os.ReadFile(lin); err != nil || os.WriteFile(bare, data, 0o644) != nil {
		t.Fatal(err)
	}
	fit = write(true, "finetune", ext, bare, "-o", filepath.Join(t.TempDir(), "fit.onnx"),
		"--backend", "native", "--text", "the man is eating food.", "--steps", "2")
	runText(fit)
	// --json keeps stdout JSON: the note goes to stderr.
	code, stdout, errOut := runCLI("performer", path, "-o", filepath.Join(t.TempDir(), "j.onnx"), "--json")
	if code != 0 || strings.Contains(stdout, "copied") || !strings.HasPrefix(stdout, "{") || !strings.Contains(errOut, "copied tokenizer files to ") {
		t.Errorf("performer --json: exit %d, stdout %.80q, stderr %q", code, stdout, errOut)
	}
	// An output beside the input's tokenizer needs no copy.
	write(false, "performer", path, "-o", filepath.Join(filepath.Dir(path), "beside.onnx"))

	// A file where the tokenizer folder would go: a warning, and the
	// model is written all the same.
	blocked := t.TempDir()
	os.WriteFile(filepath.Join(blocked, "p"), []byte("in the way"), 0o644)
	code, _, errOut = runCLI("performer", path, "-o", filepath.Join(blocked, "p.onnx"))
	if code != 0 {
		t.Fatalf("performer with the tokenizer folder blocked: exit %d: %s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(blocked, "p.onnx")); err != nil {
		t.Errorf("model not written: %v", err)
	}
	if w := errOut; !strings.Contains(w, "warning") || !strings.Contains(w, "p.onnx") || strings.Count(w, "\n") != 1 {
		t.Errorf("warning %q, want one line naming p.onnx", w)
	}
}

// TestSaveModelAndTokenizerAreOneSet: a conversion that fails or is
// stopped while writing leaves no model beside a partial tokenizer
// folder: at each step of the write, a failure leaves nothing new (or, on
// a re-run over an earlier output, the earlier model and folder), and a
// run after it writes the whole set.
func TestSaveModelAndTokenizerAreOneSet(t *testing.T) {
	path, _ := feedModel(t) // vocab.txt beside bert.onnx
	t.Cleanup(func() { fsutil.CommitHook = nil })
	failed := map[string]bool{}
	for _, step := range []string{"prepare", "journal", "backup", "replace"} {
		for _, i := range []int{-1, 0, 1} {
			out := filepath.Join(t.TempDir(), "lp.onnx")
			vocab := filepath.Join(strings.TrimSuffix(out, ".onnx"), "vocab.txt")
			fsutil.CommitHook = func(s string, j int) error {
				if s == step && j == i {
					return errors.New("injected")
				}
				return nil
			}
			code, _, _ := runCLI("local-pooled", path, "-o", out)
			fsutil.CommitHook = nil
			_, errModel := os.Stat(out)
			_, errVocab := os.Stat(vocab)
			if code == 0 {
				// The hook did not fire at this step (no such file index).
				if errModel != nil || errVocab != nil {
					t.Errorf("%s/%d: exit 0 without the model (%v) or its vocab (%v)", step, i, errModel, errVocab)
				}
				continue
			}
			failed[fmt.Sprintf("%s/%d", step, i)] = true
			if errModel == nil || errVocab == nil {
				t.Errorf("%s/%d: a failed write left the model (%v) or the vocab (%v)", step, i, errModel, errVocab)
			}
			if code, _, errOut := runCLI("local-pooled", path, "-o", out); code != 0 {
				t.Fatalf("%s/%d: the run after the failure: exit %d: %s", step, i, code, errOut)
			}
			if _, err := os.Stat(vocab); err != nil {
				t.Errorf("%s/%d: the run after the failure left no vocab: %v", step, i, err)
			}
		}
	}
	// File 0 is the model, file 1 a tokenizer file: both in one set.
	if !failed["prepare/1"] || !failed["replace/1"] || !failed["replace/0"] {
		t.Errorf("injected failures that reached the write: %v; want the model (0) and its tokenizer (1) written as one set", failed)
	}
}
