package convert

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/infer/infertest"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// Published models come as fp16 and int8 copies that standard tools make
// (onnxconverter-common, onnxruntime.transformers' float16 converter as
// optimum calls it, onnxruntime.quantization's quantize_dynamic and
// quantize_static). testdata/fixtures/published holds such copies of tiny
// exporter fixtures (gen_published.py), and testdata/real/published those
// of the real all-MiniLM-L6-v2 (scripts/published-models.sh, run by
// scripts/setup.sh). Their manifests give, per copy, the truth from the
// source model's configuration (blocks, heads, head size, scale) and how
// far the copy is from its fp32 source in onnxruntime. The references
// below are that truth and the published copy itself run in onnxruntime.

// publishedEntry is one file of a published-copy manifest.
type publishedEntry struct {
	File      string `json:"file"`
	Source    string `json:"source"`
	Tool      string `json:"tool"`
	Call      string `json:"call"`
	Precision string `json:"precision"`
	// Blocks, Heads, HeadDim, Scale and Convertible are the source's,
	// from its configuration.
	Blocks      int      `json:"blocks"`
	Heads       int      `json:"heads"`
	HeadDim     int      `json:"head_dim"`
	Scale       float64  `json:"scale"`
	Convertible int      `json:"convertible"`
	Inputs      []string `json:"inputs"`
	Vocab       int      `json:"vocab"`
	// MaxAbsDiff is the largest |copy − fp32 source| over the outputs in
	// onnxruntime (random tokens, one row padded), as the generator
	// measured it: how much the precision itself moves this model.
	MaxAbsDiff float64 `json:"max_abs_diff"`
	// FixedInputs are the source's (fixtureEntry.FixedInputs).
	FixedInputs map[string]int64 `json:"fixed_inputs"`
}

const publishedDir = "../testdata/fixtures/published"

var realPublishedDir = filepath.Join("..", "testdata", "real", "published")

// feedsFor makes seeded token inputs for e: batch 2 of seq tokens, row 0
// full, row 1 padded after 5.
func (e publishedEntry) feedsFor(seq int, seed uint64) map[string]*onnx.Tensor {
	return fixtureFeeds(fixtureEntry{Inputs: e.Inputs, Vocab: e.Vocab, FixedInputs: e.FixedInputs}, 2, seq, []int{seq, 5}, seed)
}

// precisionRule says, per precision, how close Detect's scale must be to
// the configuration's, and how close the exact conversion must be to the
// published copy in onnxruntime (see checkPublishedExact).
type precisionRule struct {
	// scaleRel bounds |Detect's scale − true scale| / true scale.
	scaleRel float64
	// out bounds the exact conversion's graph outputs, run in onnxruntime
	// or natively, against the copy's in onnxruntime: |got − want| ≤
	// out(e, native, scale of want).
	out func(e publishedEntry, native bool, scale float64) float64
	// core bounds, relative to its scale, the first block's attention
	// output (the core's result) in onnxruntime: its Q, K and V are the
	// same values in the copy and its conversion, so only the core's own
	// arithmetic can differ. Not compared when the copy quantizes the
	// scores or probabilities (see qdq).
	core float64
}

// fp16Unit is float16's unit roundoff, 2⁻¹¹.
const fp16Unit = 1.0 / 2048

