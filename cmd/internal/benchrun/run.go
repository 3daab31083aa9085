package benchrun

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/internal/progress"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// ChildEnv is the environment variable that turns a process into a
// benchmark child; it holds the JSON ChildSpec.
const ChildEnv = "LINEARIZE_BENCH_CHILD"

// ChildSpec is one child's job: load Model, run it once to warm up, then
// time Runs runs at batch 1 and sequence length Length.
type ChildSpec struct {
	Model   string `json:"model"`
	Length  int    `json:"length"`
	Threads int    `json:"threads"`
	Runs    int    `json:"runs"`
	Warmup  int    `json:"warmup"`
	// Inputs are Options.Inputs, files by absolute paths.
	Inputs map[string]string `json:"inputs,omitempty"`
}

// ChildResult is what a child prints on stdout.
type ChildResult struct {
	TimesMS    []float64 `json:"times_ms"`
	CPUTimesMS []float64 `json:"cpu_times_ms"`
	// LoadPeakKB is the peak RSS while loading the model and creating the
	// session (Go's copies of the model included). RunPeakKB is the peak
	// RSS while running: the high-water mark is reset (/proc/self/clear_refs)
	// after loading, so it counts what stays resident (onnxruntime's
	// weights) plus the inference's own memory. Reset is false when the
	// kernel refused the reset; RunPeakKB then includes loading.
	LoadPeakKB int64  `json:"load_peak_kb"`
	RunPeakKB  int64  `json:"run_peak_kb"`
	Reset      bool   `json:"reset"`
	Error      string `json:"error,omitempty"`
}

// ChildMain runs the child job when ChildEnv is set, writes its result
// to stdout and reports true; otherwise it does nothing and reports false.
// Binaries that the benchmark re-executes call it first thing.
func ChildMain(stdout io.Writer) bool {
	spec := os.Getenv(ChildEnv)
	if spec == "" {
		return false
	}
	var s ChildSpec
	res := ChildResult{}
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		res.Error = "benchrun: bad child spec: " + err.Error()
	} else if err := runChild(s, &res); err != nil {
		res.Error = err.Error()
	}
	res.RunPeakKB = vmHWM()
	if !res.Reset {
		res.LoadPeakKB = res.RunPeakKB
	}
	json.NewEncoder(stdout).Encode(res)
	return true
}

func runChild(s ChildSpec, res *ChildResult) error {
	m, err := onnx.Load(s.Model)
	if err != nil {
		return err
	}
	sess, err := infer.Open("ort", m, infer.Options{Threads: s.Threads})
	if err != nil {
		return err
	}
	defer sess.Close()
	fixed, err := infer.ReadFixedInputs(m, s.Inputs)
	if err != nil {
		return err
	}
	rows := map[string]int64{}
	for _, v := range sess.Inputs() {
		if n, ok := infer.IndexedRows(m, v.Name); ok {
			rows[v.Name] = n
		}
	}
	feed, err := Inputs(sess.Inputs(), s.Length, fixed, rows)
	if err != nil {
		return err
	}
	m = nil
	debug.FreeOSMemory()
	res.LoadPeakKB = vmHWM()
	// Writing 5 to clear_refs resets the peak RSS (Linux ≥ 4.0).
	res.Reset = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
	for i := 0; i < s.Warmup; i++ {
		if _, err := sess.Run(feed); err != nil {
			return err
		}
	}
	for i := 0; i < s.Runs; i++ {
		c0 := cpuTime()
		t0 := time.Now()
		if _, err := sess.Run(feed); err != nil {
			return err
		}
		res.TimesMS = append(res.TimesMS, float64(time.Since(t0).Microseconds())/1000)
		res.CPUTimesMS = append(res.CPUTimesMS, float64((cpuTime()-c0).Microseconds())/1000)
	}
	return nil
}

