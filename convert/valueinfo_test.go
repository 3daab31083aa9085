package convert

import (
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/models"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
	"google.golang.org/protobuf/proto"
)

// Files written by fp16/int8 conversion tools (onnxconverter_common's
// float16, onnxruntime's quantize_dynamic) carry value_info entries whose
// dimensions are symbolic placeholders (unk__11), and files edited by hand
// or exported at one fixed size may declare numbers that are wrong for the
// graph as it computes. Facts proved from constants and operators must win
// over such declarations: the tests below compare the conversion of a
// model that declares every intermediate value with the conversion of the
// same model without value_info, an independent reference.

// vitBERT is a 2-layer BERT (4 heads of size 8) whose head count and head
// size differ, so that a swap of the two is seen.
func vitBERT(t *testing.T) *onnxpb.ModelProto {
	t.Helper()
	cfg := models.Config{Vocab: 60, Hidden: 32, Heads: 4, Layers: 2, Intermediate: 64,
		MaxPositions: 32, TypeVocab: 2, Opset: 17, Seed: 11, InitStd: 0.2}
	m, err := models.BERT(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// bertFeeds: batch 2, sequence 7, the last 2 positions of row 1 padding.
func bertFeeds(batch, seq int) map[string]*onnx.Tensor {
	ids := make([]int64, batch*seq)
	types := make([]int64, batch*seq)
	mask := make([]int64, batch*seq)
	for i := range ids {
		ids[i] = int64(3 + (i*7)%50)
		types[i] = int64(i % 2)
		mask[i] = 1
		if i/seq == batch-1 && i%seq >= seq-2 {
			mask[i] = 0
		}
	}
	return map[string]*onnx.Tensor{
		"input_ids":      onnx.NewInt64([]int{batch, seq}, ids),
		"token_type_ids": onnx.NewInt64([]int{batch, seq}, types),
		"attention_mask": onnx.NewInt64([]int{batch, seq}, mask),
	}
}

// declare returns a copy of m with a value_info entry for every value a
// node computes (graph outputs aside), its rank and element type those of
// a native run; dim(name, axis, size) writes each dimension.
func declare(t *testing.T, m *onnxpb.ModelProto, dim func(name string, axis, size int) onnx.Dim) *onnxpb.ModelProto {
	t.Helper()
	outs := map[string]bool{}
	for _, o := range m.Graph.Output {
		outs[o.GetName()] = true
	}
	var names []string
	seen := map[string]bool{}
	for _, n := range m.Graph.Node {
		for _, o := range n.Output {
			if o != "" && !outs[o] && !seen[o] {
				seen[o] = true
				names = append(names, o)
			}
		}
	}
	s, err := infer.Open("native", m, infer.Options{Threads: 1, Expose: names})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	vals, err := s.Run(bertFeeds(2, 7), names...)
	if err != nil {
		t.Fatal(err)
	}
	c := proto.Clone(m).(*onnxpb.ModelProto)
	c.Graph.ValueInfo = nil
	for _, name := range names {
		v := vals[name]
		if v == nil {
			t.Fatalf("value %s not computed", name)
		}
		dims := make([]onnx.Dim, len(v.Shape))
		for i, d := range v.Shape {
			dims[i] = dim(name, i, d)
		}
		c.Graph.ValueInfo = append(c.Graph.ValueInfo, onnx.MakeValueInfo(name, v.DType, dims))
	}
	return c
}

// placeholders declares every dimension of every value a fresh symbolic
// placeholder, as onnxconverter_common does when shape inference gives up.
func placeholders(t *testing.T, m *onnxpb.ModelProto) *onnxpb.ModelProto {
	k := 0
	return declare(t, m, func(string, int, int) onnx.Dim {
		k++
		return onnx.Dim{Value: -1, Param: fmt.Sprintf("unk__%d", k)}
	})
}

// wrongDims declares numbers that contradict the graph: batch 1 and
// sequence 128 (a fixed-size export), and head count and head size
// swapped (4 ↔ 8: their product is still the hidden size).
func wrongDims(t *testing.T, m *onnxpb.ModelProto) *onnxpb.ModelProto {
	return declare(t, m, func(_ string, _ int, d int) onnx.Dim {
		switch d {
		case 2:
			return onnx.Dim{Value: 1}
		case 7:
			return onnx.Dim{Value: 128}
		case 4:
			return onnx.Dim{Value: 8}
		case 8:
			return onnx.Dim{Value: 4}
		}
		return onnx.Dim{Value: int64(d)}
	})
}

// blockFacts is what a block's conversion depends on.
func blockFacts(b *Block) string {
	return fmt.Sprintf("layer %d form %s heads %d head_dim %d scale %.9g bias %s/%s factor %g causal %v convertible %v (%s) q %s k %s v %s out %s merged %s",
		b.Layer, b.Form, b.Heads, b.HeadDim, b.Scale, b.Bias, b.BiasValue, b.BiasFactor, b.Causal, b.Convertible, b.Reason, b.Q, b.K, b.V, b.Output, b.Merged)
}

func TestDeclaredShapesDoNotOverruleProofs(t *testing.T) {
	plain := vitBERT(t)
	ref, err := Detect(plain)
	if err != nil {
		t.Fatal(err)
	}
	if ref.Count() != 2 || len(ref.Convertible()) != 2 || ref.Blocks[0].Heads != 4 || ref.Blocks[0].HeadDim != 8 ||
		math.Abs(ref.Blocks[0].Scale-1/math.Sqrt(8)) > 1e-7 {
		t.Fatalf("reference detection:\n%s", ref.Explain())
	}
	in := bertFeeds(2, 7)
	type conv struct {
		name string
		to   func(*onnxpb.ModelProto) (*onnxpb.ModelProto, *Report, error)
	}
	convs := []conv{
		{"local-pooled", func(m *onnxpb.ModelProto) (*onnxpb.ModelProto, *Report, error) {
			return ToLocalPooled(m, LocalPooledOptions{Block: 2, Segments: 2})
		}},
		{"performer", func(m *onnxpb.ModelProto) (*onnxpb.ModelProto, *Report, error) {
			return ToPerformer(m, PerformerOptions{Features: 16, Seed: 5, FeatureMap: ops.FeaturesFavorPlus, Center: CenterOff})
		}},
		{"linformer", func(m *onnxpb.ModelProto) (*onnxpb.ModelProto, *Report, error) {
			return ToLinformer(m, LinformerOptions{Init: "gaussian", K: 4, MaxLen: 16, Seed: 5})
		}},
		{"lara", func(m *onnxpb.ModelProto) (*onnxpb.ModelProto, *Report, error) {
			return ToLARA(m, LaraOptions{Landmarks: 2, Seed: 5})
		}},
	}
	refOut := map[string]map[string]*onnx.Tensor{}
	refRep := map[string]*Report{}
	for _, c := range convs {
		out, rep, err := c.to(plain)
		if err != nil {
			t.Fatalf("%s of the model without value_info: %v", c.name, err)
		}
		if len(rep.Converted) != 2 {
			t.Fatalf("%s of the model without value_info: %+v", c.name, rep)
		}
		refRep[c.name] = rep
		refOut[c.name] = runNative(t, out, in)
	}
	for _, v := range []struct {
		name string
		m    *onnxpb.ModelProto
	}{{"placeholders", placeholders(t, plain)}, {"wrong-numbers", wrongDims(t, plain)}} {
		t.Run(v.name, func(t *testing.T) {
			d, err := Detect(v.m)
			if err != nil {
				t.Fatal(err)
			}
			if d.Count() != ref.Count() {
				t.Fatalf("%d blocks, want %d:\n%s", d.Count(), ref.Count(), d.Explain())
			}
			for i, b := range d.Blocks {
				if got, want := blockFacts(b), blockFacts(ref.Blocks[i]); got != want {
					t.Errorf("block %d:\n got %s\nwant %s", i, got, want)
				}
			}
			for _, c := range convs {
				out, rep, err := c.to(v.m)
				if err != nil {
					t.Errorf("%s: %v", c.name, err)
					continue
				}
				if !reflect.DeepEqual(rep, refRep[c.name]) {
					t.Errorf("%s report:\n got %+v\nwant %+v", c.name, rep, refRep[c.name])
				}
				got := runNative(t, out, in)
				for name, want := range refOut[c.name] {
					if dd := infer.CompareTensors(got[name], want); dd.Mismatch != "" || dd.MaxAbs != 0 {
						t.Errorf("%s output %s differs from the conversion without value_info: %v", c.name, name, dd)
					}
				}
			}
		})
	}
}

// TestContradictedDeclarationExplained: --explain says which declared
// shapes were ignored because the graph proves other sizes.
func TestContradictedDeclarationExplained(t *testing.T) {
	d, err := Detect(wrongDims(t, vitBERT(t)))
	if err != nil {
		t.Fatal(err)
	}
	ex := d.Explain()
	if !strings.Contains(ex, "note: declared shape [1 8 128 4] of /encoder/layer.0/attention/self/Transpose_q_output_0 (output of Transpose /encoder/layer.0/attention/self/Transpose_q) contradicts [1 4 128 8], the dims") {
		t.Errorf("explain does not report the ignored declarations:\n%s", ex)
	}
	d, err = Detect(placeholders(t, vitBERT(t)))
	if err != nil {
		t.Fatal(err)
	}
	if ex := d.Explain(); strings.Contains(ex, "declared shape") {
		t.Errorf("placeholders contradict nothing, yet:\n%s", ex)
	}
}

// TestRealGraphsIgnoreDeclarations: on every real-exporter fixture (and
// corpus model, when present) that declares value_info, Detect finds the
// same blocks with the same heads, head size, scale and bias when the
// declarations are deleted, and when every declared dim is replaced by a
// symbolic placeholder (as fp16/int8 conversion tools write them). Before
// proofs won over declarations, 40 of the 41 such models lost every
// convertible block to the placeholders, and the SDPA dynamo exports lost
// their blocks without value_info.
func TestRealGraphsIgnoreDeclarations(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("..", "testdata", "fixtures", "*.onnx"))
	more, _ := filepath.Glob(filepath.Join("..", "..", "shared", "corpus", "ort-fusion", "*.onnx"))
	files = append(files, more...)
	summary := func(m *onnxpb.ModelProto) string {
		d, err := Detect(m)
		if err != nil {
			return err.Error()
		}
		var sb strings.Builder
		for _, b := range d.Blocks {
			sb.WriteString(blockFacts(b) + "\n")
		}
		return sb.String()
	}
	checked := 0
	for _, f := range files {
		m, err := onnx.Load(f)
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Graph.ValueInfo) == 0 {
			continue
		}
		checked++
		stripped := proto.Clone(m).(*onnxpb.ModelProto)
		stripped.Graph.ValueInfo = nil
		symbolic := proto.Clone(m).(*onnxpb.ModelProto)
		k := 0
		for _, vi := range symbolic.Graph.ValueInfo {
			if tt := vi.GetType().GetTensorType(); tt != nil && tt.Shape != nil {
				for _, d := range tt.Shape.Dim {
					k++
					d.Value = &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: fmt.Sprintf("unk__%d", k)}
				}
			}
		}
		want := summary(m)
		if want == "" {
			continue
		}
		for name, v := range map[string]*onnxpb.ModelProto{"without value_info": stripped, "with placeholder dims": symbolic} {
			if got := summary(v); got != want {
				t.Errorf("%s %s:\n got %s\nwant %s", filepath.Base(f), name, got, want)
			}
		}
	}
	if checked < 20 {
		t.Errorf("only %d models with value_info checked", checked)
	}
}