var precisionRules = map[string]precisionRule{
	// The fp16 tools store the scale constant (1/√d, or √(1/√d) on Q and
	// on K for SDPA exports) in float16: one unit (4.9e-4) per rounding,
	// twice when the scale is split: 1e-3.
	//
	// The exact conversion's body computes in float16 like the core it
	// replaces and rounds at other places; the native backend's float16
	// kernels round differently from onnxruntime's (measured: up to 3.5
	// units of the output scale on the tiny fixtures). 8 units of the
	// output scale (4e-3) bound both, for the core and the outputs; a
	// wrong core (mask, scale, head layout) moves the core's output by a
	// good part of its scale.
	"fp16": {
		scaleRel: 2 * fp16Unit,
		out:      func(_ publishedEntry, _ bool, scale float64) float64 { return 8 * fp16Unit * scale },
		core:     8 * fp16Unit,
	},
	// quantize_dynamic keeps the scale constant in float32 (exact to
	// 1e-7; 1e-6 with room) and leaves the core's activation × activation
	// MatMuls in float32: the first core matches to float32 summation
	// order (1e-5). After the core, DynamicQuantizeLinear picks its scale
	// and rounding from the values it reads, so float32-level differences
	// can flip one uint8 step of an element there. The native backend's
	// MatMulInteger sums exactly; onnxruntime's x86 u8×s8 kernels can
	// saturate intermediate sums (why quantize_dynamic offers
	// reduce_range): with int8 weights the backends differ by up to
	// 1.8e-3 of the output scale on the tiny fixtures, with uint8 weights
	// by 1e-7. Both are a part of the copy's own quantization error, which
	// moved the outputs by MaxAbsDiff from the fp32 source: the outputs
	// may differ that much, no more.
	"int8-dynamic": {
		scaleRel: 1e-6,
		out:      func(e publishedEntry, _ bool, _ float64) float64 { return e.MaxAbsDiff },
		core:     1e-5,
	},
	// quantize_static (QDQ) quantizes the core's scores and probabilities
	// too, and calibrates the scores' range on the mask's fill (−3.4e38,
	// the calibration batches are padded): their scale is about 1e36,
	// every valid score rounds to 0 and the copy's softmax is uniform over
	// the valid keys. An exact conversion computes the attention instead,
	// from the same quantized Q, K and V: it is no further from the fp32
	// source than the copy is (measured: as far on the tiny fixtures;
	// 1.79 against 2.36 on the real model), so within 2·MaxAbsDiff of the
	// copy. Such a copy's attention output is not compared; an
	// onnxruntime-fused copy's Attention node stays float32 and its output
	// is (1e-5, as for int8-dynamic).
	"qdq": {
		scaleRel: 1e-6,
		out:      func(e publishedEntry, _ bool, _ float64) float64 { return 2 * e.MaxAbsDiff },
		core:     1e-5,
	},
	// Weights stored int8 behind DequantizeLinear, activations float32:
	// the dequantized weights are the same numbers for the copy and its
	// conversion and the core is float32 in both: the 1e-5 of the fp32
	// fixtures' exact conversions. onnxruntime runs DequantizeLinear →
	// MatMul fused (MatMulNBits), which differs from the float product the
	// native backend computes by a part of the copy's distance from its
	// fp32 source (MaxAbsDiff): the bound for native outputs.
	"weight-only-int8": {
		scaleRel: 1e-6,
		out: func(e publishedEntry, native bool, scale float64) float64 {
			if native {
				return e.MaxAbsDiff
			}
			return 1e-5 * scale
		},
		core: 1e-5,
	},
}

func loadPublished(t *testing.T, dir string) []publishedEntry {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatalf("published manifest: %v", err)
	}
	var man struct {
		Files []publishedEntry `json:"files"`
	}
	if err := json.Unmarshal(data, &man); err != nil {
		t.Fatalf("%s/manifest.json: %v", dir, err)
	}
	if len(man.Files) == 0 {
		t.Fatalf("%s/manifest.json lists no files", dir)
	}
	for _, e := range man.Files {
		if _, ok := precisionRules[e.Precision]; !ok {
			t.Fatalf("%s: precision %q has no rule", e.File, e.Precision)
		}
		if e.Blocks == 0 || e.Heads == 0 || e.HeadDim == 0 || e.Scale == 0 || len(e.Inputs) == 0 || e.Vocab < 3 || e.MaxAbsDiff <= 0 {
			t.Fatalf("%s: incomplete manifest entry %+v", e.File, e)
		}
	}
	return man.Files
}

