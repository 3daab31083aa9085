package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
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
