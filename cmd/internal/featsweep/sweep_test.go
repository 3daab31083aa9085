package featsweep_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/linearize/linearize/cmd/internal/featsweep"
	"github.com/linearize/linearize/features"
)

// The Performer estimator's error falls like 1/√M against exact softmax
// attention in float64, and orthogonal features beat iid ones on average
// (small logits, where the estimator is usable).
func TestPerformerErrorFallsWithM(t *testing.T) {
	cfg := featsweep.Config{D: 64, N: 128, Seeds: 5, Sigma: 0.25, Norms: []features.Norms{features.NormsChi}, Features: []int{64, 256, 1024, 4096}}
	cells, err := featsweep.Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	featsweep.WriteTable(&buf, cfg, cells)
	t.Logf("\n%s", buf.String())
	nm := len(cfg.Features) // cells come one row of M values per kind
	means := map[features.Kind]float64{}
	for i := 0; i < len(cells); i += nm {
		row := cells[i : i+nm]
		kind := row[0].Kind
		for j := 1; j < nm; j++ {
			if row[j].Mean >= row[j-1].Mean {
				t.Errorf("%s: error does not fall from M=%d (%.4f) to M=%d (%.4f)", kind, row[j-1].M, row[j-1].Mean, row[j].M, row[j].Mean)
			}
		}
		if s := featsweep.Slope(row); s < -0.62 || s > -0.38 {
			t.Errorf("%s: log-log slope %.3f, want −0.5 ± 0.12", kind, s)
		}
		for _, c := range row {
			means[kind] += c.Mean / float64(nm)
		}
	}
	if means[features.Orthogonal] >= means[features.IID] {
		t.Errorf("orthogonal ω (mean error %.4f) does not beat iid (%.4f)", means[features.Orthogonal], means[features.IID])
	}
}

// Progress has one line per trial, counted out of the seeds.
func TestRunProgress(t *testing.T) {
	var log strings.Builder
	if _, err := featsweep.Run(featsweep.Config{D: 8, N: 16, Features: []int{8}, Seeds: 3, Kinds: []features.Kind{features.IID}, Norms: []features.Norms{features.NormsChi}, Progress: &log}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(log.String(), "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "sweep: trial 1/3 (") || !strings.HasPrefix(lines[2], "sweep: trial 3/3 (") {
		t.Errorf("progress:\n%s", log.String())
	}
}
