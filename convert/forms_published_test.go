package convert

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/infer/infertest"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

// formEntry is one file of testdata/fixtures/forms/manifest.json, written
// by gen_forms.py from how it built the fixture (and checked there
// against a numpy reference of the attention it computes), not from
// Detect.
type formEntry struct {
	File        string  `json:"file"`
	Form        string  `json:"form"`
	Blocks      int     `json:"blocks"`
	Heads       int     `json:"heads"`
	HeadDim     int     `json:"head_dim"`
	Scale       float64 `json:"scale"`
	Convertible int     `json:"convertible"`
	Causal      bool    `json:"causal"`
	Cross       bool    `json:"cross"`
	// Inputs maps each input to the sizes after [batch, sequence] (a
	// mask has none).
	Inputs map[string][]int `json:"inputs"`
	// Lengths of a cross-attention fixture: "tgt" for the decoder
	// stream, "src" for the encoder's (and its mask).
	Lengths map[string]int `json:"lengths"`
	// Batch is the batch the graph runs at when it is not any (a
	// TorchScript export traced at batch 1 that broadcasts its mask over
	// the heads); 0: any (the tests feed 2).
	Batch int `json:"batch"`
	// Reason, for refused blocks, is what every refusal must say.
	Reason string `json:"reason"`
	// CausalConvertible: the causal Performer converts the refused
	// causal blocks.
	CausalConvertible bool   `json:"causal_convertible"`
	Description       string `json:"description"`
}

const formsDir = "../testdata/fixtures/forms"

func formFixtures(t *testing.T) []formEntry {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(formsDir, "manifest.json"))
	if err != nil {
		t.Fatalf("forms manifest: %v", err)
	}
	var man struct {
		Files []formEntry `json:"files"`
	}
	if err := json.Unmarshal(data, &man); err != nil {
		t.Fatal(err)
	}
	if len(man.Files) == 0 {
		t.Fatal("forms manifest lists no files")
	}
	return man.Files
}

// length is the sequence length of input name: the decoder's or the
// encoder's for a cross-attention fixture, else seq.
func (e formEntry) length(name string, seq int) int {
	if len(e.Lengths) == 0 {
		return seq
	}
	if strings.HasPrefix(name, "encoder") {
		return e.Lengths["src"]
	}
	return e.Lengths["tgt"]
}

// feeds makes a batch of two (or the manifest's batch): float inputs
// N(0,1), masks all ones but for the last pad positions of the last row.
func (e formEntry) feeds(seq, pad int, seed uint64) map[string]*onnx.Tensor {
	r := rand.New(rand.NewPCG(seed, 9))
	batch := 2
	if e.Batch > 0 {
		batch = e.Batch
	}
	out := map[string]*onnx.Tensor{}
	names := make([]string, 0, len(e.Inputs))
	for name := range e.Inputs {
		names = append(names, name)
	}
	sort.Strings(names) // the same draws for the same seed
	for _, name := range names {
		s := e.length(name, seq)
		shape := append([]int{batch, s}, e.Inputs[name]...)
		if strings.HasSuffix(name, "mask") {
			d := make([]int64, batch*s)
			for i := range d {
				if i < (batch-1)*s || i%s < s-pad {
					d[i] = 1
				}
			}
			out[name] = onnx.NewInt64(shape, d)
			continue
		}
		d := make([]float32, onnx.NumElements(shape))
		for i := range d {
			d[i] = float32(r.NormFloat64())
		}
		out[name] = onnx.NewFloat(shape, d)
	}
	return out
}

// TestDetectForms: every block of every exporter-form fixture is found
// with the heads, head size, scale, causality and cross-attention it was
// built with, convertible as the manifest says, with its projections
// proved.
func TestDetectForms(t *testing.T) {
	for _, e := range formFixtures(t) {
		t.Run(e.File, func(t *testing.T) {
			m := loadModel(t, filepath.Join(formsDir, e.File))
			d, err := Detect(m)
			if err != nil {
				t.Fatal(err)
			}
			if d.Count() != e.Blocks {
				t.Fatalf("found %d blocks, want %d\n%s", d.Count(), e.Blocks, d.Explain())
			}
			conv := 0
			for _, b := range d.Blocks {
				checkFormBlock(t, e, b)
				if b.Convertible {
					conv++
				}
			}
			if conv != e.Convertible {
				t.Errorf("%d convertible blocks, want %d\n%s", conv, e.Convertible, d.Explain())
			}
		})
	}
}

