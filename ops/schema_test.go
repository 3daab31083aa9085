package ops_test

import (
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/linearize/linearize/kernels"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

// docs/ops.md's op reference is what the schemas generate: a schema
// changed without `go generate ./ops` fails here.
func TestOpReferenceCurrent(t *testing.T) {
	old, err := os.ReadFile("../docs/ops.md")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := ops.UpdateReference(string(old))
	if err != nil {
		t.Fatal(err)
	}
	if doc != string(old) {
		t.Error("docs/ops.md: the op reference is stale; run go generate ./ops")
	}
	for _, s := range ops.Schemas() {
		if !strings.Contains(doc, "### "+s.Op+"\n") {
			t.Errorf("the reference has no section for %s", s.Op)
		}
	}
}

// attrValue is an attribute's value as a comparable Go value.
func attrValue(at *onnxpb.AttributeProto) any {
	switch at.GetType() {
	case onnxpb.AttributeProto_FLOAT:
		return at.GetF()
	case onnxpb.AttributeProto_INT:
		return at.GetI()
	case onnxpb.AttributeProto_STRING:
		return string(at.GetS())
	case onnxpb.AttributeProto_FLOATS:
		return "FLOATS" // compared separately
	}
	return nil
}

// Nodes carry exactly the attributes that differ from the schema's
// defaults (scale always), with the values the attribute structs mean, and
// pass CheckNode; the parsers read them back.
func TestSchemaNodes(t *testing.T) {
	in := func(n int) []string { return ops.HedgehogInputNames()[:n] }
	for _, c := range []struct {
		name string
		node *onnxpb.NodeProto
		want map[string]any
	}{
		{"performer defaults", ops.NewPerformerNode("p", in(5), "out", ops.PerformerAttrs{Scale: 0.25}), map[string]any{"scale": float32(0.25)}},
		{"performer explicit defaults", ops.NewPerformerNode("p", in(5), "out", ops.PerformerAttrs{Scale: 0.25, Kernel: ops.KernelPositive, Epsilon: 1e-6, Features: ops.FeaturesFavorPlus, Chunk: ops.DefaultChunk}),
			map[string]any{"scale": float32(0.25)}},
		{"performer everything", ops.NewPerformerNode("p", in(5), "out", ops.PerformerAttrs{Scale: 0.25, Kernel: ops.KernelTrig, Epsilon: 1e-3, Center: true, Features: ops.FeaturesFavorPP, Causal: true, Chunk: 32}),
			map[string]any{"scale": float32(0.25), "kernel": "trig", "epsilon": float32(1e-3), "center": int64(1), "features": "favor++", "causal": int64(1), "chunk": int64(32)}},
		{"linformer", ops.NewLinformerNode("l", []string{"Q", "K", "V", "E", "F", "key_bias"}, "out", ops.LinformerAttrs{Scale: 0.5}), map[string]any{"scale": float32(0.5)}},
		{"linformer pooled", ops.NewLinformerNode("l", []string{"Q", "K", "V", "", "", "key_bias"}, "out", ops.LinformerAttrs{Scale: 0.5, Segments: 64, SinkFirst: true, SinkLast: true}),
			map[string]any{"scale": float32(0.5), "segments": int64(64), "sinks": "first,last"}},
		{"local-pooled", ops.NewLocalPooledNode("lp", in(3), "out", ops.LocalPooledAttrs{Scale: 0.5, Block: 4, Reach: 1}), map[string]any{"scale": float32(0.5), "block": int64(4)}},
		{"local-pooled everything", ops.NewLocalPooledNode("lp", in(4), "out", ops.LocalPooledAttrs{Scale: 0.5, Block: 4, Segments: 3, SinkLast: true, Reach: ops.NoReach, FarBias: []float32{-1.5}}),
			map[string]any{"scale": float32(0.5), "block": int64(4), "segments": int64(3), "sinks": "last", "reach": int64(0), "far_bias": "FLOATS"}},
		{"hedgehog reach 0", ops.NewHedgehogNode("h", in(10), "out", ops.HedgehogAttrs{Scale: 0.4}), map[string]any{"scale": float32(0.4), "reach": int64(0)}},
		{"hedgehog", ops.NewHedgehogNode("h", in(10), "out", ops.HedgehogAttrs{Scale: 0.4, Block: 8, Reach: ops.DefaultHedgehogReach, Causal: true}),
			map[string]any{"scale": float32(0.4), "block": int64(8), "causal": int64(1)}},
		{"lara", ops.NewLaraNode("x", []string{"Q", "K", "V", "Noise", "key_bias"}, "out", ops.LaraAttrs{Scale: 0.3, Landmarks: 4}), map[string]any{"scale": float32(0.3), "landmarks": int64(4)}},
	} {
		got := map[string]any{}
		for _, at := range c.node.Attribute {
			got[at.GetName()] = attrValue(at)
			if at.GetType() == onnxpb.AttributeProto_FLOATS {
				if !slices.Equal(at.GetFloats(), []float32{-1.5}) {
					t.Errorf("%s: far_bias %v, want [-1.5]", c.name, at.GetFloats())
				}
			}
		}
		if len(got) != len(c.want) {
			t.Errorf("%s: attributes %v, want %v", c.name, got, c.want)
		}
		for k, v := range c.want {
			if got[k] != v {
				t.Errorf("%s: attribute %s = %v, want %v", c.name, k, got[k], v)
			}
		}
		if err := ops.CheckNode(c.node); err != nil {
			t.Errorf("%s: CheckNode: %v", c.name, err)
		}
	}
	lp := ops.LocalPooledAttrs{Scale: 0.5, Block: 4, Segments: 3, SinkFirst: true, Reach: ops.NoReach, FarBias: []float32{0.5, -1}}
	if got, err := ops.ParseLocalPooledAttrs(ops.NewLocalPooledNode("lp", in(4), "out", lp)); err != nil || got.Reach != lp.Reach || got.Block != 4 || got.Segments != 3 || !got.SinkFirst || got.SinkLast || !slices.Equal(got.FarBias, lp.FarBias) {
		t.Errorf("ParseLocalPooledAttrs(NewLocalPooledNode(%+v)) = %+v, %v", lp, got, err)
	}
	for _, hh := range []ops.HedgehogAttrs{{Scale: 0.4}, {Scale: 0.4, Block: 3, Reach: 1}, {Scale: 0.4, Block: 3, Reach: 5, Causal: true}} {
		if got, err := ops.ParseHedgehogAttrs(ops.NewHedgehogNode("h", in(10), "out", hh)); err != nil || got != hh {
			t.Errorf("ParseHedgehogAttrs(NewHedgehogNode(%+v)) = %+v, %v", hh, got, err)
		}
	}
}

// CheckNode refuses what the schemas exclude, naming the node and the
// input or attribute.
func TestCheckNodeRefuses(t *testing.T) {
	lp := func(mod func(n *onnxpb.NodeProto)) *onnxpb.NodeProto {
		n := ops.NewLocalPooledNode("n1", []string{"Q", "K", "V", "key_bias"}, "out", ops.LocalPooledAttrs{Scale: 0.5, Block: 4, Segments: 2})
		mod(n)
		return n
	}
	set := func(at *onnxpb.AttributeProto) func(n *onnxpb.NodeProto) {
		return func(n *onnxpb.NodeProto) { n.Attribute = append(n.Attribute, at) }
	}
	lara := ops.NewLaraNode("n1", []string{"Q", "K", "V", "", "key_bias"}, "out", ops.LaraAttrs{Scale: 0.3, Landmarks: 2})
	noLandmarks := ops.NewLaraNode("n1", []string{"Q", "K", "V", "Noise", "key_bias"}, "out", ops.LaraAttrs{Scale: 0.3, Landmarks: 2})
	noLandmarks.Attribute = noLandmarks.Attribute[:1]
	perf := ops.NewPerformerNode("n1", []string{"Q", "K", "V", "Omega"}, "out", ops.PerformerAttrs{Scale: 0.3})
	perf.Attribute = append(perf.Attribute, &onnxpb.AttributeProto{Name: proto.String("kernel"), Type: onnxpb.AttributeProto_STRING.Enum(), S: []byte("cosine")})
	for _, c := range []struct {
		name string
		node *onnxpb.NodeProto
		want string
	}{
		{"unknown attribute", lp(set(&onnxpb.AttributeProto{Name: proto.String("window"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(3)})), "unknown attribute window"},
		{"attribute type", lp(func(n *onnxpb.NodeProto) {
			n.Attribute[1] = &onnxpb.AttributeProto{Name: proto.String("block"), Type: onnxpb.AttributeProto_FLOAT.Enum(), F: proto.Float32(4)}
		}), "block has type FLOAT, want INT"},
		{"range", lp(set(&onnxpb.AttributeProto{Name: proto.String("reach"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(ops.MaxReach + 1)})), "reach 65, want 0..64"},
		{"sinks value", lp(set(&onnxpb.AttributeProto{Name: proto.String("sinks"), Type: onnxpb.AttributeProto_STRING.Enum(), S: []byte("middle")})), `sinks "middle"`},
		{"string value", perf, `kernel "cosine"`},
		{"too few inputs", lp(func(n *onnxpb.NodeProto) { n.Input = n.Input[:2] }), "2 inputs"},
		{"too many inputs", lp(func(n *onnxpb.NodeProto) { n.Input = append(n.Input, "x") }), "5 inputs"},
		{"required input empty", lara, "input Noise is required"},
		{"required attribute", noLandmarks, "landmarks is required"},
		{"two outputs", lp(func(n *onnxpb.NodeProto) { n.Output = append(n.Output, "y") }), "2 outputs"},
	} {
		err := ops.CheckNode(c.node)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), `node "n1"`) || !strings.HasPrefix(err.Error(), "ops: "+c.node.GetOpType()) {
			t.Errorf("%s: %v, want an error naming the op, node n1 and %q", c.name, err, c.want)
		}
	}
	if err := ops.CheckNode(&onnxpb.NodeProto{OpType: proto.String("Softmax"), Domain: proto.String(ops.Domain)}); err == nil {
		t.Error("CheckNode accepted an op outside the schemas")
	}
	// The kernels read nodes the same way: the node's errors come from
	// the kernel too.
	k, err := kernels.Lookup(ops.Domain, ops.LocalPooledOp, 1)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 3))
	q, kk, v := randQKV(rng, 1, 1, 1, 8, 4, 3)
	bad := lp(set(&onnxpb.AttributeProto{Name: proto.String("reach"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(-1)}))
	if _, err := k(&kernels.Context{Node: bad}, []*onnx.Tensor{q, kk, v}); err == nil || !strings.Contains(err.Error(), "reach -1") || !strings.Contains(err.Error(), `node "n1"`) {
		t.Errorf("kernel on reach -1: %v", err)
	}
}

