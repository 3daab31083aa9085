package onnx_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// TestValidateCheckerRules: what onnx's checker refuses and onnxruntime
// fails on later is refused, with the offending name in the error.
func TestValidateCheckerRules(t *testing.T) {
	cases := []struct {
		name   string
		break_ func(m *onnxpb.ModelProto)
		want   string
	}{
		{"duplicate graph input", func(m *onnxpb.ModelProto) {
			m.Graph.Input = append(m.Graph.Input, onnx.MakeValueInfo("X", onnx.Float, []onnx.Dim{{Value: 1}, {Value: 2}}))
		}, `input "X" is listed twice`},
		{"duplicate graph output", func(m *onnxpb.ModelProto) {
			m.Graph.Output = append(m.Graph.Output, m.Graph.Output[0])
		}, `output "Y" is listed twice`},
		{"duplicate initializer", func(m *onnxpb.ModelProto) {
			m.Graph.Initializer = append(m.Graph.Initializer, proto.Clone(m.Graph.Initializer[0]).(*onnxpb.TensorProto))
		}, `initializer "W" is defined twice`},
		{"duplicate input in a subgraph", func(m *onnxpb.ModelProto) {
			body := &onnxpb.GraphProto{
				Name: sp("body"),
				Node: []*onnxpb.NodeProto{{OpType: sp("Identity"), Input: []string{"a"}, Output: []string{"b"}}},
				Input: []*onnxpb.ValueInfoProto{
					onnx.MakeValueInfo("a", onnx.Float, nil), onnx.MakeValueInfo("a", onnx.Float, nil),
				},
				Output: []*onnxpb.ValueInfoProto{onnx.MakeValueInfo("b", onnx.Float, nil)},
			}
			m.Graph.Node[1].OpType = sp("If")
			m.Graph.Node[1].Attribute = []*onnxpb.AttributeProto{{Name: sp("then_branch"), G: body}}
		}, `input "a" is listed twice`},
		{"unknown op type", func(m *onnxpb.ModelProto) {
			m.Graph.Node[1].OpType = sp("Frobnicate")
		}, `node "add" (Frobnicate): op type "Frobnicate" is not an ONNX operator`},
		{"op type lowercase", func(m *onnxpb.ModelProto) {
			m.Graph.Node[1].OpType = sp("add")
		}, `op type "add" is not an ONNX operator`},
		{"op type newer than the opset", func(m *onnxpb.ModelProto) {
			m.Graph.Node[1].OpType = sp("Gelu")
		}, `op type "Gelu" needs opset 20; the model imports opset 17`},
		{"op type via ai.onnx", func(m *onnxpb.ModelProto) {
			m.OpsetImport[0].Domain = sp("ai.onnx")
			m.Graph.Node[1].Domain = sp("ai.onnx")
			m.Graph.Node[1].OpType = sp("Frobnicate")
		}, `op type "Frobnicate" is not an ONNX operator`},
		{"ir_version 2^60", func(m *onnxpb.ModelProto) {
			m.IrVersion = i64p(1 << 60)
		}, `ir_version 1152921504606846976 is not one this tool knows (3..14)`},
		{"ir_version 2", func(m *onnxpb.ModelProto) {
			m.IrVersion = i64p(2)
		}, `ir_version 2 is not`},
		{"opset past the table", func(m *onnxpb.ModelProto) {
			m.OpsetImport[0].Version = i64p(1000)
		}, `opset 1000 of the default domain is not one this tool knows (1..28)`},
		{"opset 0", func(m *onnxpb.ModelProto) {
			m.OpsetImport[0].Version = i64p(0)
		}, `opset 0 of the default domain`},
		{"unknown op in a function body", func(m *onnxpb.ModelProto) {
			m.OpsetImport = append(m.OpsetImport, &onnxpb.OperatorSetIdProto{Domain: sp("local"), Version: i64p(1)})
			m.Functions = []*onnxpb.FunctionProto{{
				Name: sp("F"), Domain: sp("local"), Input: []string{"x"}, Output: []string{"y"},
				Node: []*onnxpb.NodeProto{{Name: sp("in_f"), OpType: sp("Frobnicate"), Input: []string{"x"}, Output: []string{"y"}}},
			}}
		}, `node "in_f" (Frobnicate): op type "Frobnicate" is not an ONNX operator`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := tinyModel()
			c.break_(m)
			err := onnx.Validate(m)
			if err == nil {
				t.Fatal("Validate accepted the model")
			}
			if !errors.Is(err, onnx.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q, want ErrInvalid mentioning %q", err, c.want)
			}
			// Load refuses the file too, naming it.
			dir := t.TempDir()
			p := filepath.Join(dir, "bad.onnx")
			b, _ := onnx.Encode(m)
			os.WriteFile(p, b, 0o644)
			if _, err := onnx.Load(p); !errors.Is(err, onnx.ErrInvalid) || !strings.Contains(err.Error(), p) {
				t.Errorf("Load: %v, want ErrInvalid naming %s", err, p)
			}
		})
	}
}

