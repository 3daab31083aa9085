package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/infer/infertest"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// webSetup is the command that installs what TestWebRuntimes needs.
const webSetup = "bash scripts/web-check-setup.sh"

// Sources of the conversions TestWebRuntimes runs: the test model, the
// ModernBERT-shaped fixture (its sliding-window layer becomes
// WindowAttention) and a float16 copy of a BERT fixture made by
// onnxruntime's float16 converter (float32 inputs and outputs, typed
// function bodies).
var webSources = map[string]string{
	"bert":       filepath.Join("..", "..", "testdata", "bert-tiny.onnx"),
	"modernbert": filepath.Join("..", "..", "testdata", "fixtures", "modernbert_eager_op17.onnx"),
	"fp16":       filepath.Join("..", "..", "testdata", "fixtures", "published", "bert_eager_op14.fp16_ortx.onnx"),
}

// webConversions are the conversions of testdata/spec/check_spec.py
// (those of bert-tiny; the ModernBERT and float16 ones from the committed
// fixtures) with the custom op each must hold; op is "" for --inline,
// which must hold none.
var webConversions = []struct {
	name, src string
	args      []string
	op        string
}{
	{"performer", "bert", []string{"performer", "--features", "16"}, "PerformerAttention"},
	{"performer-favorplus", "bert", []string{"performer", "--features", "16", "--center=false", "--features-kind", "favor+"}, "PerformerAttention"},
	{"linformer-pool", "bert", []string{"linformer", "--k", "4"}, "LinformerAttention"},
	{"linformer-gaussian", "bert", []string{"linformer", "--init", "gaussian", "--k", "4", "--max-len", "32"}, "LinformerAttention"},
	{"local-pooled", "bert", []string{"local-pooled", "--block", "4", "--segments", "2"}, "LocalPooledAttention"},
	{"local-pooled-inline", "bert", []string{"local-pooled", "--block", "4", "--segments", "2", "--inline"}, ""},
	{"lara", "bert", []string{"lara", "--landmarks", "4"}, "LaraAttention"},
	{"hedgehog", "bert", []string{"hedgehog", "--block", "4", "--features", "4", "--steps", "0"}, "HedgehogAttention"},
	{"long-far", "bert", []string{"long", "--window", "8", "--max-length", "256", "--far", "--segments", "2", "--far-bias", "-0.5"}, "LocalPooledAttention"},
	{"modernbert-window", "modernbert", []string{"window"}, "WindowAttention"},
	{"fp16-local-pooled", "fp16", []string{"local-pooled", "--block", "4", "--segments", "2"}, "LocalPooledAttention"},
	{"fp16-hedgehog", "fp16", []string{"hedgehog", "--block", "4", "--features", "4", "--steps", "0"}, "HedgehogAttention"},
}

// Largest allowed |web − Go| and |node − Go| over the output's scale
// (max(1, max |Go|)): the three are the same onnxruntime release, but the
// WASM build has its own kernels (no FMA, other vector widths and
// summation orders), so float32 results differ in the last bits; float16
// bodies round each op's result to half precision, where one ulp of a
// value near 4 is 2e-3.
const (
	webTol     = 1e-4
	webHalfTol = 1e-2
)