// Inputs builds a batch-1 feed of length n for a BERT-style model: token
// ids drawn from [0, 100) with a fixed seed (below rows[name], the table
// the input indexes, when smaller: ESM's vocabulary has 33 tokens), a
// mask of ones, token types 0, position ids 0..n−1. An input that carries
// no tokens (tokenLevel) is its value in fixed, else zeros of its
// declared shape.
func Inputs(vals []infer.Value, n int, fixed map[string]*onnx.Tensor, rows map[string]int64) (map[string]*onnx.Tensor, error) {
	rng := rand.New(rand.NewPCG(uint64(n), 17))
	feed := map[string]*onnx.Tensor{}
	for _, v := range vals {
		if t, ok := fixed[v.Name]; ok {
			feed[v.Name] = t
			continue
		}
		if !tokenLevel(v) {
			t, err := zeroInput(v)
			if err != nil {
				return nil, err
			}
			feed[v.Name] = t
			continue
		}
		d := make([]int64, n)
		name := strings.ToLower(v.Name)
		switch {
		case strings.Contains(name, "mask"):
			for i := range d {
				d[i] = 1
			}
		case strings.Contains(name, "position"):
			for i := range d {
				d[i] = int64(i)
			}
		case strings.Contains(name, "type"):
		default:
			bound := int64(100)
			if r, ok := rows[v.Name]; ok && r > 0 {
				bound = min(bound, r)
			}
			for i := range d {
				d[i] = rng.Int64N(bound)
			}
		}
		switch v.DType {
		case onnx.Int64:
			feed[v.Name] = onnx.NewInt64([]int{1, n}, d)
		case onnx.Int32:
			d32 := make([]int32, n)
			for i, x := range d {
				d32[i] = int32(x)
			}
			feed[v.Name] = &onnx.Tensor{DType: onnx.Int32, Shape: []int{1, n}, Data: d32}
		default:
			return nil, fmt.Errorf("benchrun: input %s is %s; the benchmark feeds integer [1, n] inputs only", v.Name, onnx.TypeName(v.DType))
		}
	}
	return feed, nil
}

// tokenLevel reports whether the benchmark fills input v as a [1, n]
// sequence: an input named as token-level (ids, mask, token types,
// positions), or of two or unknown dimensions. Others (a task id, as
// jina-embeddings-v3's scalar task_id) carry no tokens.
func tokenLevel(v infer.Value) bool {
	return infer.InputRole(v.Name) != "" || v.Shape == nil || len(v.Shape) == 2
}

// zeroInput is zeros of input v's declared shape, which must be fixed.
func zeroInput(v infer.Value) (*onnx.Tensor, error) {
	shape := make([]int, len(v.Shape))
	for i, d := range v.Shape {
		if d.Value < 0 || d.Value > 1<<16 {
			return nil, fmt.Errorf("benchrun: input %s carries no tokens and its dimension %d is not a fixed size of at most 65536; give its value with --input %s=VALUE", v.Name, i, v.Name)
		}
		shape[i] = int(d.Value)
	}
	t, err := onnx.NewZeros(v.DType, shape)
	if err != nil {
		return nil, fmt.Errorf("benchrun: input %s: %w", v.Name, err)
	}
	return t, nil
}

// fixedInputs checks the values given for the inputs of m that carry no
// tokens (infer.ReadFixedInputs) and that each other such input can be
// fed zeros; it returns the given values with files by absolute paths,
// for the children, and a note for each input the benchmark feeds so.
func fixedInputs(m *onnxpb.ModelProto, given map[string]string) (map[string]string, []string, error) {
	if _, err := infer.ReadFixedInputs(m, given); err != nil {
		return nil, nil, fmt.Errorf("%w: --input: %w", ErrBadInput, err)
	}
	var abs map[string]string
	var notes []string
	for _, name := range slices.Sorted(maps.Keys(given)) {
		v := given[name]
		if _, err := strconv.ParseFloat(v, 64); err != nil {
			if p, err := filepath.Abs(v); err == nil {
				v = p
			}
		}
		if abs == nil {
			abs = map[string]string{}
		}
		abs[name] = v
		notes = append(notes, fmt.Sprintf("input %s = %s in every run", name, given[name]))
	}
	for _, v := range infer.GraphInputs(m) {
		if _, ok := given[v.Name]; ok {
			continue
		}
		if onnx.IsFloat(v.DType) && (tokenLevel(v) || len(v.Shape) >= 3) {
			return nil, nil, fmt.Errorf("%w: input %s is %s: the benchmark times sequences of tokens, and feeds integer [1, n] inputs only (an audio or image encoder's input is not one)", ErrBadInput, v.Name, onnx.TypeName(v.DType))
		}
		if tokenLevel(v) {
			continue
		}
		if _, err := zeroInput(v); err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrBadInput, err)
		}
		notes = append(notes, fmt.Sprintf("input %s carries no tokens: zeros in every run (--input %s=VALUE sets it)", v.Name, v.Name))
	}
	return abs, notes, nil
}

