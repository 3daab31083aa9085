package infer

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// unaryModel builds y = op(x, c) (or op(x) when c is nil) for x [B,S,D]
// float, with the output called out and an internal value "mid" = x.
func unaryModel(t *testing.T, op, out string, c *onnx.Tensor) *onnxpb.ModelProto {
	t.Helper()
	str := func(s string) *string { return &s }
	dims := []onnx.Dim{{Value: -1, Param: "b"}, {Value: -1, Param: "s"}, {Value: -1, Param: "d"}}
	g := &onnxpb.GraphProto{Name: str("g"),
		Input:  []*onnxpb.ValueInfoProto{onnx.MakeValueInfo("x", onnx.Float, dims)},
		Output: []*onnxpb.ValueInfoProto{onnx.MakeValueInfo(out, onnx.Float, dims)},
	}
	g.Node = append(g.Node, &onnxpb.NodeProto{OpType: str("Identity"), Input: []string{"x"}, Output: []string{"mid"}})
	in := []string{"mid"}
	if c != nil {
		tp, err := onnx.EncodeTensor("c", c)
		if err != nil {
			t.Fatal(err)
		}
		g.Initializer = append(g.Initializer, tp)
		in = append(in, "c")
	}
	g.Node = append(g.Node, &onnxpb.NodeProto{OpType: str(op), Input: in, Output: []string{out}})
	ir, opset := int64(8), int64(17)
	return &onnxpb.ModelProto{IrVersion: &ir, Graph: g, OpsetImport: []*onnxpb.OperatorSetIdProto{{Version: &opset}}}
}

// TestCompareModelsClosedForm checks the metrics on transformations whose
// answers are known exactly: y = x (identical), y = 2x (cosine 1,
// relative error 1), y = −x (cosine −1, arg-max never agrees for distinct
// values), y = x + p with p non-zero only on padded positions (identical
// once the mask is applied).
func TestCompareModelsClosedForm(t *testing.T) {
	B, S, D := 2, 5, 4
	rng := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, B*S*D)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	mask := []int64{1, 1, 1, 0, 0, 1, 1, 1, 1, 1}
	pad := make([]float32, B*S)
	for i, m := range mask {
		if m == 0 {
			pad[i] = 100
		}
	}
	feed := map[string]*onnx.Tensor{"x": onnx.NewFloat([]int{B, S, D}, x)}
	for _, out := range []string{"logits", "hidden"} {
		models := []*onnxpb.ModelProto{
			unaryModel(t, "Identity", out, nil),
			unaryModel(t, "Identity", out, nil),
			unaryModel(t, "Mul", out, onnx.NewFloat(nil, []float32{2})),
			unaryModel(t, "Neg", out, nil),
			unaryModel(t, "Add", out, onnx.NewFloat([]int{B, S, 1}, pad)),
		}
		labels := []string{"ref", "same", "double", "neg", "padded"}
		mc, err := CompareModels(models, labels, feed, ModelCompareOptions{Backend: "native", Values: []string{"mid"}, Mask: mask, Batch: B, SeqLen: S})
		if err != nil {
			t.Fatal(err)
		}
		rows := map[string]ValueComparison{}
		for _, r := range mc.Rows {
			if r.Mismatch != "" {
				t.Fatalf("%s %s: %s", r.Model, r.Value, r.Mismatch)
			}
			rows[r.Model+"/"+r.Value] = r
		}
		if len(rows) != 8 {
			t.Fatalf("%d rows, want 8 (4 models × output and mid)", len(rows))
		}
		near := func(name string, got, want float64) {
			t.Helper()
			if math.Abs(got-want) > 1e-9 {
				t.Errorf("%s: %s = %v, want %v", out, name, got, want)
			}
		}
		logits := out == "logits"
		for _, m := range []string{"same", "padded"} {
			r := rows[m+"/"+out]
			near(m+" max abs", r.MaxAbs, 0)
			near(m+" cosine", r.Cosine, 1)
			near(m+" token cos min", r.TokenCosMin, 1)
			near(m+" pooled cos min", *r.PooledCosMin, 1)
			if logits {
				near(m+" top1", *r.Top1, 1)
			} else if r.Top1 != nil {
				t.Errorf("%s: top-1 reported for a hidden state", m)
			}
		}
		d := rows["double/"+out]
		near("double rel err", d.RelErr, 1)
		near("double token cos mean", d.TokenCosMean, 1)
		near("double pooled cos mean", *d.PooledCosMean, 1)
		n := rows["neg/"+out]
		near("neg cosine", n.Cosine, -1)
		near("neg token cos max", n.TokenCosMin, -1)
		near("neg rel err", n.RelErr, 2)
		if logits {
			near("neg top1", *n.Top1, 0)
		}
		// Unmasked max abs of 2x vs x is the max |x| over real tokens.
		var want float64
		for i, m := range mask {
			if m == 1 {
				for k := 0; k < D; k++ {
					want = math.Max(want, math.Abs(float64(x[i*D+k])))
				}
			}
		}
		near("double max abs", d.MaxAbs, want)
		near("mid identical", rows["neg/mid"].MaxAbs, 0)
	}

	var buf bytes.Buffer
	mc, err := CompareModels([]*onnxpb.ModelProto{unaryModel(t, "Identity", "y", nil), unaryModel(t, "Identity", "z", nil)},
		[]string{"a", "b"}, feed, ModelCompareOptions{Backend: "native"})
	if err != nil {
		t.Fatal(err)
	}
	if mc.Rows[0].Mismatch == "" {
		t.Error("differently named outputs: no mismatch")
	}
	if err := mc.WriteTable(&buf); err != nil || !strings.Contains(buf.String(), "missing") {
		t.Errorf("table: %v\n%s", err, buf.String())
	}
	buf.Reset()
	if err := mc.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var back ModelComparison
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil || len(back.Rows) != 1 {
		t.Errorf("JSON round trip: %v %+v", err, back)
	}
	if _, err := CompareModels(nil, nil, feed, ModelCompareOptions{}); err == nil {
		t.Error("no models: no error")
	}
}