// The function bodies declare the schema's inputs (the prefix a variant's
// nodes pass) and every attribute, defaults as the schema gives them.
func TestFunctionSignaturesFromSchemas(t *testing.T) {
	type fnCase struct {
		op     string
		inputs int
		build  func() (*onnxpb.FunctionProto, error)
	}
	const opset = 17
	for _, c := range []fnCase{
		{ops.PerformerOp, 5, func() (*onnxpb.FunctionProto, error) { return ops.PerformerFunction(ops.KernelPositive, opset) }},
		{ops.PerformerOp, 5, func() (*onnxpb.FunctionProto, error) { return ops.PerformerFunction(ops.KernelTrig, opset) }},
		{ops.PerformerOp, 7, func() (*onnxpb.FunctionProto, error) {
			return ops.PerformerFunctionFor(ops.PerformerVariant{Center: true, Balance: true}, opset)
		}},
		{ops.PerformerOp, 8, func() (*onnxpb.FunctionProto, error) {
			return ops.PerformerFunctionFor(ops.PerformerVariant{Balance: true, Features: ops.FeaturesADERF}, opset)
		}},
		{ops.PerformerOp, 5, func() (*onnxpb.FunctionProto, error) { return ops.PerformerCausalFunction(0, opset) }},
		{ops.PerformerOp, 5, func() (*onnxpb.FunctionProto, error) { return ops.PerformerExactFunction(opset) }},
		{ops.LinformerOp, 6, func() (*onnxpb.FunctionProto, error) { return ops.LinformerFunction(opset) }},
		{ops.LinformerOp, 6, func() (*onnxpb.FunctionProto, error) {
			return ops.LinformerFunctionFor(opset, ops.LinformerAttrs{Segments: 4, SinkFirst: true})
		}},
		{ops.LocalPooledOp, 4, func() (*onnxpb.FunctionProto, error) {
			return ops.LocalPooledFunction(opset, ops.LocalPooledAttrs{Block: 4, Segments: 2})
		}},
		{ops.HedgehogOp, 10, func() (*onnxpb.FunctionProto, error) {
			return ops.HedgehogFunction(opset, ops.HedgehogAttrs{Block: 4, Reach: 1})
		}},
		{ops.LaraOp, 5, func() (*onnxpb.FunctionProto, error) { return ops.LaraFunction(opset, ops.LaraAttrs{Landmarks: 2}) }},
		{ops.WindowOp, 4, func() (*onnxpb.FunctionProto, error) {
			return ops.WindowFunction(opset, ops.WindowAttrs{Left: 2, Right: 2})
		}},
	} {
		fn, err := c.build()
		if err != nil {
			t.Fatal(err)
		}
		s, ok := ops.SchemaOf(c.op)
		if !ok || fn.GetName() != c.op || fn.GetDomain() != ops.Domain {
			t.Fatalf("%s: function %s.%s, schema found %v", c.op, fn.GetDomain(), fn.GetName(), ok)
		}
		if !slices.Equal(fn.Input, s.InputNames(c.inputs)) || len(fn.Input) != c.inputs {
			t.Errorf("%s (%s): inputs %v, want the schema's first %d", c.op, fn.GetDocString(), fn.Input, c.inputs)
		}
		declared := slices.Clone(fn.Attribute)
		for _, at := range fn.AttributeProto {
			declared = append(declared, at.GetName())
		}
		var want []string
		for _, at := range s.Attrs {
			want = append(want, at.Name)
		}
		slices.Sort(declared)
		slices.Sort(want)
		if !slices.Equal(declared, want) {
			t.Errorf("%s: declared attributes %v, want %v", c.op, declared, want)
		}
		for _, at := range fn.AttributeProto {
			for _, sa := range s.Attrs {
				if sa.Name == at.GetName() && at.GetType() == onnxpb.AttributeProto_FLOATS {
					// A list without a default is declared empty
					// (absent: none), which the body never reads.
					if sa.Default != nil || len(at.Floats) != 0 {
						t.Errorf("%s: default %s = %v, want an empty list", c.op, sa.Name, at.Floats)
					}
					continue
				}
				if sa.Name == at.GetName() && attrValue(at) != sa.Default {
					t.Errorf("%s: default %s = %v, want %v", c.op, sa.Name, attrValue(at), sa.Default)
				}
			}
		}
	}
}

