package finetune

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

// TestCorpusFit fits Performer and Linformer conversions of graphs written
// by other exporters: onnxruntime-fused Attention / MultiHeadAttention
// (whose exact output is head-merged) and keras2onnx BERT (whose
// projections read a [B·S, hidden] input). Fitting must not raise any
// layer's error, and the fitted model must validate.
func TestCorpusFit(t *testing.T) {
	dir := filepath.Join("..", "..", "shared", "corpus", "ort-fusion")
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("corpus %s absent", dir)
	}
	if err := infer.ORTAvailable(); err != nil {
		t.Skipf("%v (run scripts/setup.sh)", err)
	}
	for _, name := range []string{"attention_opt.onnx", "attention_mha.onnx", "embed_layer_norm_multiple.onnx", "TFBertForQuestionAnswering.onnx"} {
		orig, err := onnx.Load(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		feed, err := infer.RandomInputs(orig, infer.GraphInputs(orig), infer.RandomOptions{Batch: 2, SeqLen: 7, Seed: 5})
		if err != nil {
			t.Fatal(err)
		}
		var layers []int
		if name == "TFBertForQuestionAnswering.onnx" {
			layers = []int{0, 5} // of 24: keeps the test short
		}
		perf, _, err := convert.ToPerformer(orig, convert.PerformerOptions{Features: 16, Seed: 1, Layers: layers, FeatureMap: ops.FeaturesFavorPlus, Center: convert.CenterOff})
		if err != nil {
			t.Fatal(err)
		}
		lin, _, err := convert.ToLinformer(orig, convert.LinformerOptions{Init: "gaussian", K: 4, MaxLen: 16, Seed: 1, Layers: layers})
		if err != nil {
			t.Fatal(err)
		}
		for _, conv := range []struct {
			op string
			m  *onnxpb.ModelProto
		}{{"performer", perf}, {"linformer", lin}} {
			m := conv.m
			fitted, rep, err := Fit(orig, m, feed, Options{Steps: 20, Batch: 1, Seed: 2})
			if err != nil {
				t.Errorf("%s %s: %v", name, conv.op, err)
				continue
			}
			for _, l := range rep.Layers {
				if l.After > l.Before {
					t.Errorf("%s %s layer %d: %.4g → %.4g", name, conv.op, l.Layer, l.Before, l.After)
				}
			}
			if v, err := infer.ValidateOps(fitted, feed, infer.ValidateOptions{}); err != nil || !v.OK() {
				t.Errorf("%s %s: fitted model does not validate (%v)", name, conv.op, err)
			}
		}
	}
}
