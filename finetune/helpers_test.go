package finetune

import (
	"math"
	"testing"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/models"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// tinyBERT skips without onnxruntime and returns the tiny BERT.
func tinyBERT(t *testing.T) *onnxpb.ModelProto {
	t.Helper()
	if err := infer.ORTAvailable(); err != nil {
		t.Skipf("%v (run scripts/setup.sh)", err)
	}
	orig, err := models.BERT(models.TinyConfig())
	if err != nil {
		t.Fatal(err)
	}
	return orig
}

// tinyFitSetup skips without onnxruntime and returns the tiny BERT with
// seeded random inputs of seq tokens: batch rows of calibration inputs
// (seed 1) and 4 held-out rows (seed 99).
func tinyFitSetup(t *testing.T, batch, seq int) (orig *onnxpb.ModelProto, calib, held map[string]*onnx.Tensor) {
	t.Helper()
	orig = tinyBERT(t)
	inputs := infer.GraphInputs(orig)
	calib, err := infer.RandomInputs(orig, inputs, infer.RandomOptions{Batch: batch, SeqLen: seq, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	held, err = infer.RandomInputs(orig, inputs, infer.RandomOptions{Batch: 4, SeqLen: seq, Seed: 99})
	if err != nil {
		t.Fatal(err)
	}
	return orig, calib, held
}

// mergedValues names the merged attention output of each block Detect
// finds in orig.
func mergedValues(t *testing.T, orig *onnxpb.ModelProto) []string {
	t.Helper()
	det, err := convert.Detect(orig)
	if err != nil {
		t.Fatal(err)
	}
	var values []string
	for _, b := range det.Blocks {
		values = append(values, infer.MergedValue(orig, b.Output))
	}
	return values
}

// checkLayerFit fails unless rep has one layer per layer of the tiny BERT,
// each with its error after fitting below frac of its error before.
func checkLayerFit(t *testing.T, rep *Report, frac float64) {
	t.Helper()
	if n := models.TinyConfig().Layers; len(rep.Layers) != n {
		t.Fatalf("%d layers fitted, want %d", len(rep.Layers), n)
	}
	for _, l := range rep.Layers {
		t.Logf("layer %d: relative error %.4f → %.4f", l.Layer, l.Before, l.After)
		if !(l.After < frac*l.Before) {
			t.Errorf("layer %d: fit did not reduce the error enough: %.4f → %.4f", l.Layer, l.Before, l.After)
		}
	}
}

// compareFit compares orig with conv ("before") and fitted ("after") on 4
// held-out rows of seq tokens, and returns per model the summed relative
// error of the values (layer outputs) and last_hidden_state's mean-pooled
// cosine.
func compareFit(t *testing.T, orig, conv, fitted *onnxpb.ModelProto, held map[string]*onnx.Tensor, seq int, values []string) (layerErr, pooled map[string]float64) {
	t.Helper()
	mc, err := infer.CompareModels([]*onnxpb.ModelProto{orig, conv, fitted}, []string{"orig", "before", "after"}, held,
		infer.ModelCompareOptions{Batch: 4, SeqLen: seq, Values: values})
	if err != nil {
		t.Fatal(err)
	}
	layerErr, pooled = map[string]float64{}, map[string]float64{}
	for _, r := range mc.Rows {
		if r.Value == "last_hidden_state" && r.PooledCosMean != nil {
			pooled[r.Model] = *r.PooledCosMean
		}
		if r.Kind == "layer" {
			layerErr[r.Model] += r.RelErr
		}
	}
	return layerErr, pooled
}

// checkValidates fails unless m's converted ops validate on feed.
func checkValidates(t *testing.T, m *onnxpb.ModelProto, feed map[string]*onnx.Tensor) {
	t.Helper()
	v, err := infer.ValidateOps(m, feed, infer.ValidateOptions{})
	if err != nil || !v.OK() {
		t.Errorf("fitted model does not validate: %v", err)
	}
}

// sameEncoding reports whether a and b encode to the same bytes.
func sameEncoding(t *testing.T, a, b *onnxpb.ModelProto) bool {
	t.Helper()
	x, err := onnx.Encode(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := onnx.Encode(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(x) == string(y)
}

// changedInitializers counts m's initializers that differ from conv's of
// the same name.
func changedInitializers(conv, m *onnxpb.ModelProto) int {
	before := map[string]*onnxpb.TensorProto{}
	for _, tp := range conv.Graph.Initializer {
		before[tp.GetName()] = tp
	}
	changed := 0
	for _, tp := range m.Graph.Initializer {
		if !proto.Equal(tp, before[tp.GetName()]) {
			changed++
		}
	}
	return changed
}

// validSquares is Σ y² over the valid query rows of y [B,H,S,Dv].
func validSquares(y []float64, valid []bool, b, h, s, dv int) float64 {
	var ref float64
	for bi := 0; bi < b; bi++ {
		for hi := 0; hi < h; hi++ {
			for i := 0; i < s; i++ {
				if valid[bi*s+i] {
					for _, x := range y[((bi*h+hi)*s+i)*dv:][:dv] {
						ref += x * x
					}
				}
			}
		}
	}
	return ref
}

// numericGrad returns the central differences (step 1e-6) of loss with
// respect to each entry of x, which it leaves as it found it.
func numericGrad(x []float64, loss func() float64) []float64 {
	const h = 1e-6
	num := make([]float64, len(x))
	for i := range x {
		old := x[i]
		x[i] = old + h
		lp := loss()
		x[i] = old - h
		lm := loss()
		x[i] = old
		num[i] = (lp - lm) / (2 * h)
	}
	return num
}

// gradError is the worst error of the analytic gradient g against num,
// relative to max(floor, |num|), and how many entries of num are non-zero.
func gradError(num, g []float64, floor float64) (worst float64, nonzero int) {
	for i := range num {
		worst = math.Max(worst, math.Abs(num[i]-g[i])/math.Max(floor, math.Abs(num[i])))
		if num[i] != 0 {
			nonzero++
		}
	}
	return worst, nonzero
}
