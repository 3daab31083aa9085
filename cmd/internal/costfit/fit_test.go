package costfit

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/linearize/linearize/convert"
)

func benchModel() convert.CostModel {
	return convert.CostModel{
		Dims:     convert.Dims{Layers: 2, Hidden: 768, Heads: 12, HeadDim: 64, FFN: 3072},
		Features: 256, K: 256, Block: 64, Segments: 64, Sinks: 2,
	}
}

// TestFitRecoversWeights times synthetic runs with known weights (each
// group scaled by its own drift and each time by up to ±noise) and checks
// that the fit finds weights that predict the crossovers the true weights
// give.
func TestFitRecoversWeights(t *testing.T) {
	// Weights unlike the defaults the fit starts from, in the same regime.
	truth := convert.Weights{Original: 0.4, Fused: 0.35, Flash: 0.6, Pass: 40, Exp: 5, FusedToken: 100, FlashToken: 300, Layer: 1e9}
	forms := []convert.Form{convert.Original, convert.Fused, convert.Flash, convert.Performer, convert.Linformer, convert.LocalPooled}
	for _, tc := range []struct {
		name  string
		noise float64
		tol   float64 // relative error allowed on a crossover
	}{
		// The ridge's pull towards the start biases even an exact fit a
		// little.
		{"exact", 0, 0.03},
		{"noisy 2%", 0.02, 0.15},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			cm := benchModel()
			cm.Weights = truth
			var samples []Sample
			for _, group := range []string{"a", "b"} {
				for n := 384; n <= 8192; n += 384 {
					drift := 1 + 0.2*rng.Float64()
					for _, f := range forms {
						ms := cm.Work(f, n) * 1e-8 * drift * (1 + tc.noise*(2*rng.Float64()-1))
						samples = append(samples, Sample{Group: group, Form: f, N: n, Ms: ms})
					}
				}
			}
			start := benchModel()
			res, err := Fit(start, samples)
			if err != nil {
				t.Fatal(err)
			}
			// Exact samples are fitted to within what the ridge's pull
			// towards the start trades for smaller weight moves.
			if tc.noise == 0 && res.Max > 5e-3 {
				t.Errorf("exact samples fitted with max ratio error %.2g, want < 5e-3", res.Max)
			}
			if tc.noise > 0 && res.RMS > 2*tc.noise {
				t.Errorf("RMS ratio error %.3g with %.2g noise", res.RMS, tc.noise)
			}
			fit := benchModel()
			fit.Weights = res.Weights
			for _, base := range []convert.Form{convert.Original, convert.Fused, convert.Flash} {
				for _, f := range []convert.Form{convert.Performer, convert.Linformer, convert.LocalPooled} {
					want, got := cm.CrossoverOver(base, f), fit.CrossoverOver(base, f)
					if math.Abs(float64(got-want)) > tc.tol*float64(want) {
						t.Errorf("%s vs %s: crossover %d with fitted weights %+v, %d with the true ones", f, base, got, res.Weights, want)
					}
				}
			}
		})
	}
}

func TestFitErrors(t *testing.T) {
	cm := benchModel()
	if _, err := Fit(cm, []Sample{{Group: "a", Form: convert.Original, N: 512, Ms: 1}, {Group: "a", Form: convert.Performer, N: 512, Ms: 1}}); !errors.Is(err, ErrTooFew) {
		t.Errorf("two samples: err %v, want ErrTooFew", err)
	}
	if _, err := Fit(cm, []Sample{{Group: "a", Form: convert.Original, N: 512, Ms: -1}}); err == nil {
		t.Error("negative time accepted")
	}
}

