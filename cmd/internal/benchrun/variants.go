package benchrun

import (
	"fmt"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

// VariantOptions configures the model variants a benchmark compares. Each
// variant is what the conversion command of its name writes by default
// (the conversion's zero-value options, with Seed): a size left 0 is the
// conversion's default, a size set is passed to it.
type VariantOptions struct {
	Variants []convert.Form // default original, performer, linformer, local-pooled
	Lengths  []int          // sequence lengths to run
	Features int            // Performer M (0: convert.PerformerOptions' default, 256)
	K        int            // Linformer k (0: convert.LinformerOptions' default)
	Seed     uint64         // seeds ω, E/F and LARA's noise
	// Block and Segments configure the local-pooled variant (0:
	// convert.LocalPooledOptions' defaults, 64 and 64, both sinks).
	Block, Segments int
	// Landmarks configures the lara variant (0: convert.LaraOptions'
	// default, DefaultLaraLandmarks, one sample each); it runs only when
	// asked for in Variants.
	Landmarks int
	// Baselines are other models of the same inputs (onnxruntime's
	// optimized forms of the original, say) timed and measured beside the
	// original and the variants; every run's ratios are reported against
	// each of them too. Check them with LoadBaselines.
	Baselines []Baseline
}

// Prepared is what Variants made: the models by form, notes on what was
// done, and each conversion's report (by form; none for the original).
type Prepared struct {
	Models  map[convert.Form]*onnxpb.ModelProto
	Notes   []string
	Reports map[convert.Form]*convert.Report
}

// Variants prepares the models a benchmark runs: the original with its
// position table extended (copy) when it is shorter than the longest
// length, and from it each conversion with its default options (the sizes
// set in o aside). m is not modified.
func Variants(m *onnxpb.ModelProto, o VariantOptions) (*Prepared, error) {
	o = o.withDefaults()
	if len(o.Lengths) == 0 {
		return nil, fmt.Errorf("convert: bench: no lengths")
	}
	longest := 0
	for _, n := range o.Lengths {
		if n <= 0 {
			return nil, fmt.Errorf("convert: bench: length %d must be positive", n)
		}
		longest = max(longest, n)
	}
	p := &Prepared{Models: map[convert.Form]*onnxpb.ModelProto{}, Reports: map[convert.Form]*convert.Report{}}
	base := m
	dims, _, err := convert.ModelDims(m)
	if err != nil {
		return nil, fmt.Errorf("convert: bench: %w", err)
	}
	if dims.MaxPositions > 0 && dims.MaxPositions < longest {
		ext, rep, err := convert.ExtendPositions(m, convert.ExtendOptions{MaxPositions: longest, Method: "copy"})
		if err != nil {
			return nil, fmt.Errorf("convert: bench: %w", err)
		}
		base = ext
		p.Notes = append(p.Notes, "extended "+rep.String())
	}
	for _, f := range o.Variants {
		if f == convert.Original {
			p.Models[f] = base
			continue
		}
		out, rep, err := o.convert(base, f)
		if err != nil {
			return nil, fmt.Errorf("convert: bench: %w", err)
		}
		p.Models[f], p.Reports[f] = out, rep
		how := "as convert %s writes by default"
		if o.sized(f) {
			how = "as convert %s writes with these sizes"
		}
		p.Notes = append(p.Notes, fmt.Sprintf("%s: %d of %d blocks converted, %s ("+how+")", f, len(rep.Converted), rep.Blocks, sizes(f, rep.Options), f))
	}
	return p, nil
}

// convert makes the variant f of base: the conversion's zero-value
// options with the seed and the sizes set in o.
func (o VariantOptions) convert(base *onnxpb.ModelProto, f convert.Form) (*onnxpb.ModelProto, *convert.Report, error) {
	switch f {
	case convert.Performer:
		return convert.ToPerformer(base, convert.PerformerOptions{Features: o.Features, Seed: o.Seed})
	case convert.Linformer:
		return convert.ToLinformer(base, convert.LinformerOptions{K: o.K, Seed: o.Seed})
	case convert.LocalPooled:
		return convert.ToLocalPooled(base, convert.LocalPooledOptions{Block: o.Block, Segments: o.Segments})
	case convert.Lara:
		return convert.ToLARA(base, convert.LaraOptions{Landmarks: o.Landmarks, Seed: o.Seed})
	case convert.Hedgehog:
		// Untrained maps: training changes the maps' values, not the
		// work (what a benchmark measures).
		return convert.ToHedgehog(base, convert.HedgehogOptions{Block: o.Block, Seed: o.Seed})
	case convert.Windowed:
		return convert.ToWindow(base, convert.WindowOptions{})
	}
	return nil, nil, fmt.Errorf("unknown variant %q (want original, window, performer, linformer, local-pooled, hedgehog or lara)", f)
}

// sized reports whether o sets a size of the variant f.
func (o VariantOptions) sized(f convert.Form) bool {
	switch f {
	case convert.Performer:
		return o.Features != 0
	case convert.Linformer:
		return o.K != 0
	case convert.LocalPooled:
		return o.Block != 0 || o.Segments != 0
	case convert.Lara:
		return o.Landmarks != 0
	}
	return false
}

// sizes writes the sizes a conversion of form f used, from its report.
func sizes(f convert.Form, ro convert.ReportOptions) string {
	switch f {
	case convert.Performer:
		s := fmt.Sprintf("M = %d, %s features, kernel %s", ro.Features, ro.FeatureMap, ro.Kernel)
		if ro.Center {
			s += ", centred"
		}
		return s
	case convert.Linformer:
		if ro.MaxLen > 0 {
			return fmt.Sprintf("k = %d, N = %d", linformerK(ro), ro.MaxLen)
		}
		return fmt.Sprintf("k = %d pooled segments, sinks %s", linformerK(ro), ro.Sinks)
	case convert.LocalPooled:
		return fmt.Sprintf("b = %d, k = %d, sinks %s", ro.Block, ro.Segments, ro.Sinks)
	case convert.Lara:
		return fmt.Sprintf("C = %d, %d sample(s) each", ro.Landmarks, ro.Samples)
	case convert.Hedgehog:
		return fmt.Sprintf("b = %d, untrained maps", ro.Block)
	case convert.Windowed:
		return "window blocks only"
	}
	return ""
}

// linformerK is the k a Linformer conversion reports: K, or the segments
// of a pooled Linformer written as a local+pooled node without the local
// part.
func linformerK(ro convert.ReportOptions) int {
	if ro.K > 0 {
		return ro.K
	}
	return ro.Segments
}

func (o VariantOptions) withDefaults() VariantOptions {
	if len(o.Variants) == 0 {
		o.Variants = []convert.Form{convert.Original, convert.Performer, convert.Linformer, convert.LocalPooled}
	}
	return o
}

// DefaultLinformerK is convert.ToLinformer's default k: bench's --k
// default, and the k priced when the linformer variant does not run
// (TestVariantDefaults checks that it is the conversion's).
const DefaultLinformerK = 128

// costModel returns the cost model that prices the variants of p as they
// were converted (the sizes their reports give; the defaults for forms
// not run).
func (o VariantOptions) costModel(dims convert.Dims, w convert.Weights, p *Prepared) convert.CostModel {
	cm := convert.CostModel{Dims: dims, Features: o.Features, K: o.K, Block: o.Block, Segments: o.Segments, Sinks: 2, Weights: w}
	if cm.Features == 0 {
		cm.Features = convert.PerformerOptions{}.Resolved().Features
	}
	if cm.K == 0 {
		cm.K = DefaultLinformerK
	}
	if cm.Block == 0 {
		cm.Block = 64
	}
	if cm.Segments == 0 {
		cm.Segments = 64
	}
	if p == nil {
		return cm
	}
	if rep := p.Reports[convert.Performer]; rep != nil {
		cm.Features = rep.Options.Features
	}
	if rep := p.Reports[convert.Linformer]; rep != nil {
		cm.K = linformerK(rep.Options)
	}
	if rep := p.Reports[convert.LocalPooled]; rep != nil {
		cm.Block, cm.Segments, cm.Sinks = rep.Options.Block, rep.Options.Segments, sinkCount(rep.Options.Sinks)
	}
	if rep := p.Reports[convert.Lara]; rep != nil {
		cm.Landmarks, cm.Samples = rep.Options.Landmarks, rep.Options.Samples
	}
	if rep := p.Reports[convert.Hedgehog]; rep != nil {
		cm.MapFeatures = rep.Options.Features
		if cm.MapFeatures == 0 {
			cm.MapFeatures = dims.HeadDim
		}
	}
	return cm
}

// sinkCount is the number of exact sink tokens of a local+pooled
// report's sinks ("first,last", "first", "last" or "none").
func sinkCount(s string) int {
	first, last, _ := ops.ParseSinks(s) // a report's sinks parse
	n := 0
	for _, on := range []bool{first, last} {
		if on {
			n++
		}
	}
	return n
}
