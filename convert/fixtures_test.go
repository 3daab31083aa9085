package convert

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

// fixtureEntry is one file of testdata/fixtures/manifest.json, written by
// gen_fixtures.py from the exporter's own configuration (not from Detect).
type fixtureEntry struct {
	File        string   `json:"file"`
	Model       string   `json:"model"`
	Opset       int      `json:"opset"`
	Fused       bool     `json:"fused"`
	Blocks      int      `json:"blocks"`
	Heads       int      `json:"heads"`
	HeadDim     int      `json:"head_dim"`
	Scale       float64  `json:"scale"`
	Causal      bool     `json:"causal"`
	Convertible int      `json:"convertible"`
	Inputs      []string `json:"inputs"`
	Vocab       int      `json:"vocab"`
	// Seq is the fixed sequence length of a model whose inputs set it
	// (a vision or audio encoder); 0 when the caller chooses it.
	Seq int `json:"seq"`
	// FloatInputs gives the per-example shape of float inputs
	// (pixel_values, input_features).
	FloatInputs map[string][]int `json:"float_inputs"`
	// Linear is the number of linear-attention ops already in the model
	// (a converted one): Detect reports them and finds no block.
	Linear int `json:"linear"`
	// Reason, for a model whose blocks are refused, is what every
	// refusal must say.
	Reason string `json:"reason"`
	// PaddingVariant, when set, says why the original model's outputs at
	// real tokens change when padding is appended (ConvBERT's span
	// convolution reads the neighbouring padded tokens): padding
	// invariance is then not a property a conversion can keep, and the
	// tests check instead that the exact conversions match the original
	// on padded inputs (the mask reaches the op).
	PaddingVariant string `json:"padding_variant"`
	// BlockReasons: for the blocks named (by layer), what their refusal
	// must also say (Funnel's pooled-query layers).
	BlockReasons map[string]string `json:"block_reasons"`
	// FixedInputs are scalar int64 inputs that carry no tokens, with the
	// value the tests feed (jina-embeddings-v3's task_id).
	FixedInputs map[string]int64 `json:"fixed_inputs"`
	// ComputedWeights: the projections' weights are computed at run time
	// (task adapters added to a base weight), so no projection by a
	// constant weight is proved.
	ComputedWeights bool `json:"computed_weights"`
	// Rounding, when set, says why Linformer with k = S and E = F = I
	// matches the original to float rounding rather than bit for bit.
	Rounding string `json:"rounding"`
}

// checkPaddedExact runs the original m and an exact conversion cm on a
// padded batch (one row full, one with 5 real tokens) and wants the same
// outputs, to tol: for a fixture whose original is not padding-invariant.
func checkPaddedExact(t *testing.T, f fixtureEntry, m, cm *onnxpb.ModelProto, seq int, tol float64) {
	t.Helper()
	padded := fixtureFeeds(f, 2, seq, []int{seq, 5}, 13)
	want := runORT(t, m, padded)["last_hidden_state"]
	got := runORT(t, cm, padded)["last_hidden_state"]
	if d := infer.CompareTensors(got, want); !d.OK(tol) {
		t.Errorf("exact conversion vs original on padded inputs (%s): %v", f.PaddingVariant, d)
	}
}

// variableText reports whether the fixture reads token ids and an
// attention mask of any sequence length (not a fixed-length vision or
// audio input).
func (f fixtureEntry) variableText() bool {
	return f.masked() && f.Seq == 0 && len(f.FloatInputs) == 0
}

// seqLen is the sequence length the fixture tests feed: the fixture's
// fixed length (vision and audio encoders), else 8.
func (f fixtureEntry) seqLen() int {
	if f.Seq > 0 {
		return f.Seq
	}
	return 8
}

// masked reports whether the fixture takes an attention mask (so padding
// can be tested).
func (f fixtureEntry) masked() bool {
	for _, in := range f.Inputs {
		if in == "attention_mask" {
			return true
		}
	}
	return false
}

const fixtureDir = "../testdata/fixtures"

func fixtures(t *testing.T) []fixtureEntry {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(fixtureDir, "manifest.json"))
	if err != nil {
		t.Fatalf("fixture manifest: %v", err)
	}
	var man struct {
		Files []fixtureEntry `json:"files"`
	}
	if err := json.Unmarshal(data, &man); err != nil {
		t.Fatal(err)
	}
	if len(man.Files) == 0 {
		t.Fatal("fixture manifest lists no files")
	}
	return man.Files
}

