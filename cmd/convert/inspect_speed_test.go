package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/cmd/internal/benchrun"
	"github.com/linearize/linearize/cmd/internal/costfit"
	"github.com/linearize/linearize/convert"
)

// TestSpeedGuide: the figures inspect --cost prints beside its
// predictions are those of the recorded runs: each run's RMS error under
// the default weights (costfit.Check, as docs/bench-fit.txt has it), the
// speedup the default weights predict from the run's dimensions, and the
// speedup measured (medians), each as printed.
func TestSpeedGuide(t *testing.T) {
	for _, c := range []struct {
		file, line string
		form       convert.Form
		n          int
	}{
		{"bench-fullsize.json", "full-size ModernBERT-base", convert.LocalPooled, 8192},
		{"bench-nomic.json", "nomic-embed-text-v1.5's shape", convert.LocalPooled, 8192},
		{"bench-jina-v2.json", "jina-embeddings-v2-base's shape", convert.LocalPooled, 4096},
		{"bench-xlmr-large.json", "XLM-R-large's shape (bge-m3)", convert.LocalPooled, 4096},
	} {
		data, err := os.ReadFile(filepath.Join("..", "..", "docs", c.file))
		if err != nil {
			t.Fatal(err)
		}
		var r benchrun.Result
		if err := json.Unmarshal(data, &r); err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		r.Summarize()
		cm := r.CostModel(convert.DefaultWeights)
		check, err := costfit.Check(costfit.Set{Model: cm, Samples: benchrun.Samples(&r, "")})
		if err != nil {
			t.Fatal(err)
		}
		median := func(f convert.Form) float64 {
			for _, m := range r.Runs {
				if m.Variant == f && m.Length == c.n {
					return m.MedianMS
				}
			}
			t.Fatalf("%s: no %s run at %d", c.file, f, c.n)
			return 0
		}
		want := fmt.Sprintf("RMS error %4.1f %%", 100*check.RMS)
		pred := fmt.Sprintf("%.2fx predicted, %.2fx measured", cm.Speedup(c.form, c.n), median(convert.Original)/median(c.form))
		var found string
		for _, l := range strings.Split(speedGuide, "\n") {
			if strings.Contains(l, c.line) {
				found = l
			}
		}
		if !strings.Contains(found, want) || !strings.Contains(found, pred) || math.IsNaN(check.RMS) {
			t.Errorf("%s: the guide says %q; the run gives %q and %q", c.file, found, want, pred)
		}
	}
}
