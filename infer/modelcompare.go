package infer

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/linearize/linearize/internal/graphfacts"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// ModelCompareOptions configures CompareModels.
type ModelCompareOptions struct {
	// Backend names the backend that runs every model (DefaultBackend when empty: "ort" when onnxruntime is built in).
	Backend string
	// Threads bounds each session's intra-op parallelism.
	Threads int
	// Values are internal values (e.g. each layer's attention output) to
	// compare besides the graph outputs; each is compared between the
	// reference and every model whose graph also produces it.
	Values []string
	// Labels optionally name values in the report (e.g. "layer 3
	// attention").
	Labels map[string]string
	// Mask is the [Batch, SeqLen] padding mask (1 on real tokens) of the
	// inputs; nil means every position is real.
	Mask          []int64
	Batch, SeqLen int
	// Pooling is how a [B,S,D] value becomes one vector per batch row
	// for the pooled cosines: "mean" (masked mean over s; "" means it),
	// "cls" (position 0) or "max" (masked maximum per feature). It should
	// be the pooling the model's users apply (a CLS model's sentence
	// vector is position 0's).
	Pooling string
}

// Poolings are the values ModelCompareOptions.Pooling takes.
var Poolings = []string{"mean", "cls", "max"}

// ValueComparison compares one value of a model with the same value of the
// reference model (the first one).
//
// Token-level metrics look at the vectors along the last axis ("tokens"):
// for a [B,S,D] value each row (b, s), for a [B,H,S,D] value each (b, h, s),
// for a [B,D] value each row; positions the mask marks as padding are left
// out of every metric. Pooled metrics exist for [B,S,D] values: each batch
// row pooled over s as ModelCompareOptions.Pooling says (the masked mean
// by default), the sentence embedding. Top-1 agreement is reported for logits-like values only: those
// whose name contains "logit" (a hidden state's arg-max means nothing), with
// a last axis longer than 1; it is the fraction of (unmasked) vectors whose
// arg-max index is the same in both models. (Its JSON fields look like
// convert.Block's in form only; the two records share nothing.)
type ValueComparison struct {
	Value    string `json:"value"`
	Model    string `json:"model"`
	Kind     string `json:"kind"` // "output" or "layer"
	Label    string `json:"label,omitempty"`
	Shape    []int  `json:"shape,omitempty"`
	Mismatch string `json:"mismatch,omitempty"`
	// NonFinite says how many NaN and Inf values this model's value
	// (NaN, Inf) and the reference's (RefNaN, RefInf) hold, all elements
	// counted, masked ones too; the figures are then left at zero. A
	// non-finite value is a failure (ModelComparison.NonFinite), never
	// an agreement, even where both models give the same NaN.
	NonFinite string `json:"non_finite,omitempty"`
	NaN       int    `json:"nan,omitempty"`
	Inf       int    `json:"inf,omitempty"`
	RefNaN    int    `json:"ref_nan,omitempty"`
	RefInf    int    `json:"ref_inf,omitempty"`
	// MaxAbs and MeanAbs are over unmasked elements; RelErr is
	// ‖a−b‖₂/‖b‖₂ over them (b the reference); Cosine treats them as one
	// vector.
	MaxAbs  float64 `json:"max_abs"`
	MeanAbs float64 `json:"mean_abs"`
	RelErr  float64 `json:"rel_err"`
	Cosine  float64 `json:"cosine"`
	// Per-token cosine similarity: mean and minimum over tokens.
	TokenCosMean float64 `json:"token_cos_mean"`
	TokenCosMin  float64 `json:"token_cos_min"`
	// Pooled (masked mean over tokens) cosine: mean and minimum over the
	// batch; nil when not applicable.
	PooledCosMean *float64 `json:"pooled_cos_mean,omitempty"`
	PooledCosMin  *float64 `json:"pooled_cos_min,omitempty"`
	// Top1 is the arg-max agreement of logits-like values; nil otherwise.
	Top1 *float64 `json:"top1,omitempty"`
}

// ModelComparison is the result of CompareModels.
type ModelComparison struct {
	Models []string `json:"models"`           // labels; the first is the reference
	Inputs string   `json:"inputs,omitempty"` // how the inputs were made
	// Pooling is the pooling of the pooled cosines (ModelCompareOptions)
	// and where it was chosen ("cls (modules.json)").
	Pooling string            `json:"pooling"`
	Batch   int               `json:"batch"`
	SeqLen  int               `json:"seq_len"`
	Rows    []ValueComparison `json:"comparisons"`
}

// Produces reports whether the graph of m has a value called name (a node
// output, graph input or initializer).
func Produces(m *onnxpb.ModelProto, name string) bool {
	return m != nil && m.Graph != nil && producedOrDeclared(m.Graph, name)
}

