package infer

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

func graphAttr(name string, g *onnxpb.GraphProto) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: ntStr(name), Type: onnxpb.AttributeProto_GRAPH.Enum(), G: g}
}

func intAttr(name string, v int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: ntStr(name), Type: onnxpb.AttributeProto_INT.Enum(), I: &v}
}

func vi(name string, dt onnx.DataType) *onnxpb.ValueInfoProto {
	return onnx.MakeValueInfo(name, dt, nil)
}

func constTensor(name string, t *onnx.Tensor) *onnxpb.TensorProto {
	tp, err := onnx.EncodeTensor(name, t)
	if err != nil {
		panic(err)
	}
	return tp
}

// controlModel builds a graph whose If and Loop subgraphs read values of
// the enclosing scopes: the main graph's inputs (x, limit) and a value a
// main-graph node computes (w), and, in an If nested in the Loop body, the
// body's own values (acc, i). M and cond are the Loop's optional inputs.
func controlModel(withM, withCond bool) *onnxpb.ModelProto {
	scalarF := func(v float32) *onnx.Tensor { return onnx.NewFloat([]int{}, []float32{v}) }
	// If(c): x + w, else w − 1.5 (a subgraph initializer).
	thenG := &onnxpb.GraphProto{Name: ntStr("then"),
		Node:   []*onnxpb.NodeProto{ntNode("", "Add", []string{"x", "w"}, []string{"t_out"})},
		Output: []*onnxpb.ValueInfoProto{vi("t_out", onnx.Float)}}
	elseG := &onnxpb.GraphProto{Name: ntStr("else"),
		Initializer: []*onnxpb.TensorProto{constTensor("k", scalarF(1.5))},
		Node:        []*onnxpb.NodeProto{ntNode("", "Sub", []string{"w", "k"}, []string{"e_out"})},
		Output:      []*onnxpb.ValueInfoProto{vi("e_out", onnx.Float)}}
	// Loop body (i, cond, acc) -> (cond', acc', scan):
	// acc' = (i even ? acc + w : acc − x) + i;  cond' = sum(acc') < limit;
	// scan = acc'·i.
	evenThen := &onnxpb.GraphProto{Name: ntStr("even"),
		Node:   []*onnxpb.NodeProto{ntNode("", "Add", []string{"acc", "w"}, []string{"ev"})},
		Output: []*onnxpb.ValueInfoProto{vi("ev", onnx.Float)}}
	evenElse := &onnxpb.GraphProto{Name: ntStr("odd"),
		Node:   []*onnxpb.NodeProto{ntNode("", "Sub", []string{"acc", "x"}, []string{"od"})},
		Output: []*onnxpb.ValueInfoProto{vi("od", onnx.Float)}}
	body := &onnxpb.GraphProto{Name: ntStr("body"),
		Initializer: []*onnxpb.TensorProto{constTensor("two", onnx.NewInt64([]int{}, []int64{2})), constTensor("zero", onnx.NewInt64([]int{}, []int64{0}))},
		Input:       []*onnxpb.ValueInfoProto{onnx.MakeValueInfo("i", onnx.Int64, []onnx.Dim{}), onnx.MakeValueInfo("cond_in", onnx.Bool, []onnx.Dim{}), vi("acc", onnx.Float)},
		Node: []*onnxpb.NodeProto{
			ntNode("", "Cast", []string{"i"}, []string{"i_f"}, intAttr("to", int64(onnx.Float))),
			ntNode("", "Mod", []string{"i", "two"}, []string{"par"}),
			ntNode("", "Equal", []string{"par", "zero"}, []string{"even"}),
			ntNode("", "If", []string{"even"}, []string{"step"}, graphAttr("then_branch", evenThen), graphAttr("else_branch", evenElse)),
			ntNode("", "Add", []string{"step", "i_f"}, []string{"acc2"}),
			ntNode("", "ReduceSum", []string{"acc2"}, []string{"s"}, intAttr("keepdims", 0)),
			ntNode("", "Less", []string{"s", "limit"}, []string{"cond_out"}),
			ntNode("", "Mul", []string{"acc2", "i_f"}, []string{"scan"}),
		},
		Output: []*onnxpb.ValueInfoProto{vi("cond_out", onnx.Bool), vi("acc2", onnx.Float), vi("scan", onnx.Float)},
	}
	m, cond := "", ""
	if withM {
		m = "n"
	}
	if withCond {
		cond = "go"
	}
	nodes := []*onnxpb.NodeProto{
		ntNode("", "Mul", []string{"x", "x"}, []string{"w"}),
		ntNode("", "If", []string{"c"}, []string{"y_if"}, graphAttr("then_branch", thenG), graphAttr("else_branch", elseG)),
		ntNode("", "Loop", []string{m, cond, "x"}, []string{"y_loop", "y_scan"}, graphAttr("body", body)),
	}
	feeds := map[string]*onnx.Tensor{
		"x":     onnx.NewFloat([]int{2, 3}, make([]float32, 6)),
		"c":     {DType: onnx.Bool, Shape: []int{}, Data: []bool{true}},
		"limit": scalarF(0),
		"n":     onnx.NewInt64([]int{}, []int64{0}),
		"go":    {DType: onnx.Bool, Shape: []int{}, Data: []bool{true}},
	}
	order := []string{"x", "c", "limit"}
	if withM {
		order = append(order, "n")
	}
	if withCond {
		order = append(order, "go")
	}
	return ntModel(nodes, feeds, order, "y_if", "y_loop", "y_scan")
}

