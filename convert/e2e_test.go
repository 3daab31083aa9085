package convert

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/ops"
)

// identityProjections returns E = F = I [1,n,n], which makes Linformer
// with k = N = S exactly the original attention when no key is padded.
func identityProjections(n int) func(layer, heads int) (*onnx.Tensor, *onnx.Tensor, error) {
	return func(layer, heads int) (*onnx.Tensor, *onnx.Tensor, error) {
		d := make([]float32, n*n)
		for i := 0; i < n; i++ {
			d[i*n+i] = 1
		}
		e := onnx.NewFloat([]int{1, n, n}, d)
		return e, e, nil
	}
}

// runnable corpus files (see ../shared/corpus/README.md) with the sequence
// length to run them at.
var corpusRunnable = []struct {
	file string
	seq  int
}{
	{"TFBertForQuestionAnswering.onnx", 7},
	{"attention_int32_mask.onnx", 3},
	{"attention_mask_no_cast.onnx", 3},
	{"attention_symbolic_batch.onnx", 3},
	{"attention_opt.onnx", 3},
	{"attention_mha.onnx", 3},
	{"attention_with_varied_qkv_opt.onnx", 3},
	{"bert_3d_attention_opt.onnx", 3},
	{"pruned_attention_opt.onnx", 3},
	{"embed_layer_norm_format3.onnx", 3},
	{"embed_layer_norm_format8_opset13.onnx", 2},
	{"embed_layer_norm_multiple.onnx", 3},
	{"whisper_hf_fp32_encoder_self_attention.onnx", 10},
}

// TestCorpusLinformerIdentityExact: Linformer with k = S and E = F = I must
// reproduce the original model's outputs (no padding) bit for bit: it checks
// that Q, K, V, scale and the output layout are wired exactly.
func TestCorpusLinformerIdentityExact(t *testing.T) {
	dir := corpusDir(t)
	needORT(t)
	for _, c := range corpusRunnable {
		// attention_mask_no_cast's constant mask adds −10000 to every
		// score: the same number everywhere, which the softmax ignores
		// and the matcher reads as no bias at all. The original rounds
		// scores − 10000 to float32 (steps of ~1e-3) before its softmax,
		// the conversion does not: close (1e-5), not bit for bit.
		exact := c.file != "attention_mask_no_cast.onnx"
		t.Run(c.file, func(t *testing.T) {
			m := loadModel(t, filepath.Join(dir, c.file))
			in := modelFeeds(t, m, c.seq, 0, 1, true)
			want := runORT(t, m, in)
			lm, rep, err := ToLinformer(m, LinformerOptions{Init: "gaussian", K: c.seq, MaxLen: c.seq, Projections: identityProjections(c.seq)})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Converted) == 0 {
				t.Fatalf("nothing converted: %+v", rep.Skipped)
			}
			got := runORT(t, lm, in)
			for name, w := range want {
				d := infer.CompareTensors(got[name], w)
				t.Logf("%s: %v", name, d)
				// README claims bit-for-bit: E = I and F = I only multiply
				// by one and add zeros, which float arithmetic does exactly.
				if d.Mismatch != "" || d.NaNMismatch > 0 || (exact && d.MaxAbs != 0) || !d.OK(1e-5) {
					t.Errorf("output %s: %v", name, d)
				}
			}
		})
	}
}

// TestCorpusPerformerRuns: every runnable corpus model converts to
// Performer, loads and runs in onnxruntime; the outputs stay close to the
// original (random tiny weights, M = 1024: cosine ≥ 0.999, measured
// ≥ 0.99998; the accurate numbers are the op tests'). Its steps are
// TestCorpusLinformerIdentityExact's; what counts as close differs.
func TestCorpusPerformerRuns(t *testing.T) {
	dir := corpusDir(t)
	needORT(t)
	for _, c := range corpusRunnable {
		t.Run(c.file, func(t *testing.T) {
			m := loadModel(t, filepath.Join(dir, c.file))
			in := modelFeeds(t, m, c.seq, 1, 2, false)
			want := runORT(t, m, in)
			pm, rep, err := ToPerformer(m, PerformerOptions{Features: 1024, Seed: 3, FeatureMap: ops.FeaturesFavorPlus, Center: CenterOff})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Converted) == 0 {
				t.Fatalf("nothing converted: %+v", rep.Skipped)
			}
			got := runORT(t, pm, in)
			for name, w := range want {
				d := infer.CompareTensors(got[name], w)
				t.Logf("%s: %v", name, d)
				if d.Mismatch != "" || d.NaNMismatch > 0 || d.Cosine < 0.999 {
					t.Errorf("output %s: %v", name, d)
				}
			}
		})
	}
}

// TestPerformerWithExtendedPositions: --max-positions grows the position
// table before the rewrite, and the converted model runs in onnxruntime on
// inputs longer than the original table (64 rows) allowed.
func TestPerformerWithExtendedPositions(t *testing.T) {
	needORT(t)
	m := loadModel(t, filepath.Join(fixtureDir, "bert_eager_op14.onnx"))
	pm, rep, err := ToPerformer(m, PerformerOptions{Features: 32, Seed: 1, Positions: ExtendOptions{MaxPositions: 256}, FeatureMap: ops.FeaturesFavorPlus, Center: CenterOff})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Positions == nil || rep.Positions.NewRows != 256 || len(rep.Converted) != 2 {
		t.Fatalf("report: %+v", rep)
	}
	var f fixtureEntry
	for _, e := range fixtures(t) {
		if e.File == "bert_eager_op14.onnx" {
			f = e
		}
	}
	long := fixtureFeeds(f, 1, 200, []int{200}, 1)
	out := runORT(t, pm, long)["last_hidden_state"]
	if out.Shape[1] != 200 {
		t.Fatalf("output shape %v", out.Shape)
	}
	for _, v := range out.Floats() {
		if v != v || math.IsInf(float64(v), 0) {
			t.Fatal("non-finite value in output")
		}
	}
	// The 200-token output is the ONNX function body's; the native backend
	// runs the Go kernel: the two must agree.
	nat := runNative(t, pm, long)["last_hidden_state"]
	if d := infer.CompareTensors(nat, out); !d.OK(1e-4) {
		t.Errorf("200 tokens: native vs onnxruntime: %v", d)
	}
	// The copy method keeps every old row and ω depends only on the seed
	// and the layer, so on inputs that fit the old table the extended
	// conversion equals the plain one.
	plain, _, err := ToPerformer(m, PerformerOptions{Features: 32, Seed: 1, FeatureMap: ops.FeaturesFavorPlus, Center: CenterOff})
	if err != nil {
		t.Fatal(err)
	}
	short := fixtureFeeds(f, 2, 40, []int{40, 23}, 5)
	got, want := runORT(t, pm, short), runORT(t, plain, short)
	for name, w := range want {
		if d := infer.CompareTensors(got[name], w); d.MaxAbs != 0 || d.Mismatch != "" {
			t.Errorf("%s on 40 tokens: extended vs plain conversion: %v", name, d)
		}
	}
}
