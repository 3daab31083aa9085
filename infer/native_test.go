package infer

import (
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/linearize/linearize/internal/nativeprof"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// Helpers to build small models in tests.

func ntStr(s string) *string { return &s }

func ntAttrI(name string, v int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: ntStr(name), Type: onnxpb.AttributeProto_INT.Enum(), I: &v}
}

func ntAttrF(name string, v float32) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: ntStr(name), Type: onnxpb.AttributeProto_FLOAT.Enum(), F: &v}
}

func ntAttrInts(name string, v ...int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: ntStr(name), Type: onnxpb.AttributeProto_INTS.Enum(), Ints: v}
}

func ntNode(domain, op string, in, out []string, attrs ...*onnxpb.AttributeProto) *onnxpb.NodeProto {
	return &onnxpb.NodeProto{OpType: ntStr(op), Domain: ntStr(domain), Name: ntStr(op + "_" + out[0]), Input: in, Output: out, Attribute: attrs}
}

// ntModel wraps nodes into a model whose graph inputs are feeds (with the
// feeds' exact shapes) and whose outputs are float tensors of unknown shape.
func ntModel(nodes []*onnxpb.NodeProto, feeds map[string]*onnx.Tensor, inputOrder []string, outputs ...string) *onnxpb.ModelProto {
	ir := int64(8)
	g := &onnxpb.GraphProto{Name: ntStr("test"), Node: nodes}
	for _, name := range inputOrder {
		t := feeds[name]
		dims := make([]onnx.Dim, len(t.Shape))
		for i, d := range t.Shape {
			dims[i] = onnx.Dim{Value: int64(d)}
		}
		g.Input = append(g.Input, onnx.MakeValueInfo(name, t.DType, dims))
	}
	for _, o := range outputs {
		g.Output = append(g.Output, onnx.MakeValueInfo(o, onnx.Float, nil))
	}
	v17, v1 := int64(17), int64(1)
	return &onnxpb.ModelProto{
		IrVersion: &ir,
		OpsetImport: []*onnxpb.OperatorSetIdProto{
			{Domain: ntStr(""), Version: &v17},
			{Domain: ntStr("com.microsoft"), Version: &v1},
		},
		Graph: g,
	}
}

func ntRandn(rng *rand.Rand, scale float32, shape ...int) *onnx.Tensor {
	d := make([]float32, onnx.NumElements(shape))
	for i := range d {
		d[i] = scale * float32(rng.NormFloat64())
	}
	return onnx.NewFloat(shape, d)
}

func ntInt32(shape []int, v ...int32) *onnx.Tensor {
	return &onnx.Tensor{DType: onnx.Int32, Shape: shape, Data: v}
}

// agree runs m in both backends and requires every output to agree within
// tol relative to the output's scale.
func agree(t *testing.T, name string, m *onnxpb.ModelProto, feeds map[string]*onnx.Tensor, tol float64, threads int) {
	t.Helper()
	nat, err := NewNativeSession(m, Options{Threads: threads})
	if err != nil {
		t.Fatalf("%s: native: %v", name, err)
	}
	defer nat.Close()
	ref, err := NewORTSession(m, Options{Threads: threads})
	if err != nil {
		t.Fatalf("%s: ort: %v", name, err)
	}
	defer ref.Close()
	diffs, err := CompareSessions(nat, ref, feeds)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	for _, d := range diffs {
		if !d.OK(tol) || d.N == 0 {
			t.Errorf("%s: output %q: %v (tolerance %g)", name, d.Name, d.Diff, tol)
		} else {
			t.Logf("%s: output %q: %v", name, d.Name, d.Diff)
		}
	}
}

