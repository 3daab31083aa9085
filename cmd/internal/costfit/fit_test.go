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