// publishedFixtures lists the committed copies, and checks that the folder
// holds no .onnx file the manifest does not describe (and the reverse).
func publishedFixtures(t *testing.T) []publishedEntry {
	t.Helper()
	entries := loadPublished(t, publishedDir)
	files, err := filepath.Glob(filepath.Join(publishedDir, "*.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, e := range entries {
		listed[e.File] = true
	}
	for _, f := range files {
		if !listed[filepath.Base(f)] {
			t.Errorf("%s has no manifest entry", f)
		}
	}
	if len(files) != len(entries) {
		t.Errorf("%d .onnx files, %d manifest entries", len(files), len(entries))
	}
	seen := map[string]int{}
	for _, e := range entries {
		seen[e.Precision]++
	}
	for p := range precisionRules {
		if seen[p] < 2 {
			t.Errorf("%d copies of precision %s, want at least 2", seen[p], p)
		}
	}
	return entries
}

// realPublished lists the real model's copies, skipping when
// scripts/setup.sh has not made them.
func realPublished(t *testing.T) []publishedEntry {
	t.Helper()
	if _, err := os.Stat(filepath.Join(realPublishedDir, "manifest.json")); errors.Is(err, fs.ErrNotExist) {
		t.Skipf("%s absent: run bash scripts/setup.sh (its published-models step makes the real model's fp16, int8 and QDQ copies)", realPublishedDir)
	}
	return loadPublished(t, realPublishedDir)
}

// checkPublishedDetect: Detect finds the configuration's blocks, heads,
// head size and scale, and every block the source can convert is
// convertible in the copy.
func checkPublishedDetect(t *testing.T, e publishedEntry, m *onnxpb.ModelProto) {
	t.Helper()
	d, err := Detect(m)
	if err != nil {
		t.Fatal(err)
	}
	if d.Count() != e.Blocks {
		t.Fatalf("found %d blocks, want %d\n%s", d.Count(), e.Blocks, d.Explain())
	}
	rule := precisionRules[e.Precision]
	conv := 0
	for _, b := range d.Blocks {
		if b.Heads != e.Heads || b.HeadDim != e.HeadDim || math.Abs(b.Scale-e.Scale) > rule.scaleRel*e.Scale {
			t.Errorf("block %d: heads %d head_dim %d scale %.9g, want %d %d %.9g (±%g relative)",
				b.Layer, b.Heads, b.HeadDim, b.Scale, e.Heads, e.HeadDim, e.Scale, rule.scaleRel)
		}
		if b.Convertible {
			conv++
		} else {
			t.Logf("block %d not convertible: %s", b.Layer, b.Reason)
		}
	}
	if conv != e.Convertible {
		t.Errorf("%d convertible blocks, want %d\n%s", conv, e.Convertible, d.Explain())
	}
}

// TestPublishedDetect: on every fp16, int8, QDQ and weight-only copy the
// standard tools made, Detect reads what the source's configuration says.
func TestPublishedDetect(t *testing.T) {
	for _, e := range publishedFixtures(t) {
		t.Run(e.File, func(t *testing.T) {
			checkPublishedDetect(t, e, loadModel(t, filepath.Join(publishedDir, e.File)))
		})
	}
}

// publishedConverters are the four conversions with their default options.
var publishedConverters = []struct {
	name string
	to   func(*onnxpb.ModelProto) (*onnxpb.ModelProto, *Report, error)
}{
	{"performer", func(m *onnxpb.ModelProto) (*onnxpb.ModelProto, *Report, error) {
		return ToPerformer(m, PerformerOptions{})
	}},
	{"linformer", func(m *onnxpb.ModelProto) (*onnxpb.ModelProto, *Report, error) {
		return ToLinformer(m, LinformerOptions{})
	}},
	{"local-pooled", func(m *onnxpb.ModelProto) (*onnxpb.ModelProto, *Report, error) {
		return ToLocalPooled(m, LocalPooledOptions{})
	}},
	{"lara", func(m *onnxpb.ModelProto) (*onnxpb.ModelProto, *Report, error) {
		return ToLARA(m, LaraOptions{})
	}},
}

// checkSameOutputs wants got to hold every output of want with its
// element type and shape, and finite values.
func checkSameOutputs(t *testing.T, label string, got, want map[string]*onnx.Tensor) {
	t.Helper()
	if len(want) == 0 {
		t.Fatalf("%s: the published model has no outputs", label)
	}
	for name, w := range want {
		g := got[name]
		if g == nil {
			t.Errorf("%s: output %s missing", label, name)
			continue
		}
		if g.DType != w.DType || fmt.Sprint(g.Shape) != fmt.Sprint(w.Shape) {
			t.Errorf("%s: output %s is %s %v, the published model's %s %v", label, name,
				onnx.TypeName(g.DType), g.Shape, onnx.TypeName(w.DType), w.Shape)
			continue
		}
		v, err := g.AsFloat64s()
		if err != nil {
			t.Errorf("%s: output %s: %v", label, name, err)
			continue
		}
		for i, x := range v {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				t.Errorf("%s: output %s[%d] = %g", label, name, i, x)
				break
			}
		}
	}
}