// TestDetectFixtures: every block of every exporter fixture is found with
// the heads, head size and scale of the configuration it was exported from.
func TestDetectFixtures(t *testing.T) {
	for _, f := range fixtures(t) {
		t.Run(f.File, func(t *testing.T) {
			m := loadModel(t, filepath.Join(fixtureDir, f.File))
			d, err := Detect(m)
			if err != nil {
				t.Fatal(err)
			}
			if d.Count() != f.Blocks {
				t.Fatalf("found %d blocks, want %d\n%s", d.Count(), f.Blocks, d.Explain())
			}
			conv := 0
			for _, b := range d.Blocks {
				if b.Heads != f.Heads || b.HeadDim != f.HeadDim || math.Abs(b.Scale-f.Scale) > 1e-6*f.Scale {
					t.Errorf("block %d: heads %d head_dim %d scale %g, want %d %d %g", b.Layer, b.Heads, b.HeadDim, b.Scale, f.Heads, f.HeadDim, f.Scale)
				}
				if !b.Convertible && f.Reason != "" && !strings.Contains(b.Reason, f.Reason) {
					t.Errorf("block %d: refused with %q, want %q", b.Layer, b.Reason, f.Reason)
				}
				if r, ok := f.BlockReasons[strconv.Itoa(b.Layer)]; ok && (b.Convertible || !strings.Contains(b.Reason, r)) {
					t.Errorf("block %d: convertible %v, reason %q, want a refusal saying %q", b.Layer, b.Convertible, b.Reason, r)
				}
				if b.Causal != f.Causal {
					t.Errorf("block %d: causal %v, want %v (%s)", b.Layer, b.Causal, f.Causal, b.Reason)
				}
				if b.Convertible {
					conv++
					if !f.Fused && !f.ComputedWeights && (b.QProj == nil || b.KProj == nil || b.VProj == nil || b.Merged == "" || b.Merged == b.Output) {
						t.Errorf("block %d: projections %+v %+v %+v, merged %q: not proved", b.Layer, b.QProj, b.KProj, b.VProj, b.Merged)
					}
				}
			}
			if conv != f.Convertible {
				t.Errorf("%d convertible blocks, want %d\n%s", conv, f.Convertible, d.Explain())
			}
			if len(d.Linear) != f.Linear {
				t.Errorf("%d linear-attention ops, want %d\n%s", len(d.Linear), f.Linear, d.Explain())
			}
		})
	}
}

// fixtureFeeds builds inputs: ids from a fixed seed, token types 0, the
// mask 1 on the first valid tokens of each row and 0 after.
func fixtureFeeds(f fixtureEntry, batch, seq int, valid []int, seed uint64) map[string]*onnx.Tensor {
	ids := make([]int64, batch*seq)
	x := seed
	for i := range ids {
		x = x*6364136223846793005 + 1442695040888963407
		ids[i] = int64(2 + (x>>33)%uint64(f.Vocab-2))
	}
	mask := make([]int64, batch*seq)
	for b := 0; b < batch; b++ {
		for j := 0; j < valid[b]; j++ {
			mask[b*seq+j] = 1
		}
	}
	in := map[string]*onnx.Tensor{}
	for _, name := range f.Inputs {
		if shape, ok := f.FloatInputs[name]; ok {
			full := append([]int{batch}, shape...)
			d := make([]float32, onnx.NumElements(full))
			for i := range d {
				x = x*6364136223846793005 + 1442695040888963407
				d[i] = float32(int64(x>>40)%2001-1000) / 1000
			}
			in[name] = onnx.NewFloat(full, d)
			continue
		}
		if v, ok := f.FixedInputs[name]; ok {
			in[name] = onnx.NewInt64([]int{}, []int64{v})
			continue
		}
		switch name {
		case "input_ids":
			in[name] = onnx.NewInt64([]int{batch, seq}, ids)
		case "attention_mask":
			in[name] = onnx.NewInt64([]int{batch, seq}, mask)
		default:
			in[name] = onnx.NewInt64([]int{batch, seq}, make([]int64, batch*seq))
		}
	}
	return in
}

