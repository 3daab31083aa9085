package benchrun

import (
	"slices"
	"testing"

	"github.com/linearize/linearize/convert"
)

// TestPlotLines: the plot draws every variant that ran (window and
// hedgehog included, which a fixed list of forms left out), in the order
// of the runs, then each baseline once, dashed by its index.
func TestPlotLines(t *testing.T) {
	r := &Result{
		Runs: []Measurement{
			{Variant: convert.Original, Length: 512},
			{Variant: convert.Windowed, Length: 512},
			{Variant: convert.Hedgehog, Length: 512},
			{Variant: "flash", Length: 512, Baseline: true},
			{Variant: convert.Original, Length: 1024},
			{Variant: convert.Windowed, Length: 1024},
		},
		Baselines: []Baseline{{Name: "flash"}},
	}
	forms, baseline := plotLines(r)
	want := []convert.Form{convert.Original, convert.Windowed, convert.Hedgehog, "flash"}
	if !slices.Equal(forms, want) || !slices.Equal(baseline, []int{-1, -1, -1, 0}) {
		t.Errorf("lines %v %v, want %v [-1 -1 -1 0]", forms, baseline, want)
	}
	for _, f := range forms[:3] {
		if _, ok := variantColors[f]; !ok {
			t.Errorf("variant %s has no colour of its own", f)
		}
	}
}