// declaredLength is the sequence length the model's token-level inputs
// declare as a fixed size ([batch, 8]), 0 when it is free.
func declaredLength(m *onnxpb.ModelProto) int {
	for _, v := range infer.GraphInputs(m) {
		if tokenLevel(v) && len(v.Shape) == 2 && v.Shape[1].Value > 0 {
			return int(v.Shape[1].Value)
		}
	}
	return 0
}

// ErrBadInput is wrapped by Run's errors for a model the options do not
// fit: a value given for an input (Options.Inputs) that the model does
// not take, an input the benchmark cannot feed, no attention to time, or
// positions that cannot reach the longest length.
var ErrBadInput = errors.New("benchrun: bad input")

// cpuTime is the user + system time of this process, all threads.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// vmHWM reads the peak resident set size of this process (kB).
func vmHWM() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				v, _ := strconv.ParseInt(f[1], 10, 64)
				return v
			}
		}
	}
	return 0
}

// MemAvailable reads MemAvailable from /proc/meminfo, in bytes.
func MemAvailable() (int64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, fmt.Errorf("benchrun: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 2 && fs[0] == "MemAvailable:" {
			v, err := strconv.ParseInt(fs[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("benchrun: /proc/meminfo: %w", err)
			}
			return v * 1024, nil
		}
	}
	return 0, errors.New("benchrun: no MemAvailable in /proc/meminfo")
}

// Options configures Run.
type Options struct {
	ModelPath string             // for the report
	Model     *onnxpb.ModelProto // the original model
	Bench     VariantOptions
	Threads   int // intra-op threads per child (default 2)
	Repeat    int // timed runs per (variant, length), one per round (default 3)
	// Command is the argv that starts a child (ChildEnv set in its
	// environment); default: this executable with no arguments.
	Command []string
	// Progress receives the notes of the preparation and one line per
	// child run (internal/progress: run i/N, elapsed, ETA); nil discards.
	Progress io.Writer
	// TempDir holds the variant models; default a new folder in os.TempDir,
	// removed afterwards.
	TempDir string
	// MemAvailable reports the memory a child may use; default reads
	// /proc/meminfo before each run. A (variant, length) whose predicted
	// peak exceeds MemFraction of it is skipped.
	MemAvailable func() (int64, error)
	MemFraction  float64       // default 0.8
	Timeout      time.Duration // per child; default 20 minutes
	// Weights price the work in the predictions (convert.CostModel.Weights;
	// the zero value: MACs only).
	Weights convert.Weights
	// Fit asks for the cost model's weights fitted to the run's time
	// ratios (Result.Fit).
	Fit bool
	// Inputs are the values of the model's inputs that carry no tokens
	// (jina-embeddings-v3's task_id), by name: a NUMBER or a FILE, as
	// infer.InputValue reads them. Such an input not given is zeros.
	// Every run of every variant is fed the same.
	Inputs map[string]string

	env []string // extra child environment
}

