package convert

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/infer/infertest"
	"github.com/linearize/linearize/ops"
)

// The forms of issue 30 (item 4), each the real exporter's output in
// testdata/fixtures/forms (gen_forms.py's TORCH_FORMS, by torch.onnx's
// TorchScript exporter; gen_paddle.py's, by paddle2onnx): what the
// manifest-driven tests (TestDetectForms, TestFormsConvert) do not say.

// TestBloomALiBi: BLOOM's ALiBi bias (slopes times the mask's cumulative
// positions, [B·H,1,S], added to the folded scores) is not read as a
// per-key mask: the block is found, causal, and refused saying ALiBi,
// and the causal Performer does not take it either.
func TestBloomALiBi(t *testing.T) {
	m := loadModel(t, filepath.Join(formsDir, "bloom_alibi.onnx"))
	d, err := Detect(m)
	if err != nil {
		t.Fatal(err)
	}
	if d.Count() != 1 {
		t.Fatalf("found %d blocks, want 1\n%s", d.Count(), d.Explain())
	}
	b := d.Blocks[0]
	if !b.Causal || b.Convertible || b.Bias != BiasCausal || b.causalOnly {
		t.Errorf("causal %v convertible %v bias %s causalOnly %v; want a causal block refused", b.Causal, b.Convertible, b.Bias, b.causalOnly)
	}
	for _, want := range []string{"causal (triangular) mask", "ALiBi", "linear distance bias"} {
		if !strings.Contains(b.Reason, want) {
			t.Errorf("reason %q does not say %q", b.Reason, want)
		}
	}
	if !strings.Contains(b.Form, formFolded) || strings.Contains(b.Form, "rank3-mask") {
		t.Errorf("form %q: want the folded heads, and no rank-3 per-key mask", b.Form)
	}
	if !strings.Contains(d.Explain(), "ALiBi") {
		t.Errorf("explain does not say ALiBi:\n%s", d.Explain())
	}
	_, rep, err := ToPerformer(m, PerformerOptions{Features: 64, Seed: 3, FeatureMap: ops.FeaturesFavorPlus, Center: CenterOff})
	if !errors.Is(err, ErrNothingConverted) || len(rep.Skipped) != 1 || !strings.Contains(rep.Skipped[0].Reason, "ALiBi") {
		t.Errorf("performer on BLOOM: err %v, report %+v; want the block skipped for ALiBi", err, rep)
	}
}

// TestExportedForms: the forms are read as what they are (Block.Form,
// Block.Bias).
func TestExportedForms(t *testing.T) {
	for _, c := range []struct {
		file  string
		forms []string
		bias  BiasKind
	}{
		{"llama_torchscript_eager.onnx", []string{"rotary", "gqa"}, BiasCausal},
		{"llama_torchscript_sdpa.onnx", []string{"rotary", "gqa", "scaled-q", "scaled-k"}, BiasCausal},
		{"xlm_torchscript.onnx", []string{"where-mask", "scaled-q"}, BiasPerKey},
		{"torch_mha_folded.onnx", []string{formFolded, "add-bias"}, BiasPerKey},
		{"fairseq_folded.onnx", []string{formFolded, "where-mask", "prescaled-q"}, BiasPerKey},
		{"svtr_paddle2onnx_op12.onnx", []string{"prescaled-q"}, BiasNone},
	} {
		t.Run(c.file, func(t *testing.T) {
			d, err := Detect(loadModel(t, filepath.Join(formsDir, c.file)))
			if err != nil {
				t.Fatal(err)
			}
			if d.Count() != 1 {
				t.Fatalf("found %d blocks, want 1\n%s", d.Count(), d.Explain())
			}
			b := d.Blocks[0]
			for _, f := range c.forms {
				if !strings.Contains(b.Form, f) {
					t.Errorf("form %q lacks %q", b.Form, f)
				}
			}
			if b.Bias != c.bias {
				t.Errorf("bias %s, want %s", b.Bias, c.bias)
			}
		})
	}
}

// TestFoldedHeadsConvertExact: a core whose heads are folded into the
// batch (torch's nn.MultiheadAttention, fairseq) converts over its
// operands viewed [B,H,S,D]: Linformer with k = S and E = F = I gives the
// original's outputs, and no Softmax is left.
func TestFoldedHeadsConvertExact(t *testing.T) {
	if !infertest.ORT(t) {
		return
	}
	const seq = 6 // the key length torch fixed in the MHA export
	for _, file := range []string{"torch_mha_folded.onnx", "fairseq_folded.onnx", "xlm_torchscript.onnx"} {
		t.Run(file, func(t *testing.T) {
			m := loadModel(t, filepath.Join(formsDir, file))
			e := formEntry{Inputs: map[string][]int{"x": {32}, "attention_mask": {}}}
			full := e.feeds(seq, 0, 5)
			lm, rep, err := ToLinformer(m, LinformerOptions{Init: "gaussian", K: seq, MaxLen: seq, Projections: identityProjections(seq)})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Converted) != 1 {
				t.Fatalf("converted %d blocks: %+v", len(rep.Converted), rep.Skipped)
			}
			for _, n := range lm.Graph.Node {
				if n.GetOpType() == "Softmax" {
					t.Errorf("Softmax %s left in the converted model", n.GetName())
				}
			}
			want, got := runORT(t, m, full), runORT(t, lm, full)
			for name, w := range want {
				if d := infer.CompareTensors(got[name], w); !d.OK(1e-5) {
					t.Errorf("linformer k = S, E = F = I vs original, output %s: %v", name, d)
				}
			}
		})
	}
}
