package convert

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

// BenchOptions configures the model variants a benchmark compares.
type BenchOptions struct {
	Variants []Form // default original, performer, linformer, local-pooled
	Lengths  []int  // sequence lengths to run
	Features int    // Performer M (default 256)
	K        int    // Linformer k (default 256)
	Seed     uint64 // seeds ω and E/F
	// Block and Segments configure the local-pooled variant (default 64
	// and 64, with both sinks).
	Block, Segments int
	// Landmarks configures the lara variant (default
	// DefaultLaraLandmarks, one sample each); it runs only when asked for
	// in Variants.
	Landmarks int
	// Baselines are other models of the same inputs (onnxruntime's
	// optimized forms of the original, say) timed and measured beside the
	// original and the variants; every run's ratios are reported against
	// each of them too. Check them with LoadBaselines.
	Baselines []Baseline
}

// Baseline is a model a benchmark compares with, named for the report.
type Baseline struct {
	Name string `json:"name"`
	Path string `json:"path"`
	// Kind is the cost-model form that prices it: Original (unfused
	// softmax attention), Fused or Flash, a linear form for a converted
	// model (its ai.linearize ops, or their bodies inlined by
	// onnxruntime's optimizer), or "" when it holds no attention the model
	// recognises (then nothing is predicted against it). Set by
	// LoadBaselines.
	Kind Form `json:"kind,omitempty"`
}

// ParseBaseline parses a NAME=FILE flag value. NAME is letters, digits,
// '-', '_' and '.', and must not be a variant's name.
func ParseBaseline(s string) (Baseline, error) {
	name, path, ok := strings.Cut(s, "=")
	name, path = strings.TrimSpace(name), strings.TrimSpace(path)
	if !ok || name == "" || path == "" {
		return Baseline{}, badBaseline("convert: baseline %q: want NAME=FILE, e.g. fused=out/bench/fused.onnx", s)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return Baseline{}, badBaseline("convert: baseline %q: NAME %q may hold letters, digits, '-', '_' and '.' only", s, name)
		}
	}
	switch Form(name) {
	case Original, Performer, Linformer, LocalPooled, Lara:
		return Baseline{}, badBaseline("convert: baseline %q: NAME %q is a variant's name; choose another", s, name)
	}
	return Baseline{Name: name, Path: path}, nil
}

// ErrBadBaseline is wrapped by the errors of ParseBaseline and
// LoadBaselines (a bad NAME=FILE, a missing or unreadable file, inputs
// that differ from the original's).
var ErrBadBaseline = errors.New("convert: bad baseline")

// baselineError is an error that also wraps ErrBadBaseline.
type baselineError struct{ err error }

func (e baselineError) Error() string   { return e.err.Error() }
func (e baselineError) Unwrap() []error { return []error{e.err, ErrBadBaseline} }

func badBaseline(format string, a ...any) error {
	return baselineError{fmt.Errorf(format, a...)}
}

// LoadBaselines loads and checks the baselines against the original
// model: each file must exist and load, the names must be distinct, and
// every input a baseline reads must be an input of the original with the
// same element type and rank (a baseline may read fewer: onnxruntime's
// optimizer drops an attention mask it was told not to use). It returns
// the baselines with Kind set and the loaded models, in order.
func LoadBaselines(orig *onnxpb.ModelProto, bs []Baseline) ([]Baseline, []*onnxpb.ModelProto, error) {
	if len(bs) == 0 {
		return nil, nil, nil
	}
	if orig == nil || orig.Graph == nil {
		return nil, nil, errors.New("convert: baselines: the original model has no graph")
	}
	want := graphInputs(orig)
	seen := map[string]bool{}
	out := make([]Baseline, len(bs))
	models := make([]*onnxpb.ModelProto, len(bs))
	for i, b := range bs {
		if b.Name == "" || b.Path == "" {
			return nil, nil, badBaseline("convert: baseline %d: want a name and a file", i+1)
		}
		switch Form(b.Name) {
		case Original, Performer, Linformer, LocalPooled, Lara:
			return nil, nil, badBaseline("convert: baseline %s: the name is a variant's; choose another", b.Name)
		}
		if seen[b.Name] {
			return nil, nil, badBaseline("convert: baseline %s: name given twice", b.Name)
		}
		seen[b.Name] = true
		st, err := os.Stat(b.Path)
		if err != nil {
			return nil, nil, badBaseline("convert: baseline %s: %w", b.Name, err)
		}
		if st.IsDir() {
			return nil, nil, badBaseline("convert: baseline %s: %s is a directory, not a model file", b.Name, b.Path)
		}
		m, err := onnx.Load(b.Path)
		if err != nil {
			return nil, nil, badBaseline("convert: baseline %s: %w", b.Name, err)
		}
		if err := sameInputs(want, graphInputs(m)); err != nil {
			return nil, nil, badBaseline("convert: baseline %s (%s): %w", b.Name, b.Path, err)
		}
		b.Kind = BaselineKind(m)
		out[i], models[i] = b, m
	}
	return out, models, nil
}

