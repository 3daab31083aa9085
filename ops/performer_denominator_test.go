package ops_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/infer/infertest"
	"github.com/linearize/linearize/kernels"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/ops"
)

// rowErrors returns, per output row of [B,H,S,Dv], max |got − want| over
// the row relative to max |want| over the row.
func rowErrors(got []float32, want []float64, dv int) []float64 {
	var errs []float64
	for i := 0; i+dv <= len(want); i += dv {
		var d, s float64
		for c := 0; c < dv; c++ {
			d = math.Max(d, math.Abs(float64(got[i+c])-want[i+c]))
			s = math.Max(s, math.Abs(want[i+c]))
		}
		errs = append(errs, d/s)
	}
	return errs
}

// oldFormRows evaluates, in float64, the positive estimator as the op
// defined it before the mixture form: φ(q) = exp(u − max_r u)/√M per
// query, φ(k) = exp(t − T)/√M with one maximum T over all valid keys and
// features, out = φ(Q)·(φ(K)ᵀV) / (φ(Q)·φ(K)ᵀ1 + ε). It returns the
// output rows that form makes differ from want by more than half the
// row's scale (collapsed rows).
//
// Kept apart from ratioFromLogs in performer_variant_test.go: this is the
// old form, one key maximum and +ε, whose collapse the test counts.
func oldFormRows(q, k, v, omega, bias *onnx.Tensor, scale float64, eps float64, want []float64) int {
	b, h, s, d := q.Shape[0], q.Shape[1], q.Shape[2], q.Shape[3]
	dv, m := v.Shape[3], omega.Shape[1]
	qd, kd, vd, od := widen(q.Floats()), widen(k.Floats()), widen(v.Floats()), widen(omega.Floats())
	logits := func(x, om []float64) ([]float64, float64) { return featureLogits(x, om, m, d, scale) }
	out := make([]float64, len(want))
	for bh := 0; bh < b*h; bh++ {
		bi, hi := bh/h, bh%h
		om := od
		if omega.Shape[0] > 1 {
			om = od[hi*m*d:]
		}
		t := make([][]float64, s)
		top := math.Inf(-1)
		for j := 0; j < s; j++ {
			bv := float64(bias.Floats()[bi*bias.Shape[3]+j])
			if bv <= -1e4 {
				continue
			}
			u, hh := logits(kd[(bh*s+j)*d:], om)
			for r := range u {
				u[r] += bv - hh
				top = math.Max(top, u[r])
			}
			t[j] = u
		}
		for i := 0; i < s; i++ {
			u, _ := logits(qd[(bh*s+i)*d:], om)
			uq := math.Inf(-1)
			for _, x := range u {
				uq = math.Max(uq, x)
			}
			num := make([]float64, dv)
			var den float64
			for j, row := range t {
				if row == nil {
					continue
				}
				var kap float64
				for r := range row {
					kap += math.Exp(u[r]-uq) * math.Exp(row[r]-top) / float64(m)
				}
				den += kap
				for c := range num {
					num[c] += kap * vd[(bh*s+j)*dv+c]
				}
			}
			for c := range num {
				out[(bh*s+i)*dv+c] = num[c] / (den + eps)
			}
		}
	}
	collapsed := 0
	for _, e := range rowErrors(toFloat32(out), want, dv) {
		if e > 0.5 {
			collapsed++
		}
	}
	return collapsed
}

// featureLogits returns u_r = √scale·ω_r·x for the M rows of om ([M,D])
// and h = scale·‖x‖²/2.
func featureLogits(x, om []float64, m, d int, scale float64) (u []float64, hh float64) {
	rs := math.Sqrt(scale)
	u = make([]float64, m)
	for r := range u {
		for c := 0; c < d; c++ {
			u[r] += om[r*d+c] * x[c] * rs
		}
	}
	for c := 0; c < d; c++ {
		hh += x[c] * x[c] * scale / 2
	}
	return u, hh
}

func toFloat32(x []float64) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = float32(v)
	}
	return out
}

