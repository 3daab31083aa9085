package onnx_test

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// TestInstantiate checks the renaming and attribute resolution of one
// call, written out by hand: f(X, Y) -> (Z, W) with T = Add(X, Y),
// Z = LeakyRelu(T; alpha = @a), W = Neg(T), called as f(in0, in1) -> (out,
// "") with a = 0.5.
func TestInstantiate(t *testing.T) {
	f := &onnxpb.FunctionProto{
		Name:      proto.String("f"),
		Input:     []string{"X", "Y"},
		Output:    []string{"Z", "W"},
		Attribute: []string{"a"},
		Node: []*onnxpb.NodeProto{
			{Name: proto.String("add"), OpType: proto.String("Add"), Input: []string{"X", "Y"}, Output: []string{"T"}},
			{Name: proto.String("act"), OpType: proto.String("LeakyRelu"), Input: []string{"T"}, Output: []string{"Z"},
				Attribute: []*onnxpb.AttributeProto{{Name: proto.String("alpha"), RefAttrName: proto.String("a"), Type: onnxpb.AttributeProto_FLOAT.Enum()}}},
			{Name: proto.String("neg"), OpType: proto.String("Neg"), Input: []string{"T"}, Output: []string{"W"},
				Attribute: []*onnxpb.AttributeProto{{Name: proto.String("unused"), RefAttrName: proto.String("missing"), Type: onnxpb.AttributeProto_INT.Enum()}}},
		},
	}
	call := &onnxpb.NodeProto{Name: proto.String("call"), OpType: proto.String("f"), Input: []string{"in0", "in1"}, Output: []string{"out"},
		Attribute: []*onnxpb.AttributeProto{{Name: proto.String("a"), F: proto.Float32(0.5), Type: onnxpb.AttributeProto_FLOAT.Enum()}}}
	body, err := onnx.Instantiate(call, f, "p/")
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name, in, out string
	}{
		{"p/add", "in0,in1", "p/T"},
		{"p/act", "p/T", "out"},
		{"p/neg", "p/T", "p/W"}, // an unused output keeps an internal name
	}
	if len(body) != len(want) {
		t.Fatalf("%d nodes, want %d", len(body), len(want))
	}
	for i, w := range want {
		n := body[i]
		if n.GetName() != w.name || strings.Join(n.Input, ",") != w.in || strings.Join(n.Output, ",") != w.out {
			t.Errorf("node %d: %s %v -> %v, want %s %s -> %s", i, n.GetName(), n.Input, n.Output, w.name, w.in, w.out)
		}
	}
	if a := body[1].Attribute; len(a) != 1 || a[0].GetName() != "alpha" || a[0].GetF() != 0.5 || a[0].RefAttrName != nil {
		t.Errorf("alpha not resolved from the call: %v", a)
	}
	if len(body[2].Attribute) != 0 {
		t.Errorf("a reference to an attribute nobody gives must be dropped: %v", body[2].Attribute)
	}
	if f.Node[0].GetName() != "add" || call.Output[0] != "out" {
		t.Error("Instantiate modified its arguments")
	}
	call.Input = append(call.Input, "extra")
	if _, err := onnx.Instantiate(call, f, "p/"); err == nil || !strings.Contains(err.Error(), "3 inputs") {
		t.Errorf("too many inputs: err %v", err)
	}
}

// TestInlineFunctions inlines one of two model-local functions, written
// out by hand: the graph y = d.Twice(x); z = e.Keep(y), with Twice(X) =
// Add(X, X) (an unnamed body node) in domain d, Keep in another domain.
func TestInlineFunctions(t *testing.T) {
	twice := &onnxpb.FunctionProto{Name: proto.String("Twice"), Domain: proto.String("d"), Input: []string{"X"}, Output: []string{"Y"},
		Node: []*onnxpb.NodeProto{{OpType: proto.String("Add"), Input: []string{"X", "X"}, Output: []string{"Y"}}}}
	keep := &onnxpb.FunctionProto{Name: proto.String("Keep"), Domain: proto.String("e"), Input: []string{"X"}, Output: []string{"Y"},
		Node: []*onnxpb.NodeProto{{OpType: proto.String("Identity"), Input: []string{"X"}, Output: []string{"Y"}}}}
	m := &onnxpb.ModelProto{
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Version: proto.Int64(17)}, {Domain: proto.String("d"), Version: proto.Int64(1)}, {Domain: proto.String("e"), Version: proto.Int64(1)}},
		Functions:   []*onnxpb.FunctionProto{twice, keep},
		Graph: &onnxpb.GraphProto{Node: []*onnxpb.NodeProto{
			{Name: proto.String("call"), OpType: proto.String("Twice"), Domain: proto.String("d"), Input: []string{"x"}, Output: []string{"y"}},
			{Name: proto.String("other"), OpType: proto.String("Keep"), Domain: proto.String("e"), Input: []string{"y"}, Output: []string{"z"}},
		}},
	}
	before := proto.Clone(m)
	out, err := onnx.InlineFunctions(m, "d")
	if err != nil {
		t.Fatal(err)
	}
	nodes := out.Graph.Node
	if len(nodes) != 2 || nodes[0].GetOpType() != "Add" || nodes[0].GetDomain() != "" ||
		strings.Join(nodes[0].Input, ",") != "x,x" || strings.Join(nodes[0].Output, ",") != "y" ||
		nodes[0].GetName() != "_inlfunc_Twice_0/Add_0" || nodes[1].GetName() != "other" {
		t.Fatalf("inlined graph %v", nodes)
	}
	if len(out.Functions) != 1 || out.Functions[0].GetName() != "Keep" {
		t.Errorf("functions left %v, want Keep only", out.Functions)
	}
	for _, o := range out.OpsetImport {
		if o.GetDomain() == "d" {
			t.Errorf("opset import of the inlined domain kept: %v", out.OpsetImport)
		}
	}
	if len(out.OpsetImport) != 2 {
		t.Errorf("opset imports %v, want the default and e", out.OpsetImport)
	}
	if !proto.Equal(m, before) {
		t.Error("InlineFunctions modified its argument")
	}
	// A call whose arity does not fit its function is an error.
	m.Graph.Node[0].Input = append(m.Graph.Node[0].Input, "extra")
	if _, err := onnx.InlineFunctions(m, "d"); err == nil {
		t.Error("a call with too many inputs was inlined")
	}
}
