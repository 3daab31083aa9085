package convert

import (
	"slices"

	"github.com/linearize/linearize/onnx/onnxpb"
)

// A Conversion is one conversion as the tools that handle every
// conversion see it: the command line (its command and `convert bench`'s
// variant of the same name), the benchmark, the cost model, the plots.
// Each is declared once, beside its rewrite (convert/lara.go holds LARA's
// options, ToLARA and laraConversion), and listed in conversions below;
// those tools look conversions up here (Conversions, LookupConversion,
// ConversionOfOp) instead of switching on their names. A conversion is
// its op (ops/), its rewrite with this entry (convert/) and its command
// (cmd/convert/cmd_NAME.go); docs/library.md says how to add one.
type Conversion struct {
	// Name names it everywhere: its command (`convert local-pooled`),
	// its bench variant and its cost-model form (Form).
	Name string
	// Op is the op type its blocks become, in domain ops.Domain
	// (ops.LocalPooledOp).
	Op string
	// Exact says the op computes the original attention (to float
	// rounding): the window conversion, which every other conversion
	// also applies to sliding-window blocks. The cost model's crossover
	// line and core-cost line list the approximate ones.
	Exact bool
	// KeepsAlibi says its op keeps an ALiBi bias (local-pooled): it
	// converts global ALiBi blocks (Block.Alibi), which the others leave
	// as they are, and the cost model prices them so (Dims.AlibiLayers).
	KeepsAlibi bool
	// BenchDefault says `convert bench` runs it unless --variants says
	// otherwise.
	BenchDefault bool
	// Sizes are the numbers that size it in `convert bench` and
	// `convert inspect --cost` (flags of those names), in its bench
	// variant and in the cost model. Conversions may share one (block).
	Sizes []Size

	// bench converts m as `convert bench` runs it: the conversion's
	// zero-value options with seed and the sizes in s (absent: the
	// default), which is what its command writes by default.
	bench func(m *onnxpb.ModelProto, s Sizes, seed uint64) (*onnxpb.ModelProto, *Report, error)
	// describe says what sizes a conversion used, from its report
	// ("b = 64, k = 64, sinks first,last").
	describe func(ro ReportOptions) string
	cost     conversionCost
}

// conversionCost is how the cost model prices a conversion (cost.go);
// each conversion's pricing is in its file.
type conversionCost struct {
	// layer prices the attention core of one layer at length n: Core,
	// Exps, Elementwise and the largest intermediates (LayerCost.keep).
	layer func(c CostModel, n int, lc *LayerCost)
	// priced reports whether c prices the conversion (a row of its
	// table); nil: always.
	priced func(c CostModel) bool
	// defaults sets the fields of c the conversion's zero-value options
	// imply beyond its Sizes (the sinks, the samples); nil: none.
	defaults func(c *CostModel)
	// fromReport sets c's fields of the conversion to what a conversion
	// reported (bench prices what it ran); nil: none.
	fromReport func(c *CostModel, ro ReportOptions)
	// header is its part of the cost table's first line ("Performer M =
	// 256"); note is the parenthesis after its predicted crossover ("
	// (cores equal at 2k = 256)"). nil: none.
	header, note func(c CostModel) string
}

// A Size is a number that sizes a conversion: a flag of `convert bench`
// and `convert inspect --cost`, the field of CostModel it sets, and its
// default, the conversion's own.
type Size struct {
	Flag   string // the flag, and the key in Sizes: "features"
	Usage  string // the flag's help: "Performer random features M (convert performer's default)"
	Option string // the field of the conversion's options it sets ("Features"): OptionError.Field
	// Default is the conversion's default, and the flag's.
	Default int
	// ZeroMeans, when set, says what the value 0 stands for ("the head
	// size"): 0 is then allowed, and the default.
	ZeroMeans string
	// Max bounds the value (0: the command's own bound).
	Max int
	// field is the CostModel field it sets.
	field func(c *CostModel) *int
}

// Sizes are sizes by flag (Size.Flag); an absent size is its default.
type Sizes map[string]int

