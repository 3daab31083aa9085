package infer

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/models"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
	"github.com/linearize/linearize/tokenize"
	"google.golang.org/protobuf/proto"
)

func skipWithoutORT(t *testing.T) {
	t.Helper()
	if err := ORTAvailable(); err != nil {
		t.Skipf("%v (run scripts/setup.sh)", err)
	}
}

// paddedFeed draws inputs for a BERT graph and pads the end of row 1, so
// that the converted ops see a non-trivial key bias.
func paddedFeed(t *testing.T, m *onnxpb.ModelProto, B, S int, seed uint64) map[string]*onnx.Tensor {
	t.Helper()
	feed, err := RandomInputs(m, GraphInputs(m), RandomOptions{Batch: B, SeqLen: S, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	mask := feed["attention_mask"].Int64s()
	for s := S - 3; s < S; s++ {
		mask[1*S+s] = 0
	}
	return feed
}

// scaleBody makes the function body of op compute factor× its output, so
// that the body and the op's Go kernel no longer agree.
func scaleBody(t *testing.T, m *onnxpb.ModelProto, op string, factor float32) {
	t.Helper()
	for _, f := range m.Functions {
		if f.GetName() != op {
			continue
		}
		out := f.Output[0]
		for _, n := range f.Node {
			for i, o := range n.Output {
				if o == out {
					n.Output[i] = out + "_unscaled"
				}
			}
		}
		c, err := onnx.EncodeTensor("", onnx.NewFloat(nil, []float32{factor}))
		if err != nil {
			t.Fatal(err)
		}
		f.Node = append(f.Node,
			&onnxpb.NodeProto{OpType: proto.String("Constant"), Output: []string{out + "_factor"},
				Attribute: []*onnxpb.AttributeProto{{Name: proto.String("value"), Type: onnxpb.AttributeProto_TENSOR.Enum(), T: c}}},
			&onnxpb.NodeProto{OpType: proto.String("Mul"), Input: []string{out + "_unscaled", out + "_factor"}, Output: []string{out}})
		return
	}
	t.Fatalf("no function %s", op)
}

// tinyConversions builds the BERT of cfg and converts it to Performer (32
// features) and to Linformer (k = 16 over linMaxLen positions), seed 3.
func tinyConversions(t *testing.T, cfg models.Config, linMaxLen int) (base, perf, lin *onnxpb.ModelProto) {
	t.Helper()
	base, err := models.BERT(cfg)
	if err != nil {
		t.Fatal(err)
	}
	perf, _, err = convert.ToPerformer(base, convert.PerformerOptions{Features: 32, Seed: 3, FeatureMap: ops.FeaturesFavorPlus, Center: convert.CenterOff})
	if err != nil {
		t.Fatal(err)
	}
	lin, _, err = convert.ToLinformer(base, convert.LinformerOptions{Init: "gaussian", K: 16, MaxLen: linMaxLen, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	return base, perf, lin
}

// TestValidateConverted converts a small BERT with convert.ToPerformer and
// convert.ToLinformer, checks every converted op (onnxruntime running the
// function body vs the Go kernel), then breaks the function body and
// checks that validation fails.
func TestValidateConverted(t *testing.T) {
	skipWithoutORT(t)
	cfg := models.TinyConfig()
	base, perf, lin := tinyConversions(t, cfg, cfg.MaxPositions)
	for _, c := range []struct {
		name string
		m    *onnxpb.ModelProto
		op   string
	}{{"performer", perf, ops.PerformerOp}, {"linformer", lin, ops.LinformerOp}} {
		// The native backend checks the kernels against the function
		// bodies it interprets, never against themselves: a broken body
		// fails there too.
		for _, backend := range []string{"ort", "native"} {
			validateBackend(t, c.name+"/"+backend, c.m, c.op, backend, cfg.Layers)
		}
	}
	if _, err := ValidateOps(base, paddedFeed(t, base, 2, 8, 1), ValidateOptions{}); err == nil || !strings.Contains(err.Error(), "ai.linearize") {
		t.Errorf("unconverted model: err = %v", err)
	}
}

func validateBackend(t *testing.T, name string, m *onnxpb.ModelProto, op, backend string, layers int) {
	t.Helper()
	feed := paddedFeed(t, m, 2, 24, 5)
	v, err := ValidateOps(m, feed, ValidateOptions{Backend: backend})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if len(v.Checks) != layers || !v.OK() {
		var buf bytes.Buffer
		v.WriteTable(&buf)
		t.Fatalf("%s: %d checks, ok %v:\n%s", name, len(v.Checks), v.OK(), buf.String())
	}
	for _, ch := range v.Checks {
		if ch.Op != op || ch.Diff.N == 0 || ch.Diff.Scale == 0 {
			t.Errorf("%s: check %+v", name, ch)
		}
	}
	bad := proto.Clone(m).(*onnxpb.ModelProto)
	scaleBody(t, bad, op, 1.01)
	v, err = ValidateOps(bad, feed, ValidateOptions{Backend: backend})
	if err != nil {
		t.Fatalf("%s tampered: %v", name, err)
	}
	if v.Failed() != layers {
		t.Errorf("%s tampered: %d of %d checks failed, want all", name, v.Failed(), len(v.Checks))
	}
	for _, ch := range v.Checks {
		// 1.01× the output: error ≈ 1% of the output scale.
		if ch.Diff.Scaled < 0.005 || ch.Diff.Scaled > 0.011 {
			t.Errorf("%s tampered: err/scale %.4g, want ≈ 0.01", name, ch.Diff.Scaled)
		}
	}
	var buf bytes.Buffer
	if err := v.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var back struct {
		OK     bool      `json:"ok"`
		Checks []OpCheck `json:"checks"`
	}
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil || back.OK || len(back.Checks) != layers {
		t.Errorf("%s: JSON %v %+v", name, err, back)
	}
}

// TestValidateRealModel converts the pretrained MiniLM and validates every
// op on tokenized text.
func TestValidateRealModel(t *testing.T) {
	needRealModel(t)
	m, err := onnx.Load(realModel)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenize.LoadForModel(realModel)
	if err != nil {
		t.Fatal(err)
	}
	perf, _, err := convert.ToPerformer(m, convert.PerformerOptions{Features: 64, Seed: 1, FeatureMap: ops.FeaturesFavorPlus, Center: convert.CenterOff})
	if err != nil {
		t.Fatal(err)
	}
	lin, _, err := convert.ToLinformer(m, convert.LinformerOptions{K: 32, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{"A man is eating food.", "Linear attention replaces softmax with a kernel feature map, so cost grows linearly."}
	for name, c := range map[string]*onnxpb.ModelProto{"performer": perf, "linformer": lin} {
		ti, err := TextInputs(tok, GraphInputs(c), texts, 0, 512)
		if err != nil {
			t.Fatal(err)
		}
		v, err := ValidateOps(c, ti.Feed, ValidateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		v.WriteTable(&buf)
		t.Logf("%s:\n%s", name, buf.String())
		if !v.OK() || len(v.Checks) != 6 {
			t.Errorf("%s: validation failed", name)
		}
	}
}
