package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
	"google.golang.org/protobuf/proto"
)

// qdqBERT is the small BERT with its first MatMul weight stored as uint8
// behind a DequantizeLinear (per column, axis 1), as QDQ exporters
// write it; edit, when not nil, then breaks the scale S or zero point Z.
func qdqBERT(t *testing.T, edit func(s []float32, z []int32)) *onnxpb.ModelProto {
	t.Helper()
	m := safetyBERT(t)
	var w *onnxpb.TensorProto
	at := -1
	for _, n := range m.Graph.Node {
		if n.GetOpType() != "MatMul" {
			continue
		}
		for i, tp := range m.Graph.Initializer {
			if tp.GetName() == n.Input[1] && len(tp.Dims) == 2 {
				w, at = tp, i
			}
		}
		if w != nil {
			break
		}
	}
	if w == nil {
		t.Fatal("no MatMul weight")
	}
	x, err := onnx.DecodeTensor(w)
	if err != nil {
		t.Fatal(err)
	}
	rows, cols := x.Shape[0], x.Shape[1]
	f := x.Floats()
	s := make([]float32, cols)
	for c := range cols {
		for r := range rows {
			s[c] = max(s[c], float32(math.Abs(float64(f[r*cols+c])))/127)
		}
	}
	q := make([]uint8, len(f))
	for i, v := range f {
		q[i] = uint8(128 + math.Round(float64(v/s[i%cols])))
	}
	z := make([]int32, cols)
	for c := range z {
		z[c] = 128
	}
	if edit != nil {
		edit(s, z)
	}
	wq, _ := onnx.EncodeTensor(w.GetName()+"_q", &onnx.Tensor{DType: onnx.Uint8, Shape: []int{rows, cols}, Data: q})
	st, _ := onnx.EncodeTensor(w.GetName()+"_scale", onnx.NewFloat([]int{cols}, s))
	u8 := int32(onnx.Uint8)
	zt := &onnxpb.TensorProto{Name: ptr(w.GetName() + "_zero_point"), DataType: &u8, Dims: []int64{int64(cols)}, Int32Data: z}
	m.Graph.Initializer[at] = wq
	m.Graph.Initializer = append(m.Graph.Initializer, st, zt)
	axis := &onnxpb.AttributeProto{Name: ptr("axis"), Type: onnxpb.AttributeProto_INT.Enum(), I: ptr(int64(1))}
	dq := &onnxpb.NodeProto{Name: ptr("dq_weight"), OpType: ptr("DequantizeLinear"), Input: []string{wq.GetName(), st.GetName(), zt.GetName()},
		Output: []string{w.GetName()}, Attribute: []*onnxpb.AttributeProto{axis}}
	m.Graph.Node = append([]*onnxpb.NodeProto{dq}, m.Graph.Node...)
	return m
}

func ptr[T any](v T) *T { return &v }

