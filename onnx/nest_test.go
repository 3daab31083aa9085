package onnx

import (
	"strconv"
	"testing"

	"github.com/linearize/linearize/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// nestedIf returns a valid model whose graph is an If nested depth deep:
// each then_branch holds the next If, each else_branch a Constant, and
// every level reads the main graph's input cond.
func nestedIf(depth int) *onnxpb.ModelProto {
	constGraph := func(name string) *onnxpb.GraphProto {
		v, err := EncodeTensor("v", NewFloat([]int{1}, []float32{1}))
		if err != nil {
			panic(err)
		}
		typ := onnxpb.AttributeProto_TENSOR
		n := &onnxpb.NodeProto{OpType: proto.String("Constant"), Output: []string{name + "_y"},
			Attribute: []*onnxpb.AttributeProto{{Name: proto.String("value"), Type: &typ, T: v}}}
		return &onnxpb.GraphProto{Name: proto.String(name), Node: []*onnxpb.NodeProto{n},
			Output: []*onnxpb.ValueInfoProto{MakeValueInfo(name+"_y", Float, []Dim{{Value: 1}})}}
	}
	g := constGraph("leaf")
	gt := onnxpb.AttributeProto_GRAPH
	for i := range depth {
		s := strconv.Itoa(i)
		n := &onnxpb.NodeProto{Name: proto.String("if" + s), OpType: proto.String("If"), Input: []string{"cond"}, Output: []string{"o" + s},
			Attribute: []*onnxpb.AttributeProto{
				{Name: proto.String("then_branch"), Type: &gt, G: g},
				{Name: proto.String("else_branch"), Type: &gt, G: constGraph("e" + s)},
			}}
		g = &onnxpb.GraphProto{Name: proto.String("g" + s), Node: []*onnxpb.NodeProto{n},
			Output: []*onnxpb.ValueInfoProto{MakeValueInfo("o"+s, Float, []Dim{{Value: 1}})}}
	}
	g.Input = []*onnxpb.ValueInfoProto{MakeValueInfo("cond", Bool, []Dim{})}
	return &onnxpb.ModelProto{IrVersion: proto.Int64(8),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(17)}}, Graph: g}
}

// TestNestedGraphWalksLinear: validating a nest of If subgraphs, and
// sorting every level of it with one Refs, costs work linear in the depth.
// The work is counted as heap allocations (exact and machine-independent;
// the quadratic walks this replaced allocated a map per subgraph per
// enclosing level: 1.07 million allocations at depth 1000 against 16
// thousand now). Doubling the depth must at most about double the count,
// and each level must cost a bounded number of allocations.
func TestNestedGraphWalksLinear(t *testing.T) {
	walks := []struct {
		name string
		fn   func(m *onnxpb.ModelProto)
	}{
		{"Validate", func(m *onnxpb.ModelProto) {
			if err := Validate(m); err != nil {
				t.Fatal(err)
			}
		}},
		{"Refs.TopoSort at every level", func(m *onnxpb.ModelProto) {
			r := NewRefs()
			for g := m.Graph; g != nil; {
				if _, err := r.TopoSort(g); err != nil {
					t.Fatal(err)
				}
				if g.Node[0].GetOpType() != "If" {
					break
				}
				if ins := r.NodeInputs(g.Node[0]); len(ins) != 1 || ins[0] != "cond" {
					t.Fatalf("inputs of %s: %v, want [cond]", g.Node[0].GetName(), ins)
				}
				g = g.Node[0].Attribute[0].G
			}
		}},
	}
	const depth, perLevel = 1000, 40
	for _, w := range walks {
		small, large := nestedIf(depth), nestedIf(2*depth)
		a := testing.AllocsPerRun(1, func() { w.fn(small) })
		b := testing.AllocsPerRun(1, func() { w.fn(large) })
		t.Logf("%s: %.0f allocations at depth %d, %.0f at %d", w.name, a, depth, b, 2*depth)
		if b > 2.2*a || b > perLevel*2*depth {
			t.Errorf("%s: %.0f allocations at depth %d, %.0f at %d: not linear in the depth (want at most 2.2× and %d per level)", w.name, a, depth, b, 2*depth, perLevel)
		}
	}
}
