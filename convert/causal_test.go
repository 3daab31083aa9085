package convert

import (
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/infer/infertest"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

// causalFixtures returns the decoder fixtures (causal blocks).
func causalFixtures(t *testing.T) []fixtureEntry {
	var out []fixtureEntry
	for _, f := range fixtures(t) {
		if f.Causal && f.variableText() {
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		t.Fatal("no causal fixture in the manifest")
	}
	return out
}

// performerNodes returns the model's PerformerAttention nodes.
func performerNodes(m *onnxpb.ModelProto) []*onnxpb.NodeProto {
	var out []*onnxpb.NodeProto
	for _, n := range m.Graph.Node {
		if n.GetDomain() == ops.Domain && n.GetOpType() == ops.PerformerOp {
			out = append(out, n)
		}
	}
	return out
}

// cosine returns the cosine similarity of a and b over all elements.
func cosine(a, b []float32) float64 {
	var ab, aa, bb float64
	for i := range a {
		ab += float64(a[i]) * float64(b[i])
		aa += float64(a[i]) * float64(a[i])
		bb += float64(b[i]) * float64(b[i])
	}
	return ab / math.Sqrt(aa*bb)
}

// firstDiff returns the first position ≤ upTo (over the batch) where two
// [B,S,H] tensors differ in any bit, or −1.
func firstDiff(a, b *onnx.Tensor, upTo int) int {
	bs, s, h := a.Shape[0], a.Shape[1], a.Shape[2]
	for bi := 0; bi < bs; bi++ {
		for i := 0; i <= upTo; i++ {
			for c := 0; c < h; c++ {
				x, y := a.Floats()[(bi*s+i)*h+c], b.Floats()[(bi*s+i)*h+c]
				if math.Float32bits(x) != math.Float32bits(y) {
					return i
				}
			}
		}
	}
	return -1
}

// TestCausalFixturesPerformer: every decoder fixture (GPT-2, CLIP's text
// encoder, BERT as a decoder; each exporter form) converts with the
// causal Performer, with the CLI's default variant (centred FAVOR++) as
// well, saying so; the model runs in onnxruntime; it is causal by test
// (changing a later token's id never changes an earlier output, in any
// bit; sequence lengths not a multiple of the chunk, and longer than it);
// right padding leaves the real tokens' outputs unchanged; and its outputs
// are compared with the original's (cosine logged: zero-shot random
// features degrade a pretrained model, no threshold is claimed).
func TestCausalFixturesPerformer(t *testing.T) {
	needORT(t)
	for _, f := range causalFixtures(t) {
		t.Run(f.File, func(t *testing.T) {
			m := loadModel(t, filepath.Join(fixtureDir, f.File))
			// The CLI's defaults (centre + FAVOR++) fall back to causal
			// FAVOR+ and the report says so.
			pm, rep, err := ToPerformer(m, PerformerOptions{Features: 64, Seed: 3, Center: CenterOn, FeatureMap: ops.FeaturesFavorPP, Chunk: 4})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Converted) != f.Blocks || len(rep.Skipped) != 0 {
				t.Fatalf("converted %d of %d blocks; skipped %+v", len(rep.Converted), f.Blocks, rep.Skipped)
			}
			for _, b := range rep.Converted {
				if !b.Causal {
					t.Errorf("layer %d: report does not mark it causal", b.Layer)
				}
			}
			text := rep.Text()
			if !strings.Contains(text, "causal=1") || !strings.Contains(text, "options center, feature map favor++ not applied") {
				t.Errorf("report text does not say the blocks are causal and what was not applied:\n%s", text)
			}
			if !rep.Options.Causal || rep.Options.FeatureMap != ops.FeaturesFavorPlus || rep.Options.Center {
				t.Errorf("report options %v", rep.Options)
			}
			nodes := performerNodes(pm)
			if len(nodes) != f.Blocks {
				t.Fatalf("%d PerformerAttention nodes, want %d", len(nodes), f.Blocks)
			}
			for _, n := range nodes {
				if onnx.AttrInt(n, "causal", 0) != 1 || onnx.AttrInt(n, "center", 0) != 0 || onnx.AttrString(n, "features", string(ops.FeaturesFavorPlus)) != string(ops.FeaturesFavorPlus) {
					t.Errorf("node %s: attributes %v", n.GetName(), n.Attribute)
				}
			}

			// Causal by test: change the token at position p; positions
			// before p keep every bit. S = 11 spans three chunks of 4.
			const seq = 11
			base := fixtureFeeds(f, 2, seq, []int{seq, seq}, 21)
			out := runORT(t, pm, base)["last_hidden_state"]
			for _, p := range []int{1, 4, 6, 10} {
				in := map[string]*onnx.Tensor{}
				for k, v := range base {
					in[k] = onnx.NewInt64(v.Shape, append([]int64(nil), v.Int64s()...))
				}
				ids := in["input_ids"].Int64s()
				for bi := 0; bi < 2; bi++ {
					ids[bi*seq+p] = 2 + (ids[bi*seq+p]+5)%int64(f.Vocab-2)
				}
				got := runORT(t, pm, in)["last_hidden_state"]
				if i := firstDiff(out, got, p-1); i >= 0 {
					t.Errorf("changing token %d changes the output at %d", p, i)
				}
				if firstDiff(out, got, seq-1) < 0 {
					t.Errorf("changing token %d changes nothing (the test does not test)", p)
				}
			}

			// Right padding: 6 real tokens padded to 11 vs the same 6.
			padded := fixtureFeeds(f, 1, seq, []int{6}, 23)
			if d := infer.CompareTensors(prefix(runORT(t, pm, padded)["last_hidden_state"], 6), runORT(t, pm, firstTokens(padded, 6))["last_hidden_state"]); !d.OK(1e-5) {
				t.Errorf("padded vs unpadded outputs at real tokens: %v", d)
			}

			// Against the original model (zero-shot; logged only).
			want := runORT(t, m, base)["last_hidden_state"]
			for _, x := range out.Floats() {
				if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
					t.Fatalf("output holds %g", x)
				}
			}
			t.Logf("causal Performer (M=64, chunk 4) vs original: cosine %.4f, %v", cosine(out.Floats(), want.Floats()), infer.CompareTensors(out, want))
		})
	}
}