// checkPublishedConvert: each conversion with its default options
// converts every block the source can convert, and (with onnxruntime)
// the converted model loads and runs, its outputs those of the published
// model: same names, element types (float16 stays float16) and shapes,
// finite.
func checkPublishedConvert(t *testing.T, e publishedEntry, m *onnxpb.ModelProto, seq int) {
	t.Helper()
	ort := infertest.ORT(t)
	in := e.feedsFor(seq, 21)
	var want map[string]*onnx.Tensor
	if ort {
		var err error
		if want, err = runExposed("ort", m, in, ""); err != nil {
			t.Fatalf("the published model itself: %v", err)
		}
	}
	for _, c := range publishedConverters {
		t.Run(c.name, func(t *testing.T) {
			cm, rep, err := c.to(m)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Converted) != e.Convertible {
				t.Fatalf("converted %d blocks, want %d; skipped: %+v", len(rep.Converted), e.Convertible, rep.Skipped)
			}
			if !ort {
				return
			}
			got, err := runExposed("ort", cm, in, "")
			if err != nil {
				t.Fatal(err)
			}
			checkSameOutputs(t, "onnxruntime", got, want)
		})
	}
}

// TestPublishedConvert: every copy converts with every op and runs in
// onnxruntime with the published model's output types.
func TestPublishedConvert(t *testing.T) {
	for _, e := range publishedFixtures(t) {
		t.Run(e.File, func(t *testing.T) {
			checkPublishedConvert(t, e, loadModel(t, filepath.Join(publishedDir, e.File)), 8)
		})
	}
}

// checkPublishedExact: ToLocalPooled with blocks at least as long as the
// input is exact attention (every key is in the query's block: nothing is
// pooled), so the converted model must give the published model's
// outputs, in onnxruntime and in the native backend, within the
// precision's rule (precisionRules). The tiny fixtures' outputs hardly
// depend on attention (random weights: ignoring the padding moves them by
// less than 1% of their scale), so the first block's attention output is
// compared too, in onnxruntime. The inputs pad one row, so the mask must
// reach the op.
func checkPublishedExact(t *testing.T, e publishedEntry, m *onnxpb.ModelProto, seq int) {
	t.Helper()
	if !infertest.ORT(t) {
		return
	}
	d, err := Detect(m)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Blocks) == 0 {
		t.Fatalf("Detect finds no block\n%s", d.Explain())
	}
	core := d.Blocks[0].Output
	in := e.feedsFor(seq, 33)
	rule := precisionRules[e.Precision]
	if quantizesScores(m) {
		t.Logf("the copy quantizes the softmax's input or output: its attention output is not compared")
		core = ""
	}
	want, err := runExposed("ort", m, in, core)
	if err != nil {
		t.Fatalf("the published model itself: %v", err)
	}
	cm, rep, err := ToLocalPooled(m, LocalPooledOptions{Block: seq})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Converted) != e.Convertible {
		t.Fatalf("converted %d blocks, want %d; skipped: %+v", len(rep.Converted), e.Convertible, rep.Skipped)
	}
	for _, backend := range []string{"ort", "native"} {
		expose := core
		if backend == "native" {
			expose = ""
		}
		got, err := runExposed(backend, cm, in, expose)
		if err != nil {
			t.Errorf("%s: %v", backend, err)
			continue
		}
		for name, w := range want {
			if name == core && backend == "native" {
				continue
			}
			d := infer.CompareTensors(got[name], w)
			tol, what := rule.out(e, backend == "native", d.Scale), "output"
			if name == core {
				tol, what = rule.core*d.Scale, "first block's attention output"
			}
			t.Logf("%s %s %s: exact local-pooled vs the published model: %v (bound: max abs %.3g)", backend, what, name, d, tol)
			if d.Mismatch != "" || d.NaNMismatch > 0 || d.MaxAbs > tol {
				t.Errorf("%s %s %s: exact local-pooled vs the published model: %v, want max abs ≤ %.3g (%s)",
					backend, what, name, d, tol, e.Precision)
			}
		}
	}
}