// TestNativeControlFlowVsORT runs If and Loop (nested, with outer-scope
// values, with and without trip count and condition, zero to several
// iterations, early exit) in both backends on random inputs.
func TestNativeControlFlowVsORT(t *testing.T) {
	needORT(t)
	rng := rand.New(rand.NewPCG(14, 14))
	for _, form := range []struct {
		name           string
		withM, withCon bool
	}{{"M and cond", true, true}, {"M only", true, false}, {"cond only", false, true}} {
		m := controlModel(form.withM, form.withCon)
		for _, c := range []struct {
			c      bool
			n      int64
			limit  float32
			goCond bool
		}{{true, 0, 100, true}, {false, 1, 100, true}, {true, 5, 100, true}, {false, 6, 4, true}, {true, 4, 100, false}, {false, 3, -100, true}} {
			if !form.withM && c.limit > 50 {
				c.limit = 20 // the condition must end the loop
			}
			feeds := map[string]*onnx.Tensor{
				"x":     ntRandn(rng, 1, 2, 3),
				"c":     {DType: onnx.Bool, Shape: []int{}, Data: []bool{c.c}},
				"limit": onnx.NewFloat([]int{}, []float32{c.limit}),
			}
			if form.withM {
				feeds["n"] = onnx.NewInt64([]int{}, []int64{c.n})
			}
			if form.withCon {
				feeds["go"] = &onnx.Tensor{DType: onnx.Bool, Shape: []int{}, Data: []bool{c.goCond}}
			}
			nat, err := NewNativeSession(m, Options{Threads: 1})
			if err != nil {
				t.Fatalf("%s: native: %v", form.name, err)
			}
			ref, err := NewORTSession(m, Options{Threads: 1})
			if err != nil {
				t.Fatalf("%s: onnxruntime: %v", form.name, err)
			}
			want, err := ref.Run(feeds)
			if err != nil {
				t.Fatalf("%s %+v: onnxruntime: %v", form.name, c, err)
			}
			got, err := nat.Run(feeds)
			if err != nil {
				t.Fatalf("%s %+v: native: %v", form.name, c, err)
			}
			for _, o := range []string{"y_if", "y_loop", "y_scan"} {
				d := CompareTensors(got[o], want[o])
				if !d.OK(1e-6) {
					t.Errorf("%s %+v: %s: native %v vs onnxruntime %v: %v", form.name, c, o, got[o].Shape, want[o].Shape, d)
				}
			}
			nat.Close()
			ref.Close()
		}
	}
}

// TestNativeControlFlowErrors: a subgraph op without a kernel fails at
// session creation, naming the node; a name no scope defines too.
func TestNativeControlFlowErrors(t *testing.T) {
	m := controlModel(true, true)
	loop := m.Graph.Node[2]
	loop.Attribute[0].G.Node[1].OpType = ntStr("NoSuchOp")
	if _, err := NewNativeSession(m, Options{}); err == nil || !strings.Contains(err.Error(), "NoSuchOp") || !strings.Contains(err.Error(), "Loop") {
		t.Errorf("unsupported op in a subgraph: %v", err)
	}
	m = controlModel(true, true)
	m.Graph.Node[1].Attribute[0].G.Node[0].Input[1] = "nowhere"
	if _, err := NewNativeSession(m, Options{}); err == nil || !strings.Contains(err.Error(), "nowhere") {
		t.Errorf("undefined outer name: %v", err)
	}
}