// CompareModels feeds the same inputs to every model and compares each
// later model's outputs (and opt.Values) with the first model's. Outputs
// are matched by name; outputs missing from a model are reported as a
// mismatch row.
func CompareModels(models []*onnxpb.ModelProto, labels []string, feed map[string]*onnx.Tensor, opt ModelCompareOptions) (*ModelComparison, error) {
	if len(models) < 2 {
		return nil, fmt.Errorf("infer: compare needs at least two models, got %d", len(models))
	}
	if len(labels) != len(models) {
		return nil, fmt.Errorf("infer: compare: %d labels for %d models", len(labels), len(models))
	}
	backend := opt.Backend
	if backend == "" {
		backend = DefaultBackend
	}
	if opt.Mask != nil && len(opt.Mask) != opt.Batch*opt.SeqLen {
		return nil, fmt.Errorf("infer: compare: mask has %d entries for batch %d × %d", len(opt.Mask), opt.Batch, opt.SeqLen)
	}
	if opt.Pooling == "" {
		opt.Pooling = "mean"
	}
	if !slices.Contains(Poolings, opt.Pooling) {
		return nil, fmt.Errorf("infer: compare: pooling %q: want one of %s", opt.Pooling, strings.Join(Poolings, ", "))
	}
	results := make([]map[string]*onnx.Tensor, len(models))
	var outputs []string // the reference's graph outputs
	for i, m := range models {
		var expose []string
		for _, v := range opt.Values {
			if Produces(m, v) {
				expose = append(expose, v)
			}
		}
		s, err := Open(backend, m, Options{Threads: opt.Threads, Expose: expose})
		if err != nil {
			return nil, fmt.Errorf("infer: compare: %s: %w", labels[i], err)
		}
		var names []string
		for _, o := range s.Outputs() {
			names = append(names, o.Name)
		}
		if i == 0 {
			outputs = names
		}
		res, err := s.Run(feed, append(names, expose...)...)
		s.Close()
		if err != nil {
			return nil, fmt.Errorf("infer: compare: %s: %w", labels[i], err)
		}
		results[i] = res
	}
	mc := &ModelComparison{Models: labels, Batch: opt.Batch, SeqLen: opt.SeqLen, Pooling: opt.Pooling}
	for i := 1; i < len(models); i++ {
		for _, o := range outputs {
			mc.Rows = append(mc.Rows, compareValue(o, labels[i], labels[0], "output", results[i][o], results[0][o], opt))
		}
		for _, v := range opt.Values {
			ref, ok0 := results[0][v]
			got, ok1 := results[i][v]
			if !ok0 || !ok1 {
				continue
			}
			mc.Rows = append(mc.Rows, compareValue(v, labels[i], labels[0], "layer", got, ref, opt))
		}
	}
	return mc, nil
}

// tokenIndex maps the index of a last-axis vector of a tensor with the
// given shape to its (batch, position) for the mask, or ok = false when
// the layout has no token axis the mask applies to.
func tokenIndex(shape []int, batch, seqLen int) func(v int) (b, s int, ok bool) {
	switch {
	case len(shape) == 3 && shape[0] == batch && shape[1] == seqLen:
		return func(v int) (int, int, bool) { return v / seqLen, v % seqLen, true }
	case len(shape) == 4 && shape[0] == batch && shape[2] == seqLen:
		return func(v int) (int, int, bool) { return v / (shape[1] * seqLen), v % seqLen, true }
	}
	return func(int) (int, int, bool) { return 0, 0, false }
}

// compareValue compares value name of a model (got) with the reference's
// (ref); model and refModel are their labels.
func compareValue(name, model, refModel, kind string, got, ref *onnx.Tensor, opt ModelCompareOptions) ValueComparison {
	r := ValueComparison{Value: name, Model: model, Kind: kind, Label: opt.Labels[name]}
	switch {
	case ref == nil:
		r.Mismatch = "missing in the reference"
		return r
	case got == nil:
		r.Mismatch = "missing in this model"
		return r
	}
	r.Shape = got.Shape
	a, b, dim, mismatch := comparableValues(got, ref)
	if mismatch != "" {
		r.Mismatch = mismatch
		return r
	}
	for _, x := range a {
		r.NaN += b2i(math.IsNaN(x))
		r.Inf += b2i(math.IsInf(x, 0))
	}
	for _, y := range b {
		r.RefNaN += b2i(math.IsNaN(y))
		r.RefInf += b2i(math.IsInf(y, 0))
	}
	if r.NonFinite = NonFiniteText(r.NaN, r.Inf, model, r.RefNaN, r.RefInf, "the reference "+refModel); r.NonFinite != "" {
		return r
	}
	logits := strings.Contains(strings.ToLower(name), "logit") && dim > 1
	if !r.tokenStats(a, b, dim, got.Shape, logits, opt) {
		r.Mismatch = "every position is masked"
		return r
	}
	if len(got.Shape) == 3 && got.Shape[0] == opt.Batch && got.Shape[1] == opt.SeqLen {
		r.PooledCosMean, r.PooledCosMin = pooledCosines(a, b, dim, opt)
	}
	return r
}