func checkFormBlock(t *testing.T, e formEntry, b *Block) {
	t.Helper()
	if b.Heads != e.Heads || b.HeadDim != e.HeadDim || math.Abs(b.Scale-e.Scale) > 1e-6*e.Scale {
		t.Errorf("block %d: heads %d head_dim %d scale %g, want %d %d %g", b.Layer, b.Heads, b.HeadDim, b.Scale, e.Heads, e.HeadDim, e.Scale)
	}
	if b.Causal != e.Causal || b.Cross != e.Cross {
		t.Errorf("block %d: causal %v cross %v, want %v %v (%s)", b.Layer, b.Causal, b.Cross, e.Causal, e.Cross, b.Reason)
	}
	if !b.Convertible && (e.Reason == "" || !strings.Contains(b.Reason, e.Reason)) {
		t.Errorf("block %d: refused with %q, want %q", b.Layer, b.Reason, e.Reason)
	}
	// One head has no head merge: the core's output is the block's.
	if b.Convertible && (b.QProj == nil || b.KProj == nil || b.VProj == nil || b.Merged == "" || b.Merged == b.Output && e.Heads > 1) {
		t.Errorf("block %d: projections %+v %+v %+v, merged %q: not proved", b.Layer, b.QProj, b.KProj, b.VProj, b.Merged)
	}
	if e.Cross && b.QProj != nil && b.KProj != nil && b.QProj.Input == b.KProj.Input {
		t.Errorf("block %d: cross-attention with queries and keys from the same value %q", b.Layer, b.QProj.Input)
	}
}

// TestFormsConvert: each convertible form converts and runs in
// onnxruntime, and its exact conversions give the original's outputs
// (float32 tolerance) on inputs with padding:
//   - self-attention: local+pooled with segments ≥ S, exact by
//     construction;
//   - cross-attention: Linformer with k = Sk and E = F = I (exact on
//     unpadded inputs; with E = I a padded key is zeroed, not removed),
//     and the self-attention ops refuse it with a reason that says so;
//   - the Performer conversion runs to finite outputs in both.
func TestFormsConvert(t *testing.T) {
	if !infertest.ORT(t) {
		return
	}
	const seq = 6
	for _, e := range formFixtures(t) {
		if e.Convertible == 0 && !e.CausalConvertible {
			continue
		}
		t.Run(e.File, func(t *testing.T) {
			m := loadModel(t, filepath.Join(formsDir, e.File))
			padded := e.feeds(seq, 2, 21)
			full := e.feeds(seq, 0, 21)
			switch {
			case e.Convertible == 0:
				checkFormCausal(t, e, m, padded)
			case e.Cross:
				checkFormCross(t, e, m, full, padded)
			default:
				exact, rep, err := ToLocalPooled(m, LocalPooledOptions{Block: 2, Segments: seq})
				if err != nil {
					t.Fatal(err)
				}
				if len(rep.Converted) != e.Convertible {
					t.Fatalf("local-pooled converted %d blocks, want %d: %+v", len(rep.Converted), e.Convertible, rep.Skipped)
				}
				checkFormOutputs(t, "local-pooled, segments ≥ S", runORT(t, exact, padded), runORT(t, m, padded), 1e-5)
			}
			if e.Convertible > 0 {
				pm, rep, err := ToPerformer(m, PerformerOptions{Features: 64, Seed: 3, FeatureMap: ops.FeaturesFavorPlus, Center: CenterOff})
				if err != nil {
					t.Fatal(err)
				}
				if len(rep.Converted) != e.Convertible {
					t.Fatalf("performer converted %d blocks, want %d: %+v", len(rep.Converted), e.Convertible, rep.Skipped)
				}
				checkFormFinite(t, "performer", runORT(t, pm, padded))
			}
		})
	}
}

// checkFormCross: a cross-attention form converts exactly to Linformer
// with E = F = I over the keys' length, is refused by local+pooled for
// being cross-attention, and runs padded.
func checkFormCross(t *testing.T, e formEntry, m *onnxpb.ModelProto, full, padded map[string]*onnx.Tensor) {
	t.Helper()
	sk := e.Lengths["src"]
	lm, rep, err := ToLinformer(m, LinformerOptions{Init: "gaussian", K: sk, MaxLen: sk, Projections: identityProjections(sk)})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Converted) != e.Convertible {
		t.Fatalf("linformer converted %d blocks, want %d: %+v", len(rep.Converted), e.Convertible, rep.Skipped)
	}
	checkFormOutputs(t, "linformer k = Sk, E = F = I", runORT(t, lm, full), runORT(t, m, full), 1e-5)
	checkFormFinite(t, "linformer, padded", runORT(t, lm, padded))
	_, rep, err = ToLocalPooled(m, LocalPooledOptions{Block: 2, Segments: 8})
	if !errors.Is(err, ErrNothingConverted) || len(rep.Skipped) != e.Blocks || !strings.Contains(rep.Skipped[0].Reason, "cross-attention") {
		t.Errorf("local-pooled on cross-attention: err %v, report %+v; want every block skipped as cross-attention", err, rep)
	}
}