// TestPerformerLargeNormsMatchEstimator: with query/key norms ×10, the
// estimator's denominators span hundreds of orders of magnitude. Under the
// earlier form (one key maximum, absolute ε) most rows collapsed to near
// zero; the op now returns every row of the estimator itself: each output
// row, of the Go kernel and of the function body in onnxruntime, matches a
// float64 evaluation of the estimator's definition (summed from the logs
// of its terms, no stabiliser) relative to that row's own scale.
func TestPerformerLargeNormsMatchEstimator(t *testing.T) {
	const scale = 1 / 4.0
	c := perfCase{kernel: ops.KernelPositive, b: 2, h: 2, s: 9, d: 16, dv: 4, m: 32, perHead: true, bias: "pad", sigma: 10}
	q, k, v, omega, bias := c.inputs(3)
	want := performerRef(q, k, v, omega, bias, scale, ops.KernelPositive)
	rows := len(want) / c.dv
	collapsed := oldFormRows(q, k, v, omega, bias, scale, 1e-6, want)
	t.Logf("the earlier form collapses %d of %d rows", collapsed, rows)
	if collapsed < rows/4 {
		t.Fatalf("only %d of %d rows collapse under the earlier form: the case does not exercise the guard", collapsed, rows)
	}
	attrs := ops.PerformerAttrs{Scale: scale}
	got, err := ops.Performer(q, k, v, omega, bias, attrs)
	if err != nil {
		t.Fatal(err)
	}
	const tol = 1e-3
	check := func(what string, got []float32) {
		worst := 0.0
		for i, e := range rowErrors(got, want, c.dv) {
			worst = math.Max(worst, e)
			if !(e <= tol) {
				t.Errorf("%s: row %d differs from the estimator by %.3g of its scale", what, i, e)
			}
		}
		t.Logf("%s: worst row error %.2g of the row's scale", what, worst)
	}
	check("Go kernel", got.Floats())
	if !infertest.ORT(t) {
		return
	}
	fn, err := ops.PerformerFunction(ops.KernelPositive, 17)
	if err != nil {
		t.Fatal(err)
	}
	in := map[string]*onnx.Tensor{"Q": q, "K": k, "V": v, "Omega": omega, "key_bias": bias}
	node := ops.NewPerformerNode("perf", []string{"Q", "K", "V", "Omega", "key_bias"}, "out", attrs)
	check("onnxruntime", runORT(t, oneNodeModel(t, node, fn, 17, in), in).Floats())
}

// The variants at norms ×10 (and a shared mean ×10) match their float64
// estimator row by row too, in the kernel and in onnxruntime.
func TestPerformerVariantLargeNormsMatchEstimator(t *testing.T) {
	ort := infertest.ORT(t)
	for _, c := range variantCases() {
		if c.bias != "pad" || c.sq != 0 {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			c.sigma, c.mean = 10*c.sigma, 10*c.mean
			in := c.inputs(9)
			want := variantRef(in, c.attrs())
			got, err := ops.PerformerWith(in, c.attrs())
			if err != nil {
				t.Fatal(err)
			}
			check := func(what string, got []float32) {
				for i, e := range rowErrors(got, want, c.dv) {
					if !(e <= 1e-3) {
						t.Errorf("%s: row %d differs from the estimator by %.3g of its scale", what, i, e)
					}
				}
			}
			check("Go kernel", got.Floats())
			if !ort {
				return
			}
			model, feed := c.bodyModel(t, in, 17)
			check("onnxruntime", runORT(t, model, feed).Floats())
		})
	}
}

