package benchrun

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/models"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
	"google.golang.org/protobuf/proto"
)

func TestParseBaseline(t *testing.T) {
	b, err := ParseBaseline(" fused = out/bench/fused.onnx ")
	if err != nil || b.Name != "fused" || b.Path != "out/bench/fused.onnx" {
		t.Fatalf("got %+v, %v", b, err)
	}
	// A path may hold '='; only the first one splits.
	if b, err := ParseBaseline("x=a=b.onnx"); err != nil || b.Path != "a=b.onnx" {
		t.Errorf("got %+v, %v", b, err)
	}
	for _, bad := range []string{"", "fused", "=f.onnx", "fused=", "a b=f.onnx", "performer=f.onnx", "original=f.onnx"} {
		_, err := ParseBaseline(bad)
		if err == nil || !errors.Is(err, ErrBadBaseline) || !strings.HasPrefix(err.Error(), "convert: baseline ") {
			t.Errorf("%q: error %v, want a convert: baseline error wrapping ErrBadBaseline", bad, err)
		}
	}
}

// benchModel writes a tiny BERT and returns it and its path.
func benchModel(t *testing.T, dir, name string) (*onnxpb.ModelProto, string) {
	t.Helper()
	cfg := models.TinyConfig()
	cfg.Layers = 1
	m, err := models.BERT(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := onnx.Save(m, p, onnx.SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	return m, p
}

func TestLoadBaselines(t *testing.T) {
	dir := t.TempDir()
	orig, path := benchModel(t, dir, "orig.onnx")
	got, ms, err := LoadBaselines(orig, []Baseline{{Name: "self", Path: path}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(ms) != 1 || got[0].Kind != convert.Original || ms[0] == nil {
		t.Fatalf("got %+v, want the original priced as original", got)
	}
	// A baseline that reads fewer inputs (no mask) is accepted.
	noMask := proto.Clone(orig).(*onnxpb.ModelProto)
	var kept []*onnxpb.ValueInfoProto
	for _, in := range noMask.Graph.Input {
		if !strings.Contains(in.GetName(), "mask") {
			kept = append(kept, in)
		}
	}
	if len(kept) == len(noMask.Graph.Input) {
		t.Fatal("test set-up: the tiny model has no mask input")
	}
	noMask.Graph.Input = kept
	// Rename the mask's consumers' input to a constant so the graph stays
	// valid: feed it from an initializer of ones.
	var maskName string
	for _, in := range orig.Graph.Input {
		if strings.Contains(in.GetName(), "mask") {
			maskName = in.GetName()
		}
	}
	ones := onnx.NewInt64([]int{1, 1}, []int64{1})
	tp, err := onnx.EncodeTensor(maskName, ones)
	if err != nil {
		t.Fatal(err)
	}
	noMask.Graph.Initializer = append(noMask.Graph.Initializer, tp)
	noMaskPath := filepath.Join(dir, "nomask.onnx")
	if err := onnx.Save(noMask, noMaskPath, onnx.SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadBaselines(orig, []Baseline{{Name: "nomask", Path: noMaskPath}}); err != nil {
		t.Errorf("a baseline without the mask input: %v", err)
	}

	// Inputs that differ: a renamed input, another element type.
	renamed := proto.Clone(orig).(*onnxpb.ModelProto)
	old := renamed.Graph.Input[0].GetName()
	renamed.Graph.Input[0].Name = proto.String("tokens")
	for _, n := range renamed.Graph.Node {
		for i, in := range n.Input {
			if in == old {
				n.Input[i] = "tokens"
			}
		}
	}
	renamedPath := filepath.Join(dir, "renamed.onnx")
	if err := onnx.Save(renamed, renamedPath, onnx.SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	retyped := proto.Clone(orig).(*onnxpb.ModelProto)
	retyped.Graph.Input[0].Type.GetTensorType().ElemType = proto.Int32(int32(onnx.Int32))
	retypedPath := filepath.Join(dir, "retyped.onnx")
	// Saved as bytes: the graph no longer type-checks, which the check
	// must report before anything runs it.
	if err := onnx.Save(retyped, retypedPath, onnx.SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		bs   []Baseline
		want string
	}{
		{"missing", []Baseline{{Name: "fused", Path: filepath.Join(dir, "absent.onnx")}}, "baseline fused: stat"},
		{"directory", []Baseline{{Name: "fused", Path: dir}}, "is a directory"},
		{"not-onnx", []Baseline{{Name: "junk", Path: writeJunk(t, dir)}}, "baseline junk"},
		{"renamed", []Baseline{{Name: "r", Path: renamedPath}}, `input "tokens" is not an input of the original`},
		{"retyped", []Baseline{{Name: "r", Path: retypedPath}}, "is int32, the original's is int64"},
		{"twice", []Baseline{{Name: "a", Path: path}, {Name: "a", Path: path}}, "name given twice"},
		{"variant-name", []Baseline{{Name: "linformer", Path: path}}, "the name is a variant's"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := LoadBaselines(orig, c.bs)
			if err == nil || !errors.Is(err, ErrBadBaseline) || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "convert: baseline") {
				t.Errorf("error %v, want ErrBadBaseline naming %q", err, c.want)
			}
		})
	}
}

func writeJunk(t *testing.T, dir string) string {
	p := filepath.Join(dir, "junk.onnx")
	if err := os.WriteFile(p, []byte("not a model"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestBaselineKind: the form that prices a baseline is read from its
// attention nodes.
func TestBaselineKind(t *testing.T) {
	node := func(op string, inputs ...string) *onnxpb.NodeProto {
		return &onnxpb.NodeProto{OpType: proto.String(op), Domain: proto.String("com.microsoft"), Input: inputs, Output: []string{op + "_out"}}
	}
	graph := func(nodes ...*onnxpb.NodeProto) *onnxpb.ModelProto {
		return &onnxpb.ModelProto{Graph: &onnxpb.GraphProto{Node: nodes}}
	}
	for _, c := range []struct {
		name string
		m    *onnxpb.ModelProto
		want convert.Form
	}{
		{"attention", graph(node("Attention", "x", "w", "b", "mask_index")), convert.Fused},
		{"mha-no-mask", graph(node("MultiHeadAttention", "q", "k", "v"), node("MultiHeadAttention", "q", "k", "v", "bias")), convert.Flash},
		{"mha-empty-mask", graph(node("MultiHeadAttention", "q", "k", "v", "", "", "")), convert.Flash},
		{"mha-mask", graph(node("MultiHeadAttention", "q", "k", "v", "", "mask")), convert.Fused},
		{"mha-bias", graph(node("MultiHeadAttention", "q", "k", "v", "", "", "attn_bias")), convert.Fused},
		{"mixed", graph(node("MultiHeadAttention", "q", "k", "v"), node("Attention", "x", "w")), convert.Fused},
		{"none", graph(&onnxpb.NodeProto{OpType: proto.String("Relu"), Input: []string{"x"}, Output: []string{"y"}}), ""},
		{"nil", nil, ""},
	} {
		if got := BaselineKind(c.m); got != c.want {
			t.Errorf("%s: kind %q, want %q", c.name, got, c.want)
		}
	}
	orig, _ := benchModel(t, t.TempDir(), "m.onnx")
	if got := BaselineKind(orig); got != convert.Original {
		t.Errorf("unfused BERT: kind %q, want original", got)
	}
	pm, _, err := convert.ToPerformer(orig, convert.PerformerOptions{Features: 8, Seed: 1, FeatureMap: ops.FeaturesFavorPlus, Center: convert.CenterOff})
	if err != nil {
		t.Fatal(err)
	}
	if got := BaselineKind(pm); got != convert.Performer {
		t.Errorf("converted model: kind %q, want performer", got)
	}
	lp, _, err := convert.ToLocalPooled(orig, convert.LocalPooledOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := BaselineKind(lp); got != convert.LocalPooled {
		t.Errorf("local-pooled model: kind %q, want local-pooled", got)
	}
}

// TestSummarizeVersus: ratios and measured crossovers against a
// baseline, computed by hand.
func TestSummarizeVersus(t *testing.T) {
	r := &Result{
		Baselines: []Baseline{{Name: "flash", Kind: convert.Flash}},
		Runs: []Measurement{
			{Variant: convert.Original, Length: 512, Status: "ok", MedianMS: 12, PeakRSSMB: 200},
			{Variant: convert.Performer, Length: 512, Status: "ok", MedianMS: 10, MedianCPUMS: 20, PeakRSSMB: 100,
				Versus: map[string]Ratio{"flash": {PredictedSpeedup: 0.9}}},
			{Variant: "flash", Length: 512, Status: "ok", MedianMS: 8, MedianCPUMS: 16, PeakRSSMB: 50, Baseline: true},
			{Variant: convert.Original, Length: 1024, Status: "ok", MedianMS: 40, PeakRSSMB: 400},
			{Variant: convert.Performer, Length: 1024, Status: "ok", MedianMS: 20, PeakRSSMB: 150},
			{Variant: "flash", Length: 1024, Status: "ok", MedianMS: 25, PeakRSSMB: 100, Baseline: true},
			{Variant: convert.Performer, Length: 2048, Status: "ok", MedianMS: 40, PeakRSSMB: 300},
			{Variant: "flash", Length: 2048, Status: "skipped", Baseline: true},
		},
	}
	r.Summarize()
	p512 := r.Runs[1].Versus["flash"]
	if p512.Speedup != 0.8 || p512.CPUSpeedup != 0.8 || p512.MemoryRatio != 2 || p512.PredictedSpeedup != 0.9 {
		t.Errorf("performer vs flash at 512: %+v, want speedup 8/10, cpu 16/20, memory 100/50, prediction kept", p512)
	}
	if q := r.Runs[4].Versus["flash"]; q.Speedup != 25.0/20 || q.MemoryRatio != 1.5 {
		t.Errorf("performer vs flash at 1024: %+v", q)
	}
	if _, ok := r.Runs[6].Versus["flash"]; ok {
		t.Error("a ratio against a baseline that was skipped")
	}
	if _, ok := r.Runs[2].Versus["flash"]; ok {
		t.Error("the baseline compared with itself")
	}
	// The baseline against the original: 12/8.
	if r.Runs[2].Speedup != 1.5 {
		t.Errorf("flash vs original: %v, want 1.5", r.Runs[2].Speedup)
	}
	// Against flash: 0.8 at 512, 1.25 at 1024, symmetric in the log, so
	// the crossing is at 512·√2 ≈ 724.1.
	if got := r.MeasuredCrossoverVersus["flash"][convert.Performer]; got != 724 {
		t.Errorf("measured crossover vs flash %d, want 724", got)
	}
	if got := r.MeasuredCrossover[convert.Performer]; got != 512 {
		t.Errorf("measured crossover vs original %d, want 512", got)
	}
	// Faster than the original already at 512, the shortest length: the
	// table says the crossover is only bounded; against flash it is not.
	r.Crossover = map[convert.Form]int{convert.Performer: 600}
	r.CrossoverVersus = map[string]map[convert.Form]int{"flash": {convert.Performer: 800}}
	var table strings.Builder
	WriteTable(&table, r)
	for _, want := range []string{
		"performer crossover: predicted n = 600, measured n ≤ 512 (faster at every measured length; predicted/measured ≥ 1.17)",
		"performer crossover versus flash: predicted n = 800, measured n = 724 (predicted/measured 1.10)",
	} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
}

// TestBaselineKindInlined: a converted model whose op onnxruntime's
// offline optimizer inlined is priced, as a bench baseline, as its linear
// form (not as unknown attention, which would be priced as the original).
func TestBaselineKindInlined(t *testing.T) {
	orig, _ := benchModel(t, t.TempDir(), "m.onnx")
	lp, _, err := convert.ToLocalPooled(orig, convert.LocalPooledOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := BaselineKind(inlineLinear(t, lp)); got != convert.LocalPooled {
		t.Errorf("inlined local-pooled model: kind %q, want local-pooled", got)
	}
	for op, want := range map[string]convert.Form{"inlined PerformerAttention": convert.Performer, "ai.linearize:LaraAttention": convert.Lara, "inlined LinformerAttention": convert.Linformer, "Softmax": ""} {
		if c, _ := linearConversion(op); c.Form() != want {
			t.Errorf("linearConversion(%q) = %q, want %q", op, c.Form(), want)
		}
	}
}

// inlineLinear returns m with every ai.linearize call replaced by its
// function body (as onnxruntime's optimizer saves a model at level basic).
// convert/converted_test.go has the same helper; _test files of two
// packages cannot share one.
func inlineLinear(t *testing.T, m *onnxpb.ModelProto) *onnxpb.ModelProto {
	t.Helper()
	out, err := onnx.InlineFunctions(m, ops.Domain)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
