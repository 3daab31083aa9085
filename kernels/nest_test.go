package kernels_test

import (
	"strconv"
	"testing"

	"github.com/linearize/linearize/kernels"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// ifNest returns an If node whose then_branch nests depth-1 more Ifs, the
// innermost then_branch and every else_branch a one-element
// ConstantOfShape; every If reads cond from the outermost scope.
func ifNest(depth int) *onnxpb.NodeProto {
	g := constGraph([]int64{1}, false)
	var n *onnxpb.NodeProto
	for i := range depth {
		n = kNode("If", 1, graphAttr("then_branch", g), graphAttr("else_branch", constGraph([]int64{1}, false)))
		n.Name, n.Input, n.Output = strPtr("if"+strconv.Itoa(i)), []string{"cond"}, []string{"y"}
		name := "g" + strconv.Itoa(i)
		g = &onnxpb.GraphProto{Name: &name, Node: []*onnxpb.NodeProto{n}, Output: []*onnxpb.ValueInfoProto{onnx.MakeValueInfo("y", onnx.Float, nil)}}
	}
	return n
}

// TestCompileNestedSubgraphsLinear: preparing a nest of If subgraphs (as
// the native backend does when it opens a model) and running it cost work
// linear in the depth, counted as heap allocations (exact, independent of
// the machine); each level used to sort its subtree again, quadratically.
// The run's result is the innermost constant, 0.
func TestCompileNestedSubgraphsLinear(t *testing.T) {
	opset := func(string) int64 { return 17 }
	cond := &onnx.Tensor{DType: onnx.Bool, Shape: []int{}, Data: []bool{true}}
	count := func(depth int) float64 {
		n := ifNest(depth)
		return testing.AllocsPerRun(1, func() {
			sgs, err := kernels.CompileAttributes(n, opset)
			if err != nil || len(sgs) != 2 {
				t.Fatalf("depth %d: %d subgraphs, %v", depth, len(sgs), err)
			}
			k, _ := kernels.Lookup("", "If", 17)
			scope := func(name string) (*onnx.Tensor, bool) { return cond, name == "cond" }
			out, err := k(&kernels.Context{Node: n, Opset: 17, Scope: scope, Subgraphs: sgs}, []*onnx.Tensor{cond})
			if err != nil || len(out) != 1 || out[0].Floats()[0] != 0 {
				t.Fatalf("depth %d: run gave %v, %v; want the innermost constant 0", depth, out, err)
			}
		})
	}
	const depth, perLevel = 500, 80
	a, b := count(depth), count(2*depth)
	t.Logf("%.0f allocations at depth %d, %.0f at %d", a, depth, b, 2*depth)
	if b > 2.2*a || b > perLevel*2*depth {
		t.Errorf("%.0f allocations at depth %d, %.0f at %d: not linear in the depth (want at most 2.2× and %d per level)", a, depth, b, 2*depth, perLevel)
	}
}