// TestCausalPerformerExactLimit: with many random features the causal
// Performer approaches the original decoder (the estimator is unbiased):
// the error to the original at the real tokens falls from M = 16 to
// M = 4096 on GPT-2, with one row left-padded (its padding keys precede
// the real tokens, so only the key bias read from the combined mask keeps
// them out). A check of the wiring (causal mask, scale, key bias), not a
// fidelity claim.
func TestCausalPerformerExactLimit(t *testing.T) {
	needORT(t)
	for _, file := range []string{"gpt2_eager_op17.onnx", "gpt2_sdpa_dynamo_op18.onnx"} {
		m := loadModel(t, filepath.Join(fixtureDir, file))
		var f fixtureEntry
		for _, e := range fixtures(t) {
			if e.File == file {
				f = e
			}
		}
		const seq, pad = 9, 3
		in := fixtureFeeds(f, 2, seq, []int{seq, seq}, 31)
		mask := in["attention_mask"].Int64s()
		for j := 0; j < pad; j++ {
			mask[seq+j] = 0
		}
		want := runORT(t, m, in)["last_hidden_state"]
		h := want.Shape[2]
		var errs []float64
		for _, feat := range []int{16, 4096} {
			pm, _, err := ToPerformer(m, PerformerOptions{Features: feat, Seed: 1, Norms: "qmc", FeatureMap: ops.FeaturesFavorPlus, Center: CenterOff})
			if err != nil {
				t.Fatal(err)
			}
			got := runORT(t, pm, in)["last_hidden_state"]
			var sum float64
			n := 0
			for i := 0; i < 2*seq; i++ {
				if mask[i] == 0 {
					continue // a padded query: its output is not defined
				}
				for c := 0; c < h; c++ {
					sum += math.Abs(float64(got.Floats()[i*h+c] - want.Floats()[i*h+c]))
					n++
				}
			}
			errs = append(errs, sum/float64(n))
		}
		t.Logf("%s, causal Performer vs original at the real tokens (one row left-padded): mean abs error %.3g (M=16), %.3g (M=4096)", file, errs[0], errs[1])
		if !(errs[1] < errs[0]/2) {
			t.Errorf("%s: more features do not bring the causal Performer closer to the original: %v", file, errs)
		}
	}
}

// TestCausalRefusals: the ops without a causal mode (Linformer, local +
// pooled) keep refusing causal blocks with Detect's reason; a causal
// block with past key/value state stays refused by Performer with that
// reason.
func TestCausalRefusals(t *testing.T) {
	m := loadModel(t, filepath.Join(fixtureDir, "gpt2_sdpa_op17.onnx"))
	if _, _, err := ToLinformer(m, LinformerOptions{Init: "gaussian", K: 4, MaxLen: 16}); !errors.Is(err, ErrNothingConverted) || !strings.Contains(err.Error(), "causal") {
		t.Errorf("linformer: error %v, want a causal refusal", err)
	}
	if _, _, err := ToLocalPooled(m, LocalPooledOptions{}); !errors.Is(err, ErrNothingConverted) || !strings.Contains(err.Error(), "causal") {
		t.Errorf("local+pooled: error %v, want a causal refusal", err)
	}
	past, err := onnx.Load(filepath.Join("..", "..", "shared", "corpus", "ort-fusion", "gpt2_past_mask_one_layer.onnx"))
	if err != nil {
		t.Skipf("corpus: %v", err)
	}
	_, rep, err := ToPerformer(past, PerformerOptions{Features: 8, FeatureMap: ops.FeaturesFavorPlus, Center: CenterOff})
	if !errors.Is(err, ErrNothingConverted) || !strings.Contains(err.Error(), "past") || rep == nil || len(rep.Skipped) != 1 {
		t.Errorf("past state: error %v, report %+v; want a refusal naming the past state", err, rep)
	}
}

