package convert_test

import (
	"bytes"
	"math"
	"math/big"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/models"
)

// dense counts, one by one, the multiply-accumulates of a rows×in by
// in×out product.
func dense(rows, in, out int) (c int64) {
	for r := 0; r < rows; r++ {
		for o := 0; o < out; o++ {
			for i := 0; i < in; i++ {
				c++
			}
		}
	}
	return
}

// countMACs walks the loops of a naive forward pass of one layer (batch 1)
// and counts every multiply-accumulate; it is the independent reference
// for the cost model's closed forms.
func countMACs(form convert.Form, n, H, d, f, M, k int) (proj, core, ffn int64) {
	h := H * d
	proj = 4 * dense(n, h, h)
	ffn = dense(n, h, f) + dense(n, f, h)
	for head := 0; head < H; head++ {
		switch form {
		case convert.Original:
			core += dense(n, d, n) // Q·Kᵀ: n×n dot products of length d
			core += dense(n, n, d) // P·V
		case convert.Performer:
			core += dense(n, d, M) // φ(Q) = exp(Ω·q ...)
			core += dense(n, d, M) // φ(K)
			core += dense(M, n, d) // φ(K)ᵀV
			core += dense(n, M, d) // φ(Q)·(φ(K)ᵀV)
			core += dense(M, n, 1) // φ(K)ᵀ1
			core += dense(n, M, 1) // φ(Q)·z
		case convert.Linformer:
			core += dense(k, n, d) // E·K
			core += dense(k, n, d) // F·V
			core += dense(n, d, k) // Q·Kpᵀ
			core += dense(n, k, d) // P·Vp
		}
	}
	return
}

func TestCostModelClosedForms(t *testing.T) {
	for _, tc := range []struct{ n, H, d, f, M, k int }{
		{5, 2, 3, 7, 4, 3}, {9, 3, 2, 10, 6, 2}, {1, 1, 1, 1, 1, 1}, {16, 4, 4, 32, 8, 8},
	} {
		cm := convert.CostModel{Dims: convert.Dims{Layers: 3, Hidden: tc.H * tc.d, Heads: tc.H, HeadDim: tc.d, FFN: tc.f}, Features: tc.M, K: tc.k}
		for _, form := range []convert.Form{convert.Original, convert.Performer, convert.Linformer} {
			p, c, f := countMACs(form, tc.n, tc.H, tc.d, tc.f, tc.M, tc.k)
			lc := cm.Layer(form, tc.n)
			if lc.Projections != p || lc.Core != c || lc.FFN != f || lc.Total != p+c+f {
				t.Errorf("%+v %s: model %d/%d/%d, loops %d/%d/%d", tc, form, lc.Projections, lc.Core, lc.FFN, p, c, f)
			}
			if cm.Total(form, tc.n) != 3*(p+c+f) {
				t.Errorf("%+v %s: total not layers × layer", tc, form)
			}
		}
		// Largest intermediate: the H·n·n scores of the original.
		if got, want := cm.Layer(convert.Original, tc.n).Largest, int64(4*max(tc.H*tc.n*tc.n, tc.n*tc.f)); got != want {
			t.Errorf("%+v: largest %d, want %d", tc, got, want)
		}
	}
}

// TestCostModelIssueNumbers: for BERT-base width, 2 layers, M = k = 256,
// issue 7 quotes predicted speedups ≈1.7× at 4096, ≈2.5× at 8192 and
// ≈4.1× at 16384. MACs alone (no exp counted) give them.
func TestCostModelIssueNumbers(t *testing.T) {
	cm := convert.CostModel{Dims: convert.Dims{Layers: 2, Hidden: 768, Heads: 12, HeadDim: 64, FFN: 3072}, Features: 256, K: 256}
	for _, tc := range []struct {
		n    int
		want float64
	}{{4096, 1.7}, {8192, 2.5}, {16384, 4.1}} {
		for _, f := range []convert.Form{convert.Performer, convert.Linformer} {
			if got := cm.Speedup(f, tc.n); math.Abs(got-tc.want) > 0.05 {
				t.Errorf("%s at %d: predicted %.3f×, issue says ≈%.1f×", f, tc.n, got, tc.want)
			}
		}
	}
	// Crossovers: the cores are equal at 2M + M/d and 2k.
	if got := cm.Crossover(convert.Performer); got != 2*256+256/64+1 {
		t.Errorf("performer crossover %d, want %d", got, 2*256+256/64+1)
	}
	if got := cm.Crossover(convert.Linformer); got != 2*256+1 {
		t.Errorf("linformer crossover %d, want %d", got, 2*256+1)
	}
	// 16384: the original's scores alone are 12·16384²·4 bytes = 12 GiB.
	if got := cm.Layer(convert.Original, 16384).Largest; got != 12*16384*16384*4 {
		t.Errorf("largest at 16384: %d", got)
	}
}