// quantizesScores reports whether m rounds attention scores or
// probabilities to integers: a Softmax reads a DequantizeLinear or feeds a
// QuantizeLinear.
func quantizesScores(m *onnxpb.ModelProto) bool {
	ix := onnx.NewIndex(m.Graph)
	for _, n := range m.Graph.Node {
		if n.GetOpType() != "Softmax" || len(n.Input) == 0 || len(n.Output) == 0 {
			continue
		}
		if p := ix.Producer[n.Input[0]]; p != nil && p.GetOpType() == "DequantizeLinear" {
			return true
		}
		for _, c := range ix.Consumers[n.Output[0]] {
			if c.GetOpType() == "QuantizeLinear" {
				return true
			}
		}
	}
	return false
}

// runExposed runs m in backend on in and returns every graph output and,
// when expose is not empty, that internal value too.
func runExposed(backend string, m *onnxpb.ModelProto, in map[string]*onnx.Tensor, expose string) (map[string]*onnx.Tensor, error) {
	var opts infer.Options
	opts.Threads = 1
	if expose != "" {
		opts.Expose = []string{expose}
	}
	s, err := infer.Open(backend, m, opts)
	if err != nil {
		return nil, fmt.Errorf("%s session: %w", backend, err)
	}
	defer s.Close()
	var names []string
	for _, o := range s.Outputs() {
		names = append(names, o.Name)
	}
	if expose != "" {
		names = append(names, expose)
	}
	out, err := s.Run(in, names...)
	if err != nil {
		return nil, fmt.Errorf("%s run: %w", backend, err)
	}
	return out, nil
}

// TestPublishedLocalPooledExact: the exact conversion of every copy
// reproduces the copy, in onnxruntime and in the native backend.
func TestPublishedLocalPooledExact(t *testing.T) {
	for _, e := range publishedFixtures(t) {
		t.Run(e.File, func(t *testing.T) {
			checkPublishedExact(t, e, loadModel(t, filepath.Join(publishedDir, e.File)), 8)
		})
	}
}

// TestPublishedRealModel: the real all-MiniLM-L6-v2 as fp16, dynamic int8
// and QDQ copies (testdata/real/published, made by scripts/setup.sh):
// the same checks as the fixtures', on 16 tokens.
func TestPublishedRealModel(t *testing.T) {
	for _, e := range realPublished(t) {
		t.Run(strings.TrimSuffix(e.File, ".onnx"), func(t *testing.T) {
			m := loadModel(t, filepath.Join(realPublishedDir, e.File))
			t.Run("detect", func(t *testing.T) { checkPublishedDetect(t, e, m) })
			t.Run("convert", func(t *testing.T) { checkPublishedConvert(t, e, m, 16) })
			t.Run("exact", func(t *testing.T) { checkPublishedExact(t, e, m, 16) })
		})
	}
}