// of returns the size z of s, 0 (the conversion's default) when absent.
func (s Sizes) of(z Size) int { return s[z.Flag] }

// conversions are the conversions, in the order the tools list them
// (the commands, the cost table). Each is declared in its rewrite's file.
var conversions []*Conversion

func init() {
	conversions = []*Conversion{&windowConversion, &performerConversion, &linformerConversion,
		&localPooledConversion, &hedgehogConversion, &laraConversion}
}

// Conversions returns the conversions in their order: window,
// performer, linformer, local-pooled, hedgehog, lara.
func Conversions() []Conversion {
	out := make([]Conversion, len(conversions))
	for i, c := range conversions {
		out[i] = *c
	}
	return out
}

// LookupConversion returns the conversion called name (a Form's string
// too).
func LookupConversion(name string) (Conversion, bool) {
	if c := conversionOf(Form(name)); c != nil {
		return *c, true
	}
	return Conversion{}, false
}

// ConversionOfOp returns the conversion whose op is op (an op type of
// domain ops.Domain).
func ConversionOfOp(op string) (Conversion, bool) {
	for _, c := range conversions {
		if c.Op == op {
			return *c, true
		}
	}
	return Conversion{}, false
}

// conversionOf is the conversion of form f, or nil.
func conversionOf(f Form) *Conversion {
	for _, c := range conversions {
		if c.Form() == f {
			return c
		}
	}
	return nil
}

// Form is the cost-model form of the conversion (its Name).
func (c Conversion) Form() Form { return Form(c.Name) }

// Bench converts m as `convert bench` runs the variant: the
// conversion's zero-value options with seed and the sizes in s (absent:
// the default), what its command writes by default when s is empty.
func (c Conversion) Bench(m *onnxpb.ModelProto, s Sizes, seed uint64) (*onnxpb.ModelProto, *Report, error) {
	return c.bench(m, s, seed)
}

// Describe says what sizes a conversion of c used, from its report's
// options ("C = 256, 1 sample(s) each").
func (c Conversion) Describe(ro ReportOptions) string {
	if c.describe == nil {
		return ""
	}
	return c.describe(ro)
}

// SizeOf returns the size of c that sets the field of c's options
// called option (an OptionError's Field).
func (c Conversion) SizeOf(option string) (Size, bool) {
	for _, z := range c.Sizes {
		if z.Option == option {
			return z, true
		}
	}
	return Size{}, false
}

// Sized reports whether s sets a size of c.
func (c Conversion) Sized(s Sizes) bool {
	for _, z := range c.Sizes {
		if _, ok := s[z.Flag]; ok {
			return true
		}
	}
	return false
}

// AllSizes returns the sizes of every conversion, each once (the first
// conversion to list a shared one gives its help), in the conversions'
// order: the size flags of `convert bench` and `convert inspect --cost`.
func AllSizes() []Size {
	var out []Size
	for _, c := range conversions {
		for _, z := range c.Sizes {
			if !slices.ContainsFunc(out, func(o Size) bool { return o.Flag == z.Flag }) {
				out = append(out, z)
			}
		}
	}
	return out
}

// NewCostModel returns the cost model of a model of dimensions d that
// prices each conversion as its zero-value options convert it, with the
// sizes in s (absent: the conversion's default), at weights w.
func NewCostModel(d Dims, s Sizes, w Weights) CostModel {
	c := CostModel{Dims: d, Weights: w}
	for _, z := range AllSizes() {
		v, ok := s[z.Flag]
		if !ok {
			v = z.Default
		}
		*z.field(&c) = v
	}
	for _, cv := range conversions {
		if cv.cost.defaults != nil {
			cv.cost.defaults(&c)
		}
	}
	return c
}

// PriceReport sets the sizes c prices form f at to what a conversion of
// that form reported (ro, its Report.Options): a benchmark prices the
// variants it ran as they were converted.
func (c *CostModel) PriceReport(f Form, ro ReportOptions) {
	if cv := conversionOf(f); cv != nil && cv.cost.fromReport != nil {
		cv.cost.fromReport(c, ro)
	}
}
