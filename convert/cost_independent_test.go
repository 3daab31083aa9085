package convert_test

import (
	"strings"
	"testing"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/models"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

// countedMACs are the multiply-accumulates of the products (MatMul, Gemm)
// a model ran, counted from the shapes of the tensors the native backend
// actually computed: core are the products of the inlined linear-attention
// function bodies (or, in an unconverted model, the products of two
// activations: Q·Kᵀ and P·V), weights the products with a weight
// initializer operand (projections and FFN), pooler the pooler's dense.
type countedMACs struct{ core, weights, pooler int64 }

// measureMACs inlines m's linear-attention functions, runs it natively at
// batch 1 and length n with every node output exposed, and counts the
// MACs of every product from its operands' shapes: a MatMul
// [..., r, c]·[..., c, p] → [..., r, p] costs size(output)·c, a Gemm
// likewise with A's reduced dimension, an Einsum the product of the sizes
// of its equation's letters. Any other product-like op (Conv,
// MatMulInteger, ...) fails the test, so that no product
// escapes the count. This is independent of CostModel's closed forms:
// the count comes from the function bodies as ops builds them and the
// shapes the backend produced.
func measureMACs(t *testing.T, m *onnxpb.ModelProto, n int) countedMACs {
	t.Helper()
	m, err := onnx.InlineFunctions(m, ops.Domain)
	if err != nil {
		t.Fatal(err)
	}
	inits := map[string]bool{}
	for _, tp := range m.Graph.Initializer {
		inits[tp.GetName()] = true
	}
	var expose []string
	for _, nd := range m.Graph.Node {
		for _, o := range nd.Output {
			if o != "" {
				expose = append(expose, o)
			}
		}
	}
	s, err := infer.NewNativeSession(m, infer.Options{Threads: 1, Expose: expose})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	feed, err := infer.RandomInputs(m, s.Inputs(), infer.RandomOptions{Batch: 1, SeqLen: n, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	vals, err := s.Run(feed, expose...)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range feed {
		vals[k] = v
	}
	shape := func(name string) []int {
		if v, ok := vals[name]; ok {
			return v.Shape
		}
		for _, tp := range m.Graph.Initializer {
			if tp.GetName() == name {
				out := make([]int, len(tp.Dims))
				for i, d := range tp.Dims {
					out[i] = int(d)
				}
				return out
			}
		}
		t.Fatalf("value %q not computed", name)
		return nil
	}
	size := func(sh []int) int64 {
		p := int64(1)
		for _, d := range sh {
			p *= int64(d)
		}
		return p
	}
	var c countedMACs
	for _, nd := range m.Graph.Node {
		var macs int64
		switch nd.GetOpType() {
		case "MatMul":
			a := shape(nd.Input[0])
			macs = size(shape(nd.Output[0])) * int64(a[len(a)-1])
		case "Gemm":
			a := shape(nd.Input[0])
			inner := a[1]
			if onnx.AttrInt(nd, "transA", 0) != 0 {
				inner = a[0]
			}
			macs = size(shape(nd.Output[0])) * int64(inner)
		case "Einsum":
			macs = einsumMACs(t, nd, shape)
		case "Conv", "ConvTranspose", "MatMulInteger", "QLinearMatMul", "FusedMatMul", "Attention", "MultiHeadAttention":
			t.Fatalf("node %s (%s): a product this count does not read", nd.GetName(), nd.GetOpType())
		default:
			continue
		}
		switch {
		case strings.HasPrefix(nd.GetName(), "/pooler/"):
			c.pooler += macs
		case strings.HasPrefix(nd.GetName(), "_inlfunc_"):
			c.core += macs
		case inits[nd.Input[0]] || inits[nd.Input[1]]:
			c.weights += macs
		default:
			c.core += macs
		}
	}
	return c
}

// einsumMACs is the MACs of an Einsum with an explicit equation: one per
// combination of its letters' values (nomic-bert's rotary outer product
// i,j->ij: size(i)·size(j)).
func einsumMACs(t *testing.T, nd *onnxpb.NodeProto, shape func(string) []int) int64 {
	t.Helper()
	eq := onnx.AttrString(nd, "equation", "")
	in, _, ok := strings.Cut(strings.ReplaceAll(eq, " ", ""), "->")
	if !ok || strings.Contains(eq, "...") {
		t.Fatalf("node %s: Einsum equation %q: want explicit letters and an output", nd.GetName(), eq)
	}
	size := map[rune]int{}
	for i, term := range strings.Split(in, ",") {
		sh := shape(nd.Input[i])
		if len(sh) != len(term) {
			t.Fatalf("node %s: term %q of %q for a shape %v", nd.GetName(), term, eq, sh)
		}
		for j, r := range term {
			size[r] = sh[j]
		}
	}
	macs := int64(1)
	for _, v := range size {
		macs *= int64(v)
	}
	return macs
}

// TestCostModelMACsMeasured runs converted BERTs (2 layers, 2 heads of 8)
// in the native backend and checks each form's row of the cost model
// against the MACs counted from the products actually computed: the
// core of a layer (the function body's products, or Q·Kᵀ and P·V of the
// original) and the projections and FFN (the products with weights). The
// pooler's dense (h² MACs on the first token) is outside the model's
// layers and checked on its own.
//
// Two bodies run more products than the cost model counts, by a known
// amount (surplus, per layer), because they fold a normaliser into an
// augmented operand where the model counts the algorithm's products:
//
//   - Performer (plain FAVOR+): the queries' [x, 1]·[ω; β]ᵀ and the keys'
//     [y, off]·[ω; 1]ᵀ are n·M·(d+1) each, e·[V, 1] is M·n·(d+1) and α·μ
//     is n·M·d, n·M·(4d + 3) per head; the model's 4·n·M·d + 2·n·M
//     (Ω·x twice, φ(K)ᵀV, φ(Q)·(φ(K)ᵀV), φ(K)ᵀ1, φ(Q)·z) is H·n·M fewer.
//   - Hedgehog: the local part's probabilities multiply the window's
//     [V, 1] (n·3b·(d+1) per head, the local normaliser riding along),
//     where the model counts P·V, n·3b·d: H·n·3b fewer.
//
// The surplus is asserted exactly, so a change on either side is seen.
//
// The lengths of the blocked forms (local+pooled with b > 0, hedgehog) are
// multiples of b: the bodies pad the queries to whole blocks and run every
// query-side product on ⌈n/b⌉·b rows, which the cost model, pricing n
// rows, does not count (at b = 4, n = 17 local+pooled runs 13600 MACs per
// layer where the model says 11968).
func TestCostModelMACsMeasured(t *testing.T) {
	const H, d, f, layers = 2, 8, 24, 2
	const h = H * d
	cfg := models.Config{Vocab: 50, Hidden: h, Heads: H, Layers: layers, Intermediate: f, MaxPositions: 64, TypeVocab: 2, Opset: 17, Seed: 5}
	bert, err := models.BERT(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dims := convert.Dims{Layers: layers, Hidden: h, Heads: H, HeadDim: d, FFN: f}
	type conv func() (*onnxpb.ModelProto, *convert.Report, error)
	for _, tc := range []struct {
		name    string
		form    convert.Form
		cm      convert.CostModel
		conv    conv
		ns      []int
		surplus func(n int) int64 // body MACs per layer beyond the model's
	}{
		{name: "original", form: convert.Original, ns: []int{8, 24}},
		{name: "performer-M8", form: convert.Performer, cm: convert.CostModel{Features: 8}, conv: func() (*onnxpb.ModelProto, *convert.Report, error) {
			return convert.ToPerformer(bert, convert.PerformerOptions{Features: 8, Seed: 1, FeatureMap: ops.FeaturesFavorPlus, Center: convert.CenterOff})
		}, ns: []int{16, 40}, surplus: func(n int) int64 { return int64(H * n * 8) }},
		{name: "performer-M12", form: convert.Performer, cm: convert.CostModel{Features: 12}, conv: func() (*onnxpb.ModelProto, *convert.Report, error) {
			return convert.ToPerformer(bert, convert.PerformerOptions{Features: 12, Seed: 2, FeatureMap: ops.FeaturesFavorPlus, Center: convert.CenterOff})
		}, ns: []int{7, 20}, surplus: func(n int) int64 { return int64(H * n * 12) }},
		{name: "linformer-k8", form: convert.Linformer, cm: convert.CostModel{K: 8}, conv: func() (*onnxpb.ModelProto, *convert.Report, error) {
			return convert.ToLinformer(bert, convert.LinformerOptions{Init: "gaussian", K: 8, MaxLen: 64, Seed: 1})
		}, ns: []int{16, 40}},
		{name: "local-pooled-b4-k3-2sinks", form: convert.LocalPooled, cm: convert.CostModel{Block: 4, Segments: 3, Sinks: 2}, conv: func() (*onnxpb.ModelProto, *convert.Report, error) {
			return convert.ToLocalPooled(bert, convert.LocalPooledOptions{Block: 4, Segments: 3})
		}, ns: []int{16, 32}},
		{name: "local-pooled-b8-k5-1sink", form: convert.LocalPooled, cm: convert.CostModel{Block: 8, Segments: 5, Sinks: 1}, conv: func() (*onnxpb.ModelProto, *convert.Report, error) {
			return convert.ToLocalPooled(bert, convert.LocalPooledOptions{Block: 8, Segments: 5, Sinks: convert.SinkFirst})
		}, ns: []int{24, 40}},
		{name: "pooled-only-k4-0sinks", form: convert.LocalPooled, cm: convert.CostModel{Segments: 4}, conv: func() (*onnxpb.ModelProto, *convert.Report, error) {
			return convert.ToLocalPooled(bert, convert.LocalPooledOptions{NoLocal: true, Segments: 4, Sinks: convert.NoSinks})
		}, ns: []int{12, 30}},
		{name: "hedgehog-b4-F5", form: convert.Hedgehog, cm: convert.CostModel{Block: 4, MapFeatures: 5}, conv: func() (*onnxpb.ModelProto, *convert.Report, error) {
			return convert.ToHedgehog(bert, convert.HedgehogOptions{Block: 4, Features: 5, Seed: 1})
		}, ns: []int{16, 32}, surplus: func(n int) int64 { return int64(H * n * 3 * 4) }},
		{name: "lara-C4-S1", form: convert.Lara, cm: convert.CostModel{Landmarks: 4, Samples: 1}, conv: func() (*onnxpb.ModelProto, *convert.Report, error) {
			return convert.ToLARA(bert, convert.LaraOptions{Landmarks: 4, Seed: 1})
		}, ns: []int{16, 40}},
		{name: "lara-C6-S2", form: convert.Lara, cm: convert.CostModel{Landmarks: 6, Samples: 2}, conv: func() (*onnxpb.ModelProto, *convert.Report, error) {
			return convert.ToLARA(bert, convert.LaraOptions{Landmarks: 6, Samples: 2, Seed: 2})
		}, ns: []int{5, 33}}, // n = 5 < C: every landmark is one token
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := bert
			if tc.conv != nil {
				var err error
				if m, _, err = tc.conv(); err != nil {
					t.Fatal(err)
				}
			}
			cm := tc.cm
			cm.Dims = dims
			cm.Features, cm.K = max(cm.Features, 1), max(cm.K, 1)
			if err := cm.Validate(); err != nil {
				t.Fatal(err)
			}
			for _, n := range tc.ns {
				got := measureMACs(t, m, n)
				lc := cm.Layer(tc.form, n)
				var extra int64
				if tc.surplus != nil {
					extra = tc.surplus(n)
				}
				if got.core != layers*(lc.Core+extra) {
					t.Errorf("n=%d: the body's products run %d core MACs per layer; the cost model says %d (+ %d known surplus)",
						n, got.core/layers, lc.Core, extra)
				}
				if got.weights != layers*(lc.Projections+lc.FFN) {
					t.Errorf("n=%d: products with weights run %d MACs; the cost model says %d·(%d + %d)", n, got.weights, layers, lc.Projections, lc.FFN)
				}
				if got.pooler != h*h {
					t.Errorf("n=%d: pooler %d MACs, want h² = %d", n, got.pooler, h*h)
				}
				if cm.Total(tc.form, n) != got.core+got.weights-layers*extra {
					t.Errorf("n=%d: model total %d, counted %d (less the surplus)", n, cm.Total(tc.form, n), got.core+got.weights-layers*extra)
				}
			}
		})
	}
}

// TestCostModelGatedFFNMeasured checks the projections' and FFN's MACs the
// cost model prices for gated FFNs, from the dimensions ModelDims reads,
// against the products the native backend runs on exported models (the
// transformers fixtures: ModernBERT's packed GeGLU by both exporters,
// nomic-bert's separate SwiGLU weights) and on ModernBERT as
// models.ModernBERT builds it, counted from the computed shapes
// (measureMACs): every product with a weight operand is a projection or
// an FFN product.
func TestCostModelGatedFFNMeasured(t *testing.T) {
	built, err := models.ModernBERT(models.ModernBERTConfig{Vocab: 50, Hidden: 16, Heads: 2, Layers: 3, Intermediate: 24,
		GlobalEvery: 3, Window: 8, MaxPositions: 64, Opset: 17, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		m    func() (*onnxpb.ModelProto, error)
		n    int
	}{
		{"modernbert_eager_op17", func() (*onnxpb.ModelProto, error) {
			return onnx.Load("../testdata/fixtures/modernbert_eager_op17.onnx")
		}, 24},
		{"modernbert_sdpa_dynamo_op18", func() (*onnxpb.ModelProto, error) {
			return onnx.Load("../testdata/fixtures/modernbert_sdpa_dynamo_op18.onnx")
		}, 24},
		{"nomic_bert", func() (*onnxpb.ModelProto, error) { return onnx.Load("../testdata/fixtures/longctx/nomic_bert.onnx") }, 24},
		{"models.ModernBERT", func() (*onnxpb.ModelProto, error) { return built, nil }, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := tc.m()
			if err != nil {
				t.Fatal(err)
			}
			d, _, err := convert.ModelDims(m)
			if err != nil {
				t.Fatal(err)
			}
			if d.FFNOut == 0 {
				t.Fatalf("ModelDims reads a plain FFN %d", d.FFN)
			}
			got := measureMACs(t, m, tc.n)
			lc := convert.CostModel{Dims: d}.Layer(convert.Original, tc.n)
			if want := int64(d.Layers) * (lc.Projections + lc.FFN); got.weights+got.pooler != want {
				t.Errorf("products with weights run %d MACs; the cost model says %d layers · (%d + %d) = %d",
					got.weights+got.pooler, d.Layers, lc.Projections, lc.FFN, want)
			}
		})
	}
}
