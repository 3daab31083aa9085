package realtable

import (
	"reflect"
	"strings"
	"testing"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/finetune"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/models"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/ops"
)

func TestVariantNames(t *testing.T) {
	for _, c := range []struct {
		v    Variant
		want string
	}{
		{Variant{Performer: &convert.PerformerOptions{Features: 256, FeatureMap: ops.FeaturesFavorPlus, Center: convert.CenterOff}}, "Performer M=256 orthogonal chi, zero-shot"},
		{Variant{Performer: &convert.PerformerOptions{Features: 64, Omega: "iid", Norms: "sqrt-d", FeatureMap: ops.FeaturesFavorPlus, Center: convert.CenterOff}, Fit: true}, "Performer M=64 iid sqrt-d, fine-tuned"},
		{Variant{Linformer: &convert.LinformerOptions{K: 128}}, "Linformer k=128, zero-shot"},
		{Variant{LocalPooled: &convert.LocalPooledOptions{Block: 32, Segments: 32, Sinks: convert.DefaultSinks}}, "Local+pooled b=32 k=32 sinks, zero-shot"},
		{Variant{LocalPooled: &convert.LocalPooledOptions{}}, "Local+pooled b=64 k=64 sinks, zero-shot"},
		{Variant{LocalPooled: &convert.LocalPooledOptions{NoLocal: true, Segments: 64, Sinks: convert.NoSinks}}, "Linformer pooled k=64, zero-shot"},
		{Variant{LocalPooled: &convert.LocalPooledOptions{NoLocal: true, Segments: 128, Sinks: convert.DefaultSinks}, Fit: true}, "Linformer pooled k=128 sinks, fine-tuned"},
		{Variant{LocalPooled: &convert.LocalPooledOptions{Block: 16, Segments: 8, Sinks: convert.SinkLast}}, "Local+pooled b=16 k=8 sink last, zero-shot"},
	} {
		if got := c.v.Name(); got != c.want {
			t.Errorf("Name() = %q, want %q", got, c.want)
		}
		if got := c.v.Method(); !strings.HasPrefix(c.want, got+", ") {
			t.Errorf("Method() = %q is not the name %q without its mode", got, c.want)
		}
	}
}

func TestLengthMarkdown(t *testing.T) {
	rows := []Row{
		{Method: "Linformer k=64", Length: 128, PooledCos: 0.5, Validated: true},
		{Method: "Linformer k=64", FineTuned: true, Length: 128, PooledCos: 0.9, Validated: true},
		{Method: "Local+pooled b=32 k=32 sinks", Length: 128, PooledCos: 0.99, Validated: true},
		{Method: "Linformer k=64", Length: 512, PooledCos: 0.25, Validated: true},
		{Method: "Linformer k=64", FineTuned: true, Length: 512, PooledCos: 0.75, Validated: false},
		{Method: "Local+pooled b=32 k=32 sinks", Length: 512, PooledCos: 0.934, Validated: true},
	}
	want := `| variant | n=128 zero-shot | n=128 fine-tuned | n=512 zero-shot | n=512 fine-tuned |
|---|---|---|---|---|
| Linformer k=64 | 0.500 | 0.900 | 0.250 | 0.750 (validate FAIL) |
| Local+pooled b=32 k=32 sinks | 0.990 | – | 0.934 | – |
`
	if got := LengthMarkdown(rows); got != want {
		t.Errorf("LengthMarkdown:\n%s\nwant:\n%s", got, want)
	}
	md := Markdown(rows[:1])
	if !strings.Contains(md, "| variant | n | pooled cos (mean)") || !strings.Contains(md, "|  | 128 | 0.5000 |") {
		t.Errorf("Markdown with lengths:\n%s", md)
	}
	if md := Markdown([]Row{{Variant: "x", PooledCos: 1, Validated: true}}); strings.Contains(md, "| n |") {
		t.Errorf("Markdown without lengths has an n column:\n%s", md)
	}
}

