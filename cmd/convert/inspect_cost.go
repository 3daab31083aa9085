package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/cmd/internal/cliutil"
	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// costFlags are inspect's cost-model flags.
type costFlags struct {
	on      bool
	seqLen  string
	sizes   sizeFlags
	sinks   convert.Sinks
	weights string
}

// costWeightsHelp documents --cost-weights on inspect and bench.
const costWeightsHelp = "how the cost model prices work beyond MACs: default (fitted on README's benchmark machine), macs (MACs only), or name=value pairs over original, fused, flash, linear, pass, exp, fused-token, flash-token, token, layer changing the defaults (bench --fit prints them for this machine)"

func (c *costFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&c.on, "cost", false, "print the cost model: MACs of projections, attention core and FFN per layer and in total for original / Performer / Linformer, largest intermediate, crossover")
	fs.StringVar(&c.seqLen, "lengths", "512,1024,2048,4096,8192,16384", "with --cost: comma-separated sequence lengths (K = 1024, e.g. 4K)")
	c.sizes.register(fs, "with --cost: ")
	c.sinks = convert.DefaultSinks
	cli.StringLikeVar(fs, &c.sinks, "sinks", "with --cost: local+pooled sink tokens: first,last, first, last or none")
	fs.StringVar(&c.weights, "cost-weights", "default", "with --cost: "+costWeightsHelp)
}

// costReport is the cost section of inspect's report.
type costReport struct {
	Dims      convert.Dims         `json:"dims"`
	Features  int                  `json:"features"`
	K         int                  `json:"k"`
	Notes     []string             `json:"notes,omitempty"`
	Lengths   []int                `json:"lengths"`
	Layer     []convert.LayerCost  `json:"per_layer"`
	Total     []costTotal          `json:"total"`
	Crossover map[convert.Form]int `json:"predicted_crossover"`
	model     convert.CostModel
}

type costTotal struct {
	Form             convert.Form `json:"form"`
	Length           int          `json:"length"`
	MACs             int64        `json:"macs"`
	PredictedSpeedup float64      `json:"predicted_speedup"`
	PredictedPeakMB  float64      `json:"predicted_peak_mb"`
}

func buildCost(m *onnxpb.ModelProto, f costFlags) (*costReport, error) {
	if !f.on {
		return nil, nil
	}
	lengths, err := cli.Ints("lengths", f.seqLen, cliutil.IntList{Min: 1})
	if err != nil {
		return nil, err
	}
	if err := f.sizes.check(); err != nil {
		return nil, err
	}
	dims, notes, err := convert.ModelDims(m)
	if err != nil {
		return nil, cli.BadInput(err)
	}
	weights, err := convert.ParseWeights(f.weights)
	if err != nil {
		return nil, cli.UsageError("--cost-weights: %v", err)
	}
	cm := convert.NewCostModel(dims, f.sizes.all(), weights)
	cm.Sinks = f.sinks.Count()
	if err := cm.Validate(); err != nil {
		return nil, cli.BadInput(err)
	}
	r := &costReport{Dims: dims, Features: cm.Features, K: cm.K, Notes: notes, Lengths: lengths, model: cm, Crossover: map[convert.Form]int{}}
	forms := cm.Forms()
	for _, n := range lengths {
		for _, fm := range forms {
			r.Layer = append(r.Layer, cm.Layer(fm, n))
			r.Total = append(r.Total, costTotal{Form: fm, Length: n, MACs: cm.Total(fm, n),
				PredictedSpeedup: cm.Speedup(fm, n), PredictedPeakMB: float64(cm.PeakBytes(fm, n)) / (1 << 20)})
		}
	}
	for _, fm := range forms[1:] {
		r.Crossover[fm] = cm.Crossover(fm)
	}
	return r, nil
}

func printCost(w io.Writer, r *costReport) {
	if r == nil {
		return
	}
	fmt.Fprintln(w)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	var sb strings.Builder
	r.model.WriteCostTable(&sb, r.Lengths)
	io.WriteString(w, sb.String())
	r.model.WriteCoreMACs(w, 512)
	io.WriteString(w, speedGuide)
	io.WriteString(w, fidelityGuide)
}

// speedGuide is how the cost model's predictions compared with measured
// runs its default weights were not fitted to (docs/bench-fit.txt, from
// the command in docs/performance.md; TestSpeedGuide checks the figures
// against the recorded runs), printed beside the predictions so that a
// user reads them as the estimates they are.
const speedGuide = `predictions checked against runs the default weights were not fitted to (docs/bench-fit.txt; onnxruntime, 2 threads):
  full-size ModernBERT-base         RMS error  4.2 %   window + local-pooled at 8192: 3.41x predicted, 3.59x measured
  nomic-embed-text-v1.5's shape     RMS error  7.5 %   local-pooled at 8192: 2.36x predicted, 2.29x measured
  jina-embeddings-v2-base's shape   RMS error  6.8 %   local-pooled at 4096: 1.62x predicted, 1.80x measured
  XLM-R-large's shape (bge-m3)      RMS error  5.9 %   local-pooled at 4096: 1.62x predicted, 1.54x measured
measure your own model with: convert bench MODEL --lengths N --variants original,FORM
`

// fidelityGuide is what README's "What a conversion keeps" measured
// (bin/linlab report-real --docs testdata/real/docs; all-MiniLM-L6-v2,
// 32 held-out documents), printed so a user choosing a conversion sees
// cost and fidelity side by side. It is a measurement of one model, not a
// prediction for this one: `convert compare` measures any model.
const fidelityGuide = `measured fidelity on all-MiniLM-L6-v2 (mean-pooled embedding cosine with the original on held-out documents; zero-shot but for hedgehog, trained on other documents; docs/conversions.md):
  tokens                                   128     256     512
  hedgehog b=64 F=32 (trained)           1.000   0.994   0.991   (--calibration, 6 minutes)
  hedgehog --linear F=32 (trained)       0.874   0.873   0.885   (--calibration, 5 minutes)
  local-pooled b=64 k=64, sinks          1.000   0.986   0.966
  local-pooled b=32 k=32, sinks          0.986   0.961   0.934
  performer M=256 centred ADERF          0.882   0.860   0.871   (--calibration)
  performer M=256 centred FAVOR++        0.765   0.740   0.767
  lara C=256                             0.808   0.744   0.848   (mean of seeds 1-3)
  linformer pooled k=128, sinks          1.000   0.879   0.799
  linformer gaussian k=128               0.139   0.037  -0.005
measure your own model with: convert compare MODEL CONVERTED --text-file FILE --seq-len N
`