// benchInput is a graph input's element type and rank (−1 when unknown).
type benchInput struct {
	elem int32
	rank int
}

// graphInputs lists the inputs of m that are not initializers.
func graphInputs(m *onnxpb.ModelProto) map[string]benchInput {
	out := map[string]benchInput{}
	if m == nil || m.Graph == nil {
		return out
	}
	inits := map[string]bool{}
	for _, t := range m.Graph.Initializer {
		inits[t.GetName()] = true
	}
	for _, vi := range m.Graph.Input {
		if inits[vi.GetName()] {
			continue
		}
		in := benchInput{rank: -1}
		if tt := vi.GetType().GetTensorType(); tt != nil {
			in.elem = tt.GetElemType()
			if tt.Shape != nil {
				in.rank = len(tt.Shape.Dim)
			}
		}
		out[vi.GetName()] = in
	}
	return out
}

// sameInputs checks that every input of got is an input of want with
// the same element type and rank.
func sameInputs(want, got map[string]benchInput) error {
	names := func(m map[string]benchInput) string {
		var ns []string
		for n := range m {
			ns = append(ns, n)
		}
		sort.Strings(ns)
		return strings.Join(ns, ", ")
	}
	if len(got) == 0 {
		return fmt.Errorf("the model has no inputs; the original reads %s", names(want))
	}
	var bad []string
	for _, n := range sortedKeys(got) {
		g := got[n]
		w, ok := want[n]
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("input %q is not an input of the original (%s)", n, names(want)))
		case g.elem != w.elem:
			bad = append(bad, fmt.Sprintf("input %q is %s, the original's is %s", n, onnx.TypeName(onnx.DataType(g.elem)), onnx.TypeName(onnx.DataType(w.elem))))
		case g.rank >= 0 && w.rank >= 0 && g.rank != w.rank:
			bad = append(bad, fmt.Sprintf("input %q has rank %d, the original's has rank %d", n, g.rank, w.rank))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("inputs differ from the original's: %s", strings.Join(bad, "; "))
	}
	return nil
}

func sortedKeys(m map[string]benchInput) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// BaselineKind says which cost-model form prices a model: Flash when its
// attention is com.microsoft MultiHeadAttention nodes without a key
// padding mask or attention bias (onnxruntime's CPU flash-attention
// path), Fused when it has com.microsoft Attention or MultiHeadAttention
// otherwise, Original when Detect finds unfused softmax attention, and ""
// when none of these.
func BaselineKind(m *onnxpb.ModelProto) Form {
	if m == nil || m.Graph == nil {
		return ""
	}
	attention, mha, masked := 0, 0, 0
	for _, n := range m.Graph.Node {
		if n.GetDomain() != "com.microsoft" {
			continue
		}
		switch n.GetOpType() {
		case "Attention":
			attention++
		case "MultiHeadAttention":
			mha++
			// Inputs 4 and 5 are key_padding_mask and attention_bias.
			for i := 4; i <= 5 && i < len(n.Input); i++ {
				if n.Input[i] != "" {
					masked++
					break
				}
			}
		}
	}
	switch {
	case mha > 0 && attention == 0 && masked == 0:
		return Flash
	case attention > 0 || mha > 0:
		return Fused
	}
	d, err := Detect(m)
	if err != nil {
		return ""
	}
	if d.AlreadyConverted() {
		// A converted model (onnxruntime's offline optimizer may have
		// inlined its ops): priced as its linear form when it has one.
		var form Form
		for _, l := range d.Linear {
			f := linearForm(l.Op)
			if f == "" || (form != "" && f != form) {
				return ""
			}
			form = f
		}
		return form
	}
	if d.Count() > 0 {
		return Original
	}
	return ""
}