// TestLoadRefusesHostileQuantization: a model whose quantization
// parameters are hostile (a zero point of 300 in a uint8 tensor, a zero
// or NaN scale) or that has no outputs is refused at load by inspect,
// every conversion and the commands that run it, with exit 2 naming the
// node and the value; the sound QDQ model passes every one of them.
func TestLoadRefusesHostileQuantization(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, m *onnxpb.ModelProto) string {
		p := filepath.Join(dir, name)
		writeModel(t, m, p)
		return p
	}
	sound := write("qdq.onnx", qdqBERT(t, nil))
	cases := []struct {
		name, model, want string
	}{
		{"zero point 300", write("zp300.onnx", qdqBERT(t, func(s []float32, z []int32) { z[3] = 300 })),
			`node "dq_weight" (DequantizeLinear): zero point "onnx::MatMul_`},
		{"zero scale", write("scale0.onnx", qdqBERT(t, func(s []float32, z []int32) { s[2] = 0 })),
			`node "dq_weight" (DequantizeLinear): scale "onnx::MatMul_`},
		{"NaN scale", write("scalenan.onnx", qdqBERT(t, func(s []float32, z []int32) { s[0] = float32(math.NaN()) })),
			`value NaN at index 0 is not a finite positive number`},
		{"no outputs", write("nooutputs.onnx", func() *onnxpb.ModelProto {
			m := safetyBERT(t)
			m.Graph.Output = nil
			return m
		}()), "graph: no outputs"},
	}
	cmds := map[string][]string{
		"inspect":          {"inspect", "MODEL"},
		"performer":        {"performer", "MODEL", "-o", "OUT", "--features", "8"},
		"linformer":        {"linformer", "MODEL", "-o", "OUT", "--k", "4"},
		"local-pooled":     {"local-pooled", "MODEL", "-o", "OUT", "--block", "4", "--segments", "2"},
		"lara":             {"lara", "MODEL", "-o", "OUT", "--landmarks", "4"},
		"hedgehog":         {"hedgehog", "MODEL", "-o", "OUT", "--steps", "0"},
		"long":             {"long", "MODEL", "-o", "OUT", "--max-length", "64"},
		"extend-positions": {"extend-positions", "MODEL", "-o", "OUT", "--max-positions", "32"},
		"run":              {"run", "MODEL", "--backend", "native", "--random-inputs", "--seq-len", "8"},
		"compare-backends": {"compare-backends", "MODEL", "--random-inputs", "--seq-len", "8"},
	}
	args := func(c []string, model, out string) []string {
		a := append([]string(nil), c...)
		for i := range a {
			a[i] = strings.NewReplacer("MODEL", model, "OUT", out).Replace(a[i])
		}
		return a
	}
	for name, c := range cmds {
		if name == "compare-backends" && infer.ORTAvailable() != nil {
			continue
		}
		out := filepath.Join(dir, name+"-sound.onnx")
		if code, _, stderr := safeRun(t, args(c, sound, out)...); code != exitOK {
			t.Errorf("%s on the sound QDQ model: exit %d: %s", name, code, stderr)
		}
		for _, k := range cases {
			out := filepath.Join(dir, name+"-"+filepath.Base(k.model))
			code, _, stderr := safeRun(t, args(c, k.model, out)...)
			if code != exitBadInput || !strings.Contains(stderr, k.want) || !strings.Contains(stderr, k.model) {
				t.Errorf("%s, %s: exit %d, stderr %q; want %d naming %q", name, k.name, code, stderr, exitBadInput, k.want)
			}
			if _, err := os.Stat(out); err == nil {
				t.Errorf("%s, %s: wrote %s", name, k.name, out)
			}
		}
	}
}

// keyOffsetBERT is safetyBERT with a large bias on the keys' projection:
// every key shares one large component. Softmax attention is exactly
// invariant to it, but float32 rounds the scores at their full size, so a
// LaraAttention conversion of it is correct and ill-conditioned.
func keyOffsetBERT(t *testing.T, offset float32) *onnxpb.ModelProto {
	t.Helper()
	m := safetyBERT(t)
	for _, tp := range m.Graph.Initializer {
		if tp.GetName() != "encoder.layer.0.attention.self.key.bias" {
			continue
		}
		b, err := onnx.DecodeTensor(tp)
		if err != nil {
			t.Fatal(err)
		}
		for i := range b.Floats() {
			b.Floats()[i] += offset * float32(1-2*(i%2)) * float32(1+i%3)
		}
		nt, err := onnx.EncodeTensor(tp.GetName(), b)
		if err != nil {
			t.Fatal(err)
		}
		proto.Reset(tp)
		proto.Merge(tp, nt)
		return m
	}
	t.Fatal("no key bias")
	return nil
}

