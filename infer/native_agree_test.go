package infer

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/models"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

// corpusDir is ../shared/corpus/ort-fusion relative to the repository root.
func corpusDir(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root, ok := findRepoRoot(wd)
	if !ok {
		t.Skip("repository root not found")
	}
	dir := filepath.Join(root, "..", "shared", "corpus", "ort-fusion")
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("corpus absent (%s): place the shared corpus beside the clone", dir)
	}
	return dir
}

// corpusInputs builds valid inputs for a corpus model following
// ../shared/corpus/README.md: batch 2, token ids and masks 0 or 1, the
// declared fixed sizes, sequence 3 (seq ≤ 2 where the position table has 2
// rows), past length 3.
func corpusInputs(t *testing.T, s Session, seq int, rng *rand.Rand) map[string]*onnx.Tensor {
	t.Helper()
	dims := map[string]int{}
	feeds := map[string]*onnx.Tensor{}
	for _, in := range s.Inputs() {
		shape := make([]int, len(in.Shape))
		for i, d := range in.Shape {
			switch {
			case d.Value >= 0:
				shape[i] = int(d.Value)
			case strings.Contains(d.Param, "+"):
				shape[i] = 3 + seq // past_seq_len+seq_len
			case strings.Contains(d.Param, "past"):
				shape[i] = 3
			case i == 0 && in.Name != "past_0":
				shape[i] = 2
			case d.Param == "batch_size":
				shape[i] = 2
			default:
				shape[i] = seq
			}
			if d.Param != "" {
				if v, ok := dims[d.Param]; ok {
					shape[i] = v
				}
				dims[d.Param] = shape[i]
			}
		}
		n := onnx.NumElements(shape)
		var t0 *onnx.Tensor
		mask := strings.Contains(in.Name, "mask")
		switch in.DType {
		case onnx.Float:
			d := make([]float32, n)
			for i := range d {
				if mask {
					d[i] = 1
				} else {
					d[i] = float32(rng.NormFloat64())
				}
			}
			t0 = onnx.NewFloat(shape, d)
		case onnx.Int64:
			t0 = onnx.NewInt64(shape, randomBits[int64](rng, shape, n, mask))
		case onnx.Int32:
			t0 = &onnx.Tensor{DType: onnx.Int32, Shape: shape, Data: randomBits[int32](rng, shape, n, mask)}
		default:
			t.Fatalf("input %q: unexpected type %s", in.Name, onnx.TypeName(in.DType))
		}
		feeds[in.Name] = t0
	}
	return feeds
}

// randomBits draws n zeros and ones for an integer input of the given
// shape; a mask gets a 1 at the start of every row (at least one visible
// key per row).
func randomBits[T int32 | int64](rng *rand.Rand, shape []int, n int, mask bool) []T {
	d := make([]T, n)
	for i := range d {
		d[i] = T(rng.IntN(2))
		if mask && i%shape[len(shape)-1] == 0 {
			d[i] = 1
		}
	}
	return d
}

