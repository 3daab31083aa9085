package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/onnx"
)

const nodeTestDir = "/usr/share/libonnx-testdata/data/node"

// TestRunConformance feeds ONNX conformance inputs through --input and
// compares the written outputs with the expected ones from the test data.
func TestRunConformance(t *testing.T) {
	needORT(t)
	for _, name := range []string{"test_add", "test_gather_0", "test_equal", "test_size", "test_cast_FLOAT_to_FLOAT16"} {
		dir := filepath.Join(nodeTestDir, name)
		m, err := onnx.Load(filepath.Join(dir, "model.onnx"))
		if err != nil {
			t.Skipf("ONNX conformance data missing (run scripts/setup.sh): %v", err)
		}
		out := t.TempDir()
		args := []string{"run", filepath.Join(dir, "model.onnx"), "--out-dir", out}
		for i, in := range m.Graph.Input {
			args = append(args, "--input", fmt.Sprintf("%s=%s", in.GetName(), filepath.Join(dir, "test_data_set_0", fmt.Sprintf("input_%d.pb", i))))
		}
		code, stdout, errOut := runCLI(args...)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", name, code, errOut)
		}
		for i, o := range m.Graph.Output {
			_, want, err := onnx.ReadTensorProtoFile(filepath.Join(dir, "test_data_set_0", fmt.Sprintf("output_%d.pb", i)))
			if err != nil {
				t.Fatal(err)
			}
			for _, ext := range []string{".pb", ".npy"} {
				got, err := onnx.ReadTensorFile(filepath.Join(out, o.GetName()+ext))
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if err := sameValues(got, want, 1e-5); err != nil {
					t.Errorf("%s: output %s%s: %v", name, o.GetName(), ext, err)
				}
			}
			if !strings.Contains(stdout, "output "+o.GetName()+" ") {
				t.Errorf("%s: stdout does not list output %s:\n%s", name, o.GetName(), stdout)
			}
		}
	}
}

func sameValues(got, want *onnx.Tensor, tol float64) error {
	if got.DType != want.DType || fmt.Sprint(got.Shape) != fmt.Sprint(want.Shape) && len(got.Shape)+len(want.Shape) > 0 {
		return fmt.Errorf("got %s, want %s", got, want)
	}
	g, err := got.AsFloat64s()
	if err != nil {
		return err
	}
	w, _ := want.AsFloat64s()
	for i := range w {
		if math.Abs(g[i]-w[i]) > tol*(1+math.Abs(w[i])) {
			return fmt.Errorf("element %d = %v, want %v", i, g[i], w[i])
		}
	}
	return nil
}

// TestRunRandomCorpus runs the two corpus models the issue names through
// onnxruntime with random inputs, checks the outputs are finite with the
// declared shapes, and that the same seed gives byte-identical files.
func TestRunRandomCorpus(t *testing.T) {
	needORT(t)
	dir := corpusDir(t)
	cases := []struct {
		model string
		args  []string
		shape map[string]string
	}{
		{"TFBertForQuestionAnswering.onnx", []string{"--batch", "2"}, map[string]string{"output_1": "[2 7]", "output_2": "[2 7]"}},
		{"attention_opt.onnx", nil, map[string]string{"output": "[1 3 16]"}},
	}
	for _, c := range cases {
		var files [2]map[string][]byte
		for k := range files {
			out := t.TempDir()
			args := append([]string{"run", filepath.Join(dir, c.model), "--random-inputs", "--seed", "7", "--out-dir", out}, c.args...)
			code, stdout, errOut := runCLI(args...)
			if code != 0 {
				t.Fatalf("%s: exit %d: %s", c.model, code, errOut)
			}
			files[k] = map[string][]byte{}
			for name, shape := range c.shape {
				got, err := onnx.ReadTensorFile(filepath.Join(out, name+".npy"))
				if err != nil {
					t.Fatalf("%s: %v", c.model, err)
				}
				if fmt.Sprint(got.Shape) != shape {
					t.Errorf("%s: %s has shape %v, want %s", c.model, name, got.Shape, shape)
				}
				for _, v := range got.Floats() {
					if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
						t.Fatalf("%s: %s has non-finite values", c.model, name)
					}
				}
				b, _ := os.ReadFile(filepath.Join(out, name+".pb"))
				files[k][name] = b
				if !strings.Contains(stdout, "output "+name+" float32"+shape+" min ") {
					t.Errorf("%s: stdout lacks the stats line for %s:\n%s", c.model, name, stdout)
				}
			}
		}
		for name := range c.shape {
			if !bytes.Equal(files[0][name], files[1][name]) {
				t.Errorf("%s: %s differs between two runs with the same seed", c.model, name)
			}
		}
	}
}

