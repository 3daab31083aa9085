package convert

import (
	"fmt"
	"sort"
	"strings"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// upgradeOpset raises the model's default-domain opset from below 11 to
// to (≤ 12), rewriting the ops whose signature changed on the way (Slice
// at 10: starts/ends/axes attributes become inputs; Pad and Clip at 11:
// pads/value and min/max become inputs). onnxruntime runs a model-local
// function with the model's own opset, and the function bodies need at
// least 11. Ops whose semantics changed in ways not handled here make it
// fail, naming them.
func upgradeOpset(m *onnxpb.ModelProto, to int64) error {
	from := onnx.OpsetVersion(m, "")
	if from >= to {
		return nil
	}
	if to > 12 {
		return fmt.Errorf("opset upgrade to %d is not supported (only up to 12)", to)
	}
	g := m.Graph
	nm := onnx.NewNamer(g)
	unsupported := map[string]bool{}
	for _, n := range g.Node {
		if !defaultDomain(n) {
			continue
		}
		for _, a := range n.Attribute {
			if a.G != nil || len(a.Graphs) > 0 {
				unsupported[n.GetOpType()+" (with subgraph)"] = true
			}
		}
		switch n.GetOpType() {
		case "Upsample", "Resize", "TopK", "Scatter", "Dropout", "BatchNormalization", "MaxPool", "AveragePool", "Cast" + "Like":
			if n.GetOpType() == "Dropout" && from >= 7 {
				continue // ratio stays an attribute until 12; is_test gone at 7
			}
			unsupported[n.GetOpType()] = true
		case "Slice":
			if from < 10 && onnx.Attr(n, "starts") != nil {
				moveAttrsToInputs(g, nm, n, []string{"starts", "ends", "axes"})
			}
		case "Pad":
			if from < 11 {
				pads := onnx.AttrInts(n, "pads")
				val := onnx.AttrFloat(n, "value", 0)
				n.Attribute = dropAttrs(n.Attribute, "pads", "value")
				n.Input = append(n.Input[:1], addInt64Init(g, nm, n.GetName()+"_pads", pads), addFloatInit(g, nm, n.GetName()+"_value", val))
			}
		case "Clip":
			if from < 11 {
				lo, hi := onnx.Attr(n, "min"), onnx.Attr(n, "max")
				n.Attribute = dropAttrs(n.Attribute, "min", "max")
				in := []string{n.Input[0], "", ""}
				if lo != nil {
					in[1] = addFloatInit(g, nm, n.GetName()+"_min", lo.GetF())
				}
				if hi != nil {
					in[2] = addFloatInit(g, nm, n.GetName()+"_max", hi.GetF())
				}
				n.Input = in
			}
		}
	}
	if len(unsupported) > 0 {
		var names []string
		for k := range unsupported {
			names = append(names, k)
		}
		sort.Strings(names)
		return fmt.Errorf("model opset %d must be raised to %d for the function bodies, but these ops changed meaning in between and are not upgraded: %s", from, to, strings.Join(names, ", "))
	}
	for _, op := range m.OpsetImport {
		if op.GetDomain() == "" || op.GetDomain() == "ai.onnx" {
			op.Version = proto.Int64(to)
		}
	}
	return nil
}

func moveAttrsToInputs(g *onnxpb.GraphProto, nm *onnx.Namer, n *onnxpb.NodeProto, names []string) {
	in := []string{n.Input[0]}
	for _, a := range names {
		v := onnx.AttrInts(n, a)
		if v == nil {
			in = append(in, "")
			continue
		}
		in = append(in, addInt64Init(g, nm, n.GetName()+"_"+a, v))
	}
	for len(in) > 1 && in[len(in)-1] == "" {
		in = in[:len(in)-1]
	}
	n.Input = in
	n.Attribute = dropAttrs(n.Attribute, names...)
}

func dropAttrs(as []*onnxpb.AttributeProto, names ...string) []*onnxpb.AttributeProto {
	var out []*onnxpb.AttributeProto
	for _, a := range as {
		drop := false
		for _, n := range names {
			if a.GetName() == n {
				drop = true
			}
		}
		if !drop {
			out = append(out, a)
		}
	}
	return out
}

func addInt64Init(g *onnxpb.GraphProto, nm *onnx.Namer, base string, v []int64) string {
	name := nm.Name("linearize/upgrade/" + base)
	tp, _ := onnx.EncodeTensor(name, onnx.NewInt64([]int{len(v)}, append([]int64(nil), v...)))
	g.Initializer = append(g.Initializer, tp)
	return name
}

func addFloatInit(g *onnxpb.GraphProto, nm *onnx.Namer, base string, v float32) string {
	name := nm.Name("linearize/upgrade/" + base)
	tp, _ := onnx.EncodeTensor(name, onnx.NewFloat([]int{}, []float32{v}))
	g.Initializer = append(g.Initializer, tp)
	return name
}