func TestCompareTensors(t *testing.T) {
	f := func(shape []int, v ...float32) *onnx.Tensor { return onnx.NewFloat(shape, v) }
	nan := float32(math.NaN())
	for _, c := range []struct {
		name          string
		a, b          *onnx.Tensor
		maxAbs, scale float64
		cos           float64
		nanMis        int
		mismatch      bool
	}{
		{"equal", f([]int{2}, 1, -2), f([]int{2}, 1, -2), 0, 2, 1, 0, false},
		{"offset", f([]int{2}, 1.5, -2), f([]int{2}, 1, -2), 0.5, 2, (1.5 + 4) / math.Sqrt(1.5*1.5+4) / math.Sqrt(5), 0, false},
		{"opposite", f([]int{1}, -3), f([]int{1}, 3), 6, 3, -1, 0, false},
		{"zeros", f([]int{2}, 0, 0), f([]int{2}, 0, 0), 0, 0, 1, 0, false},
		{"nan", f([]int{2}, nan, 1), f([]int{2}, 0, 1), 0, 1, 1, 1, false},
		{"shape", f([]int{2}, 1, 2), f([]int{2, 1}, 1, 2), 0, 0, 0, 0, true},
		{"type", onnx.NewInt64([]int{1}, []int64{1}), f([]int{1}, 1), 0, 0, 0, 0, true},
	} {
		d := CompareTensors(c.a, c.b)
		if (d.Mismatch != "") != c.mismatch {
			t.Errorf("%s: mismatch %q", c.name, d.Mismatch)
			continue
		}
		if c.mismatch {
			continue
		}
		if math.Abs(d.MaxAbs-c.maxAbs) > 1e-6 || math.Abs(d.Scale-c.scale) > 1e-6 || math.Abs(d.Cosine-c.cos) > 1e-6 || d.NaNMismatch != c.nanMis {
			t.Errorf("%s: got %+v, want max abs %g, scale %g, cosine %g, NaN mismatches %d", c.name, d, c.maxAbs, c.scale, c.cos, c.nanMis)
		}
	}
}

