package kernels_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/linearize/linearize/internal/rusage"
	"github.com/linearize/linearize/kernels"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// withBudget sets the tensor budget to n bytes for the rest of the test.
func withBudget(t *testing.T, n int64) {
	prev := kernels.SetMaxTensorBytes(n)
	t.Cleanup(func() { kernels.SetMaxTensorBytes(prev) })
}

func i64s(v ...int64) *onnx.Tensor { return onnx.NewInt64([]int{len(v)}, v) }
func f32s(shape []int) *onnx.Tensor {
	t, _ := onnx.NewZeros(onnx.Float, shape)
	return t
}

// graphAttr returns a graph attribute named name.
func graphAttr(name string, g *onnxpb.GraphProto) *onnxpb.AttributeProto {
	typ := onnxpb.AttributeProto_GRAPH
	return &onnxpb.AttributeProto{Name: &name, Type: &typ, G: g}
}

// constGraph is a subgraph whose one output y is ConstantOfShape(shape)
// (float32 zeros); with loop, it takes Loop's (iteration, cond) and
// returns cond first.
func constGraph(shape []int64, loop bool) *onnxpb.GraphProto {
	name, shapeName := "g", "shape"
	st, err := onnx.EncodeTensor(shapeName, i64s(shape...))
	if err != nil {
		panic(err)
	}
	cos := kNode("ConstantOfShape", 1)
	cos.Name, cos.Input, cos.Output = strPtr("inner_cos"), []string{shapeName}, []string{"y"}
	g := &onnxpb.GraphProto{Name: &name, Node: []*onnxpb.NodeProto{cos}, Initializer: []*onnxpb.TensorProto{st}}
	if loop {
		g.Input = []*onnxpb.ValueInfoProto{onnx.MakeValueInfo("i", onnx.Int64, nil), onnx.MakeValueInfo("c", onnx.Bool, nil)}
		id := kNode("Identity", 1)
		id.Input, id.Output = []string{"c"}, []string{"c_out"}
		g.Node = append(g.Node, id)
		g.Output = append(g.Output, onnx.MakeValueInfo("c_out", onnx.Bool, nil))
	}
	g.Output = append(g.Output, onnx.MakeValueInfo("y", onnx.Float, nil))
	return g
}

func strPtr(s string) *string { return &s }

