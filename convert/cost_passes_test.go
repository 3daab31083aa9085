package convert

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/models"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

// TestCostElementwiseFromBodies is the independent reference for the
// elementwise counts of CostModel.Layer: it converts a one-layer BERT,
// inlines the linear op's function body, runs it in the native backend at
// two lengths with every value of the body exposed, and counts from the
// tensors actually computed: each node of the body costs its largest
// operand (a Slice or Pad its output; a Softmax three passes; products,
// shapes, constants and views cost nothing), counted when that is at least
// n·w elements (w the smallest width, so tensors of n times a constant are
// left out). The difference between the two lengths must equal the closed
// forms' difference (fixed-size work, such as padding by a block, cancels).
func TestCostElementwiseFromBodies(t *testing.T) {
	const H, d, M, k, b = 2, 8, 12, 8, 4 // every width ≥ 8 = w
	const w = 8
	n1, n2 := 32, 64 // multiples of b; n1·w above every constant's size
	cfg := models.Config{Vocab: 50, Hidden: H * d, Heads: H, Layers: 1, Intermediate: 24, MaxPositions: n2, TypeVocab: 2, Opset: 17, Seed: 3}
	bert, err := models.BERT(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cm := CostModel{Dims: Dims{Layers: 1, Hidden: H * d, Heads: H, HeadDim: d, FFN: 24}, Features: M, K: k, Block: b, Segments: k}
	for _, c := range []struct {
		form  Form
		sinks int
		conv  func() (*onnxpb.ModelProto, *Report, error)
		block int // for local+pooled: b, or −1 for no local part (b = 0)
	}{
		{Performer, 0, func() (*onnxpb.ModelProto, *Report, error) {
			return ToPerformer(bert, PerformerOptions{Features: M, Seed: 1, FeatureMap: ops.FeaturesFavorPlus, Center: CenterOff})
		}, 0},
		{Linformer, 0, func() (*onnxpb.ModelProto, *Report, error) {
			return ToLinformer(bert, LinformerOptions{Init: "gaussian", K: k, MaxLen: n2, Seed: 1})
		}, 0},
		{LocalPooled, 2, func() (*onnxpb.ModelProto, *Report, error) {
			return ToLocalPooled(bert, LocalPooledOptions{Block: b, Segments: k})
		}, 0},
		{LocalPooled, 0, func() (*onnxpb.ModelProto, *Report, error) {
			return ToLocalPooled(bert, LocalPooledOptions{Block: b, Segments: k, Sinks: NoSinks})
		}, 0},
		{LocalPooled, 2, func() (*onnxpb.ModelProto, *Report, error) {
			return ToLocalPooled(bert, LocalPooledOptions{NoLocal: true, Segments: k})
		}, -1},
		{LocalPooled, 0, func() (*onnxpb.ModelProto, *Report, error) {
			return ToLocalPooled(bert, LocalPooledOptions{NoLocal: true, Segments: k, Sinks: NoSinks})
		}, -1},
	} {
		name := fmt.Sprintf("%s-%dsinks", c.form, c.sinks)
		if c.block < 0 {
			name += "-pooled-only"
		}
		t.Run(name, func(t *testing.T) {
			m, _, err := c.conv()
			if err != nil {
				t.Fatal(err)
			}
			m = inlineLinear(t, m)
			e1 := measuredElementwise(t, m, n1, w)
			e2 := measuredElementwise(t, m, n2, w)
			cm := cm
			cm.Sinks = c.sinks
			if c.block < 0 {
				cm.Block = 0
			}
			want := cm.Layer(c.form, n2).Elementwise - cm.Layer(c.form, n1).Elementwise
			if e2-e1 != want {
				t.Errorf("body touches %d more elements from n = %d to %d; the cost model says %d (update CostModel.Layer's counts if the body changed)", e2-e1, n1, n2, want)
			}
		})
	}
}

// measuredElementwise runs m at length n and sums the elementwise cost of
// the inlined body's nodes (names starting _inlfunc_, as inlineLinear
// writes them).
func measuredElementwise(t *testing.T, m *onnxpb.ModelProto, n, w int) int64 {
	t.Helper()
	var body []*onnxpb.NodeProto
	var expose []string
	for _, nd := range m.Graph.Node {
		if strings.HasPrefix(nd.GetName(), "_inlfunc_") {
			body = append(body, nd)
			for _, o := range nd.Output {
				if o != "" {
					expose = append(expose, o)
				}
			}
		}
	}
	if len(body) == 0 {
		t.Fatal("no inlined body")
	}
	// The body's inputs from outside it (Q, K, V, key_bias) are exposed
	// too; initializers are read from the graph.
	produced := map[string]bool{}
	for _, nd := range body {
		for _, o := range nd.Output {
			produced[o] = true
		}
	}
	inits := map[string]int64{}
	for _, tp := range m.Graph.Initializer {
		sz := int64(1)
		for _, v := range tp.Dims {
			sz *= v
		}
		inits[tp.GetName()] = sz
	}
	seen := map[string]bool{}
	for _, nd := range body {
		for _, in := range nd.Input {
			if in != "" && !produced[in] && !seen[in] {
				if _, ok := inits[in]; !ok {
					expose = append(expose, in)
				}
				seen[in] = true
			}
		}
	}
	s, err := infer.NewNativeSession(m, infer.Options{Threads: 1, Expose: expose})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	feed, err := infer.RandomInputs(m, s.Inputs(), infer.RandomOptions{Batch: 1, SeqLen: n, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	vals, err := s.Run(feed, expose...)
	if err != nil {
		t.Fatal(err)
	}
	size := func(v string) int64 {
		if v == "" {
			return 0
		}
		if sz, ok := inits[v]; ok {
			return sz
		}
		tv, ok := vals[v]
		if !ok {
			t.Fatalf("value %s not computed", v)
		}
		sz := int64(1)
		for _, d := range tv.Shape {
			sz *= int64(d)
		}
		return sz
	}
	var total int64
	for _, nd := range body {
		var cost int64
		switch nd.GetOpType() {
		case "Constant", "Shape", "MatMul", "Reshape", "Squeeze", "Unsqueeze", "Identity", "Flatten":
			continue
		case "Slice", "Pad":
			cost = size(nd.Output[0])
		case "Softmax":
			cost = 3 * size(nd.Output[0])
		default:
			for _, v := range append(append([]string(nil), nd.Input...), nd.Output...) {
				cost = max(cost, size(v))
			}
		}
		if cost >= int64(n*w) {
			total += cost
		}
	}
	return total
}

// TestCostBaselineForms: the fused and flash baselines have the original's
// MACs; their elementwise passes, peak memory and the crossovers against
// them follow the documented counts, checked here from the definitions.
func TestCostBaselineForms(t *testing.T) {
	const H, d, f = 3, 4, 20
	cm := CostModel{Dims: Dims{Layers: 2, Hidden: H * d, Heads: H, HeadDim: d, FFN: f, WeightBytes: 1000}, Features: 6, K: 5, Block: 2, Segments: 3, Sinks: 2}
	for _, n := range []int{1, 7, 64} {
		N := int64(n)
		o, fu, fl := cm.Layer(Original, n), cm.Layer(Fused, n), cm.Layer(Flash, n)
		if fu.Total != o.Total || fl.Total != o.Total || fu.Exps != o.Exps || fl.Exps != o.Exps {
			t.Errorf("n=%d: baselines' MACs or exps differ from the original's", n)
		}
		// Passes over the H·n·n scores: 5 (Div, Add, 3 for Softmax), 4, 2.
		if o.Elementwise != 5*H*N*N || fu.Elementwise != 4*H*N*N || fl.Elementwise != 2*H*N*N {
			t.Errorf("n=%d: elementwise %d/%d/%d", n, o.Elementwise, fu.Elementwise, fl.Elementwise)
		}
		// Flash keeps no n² buffer: its largest intermediate is the FFN's.
		if fl.Largest != 4*N*f || fu.Largest != max(4*H*N*N, 4*N*f) {
			t.Errorf("n=%d: largest flash %d, fused %d", n, fl.Largest, fu.Largest)
		}
		if cm.PeakBytes(Fused, n) != 1000+fu.Largest || cm.PeakBytes(Flash, n) != 1000+peakFactor*4*N*f {
			t.Errorf("n=%d: peaks fused %d, flash %d", n, cm.PeakBytes(Fused, n), cm.PeakBytes(Flash, n))
		}
	}
	// With passes unpriced the baselines cost what the original costs.
	for _, f := range []Form{Performer, Linformer, LocalPooled} {
		if cm.CrossoverOver(Fused, f) != cm.Crossover(f) || cm.CrossoverOver(Flash, f) != cm.Crossover(f) {
			t.Errorf("%s: crossovers differ at pass weight 0", f)
		}
	}
	// Priced, the crossover against each baseline is the first n where the
	// form's work is below the baseline's, found here by scanning.
	cm.Weights = Weights{Pass: 3}
	for _, base := range []Form{Original, Fused, Flash} {
		for _, f := range []Form{Performer, Linformer, LocalPooled} {
			want := -1
			for n := 1; n < 1<<16; n++ {
				wf := float64(cm.Layer(f, n).Total) + 3*float64(cm.Layer(f, n).Elementwise)
				wb := float64(cm.Layer(base, n).Total) + 3*float64(cm.Layer(base, n).Elementwise)
				if wf < wb {
					if want < 0 {
						want = n
					}
				} else {
					want = -1
				}
			}
			if got := cm.CrossoverOver(base, f); got != want {
				t.Errorf("%s over %s: crossover %d, scan %d", f, base, got, want)
			}
		}
	}
	// Flash's passes are the fewest, so it is the hardest to beat.
	for _, f := range []Form{Performer, Linformer, LocalPooled} {
		if !(cm.CrossoverOver(Flash, f) >= cm.CrossoverOver(Fused, f) && cm.CrossoverOver(Fused, f) >= cm.CrossoverOver(Original, f)) {
			t.Errorf("%s: crossovers original %d, fused %d, flash %d not in order", f, cm.CrossoverOver(Original, f), cm.CrossoverOver(Fused, f), cm.CrossoverOver(Flash, f))
		}
		if s := cm.SpeedupOver(Flash, f, 4096); s >= cm.Speedup(f, 4096) {
			t.Errorf("%s: speedup over flash %.3f not below over the original %.3f", f, s, cm.Speedup(f, 4096))
		}
	}
	for _, bad := range []Weights{{Pass: -1}, {Exp: math.NaN()}, {Flash: math.Inf(1)}, {Layer: -2}} {
		cm.Weights = bad
		if cm.Validate() == nil {
			t.Errorf("weights %+v accepted", bad)
		}
	}
}