// TestValidateCheckerAccepts: what the rules must let through.
func TestValidateCheckerAccepts(t *testing.T) {
	cases := []struct {
		name string
		edit func(m *onnxpb.ModelProto)
	}{
		{"initializer also a graph input", func(m *onnxpb.ModelProto) {
			m.Graph.Input = append(m.Graph.Input, onnx.MakeValueInfo("W", onnx.Float, []onnx.Dim{{Value: 2}, {Value: 2}}))
		}},
		{"other domains are not checked", func(m *onnxpb.ModelProto) {
			m.OpsetImport = append(m.OpsetImport, &onnxpb.OperatorSetIdProto{Domain: sp("com.microsoft"), Version: i64p(1)})
			m.Graph.Node[1].Domain = sp("com.microsoft")
			m.Graph.Node[1].OpType = sp("AnythingAtAll")
		}},
		{"op at its first opset", func(m *onnxpb.ModelProto) {
			m.OpsetImport[0].Version = i64p(20)
			m.Graph.Node[1].OpType = sp("Gelu")
		}},
		{"newest opset and IR", func(m *onnxpb.ModelProto) {
			m.OpsetImport[0].Version = i64p(onnx.MaxOpset)
			m.IrVersion = i64p(onnx.MaxIRVersion)
		}},
		{"oldest opset and IR", func(m *onnxpb.ModelProto) {
			m.OpsetImport[0].Version = i64p(1)
			m.IrVersion = i64p(onnx.MinIRVersion)
		}},
		{"onnxruntime's LayerNormalization before opset 17", func(m *onnxpb.ModelProto) {
			m.OpsetImport[0].Version = i64p(11)
			m.Graph.Node[1].OpType = sp("LayerNormalization")
		}},
		{"legacy ImageScaler at opset 8", func(m *onnxpb.ModelProto) {
			m.OpsetImport[0].Version = i64p(8)
			m.Graph.Node[1].OpType = sp("ImageScaler")
		}},
		{"model-local function in the default domain", func(m *onnxpb.ModelProto) {
			m.Functions = []*onnxpb.FunctionProto{{
				Name: sp("MyAdd"), Domain: sp(""), Input: []string{"a", "b"}, Output: []string{"c"},
				Node: []*onnxpb.NodeProto{{OpType: sp("Add"), Input: []string{"a", "b"}, Output: []string{"c"}}},
			}}
			m.Graph.Node[1].OpType = sp("MyAdd")
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := tinyModel()
			c.edit(m)
			if err := onnx.Validate(m); err != nil {
				t.Errorf("refused: %v", err)
			}
		})
	}
	// ImageScaler left ONNX at opset 10.
	m := tinyModel()
	m.Graph.Node[1].OpType = sp("ImageScaler")
	if err := onnx.Validate(m); err == nil {
		t.Error("ImageScaler accepted at opset 17")
	}
}

// TestOpTableCoversConformanceModels: every operator of the default domain
// in ONNX's conformance models (libonnx-testdata) is in the table, at or
// before the opset the model imports, and every folder's op is named.
func TestOpTableCoversConformanceModels(t *testing.T) {
	paths, _ := filepath.Glob("/usr/share/libonnx-testdata/data/node/*/model.onnx")
	if len(paths) == 0 {
		t.Skip("no ONNX test data (libonnx-testdata; scripts/setup.sh installs it)")
	}
	seen := map[string]bool{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		m, err := onnx.Decode(b)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		var opset int64
		for _, o := range m.OpsetImport {
			if o.GetDomain() == "" || o.GetDomain() == "ai.onnx" {
				opset = o.GetVersion()
			}
		}
		for _, n := range m.Graph.Node {
			if d := n.GetDomain(); d != "" && d != "ai.onnx" {
				continue
			}
			seen[n.GetOpType()] = true
			s := onnx.OpSince(n.GetOpType())
			if s == 0 || int64(s) > opset {
				t.Errorf("%s: %s (opset %d): table says since %d", filepath.Base(filepath.Dir(p)), n.GetOpType(), opset, s)
			}
		}
	}
	if len(seen) < 150 {
		t.Errorf("only %d operators in %d models", len(seen), len(paths))
	}
	t.Logf("%d operators of %d conformance models are in the table", len(seen), len(paths))
}
