package convert_test

import (
	"bytes"
	"fmt"
	"math"
	"slices"
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
// table names the weight and prints the crossovers against onnxruntime's
// fused and flash attention, which come from CrossoverOver.
func TestCostTableBaselines(t *testing.T) {
	cm := convert.CostModel{Dims: convert.Dims{Layers: 2, Hidden: 768, Heads: 12, HeadDim: 64, FFN: 3072}, Features: 256, K: 256,
		Block: 64, Segments: 64, Sinks: 2, Weights: convert.DefaultWeights}
	var buf bytes.Buffer
	if err := cm.WriteCostTable(&buf, []int{4096}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, base := range []convert.Form{convert.Fused, convert.Flash} {
		want := fmt.Sprintf("predicted crossover against onnxruntime's %s attention: performer %d, linformer %d, local-pooled %d", base,
			cm.CrossoverOver(base, convert.Performer), cm.CrossoverOver(base, convert.Linformer), cm.CrossoverOver(base, convert.LocalPooled))
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(out, "with weights "+convert.DefaultWeights.String()) {
		t.Errorf("table does not name the weights:\n%s", out)
	}
	// Priced passes only add work: every form's Work is at least its MACs.
	for _, f := range append(cm.Forms(), convert.Fused, convert.Flash) {
		if cm.Work(f, 4096) < float64(cm.Total(f, 4096)) {
			t.Errorf("%s: work below MACs", f)
		}
	}
}

// TestCostLara checks the LARA row against the op's MACs counted per
// token and head from its definition: ω·k̃ and the weighted values for
// each of R = C·S samples (2·R·D each side of the ratio: 4·R·D), the
// query-landmark affinities (C·D), the one-hot landmark means of Q and K
// in the function body (2·C·D), and the proposals' densities at the R
// samples, R·C·D per sequence.
func TestCostLara(t *testing.T) {
	dims := convert.Dims{Layers: 6, Hidden: 384, Heads: 12, HeadDim: 32, FFN: 1536}
	for _, tc := range []struct{ n, c, s int }{{512, 256, 1}, {4096, 64, 2}, {128, 256, 1}} {
		cm := convert.CostModel{Dims: dims, Features: 256, K: 256, Landmarks: tc.c, Samples: tc.s}
		if err := cm.Validate(); err != nil {
			t.Fatal(err)
		}
		R, C, D, H, n := int64(tc.c*tc.s), int64(tc.c), int64(32), int64(12), int64(tc.n)
		want := H * (n*(4*R*D+C*D+2*C*D) + R*C*D)
		if got := cm.Layer(convert.Lara, tc.n).Core; got != want {
			t.Errorf("n=%d C=%d S=%d: core %d MACs, want %d", tc.n, tc.c, tc.s, got, want)
		}
	}
	if !slices.Contains((convert.CostModel{Landmarks: 8}).Forms(), convert.Lara) || slices.Contains((convert.CostModel{}).Forms(), convert.Lara) {
		t.Error("Forms lists lara exactly when Landmarks > 0")
	}
}
