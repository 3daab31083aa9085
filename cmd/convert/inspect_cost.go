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
	"github.com/linearize/linearize/ops"
)

// costFlags are inspect's cost-model flags.
type costFlags struct {
	on          bool
	seqLen      string
	features    int
	k           int
	block       int
	segments    int
	landmarks   int
	mapFeatures int
	sinks       string
	weights     string
}

// costWeightsHelp documents --cost-weights on inspect and bench.
const costWeightsHelp = "how the cost model prices work beyond MACs: default (fitted on README's benchmark machine), macs (MACs only), or name=value pairs over original, fused, flash, linear, pass, exp, layer changing the defaults (bench --fit prints them for this machine)"

func (c *costFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&c.on, "cost", false, "print the cost model: MACs of projections, attention core and FFN per layer and in total for original / Performer / Linformer, largest intermediate, crossover")
	fs.StringVar(&c.seqLen, "lengths", "512,1024,2048,4096,8192,16384", "with --cost: comma-separated sequence lengths (K = 1024, e.g. 4K)")
	fs.IntVar(&c.features, "features", convert.DefaultPerformerFeatures, "with --cost: Performer random features M (convert performer's default)"+atMost(maxSizeFlag))
	fs.IntVar(&c.k, "k", convert.DefaultLinformerK, "with --cost: Linformer projected length k (convert linformer's default)"+atMost(maxSizeFlag))
	fs.IntVar(&c.block, "block", 64, "with --cost: local+pooled block length b"+atMost(maxSizeFlag))
	fs.IntVar(&c.segments, "segments", 64, "with --cost: local+pooled segments k"+atMost(maxSizeFlag))
	fs.IntVar(&c.landmarks, "landmarks", convert.DefaultLaraLandmarks, "with --cost: LARA landmarks C (one sample each)"+atMost(maxSizeFlag))
	fs.IntVar(&c.mapFeatures, "map-features", 0, "with --cost: hedgehog features F per map (2F per head; 0: the head size), with the window of --block")
	fs.StringVar(&c.sinks, "sinks", "first,last", "with --cost: local+pooled sink tokens: first,last, first, last or none")
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
	if f.features <= 0 || f.k <= 0 || f.block <= 0 || f.segments <= 0 || f.landmarks <= 0 {
		return nil, cli.UsageError("--features, --k, --block, --segments and --landmarks must be positive")
	}
	if err := checkCounts(count{"features", f.features, maxSizeFlag}, count{"k", f.k, maxSizeFlag}, count{"block", f.block, maxSizeFlag},
		count{"segments", f.segments, maxSizeFlag}, count{"landmarks", f.landmarks, maxSizeFlag}); err != nil {
		return nil, err
	}
	if f.mapFeatures < 0 || f.mapFeatures > convert.MaxHedgehogFeatures {
		return nil, cli.UsageError("--map-features %d: want 1..%d (0: the head size)", f.mapFeatures, convert.MaxHedgehogFeatures)
	}
	first, last, err := ops.ParseSinks(f.sinks)
	if err != nil {
		return nil, cli.UsageError("--sinks %q: want first,last, first, last or none", f.sinks)
	}
	sinks := 0
	for _, s := range []bool{first, last} {
		if s {
			sinks++
		}
	}
	dims, notes, err := convert.ModelDims(m)
	if err != nil {
		return nil, cli.BadInput(err)
	}
	weights, err := convert.ParseWeights(f.weights)
	if err != nil {
		return nil, cli.UsageError("--cost-weights: %v", err)
	}
	mf := f.mapFeatures
	if mf == 0 {
		mf = dims.HeadDim
	}
	cm := convert.CostModel{Dims: dims, Features: f.features, K: f.k, Block: f.block, Segments: f.segments, Sinks: sinks, Landmarks: f.landmarks, Samples: 1, MapFeatures: mf, Weights: weights}
	if err := cm.Validate(); err != nil {
		return nil, cli.BadInput(err)
	}
	r := &costReport{Dims: dims, Features: f.features, K: f.k, Notes: notes, Lengths: lengths, model: cm, Crossover: map[convert.Form]int{}}
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
	d := r.model.Dims
	h := int64(d.Hidden)
	perTok := func(f convert.Form) int64 { return r.model.Layer(f, 1).Core / h }
	fmt.Fprintf(w, "attention core MACs per token per hidden unit (per layer): performer %d, linformer %d, local-pooled %d, hedgehog %d, lara %d (at n = 512)\n",
		perTok(convert.Performer), perTok(convert.Linformer), perTok(convert.LocalPooled), perTok(convert.Hedgehog), r.model.Layer(convert.Lara, 512).Core/(512*h))
	io.WriteString(w, fidelityGuide)
}

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
