package ops_test

import (
	"fmt"

	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
	"google.golang.org/protobuf/proto"
)

// How a converter adds PerformerAttention to a model at default-domain
// opset 17: the node (always with a key_bias input), the function that
// defines it, and the domain import; the function's attribute defaults
// raise the model to IR version 9.
func ExampleImportFunction() {
	m := &onnxpb.ModelProto{
		IrVersion:   proto.Int64(8),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(17)}},
		Graph:       &onnxpb.GraphProto{Name: proto.String("g")},
	}
	node := ops.NewPerformerNode("layer0/PerformerAttention",
		[]string{"q", "k", "v", "layer0/omega", "mask_bias"}, "attn",
		ops.PerformerAttrs{Scale: 0.125, Kernel: ops.KernelPositive})
	m.Graph.Node = append(m.Graph.Node, node)
	fn, err := ops.PerformerFunction(ops.KernelPositive, 17)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := ops.ImportFunction(m, fn); err != nil {
		fmt.Println(err)
		return
	}
	f := m.Functions[0]
	fmt.Println(f.GetDomain(), f.GetName(), f.Input, f.Attribute)
	var defaults []string // attributes with a default, which nodes may leave off
	for _, a := range f.AttributeProto {
		defaults = append(defaults, a.GetName())
	}
	fmt.Println("defaults:", defaults, "node attributes:", len(node.Attribute))
	for _, op := range m.OpsetImport {
		fmt.Printf("import %q v%d\n", op.GetDomain(), op.GetVersion())
	}
	fmt.Println("ir_version", m.GetIrVersion())
	// Output:
	// ai.linearize PerformerAttention [Q K V Omega key_bias] [scale]
	// defaults: [kernel epsilon center features causal chunk] node attributes: 1
	// import "" v17
	// import "ai.linearize" v1
	// ir_version 9
}