// comparableValues returns the values of got and ref and the length of
// their last axis, or why they cannot be compared: other shapes,
// non-numeric or empty.
func comparableValues(got, ref *onnx.Tensor) (a, b []float64, dim int, mismatch string) {
	if fmt.Sprint(got.Shape) != fmt.Sprint(ref.Shape) {
		return nil, nil, 0, fmt.Sprintf("shape %v vs reference %v", got.Shape, ref.Shape)
	}
	a, err := got.AsFloat64s()
	if err != nil {
		return nil, nil, 0, err.Error()
	}
	b, err = ref.AsFloat64s()
	if err != nil {
		return nil, nil, 0, err.Error()
	}
	dim = 1
	if len(got.Shape) > 0 {
		dim = got.Shape[len(got.Shape)-1]
	}
	if dim == 0 || len(a) == 0 {
		return nil, nil, 0, "empty tensor"
	}
	return a, b, dim, ""
}

// tokenStats fills r's error and cosine statistics over the last-axis
// vectors of a (this model) and b (the reference) that the mask keeps,
// and the top-1 agreement of logits. It reports false when the mask keeps
// none.
func (r *ValueComparison) tokenStats(a, b []float64, dim int, shape []int, logits bool, opt ModelCompareOptions) bool {
	pos := tokenIndex(shape, opt.Batch, opt.SeqLen)
	masked := func(v int) bool {
		if opt.Mask == nil {
			return false
		}
		bi, s, ok := pos(v)
		return ok && opt.Mask[bi*opt.SeqLen+s] == 0
	}
	var sumAbs, dd, ab, aa, bb float64
	var n, vectors, agree int
	r.TokenCosMin = math.Inf(1)
	var cosSum float64
	for v := 0; v < len(a)/dim; v++ {
		if masked(v) {
			continue
		}
		x, y := a[v*dim:(v+1)*dim], b[v*dim:(v+1)*dim]
		var vab, vaa, vbb float64
		for k := range x {
			e := math.Abs(x[k] - y[k])
			r.MaxAbs = math.Max(r.MaxAbs, e)
			sumAbs += e
			dd += e * e
			vab += x[k] * y[k]
			vaa += x[k] * x[k]
			vbb += y[k] * y[k]
		}
		n += dim
		ab, aa, bb = ab+vab, aa+vaa, bb+vbb
		c := cos(vab, vaa, vbb)
		cosSum += c
		r.TokenCosMin = math.Min(r.TokenCosMin, c)
		vectors++
		if logits && argmax(x) == argmax(y) {
			agree++
		}
	}
	if vectors == 0 {
		return false
	}
	r.MeanAbs = sumAbs / float64(n)
	r.RelErr = math.Sqrt(dd / math.Max(bb, 1e-300))
	r.Cosine = cos(ab, aa, bb)
	r.TokenCosMean = cosSum / float64(vectors)
	if logits {
		t := float64(agree) / float64(vectors)
		r.Top1 = &t
	}
	return true
}

// pooledCosines returns the mean and the least, over the batch, of the
// cosine between a [batch, seq, dim] value a and its reference b, each
// batch row pooled over its kept positions as opt.Pooling says (a mean is
// taken as a sum: the cosine does not see the scale).
func pooledCosines(a, b []float64, dim int, opt ModelCompareOptions) (meanCos, minCos *float64) {
	S, D := opt.SeqLen, dim
	var mean float64
	minc := math.Inf(1)
	for bi := 0; bi < opt.Batch; bi++ {
		pa, pb := poolRow(a, bi, S, D, opt), poolRow(b, bi, S, D, opt)
		var vab, vaa, vbb float64
		for k := range pa {
			vab += pa[k] * pb[k]
			vaa += pa[k] * pa[k]
			vbb += pb[k] * pb[k]
		}
		c := cos(vab, vaa, vbb)
		mean += c / float64(opt.Batch)
		minc = math.Min(minc, c)
	}
	return &mean, &minc
}

