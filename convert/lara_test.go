package convert

import (
	"bytes"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
	"github.com/linearize/linearize/runtime"
)

// The bundled bert-tiny converts to LaraAttention: one node and one noise
// initializer [1, C·Samples, D] per layer, the same options give the same
// bytes and another seed other noise, and the converted model runs in
// onnxruntime (function bodies) and the native backend (Go kernels) to the
// same outputs and passes validate on a padded batch.
func TestLaraBertTiny(t *testing.T) {
	m := loadModel(t, filepath.Join("..", "testdata", "bert-tiny.onnx"))
	o := LaraOptions{Landmarks: 4, Samples: 2, Seed: 5}
	encode := func(o LaraOptions) []byte {
		out, _, err := ToLARA(m, o)
		if err != nil {
			t.Fatal(err)
		}
		data, err := onnx.Encode(out)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	if !bytes.Equal(encode(o), encode(o)) {
		t.Error("the same model and options gave different bytes")
	}
	other := o
	other.Seed = 6
	if bytes.Equal(encode(o), encode(other)) {
		t.Error("another seed gave the same model")
	}
	cm, rep, err := ToLARA(m, o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Op != ops.LaraOp || len(rep.Converted) == 0 || len(rep.Converted) != rep.Blocks {
		t.Fatalf("report: op %s, %d of %d blocks converted: %+v", rep.Op, len(rep.Converted), rep.Blocks, rep.Skipped)
	}
	inits := map[string]*onnxpb.TensorProto{}
	for _, x := range cm.Graph.Initializer {
		inits[x.GetName()] = x
	}
	nodes := 0
	for _, n := range cm.Graph.Node {
		if n.GetOpType() != ops.LaraOp {
			continue
		}
		nodes++
		if n.GetDomain() != ops.Domain || len(n.Input) != 5 || onnx.AttrInt(n, "landmarks", 0) != 4 || !(onnx.AttrFloat(n, "scale", 0) > 0) {
			t.Errorf("node %s: domain %q, inputs %v, attributes %v", n.GetName(), n.GetDomain(), n.Input, n.Attribute)
			continue
		}
		noise := inits[n.Input[3]]
		if noise == nil {
			t.Errorf("node %s: noise %s is not an initializer", n.GetName(), n.Input[3])
			continue
		}
		if d := noise.GetDims(); len(d) != 3 || d[0] != 1 || d[1] != 8 || d[2] != int64(rep.Converted[0].HeadDim) {
			t.Errorf("node %s: noise dims %v, want [1 8 %d]", n.GetName(), d, rep.Converted[0].HeadDim)
		}
	}
	if nodes != len(rep.Converted) {
		t.Errorf("%d LaraAttention nodes, report says %d converted", nodes, len(rep.Converted))
	}
	if want := int64(rep.Blocks * 8 * rep.Converted[0].HeadDim); rep.Params != want {
		t.Errorf("report params %d, want %d", rep.Params, want)
	}
	needORT(t)
	s, err := runtime.NewORTSession(m, runtime.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	in := feeds(t, s.Inputs(), 24, 7, 3) // the last row has 7 padded tokens
	s.Close()
	ort, nat := runORT(t, cm, in), runNative(t, cm, in)
	for name, w := range ort {
		if d := runtime.CompareTensors(nat[name], w); !d.OK(1e-4) {
			t.Errorf("output %s: native vs onnxruntime: %v", name, d)
		}
		for _, x := range w.Floats() {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				t.Fatalf("output %s holds %g", name, x)
			}
		}
	}
	val, err := runtime.ValidateOps(cm, in, runtime.ValidateOptions{Backend: "ort"})
	if err != nil {
		t.Fatal(err)
	}
	if !val.OK() || len(val.Checks) != len(rep.Converted) {
		var buf bytes.Buffer
		val.WriteTable(&buf)
		t.Fatalf("validate failed:\n%s", buf.String())
	}
}

// The text fixtures (unfused and fused, several opsets and exporters)
// convert, pass validate, and keep padding invariance: 5 real tokens
// padded to 8 give the same outputs as the 5 alone, in onnxruntime.
func TestFixturesLara(t *testing.T) {
	needORT(t)
	files := map[string]bool{"bert_eager_op14.onnx": true, "bert_eager_op11.onnx": true, "bert_eager_op14_fused.onnx": true, "bert_sdpa_op17.onnx": true}
	for _, f := range fixtures(t) {
		if !files[f.File] {
			continue
		}
		delete(files, f.File)
		t.Run(f.File, func(t *testing.T) {
			m := loadModel(t, filepath.Join(fixtureDir, f.File))
			// C = 3 < 5 real tokens (segments) and C = 16 > 8 (one token per
			// landmark, repeated).
			for _, o := range []LaraOptions{{Landmarks: 3, Samples: 2, Seed: 1}, {Landmarks: 16, Seed: 2}} {
				cm, rep, err := ToLARA(m, o)
				if err != nil {
					t.Fatal(err)
				}
				if len(rep.Converted) != f.Convertible {
					t.Fatalf("converted %d blocks, want %d: %+v", len(rep.Converted), f.Convertible, rep.Skipped)
				}
				full := fixtureFeeds(f, 2, 8, []int{8, 6}, 11)
				val, err := runtime.ValidateOps(cm, full, runtime.ValidateOptions{Backend: "ort"})
				if err != nil {
					t.Fatal(err)
				}
				if !val.OK() || len(val.Checks) != f.Convertible {
					var buf bytes.Buffer
					val.WriteTable(&buf)
					t.Fatalf("C=%d: validate failed:\n%s", o.Landmarks, buf.String())
				}
				padded := fixtureFeeds(f, 1, 8, []int{5}, 13)
				short := map[string]*onnx.Tensor{}
				for k, x := range padded {
					short[k] = onnx.NewInt64([]int{1, 5}, append([]int64(nil), x.Int64s()[:5]...))
				}
				a, b := runORT(t, cm, padded)["last_hidden_state"], runORT(t, cm, short)["last_hidden_state"]
				if d := runtime.CompareTensors(prefix(a, 5), b); !d.OK(1e-5) {
					t.Errorf("C=%d: padded vs unpadded outputs at real tokens: %v", o.Landmarks, d)
				}
			}
		})
	}
	for f := range files {
		t.Errorf("fixture %s not in the manifest", f)
	}
}

func TestLaraOptions(t *testing.T) {
	m := loadModel(t, filepath.Join("..", "testdata", "bert-tiny.onnx"))
	_, rep, err := ToLARA(m, LaraOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Options.Landmarks != DefaultLaraLandmarks || rep.Options.Samples != 1 || rep.Options.Sigma != 1.0 {
		t.Errorf("defaults: options %v", rep.Options)
	}
	for _, c := range []struct {
		o    LaraOptions
		want string
	}{
		{LaraOptions{Landmarks: -2}, "landmarks -2"},
		{LaraOptions{Landmarks: 1 << 20}, "landmarks"},
		{LaraOptions{Samples: -1}, "samples -1"},
		{LaraOptions{Landmarks: 1024, Samples: 1 << 12}, "samples"},
		{LaraOptions{Sigma: -1}, "sigma"},
		{LaraOptions{Sigma: math.Inf(1)}, "sigma"},
		{LaraOptions{Layers: []int{99}}, "layer 99"},
	} {
		if _, _, err := ToLARA(m, c.o); err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "convert: ") {
			t.Errorf("%+v: error %v, want one naming %q", c.o, err, c.want)
		}
	}
}