// Run benchmarks the variants of o.Model at every length.
func Run(o Options) (*Result, error) {
	if o.Model == nil {
		return nil, errors.New("benchrun: no model")
	}
	if err := o.setDefaults(); err != nil {
		return nil, err
	}
	logw := o.Progress // notes; the runs are steps of a progress.Reporter
	if logw == nil {
		logw = io.Discard
	}
	// Fail once, clearly, rather than in every child; and hand the
	// children the library this process found, whatever their folder.
	if err := infer.ORTAvailable(); err != nil {
		return nil, err
	}
	if lib, err := infer.LibraryPath(); err == nil {
		o.env = append(o.env, infer.LibraryEnv+"="+lib)
	}
	bo := o.Bench.withDefaults()
	var err error
	if bo.limit, err = convert.ContextLimit(o.Model, o.ModelPath); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadInput, err)
	}
	lengths := append([]int(nil), bo.Lengths...)
	sort.Ints(lengths)
	bo.Lengths = lengths

	// Check the baselines and the cost model before the slow
	// conversions; only the baselines' kinds are kept (the children load
	// them from their files).
	baselines, _, err := LoadBaselines(o.Model, bo.Baselines)
	if err != nil {
		return nil, err
	}
	dims, notes, err := convert.ModelDims(o.Model)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadInput, err) // no attention to time
	}
	inputs, inotes, err := fixedInputs(o.Model, o.Inputs)
	if err != nil {
		return nil, err
	}
	if s := declaredLength(o.Model); s > 0 && (len(lengths) != 1 || lengths[0] != s) {
		return nil, fmt.Errorf("%w: --lengths: the model's inputs declare a sequence length of %d tokens (exported for that length only), so it runs at that length alone", ErrBadInput, s)
	}
	o.Inputs = inputs
	notes = append(notes, inotes...)
	for _, n := range inotes {
		fmt.Fprintf(logw, "bench: %s\n", n)
	}
	if err := bo.costModel(dims, o.Weights, nil).Validate(); err != nil {
		return nil, err
	}
	fmt.Fprintf(logw, "bench: %d layers, hidden %d, %d heads, FFN %s; preparing %d variants\n", dims.Layers, dims.Hidden, dims.Heads, dims.FFNText(), len(bo.Variants))
	prep, err := Variants(o.Model, bo)
	if err != nil {
		return nil, err
	}
	cm := bo.costModel(dims, o.Weights, prep)
	if err := cm.Validate(); err != nil {
		return nil, err
	}
	limit, _ := convert.PositionLimit(o.Model) // a table that cannot be told: no note
	vnotes := append(prep.Notes, baselineNotes(baselines, limit, lengths[len(lengths)-1])...)
	notes = append(notes, vnotes...)
	for _, n := range vnotes {
		fmt.Fprintf(logw, "bench: %s\n", n)
	}
	dir := o.TempDir
	if dir == "" {
		dir, err = os.MkdirTemp("", "linearize-bench-")
		if err != nil {
			return nil, fmt.Errorf("benchrun: %w", err)
		}
		defer os.RemoveAll(dir)
	}
	b, err := newBench(o, cm, bo.Variants, baselines, prep.Models, dir)
	if err != nil {
		return nil, err
	}
	prep.Models = nil // saved; the children load them
	res := b.predicted(&Result{Model: o.ModelPath, Threads: o.Threads, Features: cm.Features, K: cm.K, Repeat: o.Repeat,
		Dims: dims, Notes: notes, Baselines: baselines, Weights: o.Weights})
	steps := progress.New(o.Progress, "bench: run", len(lengths)*o.Repeat*len(b.all))
	for _, n := range lengths {
		res.Runs = append(res.Runs, b.length(n, steps)...)
	}
	res.Summarize()
	if o.Fit {
		fit, err := FitWeights(cm, res)
		if err != nil {
			fmt.Fprintf(logw, "bench: no fit: %v\n", err)
		} else {
			res.Fit = fit
		}
	}
	return res, nil
}

// setDefaults fills in Run's defaults.
func (o *Options) setDefaults() error {
	if o.Threads <= 0 {
		o.Threads = 2
	}
	if o.Repeat <= 0 {
		o.Repeat = 3
	}
	if o.MemAvailable == nil {
		o.MemAvailable = MemAvailable
	}
	if o.MemFraction <= 0 {
		o.MemFraction = 0.8
	}
	if o.Timeout <= 0 {
		o.Timeout = 20 * time.Minute
	}
	if len(o.Command) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("benchrun: %w", err)
		}
		o.Command = []string{exe}
	}
	return nil
}

// baselineNotes says what each baseline is, and that the baselines run as
// given when only the original's position table was extended to longest.
// limit is what the original's position table admits (convert.PositionLimit).
func baselineNotes(baselines []Baseline, limit, longest int) []string {
	var notes []string
	if len(baselines) > 0 && limit > 0 && limit < longest {
		notes = append(notes, fmt.Sprintf("baselines run as given: only the original's position table (%d tokens) was extended; build them from a model with at least %d positions", limit, longest))
	}
	for _, b := range baselines {
		kind := string(b.Kind)
		if kind == "" {
			kind = "unknown attention: priced as the original for memory, nothing predicted"
		}
		notes = append(notes, fmt.Sprintf("baseline %s: %s (%s)", b.Name, b.Path, kind))
	}
	return notes
}

// bench is one benchmark's runs: every variant and baseline by its name,
// with the cost-model form that prices it ("" for a baseline of unknown
// kind) and the file a child loads.
type bench struct {
	o          Options
	cm         convert.CostModel
	variants   []convert.Form
	baselines  []Baseline
	all        []convert.Form
	kind       map[convert.Form]convert.Form
	isBaseline map[convert.Form]bool
	paths      map[convert.Form]string
	// reads is the most tokens a variant's graph runs (convert.ContextLimit
	// of a position table or an attention-bias buffer), 0 for no bound.
	reads map[convert.Form]convert.Limit
}

