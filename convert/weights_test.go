package convert

import (
	"math"
	"strings"
	"testing"
)

func TestParseWeights(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Weights
		err  string
	}{
		{"default", DefaultWeights, ""},
		{"", DefaultWeights, ""},
		{"macs", Weights{}, ""},
		{"pass=30, exp=2", func() Weights { w := DefaultWeights; w.Pass, w.Exp = 30, 2; return w }(), ""},
		{"original=1,fused=1,flash=1,linear=1,pass=0,exp=0,fused-token=0,flash-token=0,token=0,layer=0", Weights{Original: 1, Fused: 1, Flash: 1, Linear: 1}, ""},
		{"token=0", func() Weights { w := DefaultWeights; w.Token = 0; return w }(), ""},
		{"fused-token=3,flash-token=4", func() Weights { w := DefaultWeights; w.FusedToken, w.FlashToken = 3, 4; return w }(), ""},
		{"pass", Weights{}, "not name=value"},
		{"speed=3", Weights{}, `unknown weight "speed"`},
		{"pass=x", Weights{}, "pass"},
		{"pass=-1", Weights{}, "pass = -1"},
		{"exp=NaN", Weights{}, "exp = NaN"},
		{"layer=+Inf", Weights{}, "layer = +Inf"},
	} {
		got, err := ParseWeights(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseWeights(%q): err %v, want one naming %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseWeights(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	// String writes what ParseWeights reads back exactly.
	for _, w := range []Weights{DefaultWeights, {Original: 0.123456789, Pass: 1e-7, Layer: 3e9}} {
		back, err := ParseWeights(w.String())
		if err != nil || back != w.Normalized() {
			t.Errorf("%v read back as %+v, %v", w, back, err)
		}
	}
}

// TestWorkWeights checks Work against the weights' definition, term by
// term, on a model where each term can be told apart: doubling one weight
// adds that term's count once more.
func TestWorkWeights(t *testing.T) {
	cm := CostModel{Dims: Dims{Layers: 3, Hidden: 256, Heads: 4, HeadDim: 64, FFN: 1024}, Features: 64, K: 64, Block: 16, Segments: 16, Sinks: 2, Landmarks: 16}
	base := Weights{Original: 0.5, Fused: 0.25, Flash: 0.75, Linear: 2, Pass: 7, Exp: 3, FusedToken: 5, FlashToken: 11, Token: 13, Layer: 1000}
	coreOf := map[Form]func(*Weights) *float64{
		Original: func(w *Weights) *float64 { return &w.Original }, Fused: func(w *Weights) *float64 { return &w.Fused },
		Flash: func(w *Weights) *float64 { return &w.Flash }, Performer: func(w *Weights) *float64 { return &w.Linear },
		Linformer: func(w *Weights) *float64 { return &w.Linear }, LocalPooled: func(w *Weights) *float64 { return &w.Linear },
		Lara: func(w *Weights) *float64 { return &w.Linear },
	}
	for f, core := range coreOf {
		for _, n := range []int{1, 100, 1000} {
			lc := cm.Layer(f, n)
			cm.Weights = base
			w0 := cm.Work(f, n)
			for _, term := range []struct {
				name  string
				get   func(*Weights) *float64
				count float64
			}{
				{"core", core, float64(lc.Core)},
				{"pass", func(w *Weights) *float64 { return &w.Pass }, float64(lc.Elementwise)},
				{"exp", func(w *Weights) *float64 { return &w.Exp }, float64(lc.Exps)},
				{"layer", func(w *Weights) *float64 { return &w.Layer }, 1},
				{"fused-token", func(w *Weights) *float64 { return &w.FusedToken }, map[bool]float64{true: float64(n * cm.Dims.Hidden)}[f == Fused]},
				{"flash-token", func(w *Weights) *float64 { return &w.FlashToken }, map[bool]float64{true: float64(n * cm.Dims.Hidden)}[f == Flash]},
				{"token", func(w *Weights) *float64 { return &w.Token }, float64(n * cm.Dims.Hidden)},
			} {
				w := base
				*term.get(&w) *= 2
				cm.Weights = w
				got := cm.Work(f, n) - w0
				want := 3 * *term.get(&base) * term.count
				if math.Abs(got-want) > 1e-9*math.Max(1, w0) {
					t.Errorf("%s n=%d: doubling the %s weight adds %g, want %g", f, n, term.name, got, want)
				}
			}
			// With every weight zero but the cores at 1, Work is the MACs.
			cm.Weights = Weights{}
			if got := cm.Work(f, n); got != float64(cm.Total(f, n)) {
				t.Errorf("%s n=%d: zero weights give %g, MACs %d", f, n, got, cm.Total(f, n))
			}
		}
	}
}