// TestNativeContribVsORT checks every com.microsoft kernel against
// onnxruntime on one-node models with seeded random inputs.
func TestNativeContribVsORT(t *testing.T) {
	needORT(t)
	const ms = "com.microsoft"
	rng := rand.New(rand.NewPCG(7, 11))
	type tc struct {
		name  string
		nodes []*onnxpb.NodeProto
		order []string
		feeds map[string]*onnx.Tensor
		outs  []string
	}
	var cases []tc
	add := func(name string, n *onnxpb.NodeProto, order []string, feeds map[string]*onnx.Tensor) {
		cases = append(cases, tc{name, []*onnxpb.NodeProto{n}, order, feeds, []string{n.Output[0]}})
	}
	// Gelu family.
	x := ntRandn(rng, 2, 2, 5, 12)
	bias12 := ntRandn(rng, 1, 12)
	add("Gelu", ntNode(ms, "Gelu", []string{"x"}, []string{"y"}), []string{"x"}, map[string]*onnx.Tensor{"x": x})
	add("BiasGelu", ntNode(ms, "BiasGelu", []string{"x", "b"}, []string{"y"}), []string{"x", "b"}, map[string]*onnx.Tensor{"x": x, "b": bias12})
	add("FastGelu", ntNode(ms, "FastGelu", []string{"x"}, []string{"y"}), []string{"x"}, map[string]*onnx.Tensor{"x": x})
	add("FastGelu/bias", ntNode(ms, "FastGelu", []string{"x", "b"}, []string{"y"}), []string{"x", "b"}, map[string]*onnx.Tensor{"x": x, "b": bias12})
	// FusedMatMul with transposes and batch broadcasting.
	for _, tr := range [][2]int64{{0, 0}, {1, 0}, {0, 1}, {1, 1}} {
		as, bs := []int{2, 3, 4, 5}, []int{3, 5, 6}
		if tr[0] == 1 {
			as = []int{2, 3, 5, 4}
		}
		if tr[1] == 1 {
			bs = []int{3, 6, 5}
		}
		add("FusedMatMul", ntNode(ms, "FusedMatMul", []string{"a", "b"}, []string{"y"}, ntAttrF("alpha", 0.75), ntAttrI("transA", tr[0]), ntAttrI("transB", tr[1])),
			[]string{"a", "b"}, map[string]*onnx.Tensor{"a": ntRandn(rng, 1, as...), "b": ntRandn(rng, 1, bs...)})
	}
	// SkipLayerNormalization: with and without beta/bias, broadcast skip.
	h := 16
	sx, gamma, beta, sb := ntRandn(rng, 1, 2, 3, h), ntRandn(rng, 1, h), ntRandn(rng, 1, h), ntRandn(rng, 1, h)
	add("SkipLayerNorm", ntNode(ms, "SkipLayerNormalization", []string{"x", "s", "g", "be", "bi"}, []string{"y"}, ntAttrF("epsilon", 1e-5)),
		[]string{"x", "s", "g", "be", "bi"}, map[string]*onnx.Tensor{"x": sx, "s": ntRandn(rng, 1, 2, 3, h), "g": gamma, "be": beta, "bi": sb})
	add("SkipLayerNorm/min", ntNode(ms, "SkipLayerNormalization", []string{"x", "s", "g"}, []string{"y"}),
		[]string{"x", "s", "g"}, map[string]*onnx.Tensor{"x": sx, "s": ntRandn(rng, 1, 2, 3, h), "g": gamma})
	// EmbedLayerNormalization with segments, mask and default positions.
	ids := ntInt32([]int{2, 4}, 1, 5, 7, 2, 0, 3, 9, 9)
	segs := ntInt32([]int{2, 4}, 0, 0, 1, 1, 0, 1, 1, 1)
	mask := ntInt32([]int{2, 4}, 1, 1, 1, 0, 1, 1, 0, 0)
	embFeeds := map[string]*onnx.Tensor{"ids": ids, "segs": segs, "we": ntRandn(rng, 1, 10, h), "pe": ntRandn(rng, 1, 6, h), "se": ntRandn(rng, 1, 2, h), "g": gamma, "be": beta, "mask": mask}
	eln := ntNode(ms, "EmbedLayerNormalization", []string{"ids", "segs", "we", "pe", "se", "g", "be", "mask"}, []string{"y", "mi"}, ntAttrF("epsilon", 1e-5))
	// mask_index is int32: compare it through a Cast to float.
	cases = append(cases, tc{"EmbedLayerNorm", []*onnxpb.NodeProto{eln, ntNode("", "Cast", []string{"mi"}, []string{"mif"}, ntAttrI("to", int64(onnx.Float)))},
		[]string{"ids", "segs", "we", "pe", "se", "g", "be", "mask"}, embFeeds, []string{"y", "mif"}})

	// Attention: mask forms, unidirectional, scale, qkv_hidden_sizes, attention_bias.
	b, s, din, nh := 2, 5, 16, 4
	ax := ntRandn(rng, 1, b, s, din)
	w := ntRandn(rng, 0.3, din, 3*din)
	wb := ntRandn(rng, 0.1, 3*din)
	base := map[string]*onnx.Tensor{"x": ax, "w": w, "b": wb}
	with := func(extra map[string]*onnx.Tensor) map[string]*onnx.Tensor {
		m := map[string]*onnx.Tensor{}
		for k, v := range base {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	heads := ntAttrI("num_heads", int64(nh))
	add("Attention/nomask", ntNode(ms, "Attention", []string{"x", "w", "b"}, []string{"y"}, heads), []string{"x", "w", "b"}, base)
	add("Attention/1d", ntNode(ms, "Attention", []string{"x", "w", "b", "m"}, []string{"y"}, heads), []string{"x", "w", "b", "m"},
		with(map[string]*onnx.Tensor{"m": ntInt32([]int{2}, 3, 5)}))
	add("Attention/2d", ntNode(ms, "Attention", []string{"x", "w", "b", "m"}, []string{"y"}, heads, ntAttrF("mask_filter_value", -1e9)), []string{"x", "w", "b", "m"},
		with(map[string]*onnx.Tensor{"m": ntInt32([]int{2, 5}, 1, 1, 0, 1, 1, 1, 1, 1, 1, 0)}))
	m3 := make([]int32, b*s*s)
	for i := range m3 {
		if rng.IntN(3) > 0 || i%s == 0 {
			m3[i] = 1
		}
	}
	add("Attention/3d", ntNode(ms, "Attention", []string{"x", "w", "b", "m"}, []string{"y"}, heads), []string{"x", "w", "b", "m"},
		with(map[string]*onnx.Tensor{"m": ntInt32([]int{b, s, s}, m3...)}))
	add("Attention/unidirectional+scale", ntNode(ms, "Attention", []string{"x", "w", "b"}, []string{"y"}, heads, ntAttrI("unidirectional", 1), ntAttrF("scale", 0.3)),
		[]string{"x", "w", "b"}, base)
	add("Attention/bias", ntNode(ms, "Attention", []string{"x", "w", "b", "", "", "ab"}, []string{"y"}, heads), []string{"x", "w", "b", "ab"},
		with(map[string]*onnx.Tensor{"ab": ntRandn(rng, 1, 1, nh, s, s)}))
	add("Attention/qkv_hidden_sizes", ntNode(ms, "Attention", []string{"x", "w", "b"}, []string{"y"}, heads, ntAttrInts("qkv_hidden_sizes", 8, 8, 24)),
		[]string{"x", "w", "b"}, with(map[string]*onnx.Tensor{"w": ntRandn(rng, 0.3, din, 40), "b": ntRandn(rng, 0.1, 40)}))

	// MultiHeadAttention: separate Q/K/V with bias and masks, packed QKV, packed KV.
	l, d := 7, 16
	q, k, v := ntRandn(rng, 1, b, s, d), ntRandn(rng, 1, b, l, d), ntRandn(rng, 1, b, l, d)
	mb := ntRandn(rng, 0.2, 3*d)
	add("MHA/qkv", ntNode(ms, "MultiHeadAttention", []string{"q", "k", "v"}, []string{"y"}, heads), []string{"q", "k", "v"},
		map[string]*onnx.Tensor{"q": q, "k": k, "v": v})
	add("MHA/bias+mask2d", ntNode(ms, "MultiHeadAttention", []string{"q", "k", "v", "bias", "kpm"}, []string{"y"}, heads), []string{"q", "k", "v", "bias", "kpm"},
		map[string]*onnx.Tensor{"q": q, "k": k, "v": v, "bias": mb, "kpm": ntInt32([]int{b, l}, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1)})
	add("MHA/mask1d+scale", ntNode(ms, "MultiHeadAttention", []string{"q", "k", "v", "", "kpm"}, []string{"y"}, heads, ntAttrF("scale", 0.2)), []string{"q", "k", "v", "kpm"},
		map[string]*onnx.Tensor{"q": q, "k": k, "v": v, "kpm": ntInt32([]int{b}, 4, 7)})

	add("MHA/kv-BNSH", ntNode(ms, "MultiHeadAttention", []string{"q", "k4", "v4", "bias"}, []string{"y"}, heads), []string{"q", "k4", "v4", "bias"},
		map[string]*onnx.Tensor{"q": q, "k4": ntRandn(rng, 1, b, nh, l, d/nh), "v4": ntRandn(rng, 1, b, nh, l, d/nh), "bias": mb})

	for _, c := range cases {
		for _, threads := range []int{1, 2} {
			agree(t, c.name, ntModel(c.nodes, c.feeds, c.order, c.outs...), c.feeds, 1e-5, threads)
		}
	}
}

// funcModel builds a model whose graph calls model-local functions:
// Outer(x, y; alpha) = ScaledAdd(x, y; alpha=alpha) · 2 (nested call, attribute
// reference), and com.microsoft:Gelu defined as a function body although a
// native kernel exists for it.
func funcModel() *onnxpb.ModelProto {
	one, v17 := int64(1), int64(17)
	ref := func(name, refName string, typ onnxpb.AttributeProto_AttributeType) *onnxpb.AttributeProto {
		return &onnxpb.AttributeProto{Name: ntStr(name), RefAttrName: ntStr(refName), Type: typ.Enum()}
	}
	imports := []*onnxpb.OperatorSetIdProto{{Domain: ntStr(""), Version: &v17}, {Domain: ntStr("local"), Version: &one}}
	scaledAdd := &onnxpb.FunctionProto{
		Name: ntStr("ScaledAdd"), Domain: ntStr("local"),
		Input: []string{"a", "b"}, Output: []string{"c"}, Attribute: []string{"alpha"},
		OpsetImport: imports,
		Node: []*onnxpb.NodeProto{
			{OpType: ntStr("Constant"), Output: []string{"k"}, Attribute: []*onnxpb.AttributeProto{ref("value_float", "alpha", onnxpb.AttributeProto_FLOAT)}},
			{OpType: ntStr("Mul"), Input: []string{"b", "k"}, Output: []string{"t"}},
			{OpType: ntStr("Add"), Input: []string{"a", "t"}, Output: []string{"c"}},
		},
	}
	outer := &onnxpb.FunctionProto{
		Name: ntStr("Outer"), Domain: ntStr("local"),
		Input: []string{"x", "y"}, Output: []string{"z"}, Attribute: []string{"alpha"},
		OpsetImport: imports,
		Node: []*onnxpb.NodeProto{
			{OpType: ntStr("ScaledAdd"), Domain: ntStr("local"), Input: []string{"x", "y"}, Output: []string{"t"}, Attribute: []*onnxpb.AttributeProto{ref("alpha", "alpha", onnxpb.AttributeProto_FLOAT)}},
			{OpType: ntStr("Add"), Input: []string{"t", "t"}, Output: []string{"z"}},
		},
	}
	// x·Φ(x) = 0.5·x·(1 + erf(x/√2))
	gelu := &onnxpb.FunctionProto{
		Name: ntStr("Gelu"), Domain: ntStr("com.microsoft"),
		Input: []string{"X"}, Output: []string{"Y"},
		OpsetImport: imports,
		Node: []*onnxpb.NodeProto{
			{OpType: ntStr("Constant"), Output: []string{"r2"}, Attribute: []*onnxpb.AttributeProto{ntAttrF("value_float", math.Sqrt2)}},
			{OpType: ntStr("Constant"), Output: []string{"one"}, Attribute: []*onnxpb.AttributeProto{ntAttrF("value_float", 1)}},
			{OpType: ntStr("Constant"), Output: []string{"half"}, Attribute: []*onnxpb.AttributeProto{ntAttrF("value_float", 0.5)}},
			{OpType: ntStr("Div"), Input: []string{"X", "r2"}, Output: []string{"d"}},
			{OpType: ntStr("Erf"), Input: []string{"d"}, Output: []string{"e"}},
			{OpType: ntStr("Add"), Input: []string{"e", "one"}, Output: []string{"p"}},
			{OpType: ntStr("Mul"), Input: []string{"X", "p"}, Output: []string{"xp"}},
			{OpType: ntStr("Mul"), Input: []string{"xp", "half"}, Output: []string{"Y"}},
		},
	}
	feeds := map[string]*onnx.Tensor{"x": onnx.NewFloat([]int{2, 3}, nil), "y": onnx.NewFloat([]int{2, 3}, nil)}
	m := ntModel([]*onnxpb.NodeProto{
		ntNode("local", "Outer", []string{"x", "y"}, []string{"z"}, ntAttrF("alpha", -1.5)),
		ntNode("com.microsoft", "Gelu", []string{"z"}, []string{"g"}),
	}, feeds, []string{"x", "y"}, "z", "g")
	m.OpsetImport = append(m.OpsetImport, &onnxpb.OperatorSetIdProto{Domain: ntStr("local"), Version: &one})
	m.Functions = []*onnxpb.FunctionProto{scaledAdd, outer, gelu}
	return m
}

// TestNativeFunctions checks function expansion against a closed form and
// that the kernel and the inlined body of com.microsoft:Gelu agree.
func TestNativeFunctions(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	x, y := ntRandn(rng, 1, 2, 3), ntRandn(rng, 1, 2, 3)
	feeds := map[string]*onnx.Tensor{"x": x, "y": y}
	m := funcModel()
	for _, inline := range []bool{false, true} {
		s, err := NewNativeSessionWith(m, NativeOptions{InlineFunctions: inline})
		if err != nil {
			t.Fatalf("inline=%v: %v", inline, err)
		}
		out, err := s.Run(feeds)
		if err != nil {
			t.Fatalf("inline=%v: %v", inline, err)
		}
		z, g := out["z"].Floats(), out["g"].Floats()
		for i := range z {
			wantZ := 2 * (float64(x.Floats()[i]) - 1.5*float64(y.Floats()[i]))
			wantG := 0.5 * wantZ * (1 + math.Erf(wantZ/math.Sqrt2))
			if math.Abs(float64(z[i])-wantZ) > 1e-5*(1+math.Abs(wantZ)) || math.Abs(float64(g[i])-wantG) > 1e-5*(1+math.Abs(wantG)) {
				t.Fatalf("inline=%v: element %d: z=%v g=%v, want %v %v", inline, i, z[i], g[i], wantZ, wantG)
			}
		}
		ns := s.(*nativeSession)
		kernelUsed := false
		for _, pn := range ns.plan {
			if pn.node.GetOpType() == "Gelu" {
				kernelUsed = true
			}
			if pn.node.GetDomain() == "local" {
				t.Errorf("inline=%v: local function call %s left in the plan", inline, nodeLabel(pn.node))
			}
		}
		if kernelUsed == inline {
			t.Errorf("inline=%v: Gelu kernel used = %v", inline, kernelUsed)
		}
	}
	if err := ORTAvailable(); err == nil {
		agree(t, "functions", m, feeds, 1e-5, 1)
	} else if os.Getenv("LINEARIZE_REQUIRE_ORT") != "" {
		t.Fatalf("onnxruntime is required (LINEARIZE_REQUIRE_ORT is set): %v", err)
	} else {
		t.Logf("onnxruntime not available, the comparison with it is left out (scripts/setup.sh installs it): %v", err)
	}
}

// TestNativeErrors checks that failures name the node and that unsupported
// ops fail at session creation.
func TestNativeErrors(t *testing.T) {
	feeds := map[string]*onnx.Tensor{"x": onnx.NewFloat([]int{2, 3}, make([]float32, 6))}
	m := ntModel([]*onnxpb.NodeProto{ntNode("", "NoSuchOp", []string{"x"}, []string{"y"})}, feeds, []string{"x"}, "y")
	if _, err := NewNativeSession(m, Options{}); err == nil || !strings.Contains(err.Error(), `"NoSuchOp_y"`) || !strings.Contains(err.Error(), "not supported by the native backend") {
		t.Errorf("unsupported op: %v", err)
	}
	// A shape error at run time names the node.
	bad := map[string]*onnx.Tensor{"x": feeds["x"], "w": onnx.NewFloat([]int{4, 2}, make([]float32, 8))}
	m = ntModel([]*onnxpb.NodeProto{ntNode("com.microsoft", "FusedMatMul", []string{"x", "w"}, []string{"y"})}, bad, []string{"x", "w"}, "y")
	s, err := NewNativeSession(m, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Run(bad); err == nil || !strings.Contains(err.Error(), `infer: node "FusedMatMul_y" (com.microsoft:FusedMatMul)`) {
		t.Errorf("shape error: %v", err)
	}
	if _, err := s.Run(map[string]*onnx.Tensor{"x": feeds["x"]}); err == nil || !strings.Contains(err.Error(), `"w"`) {
		t.Errorf("missing input: %v", err)
	}
	if _, err := s.Run(bad, "nope"); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("unknown output: %v", err)
	}
}

// reluNegNeg is y = Neg(Neg(Relu(x))) through intermediates a and b, with
// its feed x = [-1 2 -3].
func reluNegNeg() (*onnxpb.ModelProto, map[string]*onnx.Tensor) {
	feeds := map[string]*onnx.Tensor{"x": onnx.NewFloat([]int{3}, []float32{-1, 2, -3})}
	m := ntModel([]*onnxpb.NodeProto{
		ntNode("", "Relu", []string{"x"}, []string{"a"}),
		ntNode("", "Neg", []string{"a"}, []string{"b"}),
		ntNode("", "Neg", []string{"b"}, []string{"y"}),
	}, feeds, []string{"x"}, "y")
	return m, feeds
}

// TestNativeExposeAndFree checks Expose and that intermediates are released
// after their last use while requested values are kept.
func TestNativeExposeAndFree(t *testing.T) {
	m, feeds := reluNegNeg()
	s, err := NewNativeSession(m, Options{Expose: []string{"a", "b"}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.Run(feeds, "y", "a")
	if err != nil {
		t.Fatal(err)
	}
	if got := out["a"].Floats(); got[0] != 0 || got[1] != 2 || got[2] != 0 {
		t.Errorf("a = %v", got)
	}
	if got := out["y"].Floats(); got[1] != 2 {
		t.Errorf("y = %v", got)
	}
	ns := s.(*nativeSession)
	freed := map[string]bool{}
	for _, pn := range ns.plan {
		for _, i := range pn.free {
			for name, j := range ns.slots {
				if i == j {
					freed[name] = true
				}
			}
		}
	}
	if !freed["a"] || !freed["b"] {
		t.Errorf("intermediates not scheduled for release: %v", freed)
	}
	if _, err := NewNativeSession(m, Options{Expose: []string{"zz"}}); err == nil {
		t.Error("exposing an unknown value: no error")
	}
}

// TestNativePackedQKV checks MultiHeadAttention's packed QKV form (which
// onnxruntime's CPU provider does not implement) against the separate form
// on the same numbers, which TestNativeContribVsORT checks against
// onnxruntime.
func TestNativePackedQKV(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 3))
	b, s, n, h := 2, 5, 4, 3
	packed := ntRandn(rng, 1, b, s, n, 3, h)
	sep := [3][]float32{make([]float32, b*s*n*h), make([]float32, b*s*n*h), make([]float32, b*s*n*h)}
	for bs := 0; bs < b*s; bs++ {
		for hi := 0; hi < n; hi++ {
			for c := 0; c < 3; c++ {
				copy(sep[c][(bs*n+hi)*h:(bs*n+hi+1)*h], packed.Floats()[((bs*n+hi)*3+c)*h:])
			}
		}
	}
	heads := ntAttrI("num_heads", int64(n))
	run := func(nodeIn []string, feeds map[string]*onnx.Tensor) []float32 {
		m := ntModel([]*onnxpb.NodeProto{ntNode("com.microsoft", "MultiHeadAttention", nodeIn, []string{"y"}, heads)}, feeds, nodeIn, "y")
		sess, err := NewNativeSession(m, Options{})
		if err != nil {
			t.Fatal(err)
		}
		out, err := sess.Run(feeds)
		if err != nil {
			t.Fatal(err)
		}
		return out["y"].Floats()
	}
	got := run([]string{"qkv"}, map[string]*onnx.Tensor{"qkv": packed})
	want := run([]string{"q", "k", "v"}, map[string]*onnx.Tensor{
		"q": onnx.NewFloat([]int{b, s, n * h}, sep[0]), "k": onnx.NewFloat([]int{b, s, n * h}, sep[1]), "v": onnx.NewFloat([]int{b, s, n * h}, sep[2])})
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("packed QKV: element %d: %v, separate %v", i, got[i], want[i])
		}
	}
	kv := make([]float32, 2*b*s*n*h)
	for bs := 0; bs < b*s; bs++ {
		for hi := 0; hi < n; hi++ {
			for c := 0; c < 2; c++ {
				copy(kv[((bs*n+hi)*2+c)*h:((bs*n+hi)*2+c+1)*h], sep[c+1][(bs*n+hi)*h:])
			}
		}
	}
	got = run([]string{"q", "kv"}, map[string]*onnx.Tensor{"q": onnx.NewFloat([]int{b, s, n * h}, sep[0]), "kv": onnx.NewFloat([]int{b, s, n, 2, h}, kv)})
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("packed KV: element %d: %v, separate %v", i, got[i], want[i])
		}
	}
}

