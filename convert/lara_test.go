package convert

import (
	"bytes"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

// The bundled bert-tiny converts to LaraAttention: one node and one noise
// initializer [1, C·Samples, D] per layer, the same options give the same
// bytes and another seed other noise, and the converted model runs in
// onnxruntime (function bodies) and the native backend (Go kernels) to the
// same outputs and passes validate on a padded batch.
func TestLaraBertTiny(t *testing.T) {
	m := loadModel(t, filepath.Join("..", "testdata", "bert-tiny.onnx"))
	o := LaraOptions{Landmarks: 4, Samples: 2, Seed: 5}
	encode := encodeWith(t, m, ToLARA)
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
	in := modelFeeds(t, m, 24, 7, 3, false) // the last row has 7 padded tokens
	ort, nat := runORT(t, cm, in), runNative(t, cm, in)
	for name, w := range ort {
		if d := infer.CompareTensors(nat[name], w); !d.OK(1e-4) {
			t.Errorf("output %s: native vs onnxruntime: %v", name, d)
		}
		for _, x := range w.Floats() {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				t.Fatalf("output %s holds %g", name, x)
			}
		}
	}
	validateORT(t, "", cm, in, len(rep.Converted))
}

// The text fixtures (unfused and fused, several opsets and exporters)
// convert, pass validate, and keep padding invariance: 5 real tokens
// padded to 8 give the same outputs as the 5 alone, in onnxruntime.
func TestFixturesLara(t *testing.T) {
	needORT(t)
	for _, f := range textFixtures(t) {
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
				validateORT(t, fmt.Sprintf("C=%d: ", o.Landmarks), cm, fixtureFeeds(f, 2, 8, []int{8, 6}, 11), f.Convertible)
				checkPadding(t, fmt.Sprintf("C=%d", o.Landmarks), f, cm, 8)
			}
		})
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