// TestWebRuntimes runs every conversion the CLI writes in onnxruntime-web
// (the WASM build the browser runs, here in Node.js) and in
// onnxruntime-node, through testdata/web/run_ort.mjs, and requires the
// outputs `convert run` gives (Go and the onnxruntime C library) on the
// same inputs: batch 2, the second row padded. It skips, naming
// scripts/web-check-setup.sh, where node or the npm packages are missing.
func TestWebRuntimes(t *testing.T) {
	root := filepath.Join("..", "..")
	script, err := filepath.Abs(filepath.Join(root, "testdata", "web", "run_ort.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	modules, err := filepath.Abs(filepath.Join(root, ".tools", "node", "node_modules"))
	if err != nil {
		t.Fatal(err)
	}
	node := webCheckTools(t, root, modules)
	// Reading the script makes go test's cache depend on it.
	if _, err := os.ReadFile(script); err != nil {
		t.Fatalf("reading the node script: %v", err)
	}
	if !infertest.ORT(t) {
		t.Skip("the Go side needs onnxruntime: install it with bash scripts/setup.sh")
	}

	tmp := t.TempDir()
	feeds := map[string]string{} // source → inputs JSON
	inputArgs := map[string][]string{}
	for src, path := range webSources {
		feeds[src], inputArgs[src] = writeWebFeed(t, src, path, filepath.Join(tmp, "inputs-"+src))
	}

	type result struct {
		model   string
		outputs []string
		want    map[string]*onnx.Tensor
	}
	results := map[string]*result{}
	bySource := map[string][]string{} // source → converted models
	for _, c := range webConversions {
		path := filepath.Join(tmp, c.name+".onnx")
		args := append([]string{c.args[0], webSources[c.src], "-o", path}, c.args[1:]...)
		if code, stdout, stderr := runCLI(args...); code != exitOK {
			t.Fatalf("%s: convert %s: exit %d: %s%s", c.name, strings.Join(args, " "), code, stdout, stderr)
		}
		m, err := onnx.Load(path)
		if err != nil {
			t.Fatalf("%s: loading the conversion: %v", c.name, err)
		}
		if err := holdsOp(m, c.op); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if c.op == "" {
			src, err := onnx.Load(webSources[c.src])
			if err != nil {
				t.Fatal(err)
			}
			if n, n0 := onnx.Summarize(m).NodeCount, onnx.Summarize(src).NodeCount; n <= n0 {
				t.Fatalf("%s: %d nodes, not more than the original's %d: no function body was inlined", c.name, n, n0)
			}
		}
		r := &result{model: path, want: map[string]*onnx.Tensor{}}
		out := filepath.Join(tmp, "go-"+c.name)
		args = append([]string{"run", path, "--threads", "1", "--out-dir", out}, inputArgs[c.src]...)
		if code, stdout, stderr := runCLI(args...); code != exitOK {
			t.Fatalf("%s: convert %s: exit %d: %s%s", c.name, strings.Join(args, " "), code, stdout, stderr)
		}
		for _, o := range m.Graph.Output {
			name := o.GetName()
			w, err := onnx.ReadTensorFile(filepath.Join(out, name+".npy"))
			if err != nil {
				t.Fatalf("%s: convert run's output %s: %v", c.name, name, err)
			}
			if err := finite(w); err != nil {
				t.Fatalf("%s: convert run's output %s: %v", c.name, name, err)
			}
			r.outputs = append(r.outputs, name)
			r.want[name] = w
		}
		results[c.name] = r
		bySource[c.src] = append(bySource[c.src], path)
	}

	// One run of the script for every model: starting the WASM build is
	// most of its time.
	var jobs []string
	srcs := make([]string, 0, len(bySource))
	for src := range bySource {
		srcs = append(srcs, src)
	}
	sort.Strings(srcs)
	for _, src := range srcs {
		jobs = append(append(jobs, "--inputs", feeds[src]), bySource[src]...)
	}
	got := runWebScript(t, node, script, modules, filepath.Join(tmp, "js.json"), jobs)

	for _, c := range webConversions {
		r := results[c.name]
		tol := webTol
		if c.src == "fp16" {
			tol = webHalfTol
		}
		var line []string
		for _, rt := range []string{"web", "node"} {
			js, ok := got[rt][r.model]
			switch {
			case !ok:
				t.Errorf("%s: %s: no result for the model", c.name, rt)
				continue
			case js.Error != "":
				t.Errorf("%s: %s", c.name, js.Error)
				continue
			}
			worst := 0.0
			for _, name := range r.outputs {
				d, scale, err := compareJS(js.Outputs[name], r.want[name])
				if err != nil {
					t.Errorf("%s: %s output %s: %v", c.name, rt, name, err)
					continue
				}
				if !(d <= tol*scale) {
					t.Errorf("%s: %s output %s: max |%s − convert run| %.3g > %g × scale %.3g", c.name, rt, name, rt, d, tol, scale)
				}
				worst = math.Max(worst, d/scale)
			}
			line = append(line, fmt.Sprintf("%s %.2g", rt, worst))
		}
		t.Logf("%-20s %-22s max |Δ|/scale vs convert run: %s", c.name, c.op, strings.Join(line, ", "))
	}
}

// webCheckTools returns the node executable, or skips the test, naming
// webSetup, when node or the packages (at the version web-check-setup.sh
// pins) are missing.
func webCheckTools(t *testing.T, root, modules string) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skipf("node is not installed (%v): install it (scripts/setup.sh does), then the npm packages with %s", err, webSetup)
	}
	setup, err := os.ReadFile(filepath.Join(root, "scripts", "web-check-setup.sh"))
	if err != nil {
		t.Fatalf("reading the setup script: %v", err)
	}
	m := regexp.MustCompile(`(?m)^ORT_VERSION=(\S+)$`).FindSubmatch(setup)
	if m == nil {
		t.Fatal("scripts/web-check-setup.sh sets no ORT_VERSION")
	}
	version := string(m[1])
	for _, p := range []string{"onnxruntime-web", "onnxruntime-node", "onnxruntime-common"} {
		b, err := os.ReadFile(filepath.Join(modules, p, "package.json"))
		if err != nil {
			t.Skipf("npm package %s is missing (%v): install the packages of this check with %s", p, err, webSetup)
		}
		var pkg struct{ Version string }
		if err := json.Unmarshal(b, &pkg); err != nil {
			t.Fatalf("%s: %v", filepath.Join(modules, p, "package.json"), err)
		}
		if pkg.Version != version {
			t.Skipf("npm package %s is %s, not %s: update the packages of this check with %s", p, pkg.Version, version, webSetup)
		}
	}
	return node
}

