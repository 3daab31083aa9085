package tokenize

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// companionModel writes model.onnx in a folder of its own with the
// tokenizer files in the folder named like it (dir/model/), as
// scripts/real-model.sh lays out testdata/real/minilm.
func companionModel(t *testing.T) (model, src string) {
	t.Helper()
	dir := t.TempDir()
	model = filepath.Join(dir, "model.onnx")
	src = filepath.Join(dir, "model")
	if err := os.MkdirAll(filepath.Join(src, "1_Pooling"), 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"vocab.txt":             "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\nworld\n",
		"tokenizer_config.json": `{"do_lower_case": true}`,
		"config.json":           `{"max_position_embeddings": 512}`,
		"1_Pooling/config.json": `{"pooling_mode_mean_tokens": true}`,
		"model.safetensors":     "not a companion",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(src, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(model, []byte("onnx"), 0o644); err != nil {
		t.Fatal(err)
	}
	return model, src
}

// TestCopyCompanions: the companions of a model reach the folder named
// like the output model, where LoadForModel finds the same tokenizer;
// other files stay behind; nothing is copied when the output already has
// a tokenizer or the input has none.
func TestCopyCompanions(t *testing.T) {
	in, src := companionModel(t)
	outDir := t.TempDir()
	out := filepath.Join(outDir, "conv.onnx")
	if _, err := LoadForModel(out); err == nil {
		t.Fatal("the output has a tokenizer before the copy")
	}
	copied, err := CopyCompanions(in, out)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(outDir, "conv")
	var want []string
	for _, f := range []string{"vocab.txt", "tokenizer_config.json", "config.json", filepath.Join("1_Pooling", "config.json")} {
		want = append(want, filepath.Join(dst, f))
		a, _ := os.ReadFile(filepath.Join(src, f))
		b, err := os.ReadFile(filepath.Join(dst, f))
		if err != nil || string(a) != string(b) {
			t.Errorf("%s: %q, %v; want %q", f, b, err, a)
		}
	}
	slices.Sort(want)
	slices.Sort(copied)
	if !slices.Equal(copied, want) {
		t.Errorf("copied %v, want %v", copied, want)
	}
	if _, err := os.Stat(filepath.Join(dst, "model.safetensors")); err == nil {
		t.Error("a file that is no companion was copied")
	}
	a, err := LoadForModel(in)
	if err != nil {
		t.Fatal(err)
	}
	b, err := LoadForModel(out)
	if err != nil {
		t.Fatalf("after the copy: %v", err)
	}
	if x, y := a.Encode("Hello world", 0), b.Encode("Hello world", 0); !slices.Equal(x, y) || len(x) != 4 {
		t.Errorf("the copied tokenizer encodes %v, the original %v", y, x)
	}
	// The output has a tokenizer now: a second copy writes nothing.
	os.WriteFile(filepath.Join(src, "config.json"), []byte(`{"changed": true}`), 0o644)
	if again, err := CopyCompanions(in, out); err != nil || len(again) != 0 {
		t.Errorf("second copy: %v, %v; want nothing", again, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "config.json")); strings.Contains(string(b), "changed") {
		t.Error("a second copy overwrote the output's companions")
	}
	// An output beside the input, in the tokenizer's own folder, has it.
	if c, err := CopyCompanions(in, filepath.Join(src, "x.onnx")); err != nil || len(c) != 0 {
		t.Errorf("output in the tokenizer's folder: %v, %v; want nothing", c, err)
	}
	// An input without a tokenizer has nothing to copy.
	bare := filepath.Join(t.TempDir(), "bare.onnx")
	if c, err := CopyCompanions(bare, filepath.Join(t.TempDir(), "o.onnx")); err != nil || len(c) != 0 {
		t.Errorf("input without a tokenizer: %v, %v; want nothing", c, err)
	}
	// An output without an extension has no folder named like it.
	if _, err := CopyCompanions(in, filepath.Join(t.TempDir(), "noext")); err == nil {
		t.Error("no error for an output without an extension")
	}
}

// TestCopyCompanionsRefuses: a link out of the tokenizer's folder, a
// folder in place of a file and an oversized file are not copied; the
// other files are, and the error names each refused one.
func TestCopyCompanionsRefuses(t *testing.T) {
	in, src := companionModel(t)
	secret := filepath.Join(t.TempDir(), "secret.json")
	os.WriteFile(secret, []byte(`{"secret": 1}`), 0o644)
	if err := os.Symlink(secret, filepath.Join(src, "special_tokens_map.json")); err != nil {
		t.Skipf("no symbolic links here: %v", err)
	}
	// A link inside the folder is followed.
	if err := os.Symlink("config.json", filepath.Join(src, "modules.json")); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(src, "sentence_bert_config.json"), 0o755)
	big, err := os.Create(filepath.Join(src, "config_sentence_transformers.json"))
	if err != nil {
		t.Fatal(err)
	}
	big.Truncate(maxFile + 1) // sparse
	big.Close()
	out := filepath.Join(t.TempDir(), "conv.onnx")
	copied, err := CopyCompanions(in, out)
	if err == nil {
		t.Fatal("no error")
	}
	for _, f := range []string{"special_tokens_map.json", "sentence_bert_config.json", "config_sentence_transformers.json"} {
		if !strings.Contains(err.Error(), f) {
			t.Errorf("error %q does not name %s", err, f)
		}
		if _, err := os.Lstat(filepath.Join(filepath.Dir(out), "conv", f)); err == nil {
			t.Errorf("%s was copied", f)
		}
	}
	if !strings.Contains(err.Error(), "outside") {
		t.Errorf("error %q does not say the link leads outside", err)
	}
	if len(copied) != 5 { // vocab, tokenizer_config, config, modules, 1_Pooling
		t.Errorf("copied %v, want the 5 good files", copied)
	}
	b, err := os.ReadFile(filepath.Join(filepath.Dir(out), "conv", "modules.json"))
	if err != nil || !strings.Contains(string(b), "max_position_embeddings") {
		t.Errorf("modules.json (a link inside the folder): %q, %v", b, err)
	}
	if fi, err := os.Lstat(filepath.Join(filepath.Dir(out), "conv", "modules.json")); err == nil && !fi.Mode().IsRegular() {
		t.Error("the copy of a link is not a regular file")
	}
}
