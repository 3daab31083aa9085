package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/linearize/linearize/onnx"
	"google.golang.org/protobuf/proto"
)

func TestExtendPositionsCLI(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "long.onnx")
	code, stdout, errOut := runCLI("extend-positions", filepath.Join("..", "..", "testdata", "bert-tiny.onnx"), "-o", out, "--max-positions", "300", "--position-method", "interpolate")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(stdout, "128 → 300 rows") {
		t.Errorf("output: %s", stdout)
	}
	m, err := onnx.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, tp := range m.Graph.Initializer {
		if tp.GetName() == "embeddings.position_embeddings.weight" && tp.Dims[0] != 300 {
			t.Errorf("table has %d rows", tp.Dims[0])
		}
	}
	if code, _, _ := runCLI("extend-positions", out, "-o", filepath.Join(dir, "x.onnx"), "--max-positions", "100"); code != exitBadInput {
		t.Errorf("shrinking: exit %d, want %d", code, exitBadInput)
	}
}

func TestInspectCost(t *testing.T) {
	model := filepath.Join("..", "..", "testdata", "bert-tiny.onnx")
	code, stdout, errOut := runCLI("inspect", model, "--cost", "--lengths", "128,4096", "--features", "64", "--k", "32")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"2 layers, hidden 64, 4 heads × 16, FFN 256", "performer", "linformer", "predicted crossover", "scores H·n·n"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	code, stdout, _ = runCLI("inspect", model, "--cost", "--lengths", "4096", "--json")
	var rep struct {
		Cost struct {
			Total []struct {
				Form             string  `json:"form"`
				PredictedSpeedup float64 `json:"predicted_speedup"`
			} `json:"total"`
		} `json:"cost"`
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &rep) != nil || len(rep.Cost.Total) != 6 || rep.Cost.Total[1].PredictedSpeedup <= 1 || rep.Cost.Total[3].Form != "local-pooled" || rep.Cost.Total[3].PredictedSpeedup <= 1 ||
		rep.Cost.Total[4].Form != "hedgehog" || rep.Cost.Total[4].PredictedSpeedup <= 1 || rep.Cost.Total[5].Form != "lara" {
		t.Errorf("inspect --cost --json: exit %d, %+v", code, rep)
	}
	if code, _, _ := runCLI("inspect", model, "--cost", "--lengths", "abc"); code != exitUsage {
		t.Errorf("bad --seq-len: exit %d, want %d", code, exitUsage)
	}
}

// TestBenchCLI runs the benchmark command on the bundled tiny model at two
// short lengths; the children are this test binary re-executed (the bench
// child hook runs in init).
func TestBenchCLI(t *testing.T) {
	needORT(t)
	dir := t.TempDir()
	js, png := filepath.Join(dir, "b.json"), filepath.Join(dir, "b.png")
	code, stdout, errOut := runCLI("bench", filepath.Join("..", "..", "testdata", "bert-tiny.onnx"), "--lengths", "32,64",
		"--features", "16", "--k", "16", "--threads", "1", "--repeat", "1", "--json-out", js, "--plot", png)
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errOut, stdout)
	}
	var res struct {
		Model   string
		Threads int
		Runs    []struct {
			Variant   string  `json:"variant"`
			Length    int     `json:"length"`
			Status    string  `json:"status"`
			MedianMS  float64 `json:"median_ms"`
			PeakRSSMB float64 `json:"peak_rss_mb"`
		}
	}
	b, err := os.ReadFile(js)
	if err != nil || json.Unmarshal(b, &res) != nil {
		t.Fatalf("json: %v %s", err, b)
	}
	if res.Threads != 1 || len(res.Runs) != 8 {
		t.Fatalf("json: %+v", res)
	}
	for _, r := range res.Runs {
		if r.Status != "ok" || r.MedianMS <= 0 || r.PeakRSSMB <= 0 {
			t.Errorf("run %+v", r)
		}
	}
	if st, err := os.Stat(png); err != nil || st.Size() < 1000 {
		t.Errorf("plot missing: %v", err)
	}
	if code, _, _ := runCLI("bench", "x.onnx", "--variants", "softmax"); code != exitUsage {
		t.Errorf("bad variant: exit %d, want %d", code, exitUsage)
	}
}