// prefix returns the first n positions of a [1,S,H] tensor.
func prefix(t *onnx.Tensor, n int) *onnx.Tensor {
	h := t.Shape[2]
	return onnx.NewFloat([]int{1, n, h}, append([]float32(nil), t.Floats()[:n*h]...))
}

// checkPadding checks that cm (name in messages) gives the same
// last_hidden_state at 5 real tokens of fixture f padded to seq as at the 5
// alone (1e-5).
func checkPadding(t *testing.T, name string, f fixtureEntry, cm *onnxpb.ModelProto, seq int) {
	t.Helper()
	padded := fixtureFeeds(f, 1, seq, []int{5}, 13)
	a, b := runORT(t, cm, padded)["last_hidden_state"], runORT(t, cm, firstTokens(padded, 5))["last_hidden_state"]
	if d := infer.CompareTensors(prefix(a, 5), b); !d.OK(1e-5) {
		t.Errorf("%s: padded vs unpadded outputs at real tokens: %v", name, d)
	}
}

// checkPadIDs checks, for a fixed-length fixture f, that changing the ids
// of the padded tokens after 5 real ones leaves cm's last_hidden_state at
// the real tokens unchanged (1e-5).
func checkPadIDs(t *testing.T, name string, f fixtureEntry, cm *onnxpb.ModelProto, seq int) {
	t.Helper()
	a := fixtureFeeds(f, 1, seq, []int{5}, 13)
	b := fixtureFeeds(f, 1, seq, []int{5}, 13)
	ids := b["input_ids"].Int64s()
	for j := 5; j < seq; j++ {
		ids[j] = 2 + (ids[j]+7)%int64(f.Vocab-2)
	}
	x, y := runORT(t, cm, a)["last_hidden_state"], runORT(t, cm, b)["last_hidden_state"]
	if d := infer.CompareTensors(prefix(x, 5), prefix(y, 5)); !d.OK(1e-5) {
		t.Errorf("%s: padded tokens changed the outputs at real tokens: %v", name, d)
	}
}

// checkFinite fails the test when cm's last_hidden_state on in holds a NaN
// or an infinity.
func checkFinite(t *testing.T, name string, cm *onnxpb.ModelProto, in map[string]*onnx.Tensor) {
	t.Helper()
	for _, x := range runORT(t, cm, in)["last_hidden_state"].Floats() {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			t.Fatalf("%s: output holds %g", name, x)
		}
	}
}

// firstTokens returns the first n tokens of each [1,S] int64 feed.
func firstTokens(feed map[string]*onnx.Tensor, n int) map[string]*onnx.Tensor {
	short := map[string]*onnx.Tensor{}
	for k, v := range feed {
		if len(v.Shape) == 0 { // an input that carries no tokens
			short[k] = v
			continue
		}
		short[k] = onnx.NewInt64([]int{1, n}, append([]int64(nil), v.Int64s()[:n]...))
	}
	return short
}

// textFixtures returns the manifest entries of the text fixtures the
// per-op fixture tests run on (unfused and fused, opsets 11 to 17),
// failing the test for any the manifest lacks.
func textFixtures(t *testing.T) []fixtureEntry {
	t.Helper()
	files := map[string]bool{"bert_eager_op14.onnx": true, "bert_eager_op11.onnx": true, "bert_eager_op14_fused.onnx": true, "bert_sdpa_op17.onnx": true}
	var out []fixtureEntry
	for _, f := range fixtures(t) {
		if files[f.File] {
			delete(files, f.File)
			out = append(out, f)
		}
	}
	for f := range files {
		t.Errorf("fixture %s not in the manifest", f)
	}
	return out
}

// validateORT fails the test unless want ops of cm validate in
// onnxruntime on feed (what, if not "", starts the message).
func validateORT(t *testing.T, what string, cm *onnxpb.ModelProto, feed map[string]*onnx.Tensor, want int) {
	t.Helper()
	val, err := infer.ValidateOps(cm, feed, infer.ValidateOptions{Backend: "ort"})
	if err != nil {
		t.Fatal(err)
	}
	if !val.OK() || len(val.Checks) != want {
		var buf bytes.Buffer
		val.WriteTable(&buf)
		t.Fatalf("%svalidate failed:\n%s", what, buf.String())
	}
}

