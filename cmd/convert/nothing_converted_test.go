package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// TestRewriteNothingConverted: performer, linformer, local-pooled and lara
// exit with bad input, name the reason and write nothing when no block can
// be converted: a causal model, a model converted already, a model with no
// attention. It needs models the command builds (a converted one) or the
// test writes, which TestBadInputExitCodes' table of fixed inputs has not.
func TestRewriteNothingConverted(t *testing.T) {
	tmp := t.TempDir()
	// Y = Relu(X): a valid model with no attention at all.
	dims := []onnx.Dim{{Value: 1}, {Value: 8}}
	op, name, ir, ver, dom := "Relu", "relu", int64(8), int64(17), ""
	noAttn := filepath.Join(tmp, "relu.onnx")
	writeModel(t, &onnxpb.ModelProto{
		IrVersion:   &ir,
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: &dom, Version: &ver}},
		Graph: &onnxpb.GraphProto{
			Name:   &name,
			Node:   []*onnxpb.NodeProto{{Name: &name, OpType: &op, Input: []string{"X"}, Output: []string{"Y"}}},
			Input:  []*onnxpb.ValueInfoProto{onnx.MakeValueInfo("X", onnx.Float, dims)},
			Output: []*onnxpb.ValueInfoProto{onnx.MakeValueInfo("Y", onnx.Float, dims)},
		},
	}, noAttn)
	tiny := filepath.Join("..", "..", "testdata", "bert-tiny.onnx")
	converted := filepath.Join(tmp, "perf.onnx")
	if code, _, errOut := runCLI("performer", tiny, "-o", converted, "--features", "8"); code != 0 {
		t.Fatalf("performer: exit %d: %s", code, errOut)
	}
	code, out, _ := runCLI("inspect", converted)
	if code != 0 || !strings.Contains(out, "converted already: 2 linear-attention ops") {
		t.Errorf("inspect of a converted model: exit %d\n%s", code, out)
	}
	causal := filepath.Join("..", "..", "testdata", "fixtures", "bertdecoder_eager_op14.onnx")
	for _, c := range []struct {
		model, want string
	}{
		{causal, "causal"},
		{converted, "converted already: it holds 2 × ai.linearize:PerformerAttention"},
		{noAttn, "no attention block found"},
	} {
		for _, op := range [][]string{{"performer", "--features", "8"}, {"linformer", "--k", "4"}, {"local-pooled"}, {"lara", "--landmarks", "4"}} {
			if c.model == causal && op[0] == "performer" {
				continue // the causal Performer converts it: TestPerformerCausalCLI
			}
			dst := filepath.Join(tmp, "out.onnx")
			args := append([]string{op[0], c.model, "-o", dst}, op[1:]...)
			code, stdout, errOut := runCLI(args...)
			if code != exitBadInput || !strings.Contains(errOut, "nothing converted") || !strings.Contains(errOut, c.want) {
				t.Errorf("%s %s: exit %d, stderr %q; want exit %d naming %q", op[0], filepath.Base(c.model), code, errOut, exitBadInput, c.want)
			}
			if stdout != "" {
				t.Errorf("%s %s: printed %q", op[0], filepath.Base(c.model), stdout)
			}
			if _, err := os.Stat(dst); !os.IsNotExist(err) {
				t.Errorf("%s %s: wrote %s", op[0], filepath.Base(c.model), dst)
			}
		}
	}
}

// TestPerformerCausalCLI: performer converts a decoder's causal blocks with
// the causal Performer and says so, including that its default centred
// FAVOR++ was not applied to them.
func TestPerformerCausalCLI(t *testing.T) {
	causal := filepath.Join("..", "..", "testdata", "fixtures", "bertdecoder_eager_op14.onnx")
	dst := filepath.Join(t.TempDir(), "out.onnx")
	code, stdout, errOut := runCLI("performer", causal, "-o", dst, "--features", "8", "--chunk", "16")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"2 converted", "causal=1", "layers 0-1 are causal", "chunk 16", "options center, feature map favor++ not applied"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	if _, err := os.Stat(dst); err != nil {
		t.Error(err)
	}
}