// TestBenchBaselineCLI: --baseline NAME=FILE times the file beside the
// variants (here the original itself, so no Python is needed) and reports
// against it; bad values, missing files and mismatched inputs are refused
// before anything runs.
func TestBenchBaselineCLI(t *testing.T) {
	needORT(t)
	dir := t.TempDir()
	model := filepath.Join("..", "..", "testdata", "bert-tiny.onnx")
	js := filepath.Join(dir, "b.json")
	code, stdout, errOut := runCLI("bench", model, "--variants", "original,linformer", "--lengths", "32",
		"--k", "16", "--threads", "1", "--repeat", "1", "--baseline", "same="+model, "--json-out", js)
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errOut, stdout)
	}
	if !strings.Contains(stdout, "versus baseline same") || !strings.Contains(stdout, "linformer crossover versus same") {
		t.Errorf("output lacks the baseline section:\n%s", stdout)
	}
	var res struct {
		Baselines []struct{ Name, Path, Kind string }
		Runs      []struct {
			Variant  string                        `json:"variant"`
			Baseline bool                          `json:"baseline"`
			Status   string                        `json:"status"`
			Versus   map[string]map[string]float64 `json:"versus"`
		}
	}
	b, err := os.ReadFile(js)
	if err != nil || json.Unmarshal(b, &res) != nil {
		t.Fatalf("json: %v %s", err, b)
	}
	if len(res.Baselines) != 1 || res.Baselines[0].Kind != "original" || len(res.Runs) != 3 {
		t.Fatalf("json: %+v", res)
	}
	for _, r := range res.Runs {
		if r.Status != "ok" || (r.Variant == "same") != r.Baseline {
			t.Errorf("run %+v", r)
		}
		if r.Variant == "linformer" && r.Versus["same"]["speedup"] <= 0 {
			t.Errorf("linformer has no speedup vs the baseline: %+v", r)
		}
	}
	// The input is renamed as in cmd/internal/benchrun's TestLoadBaselines; that
	// test checks the library, this one the CLI's exit codes and messages.
	renamed := filepath.Join(dir, "renamed.onnx")
	m, err := onnx.Load(model)
	if err != nil {
		t.Fatal(err)
	}
	old := m.Graph.Input[0].GetName()
	m.Graph.Input[0].Name = proto.String("tokens")
	for _, n := range m.Graph.Node {
		for i, in := range n.Input {
			if in == old {
				n.Input[i] = "tokens"
			}
		}
	}
	if err := onnx.Save(m, renamed, onnx.SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		arg  string
		code int
		want string
	}{
		{"fused", exitUsage, "want NAME=FILE"},
		{"performer=" + model, exitUsage, "variant's name"},
		{"fused=" + filepath.Join(dir, "absent.onnx"), exitBadInput, "absent.onnx"},
		{"r=" + renamed, exitBadInput, `input "tokens" is not an input of the original`},
	} {
		code, _, errOut := runCLI("bench", model, "--lengths", "32", "--baseline", c.arg)
		if code != c.code || !strings.Contains(errOut, c.want) || !strings.Contains(errOut, "--baseline") {
			t.Errorf("--baseline %s: exit %d (%s), want %d naming %q", c.arg, code, errOut, c.code, c.want)
		}
	}
	if code, _, _ := runCLI("bench", model, "--cost-weights", "pass=-1"); code != exitUsage {
		t.Errorf("negative pass weight: exit %d, want %d", code, exitUsage)
	}
}

