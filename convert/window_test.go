package convert

import (
	"errors"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

// modernBERTHalfWindow is the band of the ModernBERT fixtures' local
// layers: gen_fixtures.py exports them with local_attention = 4, which
// transformers applies as |i − j| ≤ local_attention/2.
const modernBERTHalfWindow = 2

// modernBERTFixtures are the ModernBERT exports (TorchScript opset 17 and
// dynamo opset 18, eager and sdpa attention).
func modernBERTFixtures(t *testing.T) []fixtureEntry {
	var out []fixtureEntry
	for _, f := range fixtures(t) {
		if f.Model == "modernbert" {
			out = append(out, f)
		}
	}
	if len(out) < 4 {
		t.Fatalf("%d ModernBERT fixtures in the manifest, want 4", len(out))
	}
	return out
}

// TestDetectWindowModernBERT: in every ModernBERT export the global layer
// is a per-key block and the local layer a window block with the band the
// configuration sets, its padding mask kept as the key bias.
func TestDetectWindowModernBERT(t *testing.T) {
	for _, f := range modernBERTFixtures(t) {
		t.Run(f.File, func(t *testing.T) {
			d, err := Detect(loadModel(t, filepath.Join(fixtureDir, f.File)))
			if err != nil {
				t.Fatal(err)
			}
			if d.Count() != 2 {
				t.Fatalf("%d blocks, want 2\n%s", d.Count(), d.Explain())
			}
			g, l := d.Blocks[0], d.Blocks[1]
			if g.Window != nil || !g.Convertible || g.Bias != BiasPerKey {
				t.Errorf("global block: window %v convertible %v bias %s", g.Window, g.Convertible, g.Bias)
			}
			want := Window{Left: modernBERTHalfWindow, Right: modernBERTHalfWindow}
			if l.Window == nil || *l.Window != want {
				t.Fatalf("local block: window %v, want %v (%s)", l.Window, want, l.Reason)
			}
			if l.Bias != BiasWindow || l.BiasValue == "" {
				t.Errorf("local block: bias %s value %q, want the window with its padding mask", l.Bias, l.BiasValue)
			}
		})
	}
}

// TestWindowExactModernBERT: convert window reproduces every ModernBERT
// export in onnxruntime to float rounding on padded batches at lengths
// beyond the band (the band matters), and every other conversion
// converts the window block the same way beside its own op.
func TestWindowExactModernBERT(t *testing.T) {
	needORT(t)
	for _, f := range modernBERTFixtures(t) {
		t.Run(f.File, func(t *testing.T) {
			m := loadModel(t, filepath.Join(fixtureDir, f.File))
			for _, seq := range []int{7, 40} {
				in := fixtureFeeds(f, 2, seq, []int{seq, seq / 2}, 17)
				want := runORT(t, m, in)["last_hidden_state"]
				wm, rep, err := ToWindow(m, WindowOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if len(rep.Converted) != 1 || rep.Converted[0].Layer != 1 || rep.Converted[0].Op != ops.WindowOp {
					t.Fatalf("window converted %+v, want block 1 as WindowAttention", rep.Converted)
				}
				got := runORT(t, wm, in)["last_hidden_state"]
				// Padded queries are compared too little to matter: the
				// original spreads a query whose band holds only padding
				// over every key, the op gives zeros; neither is read.
				checkExact(t, "window", realTokens(got, in["attention_mask"]), realTokens(want, in["attention_mask"]))
				validateORT(t, "window: ", wm, in, 1)
			}
		})
	}
}

// checkExact requires got to match want to float rounding: max abs error
// ≤ 1e-5 of the output's scale (its largest magnitude).
func checkExact(t *testing.T, what string, got, want *onnx.Tensor) {
	t.Helper()
	d := infer.CompareTensors(got, want)
	scale := 0.0
	for _, x := range want.Floats() {
		scale = math.Max(scale, math.Abs(float64(x)))
	}
	if d.Mismatch != "" || d.NaNMismatch > 0 || d.MaxAbs > 1e-5*scale {
		t.Errorf("%s vs original: %v (scale %.3g)", what, d, scale)
	}
}

// TestEveryConversionConvertsWindows: each conversion writes its own op
// for the global block and WindowAttention for the window block, and the
// model runs in onnxruntime, its window op matching its Go kernel.
func TestEveryConversionConvertsWindows(t *testing.T) {
	needORT(t)
	f := modernBERTFixtures(t)[0]
	m := loadModel(t, filepath.Join(fixtureDir, f.File))
	in := fixtureFeeds(f, 2, 24, []int{24, 13}, 5)
	for _, c := range []struct {
		op   string
		conv func(*onnxpb.ModelProto) (*onnxpb.ModelProto, *Report, error)
	}{
		{ops.LocalPooledOp, func(m *onnxpb.ModelProto) (*onnxpb.ModelProto, *Report, error) {
			return ToLocalPooled(m, LocalPooledOptions{Block: 4, Segments: 2})
		}},
		{ops.PerformerOp, func(m *onnxpb.ModelProto) (*onnxpb.ModelProto, *Report, error) {
			return ToPerformer(m, PerformerOptions{Features: 16, Seed: 3})
		}},
		{ops.LinformerOp, func(m *onnxpb.ModelProto) (*onnxpb.ModelProto, *Report, error) {
			return ToLinformer(m, LinformerOptions{K: 4})
		}},
		{ops.LaraOp, func(m *onnxpb.ModelProto) (*onnxpb.ModelProto, *Report, error) {
			return ToLARA(m, LaraOptions{Landmarks: 4, Seed: 3})
		}},
		{ops.HedgehogOp, func(m *onnxpb.ModelProto) (*onnxpb.ModelProto, *Report, error) {
			return ToHedgehog(m, HedgehogOptions{Block: 4, Seed: 3})
		}},
	} {
		t.Run(c.op, func(t *testing.T) {
			cm, rep, err := c.conv(m)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Converted) != 2 || len(rep.Skipped) != 0 {
				t.Fatalf("converted %+v, skipped %+v: want both blocks", rep.Converted, rep.Skipped)
			}
			if rep.Converted[0].Op != "" || rep.Converted[1].Op != ops.WindowOp {
				t.Errorf("ops %q, %q: want the conversion's own op, then %s", rep.Converted[0].Op, rep.Converted[1].Op, ops.WindowOp)
			}
			validateORT(t, c.op+": ", cm, in, 2)
		})
	}
}

// realTokens returns the rows of hidden states [B,S,h] at the tokens the
// mask [B,S] marks real.
func realTokens(x, mask *onnx.Tensor) *onnx.Tensor {
	h := x.Shape[2]
	var rows []float32
	for i, m := range mask.Data.([]int64) {
		if m != 0 {
			rows = append(rows, x.Floats()[i*h:(i+1)*h]...)
		}
	}
	return onnx.NewFloat([]int{len(rows) / h, h}, rows)
}

// ownConverted counts the blocks a conversion converted into its own op
// (window blocks become WindowAttention in every conversion).
func ownConverted(rep *Report) int {
	n := 0
	for _, br := range rep.Converted {
		if br.Op == "" {
			n++
		}
	}
	return n
}

// TestAlibiForms: an ALiBi bias −m_h·|i−j| (jina-embeddings-v2) is read
// with its slopes; local-pooled converts it keeping the bias (exact when
// every far key is a segment of its own), the conversions without ALiBi
// skip it with the reason, and ALiBi inside a band converts exactly as
// WindowAttention.
func TestAlibiForms(t *testing.T) {
	needORT(t)
	want := make([]float32, fH)
	for h := range want {
		want[h] = float32(math.Pow(2, -8*float64(h+1)/fH))
	}
	const seq = 9
	for _, c := range []struct {
		bias   string
		window bool
	}{{"alibi", false}, {"alibi-mask", false}, {"alibi-band", true}} {
		t.Run(c.bias, func(t *testing.T) {
			m := extraForm{name: c.bias, bias: c.bias}.build()
			d, err := Detect(m)
			if err != nil {
				t.Fatal(err)
			}
			if d.Count() != 1 {
				t.Fatalf("%d blocks\n%s", d.Count(), d.Explain())
			}
			b := d.Blocks[0]
			if len(b.Alibi) != fH {
				t.Fatalf("slopes %v, want %v (%s)", b.Alibi, want, b.Reason)
			}
			for h := range want {
				if math.Abs(float64(b.Alibi[h]-want[h])) > 1e-6*float64(want[h]) {
					t.Errorf("slope %d: %g, want %g", h, b.Alibi[h], want[h])
				}
			}
			if (b.Window != nil) != c.window {
				t.Fatalf("window %v, want a window: %v", b.Window, c.window)
			}
			in := extraInputs(seq, c.bias == "alibi-mask")
			orig := runORT(t, m, in)
			var cm *onnxpb.ModelProto
			if c.window {
				cm, _, err = ToWindow(m, WindowOptions{})
			} else {
				// Every far key its own segment: exact.
				cm, _, err = ToLocalPooled(m, LocalPooledOptions{Block: 2, Segments: seq, Sinks: NoSinks})
				if _, _, perr := ToPerformer(m, PerformerOptions{Features: 8, Seed: 1}); !errors.Is(perr, ErrNothingConverted) || !strings.Contains(perr.Error(), "ALiBi") {
					t.Errorf("performer on an ALiBi block: %v, want nothing converted, saying ALiBi", perr)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			for name, w := range orig {
				got := runORT(t, cm, in)[name]
				if c.bias == "alibi-mask" {
					got, w = realTokens(got, in["mask"]), realTokens(w, in["mask"])
				}
				checkExact(t, c.bias, got, w)
			}
			validateORT(t, c.bias+": ", cm, in, 1)
		})
	}
}

// extraInputs are inputs of an extraForm model at length seq: x seeded,
// and a mask whose second row pads its last 3 tokens.
func extraInputs(seq int, withMask bool) map[string]*onnx.Tensor {
	rng := rand.New(rand.NewPCG(9, 10))
	x := make([]float32, fB*seq*fHid)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	in := map[string]*onnx.Tensor{"x": onnx.NewFloat([]int{fB, seq, fHid}, x)}
	if withMask {
		mask := make([]int64, fB*seq)
		for i := range mask {
			if i < seq || i%seq < seq-3 {
				mask[i] = 1
			}
		}
		in["mask"] = onnx.NewInt64([]int{fB, seq}, mask)
	}
	return in
}

// TestWindowConstantBand: a band stored as a constant [S0,S0] (a
// fixed-length export) is read at S0, and a causal window (Mistral-style
// Range comparisons) as −2..+0; both convert exactly.
func TestWindowConstantBand(t *testing.T) {
	needORT(t)
	for _, c := range []struct {
		bias string
		want Window
	}{
		{"band-const", Window{Left: 1, Right: 1}},
		{"causal-window", Window{Left: 2, Right: 0}},
	} {
		t.Run(c.bias, func(t *testing.T) {
			m := extraForm{name: c.bias, bias: c.bias}.build()
			d, err := Detect(m)
			if err != nil {
				t.Fatal(err)
			}
			if d.Count() != 1 || d.Blocks[0].Window == nil || *d.Blocks[0].Window != c.want || d.Blocks[0].Causal {
				t.Fatalf("want one window %s block\n%s", c.want, d.Explain())
			}
			wm, _, err := ToWindow(m, WindowOptions{})
			if err != nil {
				t.Fatal(err)
			}
			in := extraInputs(9, false)
			for name, w := range runORT(t, m, in) {
				checkExact(t, c.bias, runORT(t, wm, in)[name], w)
			}
		})
	}
}