// guardRef counts, in float64 from the definitions, the rows whose
// denominator is below eps: for the trig kernel φ(q)·Σ_j φ(k_j) with
// φ(q) = [cos u, sin u]/√M, φ(k) = [cos u, sin u]·e^{h + b − max(h + b)}/√M
// (max(den, 0) < eps); for the causal op Σ_{j≤i} φ(q)·φ(k_j) with φ(q) =
// e^{u − max u}/√M, φ(k) = e^{t − R_i}/√M and R_i the maximum of t = u − h
// + b over the valid keys j ≤ i and the features.
func guardRef(q, k, omega, bias *onnx.Tensor, scale, eps float64, causal bool) int {
	b, h, s, d := q.Shape[0], q.Shape[1], q.Shape[2], q.Shape[3]
	m := omega.Shape[1]
	qd, kd, od := widen(q.Floats()), widen(k.Floats()), widen(omega.Floats())
	logits := func(x, om []float64) ([]float64, float64) { return featureLogits(x, om, m, d, scale) }
	n := 0
	for bh := 0; bh < b*h; bh++ {
		bi, hi := bh/h, bh%h
		om := od
		if omega.Shape[0] > 1 {
			om = od[hi*m*d:]
		}
		valid := func(j int) (float64, bool) {
			bv := float64(bias.Floats()[bi*bias.Shape[3]+j])
			return bv, bv > -1e4
		}
		for i := 0; i < s; i++ {
			uq, _ := logits(qd[(bh*s+i)*d:], om)
			var den float64
			if causal {
				top, R := math.Inf(-1), math.Inf(-1)
				for _, x := range uq {
					top = math.Max(top, x)
				}
				var ts [][]float64
				for j := 0; j <= i; j++ {
					bv, ok := valid(j)
					if !ok {
						continue
					}
					u, hh := logits(kd[(bh*s+j)*d:], om)
					for r := range u {
						u[r] += bv - hh
						R = math.Max(R, u[r])
					}
					ts = append(ts, u)
				}
				for _, u := range ts {
					for r := range u {
						den += math.Exp(uq[r]-top) * math.Exp(u[r]-R) / float64(m)
					}
				}
				if !(den >= eps) {
					n++
				}
				continue
			}
			G := math.Inf(-1)
			for j := 0; j < s; j++ {
				if bv, ok := valid(j); ok {
					_, hh := logits(kd[(bh*s+j)*d:], om)
					G = math.Max(G, hh+bv)
				}
			}
			for j := 0; j < s; j++ {
				bv, ok := valid(j)
				if !ok {
					continue
				}
				u, hh := logits(kd[(bh*s+j)*d:], om)
				w := math.Exp(hh + bv - G)
				for r := range u {
					den += w * (math.Cos(uq[r])*math.Cos(u[r]) + math.Sin(uq[r])*math.Sin(u[r])) / float64(m)
				}
			}
			if !(math.Max(den, 0) >= eps) {
				n++
			}
		}
	}
	return n
}

// PerformerGuardedRows counts the rows the guard decides: the float64
// definitions for the trig kernel and the causal op, the batches without a
// valid key for the positive kernel (none else, even at norms ×10).
func TestPerformerGuardedRows(t *testing.T) {
	names := []string{"Q", "K", "V", "Omega", "key_bias"}
	count := func(t *testing.T, in []*onnx.Tensor, a ops.PerformerAttrs) (int, int) {
		t.Helper()
		g, rows, err := ops.PerformerGuardedRows(&kernels.Context{Node: ops.NewPerformerNode("perf", names, "out", a)}, in)
		if err != nil {
			t.Fatal(err)
		}
		return g, rows
	}
	t.Run("positive", func(t *testing.T) {
		c := perfCase{kernel: ops.KernelPositive, b: 2, h: 2, s: 9, d: 16, dv: 4, m: 32, perHead: true, bias: "pad", sigma: 10}
		q, k, v, omega, bias := c.inputs(3)
		a := ops.PerformerAttrs{Scale: 0.25}
		if g, rows := count(t, []*onnx.Tensor{q, k, v, omega, bias}, a); g != 0 || rows != 36 {
			t.Errorf("norms ×10: %d of %d rows guarded, want 0 of 36", g, rows)
		}
		// Batch 1 entirely padded: its 2·9 rows are 0 by definition.
		none := padBias(c.s, -1e4, 0, c.s)
		if g, _ := count(t, []*onnx.Tensor{q, k, v, omega, none}, a); g != 18 {
			t.Errorf("a batch without valid keys: %d rows guarded, want 18", g)
		}
		out, err := ops.Performer(q, k, v, omega, none, a)
		if err != nil {
			t.Fatal(err)
		}
		for i, x := range out.Floats()[out.Len()/2:] {
			if x != 0 {
				t.Fatalf("batch without valid keys: output %d is %g, want 0", i, x)
			}
		}
		if !infertest.ORT(t) {
			return
		}
		fn, err := ops.PerformerFunction(ops.KernelPositive, 17)
		if err != nil {
			t.Fatal(err)
		}
		feed := map[string]*onnx.Tensor{"Q": q, "K": k, "V": v, "Omega": omega, "key_bias": none}
		ort := runORT(t, oneNodeModel(t, ops.NewPerformerNode("perf", names, "out", a), fn, 17, feed), feed)
		for i, x := range ort.Floats()[ort.Len()/2:] {
			if x != 0 {
				t.Fatalf("batch without valid keys: onnxruntime output %d is %g, want 0", i, x)
			}
		}
		checkClose(t, "onnxruntime vs Go kernel, one batch without valid keys", ort, out, 1e-4)
	})
	t.Run("causal", func(t *testing.T) {
		c := perfCase{kernel: ops.KernelPositive, b: 2, h: 2, s: 9, d: 16, dv: 4, m: 32, perHead: true, bias: "pad", sigma: 10}
		q, k, v, omega, bias := c.inputs(3)
		a := ops.PerformerAttrs{Scale: 0.25, Causal: true}
		want := guardRef(q, k, omega, bias, 0.25, 1e-6, true)
		g, rows := count(t, []*onnx.Tensor{q, k, v, omega, bias}, a)
		t.Logf("causal, norms ×10: %d of %d rows guarded", g, rows)
		if g != want || want == 0 {
			t.Errorf("%d rows guarded, float64 definition %d (want > 0)", g, want)
		}
	})
	t.Run("trig", func(t *testing.T) {
		c := perfCase{kernel: ops.KernelTrig, b: 2, h: 2, s: 9, d: 16, dv: 4, m: 32, perHead: true, bias: "pad", sigma: 1}
		q, k, v, omega, bias := c.inputs(4)
		a := ops.PerformerAttrs{Scale: 0.25, Kernel: ops.KernelTrig, Epsilon: 0.05}
		want := guardRef(q, k, omega, bias, 0.25, 0.05, false)
		g, rows := count(t, []*onnx.Tensor{q, k, v, omega, bias}, a)
		t.Logf("trig, epsilon 0.05: %d of %d rows guarded", g, rows)
		if g != want || want == 0 || want == rows {
			t.Errorf("%d rows guarded, float64 definition %d (want strictly between 0 and %d)", g, want, rows)
		}
	})
}

