package main

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/models"
	"github.com/linearize/linearize/onnx"
)

// feedCommands are the commands that take the input flags, each with its
// positional arguments for the model at path (outputs under dir).
func feedCommands(path, dir string) map[string][]string {
	return map[string][]string{
		"run":              {"run", path},
		"compare":          {"compare", path, path},
		"validate":         {"validate", path},
		"finetune":         {"finetune", path, path, "-o", filepath.Join(dir, "fit.onnx")},
		"compare-backends": {"compare-backends", path},
	}
}

// feedModel writes the tiny BERT with a vocab.txt beside it.
func feedModel(t *testing.T) (path, dir string) {
	t.Helper()
	dir = t.TempDir()
	m, err := models.BERT(models.TinyConfig())
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(dir, "bert.onnx")
	if err := onnx.Save(m, path, onnx.SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	vocab := "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\nman\nis\neating\nfood\n.\nhorse\n##s\n"
	if err := os.WriteFile(filepath.Join(dir, "vocab.txt"), []byte(vocab), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, dir
}

// TestFeedFlagErrorsAgree: every command that takes the input flags
// refuses the same bad flags with the same message and exit code.
func TestFeedFlagErrorsAgree(t *testing.T) {
	path, dir := feedModel(t)
	missing := filepath.Join(dir, "missing.npy")
	texts := filepath.Join(dir, "texts.txt")
	os.WriteFile(texts, []byte("the man\n"), 0o644)
	cases := []struct {
		name string
		args []string
		code int
		want []string // in the message
	}{
		{"missing --input file", []string{"--input", "input_ids=" + missing, "--random-inputs"}, exitBadInput, []string{"--input input_ids", "missing.npy"}},
		{"input the model lacks", []string{"--input", "nope=" + missing}, exitBadInput, []string{"--input nope", `no input "nope"`}},
		{"--text with --random-inputs", []string{"--text", "the man", "--random-inputs"}, exitUsage, []string{"--text cannot be combined with --random-inputs"}},
		{"--text-file with --random-inputs", []string{"--text-file", texts, "--random-inputs"}, exitUsage, []string{"--text-file cannot be combined with --random-inputs"}},
		{"missing --text-file", []string{"--text-file", filepath.Join(dir, "none.txt")}, exitBadInput, []string{"--text-file", "none.txt"}},
		{"missing --vocab", []string{"--text", "the", "--vocab", filepath.Join(dir, "nope")}, exitBadInput, []string{"--vocab", "nope"}},
		{"no inputs", nil, exitBadInput, []string{`input "input_ids" not given`, "--random-inputs"}},
		{"--seq-len 0", []string{"--random-inputs", "--seq-len", "0"}, exitUsage, []string{"--seq-len", "want an integer ≥ 1"}},
		{"--batch -1", []string{"--random-inputs", "--batch", "-1"}, exitUsage, []string{"--batch", "want an integer ≥ 1"}},
		{"--max-len 1", []string{"--text", "the", "--max-len", "1"}, exitUsage, []string{"--max-len", "want an integer ≥ 2"}},
		{"--input without =", []string{"--input", "input_ids"}, exitUsage, []string{"-input", "NAME=FILE"}},
		{"--input twice", []string{"--input", "input_ids=a.npy", "--input", "input_ids=b.npy"}, exitUsage, []string{`"input_ids" given twice`}},
	}
	for _, c := range cases {
		first := ""
		for name, pre := range feedCommands(path, dir) {
			code, _, errOut := runCLI(append(append([]string(nil), pre...), c.args...)...)
			if code != c.code {
				t.Errorf("%s: %s: exit %d, want %d (%s)", c.name, name, code, c.code, errOut)
			}
			for _, w := range c.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("%s: %s: message %q lacks %q", c.name, name, errOut, w)
				}
			}
			msg := strings.TrimPrefix(errOut, "convert "+name+": ")
			if first == "" {
				first = msg
			} else if msg != first {
				t.Errorf("%s: messages differ:\n%q\n%q", c.name, first, msg)
			}
			if strings.Count(errOut, "\n") != 1 {
				t.Errorf("%s: %s: %q is not one line", c.name, name, errOut)
			}
		}
	}
}

