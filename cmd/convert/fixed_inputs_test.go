package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/linearize/linearize/onnx"
)

// taskModel copies the jina-embeddings-v3-shaped fixture that takes a
// task_id input (testdata/fixtures/gen_fixtures.py, family jinav3lora)
// into a temporary folder beside a small vocab.txt.
func taskModel(t *testing.T) (path, dir string) {
	t.Helper()
	dir = t.TempDir()
	data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "fixtures", "jinav3lora_eager_op17.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(dir, "jina.onnx")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	vocab := "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\nman\nis\neating\nfood\n"
	if err := os.WriteFile(filepath.Join(dir, "vocab.txt"), []byte(vocab), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, dir
}

// TestCalibrationFixedInputs: the calibrated conversions fill the
// token-level inputs from the calibration text and take the task id from
// --input; without it they refuse the model, exit 2, naming the input and
// the flag, and write nothing. With it hedgehog trains its maps on the
// task's attention, so two tasks give two models, each of which runs.
func TestCalibrationFixedInputs(t *testing.T) {
	path, dir := taskModel(t)
	cal := filepath.Join(dir, "cal.txt")
	if err := os.WriteFile(cal, []byte("the man is eating food\nthe food\nthe man is eating\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for cmd, want := range map[string]string{
		"hedgehog":  `input "task_id" (int64[]) is not ids, mask, token types or positions by its name, so text cannot fill it: give its value (WindowOptions.Inputs, --input task_id=VALUE)`,
		"performer": `--input task_id=VALUE`,
	} {
		out := filepath.Join(dir, cmd+".onnx")
		args := []string{cmd, path, "-o", out, "--calibration", cal}
		if cmd == "performer" {
			args = append(args, "--balance")
		} else {
			args = append(args, "--backend", "native", "--steps", "5", "--block", "2", "--seq-len", "8")
		}
		code, stdout, stderr := runCLI(args...)
		if code != exitBadInput || !strings.Contains(stderr, want) {
			t.Errorf("%s: exit %d, %q %q; want exit %d and %q", cmd, code, stdout, stderr, exitBadInput, want)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("%s wrote %s", cmd, out)
		}
		if code, stdout, stderr := runCLI(append(args, "--input", "task_id=4")...); code != exitOK {
			t.Errorf("%s --input task_id=4: exit %d, %q %q", cmd, code, stdout, stderr)
		}
	}
	var models [][]byte
	for _, task := range []string{"4", "0"} {
		hh := filepath.Join(dir, "hh"+task+".onnx")
		code, stdout, stderr := runCLI("hedgehog", path, "-o", hh, "--calibration", cal, "--input", "task_id="+task,
			"--steps", "20", "--block", "2", "--seq-len", "8", "--backend", "native")
		if code != exitOK {
			t.Fatalf("hedgehog task %s: exit %d, %q %q", task, code, stdout, stderr)
		}
		data, err := os.ReadFile(hh)
		if err != nil {
			t.Fatal(err)
		}
		models = append(models, data)
		if code, stdout, stderr := runCLI("run", hh, "--backend", "native", "--text", "the man is eating", "--input", "task_id="+task); code != exitOK {
			t.Errorf("run the task %s model: exit %d, %q %q", task, code, stdout, stderr)
		}
	}
	if bytes.Equal(models[0], models[1]) {
		t.Error("hedgehog trained on tasks 4 and 0 wrote the same model: the task id does not reach the teacher")
	}
}

// TestFixedInputFlag: --input gives an input that carries no tokens
// (jina-embeddings-v3's task_id) to embed and to run with --text, as a
// number or as a .npy file of the same value, which give the same
// vectors; without it both refuse the model, exit 2, saying which flag
// gives it; a task or a token id past the tables the model computes for
// the task is refused before the model runs, exit 2.
func TestFixedInputFlag(t *testing.T) {
	path, dir := taskModel(t)
	file := filepath.Join(dir, "task.npy")
	if err := onnx.WriteNPY(file, onnx.NewInt64([]int{}, []int64{4})); err != nil {
		t.Fatal(err)
	}
	hint := "--input task_id=VALUE"
	var vecs [][]float32
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{nil, exitBadInput, hint},
		{[]string{"--input", "task_id=4"}, exitOK, "embedded 2 documents"},
		{[]string{"--input", "task_id=" + file}, exitOK, "embedded 2 documents"},
		{[]string{"--input", "task_id=0"}, exitOK, "embedded 2 documents"},
		{[]string{"--input", "task_id=four"}, exitBadInput, "four"},
		{[]string{"--input", "task=4"}, exitBadInput, `has no input "task"`},
	} {
		out := filepath.Join(t.TempDir(), "v.npy")
		args := append([]string{"embed", path, "--backend", "native", "--text", "the man is eating", "--text", "food", "-o", out}, c.args...)
		code, stdout, stderr := runCLI(args...)
		if code != c.code || !strings.Contains(stdout+stderr, c.want) {
			t.Errorf("embed %v: exit %d, %q %q; want exit %d and %q", c.args, code, stdout, stderr, c.code, c.want)
			continue
		}
		if code == exitOK {
			_, v, _ := readNPYOut(t, out)
			vecs = append(vecs, v)
		}
	}
	if len(vecs) == 3 {
		if !slices.Equal(vecs[0], vecs[1]) {
			t.Error("task_id=4 and a .npy file holding 4 give different vectors")
		}
		if slices.Equal(vecs[0], vecs[2]) {
			t.Error("task_id=4 and task_id=0 give the same vectors: the input does not reach the model")
		}
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{nil, exitBadInput, hint},
		{[]string{"--input", "task_id=4"}, exitOK, "output last_hidden_state float32[1 6 32]"},
		// The adapters' tables have 5 rows.
		{[]string{"--input", "task_id=5"}, exitBadInput, "--input task_id: value 5 (element 0) is outside the 5 rows of the table it indexes (0..4)"},
		// The embedding table, computed for the task, has the model's 100
		// rows; this tokenizer's ids go past them.
		{[]string{"--input", "task_id=4", "--vocab", filepath.Join("..", "..", "testdata", "tokenizers", "xlmr-unigram")}, exitBadInput,
			"is outside the 100 rows of the embedding table it indexes (0..99)"},
	} {
		code, stdout, stderr := runCLI(append([]string{"run", path, "--backend", "native", "--text", "the man is eating"}, c.args...)...)
		if code != c.code || !strings.Contains(stdout+stderr, c.want) {
			t.Errorf("run %v: exit %d, %q %q; want exit %d and %q", c.args, code, stdout, stderr, c.code, c.want)
		}
	}
}