// infer.ValidateOps reports the guarded rows of each Performer node and
// names them in its table.
func TestPerformerValidateReportsGuardedRows(t *testing.T) {
	c := perfCase{kernel: ops.KernelPositive, b: 2, h: 2, s: 9, d: 16, dv: 4, m: 32, perHead: true, bias: "pad", sigma: 10}
	q, k, v, omega, bias := c.inputs(3)
	a := ops.PerformerAttrs{Scale: 0.25, Causal: true}
	fn, err := ops.PerformerFunctionFor(ops.PerformerVariant{Causal: true}, 17)
	if err != nil {
		t.Fatal(err)
	}
	feed := map[string]*onnx.Tensor{"Q": q, "K": k, "V": v, "Omega": omega, "key_bias": bias}
	m := oneNodeModel(t, ops.NewPerformerNode("perf", []string{"Q", "K", "V", "Omega", "key_bias"}, "out", a), fn, 17, feed)
	val, err := infer.ValidateOps(m, feed, infer.ValidateOptions{Backend: "native", MaxGuarded: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := guardRef(q, k, omega, bias, 0.25, 1e-6, true)
	if len(val.Checks) != 1 || val.Checks[0].GuardedRows != want || val.Checks[0].Rows != 36 {
		t.Fatalf("checks %+v, want one with %d of 36 rows guarded", val.Checks, want)
	}
	var sb strings.Builder
	if err := val.WriteTable(&sb); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sb.String(), fmt.Sprintf("%d of 36 output rows decided by the denominator guard", want)) {
		t.Errorf("table does not report the guarded rows:\n%s", sb.String())
	}
	// With the default share (5%) so many guarded rows fail the check.
	val, err = infer.ValidateOps(m, feed, infer.ValidateOptions{Backend: "native"})
	if err != nil {
		t.Fatal(err)
	}
	if want*20 > 36 && (val.OK() || !strings.Contains(val.Checks[0].Error, fmt.Sprintf("%d of 36 output rows", want))) {
		t.Errorf("%d of 36 rows guarded passed the default check: %+v", want, val.Checks[0])
	}
}