// holdsOp checks that m holds op as a node of the domain ai.linearize and
// a model-local function of that name; for op "" that no such node,
// function or import is left (an --inline conversion).
func holdsOp(m *onnxpb.ModelProto, op string) error {
	const domain = "ai.linearize"
	nodes := 0
	for _, n := range m.Graph.Node {
		if n.GetDomain() == domain && (op == "" || n.GetOpType() == op) {
			nodes++
		}
	}
	fns := 0
	for _, f := range m.Functions {
		if f.GetDomain() == domain && (op == "" || f.GetName() == op) {
			fns++
		}
	}
	if op == "" {
		if nodes+fns != 0 {
			return fmt.Errorf("--inline left %d %s nodes and %d functions", nodes, domain, fns)
		}
		return nil
	}
	if nodes == 0 || fns == 0 {
		return fmt.Errorf("the conversion holds %d %s.%s nodes and %d functions of that name, want both", nodes, domain, op, fns)
	}
	return nil
}

// writeWebFeed makes the inputs of a source model (seeded, batch 2,
// length 16, the second row padded after 11 tokens: mask 0 and token id
// 0 there), writes each as DIR/NAME.npy and all as DIR.json for the node
// script, and returns the JSON's path and the --input flags of convert
// run.
func writeWebFeed(t *testing.T, src, path, dir string) (string, []string) {
	t.Helper()
	const batch, seq, pad = 2, 16, 5
	m, err := onnx.Load(path)
	if err != nil {
		t.Fatalf("%s: %v", src, err)
	}
	feed, err := infer.RandomInputs(m, infer.GraphInputs(m), infer.RandomOptions{Batch: batch, SeqLen: seq, Seed: 8})
	if err != nil {
		t.Fatalf("%s: random inputs: %v", src, err)
	}
	mask, ok := feed["attention_mask"]
	if !ok {
		t.Fatalf("%s: no input attention_mask", src)
	}
	for _, x := range []*onnx.Tensor{mask, feed["input_ids"]} {
		if x == nil || fmt.Sprint(x.Shape) != fmt.Sprint([]int{batch, seq}) || x.Int64s() == nil {
			t.Fatalf("%s: want int64 inputs attention_mask and input_ids of shape [%d %d], got %v", src, batch, seq, x)
		}
		v := x.Int64s()
		for j := seq - pad; j < seq; j++ {
			v[(batch-1)*seq+j] = 0
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	type jsInput struct {
		Type string `json:"type"`
		Dims []int  `json:"dims"`
		Data any    `json:"data"`
	}
	js := map[string]jsInput{}
	var args []string
	names := make([]string, 0, len(feed))
	for name := range feed {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		x := feed[name]
		if x.DType != onnx.Int64 && x.DType != onnx.Float {
			t.Fatalf("%s: input %s is %s; the check feeds int64 and float32", src, name, onnx.TypeName(x.DType))
		}
		js[name] = jsInput{onnx.TypeName(x.DType), x.Shape, x.Data}
		file := filepath.Join(dir, name+".npy")
		if err := onnx.WriteNPY(file, x); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--input", name+"="+file)
	}
	b, err := json.Marshal(map[string]any{"inputs": js})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+".json", b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir + ".json", args
}

// webModelResult is one model's part of the node script's output.
type webModelResult struct {
	Outputs map[string]*jsTensor `json:"outputs"`
	Error   string               `json:"error"`
}

// jsTensor is a tensor as the node script writes it.
type jsTensor struct {
	Type string     `json:"type"`
	Dims []int      `json:"dims"`
	Data []jsNumber `json:"data"`
}

// jsNumber is a JSON number, or one of the strings "NaN", "Infinity",
// "-Infinity" or a decimal integer that JSON numbers cannot carry.
type jsNumber float64

func (n *jsNumber) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v, err := strconv.ParseFloat(s, 64) // also NaN, Infinity, -Infinity
		if err != nil {
			return fmt.Errorf("value %q: %w", s, err)
		}
		*n = jsNumber(v)
		return nil
	}
	var v float64
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*n = jsNumber(v)
	return nil
}