// linearForm is the form of a linear-attention op as Detection.Linear
// names it ("ai.linearize:PerformerAttention", "inlined
// LocalPooledAttention", ...), or "".
func linearForm(op string) Form {
	switch {
	case strings.HasSuffix(op, ops.PerformerOp):
		return Performer
	case strings.HasSuffix(op, ops.LinformerOp):
		return Linformer
	case strings.HasSuffix(op, ops.LocalPooledOp):
		return LocalPooled
	case strings.HasSuffix(op, ops.LaraOp):
		return Lara
	}
	return ""
}

// BenchVariants prepares the models a benchmark runs: the original with its
// position table extended (copy) when it is shorter than the longest
// length, and from it the Performer and Linformer conversions (Linformer's
// projections sized for the longest length). It returns the models by form
// and notes on what was done. m is not modified.
func BenchVariants(m *onnxpb.ModelProto, o BenchOptions) (map[Form]*onnxpb.ModelProto, []string, error) {
	o = o.withDefaults()
	if len(o.Lengths) == 0 {
		return nil, nil, fmt.Errorf("convert: bench: no lengths")
	}
	longest := 0
	for _, n := range o.Lengths {
		if n <= 0 {
			return nil, nil, fmt.Errorf("convert: bench: length %d must be positive", n)
		}
		longest = max(longest, n)
	}
	var notes []string
	base := m
	dims, _, err := ModelDims(m)
	if err != nil {
		return nil, nil, fmt.Errorf("convert: bench: %w", err)
	}
	if dims.MaxPositions > 0 && dims.MaxPositions < longest {
		ext, rep, err := ExtendPositions(m, ExtendOptions{MaxPositions: longest, Method: "copy"})
		if err != nil {
			return nil, nil, fmt.Errorf("convert: bench: %w", err)
		}
		base = ext
		notes = append(notes, "extended "+rep.String())
	}
	out := map[Form]*onnxpb.ModelProto{}
	for _, f := range o.Variants {
		switch f {
		case Original:
			out[f] = base
		case Performer:
			pm, rep, err := ToPerformer(base, PerformerOptions{Features: o.Features, Seed: o.Seed})
			if err != nil {
				return nil, nil, fmt.Errorf("convert: bench: %w", err)
			}
			if len(rep.Converted) == 0 {
				return nil, nil, fmt.Errorf("convert: bench: performer: no attention block could be converted")
			}
			out[f] = pm
			notes = append(notes, fmt.Sprintf("performer: %d of %d blocks converted, M = %d", len(rep.Converted), rep.Blocks, o.Features))
		case Linformer:
			lm, rep, err := ToLinformer(base, LinformerOptions{K: o.K, MaxLen: longest, Seed: o.Seed})
			if err != nil {
				return nil, nil, fmt.Errorf("convert: bench: %w", err)
			}
			if len(rep.Converted) == 0 {
				return nil, nil, fmt.Errorf("convert: bench: linformer: no attention block could be converted")
			}
			out[f] = lm
			notes = append(notes, fmt.Sprintf("linformer: %d of %d blocks converted, k = %d, N = %d", len(rep.Converted), rep.Blocks, o.K, longest))
		case LocalPooled:
			lp, rep, err := ToLocalPooled(base, LocalPooledOptions{Block: o.Block, Segments: o.Segments})
			if err != nil {
				return nil, nil, fmt.Errorf("convert: bench: %w", err)
			}
			if len(rep.Converted) == 0 {
				return nil, nil, fmt.Errorf("convert: bench: local-pooled: no attention block could be converted")
			}
			out[f] = lp
			notes = append(notes, fmt.Sprintf("local-pooled: %d of %d blocks converted, b = %d, k = %d, sinks first,last", len(rep.Converted), rep.Blocks, o.Block, o.Segments))
		case Lara:
			lm, rep, err := ToLARA(base, LaraOptions{Landmarks: o.Landmarks, Seed: o.Seed})
			if err != nil {
				return nil, nil, fmt.Errorf("convert: bench: %w", err)
			}
			if len(rep.Converted) == 0 {
				return nil, nil, fmt.Errorf("convert: bench: lara: no attention block could be converted")
			}
			out[f] = lm
			notes = append(notes, fmt.Sprintf("lara: %d of %d blocks converted, C = %d", len(rep.Converted), rep.Blocks, o.Landmarks))
		default:
			return nil, nil, fmt.Errorf("convert: bench: unknown variant %q (want original, performer, linformer, local-pooled or lara)", f)
		}
	}
	return out, notes, nil
}

