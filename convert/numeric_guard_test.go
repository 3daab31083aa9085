package convert

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/models"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

// largeQKBERT is the tiny BERT with its query and key projection weights
// drawn with scale times the usual standard deviation (0.02), so that
// q·k/√D reaches magnitudes where a naive exp overflows.
func largeQKBERT(t *testing.T, scale float64) *onnxpb.ModelProto {
	t.Helper()
	cfg := models.TinyConfig()
	r := rand.New(rand.NewPCG(11, uint64(scale*1000)))
	cfg.Weights = map[string]*onnx.Tensor{}
	for l := 0; l < cfg.Layers; l++ {
		for _, p := range []string{"query", "key"} {
			w := make([]float32, cfg.Hidden*cfg.Hidden)
			for i := range w {
				w[i] = float32(r.NormFloat64() * 0.02 * scale)
			}
			cfg.Weights[fmt.Sprintf("encoder.layer.%d.attention.self.%s.weight", l, p)] = onnx.NewFloat([]int{cfg.Hidden, cfg.Hidden}, w)
		}
	}
	m, err := models.BERT(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// nonFinite counts NaN and ±Inf elements of the float outputs.
func nonFinite(out map[string]*onnx.Tensor) (bad int, names []string) {
	for name, x := range out {
		d, ok := x.Data.([]float32)
		if !ok {
			continue
		}
		n := 0
		for _, v := range d {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				n++
			}
		}
		if n > 0 {
			names = append(names, fmt.Sprintf("%s (%d of %d)", name, n, len(d)))
		}
		bad += n
	}
	return bad, names
}

// TestLargeQKNormsStayFinite: with Q/K weights scaled ×10 (and ×30), the
// Performer and Linformer conversions run in onnxruntime and in the native
// backend without NaN or Inf in any output, with and without padding, and
// the two backends agree.
func TestLargeQKNormsStayFinite(t *testing.T) {
	needORT(t)
	// The scaled weights must really produce large scores: ×10 gives
	// |q·k|/√D around 12, ×30 beyond 88, where exp overflows float32.
	for _, scale := range []float64{10, 30} {
		m := largeQKBERT(t, scale)
		if got, want := maxScore(t, m), map[float64]float64{10: 8, 30: 88}[scale]; got < want {
			t.Fatalf("x%g: largest attention score %.3g, want at least %g (the test lost its point)", scale, got, want)
		}
		conv := []struct {
			name string
			run  func() (*onnxpb.ModelProto, *Report, error)
		}{
			{"original", func() (*onnxpb.ModelProto, *Report, error) { return m, &Report{Converted: make([]BlockReport, 2)}, nil }},
			{"performer", func() (*onnxpb.ModelProto, *Report, error) {
				return ToPerformer(m, PerformerOptions{Features: 64, Seed: 5, FeatureMap: ops.FeaturesFavorPlus, Center: CenterOff})
			}},
			{"performer-trig", func() (*onnxpb.ModelProto, *Report, error) {
				return ToPerformer(m, PerformerOptions{Features: 64, Seed: 5, Kernel: "trig", FeatureMap: ops.FeaturesFavorPlus, Center: CenterOff})
			}},
			{"linformer", func() (*onnxpb.ModelProto, *Report, error) {
				return ToLinformer(m, LinformerOptions{Init: "gaussian", K: 16, MaxLen: 128, Seed: 5})
			}},
		}
		for _, c := range conv {
			for _, shape := range []struct{ seq, pad int }{{16, 0}, {64, 10}, {128, 100}} {
				t.Run(fmt.Sprintf("x%g/%s/seq%d-pad%d", scale, c.name, shape.seq, shape.pad), func(t *testing.T) {
					cm, rep, err := c.run()
					if err != nil {
						t.Fatal(err)
					}
					if len(rep.Converted) != 2 {
						t.Fatalf("converted %d blocks, want 2", len(rep.Converted))
					}
					ort, err := infer.NewORTSession(cm, infer.Options{Threads: 1})
					if err != nil {
						t.Fatalf("onnxruntime session: %v", err)
					}
					defer ort.Close()
					in := feeds(t, ort.Inputs(), shape.seq, shape.pad, 3)
					ref, err := ort.Run(in)
					if err != nil {
						t.Fatalf("onnxruntime run: %v", err)
					}
					nat, err := infer.NewNativeSession(cm, infer.Options{Threads: 1})
					if err != nil {
						t.Fatalf("native session: %v", err)
					}
					defer nat.Close()
					got, err := nat.Run(in)
					if err != nil {
						t.Fatalf("native run: %v", err)
					}
					if n, where := nonFinite(ref); n > 0 {
						t.Errorf("onnxruntime: %d non-finite values in %v", n, where)
					}
					if n, where := nonFinite(got); n > 0 {
						t.Errorf("native: %d non-finite values in %v", n, where)
					}
					for name, r := range ref {
						d := infer.CompareTensors(got[name], r)
						if !d.OK(1e-3) {
							t.Errorf("%s: native and onnxruntime disagree: %v", name, d)
						}
					}
				})
			}
		}
	}
}

// maxScore returns the largest |score| entering a Softmax of m (masked
// entries, below −1000, left out), computed by onnxruntime.
func maxScore(t *testing.T, m *onnxpb.ModelProto) float64 {
	t.Helper()
	var names []string
	for _, n := range m.Graph.Node {
		if n.GetOpType() == "Softmax" {
			names = append(names, n.Input[0])
		}
	}
	s, err := infer.NewORTSession(m, infer.Options{Threads: 1, Expose: names})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out, err := s.Run(feeds(t, s.Inputs(), 64, 10, 3), names...)
	if err != nil {
		t.Fatal(err)
	}
	mx := 0.0
	for _, x := range out {
		for _, v := range x.Data.([]float32) {
			if v > -1000 {
				mx = math.Max(mx, math.Abs(float64(v)))
			}
		}
	}
	return mx
}