// runWebScript runs the node script on jobs (--inputs FILE MODEL...
// groups) in both runtimes and returns runtime → model → result. A model
// that fails in a runtime is an error in its result; a script that
// writes nothing fails the test.
func runWebScript(t *testing.T, node, script, modules, out string, jobs []string) map[string]map[string]webModelResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	args := append([]string{script, "--runtime", "web,node", "--modules", modules, "--out", out}, jobs...)
	cmd := exec.CommandContext(ctx, node, args...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	runErr := cmd.Run()
	if stderr.Len() > 0 {
		t.Logf("%s: %s", filepath.Base(script), stderr.String())
	}
	var exit *exec.ExitError
	if runErr != nil && !(errors.As(runErr, &exit) && exit.ExitCode() == 1) {
		t.Fatalf("node %s: %v\n%s", filepath.Base(script), runErr, stderr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("node %s wrote no result: %v\n%s", filepath.Base(script), err, stderr.String())
	}
	var res struct {
		Runtimes map[string]struct {
			Versions map[string]string         `json:"versions"`
			Models   map[string]webModelResult `json:"models"`
		} `json:"runtimes"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("the result of node %s: %v", filepath.Base(script), err)
	}
	got := map[string]map[string]webModelResult{}
	for rt, r := range res.Runtimes {
		if len(r.Versions) == 0 {
			t.Errorf("%s runtime: no versions reported", rt)
		}
		got[rt] = r.Models
	}
	return got
}

// compareJS returns the largest |got − want| and the scale max(1,
// max |want|), or an error when the types or shapes differ or got holds a
// NaN or an Inf.
func compareJS(got *jsTensor, want *onnx.Tensor) (diff, scale float64, err error) {
	if got == nil {
		return 0, 0, errors.New("missing")
	}
	if got.Type != onnx.TypeName(want.DType) || fmt.Sprint(got.Dims) != fmt.Sprint(want.Shape) {
		return 0, 0, fmt.Errorf("%s%v, convert run gives %s", got.Type, got.Dims, want)
	}
	w, err := want.AsFloat64s()
	if err != nil {
		return 0, 0, err
	}
	if len(got.Data) != len(w) {
		return 0, 0, fmt.Errorf("%d values for %v", len(got.Data), got.Dims)
	}
	scale = 1
	bad := 0
	for i, g := range got.Data {
		v := float64(g)
		if math.IsNaN(v) || math.IsInf(v, 0) {
			bad++
			continue
		}
		diff = math.Max(diff, math.Abs(v-w[i]))
		scale = math.Max(scale, math.Abs(w[i]))
	}
	if bad > 0 {
		return 0, 0, fmt.Errorf("%d of %d values are NaN or Inf", bad, len(w))
	}
	return diff, scale, nil
}

// finite returns an error when t holds a NaN or an Inf.
func finite(t *onnx.Tensor) error {
	v, err := t.AsFloat64s()
	if err != nil {
		return err
	}
	bad := 0
	for _, x := range v {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			bad++
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d values are NaN or Inf", bad, len(v))
	}
	return nil
}
