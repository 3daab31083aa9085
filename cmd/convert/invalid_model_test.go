package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// TestInvalidModelsRefused: a model onnx's checker refuses (duplicate
// graph inputs, outputs or initializers, an unknown operator, an absurd
// ir_version) is bad input, exit 2, with the offending name in the
// message and nothing written, from a converting command and from
// inspect.
func TestInvalidModelsRefused(t *testing.T) {
	src := filepath.Join("..", "..", "testdata", "bert-tiny.onnx")
	cases := []struct {
		name   string
		break_ func(m *onnxpb.ModelProto)
		want   string
	}{
		{"duplicate input", func(m *onnxpb.ModelProto) {
			m.Graph.Input = append(m.Graph.Input, m.Graph.Input[0])
		}, "input %q is listed twice"},
		{"duplicate output", func(m *onnxpb.ModelProto) {
			m.Graph.Output = append(m.Graph.Output, m.Graph.Output[0])
		}, "output %q is listed twice"},
		{"duplicate initializer", func(m *onnxpb.ModelProto) {
			m.Graph.Initializer = append(m.Graph.Initializer, proto.Clone(m.Graph.Initializer[0]).(*onnxpb.TensorProto))
		}, "initializer %q is defined twice"},
		{"unknown op", func(m *onnxpb.ModelProto) {
			for _, n := range m.Graph.Node {
				if n.GetOpType() == "Softmax" && n.GetDomain() == "" {
					n.OpType = proto.String("SoftMaxx")
					return
				}
			}
			t.Fatal("no Softmax in bert-tiny")
		}, `op type "SoftMaxx" is not an ONNX operator`},
		{"ir_version 2^60", func(m *onnxpb.ModelProto) {
			m.IrVersion = proto.Int64(1 << 60)
		}, "ir_version 1152921504606846976"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := onnx.Load(src)
			if err != nil {
				t.Fatal(err)
			}
			c.break_(m)
			want := c.want
			switch c.name {
			case "duplicate input":
				want = strings.Replace(want, "%q", `"`+m.Graph.Input[0].GetName()+`"`, 1)
			case "duplicate output":
				want = strings.Replace(want, "%q", `"`+m.Graph.Output[0].GetName()+`"`, 1)
			case "duplicate initializer":
				want = strings.Replace(want, "%q", `"`+m.Graph.Initializer[0].GetName()+`"`, 1)
			}
			dir := t.TempDir()
			bad := filepath.Join(dir, "bad.onnx")
			b, err := onnx.Encode(m)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(bad, b, 0o644); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, "out.onnx")
			for _, args := range [][]string{
				{"performer", bad, "-o", out},
				{"inspect", bad},
			} {
				code, _, errOut := runCLI(args...)
				if code != exitBadInput || !strings.Contains(errOut, want) {
					t.Errorf("%s: exit %d, stderr %q; want exit %d mentioning %s", args[0], code, errOut, exitBadInput, want)
				}
			}
			if ns := folderNames(t, dir); len(ns) != 1 {
				t.Errorf("the folder holds %v, want only the bad model", ns)
			}
		})
	}
}

// folderNames lists the names in dir.
func folderNames(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var ns []string
	for _, e := range es {
		ns = append(ns, e.Name())
	}
	return ns
}