// newBench saves the variant models in dir and indexes the variants and
// baselines.
func newBench(o Options, cm convert.CostModel, variants []convert.Form, baselines []Baseline, models map[convert.Form]*onnxpb.ModelProto, dir string) (*bench, error) {
	b := &bench{o: o, cm: cm, variants: variants, baselines: baselines, all: append([]convert.Form(nil), variants...),
		kind: map[convert.Form]convert.Form{}, isBaseline: map[convert.Form]bool{}, paths: map[convert.Form]string{},
		reads: map[convert.Form]convert.Limit{}}
	for _, f := range variants {
		if l, err := convert.ContextLimit(models[f], ""); err == nil && (l.Kind == convert.LimitTable || l.Kind == convert.LimitBuffer) {
			b.reads[f] = l
		}
		p := filepath.Join(dir, string(f)+".onnx")
		if err := onnx.Save(models[f], p, onnx.SaveOptions{}); err != nil {
			return nil, err
		}
		b.paths[f], b.kind[f] = p, f
	}
	for _, bl := range baselines {
		f := convert.Form(bl.Name)
		b.all = append(b.all, f)
		b.kind[f], b.isBaseline[f], b.paths[f] = bl.Kind, true, bl.Path
	}
	return b, nil
}

// peakOf is the predicted peak used to skip runs; unknown baselines are
// priced as the original (the worst case).
func (b *bench) peakOf(f convert.Form, n int) int64 {
	if b.kind[f] == "" {
		return b.cm.PeakBytes(convert.Original, n)
	}
	return b.cm.PeakBytes(b.kind[f], n)
}

// predicted fills in res's predicted crossovers, against the original and
// each baseline of known kind.
func (b *bench) predicted(res *Result) *Result {
	res.Crossover = map[convert.Form]int{}
	for _, f := range b.variants {
		res.Crossover[f] = b.cm.Crossover(f)
	}
	if len(b.baselines) == 0 {
		return res
	}
	res.CrossoverVersus = map[string]map[convert.Form]int{}
	for _, bl := range b.baselines {
		if bl.Kind == "" {
			continue
		}
		res.CrossoverVersus[bl.Name] = map[convert.Form]int{}
		for _, f := range b.variants {
			if f != convert.Original {
				res.CrossoverVersus[bl.Name][f] = b.cm.CrossoverOver(bl.Kind, f)
			}
		}
	}
	return res
}

// measurement is the run of f at length n before timing: its predicted
// peak, speedup over the original and over each baseline of known kind.
func (b *bench) measurement(f convert.Form, n int) *Measurement {
	r := &Measurement{Variant: f, Length: n, Status: "ok", PredictedPeakMB: float64(b.peakOf(f, n)) / (1 << 20), Baseline: b.isBaseline[f]}
	if b.kind[f] == "" {
		return r
	}
	r.PredictedSpeedup = b.cm.Speedup(b.kind[f], n)
	for _, bl := range b.baselines {
		if convert.Form(bl.Name) == f || bl.Kind == "" {
			continue
		}
		if r.Versus == nil {
			r.Versus = map[string]Ratio{}
		}
		r.Versus[bl.Name] = Ratio{PredictedSpeedup: b.cm.SpeedupOver(bl.Kind, b.kind[f], n)}
	}
	return r
}

// length runs every variant and baseline at length n, Repeat rounds, and
// returns their measurements (in the order of b.all).
func (b *bench) length(n int, steps *progress.Reporter) []Measurement {
	runs := make([]*Measurement, len(b.all))
	for i, f := range b.all {
		runs[i] = b.measurement(f, n)
	}
	for round := 0; round < b.o.Repeat; round++ {
		for i := range runs {
			// Rotate the order every round so that no variant always
			// runs first after a cooler or hotter predecessor.
			b.time(runs[(i+round)%len(runs)], round, steps)
		}
	}
	out := make([]Measurement, len(runs))
	for i, r := range runs {
		if r.Status == "ok" {
			r.MedianMS = median(r.TimesMS)
			r.MedianCPUMS = median(r.CPUTimesMS)
		}
		out[i] = *r
	}
	return out
}

