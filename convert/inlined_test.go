package convert

import (
	"errors"
	"strings"
	"testing"

	"github.com/linearize/linearize/models"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
	"google.golang.org/protobuf/proto"
)

// TestInlinedLinearNotAttention converts a fixture to each linear op,
// inlines the ops' function bodies with convert's inliner (instantiate, as
// onnxruntime's optimizer does when it saves a model), and requires Detect
// to find no block to convert and to report each body as an inlined
// linear-attention op, and the rewrites to refuse the model.
func TestInlinedLinearNotAttention(t *testing.T) {
	orig := form{name: "plain", opset: 17, k: "0231", scale: "div", mask: "add"}.build()
	type conv struct {
		name, op string
		m        func() (*onnxpb.ModelProto, *Report, error)
	}
	cases := []conv{
		{"performer", ops.PerformerOp, func() (*onnxpb.ModelProto, *Report, error) {
			return ToPerformer(orig, PerformerOptions{Features: 8, Seed: 1, FeatureMap: ops.FeaturesFavorPlus, Center: CenterOff})
		}},
		{"performer-centred", ops.PerformerOp, func() (*onnxpb.ModelProto, *Report, error) {
			return ToPerformer(orig, PerformerOptions{Features: 8, Seed: 1, Center: CenterOn, FeatureMap: ops.FeaturesFavorPlus})
		}},
		{"performer-causal", ops.PerformerOp, func() (*onnxpb.ModelProto, *Report, error) {
			causal := form{name: "causal", opset: 14, k: "0231", scale: "div", mask: "trilu"}.build()
			return ToPerformer(causal, PerformerOptions{Features: 8, Seed: 1, FeatureMap: ops.FeaturesFavorPlus, Center: CenterOff})
		}},
		{"linformer", ops.LinformerOp, func() (*onnxpb.ModelProto, *Report, error) {
			return ToLinformer(orig, LinformerOptions{Init: "gaussian", K: 4, MaxLen: 8, Seed: 1})
		}},
		{"local-pooled", ops.LocalPooledOp, func() (*onnxpb.ModelProto, *Report, error) {
			return ToLocalPooled(orig, LocalPooledOptions{Block: 2, Segments: 2})
		}},
		{"local-pooled-no-sinks", ops.LocalPooledOp, func() (*onnxpb.ModelProto, *Report, error) {
			return ToLocalPooled(orig, LocalPooledOptions{Block: 2, Segments: 3, Sinks: NoSinks})
		}},
		{"pooled-only", ops.LocalPooledOp, func() (*onnxpb.ModelProto, *Report, error) {
			return ToLocalPooled(orig, LocalPooledOptions{NoLocal: true, Segments: 2})
		}},
		{"hedgehog", ops.HedgehogOp, func() (*onnxpb.ModelProto, *Report, error) {
			return ToHedgehog(orig, HedgehogOptions{Block: 2, Features: 3, Seed: 1})
		}},
		{"hedgehog-linear", ops.HedgehogOp, func() (*onnxpb.ModelProto, *Report, error) {
			return ToHedgehog(orig, HedgehogOptions{Linear: true, Features: 3, Seed: 1})
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, _, err := c.m()
			if err != nil {
				t.Fatal(err)
			}
			inl := inlineLinear(t, m)
			for _, n := range inl.Graph.Node {
				if n.GetDomain() == ops.Domain {
					t.Fatalf("test set-up: %s left after inlining", n.GetOpType())
				}
			}
			d, err := Detect(inl)
			if err != nil {
				t.Fatal(err)
			}
			want := "inlined " + c.op
			if d.Count() != 0 || len(d.Convertible()) != 0 || !d.AlreadyConverted() || len(d.Linear) != 1 || d.Linear[0].Op != want {
				t.Fatalf("want no block and one %s, got\n%s", want, d.Explain())
			}
			if !strings.Contains(d.Explain(), "converted already") {
				t.Errorf("Explain does not say the model is converted:\n%s", d.Explain())
			}
			_, _, perr := ToPerformer(inl, PerformerOptions{Features: 8, FeatureMap: ops.FeaturesFavorPlus, Center: CenterOff})
			_, _, lerr := ToLocalPooled(inl, LocalPooledOptions{Block: 2, Segments: 2})
			for _, err := range []error{perr, lerr} {
				if !errors.Is(err, ErrNothingConverted) || !strings.Contains(err.Error(), want) {
					t.Errorf("error %v, want ErrNothingConverted naming %s", err, want)
				}
			}
		})
	}
	// Two layers: one inlined body each.
	cfg := models.TinyConfig()
	bert, err := models.BERT(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lp, _, err := ToLocalPooled(bert, LocalPooledOptions{Block: 4, Segments: 4})
	if err != nil {
		t.Fatal(err)
	}
	d, err := Detect(inlineLinear(t, lp))
	if err != nil {
		t.Fatal(err)
	}
	if d.Count() != 0 || len(d.Linear) != cfg.Layers {
		t.Errorf("tiny BERT, local-pooled inlined: want %d inlined ops and no block, got\n%s", cfg.Layers, d.Explain())
	}
}

// TestInlinedLinformerFusedMatMul: onnxruntime at level extended fuses
// the inlined Linformer's scale and Kᵀ into a com.microsoft FusedMatMul,
// which the softmax matcher does not read; the body is still recognised.
func TestInlinedLinformerFusedMatMul(t *testing.T) {
	orig := form{name: "plain", opset: 17, k: "0231", scale: "div", mask: "add"}.build()
	lm, _, err := ToLinformer(orig, LinformerOptions{Init: "gaussian", K: 4, MaxLen: 8, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	m := inlineLinear(t, lm)
	ix := onnx.NewIndex(m.Graph)
	var sm *onnxpb.NodeProto
	for _, n := range m.Graph.Node {
		if n.GetOpType() == "Softmax" {
			sm = n
		}
	}
	// Softmax(Mul(MatMul(Q, Transpose(Kp)), s)) → Softmax(FusedMatMul(Q, Kp)).
	mul := ix.Producer[sm.Input[0]]
	mm := ix.Producer[mul.Input[0]]
	tr := ix.Producer[mm.Input[1]]
	if mul.GetOpType() != "Mul" || mm.GetOpType() != "MatMul" || tr.GetOpType() != "Transpose" {
		t.Fatalf("test set-up: body changed: %s(%s(·, %s))", mul.GetOpType(), mm.GetOpType(), tr.GetOpType())
	}
	fused := &onnxpb.NodeProto{OpType: proto.String("FusedMatMul"), Domain: proto.String("com.microsoft"),
		Input: []string{mm.Input[0], tr.Input[0]}, Output: []string{sm.Input[0]},
		Attribute: []*onnxpb.AttributeProto{{Name: proto.String("transB"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(1)}}}
	var nodes []*onnxpb.NodeProto
	for _, n := range m.Graph.Node {
		switch n {
		case mul:
			nodes = append(nodes, fused)
		case mm, tr:
		default:
			nodes = append(nodes, n)
		}
	}
	m.Graph.Node = nodes
	m.OpsetImport = append(m.OpsetImport, &onnxpb.OperatorSetIdProto{Domain: proto.String("com.microsoft"), Version: proto.Int64(1)})
	d, err := Detect(m)
	if err != nil {
		t.Fatal(err)
	}
	if d.Count() != 0 || len(d.Linear) != 1 || d.Linear[0].Op != "inlined "+ops.LinformerOp {
		t.Fatalf("want one inlined LinformerAttention, got\n%s", d.Explain())
	}
}

// TestInlinedNotInOriginals: softmax attention is never taken for an
// inlined linear op, and markInlined drops a block anchored in a body.
func TestInlinedNotInOriginals(t *testing.T) {
	for _, fm := range []form{
		{name: "plain", opset: 17, k: "0231", scale: "div", mask: "add"},
		{name: "mul", opset: 14, k: "0231", scale: "mul", mask: "where"},
	} {
		m := fm.build()
		if got := findInlined(m.Graph, onnx.NewIndex(m.Graph)); len(got) != 0 {
			t.Errorf("%s: found %d inlined ops in softmax attention", fm.name, len(got))
		}
	}
	bert, err := models.BERT(models.TinyConfig())
	if err != nil {
		t.Fatal(err)
	}
	if got := findInlined(bert.Graph, onnx.NewIndex(bert.Graph)); len(got) != 0 {
		t.Errorf("tiny BERT: found %d inlined ops", len(got))
	}
	pm, _, err := ToPerformer(form{name: "plain", opset: 17, k: "0231", scale: "div", mask: "add"}.build(), PerformerOptions{Features: 8, Seed: 1, FeatureMap: ops.FeaturesFavorPlus, Center: CenterOff})
	if err != nil {
		t.Fatal(err)
	}
	inl := inlineLinear(t, pm)
	ix := onnx.NewIndex(inl.Graph)
	found := findInlined(inl.Graph, ix)
	if len(found) != 1 {
		t.Fatalf("found %d bodies, want 1", len(found))
	}
	d := &Detection{Blocks: []*Block{{Nodes: []string{"x", nodeName(found[0].anchor)}}, {Nodes: []string{"y"}}}}
	d.markInlined(inl.Graph, ix)
	if len(d.Blocks) != 1 || d.Blocks[0].Nodes[0] != "y" || len(d.Linear) != 1 {
		t.Errorf("blocks %v, linear %v: want the block in the body dropped", d.Blocks, d.Linear)
	}
}
