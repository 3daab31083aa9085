package embed

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/corpus"
	"github.com/linearize/linearize/infer"
	testenv "github.com/linearize/linearize/infer/infertest"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/tokenize"
)

// taskModel is a jina-embeddings-v3-shaped fixture as jinaai exports it:
// besides input_ids and attention_mask it takes task_id, a scalar int64
// that chooses the LoRA adapters every linear layer adds to its weight
// (testdata/fixtures/gen_fixtures.py, family jinav3lora).
var taskModel = filepath.Join("..", "testdata", "fixtures", "jinav3lora_eager_op17.onnx")

// taskModelDir copies taskModel into a temporary folder beside the test
// vocab.txt (its 55 entries are within the model's 100) and returns its
// path.
func taskModelDir(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(taskModel)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "jina.onnx")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "vocab.txt"), []byte(testVocab()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// taskReference runs the model at path on [CLS] text [SEP] with task_id
// set to task, in onnxruntime when it is installed (else the native
// backend), and returns the L2-normalised mean of last_hidden_state,
// computed here in float64.
func taskReference(t *testing.T, path, text string, task int64) []float64 {
	t.Helper()
	m, err := onnx.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenize.LoadForModel(path)
	if err != nil {
		t.Fatal(err)
	}
	backend := "native"
	if infer.ORTAvailable() == nil {
		backend = "ort"
	}
	sess, err := infer.Open(backend, m, infer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	ids := tok.Encode(text, 0)
	n := len(ids)
	mask := make([]int64, n)
	for i := range mask {
		mask[i] = 1
	}
	feed := map[string]*onnx.Tensor{
		"input_ids":      onnx.NewInt64([]int{1, n}, ids),
		"attention_mask": onnx.NewInt64([]int{1, n}, mask),
		"task_id":        onnx.NewInt64([]int{}, []int64{task}),
	}
	res, err := sess.Run(feed, "last_hidden_state")
	if err != nil {
		t.Fatal(err)
	}
	h := res["last_hidden_state"]
	d := h.Shape[2]
	v := make([]float64, d)
	for i, x := range h.Floats() {
		v[i%d] += float64(x) / float64(n)
	}
	return unit(v)
}

// TestFixedInputs: an input that carries no tokens is given by
// Options.Inputs and fed with every pass: the vectors are the model's own
// for that task (checked in onnxruntime when installed), another task
// gives other vectors, and the manifest of a folder records the value, so
// that a run with another task does not resume it.
func TestFixedInputs(t *testing.T) {
	path := taskModelDir(t)
	texts := []string{"the man is eating food", text(30, 4)}
	vecs := map[string][][]float32{}
	for _, task := range []string{"4", "0"} {
		for _, mode := range []Mode{Truncate, Chunk} {
			e := open(t, path, Options{Mode: mode, Window: 16, Inputs: map[string]string{"task_id": task}})
			got, err := e.Embed(texts)
			if err != nil {
				t.Fatal(err)
			}
			if mode == Truncate {
				vecs[task] = got
				// The first text fits one window: the model's own vector.
				near(t, "task "+task+" text 0", got[0], taskReference(t, path, texts[0], map[string]int64{"4": 4, "0": 0}[task]), 1e-4)
			}
		}
	}
	if c := dot(vecs["4"][0], vecs["0"][0]); c > 0.999 { // unit vectors
		t.Errorf("tasks 4 and 0 give the same vector (cosine %.6f): task_id does not reach the model", c)
	}
	if !testenv.ORT(t) {
		t.Log("the reference above ran in the native backend")
	}

	dir := filepath.Join(t.TempDir(), "vecs") + "/"
	e := open(t, path, Options{Inputs: map[string]string{"task_id": "4"}})
	if _, err := Write(e, corpus.Texts(texts), dir, WriteOptions{Input: "--text", Tool: "test", PartSize: 1}); err != nil {
		t.Fatal(err)
	}
	m, err := ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.Settings.Inputs, "task_id=int64[] 4"; got != want {
		t.Errorf("manifest inputs %q, want %q", got, want)
	}
	other := open(t, path, Options{Inputs: map[string]string{"task_id": "3"}})
	_, err = Write(other, corpus.Texts(append(texts, "the horse")), dir, WriteOptions{Input: "--text", Tool: "test", PartSize: 1})
	var mismatch *MismatchError
	if !errors.As(err, &mismatch) || !strings.Contains(err.Error(), "inputs: task_id=int64[] 3 here, task_id=int64[] 4 in the manifest") {
		t.Errorf("resuming with another task: %v, want a mismatch naming the inputs", err)
	}
}

// TestFixedInputsRefused: without the task id, or with one that does not
// fit, Open fails naming the input.
func TestFixedInputsRefused(t *testing.T) {
	path := taskModelDir(t)
	ids := filepath.Join(t.TempDir(), "ids.npy")
	if err := onnx.WriteNPY(ids, onnx.NewInt64([]int{1, 3}, []int64{5, 6, 7})); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		inputs map[string]string
		want   string
	}{
		{nil, `input "task_id" (int64[]) is not ids, mask, token types or positions by its name, so text cannot fill it: give its value (Inputs, --input task_id=VALUE)`},
		{map[string]string{"task_id": "4.5"}, `"4.5" is not an integer`},
		{map[string]string{"task_id": "5"}, `input "task_id": value 5 (element 0) is outside the 5 rows of the table it indexes (0..4)`},
		{map[string]string{"task": "4"}, `has no input "task" (inputs: input_ids, attention_mask, task_id)`},
		{map[string]string{"task_id": "4", "input_ids": ids}, `input "input_ids" is filled from the text; only inputs that carry no tokens are given a fixed value`},
		{map[string]string{"task_id": filepath.Join(t.TempDir(), "none.npy")}, "none.npy"},
	} {
		_, err := Open(path, Options{Backend: "native", Inputs: c.inputs})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Inputs %v: %v, want an error saying %q", c.inputs, err, c.want)
		}
	}
}

// dot is the dot product of a and b.
func dot(a, b []float32) float64 {
	var s float64
	for i := range a {
		s += float64(a[i]) * float64(b[i])
	}
	return s
}

// TestFixedNote: the manifest writes a fixed input of at most 8 elements
// as its values, and a larger one as the SHA-256 of its .npy file (what
// sha256sum prints for the file the value came from).
func TestFixedNote(t *testing.T) {
	small := onnx.NewInt64([]int{}, []int64{4})
	large := onnx.NewInt64([]int{9}, []int64{1, 2, 3, 4, 5, 6, 7, 8, 9})
	file := filepath.Join(t.TempDir(), "large.npy")
	if err := onnx.WriteNPY(file, large); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	e := &Embedder{fixed: map[string]*onnx.Tensor{"task_id": small, "weights": large}}
	want := "task_id=int64[] 4; weights=int64[9] sha256 " + hex.EncodeToString(sum[:])
	if got := e.fixedNote(); got != want {
		t.Errorf("fixedNote() = %q, want %q", got, want)
	}
}