// checkFormCausal: a causal form refused by Detect converts with the
// causal Performer, which estimates the original: its error at the valid
// tokens shrinks as the random features grow (256 → 4096: by ~4 for
// 1/√M; at least by 2 here), which a block fed the wrong queries or keys
// (rotary embeddings or repeated key/value heads lost) would not do; and
// it stays causal: changing the last token leaves every earlier output
// of its row unchanged.
func checkFormCausal(t *testing.T, e formEntry, m *onnxpb.ModelProto, padded map[string]*onnx.Tensor) {
	t.Helper()
	want := runORT(t, m, padded)
	errs := map[int]float64{}
	var conv *onnxpb.ModelProto
	for _, features := range []int{256, 4096} {
		pm, rep, err := ToPerformer(m, PerformerOptions{Features: features, Seed: 3, FeatureMap: ops.FeaturesFavorPlus, Center: CenterOff})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Converted) != e.Blocks || !rep.Options.Causal {
			t.Fatalf("causal performer converted %d blocks (causal %v), want %d: %+v", len(rep.Converted), rep.Options.Causal, e.Blocks, rep.Skipped)
		}
		got := runORT(t, pm, padded)
		checkFormFinite(t, "causal performer", got)
		errs[features] = validTokenError(e, padded, got, want)
		conv = pm
	}
	t.Logf("causal performer vs original at the valid tokens: ‖Δ‖ %.4g (256 features), %.4g (4096)", errs[256], errs[4096])
	if !(errs[4096] < errs[256]/2) {
		t.Errorf("causal performer error %.4g at 4096 features, %.4g at 256: it does not converge to the original", errs[4096], errs[256])
	}
	checkCausalOutputs(t, e, "original", m, padded)
	checkCausalOutputs(t, e, "causal performer", conv, padded)
}

// validTokenError is ‖got − want‖ over every output at the tokens the
// mask keeps.
func validTokenError(e formEntry, in, got, want map[string]*onnx.Tensor) float64 {
	mask := in["attention_mask"].Int64s()
	sum := 0.0
	for name, w := range want {
		wv, gv := w.Floats(), got[name].Floats()
		per := len(wv) / len(mask)
		for i := range wv {
			if mask[i/per] == 1 {
				d := float64(gv[i] - wv[i])
				sum += d * d
			}
		}
	}
	return math.Sqrt(sum)
}

// checkCausalOutputs: with the last token of the first row changed, the
// outputs at that row's earlier tokens stay as they were.
func checkCausalOutputs(t *testing.T, e formEntry, what string, m *onnxpb.ModelProto, in map[string]*onnx.Tensor) {
	t.Helper()
	x := in["x"].Clone()
	d, s := x.Floats(), x.Shape[1]
	width := x.Shape[2]
	for j := 0; j < width; j++ {
		d[(s-1)*width+j] += 3
	}
	changed := map[string]*onnx.Tensor{"x": x, "attention_mask": in["attention_mask"]}
	a, b := runORT(t, m, in), runORT(t, m, changed)
	for name, o := range a {
		ov, cv := o.Floats(), b[name].Floats()
		per := len(ov) / (x.Shape[0] * s)
		for i := 0; i < (s-1)*per; i++ { // row 0, tokens 0..s−2
			if math.Abs(float64(ov[i]-cv[i])) > 1e-5 {
				t.Fatalf("%s: output %s at token %d of row 0 changed with the last token (%g → %g): not causal", what, name, i/per, ov[i], cv[i])
			}
		}
	}
}

func checkFormOutputs(t *testing.T, what string, got, want map[string]*onnx.Tensor, tol float64) {
	t.Helper()
	if len(want) == 0 {
		t.Fatalf("%s: the original has no outputs", what)
	}
	for name, w := range want {
		if d := infer.CompareTensors(got[name], w); !d.OK(tol) {
			t.Errorf("%s vs original, output %s: %v", what, name, d)
		}
	}
}

func checkFormFinite(t *testing.T, what string, out map[string]*onnx.Tensor) {
	t.Helper()
	if len(out) == 0 {
		t.Fatalf("%s: no outputs", what)
	}
	for name, x := range out {
		for _, v := range x.Floats() {
			if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				t.Fatalf("%s: output %s holds %g", what, name, v)
			}
		}
	}
}