// TestBenchFixedInputs: a model with an input that carries no tokens
// (the jina-embeddings-v3-shaped fixture's scalar task_id) is timed with
// that input zeros, said so, or with the value --input gives it, in
// every form; a value outside its table or an input the model lacks is
// refused (exit 2, naming --input) before anything runs.
func TestBenchFixedInputs(t *testing.T) {
	needORT(t)
	path, dir := taskModel(t)
	for _, c := range []struct {
		input, note string
	}{
		{"", "input task_id carries no tokens: zeros in every run (--input task_id=VALUE sets it)"},
		{"task_id=4", "input task_id = 4 in every run"},
	} {
		js := filepath.Join(dir, "b.json")
		args := []string{"bench", path, "--lengths", "32", "--variants", "original,performer,local-pooled", "--threads", "1", "--repeat", "1", "--json-out", js}
		if c.input != "" {
			args = append(args, "--input", c.input)
		}
		code, stdout, errOut := runCLI(args...)
		if code != exitOK {
			t.Fatalf("%v: exit %d: %s\n%s", args, code, errOut, stdout)
		}
		var res struct {
			Notes []string
			Runs  []struct {
				Variant, Status, Reason string
			}
		}
		if b, err := os.ReadFile(js); err != nil || json.Unmarshal(b, &res) != nil {
			t.Fatalf("json: %v", err)
		}
		if len(res.Runs) != 3 {
			t.Errorf("%s: %d runs, want 3", c.input, len(res.Runs))
		}
		for _, r := range res.Runs {
			if r.Status != "ok" {
				t.Errorf("%s: %s %s: %s", c.input, r.Variant, r.Status, r.Reason)
			}
		}
		if !slices.Contains(res.Notes, c.note) || !strings.Contains(errOut, c.note) {
			t.Errorf("%q: notes %q, stderr %q; want %q", c.input, res.Notes, errOut, c.note)
		}
	}
	for input, want := range map[string]string{
		"task_id=9": "outside the 5 rows of the table it indexes",
		"lang=1":    `the model has no input "lang"`,
	} {
		code, _, errOut := runCLI("bench", path, "--lengths", "32", "--input", input)
		if code != exitBadInput || !strings.Contains(errOut, "--input: ") || !strings.Contains(errOut, want) {
			t.Errorf("--input %s: exit %d, %q; want exit %d and %q", input, code, errOut, exitBadInput, want)
		}
	}
}

// TestBenchModelsOutsideItsReach: bench times sequences of tokens; a
// model it cannot time that way is refused as bad input (exit 2) before
// anything runs, naming why: an audio encoder's float input, a model with
// no attention left to convert (Linformer inlined by onnxruntime), an
// export for one sequence length timed at another. ESM's 33-token
// vocabulary is fed ids below it (they were drawn below 100, and every
// run failed in onnxruntime).
func TestBenchModelsOutsideItsReach(t *testing.T) {
	needORT(t)
	fx := filepath.Join("..", "..", "testdata", "fixtures")
	for _, c := range []struct{ file, lengths, want string }{
		{"whisper_eager_op17.onnx", "32", "input input_features is float32"},
		{"vit_eager_op17.onnx", "32", "input pixel_values is float32"},
		{"bert_linformer_ort_inlined.onnx", "32", "no attention blocks"},
		{"bart_eager_dynamo_fixedseq_op18.onnx", "32", "--lengths: the model's inputs declare a sequence length of 8 tokens"},
	} {
		code, _, stderr := runCLI("bench", filepath.Join(fx, c.file), "--lengths", c.lengths, "--repeat", "1", "--threads", "1")
		if code != exitBadInput || !strings.Contains(stderr, c.want) {
			t.Errorf("%s: exit %d, %q; want exit %d and %q", c.file, code, stderr, exitBadInput, c.want)
		}
	}
	code, stdout, stderr := runCLI("bench", filepath.Join(fx, "esm_eager_op17.onnx"), "--lengths", "32", "--repeat", "1", "--threads", "1", "--variants", "original,local-pooled")
	if code != exitOK || strings.Contains(stdout, " failed ") || strings.Count(stdout, " ok ") != 2 {
		t.Errorf("ESM: exit %d:\n%s\n%s", code, stdout, stderr)
	}
}