// TestByLength measures a tiny random BERT at two lengths: every row
// carries its length and the inputs of that length, and a local+pooled
// conversion whose segments cover every key is exact.
func TestByLength(t *testing.T) {
	if err := infer.ORTAvailable(); err != nil {
		t.Skipf("%v (run scripts/setup.sh)", err)
	}
	orig, err := models.BERT(models.TinyConfig())
	if err != nil {
		t.Fatal(err)
	}
	var asked []int
	inputs := func(n int) (cal, held Inputs, err error) {
		asked = append(asked, n)
		for i, in := range []*Inputs{&cal, &held} {
			feed, err := infer.RandomInputs(orig, infer.GraphInputs(orig), infer.RandomOptions{Batch: 4, SeqLen: n, Seed: uint64(i + 1)})
			if err != nil {
				return cal, held, err
			}
			*in = Inputs{Feed: feed, Batch: 4, SeqLen: n}
		}
		return cal, held, nil
	}
	var log strings.Builder
	opt := Options{
		Variants: []Variant{
			{Linformer: &convert.LinformerOptions{Init: "gaussian", K: 8, MaxLen: 64, Seed: 1}},
			{Linformer: &convert.LinformerOptions{Init: "gaussian", K: 8, MaxLen: 64, Seed: 1}, Fit: true},
			{LocalPooled: &convert.LocalPooledOptions{NoLocal: true, Segments: 64, Sinks: convert.NoSinks}},
		},
		Fit:      finetune.Options{Steps: 20, Batch: 2, Seed: 1},
		Progress: &log,
		Detail:   true,
	}
	rows, err := ByLength(orig, []int{16, 32}, inputs, opt)
	if err != nil {
		t.Fatal(err)
	}
	if len(asked) != 2 || asked[0] != 16 || asked[1] != 32 || len(rows) != 6 {
		t.Fatalf("lengths asked %v, %d rows", asked, len(rows))
	}
	// One step line per variant and length, counted over both lengths;
	// with Detail, notes of each variant's phases and a line per fitted
	// layer of the fine-tuned variant (2 layers at each length).
	var steps, notes, layers int
	for _, line := range strings.Split(strings.TrimSuffix(log.String(), "\n"), "\n") {
		switch {
		case strings.HasPrefix(line, "finetune: layer "):
			layers++
		case strings.HasPrefix(line, progressLabel+" ") && strings.Contains(line, "pooled cos") && strings.Contains(line, "ETA"):
			steps++
		case strings.HasPrefix(line, progressLabel+" "):
			notes++
		default:
			t.Errorf("progress line %q", line)
		}
	}
	if steps != 6 || notes == 0 || layers != 4 || !strings.Contains(log.String(), progressLabel+" 6/6: n=32 ") {
		t.Errorf("%d step lines, %d notes, %d fitted layers:\n%s", steps, notes, layers, log.String())
	}
	for i, r := range rows {
		if want := []int{16, 32}[i/3]; r.Length != want {
			t.Errorf("row %d (%s): length %d, want %d", i, r.Variant, r.Length, want)
		}
		if !r.Validated || len(r.LayerErr) != 2 {
			t.Errorf("row %+v", r)
		}
		if r.Method == "Linformer pooled k=64" && (r.PooledCos < 1-1e-4 || r.MeanLayerErr > 1e-4) {
			t.Errorf("pooled Linformer with k ≥ n is not exact: %+v", r)
		}
		if r.FineTuned && !(r.FitAfter < r.FitBefore) {
			t.Errorf("fit did not lower the error: %+v", r)
		}
	}
	if !strings.Contains(LengthMarkdown(rows), "| Linformer pooled k=64 | 1.000 | – | 1.000 | – |") {
		t.Errorf("LengthMarkdown:\n%s", LengthMarkdown(rows))
	}
}

func TestFirstRows(t *testing.T) {
	ids := onnx.NewInt64([]int{3, 2}, []int64{1, 2, 3, 4, 5, 6})
	mask := &onnx.Tensor{DType: onnx.Int32, Shape: []int{3, 2}, Data: []int32{1, 1, 1, 0, 1, 1}}
	other := onnx.NewFloat([]int{1, 4}, []float32{1, 2, 3, 4})
	got := firstRows(map[string]*onnx.Tensor{"ids": ids, "mask": mask, "other": other}, 3, 2)
	if g := got["ids"]; !reflect.DeepEqual(g.Shape, []int{2, 2}) || !reflect.DeepEqual(g.Int64s(), []int64{1, 2, 3, 4}) {
		t.Errorf("ids %v %v", g.Shape, g.Data)
	}
	if g := got["mask"]; g.DType != onnx.Int32 || !reflect.DeepEqual(g.Data, []int32{1, 1, 1, 0}) {
		t.Errorf("mask %v", g.Data)
	}
	if got["other"] != other || len(ids.Int64s()) != 6 {
		t.Error("a tensor without the batch dimension was cut, or the input changed")
	}
}

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
	if err := infer.ORTAvailable(); err != nil {
		t.Skipf("%v (run scripts/setup.sh)", err)
	}
	var in [2]Inputs
	for i := range in {
		feed, err := infer.RandomInputs(orig, infer.GraphInputs(orig), infer.RandomOptions{Batch: 3, SeqLen: 20, Seed: uint64(i + 1)})
		if err != nil {
			t.Fatal(err)
		}
		in[i] = Inputs{Feed: feed, Batch: 3, SeqLen: 20}
	}
	rows, err := Table(orig, Options{
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