// A node without an attribute computes what the node with the default
// written out computes.
func TestKernelsReadDefaults(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	q, k, v := randQKV(rng, 1, 1, 2, 12, 4, 3)
	hp := hhParams(rng, 2, 4, 3, 1)
	withAttr := func(n *onnxpb.NodeProto, at *onnxpb.AttributeProto) *onnxpb.NodeProto {
		c := proto.Clone(n).(*onnxpb.NodeProto)
		c.Attribute = append(c.Attribute, at)
		return c
	}
	i64 := func(name string, v int64) *onnxpb.AttributeProto {
		return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(v)}
	}
	lpNode := ops.NewLocalPooledNode("lp", []string{"Q", "K", "V"}, "out", ops.LocalPooledAttrs{Scale: 0.5, Block: 3, Segments: 2})
	hhNode := ops.NewHedgehogNode("hh", ops.HedgehogInputNames(), "out", ops.HedgehogAttrs{Scale: 0.5, Block: 3, Reach: 1})
	hhIn := []*onnx.Tensor{q, k, v, nil, hp.QWeight, hp.QBias, hp.QNorm, hp.KWeight, hp.KBias, hp.KNorm}
	for _, c := range []struct {
		name       string
		op         string
		bare, full *onnxpb.NodeProto
		in         []*onnx.Tensor
	}{
		{"local-pooled reach", ops.LocalPooledOp, lpNode, withAttr(lpNode, i64("reach", 1)), []*onnx.Tensor{q, k, v}},
		{"local-pooled sinks", ops.LocalPooledOp, lpNode, withAttr(lpNode, &onnxpb.AttributeProto{Name: proto.String("sinks"), Type: onnxpb.AttributeProto_STRING.Enum(), S: []byte("none")}), []*onnx.Tensor{q, k, v}},
		{"hedgehog reach", ops.HedgehogOp, hhNode, withAttr(hhNode, i64("reach", 1)), hhIn},
		{"hedgehog causal", ops.HedgehogOp, hhNode, withAttr(hhNode, i64("causal", 0)), hhIn},
	} {
		if len(c.bare.Attribute) == len(c.full.Attribute) {
			t.Fatalf("%s: the bare node already carries the attribute", c.name)
		}
		kern, err := kernels.Lookup(ops.Domain, c.op, 1)
		if err != nil {
			t.Fatal(err)
		}
		a, err := kern(&kernels.Context{Node: c.bare}, c.in)
		if err != nil {
			t.Fatal(err)
		}
		b, err := kern(&kernels.Context{Node: c.full}, c.in)
		if err != nil {
			t.Fatal(err)
		}
		checkClose(t, c.name, a[0], b[0], 0)
	}
}