func TestModelDimsFromBuiltModel(t *testing.T) {
	cfg := models.Config{Vocab: 50, Hidden: 48, Heads: 3, Layers: 3, Intermediate: 80, MaxPositions: 40, TypeVocab: 2, Opset: 17, Seed: 2}
	m, err := models.BERT(cfg)
	if err != nil {
		t.Fatal(err)
	}
	d, notes, err := convert.ModelDims(m)
	if err != nil {
		t.Fatal(err)
	}
	want := convert.Dims{Layers: 3, Hidden: 48, Heads: 3, HeadDim: 16, FFN: 80, MaxPositions: 40}
	d.WeightBytes = 0
	if d != want {
		t.Fatalf("dims %+v, want %+v (notes %v)", d, want, notes)
	}
	var buf bytes.Buffer
	cm := convert.CostModel{Dims: d, Features: 32, K: 32}
	if err := cm.WriteCostTable(&buf, []int{64, 1024}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "predicted crossover") || strings.Count(buf.String(), "\n") != 10 {
		t.Errorf("table:\n%s", buf.String())
	}
}

// TestCostModelLocalPooled counts, loop by loop, the products the
// LocalPooledAttention function body runs per head (block window scores and
// values, one-hot segment means, pooled scores and values, sink gathers and
// scores) and checks the closed form and the crossover n = 3b + 2k + 2s.
func TestCostModelLocalPooled(t *testing.T) {
	for _, tc := range []struct{ n, H, d, b, k, s int }{
		{8, 2, 3, 2, 3, 2}, {12, 3, 2, 4, 2, 0}, {6, 1, 4, 3, 1, 1},
	} {
		cm := convert.CostModel{Dims: convert.Dims{Layers: 2, Hidden: tc.H * tc.d, Heads: tc.H, HeadDim: tc.d, FFN: 5},
			Features: 1, K: 1, Block: tc.b, Segments: tc.k, Sinks: tc.s}
		var core int64
		for head := 0; head < tc.H; head++ {
			core += dense(tc.n, tc.d, 3*tc.b) + dense(tc.n, 3*tc.b, tc.d) // Q·Kwinᵀ, P·Vwin
			core += dense(tc.k, tc.n, tc.d) + dense(tc.k, tc.n, tc.d)     // one-hotᵀ·K, one-hotᵀ·V
			core += dense(tc.n, tc.d, tc.k) + dense(tc.n, tc.k, tc.d)     // Q·K̄ᵀ, P·V̄
			core += dense(tc.s, tc.n, tc.d) + dense(tc.s, tc.n, tc.d)     // sink gathers
			core += dense(tc.n, tc.d, tc.s) + dense(tc.n, tc.s, tc.d)     // sink scores and values
		}
		if got := cm.Layer(convert.LocalPooled, tc.n).Core; got != core {
			t.Errorf("%+v: core %d, loops %d", tc, got, core)
		}
	}
	base := convert.CostModel{Dims: convert.Dims{Layers: 2, Hidden: 768, Heads: 12, HeadDim: 64, FFN: 3072}, Features: 256, K: 256, Block: 64, Segments: 64, Sinks: 2}
	if got, want := base.Crossover(convert.LocalPooled), 3*64+2*64+2*2; got < want || got > want+1 {
		t.Errorf("crossover %d, cores equal at %d", got, want)
	}
	if got := base.Forms(); len(got) != 4 || got[3] != convert.LocalPooled {
		t.Errorf("forms %v, want local-pooled last", got)
	}
	var buf bytes.Buffer
	if err := base.WriteCostTable(&buf, []int{4096}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "local-pooled") || !strings.Contains(buf.String(), "3b + 2k + 2s = 324") {
		t.Errorf("cost table lacks the local-pooled row or crossover:\n%s", buf.String())
	}
}

