package benchrun

import (
	"encoding/json"
	"math"
	"os"
	"testing"

	"github.com/linearize/linearize/convert"
)

// TestDefaultWeightsFromFit refits the cost model to the run its default
// weights come from (docs/bench-crossover.json) and checks that
// convert.DefaultWeights are that fit to 3 significant digits, so the
// defaults stay what the command README names produces. It pins the
// constants to the fit; whether the fit is right is TestFitRecoversWeights'
// job (cmd/internal/costfit), on runs timed with known weights.
func TestDefaultWeightsFromFit(t *testing.T) {
	b, err := os.ReadFile("../../../docs/bench-crossover.json")
	if err != nil {
		t.Fatal(err)
	}
	var r Result
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	r.Summarize()
	cm := convert.CostModel{Dims: r.Dims, Features: r.Features, K: r.K, Block: 64, Segments: 64, Sinks: 2}
	fit, err := FitWeights(cm, &r)
	if err != nil {
		t.Fatal(err)
	}
	got, want := fit.Weights.Normalized(), convert.DefaultWeights.Normalized()
	for _, p := range []struct {
		name      string
		got, want float64
	}{
		{"original", got.Original, want.Original}, {"fused", got.Fused, want.Fused}, {"flash", got.Flash, want.Flash},
		{"linear", got.Linear, want.Linear}, {"pass", got.Pass, want.Pass}, {"exp", got.Exp, want.Exp},
		{"fused-token", got.FusedToken, want.FusedToken}, {"flash-token", got.FlashToken, want.FlashToken}, {"layer", got.Layer, want.Layer},
	} {
		// 3 digits round by at most 0.5 %; leave room for the last bits
		// of a Nelder-Mead run on another machine.
		if math.Abs(p.got-p.want) > 0.01*p.want {
			t.Errorf("%s: fitted %.4g, DefaultWeights %.4g", p.name, p.got, p.want)
		}
	}
}
