package main

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/infer/infertest"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// --inline on every rewriting command writes the ops' function bodies
// into the graph: no ai.linearize node, function or import is left, the
// report says so, and onnxruntime gives the outputs of the same
// conversion without --inline.
func TestInlineFlag(t *testing.T) {
	bert := filepath.Join("..", "..", "testdata", "bert-tiny.onnx")
	modern := filepath.Join("..", "..", "testdata", "fixtures", "modernbert_eager_op17.onnx")
	tmp := t.TempDir()
	for _, c := range []struct {
		cmd  string
		in   string
		args []string
	}{
		{"performer", bert, []string{"--features", "16"}},
		{"linformer", bert, []string{"--k", "4"}},
		{"local-pooled", bert, []string{"--block", "4", "--segments", "2"}},
		{"lara", bert, []string{"--landmarks", "4"}},
		{"hedgehog", bert, []string{"--block", "4", "--steps", "0"}},
		{"window", modern, nil},
		{"long", bert, []string{"--window", "32", "--max-length", "256", "--far", "--segments", "4"}},
	} {
		t.Run(c.cmd, func(t *testing.T) {
			fn, inl := filepath.Join(tmp, c.cmd+".onnx"), filepath.Join(tmp, c.cmd+".inlined.onnx")
			for _, out := range []string{fn, inl} {
				args := append([]string{c.cmd, c.in, "-o", out}, c.args...)
				if out == inl {
					args = append(args, "--inline")
				}
				code, stdout, errOut := runCLI(args...)
				if code != 0 {
					t.Fatalf("%v: exit %d: %s%s", args, code, stdout, errOut)
				}
				if out == inl && !strings.Contains(stdout, "--inline") {
					t.Errorf("%v: the report does not mention --inline:\n%s", args, stdout)
				}
			}
			m, err := onnx.Load(inl)
			if err != nil {
				t.Fatal(err)
			}
			if h := onnx.Summarize(m).Ops; len(h["ai.linearize"]) != 0 || len(m.Functions) != 0 {
				t.Errorf("inlined model: ops %v, %d functions", h, len(m.Functions))
			}
			for _, o := range m.OpsetImport {
				if o.GetDomain() == "ai.linearize" {
					t.Error("inlined model imports ai.linearize")
				}
			}
			if !infertest.ORT(t) {
				return
			}
			f, err := onnx.Load(fn)
			if err != nil {
				t.Fatal(err)
			}
			feed, err := infer.RandomInputs(f, infer.GraphInputs(f), infer.RandomOptions{Batch: 2, SeqLen: 16, Seed: 5})
			if err != nil {
				t.Fatal(err)
			}
			want, got := ortRun(t, f, feed), ortRun(t, m, feed)
			for name, w := range want {
				wv, _ := w.AsFloat64s()
				gv, err := got[name].AsFloat64s()
				if err != nil || len(gv) != len(wv) {
					t.Fatalf("output %s: %v", name, err)
				}
				var diff, top float64
				for i := range wv {
					diff, top = math.Max(diff, math.Abs(gv[i]-wv[i])), math.Max(top, math.Abs(wv[i]))
				}
				if !(diff <= 1e-6*top) {
					t.Errorf("output %s: max abs difference %.3g (max value %.3g)", name, diff, top)
				}
			}
		})
	}
}

func ortRun(t *testing.T, m *onnxpb.ModelProto, feed map[string]*onnx.Tensor) map[string]*onnx.Tensor {
	t.Helper()
	s, err := infer.Open("ort", m, infer.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out, err := s.Run(feed)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