// TestCostTableBaselines: with the elementwise passes priced, the cost
// table names the weights and prints the crossovers against onnxruntime's
// fused and flash attention; priced passes only add work.
func TestCostTableBaselines(t *testing.T) {
	cm := convert.CostModel{Dims: convert.Dims{Layers: 2, Hidden: 768, Heads: 12, HeadDim: 64, FFN: 3072}, Features: 256, K: 256,
		Block: 64, Segments: 64, Sinks: 2, Weights: convert.DefaultWeights}
	var buf bytes.Buffer
	if err := cm.WriteCostTable(&buf, []int{4096}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	got := tableCrossovers(t, out)
	for _, base := range []convert.Form{convert.Original, convert.Fused, convert.Flash} {
		if len(got[base]) != 3 {
			t.Errorf("table gives %d crossovers against %s, want performer, linformer and local-pooled:\n%s", len(got[base]), base, out)
		}
	}
	if !strings.Contains(out, "with weights "+convert.DefaultWeights.String()) {
		t.Errorf("table does not name the weights:\n%s", out)
	}
	// Priced passes only add work: every form's Work is at least its MACs
	// priced at the core weights alone (no passes, exponentials,
	// per-token or per-layer costs), and above it.
	w := convert.DefaultWeights
	coresOnly := cm
	coresOnly.Weights = convert.Weights{Original: w.Original, Fused: w.Fused, Flash: w.Flash, Linear: w.Linear}
	for _, f := range append(cm.Forms(), convert.Fused, convert.Flash) {
		if got, cores := cm.Work(f, 4096), coresOnly.Work(f, 4096); !(got > cores) {
			t.Errorf("%s: work %.4g, not above the cores' alone %.4g", f, got, cores)
		}
	}
}

// crossoverRe reads one "form n" entry of a crossover line, noteRe a
// parenthesised note ("cores equal at 2k = 512").
var (
	crossoverRe = regexp.MustCompile(`(performer|linformer|local-pooled|hedgehog|lara) (-?[0-9]+|never)`)
	noteRe      = regexp.MustCompile(`\([^)]*\)`)
)

// tableCrossovers parses the crossover lines of a cost table: per baseline
// (original, fused, flash) and form, the printed length (−1 for never).
func tableCrossovers(t *testing.T, table string) map[convert.Form]map[convert.Form]int {
	t.Helper()
	out := map[convert.Form]map[convert.Form]int{}
	for _, line := range strings.Split(table, "\n") {
		var base convert.Form
		switch {
		case strings.HasPrefix(line, "predicted crossover (first n with"):
			base = convert.Original
		case strings.HasPrefix(line, "predicted crossover against onnxruntime's fused"):
			base = convert.Fused
		case strings.HasPrefix(line, "predicted crossover against onnxruntime's flash"):
			base = convert.Flash
		default:
			continue
		}
		_, rest, _ := strings.Cut(line, ": ")
		rest = noteRe.ReplaceAllString(rest, "")
		out[base] = map[convert.Form]int{}
		for _, m := range crossoverRe.FindAllStringSubmatch(rest, -1) {
			n := -1
			if m[2] != "never" {
				var err error
				if n, err = strconv.Atoi(m[2]); err != nil {
					t.Fatal(err)
				}
			}
			out[base][convert.Form(m[1])] = n
		}
	}
	return out
}

// crossoverCase is a cost model whose crossovers the tests below check.
type crossoverCase struct {
	name string
	cm   convert.CostModel
}

func crossoverCases() []crossoverCase {
	base := convert.CostModel{Dims: convert.Dims{Layers: 2, Hidden: 768, Heads: 12, HeadDim: 64, FFN: 3072}, Features: 256, K: 256,
		Block: 64, Segments: 64, Sinks: 2, Landmarks: 64, Samples: 2, MapFeatures: 32}
	small := convert.CostModel{Dims: convert.Dims{Layers: 3, Hidden: 96, Heads: 4, HeadDim: 24, FFN: 200}, Features: 40, K: 17,
		Block: 5, Segments: 9, Sinks: 1, Landmarks: 7, Samples: 1, MapFeatures: 10}
	with := func(c convert.CostModel, w convert.Weights) convert.CostModel { c.Weights = w; return c }
	// The exact forms' core MACs cost almost nothing: crossovers in the
	// millions (far), or none below 2³⁰ (never).
	far, tiny := 1e-4, 1e-7
	return []crossoverCase{
		{"base/macs", base},
		{"small/macs", small},
		{"base/default", with(base, convert.DefaultWeights)},
		{"small/default", with(small, convert.DefaultWeights)},
		{"base/pass3", with(base, convert.Weights{Pass: 3})},
		{"small/exp-layer", with(small, convert.Weights{Exp: 2, Layer: 5e6, FusedToken: 10, FlashToken: 30})},
		{"base/far", with(base, convert.Weights{Original: far, Fused: far, Flash: far})},
		{"base/never", with(base, convert.Weights{Original: tiny, Fused: tiny, Flash: tiny})},
	}
}

// TestCrossoverMACsClosedForm: with MACs only, the crossover over the
// original is the first n with 2·n²·h core MACs above the form's, and the
// projections and FFN cancel. Solved by hand from the dimensions (h = H·d,
// per layer, all divided by n):
//
//	performer     2nh > 4Mh + 2MH          ⇔ n > 2M + M/d
//	linformer     2nh > 4kh                ⇔ n > 2k
//	local-pooled  2nh > h(6b + 4k + 4s)    ⇔ n > 3b + 2k + 2s
//	hedgehog      2nh > h(6b + 2F) + 4HF(d+1) ⇔ n > 3b + F + 2F(d+1)/d
//	lara (not divided by n: the R·C·h proposal densities are per sequence)
//	              2n²h > nh(4R + 3C) + RCh ⇔ 2n² − Pn − RC > 0, P = 4R + 3C,
//	              n > (P + √(P² + 8RC))/4
//
// so the crossover is ⌊bound⌋ + 1, computed here in integers (⌊(a + √D)/4⌋
// = ⌊(a + ⌊√D⌋)/4⌋ for integer a). The fused and flash baselines have the
// original's MACs, so with MACs only their crossovers are the same.
func TestCrossoverMACsClosedForm(t *testing.T) {
	for _, tc := range crossoverCases() {
		cm := tc.cm
		if cm.Weights != (convert.Weights{}) {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			h, H, d := int64(cm.Dims.Hidden), int64(cm.Dims.Heads), int64(cm.Dims.HeadDim)
			M, k := int64(cm.Features), int64(cm.K)
			b, seg, s, F := int64(cm.Block), int64(cm.Segments), int64(cm.Sinks), int64(cm.MapFeatures)
			C := int64(cm.Landmarks)
			R := C * int64(max(cm.Samples, 1))
			floorDiv := func(num, den int64) int64 { return num / den } // num, den > 0
			P := 4*R + 3*C
			want := map[convert.Form]int64{
				convert.Performer:   floorDiv(4*M*h+2*M*H, 2*h) + 1,
				convert.Linformer:   2*k + 1,
				convert.LocalPooled: 3*b + 2*seg + 2*s + 1,
				convert.Hedgehog:    floorDiv(h*(6*b+2*F)+4*H*F*(d+1), 2*h) + 1,
				convert.Lara:        floorDiv(P+new(big.Int).Sqrt(big.NewInt(P*P+8*R*C)).Int64(), 4) + 1,
			}
			forms := cm.Forms()
			if len(forms) != 6 {
				t.Fatalf("forms %v: want all six priced", forms)
			}
			for _, f := range forms[1:] {
				for _, base := range []convert.Form{convert.Original, convert.Fused, convert.Flash} {
					if got := cm.CrossoverOver(base, f); int64(got) != want[f] {
						t.Errorf("%s over %s: crossover %d, closed form %d", f, base, got, want[f])
					}
				}
			}
		})
	}
}