// time runs round round of r in a child, unless r was skipped or failed
// before or its predicted peak does not fit in the available memory.
func (b *bench) time(r *Measurement, round int, steps *progress.Reporter) {
	o, f, n := b.o, r.Variant, r.Length
	if r.Status != "ok" {
		return
	}
	if l := b.reads[f]; l.Tokens > 0 && n > l.Tokens {
		r.Status = "skipped"
		r.Reason = fmt.Sprintf("the graph reads at most %s", l)
		steps.Step("%-9s n=%-6d skipped: %s", f, n, r.Reason)
		steps.Drop(o.Repeat - round - 1)
		return
	}
	avail, err := o.MemAvailable()
	if err == nil && float64(b.peakOf(f, n)) > o.MemFraction*float64(avail) {
		r.Status = "skipped"
		r.Reason = fmt.Sprintf("predicted peak %s exceeds %.0f%% of available memory %s", gib(b.peakOf(f, n)), 100*o.MemFraction, gib(avail))
		steps.Step("%-9s n=%-6d skipped: %s", f, n, r.Reason)
		steps.Drop(o.Repeat - round - 1)
		return
	}
	cr, rss, err := o.child(ChildSpec{Model: b.paths[f], Length: n, Threads: o.Threads, Runs: 1, Warmup: 2, Inputs: o.Inputs})
	if err != nil {
		r.Status = "failed"
		r.Reason = err.Error()
		steps.Step("%-9s n=%-6d round %d/%d failed: %v", f, n, round+1, o.Repeat, err)
		steps.Drop(o.Repeat - round - 1)
		return
	}
	r.TimesMS = append(r.TimesMS, cr.TimesMS...)
	r.CPUTimesMS = append(r.CPUTimesMS, cr.CPUTimesMS...)
	r.PeakRSSMB = max(r.PeakRSSMB, float64(rss)/1024)
	r.LoadPeakRSSMB = max(r.LoadPeakRSSMB, float64(cr.LoadPeakKB)/1024)
	steps.Step("%-9s n=%-6d round %d/%d: %.1f ms (cpu %.1f ms), peak %.0f MiB", f, n, round+1, o.Repeat, cr.TimesMS[0], cr.CPUTimesMS[0], float64(rss)/1024)
}

// child runs one child process and returns its result and peak RSS (kB).
func (o Options) child(spec ChildSpec) (*ChildResult, int64, error) {
	js, _ := json.Marshal(spec)
	ctx, cancel := context.WithTimeout(context.Background(), o.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, o.Command[0], o.Command[1:]...)
	cmd.Env = append(append(os.Environ(), o.env...), ChildEnv+"="+string(js))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var rss int64
	if cmd.ProcessState != nil {
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			rss = ru.Maxrss // kB on Linux
		}
	}
	var cr ChildResult
	if jerr := json.Unmarshal(lastLine(stdout.Bytes()), &cr); jerr != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 300 {
			msg = "..." + msg[len(msg)-300:]
		}
		if err == nil {
			err = jerr
		}
		if ctx.Err() != nil {
			err = fmt.Errorf("timed out after %v", o.Timeout)
		}
		if ee, ok := err.(*exec.ExitError); ok && ee.ProcessState != nil {
			if ws, ok := ee.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				err = fmt.Errorf("child killed by %v (out of memory?)", ws.Signal())
			}
		}
		if msg != "" {
			return nil, rss, fmt.Errorf("%v: %s", err, msg)
		}
		return nil, rss, err
	}
	if cr.Error != "" {
		return nil, rss, errors.New(cr.Error)
	}
	if len(cr.TimesMS) == 0 {
		return nil, rss, errors.New("child reported no timings")
	}
	if cr.Reset {
		return &cr, cr.RunPeakKB, nil
	}
	return &cr, max(rss, cr.RunPeakKB), nil
}

func lastLine(b []byte) []byte {
	b = bytes.TrimSpace(b)
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		return b[i+1:]
	}
	return b
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func gib(b int64) string {
	return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
}