// TestFeedsAgree: the same flags build the same tensors in every command.
func TestFeedsAgree(t *testing.T) {
	path, dir := feedModel(t)
	var got *infer.Feed
	stop := errors.New("stop")
	feedBuilt = func(f *infer.Feed) error { got = f; return stop }
	defer func() { feedBuilt = nil }()
	texts := filepath.Join(dir, "texts.txt")
	os.WriteFile(texts, []byte("horses\nthe man is eating food.\n"), 0o644)
	for _, c := range []struct {
		args         []string
		batch, seq   int
		descContains string
	}{
		{[]string{"--random-inputs"}, 1, infer.DefaultFeedSeqLen, "random inputs, seed 1"},
		{[]string{"--random-inputs", "--batch", "3", "--seq-len", "24", "--seed", "9"}, 3, 24, "seed 9"},
		{[]string{"--text", "the man", "--text-file", texts}, 3, 8, "3 texts, 8 tokens"},
		{[]string{"--text", "the man", "--seq-len", "12"}, 1, 12, "1 texts, 12 tokens"},
	} {
		var first *infer.Feed
		for name, pre := range feedCommands(path, dir) {
			got = nil
			code, _, errOut := runCLI(append(append([]string(nil), pre...), c.args...)...)
			if got == nil || !strings.Contains(errOut, "stop") {
				t.Fatalf("%s %v: no feed built (exit %d: %s)", name, c.args, code, errOut)
			}
			if got.Batch != c.batch || got.SeqLen != c.seq || !strings.Contains(got.Description, c.descContains) {
				t.Errorf("%s %v: batch %d × %d %q", name, c.args, got.Batch, got.SeqLen, got.Description)
			}
			if first == nil {
				first = got
			} else if !reflect.DeepEqual(first, got) {
				t.Errorf("%s %v: the feed differs from another command's", name, c.args)
			}
		}
	}
}

// TestFeedUsageDocumented: every feed command's --help lists the input
// flags with the same text and defaults.
func TestFeedUsageDocumented(t *testing.T) {
	first := ""
	for name := range feedCommands("m.onnx", "d") {
		code, out, _ := runCLI("help", name) // the full reference: every flag's whole description
		if code != exitOK {
			t.Fatalf("%s --help: exit %d", name, code)
		}
		var blocks []string
		fs := flag.NewFlagSet(name, flag.ContinueOnError)
		addFeedFlags(fs)
		fs.VisitAll(func(f *flag.Flag) {
			// "help NAME" writes "  --NAME[ VALUE]\n" and the description
			// below it, indented by 8.
			i := strings.Index(out, "\n  --"+f.Name+" ")
			if i < 0 {
				i = strings.Index(out, "\n  --"+f.Name+"\n")
			}
			if i < 0 {
				t.Errorf("%s --help lacks --%s", name, f.Name)
				return
			}
			block := out[i+1:]
			if j := strings.Index(block, "\n  -"); j >= 0 {
				block = block[:j]
			}
			if j := strings.Index(block, "\n\n"); j >= 0 {
				block = block[:j]
			}
			blocks = append(blocks, block)
		})
		for _, want := range []string{"(default 1)", "(default: the model's limit: the rows of its position table, else max_position_embeddings in the config.json beside it", "; 512 without one)", "for random inputs 16"} {
			if !strings.Contains(strings.Join(strings.Fields(out), " "), want) {
				t.Errorf("%s --help lacks %q", name, want)
			}
		}
		if s := strings.Join(blocks, "\n"); first == "" {
			first = s
		} else if s != first {
			t.Errorf("%s: input flags differ", name)
		}
	}
}
