package finetune

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/features"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/models"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

// tinyFeed returns ids and a mask with the given valid lengths (padded to
// seq) for the tiny BERT.
func tinyFeed(t *testing.T, ids [][]int64, valid []int, seq int) map[string]*onnx.Tensor {
	t.Helper()
	b := len(valid)
	id, mask, types := make([]int64, b*seq), make([]int64, b*seq), make([]int64, b*seq)
	for r := 0; r < b; r++ {
		for j := 0; j < seq; j++ {
			id[r*seq+j] = ids[r][j%len(ids[r])]
			if j < valid[r] {
				mask[r*seq+j] = 1
			}
		}
	}
	return map[string]*onnx.Tensor{
		"input_ids":      onnx.NewInt64([]int{b, seq}, id),
		"attention_mask": onnx.NewInt64([]int{b, seq}, mask),
		"token_type_ids": onnx.NewInt64([]int{b, seq}, types),
	}
}

// PerformerMoments captures the original model's queries and keys: its
// moments equal those accumulated here from the original graph's own Q
// and K values (found by Detect and run without any conversion), over the
// valid tokens of each row; and padding (extra rows' pad tokens, a longer
// padded length) changes nothing.
func TestPerformerMomentsCaptureOriginal(t *testing.T) {
	orig := tinyBERT(t)
	for _, in := range infer.GraphInputs(orig) {
		if in.Name != "input_ids" && in.Name != "attention_mask" && in.Name != "token_type_ids" {
			t.Fatalf("unexpected input %s", in.Name)
		}
	}
	ids := [][]int64{{101, 7, 9, 400, 23, 5, 88, 102}, {101, 300, 12, 102}, {101, 45, 46, 47, 48, 49, 102}}
	valid := []int{8, 4, 7}
	const seq = 11
	feed := tinyFeed(t, ids, valid, seq)
	det, got := originalQK(t, orig, feed)
	for _, w := range []string{features.WeightAttention, features.WeightUniform} {
		for _, center := range []bool{false, true} {
			mo, err := PerformerMoments(orig, feed, MomentOptions{NoCenter: !center, Weighting: w, Rows: 2})
			if err != nil {
				t.Fatal(err)
			}
			if len(mo) != len(det.Blocks) {
				t.Fatalf("moments for %d layers, want %d", len(mo), len(det.Blocks))
			}
			for _, b := range det.Blocks {
				checkMoments(t, got, b, valid, seq, mo[b.Layer], center, w)
				if m := mo[b.Layer]; m.Weight[0] != 8+4+7 {
					t.Errorf("weight %g, want 19 valid queries", m.Weight[0])
				}
			}
		}
	}
	// Padding: longer padded rows and a fully padded extra row give the
	// same moments.
	a, err := PerformerMoments(orig, feed, MomentOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := PerformerMoments(orig, tinyFeed(t, append(ids, []int64{101, 5}), append(valid, 0), seq+5), MomentOptions{Rows: 3})
	if err != nil {
		t.Fatal(err)
	}
	for l := range a {
		for e := range a[l].XX {
			for _, p := range [][2]float64{{a[l].XX[e], b[l].XX[e]}, {a[l].YY[e], b[l].YY[e]}, {a[l].XY[e], b[l].XY[e]}} {
				if math.Abs(p[0]-p[1]) > 1e-4*(1+math.Abs(p[0])) {
					t.Fatalf("layer %d: padding changes the moments: %g vs %g", l, p[0], p[1])
				}
			}
		}
	}
}

// originalQK detects the attention blocks of orig and runs it on feed in
// onnxruntime, returning the blocks and every block's Q and K values, as
// the original graph computes them (the reference of the moments).
func originalQK(t *testing.T, orig *onnxpb.ModelProto, feed map[string]*onnx.Tensor) (*convert.Detection, map[string]*onnx.Tensor) {
	t.Helper()
	det, err := convert.Detect(orig)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, b := range det.Blocks {
		names = append(names, b.Q, b.K)
	}
	got, err := runOnce(orig, feed, names, Options{Backend: "ort"})
	if err != nil {
		t.Fatal(err)
	}
	return det, got
}

// checkMoments compares m, the moments PerformerMoments gave for block b,
// with those accumulated here in float64 from the original graph's own Q
// and K values (got, by name) over the valid tokens of each row of seq.
func checkMoments(t *testing.T, got map[string]*onnx.Tensor, b *convert.Block, valid []int, seq int, m *features.Moments, center bool, w string) {
	t.Helper()
	q, k := got[b.Q], got[b.K]
	qv, err := q.AsFloat64s() // a float16 model's values, widened exactly
	if err != nil {
		t.Fatal(err)
	}
	kv, err := k.AsFloat64s()
	if err != nil {
		t.Fatal(err)
	}
	h, d := b.Heads, b.HeadDim
	// Q is [B,H,S,D]; K is [B,H,S,D] or, transposed, [B,H,D,S].
	kT := k.Shape[2] == d && k.Shape[3] == seq && d != seq
	ref, err := features.NewMoments(h, d, center, w)
	if err != nil {
		t.Fatal(err)
	}
	for r, n := range valid {
		for hi := 0; hi < h; hi++ {
			qs, ks := make([]float64, n*d), make([]float64, n*d)
			for j := 0; j < n; j++ {
				for c := 0; c < d; c++ {
					qs[j*d+c] = qv[((r*h+hi)*seq+j)*d+c]
					if kT {
						ks[j*d+c] = kv[((r*h+hi)*d+c)*seq+j]
					} else {
						ks[j*d+c] = kv[((r*h+hi)*seq+j)*d+c]
					}
				}
			}
			if err := ref.AddSequence(hi, qs, ks, n, nil, b.Scale); err != nil {
				t.Fatal(err)
			}
		}
	}
	if m == nil {
		t.Fatalf("no moments for layer %d", b.Layer)
	}
	for i, pair := range [][2][]float64{{m.XX, ref.XX}, {m.YY, ref.YY}, {m.XY, ref.XY}} {
		var worst, scale float64
		for e := range pair[0] {
			worst = math.Max(worst, math.Abs(pair[0][e]-pair[1][e]))
			scale = math.Max(scale, math.Abs(pair[1][e]))
		}
		if worst > 1e-4*scale {
			t.Errorf("%s centred=%v layer %d sum %d: max difference %.3g (scale %.3g)", w, center, b.Layer, i, worst, scale)
		}
	}
}

// TestPerformerMomentsSkipWindows: in a ModernBERT-shaped model the
// sliding-window blocks become WindowAttention, exact, whatever the
// conversion; the moments are the global blocks' alone, each equal to
// the original's (checkMoments), and the balanced Performer built from
// them converts every block and runs.
func TestPerformerMomentsSkipWindows(t *testing.T) {
	cfg := models.ModernBERTTinyConfig()
	cfg.Layers, cfg.Hidden, cfg.Intermediate, cfg.Window = 4, 32, 48, 4
	orig, err := models.ModernBERT(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const seq = 12
	valid := []int{12, 7}
	id, mask := make([]int64, 2*seq), make([]int64, 2*seq)
	for i := range id {
		id[i] = int64(5 + 37*i%900)
		if i%seq < valid[i/seq] {
			mask[i] = 1
		}
	}
	feed := map[string]*onnx.Tensor{"input_ids": onnx.NewInt64([]int{2, seq}, id), "attention_mask": onnx.NewInt64([]int{2, seq}, mask)}
	det, err := convert.Detect(orig)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var global []*convert.Block
	for _, b := range det.Blocks {
		if b.Window == nil {
			global = append(global, b)
			names = append(names, b.Q, b.K)
		}
	}
	if len(global) != 2 || len(det.Blocks) != 4 {
		t.Fatalf("%d blocks, %d global; want 4 and 2 (layers 0 and 3)", len(det.Blocks), len(global))
	}
	got, err := runOnce(orig, feed, names, Options{Backend: "ort"})
	if err != nil {
		t.Fatal(err)
	}
	mo, err := PerformerMoments(orig, feed, MomentOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(mo) != len(global) {
		t.Fatalf("moments for %d layers, want the %d global ones", len(mo), len(global))
	}
	for _, b := range global {
		checkMoments(t, got, b, valid, seq, mo[b.Layer], true, features.WeightAttention)
	}
	pf, rep, err := convert.ToPerformer(orig, convert.PerformerOptions{Features: 16, Moments: mo, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Converted) != 4 {
		t.Fatalf("%d of 4 blocks converted", len(rep.Converted))
	}
	if _, err := runOnce(pf, feed, nil, Options{Backend: "ort"}); err != nil {
		t.Fatalf("the balanced Performer does not run: %v", err)
	}
}

// TestPerformerMomentsFloat16: a float16 model (the published fp16 copy
// of the MiniLM fixture) is measured through an exact body typed as the
// model (its inputs widened to float32), and its moments equal those
// accumulated from its own float16 Q and K widened exactly. Before, the
// body was float32 alone and onnxruntime refused it ("B has inconsistent
// type tensor(float)"), and the float16 values were read as none.
func TestPerformerMomentsFloat16(t *testing.T) {
	if err := infer.ORTAvailable(); err != nil {
		t.Skipf("%v (run scripts/setup.sh)", err)
	}
	orig, err := onnx.Load(filepath.Join("..", "testdata", "fixtures", "published", "minilm_eager_op17.fp16_ortx.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	ids := [][]int64{{2, 7, 9, 40, 23, 5, 88, 3}, {2, 30, 12, 3}} // a vocabulary of 100
	valid := []int{8, 4}
	const seq = 9
	feed := tinyFeed(t, ids, valid, seq)
	det, got := originalQK(t, orig, feed)
	if q := got[det.Blocks[0].Q]; q.DType != onnx.Float16 {
		t.Fatalf("queries are %s, want the float16 model's", onnx.TypeName(q.DType))
	}
	mo, err := PerformerMoments(orig, feed, MomentOptions{Backend: "ort"})
	if err != nil {
		t.Fatal(err)
	}
	if len(mo) != len(det.Blocks) {
		t.Fatalf("moments for %d layers, want %d", len(mo), len(det.Blocks))
	}
	for _, b := range det.Blocks {
		checkMoments(t, got, b, valid, seq, mo[b.Layer], true, features.WeightAttention)
	}
}

// The fitted conversion is a working model: a balance fitted on the tiny
// BERT's own calibration activations gives a converted model that passes
// validate, and brings it closer to the original than plain FAVOR+ on
// held-out inputs (mean per-layer attention error).
func TestBalancedPerformerOnTinyBERT(t *testing.T) {
	orig, calib, held := tinyFitSetup(t, 8, 24)
	mo, err := PerformerMoments(orig, calib, MomentOptions{}) // centred, as the conversions below
	if err != nil {
		t.Fatal(err)
	}
	values := mergedValues(t, orig)
	layerErr := func(o convert.PerformerOptions) float64 {
		m, _, err := convert.ToPerformer(orig, o)
		if err != nil {
			t.Fatal(err)
		}
		val, err := infer.ValidateOps(m, held, infer.ValidateOptions{Backend: "ort"})
		if err != nil || !val.OK() {
			t.Fatalf("validate: %v %+v", err, val)
		}
		mc, err := infer.CompareModels([]*onnxpb.ModelProto{orig, m}, []string{"o", "c"}, held,
			infer.ModelCompareOptions{Batch: 4, SeqLen: 24, Values: values})
		if err != nil {
			t.Fatal(err)
		}
		var e float64
		for _, r := range mc.Rows {
			if r.Model == "c" && r.Kind == "layer" {
				e += r.RelErr / float64(len(values))
			}
		}
		return e
	}
	plain := layerErr(convert.PerformerOptions{Features: 16, Seed: 2, Norms: "chi", FeatureMap: ops.FeaturesFavorPlus, Center: convert.CenterOff})
	fitted := layerErr(convert.PerformerOptions{Features: 16, Seed: 2, Norms: "chi", Center: convert.CenterOn, FeatureMap: "aderf", Moments: mo})
	t.Logf("mean attention relative error: plain FAVOR+ %.4f, centred ADERF %.4f", plain, fitted)
	// The zero values compose: default options given default moments are
	// centred ADERF.
	if auto := layerErr(convert.PerformerOptions{Features: 16, Seed: 2, Moments: mo}); auto != fitted {
		t.Errorf("zero-value options with zero-value moments: error %.4f, want centred ADERF's %.4f", auto, fitted)
	}
	if !(fitted < plain) {
		t.Errorf("centred ADERF (%.4f) is not closer than plain FAVOR+ (%.4f)", fitted, plain)
	}
}