// convertibleFixtures returns the manifest's fixtures that hold a block
// to convert.
func convertibleFixtures(t *testing.T) []fixtureEntry {
	var out []fixtureEntry
	for _, f := range fixtures(t) {
		if f.Convertible > 0 {
			out = append(out, f)
		}
	}
	return out
}

// fixtureReference loads fixture f and runs it in onnxruntime on two
// unpadded rows of seq tokens: the model, those inputs and its
// last_hidden_state.
func fixtureReference(t *testing.T, f fixtureEntry, seq int) (*onnxpb.ModelProto, map[string]*onnx.Tensor, *onnx.Tensor) {
	t.Helper()
	m := loadModel(t, filepath.Join(fixtureDir, f.File))
	full := fixtureFeeds(f, 2, seq, []int{seq, seq}, 11)
	return m, full, runORT(t, m, full)["last_hidden_state"]
}

// TestFixturesConvert: every fixture converts with both ops and runs in
// onnxruntime; Linformer with k = S and E = F = I reproduces the original
// (no padding) bit for bit; and for both ops appending padded tokens leaves
// the outputs at the real tokens unchanged (the mask reaches the op).
func TestFixturesConvert(t *testing.T) {
	needORT(t)
	for _, f := range convertibleFixtures(t) {
		seq := f.seqLen()
		t.Run(f.File, func(t *testing.T) {
			m, full, want := fixtureReference(t, f, seq)

			lm, rep, err := ToLinformer(m, LinformerOptions{Init: "gaussian", K: seq, MaxLen: seq, Projections: identityProjections(seq)})
			if err != nil {
				t.Fatal(err)
			}
			if ownConverted(rep) != f.Convertible {
				t.Fatalf("linformer converted %d blocks, want %d: %+v", ownConverted(rep), f.Convertible, rep.Skipped)
			}
			got := runORT(t, lm, full)["last_hidden_state"]
			d := infer.CompareTensors(got, want)
			t.Logf("linformer k=S, E=F=I vs original: %v", d)
			if rep.Window != nil || f.Rounding != "" {
				// Window blocks became WindowAttention, or the manifest
				// says why this one rounds otherwise: exact to float
				// rounding, not bit for bit.
				checkExact(t, "linformer k=S, E=F=I (+ window)", got, want)
			} else if d.Mismatch != "" || d.NaNMismatch > 0 || d.MaxAbs != 0 { // bit for bit, as README claims
				t.Errorf("linformer k=S, E=F=I vs original: %v", d)
			}

			pm, _, err := ToPerformer(m, PerformerOptions{Features: 64, Seed: 5, FeatureMap: ops.FeaturesFavorPlus, Center: CenterOff})
			if err != nil {
				t.Fatal(err)
			}
			lr, _, err := ToLinformer(m, LinformerOptions{Init: "gaussian", K: 4, MaxLen: max(16, seq), Seed: 5})
			if err != nil {
				t.Fatal(err)
			}
			if !f.masked() || f.PaddingVariant != "" {
				// No padding to test, or an original that is not
				// padding-invariant itself (TestFixturesLocalPooled checks
				// that its exact conversion matches it on padded inputs;
				// Linformer with E = F = I is exact only without padding):
				// both conversions run to finite outputs.
				in := full
				if f.PaddingVariant != "" {
					in = fixtureFeeds(f, 2, seq, []int{seq, 5}, 13)
				}
				checkFinite(t, "performer", pm, in)
				checkFinite(t, "linformer", lr, in)
				return
			}
			if f.Seq > 0 {
				// A fixed length: the padded tokens' ids do not change the
				// outputs at the real tokens (original and both ops).
				checkPadIDs(t, "original", f, m, seq)
				checkPadIDs(t, "performer", f, pm, seq)
				checkPadIDs(t, "linformer", f, lr, seq)
				return
			}
			// Padding invariance: 5 real tokens padded to 8 vs the same 5.
			if f.File == "bert_eager_op14.onnx" {
				// The reference itself is padding-invariant (checked once).
				checkPadding(t, "original", f, m, seq)
			}
			checkPadding(t, "performer", f, pm, seq)
			checkPadding(t, "linformer", f, lr, seq)
		})
	}
}