func TestNativeProfile(t *testing.T) {
	m, feeds := reluNegNeg()
	s, err := NewNativeSessionWith(m, NativeOptions{Profile: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if _, err := s.Run(feeds); err != nil {
			t.Fatal(err)
		}
	}
	times, ok := nativeprof.Read(s)
	calls := map[string]int{}
	for _, o := range times {
		calls[o.Op] = o.Calls
	}
	if !ok || len(times) != 2 || calls["Relu"] != 2 || calls["Neg"] != 4 {
		t.Errorf("profile %+v (ok %v)", times, ok)
	}
	plain, _ := NewNativeSession(m, Options{})
	if _, ok := nativeprof.Read(plain); ok {
		t.Error("profile reported for a session created without Profile")
	}
}

// TestNativeFunctionUnusedOutput calls a two-output function using only
// its second output, which the body computes from the first.
func TestNativeFunctionUnusedOutput(t *testing.T) {
	one := int64(1)
	feeds := map[string]*onnx.Tensor{"x": onnx.NewFloat([]int{3}, []float32{-1, 2, -3})}
	m := ntModel([]*onnxpb.NodeProto{{OpType: ntStr("TwoOut"), Domain: ntStr("local"), Input: []string{"x"}, Output: []string{"", "y"}}}, feeds, []string{"x"}, "y")
	m.OpsetImport = append(m.OpsetImport, &onnxpb.OperatorSetIdProto{Domain: ntStr("local"), Version: &one})
	m.Functions = []*onnxpb.FunctionProto{{
		Name: ntStr("TwoOut"), Domain: ntStr("local"), Input: []string{"X"}, Output: []string{"A", "B"},
		OpsetImport: m.OpsetImport[:1],
		Node: []*onnxpb.NodeProto{
			{OpType: ntStr("Relu"), Input: []string{"X"}, Output: []string{"A"}},
			{OpType: ntStr("Neg"), Input: []string{"A"}, Output: []string{"B"}},
		},
	}}
	s, err := NewNativeSession(m, Options{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.Run(feeds)
	if err != nil {
		t.Fatal(err)
	}
	if y := out["y"].Floats(); y[0] != 0 || y[1] != -2 || y[2] != 0 {
		t.Errorf("y = %v, want [0 -2 0]", y)
	}
}
