package infer

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/linearize/linearize/onnx"
)

// TestCompareTensorsNonFinite: a NaN or an Inf in either tensor fails
// the comparison, even the same NaN or Inf in both; the figures stay
// finite (JSON holds them) and the counts say which side holds what.
func TestCompareTensorsNonFinite(t *testing.T) {
	f := func(v ...float32) *onnx.Tensor { return onnx.NewFloat([]int{len(v)}, v) }
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, c := range []struct {
		name   string
		a, b   *onnx.Tensor
		want   string
		counts [4]int
	}{
		{"NaN in both", f(nan, nan, 1), f(nan, nan, 1), "non-finite: 2 NaN in a; 2 NaN in b", [4]int{2, 0, 2, 0}},
		{"all NaN", f(nan, nan), f(nan, nan), "non-finite: 2 NaN in a; 2 NaN in b", [4]int{2, 0, 2, 0}},
		{"same Inf in both", f(inf, 1), f(inf, 1), "non-finite: 1 Inf in a; 1 Inf in b", [4]int{0, 1, 0, 1}},
		{"Inf in a only", f(-inf, 1), f(2, 1), "non-finite: 1 Inf in a", [4]int{0, 1, 0, 0}},
		{"NaN and Inf in b", f(1, 2, 3), f(nan, inf, 3), "non-finite: 1 NaN and 1 Inf in b", [4]int{0, 0, 1, 1}},
	} {
		d := CompareTensors(c.a, c.b)
		if d.OK(1e9) {
			t.Errorf("%s: OK with any tolerance: %+v", c.name, d)
		}
		if got := d.NonFinite("a", "b"); got != c.want {
			t.Errorf("%s: NonFinite %q, want %q", c.name, got, c.want)
		}
		if got := [4]int{d.NaN, d.Inf, d.RefNaN, d.RefInf}; got != c.counts {
			t.Errorf("%s: counts %v, want %v", c.name, got, c.counts)
		}
		if _, err := json.Marshal(d); err != nil {
			t.Errorf("%s: the diff does not encode as JSON: %v", c.name, err)
		}
		if !strings.Contains(d.String(), "non-finite") {
			t.Errorf("%s: String %q does not say non-finite", c.name, d)
		}
	}
	if d := CompareTensors(f(1, 2), f(1, 2)); !d.OK(0) || d.NonFinite("a", "b") != "" {
		t.Errorf("finite equal tensors: %+v", d)
	}
}

// TestCompareModelsNonFinite: a value that is not finite in either model
// is a row that says so and a failure of the comparison, never a row of
// perfect figures.
func TestCompareModelsNonFinite(t *testing.T) {
	nan := float32(math.NaN())
	opt := ModelCompareOptions{Batch: 1, SeqLen: 2}
	ref := onnx.NewFloat([]int{1, 2, 2}, []float32{nan, nan, nan, nan})
	got := onnx.NewFloat([]int{1, 2, 2}, []float32{nan, nan, nan, nan})
	r := compareValue("h", "b.onnx", "a.onnx", "output", got, ref, opt)
	if r.NonFinite != "non-finite: 4 NaN in b.onnx; 4 NaN in the reference a.onnx" || r.NaN != 4 || r.RefNaN != 4 {
		t.Errorf("row %+v", r)
	}
	mc := &ModelComparison{Models: []string{"a.onnx", "b.onnx"}, Rows: []ValueComparison{r}}
	if bad := mc.NonFinite(); len(bad) != 1 || !strings.HasPrefix(bad[0], "b.onnx h: non-finite: 4 NaN") {
		t.Errorf("NonFinite %q", bad)
	}
	var sb strings.Builder
	if err := mc.WriteTable(&sb); err != nil || !strings.Contains(sb.String(), "non-finite: 4 NaN in b.onnx") {
		t.Errorf("table (%v):\n%s", err, sb.String())
	}
	if err := mc.WriteJSON(&sb); err != nil {
		t.Errorf("JSON: %v", err)
	}
}