// TestTensorBudgetRefusesBeforeAllocating: with a budget of 4000 bytes,
// every op whose output size its values (or broadcasting) decide computes
// an output of exactly 4000 bytes and refuses one a little larger, with an
// error that wraps kernels.ErrTensorBudget and names the node and the shape.
// The sizes are closed forms: elements × element size.
func TestTensorBudgetRefusesBeforeAllocating(t *testing.T) {
	withBudget(t, 4000)
	zero := onnx.NewInt64([]int{}, []int64{0})
	pads := func(after int64) *onnx.Tensor { return i64s(0, after) }
	cond := func(shape []int) *onnx.Tensor {
		return &onnx.Tensor{DType: onnx.Bool, Shape: shape, Data: make([]bool, onnx.NumElements(shape))}
	}
	idx := func(n int) *onnx.Tensor { return onnx.NewInt64([]int{n}, make([]int64, n)) }
	cases := []struct {
		name     string
		op       string
		attrs    []*onnxpb.AttributeProto
		ok, over []*onnx.Tensor
		okShape  []int
		inWords  string // in the refusal: what and the shape that did not fit
	}{
		{"ConstantOfShape", "ConstantOfShape", nil,
			[]*onnx.Tensor{i64s(10, 100)}, []*onnx.Tensor{i64s(10, 101)}, []int{10, 100}, "output float32[10 101]"},
		{"Expand", "Expand", nil,
			[]*onnx.Tensor{f32s([]int{1}), i64s(1000)}, []*onnx.Tensor{f32s([]int{1}), i64s(1001)}, []int{1000}, "output float32[1001]"},
		{"Tile", "Tile", nil,
			[]*onnx.Tensor{f32s([]int{1, 1}), i64s(10, 100)}, []*onnx.Tensor{f32s([]int{1, 1}), i64s(10, 101)}, []int{10, 100}, "output float32[10 101]"},
		{"Range int64", "Range", nil,
			[]*onnx.Tensor{zero, onnx.NewInt64([]int{}, []int64{500}), onnx.NewInt64([]int{}, []int64{1})},
			[]*onnx.Tensor{zero, onnx.NewInt64([]int{}, []int64{501}), onnx.NewInt64([]int{}, []int64{1})}, []int{500}, "output int64[501]"},
		{"Range float", "Range", nil,
			[]*onnx.Tensor{onnx.NewFloat([]int{}, []float32{0}), onnx.NewFloat([]int{}, []float32{500}), onnx.NewFloat([]int{}, []float32{0.5})},
			[]*onnx.Tensor{onnx.NewFloat([]int{}, []float32{0}), onnx.NewFloat([]int{}, []float32{500.5}), onnx.NewFloat([]int{}, []float32{0.5})}, []int{1000}, "output float32[1001]"},
		{"Pad constant", "Pad", nil,
			[]*onnx.Tensor{f32s([]int{1}), pads(999)}, []*onnx.Tensor{f32s([]int{1}), pads(1000)}, []int{1000}, "output float32[1001]"},
		// reflect builds an index of 8 bytes per output element: 500 fit.
		{"Pad reflect index", "Pad", []*onnxpb.AttributeProto{kAttr("mode", "reflect")},
			[]*onnx.Tensor{f32s([]int{2}), pads(498)}, []*onnx.Tensor{f32s([]int{2}), pads(499)}, []int{500}, "index of 501 elements"},
		{"OneHot", "OneHot", nil,
			[]*onnx.Tensor{idx(10), onnx.NewInt64([]int{}, []int64{100}), f32s([]int{2})},
			[]*onnx.Tensor{idx(10), onnx.NewInt64([]int{}, []int64{101}), f32s([]int{2})}, []int{10, 100}, "output float32[10 101]"},
		// Resize interpolates in float64: 500 float32 outputs need 4000
		// bytes of buffer, 501 more than the budget.
		{"Resize", "Resize", []*onnxpb.AttributeProto{kAttr("mode", "linear")},
			[]*onnx.Tensor{f32s([]int{1, 2}), nil, nil, i64s(1, 500)}, []*onnx.Tensor{f32s([]int{1, 2}), nil, nil, i64s(1, 501)}, []int{1, 500}, "interpolation buffer float64[1 501]"},
		{"Gather", "Gather", nil,
			[]*onnx.Tensor{f32s([]int{1, 100}), idx(10)}, []*onnx.Tensor{f32s([]int{1, 100}), idx(11)}, []int{10, 100}, "output float32[11 100]"},
		{"Add broadcast", "Add", nil,
			[]*onnx.Tensor{f32s([]int{10, 1}), f32s([]int{1, 100})}, []*onnx.Tensor{f32s([]int{10, 1}), f32s([]int{1, 101})}, []int{10, 100}, "broadcast output float32[10 101]"},
		{"Equal broadcast (bool)", "Equal", nil,
			[]*onnx.Tensor{f32s([]int{40, 1}), f32s([]int{1, 100})}, []*onnx.Tensor{f32s([]int{40, 1}), f32s([]int{1, 101})}, []int{40, 100}, "broadcast output bool[40 101]"},
		{"Max variadic", "Max", nil,
			[]*onnx.Tensor{f32s([]int{10, 1}), f32s([]int{1, 100})}, []*onnx.Tensor{f32s([]int{10, 1}), f32s([]int{1, 101})}, []int{10, 100}, "broadcast output float32[10 101]"},
		{"Where", "Where", nil,
			[]*onnx.Tensor{cond([]int{10, 1}), f32s([]int{1, 100}), f32s([]int{1})}, []*onnx.Tensor{cond([]int{10, 1}), f32s([]int{1, 101}), f32s([]int{1})}, []int{10, 100}, "output float32[10 101]"},
		{"MatMul batch broadcast", "MatMul", nil,
			[]*onnx.Tensor{f32s([]int{10, 1, 2, 3}), f32s([]int{1, 25, 3, 2})}, []*onnx.Tensor{f32s([]int{10, 1, 2, 3}), f32s([]int{1, 26, 3, 2})}, []int{10, 25, 2, 2}, "output float32[10 26 2 2]"},
		// An empty product still needs 8 bytes of offsets per batch entry
		// and operand.
		{"MatMul batch offsets", "MatMul", nil,
			[]*onnx.Tensor{f32s([]int{500, 0, 2}), f32s([]int{2, 3})}, []*onnx.Tensor{f32s([]int{501, 0, 2}), f32s([]int{2, 3})}, []int{500, 0, 3}, "batch offsets of 501 elements"},
		{"Einsum outer product", "Einsum", []*onnxpb.AttributeProto{kAttr("equation", "i,j->ij")},
			[]*onnx.Tensor{f32s([]int{10}), f32s([]int{100})}, []*onnx.Tensor{f32s([]int{10}), f32s([]int{101})}, []int{10, 100}, "output float32[10 101]"},
		// The general path accumulates in float64: 8 bytes per element.
		{"Einsum accumulator", "Einsum", []*onnxpb.AttributeProto{kAttr("equation", "ii,j->ij")},
			[]*onnx.Tensor{f32s([]int{10, 10}), f32s([]int{50})}, []*onnx.Tensor{f32s([]int{10, 10}), f32s([]int{51})}, []int{10, 50}, "accumulator float64[10 51]"},
		{"Loop scan output", "Loop", []*onnxpb.AttributeProto{graphAttr("body", constGraph([]int64{100}, true))},
			[]*onnx.Tensor{onnx.NewInt64([]int{}, []int64{10}), nil}, []*onnx.Tensor{onnx.NewInt64([]int{}, []int64{11}), nil}, []int{10, 100}, "stacked scan output float32[11 100]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := kNode(c.op, 1, c.attrs...)
			n.Name = strPtr("node_" + c.op)
			out, err := kTry(n, 18, c.ok...)
			if err != nil {
				t.Fatalf("within the budget: %v", err)
			}
			if got := out[0].Shape; !equalInts(got, c.okShape) {
				t.Fatalf("within the budget: shape %v, want %v", got, c.okShape)
			}
			_, err = kTry(n, 18, c.over...)
			if !errors.Is(err, kernels.ErrTensorBudget) {
				t.Fatalf("over the budget: got %v, want an error wrapping ErrTensorBudget", err)
			}
			for _, w := range []string{`node "node_` + c.op + `"`, c.inWords, "4000 bytes", kernels.MaxTensorBytesEnv} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestAttentionBudgetRefusesBeforeAllocating checks the com.microsoft
// attention kernels' buffers that can exceed every input: Attention's
// packed QKV projection [B, S, Hq+Hk+Hv] (here 1×S×300 float32, 1200·S
// bytes, from an input [1, S, 1] and weights [1, 300]), and
// MultiHeadAttention's output [B, S, N·dv] (here 1×S×400, 1600·S bytes,
// for a value [1, 1, 400] of 1600 bytes). With a budget of 4000 bytes,
// S = 3 fits the projection and S = 2 the output; one more does not.
func TestAttentionBudgetRefusesBeforeAllocating(t *testing.T) {
	withBudget(t, 4000)
	heads := kAttr("num_heads", 1)
	for _, c := range []struct {
		op       string
		ok, over []*onnx.Tensor
		okShape  []int
		inWords  string
	}{
		{"Attention",
			[]*onnx.Tensor{f32s([]int{1, 3, 1}), f32s([]int{1, 300})}, []*onnx.Tensor{f32s([]int{1, 4, 1}), f32s([]int{1, 300})},
			[]int{1, 3, 100}, "QKV projection float32[1 4 300]"},
		{"MultiHeadAttention",
			[]*onnx.Tensor{f32s([]int{1, 2, 4}), f32s([]int{1, 1, 4}), f32s([]int{1, 1, 400})},
			[]*onnx.Tensor{f32s([]int{1, 3, 4}), f32s([]int{1, 1, 4}), f32s([]int{1, 1, 400})},
			[]int{1, 2, 400}, "output float32[1 3 400]"},
	} {
		t.Run(c.op, func(t *testing.T) {
			k, err := kernels.Lookup("com.microsoft", c.op, 1)
			if err != nil {
				t.Fatal(err)
			}
			n := kNode(c.op, 1, heads)
			n.Name = strPtr("node_" + c.op)
			out, err := k(&kernels.Context{Node: n, Threads: 2}, c.ok)
			if err != nil {
				t.Fatalf("within the budget: %v", err)
			}
			if got := out[0].Shape; !equalInts(got, c.okShape) {
				t.Fatalf("within the budget: shape %v, want %v", got, c.okShape)
			}
			_, err = k(&kernels.Context{Node: n, Threads: 2}, c.over)
			if !errors.Is(err, kernels.ErrTensorBudget) {
				t.Fatalf("over the budget: got %v, want an error wrapping ErrTensorBudget", err)
			}
			for _, w := range []string{`node "node_` + c.op + `"`, c.inWords, "4000 bytes"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestTensorBudgetThroughSubgraphs: a refusal inside an If branch keeps
// wrapping ErrTensorBudget through the If node's error, and names both the
// If node and the inner node.
func TestTensorBudgetThroughSubgraphs(t *testing.T) {
	withBudget(t, 4000)
	n := kNode("If", 1, graphAttr("then_branch", constGraph([]int64{10, 101}, false)), graphAttr("else_branch", constGraph([]int64{1}, false)))
	n.Name = strPtr("outer_if")
	yes := &onnx.Tensor{DType: onnx.Bool, Shape: []int{}, Data: []bool{true}}
	no := &onnx.Tensor{DType: onnx.Bool, Shape: []int{}, Data: []bool{false}}
	if _, err := kTry(n, 18, no); err != nil {
		t.Fatalf("else branch within the budget: %v", err)
	}
	_, err := kTry(n, 18, yes)
	if !errors.Is(err, kernels.ErrTensorBudget) {
		t.Fatalf("then branch over the budget: got %v, want an error wrapping ErrTensorBudget", err)
	}
	for _, w := range []string{"outer_if", "inner_cos", "float32[10 101]"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not name %q", err, w)
		}
	}
}

// TestMaxTensorBytesSettings: the environment variable, SetMaxTensorBytes
// and the machine's default.
func TestMaxTensorBytesSettings(t *testing.T) {
	for _, c := range []struct {
		env  string
		want int64 // 0: an error
	}{
		{"536870912", 536870912},
		{"2G", 2 << 30},
		{"2GiB", 2 << 30},
		{"512m", 512 << 20},
		{"64KB", 64 << 10},
		{" 1T ", 1 << 40},
		{"0", 0},
		{"-5", 0},
		{"lots", 0},
		{"9999999T", 0}, // overflows int64
		{"1.5G", 0},
	} {
		t.Setenv(kernels.MaxTensorBytesEnv, c.env)
		got, err := kernels.DefaultMaxTensorBytes()
		if c.want == 0 {
			if err == nil || !strings.Contains(err.Error(), kernels.MaxTensorBytesEnv) {
				t.Errorf("%s=%q: got %d, %v; want an error naming the variable", kernels.MaxTensorBytesEnv, c.env, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s=%q: got %d, %v; want %d", kernels.MaxTensorBytesEnv, c.env, got, err, c.want)
		}
	}
	t.Setenv(kernels.MaxTensorBytesEnv, "")
	got, err := kernels.DefaultMaxTensorBytes()
	if mem := rusage.Memory(); err != nil || (mem > 0 && got != mem/4) {
		t.Errorf("default with the variable unset: %d, %v; want a quarter of %d", got, err, mem)
	}
	prev := kernels.SetMaxTensorBytes(12345)
	if kernels.MaxTensorBytes() != 12345 {
		t.Errorf("after SetMaxTensorBytes(12345): %d", kernels.MaxTensorBytes())
	}
	if back := kernels.SetMaxTensorBytes(prev); back != 12345 {
		t.Errorf("SetMaxTensorBytes returned %d, want the 12345 set before", back)
	}
}