// TestNativeCorpusAgreement runs every runnable corpus model in both
// backends and requires agreement within 1e-4 of each output's scale.
func TestNativeCorpusAgreement(t *testing.T) {
	needORT(t)
	dir := corpusDir(t)
	files, err := filepath.Glob(filepath.Join(dir, "*.onnx"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus models in %s", dir)
	}
	notRunnable := map[string]string{
		"attention_distilbert.onnx": "its constant mask is [1,3] while its input has sequence length 1 (README: detection only)",
	}
	seqOf := map[string]int{"embed_layer_norm_format8_opset13.onnx": 2}
	ran := 0
	for _, f := range files {
		base := filepath.Base(f)
		t.Run(base, func(t *testing.T) {
			if why, ok := notRunnable[base]; ok {
				t.Skip(why)
			}
			m, err := onnx.Load(f)
			if err != nil {
				t.Fatal(err)
			}
			nat, err := NewNativeSession(m, Options{Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			ref, err := NewORTSession(m, Options{Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer ref.Close()
			seq := seqOf[base]
			if seq == 0 {
				seq = 3
			}
			rng := rand.New(rand.NewPCG(uint64(len(base)), 9))
			for trial := 0; trial < 3; trial++ {
				feeds := corpusInputs(t, ref, seq, rng)
				diffs, err := CompareSessions(nat, ref, feeds)
				if err != nil {
					t.Fatal(err)
				}
				for _, d := range diffs {
					if !d.OK(1e-4) || d.N == 0 {
						t.Errorf("output %q: %v", d.Name, d.Diff)
					} else if trial == 0 {
						t.Logf("output %q: %v", d.Name, d.Diff)
					}
				}
			}
			ran++
		})
	}
	if ran < len(files)-len(notRunnable) {
		t.Errorf("ran %d corpus models of %d", ran, len(files)-len(notRunnable))
	}
}

// TestNativeBERTAgreement checks the native backend against onnxruntime on
// BERT graphs from package models in each of the builder's forms.
func TestNativeBERTAgreement(t *testing.T) {
	needORT(t)
	for _, c := range []struct {
		name string
		edit func(*models.Config)
		seq  int
	}{
		{"tiny/opset17", func(*models.Config) {}, 16},
		{"tiny/opset11/two-step-K/mul-scale", func(c *models.Config) { c.Opset, c.KTranspose, c.Scale = 11, models.KTwoStep, models.ScaleMul }, 9},
		{"tiny/opset13/scale-q", func(c *models.Config) { c.Opset, c.Scale = 13, models.ScaleQ }, 32},
		{"tiny/opset21", func(c *models.Config) { c.Opset, c.Seed = 21, 5 }, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := models.TinyConfig()
			c.edit(&cfg)
			m, err := models.BERT(cfg)
			if err != nil {
				t.Fatal(err)
			}
			feeds := bertInputs(2, c.seq, cfg.Vocab, uint64(c.seq))
			agree(t, c.name, m, feeds, 1e-4, 2)
		})
	}
}

// bertInputs returns random BERT inputs with the second row padded.
func bertInputs(batch, seq, vocab int, seed uint64) map[string]*onnx.Tensor {
	rng := rand.New(rand.NewPCG(seed, 1))
	ids, mask, types := make([]int64, batch*seq), make([]int64, batch*seq), make([]int64, batch*seq)
	for b := 0; b < batch; b++ {
		valid := seq - b*seq/3
		for s := 0; s < seq; s++ {
			i := b*seq + s
			ids[i] = int64(rng.IntN(vocab))
			if s < valid {
				mask[i] = 1
			}
			if s >= seq/2 {
				types[i] = 1
			}
		}
	}
	sh := []int{batch, seq}
	return map[string]*onnx.Tensor{"input_ids": onnx.NewInt64(sh, ids), "attention_mask": onnx.NewInt64(sh, mask), "token_type_ids": onnx.NewInt64(sh, types)}
}

// TestNativeDeterministic requires bit-identical outputs across runs and
// thread counts (the GEMM's per-element summation order does not depend
// on how C is split among goroutines).
func TestNativeDeterministic(t *testing.T) {
	cfg := models.TinyConfig()
	m, err := models.BERT(cfg)
	if err != nil {
		t.Fatal(err)
	}
	feeds := bertInputs(2, 40, cfg.Vocab, 3)
	var ref map[string]*onnx.Tensor
	for _, threads := range []int{1, 2, 3, 1} {
		s, err := NewNativeSession(m, Options{Threads: threads})
		if err != nil {
			t.Fatal(err)
		}
		out, err := s.Run(feeds)
		s.Close()
		if err != nil {
			t.Fatal(err)
		}
		if ref == nil {
			ref = out
			continue
		}
		for name, want := range ref {
			got := out[name].Floats()
			for i, w := range want.Floats() {
				if got[i] != w {
					t.Fatalf("threads=%d: %s[%d] = %v, first run %v", threads, name, i, got[i], w)
				}
			}
		}
	}
}

// TestNativeConvertedAgreement runs Performer and Linformer conversions of
// a BERT graph (custom ai.linearize ops that ship as model-local
// functions) in both backends: onnxruntime executes the function bodies,
// the native backend its Go kernels or, with InlineFunctions, the same
// bodies.
func TestNativeConvertedAgreement(t *testing.T) {
	needORT(t)
	cfg := models.TinyConfig()
	_, perf, lin := tinyConversions(t, cfg, 64)
	feeds := bertInputs(2, 24, cfg.Vocab, 8)
	for _, c := range []struct {
		name string
		m    *onnxpb.ModelProto
	}{{"performer", perf}, {"linformer", lin}} {
		if len(c.m.Functions) == 0 {
			t.Fatalf("%s: the converted model has no model-local functions", c.name)
		}
		ref, err := NewORTSession(c.m, Options{Threads: 2})
		if err != nil {
			t.Fatal(err)
		}
		for _, inline := range []bool{false, true} {
			nat, err := NewNativeSessionWith(c.m, NativeOptions{Options: Options{Threads: 2}, InlineFunctions: inline})
			if err != nil {
				t.Fatalf("%s inline=%v: %v", c.name, inline, err)
			}
			custom := 0
			for _, pn := range nat.(*nativeSession).plan {
				if pn.node.GetDomain() == ops.Domain {
					custom++
				}
			}
			if (custom > 0) == inline {
				t.Errorf("%s inline=%v: %d %s nodes in the plan", c.name, inline, custom, ops.Domain)
			}
			diffs, err := CompareSessions(nat, ref, feeds)
			if err != nil {
				t.Fatalf("%s inline=%v: %v", c.name, inline, err)
			}
			for _, d := range diffs {
				if !d.OK(1e-4) {
					t.Errorf("%s inline=%v: output %q: %v", c.name, inline, d.Name, d.Diff)
				} else {
					t.Logf("%s inline=%v: output %q: %v", c.name, inline, d.Name, d.Diff)
				}
			}
			nat.Close()
		}
		ref.Close()
	}
}