// TestCausalFusedUnidirectional: onnxruntime's fused Attention with
// unidirectional=1 converts with the causal Performer (its mask input is
// per key), and the converted model is causal by test.
func TestCausalFusedUnidirectional(t *testing.T) {
	m, err := onnx.Load(filepath.Join("..", "..", "shared", "corpus", "ort-fusion", "attention_opt.onnx"))
	if err != nil {
		t.Skipf("corpus: %v", err)
	}
	for _, n := range m.Graph.Node {
		if n.GetOpType() == "Attention" {
			n.Attribute = append(n.Attribute, &onnxpb.AttributeProto{Name: strPtr("unidirectional"), Type: onnxpb.AttributeProto_INT.Enum(), I: int64Ptr(1)})
		}
	}
	pm, rep, err := ToPerformer(m, PerformerOptions{Features: 16, Chunk: 2, FeatureMap: ops.FeaturesFavorPlus, Center: CenterOff})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Converted) != 1 || !rep.Converted[0].Causal || len(performerNodes(pm)) != 1 || onnx.AttrInt(performerNodes(pm)[0], "causal", 0) != 1 {
		t.Fatalf("report %+v", rep)
	}
	if !infertest.ORT(t) {
		return
	}
	s, err := infer.NewORTSession(pm, infer.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	base := feedsOpt(t, s.Inputs(), 7, 0, 3, false)
	for k, v := range base {
		if strings.Contains(strings.ToLower(k), "mask") {
			for i := range v.Int64s() {
				v.Int64s()[i] = 1
			}
		}
	}
	a, err := s.Run(base)
	if err != nil {
		t.Fatal(err)
	}
	// Change every float input at the last position (the model has a
	// fixed length of 3).
	last := -1
	changed := map[string]*onnx.Tensor{}
	for k, v := range base {
		c := v
		if v.DType == onnx.Float && len(v.Shape) == 3 {
			d := append([]float32(nil), v.Floats()...)
			s, h := v.Shape[1], v.Shape[2]
			last = s - 1
			for bi := 0; bi < v.Shape[0]; bi++ {
				for x := 0; x < h; x++ {
					d[(bi*s+last)*h+x] += float32(x%5) - 2 // not constant along the row: a LayerNorm would remove that
				}
			}
			c = onnx.NewFloat(v.Shape, d)
		}
		changed[k] = c
	}
	if last < 1 {
		t.Fatalf("inputs %v: no sequence to perturb", s.Inputs())
	}
	b, err := s.Run(changed)
	if err != nil {
		t.Fatal(err)
	}
	for name, x := range a {
		if len(x.Shape) == 3 && x.DType == onnx.Float {
			if i := firstDiff(x, b[name], last-1); i >= 0 {
				t.Errorf("%s: changing the input at %d changes the output at %d", name, last, i)
			}
			if firstDiff(x, b[name], last) < 0 {
				t.Errorf("%s: changing the input at %d changes nothing", name, last)
			}
		}
	}
}

func strPtr(s string) *string { return &s }
func int64Ptr(v int64) *int64 { return &v }

// TestCausalPlanMixed: a model holds one Performer body, so when the
// selected blocks mix causal and bidirectional ones the bidirectional ones
// are converted and the causal ones skipped with a reason naming --layers;
// selecting the causal ones alone converts them.
func TestCausalPlanMixed(t *testing.T) {
	g := &onnxpb.GraphProto{}
	causalBlock := &Block{Layer: 1, Causal: true, causalOnly: true, Bias: BiasCausal, Reason: reasonCausalMask,
		core: &coreMatch{biases: []biasTerm{{kind: BiasCausal, value: "mask"}}}}
	det := &Detection{Blocks: []*Block{{Layer: 0, Convertible: true, Bias: BiasPerKey}, causalBlock,
		{Layer: 2, Causal: true, Bias: BiasCausal, Reason: "causal with past key/value state (incremental decoding): a bidirectional op cannot replace it"}}}
	for _, c := range []struct {
		want map[int]bool
		on   bool
	}{{nil, false}, {map[int]bool{1: true}, true}} {
		rw := &rewriter{ix: onnx.NewIndex(g), opset: 17}
		p := newCausalPlan(PerformerOptions{Kernel: ops.KernelPositive, FeatureMap: ops.FeaturesFavorPlus, Center: CenterOff})
		p.prepare(rw, det, c.want)
		if p.on != c.on || p.converts(causalBlock) != c.on {
			t.Errorf("layers %v: causal on %v, want %v", c.want, p.on, c.on)
		}
		if !c.on && !strings.Contains(p.reason(causalBlock), "--layers 1") {
			t.Errorf("layers %v: reason %q does not name --layers 1", c.want, p.reason(causalBlock))
		}
		if p.converts(det.Blocks[2]) || !strings.Contains(p.reason(det.Blocks[2]), "past") {
			t.Errorf("the block with past state: converts %v, reason %q", p.converts(det.Blocks[2]), p.reason(det.Blocks[2]))
		}
		if c.on && (len(rw.report.Notes) != 1 || !strings.Contains(rw.report.Notes[0], "layer 1 is causal")) {
			t.Errorf("notes %q", rw.report.Notes)
		}
	}
}