func TestRunBadInput(t *testing.T) {
	needORT(t)
	dir := filepath.Join(nodeTestDir, "test_add")
	model := filepath.Join(dir, "model.onnx")
	if _, err := os.Stat(model); err != nil {
		t.Skipf("ONNX conformance data missing (run scripts/setup.sh): %v", err)
	}
	in0 := filepath.Join(dir, "test_data_set_0", "input_0.pb") // x: float32[3 4 5]
	tmp := t.TempDir()
	wrongType := filepath.Join(tmp, "ints.npy")
	onnx.WriteNPY(wrongType, onnx.NewInt64([]int{3, 4, 5}, make([]int64, 60)))
	wrongShape := filepath.Join(tmp, "small.npy")
	onnx.WriteNPY(wrongShape, onnx.NewFloat([]int{3, 4}, make([]float32, 12)))
	junk := filepath.Join(tmp, "junk.npy")
	os.WriteFile(junk, []byte("\x93NUMPY garbage"), 0o644)
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"run", model, "--input", "x=" + in0, "--input", "nope=" + in0}, exitBadInput, `"nope"`},
		{[]string{"run", model, "--input", "x=" + in0, "--input", "y=" + wrongType}, exitBadInput, `"y"`},
		{[]string{"run", model, "--input", "x=" + in0, "--input", "y=" + wrongShape}, exitBadInput, `"y"`},
		{[]string{"run", model, "--input", "x=" + in0, "--input", "y=" + junk}, exitBadInput, "junk.npy"},
		{[]string{"run", model, "--input", "x=" + in0, "--input", "y=" + filepath.Join(tmp, "absent.pb")}, exitBadInput, "absent.pb"},
		{[]string{"run", model, "--input", "x=" + in0}, exitBadInput, `"y"`},
		{[]string{"run", model, "--input", "x"}, exitUsage, "NAME=FILE"},
		{[]string{"run", model, "--backend", "tpu"}, exitUsage, "tpu"},
		{[]string{"run", filepath.Join(tmp, "none.onnx"), "--random-inputs"}, exitBadInput, "none.onnx"},
		{[]string{"run", junk, "--random-inputs"}, exitBadInput, "junk.npy"},
		{[]string{"run"}, exitUsage, "MODEL"},
	}
	for _, c := range cases {
		code, _, errOut := runCLI(c.args...)
		if code != c.code {
			t.Errorf("%v: exit %d, want %d (stderr %q)", c.args[1:], code, c.code, errOut)
		}
		if !strings.Contains(errOut, c.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: stderr %q should be one line mentioning %s", c.args[1:], errOut, c.want)
		}
	}
}

func TestOutputFileName(t *testing.T) {
	used := map[string]bool{}
	cases := []struct{ in, want string }{
		{"logits", "logits"},
		{"a/b:0", "a_b_0"},
		{"../etc/passwd", "_etc_passwd"},
		{"a/b_0", "a_b_0_2"},
		{"", "output"},
		{"LOGITS", "LOGITS_2"}, // case-insensitive file systems
	}
	for _, c := range cases {
		if got := outputFileName(c.in, used); got != c.want {
			t.Errorf("outputFileName(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestRunNeverWritesOverAnInput: --out-dir files that would replace an
// input (--input NAME=out/OUTPUT.npy, the model) are refused with exit
// 1 before the run, naming the output and the input; nothing changes.
func TestRunNeverWritesOverAnInput(t *testing.T) {
	model := filepath.Join("..", "..", "testdata", "bert-tiny.onnx")
	out := t.TempDir()
	ids := onnx.NewInt64([]int{1, 4}, []int64{2, 5, 6, 3})
	in := filepath.Join(out, "last_hidden_state.npy") // the name of an output
	if err := onnx.WriteNPY(in, ids); err != nil {
		t.Fatal(err)
	}
	before := folderState(t, out)
	code, stdout, stderr := runCLI("run", model, "--backend", "native", "--input", "input_ids="+in, "--random-inputs", "--seq-len", "4", "--out-dir", out)
	want := "--out-dir (output last_hidden_state) " + in + " is the input --input input_ids " + in
	if code != exitUsage || !strings.Contains(stderr, want) || stdout != "" {
		t.Errorf("exit %d, stdout %q, stderr %q; want %d and %q", code, stdout, stderr, exitUsage, want)
	}
	if now := folderState(t, out); !sameFolder(now, before) {
		t.Errorf("the refused run changed the folder: %q → %q", keys(before), keys(now))
	}
	// Elsewhere the same run writes its outputs.
	if code, _, stderr := runCLI("run", model, "--backend", "native", "--input", "input_ids="+in, "--random-inputs", "--seq-len", "4", "--out-dir", t.TempDir()); code != exitOK {
		t.Errorf("exit %d: %s", code, stderr)
	}
}