// WriteTable prints the result as a text table.
func WriteTable(w io.Writer, r *Result) {
	fmt.Fprintf(w, "model %s: %d layers, hidden %d, %d heads, FFN %s; threads %d, M = %d, k = %d, %d runs each (median)",
		r.Model, r.Dims.Layers, r.Dims.Hidden, r.Dims.Heads, r.Dims.FFNText(), r.Threads, r.Features, r.K, r.Repeat)
	if r.Weights != (convert.Weights{}) {
		fmt.Fprintf(w, "; predicted with cost weights %v", r.Weights)
	} else {
		fmt.Fprint(w, "; predicted from MACs only")
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%-7s %-12s %-8s %10s %10s %9s %9s %10s %9s %9s %9s\n", "length", "variant", "status", "median ms", "cpu ms", "peak MiB", "speedup", "predicted", "meas/pred", "cpu spdup", "mem ratio")
	for _, run := range r.Runs {
		if run.Status != "ok" {
			fmt.Fprintf(w, "%-7d %-12s %-8s %10s %10s %9s %9s %9.2fx %9s %9s %9s  %s\n", run.Length, run.Variant, run.Status, "-", "-", "-", "-", run.PredictedSpeedup, "-", "-", "-", run.Reason)
			continue
		}
		sp, ratio, mem, cpu := "-", "-", "-", "-"
		if run.CPUSpeedup > 0 {
			cpu = fmt.Sprintf("%.2fx", run.CPUSpeedup)
		}
		if run.Speedup > 0 {
			sp = fmt.Sprintf("%.2fx", run.Speedup)
			ratio = fmt.Sprintf("%.2f", run.Speedup/run.PredictedSpeedup)
		}
		if run.MemoryRatio > 0 {
			mem = fmt.Sprintf("%.3f", run.MemoryRatio)
		}
		fmt.Fprintf(w, "%-7d %-12s %-8s %10.1f %10.1f %9.0f %9s %9.2fx %9s %9s %9s\n", run.Length, run.Variant, run.Status, run.MedianMS, run.MedianCPUMS, run.PeakRSSMB, sp, run.PredictedSpeedup, ratio, cpu, mem)
	}
	var forms []string
	for f := range r.Crossover {
		if f != convert.Original {
			forms = append(forms, string(f))
		}
	}
	sort.Strings(forms)
	for _, f := range forms {
		pred := r.Crossover[convert.Form(f)]
		fmt.Fprintf(w, "%s crossover: predicted n = %d, %s\n", f, pred, r.MeasuredText(convert.Form(f), convert.Original, r.MeasuredCrossover[convert.Form(f)], pred))
	}
	for _, run := range r.Runs {
		if run.Variant == convert.Original && run.Status == "skipped" {
			fmt.Fprintf(w, "original skipped at n = %d: %s\n", run.Length, run.Reason)
		}
	}
	writeVersus(w, r)
}

// writeVersus prints, for each baseline, every other run's ratios against
// it and the crossovers.
func writeVersus(w io.Writer, r *Result) {
	for _, b := range r.Baselines {
		kind := "unknown kind, nothing predicted"
		if b.Kind != "" {
			kind = "priced as " + string(b.Kind)
		}
		fmt.Fprintf(w, "\nversus baseline %s (%s; %s):\n", b.Name, b.Path, kind)
		fmt.Fprintf(w, "%-7s %-12s %9s %10s %9s %9s %9s\n", "length", "variant", "speedup", "predicted", "meas/pred", "cpu spdup", "mem ratio")
		for _, run := range r.Runs {
			if run.Variant == convert.Form(b.Name) {
				continue
			}
			q, ok := run.Versus[b.Name]
			if !ok || q.Speedup == 0 {
				continue
			}
			pred, ratio, cpu := "-", "-", "-"
			if q.PredictedSpeedup > 0 {
				pred = fmt.Sprintf("%.2fx", q.PredictedSpeedup)
				ratio = fmt.Sprintf("%.2f", q.Speedup/q.PredictedSpeedup)
			}
			if q.CPUSpeedup > 0 {
				cpu = fmt.Sprintf("%.2fx", q.CPUSpeedup)
			}
			mem := "-"
			if q.MemoryRatio > 0 {
				mem = fmt.Sprintf("%.3f", q.MemoryRatio)
			}
			fmt.Fprintf(w, "%-7d %-12s %8.2fx %10s %9s %9s %9s\n", run.Length, run.Variant, q.Speedup, pred, ratio, cpu, mem)
		}
		measured := r.MeasuredCrossoverVersus[b.Name]
		var forms []string
		for f := range measured {
			forms = append(forms, string(f))
		}
		sort.Strings(forms)
		for _, f := range forms {
			pred := "-"
			c, ok := r.CrossoverVersus[b.Name][convert.Form(f)]
			if ok {
				pred = strconv.Itoa(c)
				if c < 0 {
					pred = "never"
				}
			}
			fmt.Fprintf(w, "%s crossover versus %s: predicted n = %s, %s\n", f, b.Name, pred, r.MeasuredText(convert.Form(f), convert.Form(b.Name), measured[convert.Form(f)], c))
		}
		for _, run := range r.Runs {
			if run.Variant == convert.Form(b.Name) && run.Status != "ok" {
				fmt.Fprintf(w, "%s %s at n = %d: %s\n", b.Name, run.Status, run.Length, run.Reason)
			}
		}
	}
	if len(r.Baselines) > 0 && r.Weights == (convert.Weights{}) {
		fmt.Fprintln(w, "predictions count MACs only, so the fused and flash baselines are predicted as the original")
	}
	writeFit(w, r)
}

// MeasuredText writes the measured crossover meas of form f against the
// reference variant ref (Result.MeasuredCrossover) beside the predicted
// one pred: "measured n = 651 (predicted/measured 0.99)". When f was
// already faster at the shortest length both ran, the crossover is only
// bounded: "measured n ≤ 384 (faster at every measured length;
// predicted/measured ≥ 1.10)". When every run has 3 timed repeats or more,
// the band of Band follows, with whether pred lies within 30 % of it:
// "; 90 % of resampled runs: 481 to 695, the prediction within 30 % of it".
func (r *Result) MeasuredText(f, ref convert.Form, meas, pred int) string {
	s, _, _ := r.Measured(f, ref, meas, pred)
	return s
}

// Measured is MeasuredText that also returns the band it printed (ok false
// when there is none), for callers that tally the 30 % verdicts.
func (r *Result) Measured(f, ref convert.Form, meas, pred int) (text string, b Band, ok bool) {
	s := r.measuredPoint(f, ref, meas, pred)
	b, ok = r.Band(f, ref)
	if !ok {
		return s, b, false
	}
	s += "; " + b.String()
	if pred > 0 {
		if b.Within(pred, 1.3) {
			s += ", the prediction within 30 % of it"
		} else {
			s += ", the prediction not within 30 % of it"
		}
	}
	return s, b, true
}

// measuredPoint is MeasuredText without the band.
func (r *Result) measuredPoint(f, ref convert.Form, meas, pred int) string {
	switch meas {
	case 0:
		return "measured n = not within the measured lengths"
	case -1:
		return "measured n = unknown (" + string(ref) + " did not run)"
	}
	refRuns, shortest := r.okRuns(ref), 0
	for _, run := range r.sorted(f) {
		if run.Status == "ok" && run.MedianMS > 0 && refRuns[run.Length] != nil {
			shortest = run.Length
			break
		}
	}
	if meas == shortest && refRuns[shortest].MedianMS > r.okRuns(f)[shortest].MedianMS {
		s := fmt.Sprintf("measured n ≤ %d (faster at every measured length", meas)
		if pred > 0 {
			s += fmt.Sprintf("; predicted/measured ≥ %.2f", float64(pred)/float64(meas))
		}
		return s + ")"
	}
	s := fmt.Sprintf("measured n = %d", meas)
	if pred > 0 {
		s += fmt.Sprintf(" (predicted/measured %.2f)", float64(pred)/float64(meas))
	}
	return s
}

// writeFit prints the weights fitted to the run and the crossovers they
// predict beside the measured ones.
func writeFit(w io.Writer, r *Result) {
	if r.Fit == nil {
		return
	}
	f := r.Fit
	fmt.Fprintf(w, "\ncost weights fitted to this run (%d time ratios, RMS error %.1f%%, largest %.1f%%): %v\n", f.Pairs, 100*f.RMS, 100*f.Max, f.Weights)
	fmt.Fprintln(w, "(use them with --cost-weights on inspect --cost and bench)")
	r.FitCrossovers(f, func(form, base convert.Form, pred, meas int) {
		fmt.Fprintf(w, "%s crossover versus %s with the fitted weights: predicted n = %d, %s\n", form, base, pred, r.MeasuredText(form, base, meas, pred))
	})
}

// FitCrossovers calls each with every crossover fit predicts, against the
// original and then against each baseline (forms in name order), and the
// one r measured. writeFit and linlab fit-cost print them.
func (r *Result) FitCrossovers(fit *Fit, each func(form, base convert.Form, pred, meas int)) {
	line := func(base convert.Form, pred, meas map[convert.Form]int) {
		var forms []string
		for form := range pred {
			forms = append(forms, string(form))
		}
		sort.Strings(forms)
		for _, form := range forms {
			each(convert.Form(form), base, pred[convert.Form(form)], meas[convert.Form(form)])
		}
	}
	line(convert.Original, fit.Crossover, r.MeasuredCrossover)
	for _, b := range r.Baselines {
		if pred, ok := fit.CrossoverVersus[b.Name]; ok {
			line(convert.Form(b.Name), pred, r.MeasuredCrossoverVersus[b.Name])
		}
	}
}
