package convert

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// ropeFixture loads testdata/rope/NAME.onnx (gen_rope.py).
func ropeFixture(t *testing.T, name string) *onnxpb.ModelProto {
	t.Helper()
	m, err := onnx.Load(filepath.Join("..", "testdata", "rope", name+".onnx"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// ropeInputs are n random token ids and a full mask.
func ropeInputs(n int, seed uint64) map[string]*onnx.Tensor {
	r := rand.New(rand.NewPCG(seed, 7))
	ids := make([]int64, n)
	mask := make([]int64, n)
	for i := range ids {
		ids[i], mask[i] = 4+r.Int64N(56), 1
	}
	return map[string]*onnx.Tensor{
		"input_ids":      {DType: onnx.Int64, Shape: []int{1, n}, Data: ids},
		"attention_mask": {DType: onnx.Int64, Shape: []int{1, n}, Data: mask},
	}
}

// TestRotaryMatchesTransformers: a ModernBERT trained for 32 tokens,
// extended to 128 by each method, computes at 100 tokens what
// transformers' own scaled model computes (testdata/rope, exported from
// the same weights with the method in its rope_parameters): NTK and
// linear scaling to float rounding, YaRN too, its cos and sin scaled.
// The sliding-window layers' frequencies are kept, as in the reference,
// and the methods differ from the unscaled model by far more than the
// tolerance.
func TestRotaryMatchesTransformers(t *testing.T) {
	in := ropeInputs(100, 1)
	for _, form := range []string{"", "cached_"} {
		base := ropeFixture(t, form+"base")
		plain := runNative(t, ropeFixture(t, "base"), in)["last_hidden_state"].Floats()
		for _, method := range []string{RotaryNTK, RotaryLinear, RotaryYaRN} {
			t.Run(form+method, func(t *testing.T) {
				ext, rep, err := ExtendPositions(base, ExtendOptions{MaxPositions: 128, Trained: 32, Method: method})
				if err != nil {
					t.Fatal(err)
				}
				got := runNative(t, ext, in)["last_hidden_state"].Floats()
				want := runNative(t, ropeFixture(t, form+method), in)["last_hidden_state"].Floats()
				var diff, moved float64
				for i := range got {
					diff = max(diff, math.Abs(float64(got[i]-want[i])))
					moved = max(moved, math.Abs(float64(want[i]-plain[i])))
				}
				if diff > 2e-5 || moved < 0.1 {
					t.Errorf("max |extended − transformers| %.3g (want ≤ 2e-5); the method moves the output by %.3g (want ≥ 0.1)", diff, moved)
				}
				checkRotaryReport(t, rep, form != "", method)
				lim, err := ContextLimit(ext, "")
				if err != nil || lim.Tokens != 128 || lim.Kind != LimitMetadata {
					t.Errorf("ContextLimit of the extended model: %+v, %v; want 128 from its metadata", lim, err)
				}
			})
		}
		// The input model is unchanged: a cached base still reads 32
		// tokens at most.
		if _, err := infer.NewNativeSession(base, infer.Options{}); err != nil {
			t.Fatal(err)
		}
		if form == "" {
			if again := runNative(t, base, in)["last_hidden_state"].Floats(); fmt.Sprint(again[:8]) != fmt.Sprint(plain[:8]) {
				t.Error("ExtendPositions changed its input model")
			}
		}
	}
}

// checkRotaryReport checks what ExtendPositions reports of the rope
// fixture extended from 32 to 128 tokens: θ 160000 scaled for blocks 0
// and 2, θ 10000 kept for the window block 1; tables of 128 rows (the
// window block's too: its positions go past 32), or YaRN's Mul after Cos
// and Sin.
func checkRotaryReport(t *testing.T, rep *ExtendReport, cached bool, method string) {
	t.Helper()
	if len(rep.Rotary) != 2 || rep.Factor != 4 || rep.OldRows != 32 || rep.NewRows != 128 {
		t.Fatalf("report %+v", rep)
	}
	for _, r := range rep.Rotary {
		global := math.Abs(r.Base-160000) < 1
		if math.Abs(r.Base-160000) > 1 && math.Abs(r.Base-10000) > 0.1 {
			t.Errorf("%s: θ %g, want 160000 or 10000", r.Value, r.Base)
		}
		if r.Scaled != global || r.Dims != 8 || (global && fmt.Sprint(r.Layers) != "[0 2]") || (!global && fmt.Sprint(r.Layers) != "[1]") {
			t.Errorf("frequencies %+v: want θ 160000 scaled for blocks 0, 2 and θ 10000 kept for the window block 1", r)
		}
		wantTrig, wantRows := 0, 0
		switch {
		case cached:
			wantRows = 128
		case global && method == RotaryYaRN:
			wantTrig = 2
		}
		if r.CosSin != wantTrig || r.Rows != wantRows {
			t.Errorf("%s: %d Cos/Sin scaled, tables of %d rows; want %d and %d", r.Value, r.CosSin, r.Rows, wantTrig, wantRows)
		}
	}
}

// TestRotaryFrequencies checks each method's frequencies against its
// closed form in float64: NTK is θ' = θ·s^(d/(d−2)) (the fastest kept,
// the slowest divided by s), linear divides all by s, and YaRN keeps the
// frequencies that turn 32 times or more over the trained length,
// divides by s those that turn once or less, with attention factor
// 0.1·ln s + 1.
func TestRotaryFrequencies(t *testing.T) {
	const theta, d, s, L = 10000.0, 64, 8.0, 2048
	orig := func(i int) float64 { return math.Pow(theta, -float64(2*i)/d) }
	ntk, f := RotaryFrequencies(RotaryNTK, theta, d, s, L)
	if f != 1 || len(ntk) != d/2 {
		t.Fatalf("ntk: factor %g, %d frequencies", f, len(ntk))
	}
	tb := theta * math.Pow(s, float64(d)/(d-2))
	for i, x := range ntk {
		if want := math.Pow(tb, -float64(2*i)/d); math.Abs(x-want) > 1e-12*want {
			t.Errorf("ntk %d: %g, want %g", i, x, want)
		}
	}
	if math.Abs(ntk[0]-1) > 1e-15 || math.Abs(ntk[d/2-1]-orig(d/2-1)/s) > 1e-12 {
		t.Errorf("ntk: first %g (want 1), last %g (want %g)", ntk[0], ntk[d/2-1], orig(d/2-1)/s)
	}
	lin, _ := RotaryFrequencies(RotaryLinear, theta, d, s, L)
	for i, x := range lin {
		if want := orig(i) / s; math.Abs(x-want) > 1e-12*want {
			t.Errorf("linear %d: %g, want %g", i, x, want)
		}
	}
	yarn, f := RotaryFrequencies(RotaryYaRN, theta, d, s, L)
	if want := 0.1*math.Log(s) + 1; math.Abs(f-want) > 1e-15 {
		t.Errorf("yarn factor %g, want %g", f, want)
	}
	for i, x := range yarn {
		turns := float64(L) * orig(i) / (2 * math.Pi)
		switch {
		case turns >= 33 && math.Abs(x-orig(i)) > 1e-12*orig(i):
			t.Errorf("yarn %d turns %.1f times: %g, want it kept (%g)", i, turns, x, orig(i))
		case turns <= 0.9 && math.Abs(x-orig(i)/s) > 1e-12*orig(i):
			t.Errorf("yarn %d turns %.2f times: %g, want it interpolated (%g)", i, turns, x, orig(i)/s)
		case x > orig(i)*(1+1e-12) || x < orig(i)/s*(1-1e-12):
			t.Errorf("yarn %d: %g outside [%g, %g]", i, x, orig(i)/s, orig(i))
		}
	}
}

// TestRotaryRefused: each way rotary scaling cannot apply is an error
// naming the cause, and the model is not changed.
func TestRotaryRefused(t *testing.T) {
	base := ropeFixture(t, "base")
	ext, _, err := ExtendPositions(base, ExtendOptions{MaxPositions: 128, Trained: 32})
	if err != nil {
		t.Fatal(err)
	}
	bert := loadModel(t, filepath.Join("..", "testdata", "fixtures", "bert_eager_op17.onnx"))
	for _, tc := range []struct {
		m    *onnxpb.ModelProto
		o    ExtendOptions
		want string
	}{
		{base, ExtendOptions{MaxPositions: 128}, "the length the rotary model was trained for is unknown"},
		{base, ExtendOptions{MaxPositions: 32, Trained: 32}, "must exceed the 32 tokens the model was trained for"},
		{base, ExtendOptions{MaxPositions: 128, Trained: 32, Method: "copy"}, `"copy": the model has rotary positions; want ntk, dynamic, linear, yarn`},
		{base, ExtendOptions{MaxPositions: 128, Trained: 32, Offset: 2}, "a rotary model has no table rows to keep"},
		{ext, ExtendOptions{MaxPositions: 512, Trained: 32}, "were scaled already"},
		{bert, ExtendOptions{MaxPositions: 128, Method: RotaryNTK}, `"ntk": the model has an absolute position table`},
	} {
		_, _, err := ExtendPositions(tc.m, tc.o)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "convert: ") {
			t.Errorf("%+v: %v, want an error containing %q", tc.o, err, tc.want)
		}
	}
	// A model with neither a table nor rotary frequencies (ALiBi).
	jina := loadModel(t, filepath.Join("..", "testdata", "fixtures", "longctx", "jina_v2_alibi.onnx"))
	if _, _, err := ExtendPositions(jina, ExtendOptions{MaxPositions: 1024}); !errors.Is(err, errNoRotary) {
		t.Errorf("ALiBi model: %v, want errNoRotary", err)
	}
}

// rotaryWant is each fixture's rotary embeddings: θ, the blocks each
// rotates (one embedding per layer in Nomic's exports, which must not
// count the later layers its packed q, k, v reach), and whether
// extension scales it (ModernBERT's window layer 1 keeps θ 10000). The θ
// are the generators' settings, not read back from the graphs:
// transformers' default rope_theta of ModernBertConfig (160000 global,
// 10000 sliding), GteConfig (160000), NomicBertConfig (1000) and
// JinaEmbeddingsV3Config (20000), which gen_fixtures.py keeps, and
// gen_longctx.py's GTE (rope_theta 160000 times ntk_factor 2) and Nomic
// (rotary_base 1000). The blocks follow from the configs: two layers,
// ModernBERT's layer 1 a sliding window (global_attn_every_n_layers 2).
var rotaryWant = map[string]string{
	"modernbert_eager_op17":       "θ 160000 [0] true; θ 10000 [1] false",
	"modernbert_sdpa_dynamo_op18": "θ 160000 [0] true; θ 10000 [1] false",
	"gte_eager_op17":              "θ 160000 [0 1] true",
	"gte_sdpa_dynamo_op18":        "θ 160000 [0 1] true",
	"nomicbert_eager_op17":        "θ 1000 [0 1] true",
	"nomicbert_sdpa_dynamo_op18":  "θ 1000 [0 1] true",
	"jinav3_eager_op17":           "θ 20000 [0 1] true",
	"jinav3_sdpa_dynamo_op18":     "θ 20000 [0 1] true",
	"longctx/gte_v15":             "θ 320000 [0 1] true",
	"longctx/nomic_bert":          "θ 1000 [0] true; θ 1000 [1] true",
}

// TestRotaryFixturesFound: every rotary fixture family (ModernBERT,
// GTE, NomicBERT, jina-v3; TorchScript and dynamo) has its frequencies
// found, with the θ its generator set and the blocks it rotates
// (rotaryWant).
func TestRotaryFixturesFound(t *testing.T) {
	for _, name := range []string{"modernbert_eager_op17", "modernbert_sdpa_dynamo_op18", "gte_eager_op17", "gte_sdpa_dynamo_op18",
		"nomicbert_eager_op17", "nomicbert_sdpa_dynamo_op18", "jinav3_eager_op17", "jinav3_sdpa_dynamo_op18",
		"longctx/gte_v15", "longctx/nomic_bert"} {
		m := loadModel(t, filepath.Join("..", "testdata", "fixtures", name+".onnx"))
		_, rep, err := ExtendPositions(m, ExtendOptions{MaxPositions: 256, Trained: 64})
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		var got []string
		for _, r := range rep.Rotary {
			got = append(got, fmt.Sprintf("θ %.0f %v %v", r.Base, r.Layers, r.Scaled))
		}
		if want := rotaryWant[name]; strings.Join(got, "; ") != want {
			t.Errorf("%s: %s, want %s", name, strings.Join(got, "; "), want)
		}
	}
}

// TestRotaryDynamic: the dynamic method computes what transformers'
// dynamic NTK computes in eager mode (testdata/rope/dynamic_*.npy, fresh
// models): at 100 tokens the base grows with the length; at 20, within
// the trained 32, the output is the unscaled model's bit for bit. Stored
// tables refuse it.
func TestRotaryDynamic(t *testing.T) {
	base := ropeFixture(t, "base")
	ext, rep, err := ExtendPositions(base, ExtendOptions{MaxPositions: 128, Trained: 32, Method: RotaryDynamic})
	if err != nil {
		t.Fatal(err)
	}
	checkRotaryReport(t, rep, false, RotaryDynamic)
	for _, n := range []int{20, 100} {
		dir := filepath.Join("..", "testdata", "rope")
		ids, err := onnx.ReadNPY(filepath.Join(dir, fmt.Sprintf("dynamic_ids_%d.npy", n)))
		if err != nil {
			t.Fatal(err)
		}
		want, err := onnx.ReadNPY(filepath.Join(dir, fmt.Sprintf("dynamic_out_%d.npy", n)))
		if err != nil {
			t.Fatal(err)
		}
		mask := make([]int64, n)
		for i := range mask {
			mask[i] = 1
		}
		in := map[string]*onnx.Tensor{"input_ids": ids, "attention_mask": {DType: onnx.Int64, Shape: []int{1, n}, Data: mask}}
		got := runNative(t, ext, in)["last_hidden_state"].Floats()
		plain := runNative(t, base, in)["last_hidden_state"].Floats()
		var diff, moved, same float64
		for i, w := range want.Floats() {
			diff = max(diff, math.Abs(float64(got[i]-w)))
			moved = max(moved, math.Abs(float64(w-plain[i])))
			same = max(same, math.Abs(float64(got[i]-plain[i])))
		}
		if diff > 2e-5 {
			t.Errorf("%d tokens: max |extended − transformers| %.3g, want ≤ 2e-5", n, diff)
		}
		switch {
		case n <= 32 && same != 0:
			t.Errorf("%d tokens, within the trained length: the extended model differs from the original by %.3g, want 0", n, same)
		case n > 32 && moved < 0.1:
			t.Errorf("%d tokens: dynamic NTK moves the output by only %.3g", n, moved)
		}
	}
	if _, _, err := ExtendPositions(ropeFixture(t, "cached_base"), ExtendOptions{MaxPositions: 128, Trained: 32, Method: RotaryDynamic}); err == nil || !strings.Contains(err.Error(), "cannot change with the input's length") {
		t.Errorf("dynamic on cos/sin tables: %v, want a refusal", err)
	}
}

// TestRotaryAfterConversion: in a model converted already, the rotary
// embeddings are traced to the linear-attention ops (WindowAttention for
// the window layer, whose frequencies are kept), and extending then
// converting computes what converting then extending does.
func TestRotaryAfterConversion(t *testing.T) {
	base := ropeFixture(t, "base")
	o := LocalPooledOptions{Block: 8, Segments: 4}
	ext := ExtendOptions{MaxPositions: 128, Trained: 32}
	lp, _, err := ToLocalPooled(base, o)
	if err != nil {
		t.Fatal(err)
	}
	lpExt, rep, err := ExtendPositions(lp, ext)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Rotary {
		global := math.Abs(r.Base-160000) < 1
		if len(r.Layers) != 0 || r.Converted != map[bool]int{true: 2, false: 1}[global] || r.Scaled != global {
			t.Errorf("%s: %+v; want θ 160000 scaled for 2 converted ops, θ 10000 kept for the WindowAttention", r.Value, r)
		}
	}
	for _, want := range []string{"θ 160000 over 8 dims (2 converted ops): scaled", "θ 10000 over 8 dims (1 converted op, sliding windows only): kept"} {
		if !strings.Contains(rep.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, rep)
		}
	}
	e, _, err := ExtendPositions(base, ext)
	if err != nil {
		t.Fatal(err)
	}
	extLp, _, err := ToLocalPooled(e, o)
	if err != nil {
		t.Fatal(err)
	}
	in := ropeInputs(100, 3)
	a := runNative(t, lpExt, in)["last_hidden_state"].Floats()
	b := runNative(t, extLp, in)["last_hidden_state"].Floats()
	for i := range a {
		if math.Abs(float64(a[i]-b[i])) > 1e-6 {
			t.Fatalf("value %d: converted then extended %g, extended then converted %g", i, a[i], b[i])
		}
	}
}

// TestRotaryDenseMemoryNote: extending a model whose global layers still
// compute softmax attention over all n tokens notes the memory the cost
// model gives that at the new length; a converted model gets no note.
func TestRotaryDenseMemoryNote(t *testing.T) {
	base := ropeFixture(t, "base")
	ext := ExtendOptions{MaxPositions: 1 << 20, Trained: 32}
	_, rep, err := ExtendPositions(base, ext)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Notes) != 1 || !strings.Contains(rep.Notes[0], "its softmax attention over 1048576 tokens needs about") {
		t.Errorf("notes %q, want the dense attention's memory", rep.Notes)
	}
	lp, _, err := ToLocalPooled(base, LocalPooledOptions{Block: 8, Segments: 4})
	if err != nil {
		t.Fatal(err)
	}
	if _, rep, err = ExtendPositions(lp, ext); err != nil || len(rep.Notes) != 0 {
		t.Errorf("converted model: notes %q, %v; want none", rep.Notes, err)
	}
}