// TestFitSetsAcrossShapes times synthetic runs of two models of different
// shapes with known weights (a per-token term among them), fits one set of
// weights to both with FitSets, and checks the fit on a third shape it
// never saw: every speedup of a converted form over the original there
// within 2 % of the true one, and Check's errors on that shape's runs
// near 0 for the fitted weights and not for weights without the per-token
// term.
func TestFitSetsAcrossShapes(t *testing.T) {
	truth := convert.Weights{Original: 0.3, Flash: 0.5, Pass: 40, Exp: 2, FlashToken: 300, Token: 3000, Layer: 1e8}
	bert := benchModel()
	window := convert.CostModel{
		Dims:     convert.Dims{Layers: 22, Hidden: 768, Heads: 12, HeadDim: 64, FFN: 2304, FFNOut: 1152, WindowLayers: 14, Window: 64},
		Features: 256, K: 256, Block: 64, Segments: 64, Sinks: 2,
	}
	small := convert.CostModel{
		Dims:     convert.Dims{Layers: 6, Hidden: 384, Heads: 6, HeadDim: 64, FFN: 2304, FFNOut: 1152, WindowLayers: 4, Window: 64},
		Features: 256, K: 256, Block: 64, Segments: 64, Sinks: 2,
	}
	timed := func(cm convert.CostModel, forms []convert.Form, lengths []int) []Sample {
		cm.Weights = truth
		var out []Sample
		for i, n := range lengths {
			drift := 1 + 0.1*float64(i%3)
			for _, f := range forms {
				out = append(out, Sample{Group: "a", Form: f, N: n, Ms: cm.Work(f, n) * 1e-8 * drift})
			}
		}
		return out
	}
	bertForms := []convert.Form{convert.Original, convert.Flash, convert.Performer, convert.Linformer, convert.LocalPooled}
	windowForms := []convert.Form{convert.Original, convert.Windowed, convert.Performer, convert.LocalPooled}
	res, err := FitSets([]Set{
		{Model: bert, Samples: timed(bert, bertForms, []int{384, 768, 1536, 3072, 4096})},
		{Model: window, Samples: timed(window, windowForms, []int{1024, 2048, 4096, 8192})},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Max > 5e-3 {
		t.Errorf("exact samples fitted with max ratio error %.2g, want < 5e-3", res.Max)
	}
	fitted, exact := small, small
	fitted.Weights, exact.Weights = res.Weights, truth
	for _, n := range []int{2048, 8192, 32768} {
		for _, f := range windowForms[1:] {
			if got, want := fitted.Speedup(f, n), exact.Speedup(f, n); math.Abs(got/want-1) > 0.02 {
				t.Errorf("held-out shape, %s at %d: speedup %.3f with fitted weights %v, %.3f with the true ones", f, n, got, res.Weights, want)
			}
		}
	}
	heldOut := timed(small, windowForms, []int{2048, 8192})
	fitted.Weights = res.Weights
	if c, err := Check(Set{Model: fitted, Samples: heldOut}); err != nil || c.RMS > 0.01 {
		t.Errorf("Check with the fitted weights: %+v, %v; want RMS < 1 %%", c, err)
	}
	noToken := res.Weights
	noToken.Token = 0
	fitted.Weights = noToken
	if c, err := Check(Set{Model: fitted, Samples: heldOut}); err != nil || c.RMS < 0.05 {
		t.Errorf("Check without the per-token term: %+v, %v; want RMS ≥ 5 %%", c, err)
	}
}

// TestFitSetsWeighModelsAlike fits two models timed with different true
// weights (no one set of weights fits both) and checks that each model
// weighs the same in the fit however many ratios its runs give: timing
// the second model five times over (five groups of the same times) leaves
// the fit where it was, while under a weight per ratio it would pull the
// fit five times as hard towards its own truth.
func TestFitSetsWeighModelsAlike(t *testing.T) {
	bert := benchModel()
	window := convert.CostModel{
		Dims:     convert.Dims{Layers: 22, Hidden: 768, Heads: 12, HeadDim: 64, FFN: 2304, FFNOut: 1152, WindowLayers: 14, Window: 64},
		Features: 256, K: 256, Block: 64, Segments: 64, Sinks: 2,
	}
	timed := func(cm convert.CostModel, w convert.Weights, groups int, lengths []int) []Sample {
		cm.Weights = w
		var out []Sample
		for g := range groups {
			for _, n := range lengths {
				for _, f := range []convert.Form{convert.Original, convert.Windowed, convert.Performer, convert.LocalPooled} {
					out = append(out, Sample{Group: string(rune('a' + g)), Form: f, N: n, Ms: cm.Work(f, n) * 1e-8})
				}
			}
		}
		return out
	}
	truthA := convert.Weights{Original: 0.3, Pass: 40, Exp: 2, Token: 3000, Layer: 1e8}
	truthB := convert.Weights{Original: 0.3, Pass: 120, Exp: 2, Token: 200, Layer: 1e8}
	bertTimes := timed(bert, truthA, 1, []int{384, 768, 1152, 1536, 2304, 3072, 4096, 6144, 8192})
	lengths := []int{1024, 2048, 4096, 8192}
	once, err := FitSets([]Set{{Model: bert, Samples: bertTimes}, {Model: window, Samples: timed(window, truthB, 1, lengths)}})
	if err != nil {
		t.Fatal(err)
	}
	five, err := FitSets([]Set{{Model: bert, Samples: bertTimes}, {Model: window, Samples: timed(window, truthB, 5, lengths)}})
	if err != nil {
		t.Fatal(err)
	}
	if once.Max < 0.02 {
		t.Fatalf("the two truths are fitted to within %.2g: the test needs models no one set of weights fits", once.Max)
	}
	a, b := window, window
	a.Weights, b.Weights = once.Weights, five.Weights
	for _, n := range lengths {
		for _, f := range []convert.Form{convert.Windowed, convert.Performer, convert.LocalPooled} {
			if got, want := b.Speedup(f, n), a.Speedup(f, n); math.Abs(got/want-1) > 2e-3 {
				t.Errorf("%s at %d: speedup %.4f fitted with the model timed five times, %.4f with it timed once", f, n, got, want)
			}
		}
	}
}
