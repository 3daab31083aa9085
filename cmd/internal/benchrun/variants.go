package benchrun

import (
	"fmt"
	"strings"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// VariantOptions configures the model variants a benchmark compares. Each
// variant is what the conversion command of its name writes by default
// (the conversion's zero-value options, with Seed): a size left 0 is the
// conversion's default, a size set is passed to it.
type VariantOptions struct {
	Variants []convert.Form // default DefaultVariants
	Lengths  []int          // sequence lengths to run
	Seed     uint64         // seeds the conversions that sample (ω, E/F, noise, maps)
	// Sizes size the variants (convert.AllSizes: Performer's features,
	// Linformer's k, ...); a size absent is the conversion's default.
	Sizes convert.Sizes
	// Baselines are other models of the same inputs (onnxruntime's
	// optimized forms of the original, say) timed and measured beside the
	// original and the variants; every run's ratios are reported against
	// each of them too. Check them with LoadBaselines.
	Baselines []Baseline

	// limit is the original's limit as convert.ContextLimit reads it
	// beside its file (Run sets it): a rotary model trained for fewer
	// tokens than the longest length is extended too.
	limit convert.Limit
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
	// A position table that cannot be told sets no limit here, as in
	// convert.ContextLimit; runs past what the graph reads then fail.
	limit, _ := convert.PositionLimit(m)
	switch l := o.limit; {
	case limit > 0 && limit < longest:
		ext, rep, err := convert.ExtendPositions(m, convert.ExtendOptions{MaxPositions: longest, Method: "copy"})
		if err != nil {
			// The model reads limit tokens, and cannot be made to read
			// longest: the lengths do not fit it.
			return nil, fmt.Errorf("%w: --lengths: the model reads %d tokens, and its positions cannot be extended to %d: %w", ErrBadInput, limit, longest, err)
		}
		base = ext
		p.Notes = append(p.Notes, "extended "+rep.String())
	case limit == 0 && l.Tokens > 0 && l.Tokens < longest && (l.Kind == convert.LimitConfig || l.Kind == convert.LimitDocString):
		// A rotary model trained for fewer tokens: its frequencies scaled
		// (NTK), and stored cos/sin tables grown, so that every length
		// runs; the cost is the same. Other positions (ALiBi) need none.
		if ext, rep, err := convert.ExtendPositions(m, convert.ExtendOptions{MaxPositions: longest, Trained: l.Tokens}); err == nil {
			base = ext
			p.Notes = append(p.Notes, "extended "+rep.String())
		}
	}
	for _, f := range o.Variants {
		if f == convert.Original {
			p.Models[f] = base
			continue
		}
		cv, ok := convert.LookupConversion(string(f))
		if !ok {
			return nil, fmt.Errorf("convert: bench: unknown variant %q (want original or %s)", f, strings.Join(Names(), ", "))
		}
		out, rep, err := cv.Bench(base, o.Sizes, o.Seed)
		if err != nil {
			return nil, fmt.Errorf("convert: bench: %w", err)
		}
		p.Models[f], p.Reports[f] = out, rep
		how := "as convert %s writes by default"
		if cv.Sized(o.Sizes) {
			how = "as convert %s writes with these sizes"
		}
		p.Notes = append(p.Notes, fmt.Sprintf("%s: %d of %d blocks converted, %s ("+how+")", f, len(rep.Converted), rep.Blocks, cv.Describe(rep.Options), f))
	}
	return p, nil
}

// DefaultVariants are the variants a benchmark runs unless told: the
// original and the conversions benched by default
// (convert.Conversion.BenchDefault).
func DefaultVariants() []convert.Form {
	forms := []convert.Form{convert.Original}
	for _, c := range convert.Conversions() {
		if c.BenchDefault {
			forms = append(forms, c.Form())
		}
	}
	return forms
}

// Names are the variants' names: the conversions' (convert.Conversions).
func Names() []string {
	var names []string
	for _, c := range convert.Conversions() {
		names = append(names, c.Name)
	}
	return names
}

func (o VariantOptions) withDefaults() VariantOptions {
	if len(o.Variants) == 0 {
		o.Variants = DefaultVariants()
	}
	return o
}

// costModel returns the cost model that prices the variants of p as they
// were converted (the sizes their reports give; the sizes of o, or the
// defaults, for forms not run).
func (o VariantOptions) costModel(dims convert.Dims, w convert.Weights, p *Prepared) convert.CostModel {
	cm := convert.NewCostModel(dims, o.Sizes, w)
	if p == nil {
		return cm
	}
	for _, f := range o.Variants {
		if rep := p.Reports[f]; rep != nil {
			cm.PriceReport(f, rep.Options)
		}
	}
	return cm
}