func (o BenchOptions) withDefaults() BenchOptions {
	if len(o.Variants) == 0 {
		o.Variants = []Form{Original, Performer, Linformer, LocalPooled}
	}
	if o.Block == 0 {
		o.Block = 64
	}
	if o.Segments == 0 {
		o.Segments = 64
	}
	if o.Landmarks == 0 {
		o.Landmarks = DefaultLaraLandmarks
	}
	if o.Features == 0 {
		o.Features = 256
	}
	if o.K == 0 {
		o.K = 256
	}
	return o
}

// BenchRun is one (variant, length) measurement; the JSON names follow
// issue 7.
type BenchRun struct {
	Variant          Form    `json:"variant"`
	Length           int     `json:"length"`
	Status           string  `json:"status"` // ok, skipped or failed
	MedianMS         float64 `json:"median_ms"`
	PeakRSSMB        float64 `json:"peak_rss_mb"`
	PredictedSpeedup float64 `json:"predicted_speedup"`
	Speedup          float64 `json:"speedup,omitempty"`      // original median / this median
	MemoryRatio      float64 `json:"memory_ratio,omitempty"` // this peak RSS / original's
	PredictedPeakMB  float64 `json:"predicted_peak_mb"`
	// LoadPeakRSSMB is the peak while loading the model; PeakRSSMB is the
	// peak while running (the child resets the high-water mark after
	// loading), which is what the forms differ in.
	LoadPeakRSSMB float64   `json:"load_peak_rss_mb,omitempty"`
	TimesMS       []float64 `json:"times_ms,omitempty"`
	// MedianCPUMS is the median CPU time (user + system, all threads) of
	// a run, and CPUSpeedup the original's over this one: on a machine
	// shared with other work, wall time includes waiting for a core and
	// CPU time does not.
	MedianCPUMS float64   `json:"median_cpu_ms,omitempty"`
	CPUSpeedup  float64   `json:"cpu_speedup,omitempty"`
	CPUTimesMS  []float64 `json:"cpu_times_ms,omitempty"`
	Reason      string    `json:"reason,omitempty"`
	// Baseline marks the run of a baseline model (Variant is its name).
	Baseline bool `json:"baseline,omitempty"`
	// Versus holds the ratios against each baseline (by name) that ran
	// at the same length: its median over this one's (Speedup, CPUSpeedup)
	// and this peak RSS over its (MemoryRatio), with the cost model's
	// prediction when the baseline's kind is known.
	Versus map[string]BenchRatio `json:"versus,omitempty"`
}

// BenchRatio is one run compared with one baseline at the same length.
type BenchRatio struct {
	Speedup          float64 `json:"speedup,omitempty"`
	CPUSpeedup       float64 `json:"cpu_speedup,omitempty"`
	MemoryRatio      float64 `json:"memory_ratio,omitempty"`
	PredictedSpeedup float64 `json:"predicted_speedup,omitempty"`
}