// TestCrossoverDefiningProperty checks every crossover the cost table
// prints, against every baseline and with several weights, by what a
// crossover is rather than by how CrossoverOver finds it:
//
//   - at the printed n the form costs less Work than the baseline, at n−1
//     it does not (or n = 1), and it stays cheaper at larger lengths (n+1,
//     2n, 10n, 2²⁰ beyond n);
//   - "never" (or −1) means not cheaper at any power of two up to 2³⁰;
//   - in closed form: Work(base, n) − Work(f, n) is a quadratic an² + bn + c
//     in n (the exact forms' n² core and passes against linear terms; the
//     per-layer costs cancel and only LARA's per-sequence proposal
//     densities leave c ≠ 0). Its coefficients are read from three
//     evaluations (n = 0, m, 2m: a = (g(2m) − 2g(m) + g(0))/2m², b =
//     (g(m) − g(0))/m − a·m, c = g(0)), checked at a fourth, and the
//     crossover is ⌊r⌋ + 1 for the larger root r = (−b + √(b² − 4ac))/2a
//     when that is at most 2³⁰ (1 if r < 1), else never; a root at an
//     integer k is k + 1 when the costs are equal there.
func TestCrossoverDefiningProperty(t *testing.T) {
	for _, tc := range crossoverCases() {
		t.Run(tc.name, func(t *testing.T) {
			cm := tc.cm
			var buf bytes.Buffer
			if err := cm.WriteCostTable(&buf, []int{1024}); err != nil {
				t.Fatal(err)
			}
			table := tableCrossovers(t, buf.String())
			bases := []convert.Form{convert.Original, convert.Fused, convert.Flash}
			if cm.Weights == (convert.Weights{}) {
				bases = bases[:1] // the baseline lines are printed only when priced
			}
			for _, base := range bases {
				if len(table[base]) != len(cm.Forms())-1 {
					t.Fatalf("table has %d crossovers against %s, want %d:\n%s", len(table[base]), base, len(cm.Forms())-1, buf.String())
				}
				for f, n := range table[base] {
					cheaper := func(x int) bool { return cm.Work(f, x) < cm.Work(base, x) }
					if n < 0 {
						for x := 1; x <= 1<<30; x *= 2 {
							if cheaper(x) {
								t.Errorf("%s over %s: printed never, but cheaper at %d", f, base, x)
								break
							}
						}
					} else {
						if n < 1 || !cheaper(n) || (n > 1 && cheaper(n-1)) {
							t.Errorf("%s over %s: printed %d, but cheaper at n−1: %v, at n: %v", f, base, n, n > 1 && cheaper(n-1), cheaper(n))
						}
						for _, x := range []int{n + 1, 2 * n, 10 * n, n + 1<<20} {
							if !cheaper(x) {
								t.Errorf("%s over %s: crossover %d, but not cheaper at %d", f, base, n, x)
							}
						}
					}
					if want := quadraticCrossover(t, cm, base, f); n != want {
						t.Errorf("%s over %s: printed %d, root of the cost difference gives %d", f, base, n, want)
					}
				}
			}
		})
	}
}

