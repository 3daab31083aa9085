package finetune

import (
	"fmt"
	"strings"
	"testing"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/models"
)

// TestFitProgress fits the tiny BERT converted to Linformer (through Fit)
// and to local+pooled (directly): Options.Progress gets one line per
// fitted layer, counted out of the layers to fit, with the layer's errors
// (on the rows trained on and held out) and the step kept as the report
// has them.
func TestFitProgress(t *testing.T) {
	orig, calib, _ := tinyFitSetup(t, 4, 24)
	cfg := models.TinyConfig()
	lin, _, err := convert.ToLinformer(orig, convert.LinformerOptions{Init: "gaussian", K: 8, MaxLen: 32, Seed: 4})
	if err != nil {
		t.Fatal(err)
	}
	lp, _, err := convert.ToLocalPooled(orig, convert.LocalPooledOptions{Block: 8, Segments: 4})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		fit  func(Options) (*Report, error)
	}{
		{"Fit(Linformer)", func(o Options) (*Report, error) { _, r, err := Fit(orig, lin, calib, o); return r, err }},
		{"LocalPooled", func(o Options) (*Report, error) { _, r, err := LocalPooled(orig, lp, calib, o); return r, err }},
	} {
		var log strings.Builder
		rep, err := c.fit(Options{Steps: 5, Batch: 2, Seed: 1, Progress: &log})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		lines := strings.Split(strings.TrimSuffix(log.String(), "\n"), "\n")
		if len(rep.Layers) != cfg.Layers || len(lines) != len(rep.Layers) {
			t.Fatalf("%s: %d layers fitted, %d progress lines:\n%s", c.name, len(rep.Layers), len(lines), log.String())
		}
		for i, l := range rep.Layers {
			want := fmt.Sprintf("finetune: layer %d/%d: %s block %d (%s): rel err %.4f → %.4f, held-out %.4f → %.4f, kept step %d/%d (",
				i+1, cfg.Layers, rep.Op, l.Layer, l.Node, l.Before, l.After, l.HeldOutBefore, l.HeldOutAfter, l.KeptStep, l.StepsRun)
			if !strings.HasPrefix(lines[i], want) || !strings.Contains(lines[i], " elapsed, ETA ") {
				t.Errorf("%s: progress line %q, want %q…", c.name, lines[i], want)
			}
		}
		t.Logf("%s:\n%s", c.name, log.String())
	}
}