// BenchResult is what a benchmark writes with --json.
type BenchResult struct {
	Model    string     `json:"model"`
	Threads  int        `json:"threads"`
	Features int        `json:"features"`
	K        int        `json:"k"`
	Repeat   int        `json:"repeat"`
	Dims     Dims       `json:"dims"`
	Notes    []string   `json:"notes,omitempty"`
	Runs     []BenchRun `json:"runs"`
	// Crossover is the cost model's predicted crossover per form, and
	// MeasuredCrossover the first measured length from which the form was
	// faster than the original at every longer measured length (0 when
	// never, −1 when the original did not run).
	Crossover         map[Form]int `json:"predicted_crossover"`
	MeasuredCrossover map[Form]int `json:"measured_crossover"`
	// Baselines are the models given besides the original; the
	// crossovers against each (by name) are as above, the predicted ones
	// only for baselines of known kind. PassWeight is the cost model's
	// (CostModel.PassWeight) used for every prediction.
	Baselines               []Baseline              `json:"baselines,omitempty"`
	CrossoverVersus         map[string]map[Form]int `json:"predicted_crossover_versus,omitempty"`
	MeasuredCrossoverVersus map[string]map[Form]int `json:"measured_crossover_versus,omitempty"`
	PassWeight              float64                 `json:"pass_weight,omitempty"`
}

// Summarize fills Speedup and MemoryRatio of every run from the original's
// run at the same length, Versus from each baseline's, and the measured
// crossovers of the linear forms against the original and each baseline.
func (r *BenchResult) Summarize() {
	orig := r.okRuns(Original)
	for i := range r.Runs {
		run := &r.Runs[i]
		if q, ok := ratio(run, orig[run.Length]); ok {
			run.Speedup, run.CPUSpeedup, run.MemoryRatio = q.Speedup, q.CPUSpeedup, q.MemoryRatio
		}
	}
	r.MeasuredCrossover = r.measuredCrossover(orig)
	if len(r.Baselines) == 0 {
		return
	}
	r.MeasuredCrossoverVersus = map[string]map[Form]int{}
	for _, b := range r.Baselines {
		ref := r.okRuns(Form(b.Name))
		for i := range r.Runs {
			run := &r.Runs[i]
			if run.Variant == Form(b.Name) {
				continue
			}
			q, ok := ratio(run, ref[run.Length])
			if !ok {
				continue
			}
			if run.Versus == nil {
				run.Versus = map[string]BenchRatio{}
			}
			q.PredictedSpeedup = run.Versus[b.Name].PredictedSpeedup
			run.Versus[b.Name] = q
		}
		r.MeasuredCrossoverVersus[b.Name] = r.measuredCrossover(ref)
	}
}

// okRuns maps length to the successful run of variant f.
func (r *BenchResult) okRuns(f Form) map[int]*BenchRun {
	out := map[int]*BenchRun{}
	for i := range r.Runs {
		if r.Runs[i].Variant == f && r.Runs[i].Status == "ok" {
			out[r.Runs[i].Length] = &r.Runs[i]
		}
	}
	return out
}

// ratio compares run with the reference run ref at the same length.
func ratio(run, ref *BenchRun) (BenchRatio, bool) {
	var q BenchRatio
	if ref == nil || run.Status != "ok" || run.MedianMS <= 0 {
		return q, false
	}
	q.Speedup = ref.MedianMS / run.MedianMS
	if ref.MedianCPUMS > 0 && run.MedianCPUMS > 0 {
		q.CPUSpeedup = ref.MedianCPUMS / run.MedianCPUMS
	}
	if ref.PeakRSSMB > 0 {
		q.MemoryRatio = run.PeakRSSMB / ref.PeakRSSMB
	}
	return q, true
}

// measuredCrossover is, per linear form, the first measured length from
// which the form was faster than the reference at every longer length
// where both ran (0 when never, −1 when the reference never ran).
func (r *BenchResult) measuredCrossover(ref map[int]*BenchRun) map[Form]int {
	out := map[Form]int{}
	for _, f := range []Form{Performer, Linformer, LocalPooled, Lara} {
		cross, seen := 0, false
		for _, run := range r.sorted(f) {
			if run.Status != "ok" || ref[run.Length] == nil {
				continue
			}
			seen = true
			if run.MedianMS > 0 && ref[run.Length].MedianMS > run.MedianMS {
				if cross == 0 {
					cross = run.Length
				}
			} else {
				cross = 0
			}
		}
		if !seen {
			if len(r.sorted(f)) > 0 {
				out[f] = -1
			}
			continue
		}
		out[f] = cross
	}
	return out
}

func (r *BenchResult) sorted(f Form) []BenchRun {
	var out []BenchRun
	for _, run := range r.Runs {
		if run.Variant == f {
			out = append(out, run)
		}
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].Length < out[j-1].Length; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}