// poolRow pools batch row bi of the [batch, S, D] value x over the
// positions opt.Mask keeps: position 0 for "cls", the per-feature maximum
// for "max", the sum otherwise.
func poolRow(x []float64, bi, S, D int, opt ModelCompareOptions) []float64 {
	p := make([]float64, D)
	if opt.Pooling == "cls" {
		copy(p, x[bi*S*D:bi*S*D+D])
		return p
	}
	maxPool := opt.Pooling == "max"
	if maxPool {
		for k := range p {
			p[k] = math.Inf(-1)
		}
	}
	kept := 0
	for s := 0; s < S; s++ {
		if opt.Mask != nil && opt.Mask[bi*S+s] == 0 {
			continue
		}
		kept++
		row := x[(bi*S+s)*D : (bi*S+s+1)*D]
		for k, v := range row {
			if maxPool {
				p[k] = math.Max(p[k], v)
			} else {
				p[k] += v
			}
		}
	}
	if kept == 0 && maxPool { // a fully masked row pools to zero, as a sum does
		clear(p)
	}
	return p
}

// cos is ab/√(aa·bb), 1 when both vectors are zero and 0 when one is.
func cos(ab, aa, bb float64) float64 {
	switch {
	case aa == 0 && bb == 0:
		return 1
	case aa == 0 || bb == 0:
		return 0
	}
	return ab / math.Sqrt(aa*bb)
}

func argmax(x []float64) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

// WriteTable prints the comparison as an aligned table.
func (mc *ModelComparison) WriteTable(w io.Writer) error {
	in := mc.Inputs
	if in == "" {
		in = fmt.Sprintf("batch %d × %d", mc.Batch, mc.SeqLen)
	}
	pooling := mc.Pooling
	if pooling == "" {
		pooling = "mean"
	}
	fmt.Fprintf(w, "reference: %s; inputs: %s; pooled by %s\n", mc.Models[0], in, pooling)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "model\tkind\tvalue\tmax abs\tmean abs\trel err\ttoken cos mean\ttoken cos min\tpooled cos mean\tpooled cos min\ttop-1\t")
	opt := func(p *float64, f string) string {
		if p == nil {
			return "-"
		}
		return fmt.Sprintf(f, *p)
	}
	for _, r := range mc.Rows {
		name := r.Value
		if r.Label != "" {
			name = r.Label
		}
		if r.Mismatch != "" || r.NonFinite != "" {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s%s\t\t\t\t\t\t\t\t\n", r.Model, r.Kind, name, r.Mismatch, r.NonFinite)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.3g\t%.3g\t%.3g\t%.5f\t%.5f\t%s\t%s\t%s\t\n", r.Model, r.Kind, name,
			r.MaxAbs, r.MeanAbs, r.RelErr, r.TokenCosMean, r.TokenCosMin,
			opt(r.PooledCosMean, "%.5f"), opt(r.PooledCosMin, "%.5f"), opt(r.Top1, "%.3f"))
	}
	return tw.Flush()
}

// NonFinite lists the values that hold a NaN or an Inf in either model
// ("lp.onnx last_hidden_state: non-finite: 12 NaN in lp.onnx"): each is
// a failed comparison.
func (mc *ModelComparison) NonFinite() []string {
	var out []string
	for _, r := range mc.Rows {
		if r.NonFinite != "" {
			name := r.Value
			if r.Label != "" {
				name = r.Label
			}
			out = append(out, r.Model+" "+name+": "+r.NonFinite)
		}
	}
	return out
}

// WriteJSON writes the comparison as indented JSON.
func (mc *ModelComparison) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(mc)
}

// MergedValue returns the attention block output name in token layout:
// name followed forward through the head merge (Transposes and Reshapes
// that are its only consumer besides Shape/Size), a value a rewrite of the
// core leaves in place. It is the definition convert.Detect records as
// Block.Merged (internal/graphfacts.MergedValue), for outputs Detect does
// not report: converted (ai.linearize) nodes and fused cores.
func MergedValue(m *onnxpb.ModelProto, name string) string {
	if m == nil || m.Graph == nil {
		return name
	}
	return graphfacts.MergedValue(onnx.NewIndex(m.Graph), name)
}

// GraphInputs lists m's graph inputs that are not initializers, with their
// declared types.
func GraphInputs(m *onnxpb.ModelProto) []Value {
	if m == nil || m.Graph == nil {
		return nil
	}
	inits := map[string]bool{}
	for _, t := range m.Graph.Initializer {
		inits[t.GetName()] = true
	}
	var vs []Value
	for _, vi := range m.Graph.Input {
		if !inits[vi.GetName()] {
			vs = append(vs, valueOf(vi))
		}
	}
	return vs
}
