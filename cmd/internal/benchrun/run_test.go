package benchrun

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// TestMain lets the test binary act as a benchmark child: Run re-executes
// it with ChildEnv set.
func TestMain(m *testing.M) {
	if ChildMain(os.Stdout) {
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func tinyModel(t *testing.T) string {
	t.Helper()
	if err := infer.ORTAvailable(); err != nil {
		t.Skipf("onnxruntime not available (install with scripts/setup.sh): %v", err)
	}
	return filepath.Join("..", "..", "..", "testdata", "bert-tiny.onnx")
}

// TestRunTinyModel runs the whole benchmark on the bundled tiny model at
// two short lengths (one beyond its 128-row position table, so the
// extension path runs too), with a fake memory limit that lets the linear
// forms run at the longer length but not the original.
func TestRunTinyModel(t *testing.T) {
	path := tinyModel(t)
	m, err := onnx.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	dims, _, err := convert.ModelDims(m)
	if err != nil {
		t.Fatal(err)
	}
	cm := convert.CostModel{Dims: dims, Features: 32, K: 32}
	// Between the original's and the Performer's predicted peak at 192.
	limit := (cm.PeakBytes(convert.Original, 192) + cm.PeakBytes(convert.Performer, 192)) / 2
	if cm.PeakBytes(convert.Original, 64) > limit || cm.PeakBytes(convert.Linformer, 192) > limit {
		t.Fatalf("test set-up: limits do not separate the forms")
	}
	var progress strings.Builder
	res, err := Run(Options{
		ModelPath:    path,
		Model:        m,
		Bench:        VariantOptions{Lengths: []int{192, 64}, Sizes: convert.Sizes{"features": 32, "k": 32, "block": 16, "segments": 16}},
		Threads:      1,
		Repeat:       2,
		Command:      []string{os.Args[0], "-test.run=^$"},
		Progress:     &progress,
		MemAvailable: func() (int64, error) { return int64(float64(limit) / 0.8), nil },
	})
	if err != nil {
		t.Fatalf("%v\nprogress:\n%s", err, progress.String())
	}
	if len(res.Runs) != 8 { // 4 variants (original, performer, linformer, local-pooled) × 2 lengths
		t.Fatalf("%d runs, want 8", len(res.Runs))
	}
	for _, r := range res.Runs {
		skipped := r.Variant == convert.Original && r.Length == 192
		switch {
		case skipped:
			if r.Status != "skipped" || !strings.Contains(r.Reason, "available memory") {
				t.Errorf("original at 192: status %s (%s), want skipped for memory", r.Status, r.Reason)
			}
		case r.Status != "ok":
			t.Errorf("%s at %d: %s: %s", r.Variant, r.Length, r.Status, r.Reason)
		default:
			if r.MedianMS <= 0 || len(r.TimesMS) != 2 || r.PeakRSSMB < 5 || r.PredictedSpeedup <= 0 {
				t.Errorf("%s at %d: implausible %+v", r.Variant, r.Length, r)
			}
			if r.Length == 64 && (r.Speedup <= 0 || r.MemoryRatio <= 0) {
				t.Errorf("%s at 64: no ratio vs original: %+v", r.Variant, r)
			}
		}
	}
	if res.Runs[0].Length != 64 {
		t.Errorf("lengths not run in increasing order")
	}
	if !strings.Contains(progress.String(), "extended position table") || !strings.Contains(progress.String(), "skipped") {
		t.Errorf("progress lacks the extension or skip lines:\n%s", progress.String())
	}
	// The JSON has issue 7's fields.
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var generic map[string]any
	json.Unmarshal(b, &generic)
	runs, _ := generic["runs"].([]any)
	if generic["model"] == nil || generic["threads"] == nil || len(runs) != 8 {
		t.Fatalf("JSON lacks model/threads/runs: %s", b)
	}
	for _, k := range []string{"variant", "length", "status", "median_ms", "peak_rss_mb", "predicted_speedup"} {
		if _, ok := runs[0].(map[string]any)[k]; !ok {
			t.Errorf("run lacks %q: %v", k, runs[0])
		}
	}
	var table strings.Builder
	WriteTable(&table, res)
	if !strings.Contains(table.String(), "original skipped at n = 192") {
		t.Errorf("table does not say the original was skipped:\n%s", table.String())
	}
	png := filepath.Join(t.TempDir(), "bench.png")
	if err := Plot(res, png); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(png); err != nil || len(data) < 1000 || string(data[1:4]) != "PNG" {
		t.Errorf("plot is not a PNG (%d bytes, %v)", len(data), err)
	}
}

// TestChildFailureIsReported: a child that cannot load its model makes the
// run "failed" with the reason, not an aborted benchmark.
func TestChildFailureIsReported(t *testing.T) {
	tinyModel(t)
	o := Options{Command: []string{os.Args[0], "-test.run=^$"}, Timeout: 60e9}
	_, _, err := o.child(ChildSpec{Model: filepath.Join(t.TempDir(), "missing.onnx"), Length: 8, Threads: 1, Runs: 1})
	if err == nil || !strings.Contains(err.Error(), "missing.onnx") {
		t.Fatalf("error %v, want one naming the missing model", err)
	}
}

func TestSummarizeCrossover(t *testing.T) {
	r := &Result{Runs: []Measurement{
		{Variant: convert.Original, Length: 512, Status: "ok", MedianMS: 10, PeakRSSMB: 100},
		{Variant: convert.Performer, Length: 512, Status: "ok", MedianMS: 12, PeakRSSMB: 90},
		{Variant: convert.Original, Length: 1024, Status: "ok", MedianMS: 30, PeakRSSMB: 300},
		{Variant: convert.Performer, Length: 1024, Status: "ok", MedianMS: 20, PeakRSSMB: 150},
		{Variant: convert.Original, Length: 2048, Status: "skipped"},
		{Variant: convert.Performer, Length: 2048, Status: "ok", MedianMS: 40, PeakRSSMB: 300},
		{Variant: convert.Linformer, Length: 512, Status: "ok", MedianMS: 5},
		{Variant: convert.Linformer, Length: 1024, Status: "ok", MedianMS: 31},
	}}
	r.Summarize()
	if got := r.Runs[3].Speedup; got != 1.5 {
		t.Errorf("speedup %v, want 1.5", got)
	}
	if got := r.Runs[3].MemoryRatio; got != 0.5 {
		t.Errorf("memory ratio %v, want 0.5", got)
	}
	if r.Runs[5].Speedup != 0 {
		t.Error("speedup set where the original did not run")
	}
	// Speedup 10/12 at 512 and 30/20 at 1024: log speedup linear in log n
	// crosses 0 at 512·2^t, t = ln(1.2) / (ln(1.5) + ln(1.2)), n ≈ 634.8.
	if r.MeasuredCrossover[convert.Performer] != 635 {
		t.Errorf("performer crossover %d, want 635", r.MeasuredCrossover[convert.Performer])
	}
	// Faster at 512 but slower at 1024: no crossover within the lengths.
	if r.MeasuredCrossover[convert.Linformer] != 0 {
		t.Errorf("linformer crossover %d, want 0", r.MeasuredCrossover[convert.Linformer])
	}
}

// TestRunWithBaseline runs the original and Performer with the original
// itself given as a baseline: the baseline is timed in the same run, every
// other run has its ratios against it, and the table and plot show it.
func TestRunWithBaseline(t *testing.T) {
	path := tinyModel(t)
	m, err := onnx.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	var progress strings.Builder
	res, err := Run(Options{
		ModelPath: path,
		Model:     m,
		Bench: VariantOptions{Variants: []convert.Form{convert.Original, convert.Performer}, Lengths: []int{32}, Sizes: convert.Sizes{"features": 16, "k": 16},
			Baselines: []Baseline{{Name: "flash", Path: path}}},
		Threads:  1,
		Repeat:   1,
		Weights:  convert.Weights{Pass: 4},
		Command:  []string{os.Args[0], "-test.run=^$"},
		Progress: &progress,
	})
	if err != nil {
		t.Fatalf("%v\nprogress:\n%s", err, progress.String())
	}
	if len(res.Runs) != 3 || len(res.Baselines) != 1 || res.Baselines[0].Kind != convert.Original {
		t.Fatalf("runs %+v, baselines %+v", res.Runs, res.Baselines)
	}
	var self, perf *Measurement
	for i := range res.Runs {
		switch res.Runs[i].Variant {
		case "flash":
			self = &res.Runs[i]
		case convert.Performer:
			perf = &res.Runs[i]
		}
	}
	if self == nil || perf == nil || self.Status != "ok" || !self.Baseline || self.MedianMS <= 0 || self.PeakRSSMB <= 0 {
		t.Fatalf("baseline run %+v", self)
	}
	q, ok := perf.Versus["flash"]
	if !ok || q.Speedup <= 0 || q.MemoryRatio <= 0 {
		t.Fatalf("performer vs self: %+v", perf.Versus)
	}
	if want := self.MedianMS / perf.MedianMS; q.Speedup != want {
		t.Errorf("speedup vs self %v, want %v", q.Speedup, want)
	}
	// Named like a cost-model form, it is still a baseline, priced by
	// what it holds: the original, so the prediction against
	// it is the prediction against the original.
	if q.PredictedSpeedup != perf.PredictedSpeedup || q.PredictedSpeedup <= 0 {
		t.Errorf("predicted vs self %v, vs original %v", q.PredictedSpeedup, perf.PredictedSpeedup)
	}
	if res.CrossoverVersus["flash"][convert.Performer] != res.Crossover[convert.Performer] {
		t.Errorf("crossover vs self %v, vs original %v", res.CrossoverVersus, res.Crossover)
	}
	if _, ok := res.MeasuredCrossoverVersus["flash"][convert.Performer]; !ok {
		t.Errorf("no measured crossover vs self: %v", res.MeasuredCrossoverVersus)
	}
	var table strings.Builder
	WriteTable(&table, res)
	for _, want := range []string{"versus baseline flash", "performer crossover versus flash", "cost weights original=1,fused=1,flash=1,linear=1,pass=4,exp=0,fused-token=0,flash-token=0,token=0,layer=0"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	if err := Plot(res, filepath.Join(t.TempDir(), "b.png")); err != nil {
		t.Fatal(err)
	}
	// A bad baseline stops the run before anything is converted.
	_, err = Run(Options{ModelPath: path, Model: m, Command: []string{os.Args[0], "-test.run=^$"},
		Bench: VariantOptions{Lengths: []int{32}, Baselines: []Baseline{{Name: "gone", Path: filepath.Join(t.TempDir(), "gone.onnx")}}}})
	if !errors.Is(err, ErrBadBaseline) || !strings.Contains(err.Error(), "baseline gone") {
		t.Errorf("missing baseline: %v", err)
	}
}

// flashModel writes a tiny model of onnxruntime's flash form: token
// embeddings fed to one com.microsoft MultiHeadAttention without mask.
func flashModel(t *testing.T, dir string) string {
	t.Helper()
	const vocab, hidden = 100, 8
	emb := make([]float32, vocab*hidden)
	for i := range emb {
		emb[i] = float32(i%7) / 7
	}
	tp, err := onnx.EncodeTensor("emb", onnx.NewFloat([]int{vocab, hidden}, emb))
	if err != nil {
		t.Fatal(err)
	}
	seq := []onnx.Dim{{Value: 1}, {Value: -1, Param: "seq"}}
	m := &onnxpb.ModelProto{IrVersion: proto.Int64(8),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(17)}, {Domain: proto.String("com.microsoft"), Version: proto.Int64(1)}},
		Graph: &onnxpb.GraphProto{Name: proto.String("flash"),
			Input:       []*onnxpb.ValueInfoProto{onnx.MakeValueInfo("input_ids", onnx.Int64, seq)},
			Output:      []*onnxpb.ValueInfoProto{onnx.MakeValueInfo("out", onnx.Float, nil)},
			Initializer: []*onnxpb.TensorProto{tp},
			Node: []*onnxpb.NodeProto{
				{Name: proto.String("embed"), OpType: proto.String("Gather"), Input: []string{"emb", "input_ids"}, Output: []string{"x"}},
				{Name: proto.String("mha"), OpType: proto.String("MultiHeadAttention"), Domain: proto.String("com.microsoft"),
					Input: []string{"x", "x", "x"}, Output: []string{"out"},
					Attribute: []*onnxpb.AttributeProto{{Name: proto.String("num_heads"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(2)}}},
			}}}
	p := filepath.Join(dir, "flash.onnx")
	if err := onnx.Save(m, p, onnx.SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRunFlashBaseline: a baseline holding MultiHeadAttention without a
// mask is priced as flash, and named "flash" it is still a baseline. The
// linformer's predicted speedup over it is checked against the ratio of
// the two runs' own predicted speedups over the original at the same
// length (Work(flash)/Work(linformer) = (W₀/W_lin)/(W₀/W_flash)): pricing
// the baseline as another kind, or at another length, fails it.
func TestRunFlashBaseline(t *testing.T) {
	path := tinyModel(t)
	m, err := onnx.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	flash := flashModel(t, t.TempDir())
	res, err := Run(Options{ModelPath: path, Model: m, Threads: 1, Repeat: 1, Weights: convert.Weights{Pass: 4},
		Bench: VariantOptions{Variants: []convert.Form{convert.Linformer}, Lengths: []int{32, 96}, Sizes: convert.Sizes{"k": 16},
			Baselines: []Baseline{{Name: "flash", Path: flash}}},
		Command: []string{os.Args[0], "-test.run=^$"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Baselines) != 1 || res.Baselines[0].Kind != convert.Flash || len(res.Runs) != 4 {
		t.Fatalf("baselines %+v, runs %+v", res.Baselines, res.Runs)
	}
	type pair struct{ lin, flash *Measurement }
	at := map[int]*pair{}
	for i := range res.Runs {
		r := &res.Runs[i]
		if at[r.Length] == nil {
			at[r.Length] = &pair{}
		}
		switch r.Variant {
		case "flash":
			if !r.Baseline || r.Status != "ok" {
				t.Errorf("flash run %+v", r)
			}
			at[r.Length].flash = r
		case convert.Linformer:
			at[r.Length].lin = r
		}
	}
	var ratios []float64
	for _, n := range []int{32, 96} {
		p := at[n]
		if p == nil || p.lin == nil || p.flash == nil {
			t.Fatalf("n=%d: runs %+v", n, res.Runs)
		}
		// Flash must be priced unlike the original, or a baseline priced
		// as the original would pass.
		if p.flash.PredictedSpeedup <= 0 || math.Abs(p.flash.PredictedSpeedup-1) < 1e-3 {
			t.Fatalf("n=%d: flash's predicted speedup over the original %v: the check below would not tell the kinds apart", n, p.flash.PredictedSpeedup)
		}
		want := p.lin.PredictedSpeedup / p.flash.PredictedSpeedup
		q := p.lin.Versus["flash"]
		if math.Abs(q.PredictedSpeedup-want) > 1e-12*want || q.Speedup <= 0 {
			t.Errorf("n=%d: linformer vs flash %+v, want predicted %v (= %v / %v)", n, q, want, p.lin.PredictedSpeedup, p.flash.PredictedSpeedup)
		}
		ratios = append(ratios, want)
	}
	if math.Abs(ratios[0]-ratios[1]) < 1e-3*ratios[1] {
		t.Errorf("predicted speedups over flash %v do not depend on the length: the check would not catch another length", ratios)
	}
}

// TestInputsCarryingNoTokens: the benchmark fills the token-level inputs
// as [1, n] sequences, an input that carries no tokens (a scalar task id)
// with its given value, else with zeros of its declared shape, and
// refuses one whose shape it cannot know, naming --input.
func TestInputsCarryingNoTokens(t *testing.T) {
	seq := []onnx.Dim{{Value: -1, Param: "batch"}, {Value: -1, Param: "seq"}}
	vals := []infer.Value{
		{Name: "input_ids", DType: onnx.Int64, Shape: seq},
		{Name: "attention_mask", DType: onnx.Int64, Shape: seq},
		{Name: "task_id", DType: onnx.Int64, Shape: []onnx.Dim{}},
		{Name: "lang", DType: onnx.Float, Shape: []onnx.Dim{{Value: 1}}},
	}
	feed, err := Inputs(vals, 7, map[string]*onnx.Tensor{"task_id": onnx.NewInt64(nil, []int64{4})}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][]int{"input_ids": {1, 7}, "attention_mask": {1, 7}, "task_id": {}, "lang": {1}} {
		if got := feed[name]; got == nil || len(got.Shape) != len(want) || (len(want) > 0 && got.Shape[0] != want[0]) || (len(want) > 1 && got.Shape[1] != want[1]) {
			t.Errorf("%s: %v, want shape %v", name, got, want)
		}
	}
	if v := feed["task_id"].Int64s(); len(v) != 1 || v[0] != 4 {
		t.Errorf("task_id %v, want the given 4", v)
	}
	if v := feed["lang"].Floats(); len(v) != 1 || v[0] != 0 {
		t.Errorf("lang %v, want zeros", v)
	}
	feed, err = Inputs(vals[:3], 7, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v := feed["task_id"].Int64s(); len(v) != 1 || v[0] != 0 {
		t.Errorf("task_id not given: %v, want 0", v)
	}
	open := []infer.Value{{Name: "task_id", DType: onnx.Int64, Shape: []onnx.Dim{{Value: -1, Param: "k"}}}}
	if _, err := Inputs(open, 7, nil, nil); err == nil || !strings.Contains(err.Error(), "--input task_id=VALUE") {
		t.Errorf("a task input of unknown size: %v, want an error naming --input task_id=VALUE", err)
	}
}