// quadraticCrossover solves Work(base, n) = Work(f, n) in closed form (see
// TestCrossoverDefiningProperty).
func quadraticCrossover(t *testing.T, cm convert.CostModel, base, f convert.Form) int {
	t.Helper()
	g := func(n float64) float64 { return cm.Work(base, int(n)) - cm.Work(f, int(n)) }
	const m = 1024.0
	a := (g(2*m) - 2*g(m) + g(0)) / (2 * m * m)
	b := (g(m)-g(0))/m - a*m
	c := g(0)
	if x := 3 * m; math.Abs(a*x*x+b*x+c-g(x)) > 1e-9*cm.Work(base, int(x)) {
		t.Fatalf("%s over %s: cost difference is not quadratic: %g at %g, fit %g", f, base, g(x), x, a*x*x+b*x+c)
	}
	if !(a > 0) {
		t.Fatalf("%s over %s: n² coefficient %g, want > 0", f, base, a)
	}
	r := (-b + math.Sqrt(b*b-4*a*c)) / (2 * a)
	switch {
	case r < 1:
		return 1
	case r >= 1<<30:
		return -1
	}
	if k := math.Round(r); math.Abs(r-k) < 1e-6*k {
		// A root at an integer k (MACs only: the cores are equal there)
		// is decided by the sign at k rather than by rounding.
		if g(k) > 0 {
			return int(k)
		}
		return int(k) + 1
	}
	return int(math.Floor(r)) + 1
}

// TestCostLara: the LARA row is priced exactly when Landmarks > 0, and
// Samples 0 means one sample per landmark. Its MACs are checked against
// the products of LaraAttention's function body as the native backend runs
// it (TestCostModelMACsMeasured).
func TestCostLara(t *testing.T) {
	dims := convert.Dims{Layers: 6, Hidden: 384, Heads: 12, HeadDim: 32, FFN: 1536}
	for _, tc := range []struct{ n, c int }{{512, 256}, {4096, 64}, {128, 256}} {
		cm := convert.CostModel{Dims: dims, Features: 256, K: 256, Landmarks: tc.c}
		if err := cm.Validate(); err != nil {
			t.Fatal(err)
		}
		one := cm
		one.Samples = 1
		if cm.Layer(convert.Lara, tc.n) != one.Layer(convert.Lara, tc.n) {
			t.Errorf("n=%d C=%d: Samples 0 is not priced as 1", tc.n, tc.c)
		}
	}
	if !slices.Contains((convert.CostModel{Landmarks: 8}).Forms(), convert.Lara) || slices.Contains((convert.CostModel{}).Forms(), convert.Lara) {
		t.Error("Forms lists lara exactly when Landmarks > 0")
	}
}
