package finetune

import (
	"strings"
	"testing"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/models"
	"github.com/linearize/linearize/runtime"
)

// A LARA variant is named by its landmarks, converts, is measured and
// validated like the others, and refuses fine-tuning.
func TestTableLara(t *testing.T) {
	for _, c := range []struct {
		v    Variant
		want string
	}{
		{Variant{Lara: &convert.LaraOptions{Landmarks: 64}}, "LARA C=64, zero-shot"},
		{Variant{Lara: &convert.LaraOptions{}}, "LARA C=256, zero-shot"},
		{Variant{Lara: &convert.LaraOptions{Landmarks: 32, Samples: 4}}, "LARA C=32 S=4, zero-shot"},
	} {
		if got := c.v.Name(); got != c.want {
			t.Errorf("%+v: name %q, want %q", c.v.Lara, got, c.want)
		}
	}
	orig, err := models.BERT(models.TinyConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := convertVariant(orig, Variant{Lara: &convert.LaraOptions{Landmarks: 4}, Fit: true}); err == nil || !strings.Contains(err.Error(), "zero-shot") {
		t.Errorf("fine-tuning LARA: error %v", err)
	}
	if _, err := convertVariant(orig, Variant{Lara: &convert.LaraOptions{}, LocalPooled: &convert.LocalPooledOptions{}}); err == nil {
		t.Error("two conversions in one variant accepted")
	}
	if err := runtime.ORTAvailable(); err != nil {
		t.Skipf("%v (run scripts/setup.sh)", err)
	}
	var in [2]Inputs
	for i := range in {
		feed, err := runtime.RandomInputs(orig, runtime.GraphInputs(orig), runtime.RandomOptions{Batch: 3, SeqLen: 20, Seed: uint64(i + 1)})
		if err != nil {
			t.Fatal(err)
		}
		in[i] = Inputs{Feed: feed, Batch: 3, SeqLen: 20}
	}
	rows, err := Table(orig, TableOptions{
		Variants:    []Variant{{Lara: &convert.LaraOptions{Landmarks: 8, Seed: 1}}},
		Calibration: in[0], HeldOut: in[1],
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || !rows[0].Validated || rows[0].Method != "LARA C=8" || !(rows[0].PooledCos > 0) || len(rows[0].LayerErr) != 2 {
		t.Errorf("rows %+v", rows)
	}
}