// scaleFunctionBody makes the function body of op compute factor× its
// output: the model's op then computes something else than its kernel.
func scaleFunctionBody(t *testing.T, m *onnxpb.ModelProto, op string, factor float32) {
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
		k, err := onnx.EncodeTensor("", onnx.NewFloat(nil, []float32{factor}))
		if err != nil {
			t.Fatal(err)
		}
		f.Node = append(f.Node,
			&onnxpb.NodeProto{OpType: ptr("Constant"), Output: []string{out + "_factor"},
				Attribute: []*onnxpb.AttributeProto{{Name: ptr("value"), Type: onnxpb.AttributeProto_TENSOR.Enum(), T: k}}},
			&onnxpb.NodeProto{OpType: ptr("Mul"), Input: []string{out + "_unscaled", out + "_factor"}, Output: []string{out}})
		return
	}
	t.Fatalf("no function %s", op)
}

// TestValidateToleranceFollowsRounding: validate passes a correct but
// ill-conditioned LaraAttention conversion whose two sides disagree far
// beyond --tolerance, saying that this is float32 rounding; it fails a
// model whose function body computes 1.01× the op, on well- and
// ill-conditioned inputs, with exit 3 and a message naming the cause;
// and --tolerance stays a floor the user can raise.
func TestValidateToleranceFollowsRounding(t *testing.T) {
	backend := "native"
	if infer.ORTAvailable() == nil {
		backend = "ort"
	}
	dir := t.TempDir()
	convertLara := func(name string, offset float32, broken bool) string {
		in := filepath.Join(dir, name+"-base.onnx")
		writeModel(t, keyOffsetBERT(t, offset), in)
		out := filepath.Join(dir, name+".onnx")
		if code, _, stderr := safeRun(t, "lara", in, "-o", out, "--landmarks", "4"); code != exitOK {
			t.Fatalf("lara: exit %d: %s", code, stderr)
		}
		if broken {
			m, err := onnx.Load(out)
			if err != nil {
				t.Fatal(err)
			}
			scaleFunctionBody(t, m, ops.LaraOp, 1.01)
			writeModel(t, m, out)
		}
		return out
	}
	validate := func(model string, extra ...string) (int, string, string) {
		args := append([]string{"validate", model, "--backend", backend, "--random-inputs", "--seq-len", "16", "--batch", "2"}, extra...)
		return safeRun(t, args...)
	}

	ill := convertLara("ill", 100, false)
	code, stdout, stderr := validate(ill)
	if code != exitOK || !strings.Contains(stdout, "ok (rounding)") || !strings.Contains(stdout, "is float32 rounding, not a wrong result") {
		t.Errorf("ill-conditioned, correct: exit %d\n%s%s", code, stdout, stderr)
	}
	code, stdout, _ = validate(ill, "--json")
	var res struct {
		OK     bool            `json:"ok"`
		Checks []infer.OpCheck `json:"checks"`
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil || code != exitOK || !res.OK || len(res.Checks) != 1 {
		t.Fatalf("--json: exit %d, %v:\n%s", code, err, stdout)
	}
	ch := res.Checks[0]
	if ch.Diff.Scaled <= infer.DefaultTolerance {
		t.Fatalf("err/scale %.3g within the tolerance: the model is not ill-conditioned", ch.Diff.Scaled)
	}
	if r := ch.Rounding; r == nil || !r.Explained || r.Error != "" {
		t.Errorf("--json rounding %+v", r)
	}
	// Raised above the disagreement, the floor decides alone.
	code, stdout, _ = validate(ill, "--tolerance", fmt.Sprint(2*ch.Diff.Scaled))
	if code != exitOK || strings.Contains(stdout, "rounding") {
		t.Errorf("raised tolerance: exit %d\n%s", code, stdout)
	}

	for _, c := range []struct {
		name   string
		offset float32
	}{{"broken", 0}, {"broken-ill", 30}} {
		code, stdout, stderr := validate(convertLara(c.name, c.offset, true))
		want := "the function body and the Go kernel (the reference) compute different things"
		if code != exitRuntime || !strings.Contains(stderr, want) || !strings.Contains(stdout, "FAIL: LaraAttention node") {
			t.Errorf("%s: exit %d, want %d naming %q:\n%s%s", c.name, code, exitRuntime, want, stdout, stderr)
		}
	}
}
