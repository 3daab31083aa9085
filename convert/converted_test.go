package convert

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
	"google.golang.org/protobuf/proto"
)

// TestNothingConverted: a rewrite that converts no block returns no model
// and an error that wraps ErrNothingConverted and says why.
func TestNothingConverted(t *testing.T) {
	noAttn := &onnxpb.ModelProto{IrVersion: proto.Int64(8),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(17)}},
		Graph: &onnxpb.GraphProto{Name: proto.String("relu"),
			Input:  []*onnxpb.ValueInfoProto{onnx.MakeValueInfo("x", onnx.Float, []onnx.Dim{{Value: 2}, {Value: 3}})},
			Output: []*onnxpb.ValueInfoProto{onnx.MakeValueInfo("y", onnx.Float, nil)},
			Node:   []*onnxpb.NodeProto{{Name: proto.String("relu"), OpType: proto.String("Relu"), Input: []string{"x"}, Output: []string{"y"}}}}}
	softmaxOnly := proto.Clone(noAttn).(*onnxpb.ModelProto)
	softmaxOnly.Graph.Node[0].OpType = proto.String("Softmax")
	for _, c := range []struct {
		name string
		m    *onnxpb.ModelProto
		want string
	}{
		{"causal", form{name: "causal", opset: 14, k: "0231", scale: "div", mask: "trilu"}.build(), "layer 0: causal"},
		{"no-attention", noAttn, "no attention block found"},
		{"softmax-not-attention", softmaxOnly, "1 Softmax not an attention core"},
	} {
		t.Run(c.name, func(t *testing.T) {
			pm, prep, perr := ToPerformer(c.m, PerformerOptions{Features: 8, FeatureMap: ops.FeaturesFavorPlus, Center: CenterOff})
			lm, lrep, lerr := ToLinformer(c.m, LinformerOptions{Init: "gaussian", K: 4, MaxLen: 8})
			pl, plrep, plerr := ToLocalPooled(c.m, LocalPooledOptions{})
			la, larep, laerr := ToLARA(c.m, LaraOptions{Landmarks: 4})
			for _, r := range []struct {
				op  string
				m   *onnxpb.ModelProto
				rep *Report
				err error
			}{{"performer", pm, prep, perr}, {"linformer", lm, lrep, lerr}, {"local-pooled", pl, plrep, plerr}, {"lara", la, larep, laerr}} {
				if c.name == "causal" && r.op == "performer" {
					continue // the causal Performer converts it (causal_test.go)
				}
				if !errors.Is(r.err, ErrNothingConverted) || !strings.Contains(r.err.Error(), c.want) || !strings.HasPrefix(r.err.Error(), "convert: ") {
					t.Errorf("%s: error %v, want ErrNothingConverted naming %q", r.op, r.err, c.want)
				}
				if r.m != nil || r.rep == nil || len(r.rep.Converted) != 0 {
					t.Errorf("%s: model %v, report %+v; want no model and a report", r.op, r.m != nil, r.rep)
				}
			}
		})
	}
}

// TestAlreadyConverted: a converted model (ai.linearize nodes, or
// LinformerAttention's body inlined as onnxruntime's optimizer inlines
// model-local functions) is reported as converted, its linear attention is
// not found again as softmax attention, and the rewrites refuse it.
func TestAlreadyConverted(t *testing.T) {
	orig := form{name: "plain", opset: 17, k: "0231", scale: "div", mask: "add"}.build()
	lm, _, err := ToLinformer(orig, LinformerOptions{Init: "gaussian", K: 4, MaxLen: 8, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	pm, _, err := ToPerformer(orig, PerformerOptions{Features: 8, Seed: 1, FeatureMap: ops.FeaturesFavorPlus, Center: CenterOff})
	if err != nil {
		t.Fatal(err)
	}
	inl := inlineLinear(t, lm)
	for _, c := range []struct {
		name, op string
		m        *onnxpb.ModelProto
	}{
		{"linformer", "ai.linearize:LinformerAttention", lm},
		{"performer", "ai.linearize:PerformerAttention", pm},
		{"linformer-inlined", "inlined LinformerAttention", inl},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, err := Detect(c.m)
			if err != nil {
				t.Fatal(err)
			}
			if d.Count() != 0 || !d.AlreadyConverted() || len(d.Linear) != 1 || d.Linear[0].Op != c.op {
				t.Fatalf("want no block and one %s, got\n%s", c.op, d.Explain())
			}
			if c.name == "linformer-inlined" {
				if len(d.Unmatched) != 1 || !strings.Contains(d.Unmatched[0].Reason, "projected along the sequence") {
					t.Errorf("unmatched %+v, want the inlined Softmax refused as linear attention", d.Unmatched)
				}
			} else if len(d.Unmatched) != 0 {
				t.Errorf("the op's function body was analysed: %+v", d.Unmatched)
			}
			if !strings.Contains(d.Explain(), "converted already") {
				t.Errorf("Explain does not say the model is converted:\n%s", d.Explain())
			}
			_, _, perr := ToPerformer(c.m, PerformerOptions{Features: 8, FeatureMap: ops.FeaturesFavorPlus, Center: CenterOff})
			_, _, lerr := ToLinformer(c.m, LinformerOptions{Init: "gaussian", K: 4, MaxLen: 8})
			for _, err := range []error{perr, lerr} {
				if !errors.Is(err, ErrNothingConverted) || !strings.Contains(err.Error(), "converted already") || !strings.Contains(err.Error(), c.op) {
					t.Errorf("error %v, want ErrNothingConverted: converted already (%s)", err, c.op)
				}
			}
		})
	}
	// The inlined copy computes what the function does (onnxruntime).
	needORT(t)
	r := rand.New(rand.NewPCG(1, 1))
	x := make([]float32, fB*fS*fHid)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	mask := make([]int64, fB*fS)
	for i := range mask {
		mask[i] = 1
	}
	mask[fB*fS-1] = 0
	in := map[string]*onnx.Tensor{"x": onnx.NewFloat([]int{fB, fS, fHid}, x), "mask": onnx.NewInt64([]int{fB, fS}, mask)}
	out := orig.Graph.Output[0].GetName()
	if d := infer.CompareTensors(runORT(t, inl, in)[out], runORT(t, lm, in)[out]); !d.OK(1e-6) {
		t.Errorf("inlined vs function LinformerAttention: %v", d)
	}
}

// inlineLinear returns m with every ai.linearize call replaced by its
// function body (as onnxruntime's optimizer saves a model at level basic).
func inlineLinear(t *testing.T, m *onnxpb.ModelProto) *onnxpb.ModelProto {
	t.Helper()
	out, err := onnx.InlineFunctions(m, ops.Domain)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
