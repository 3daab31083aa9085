package convert

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

// Inline writes each op's function body into the graph: the result holds
// no ai.linearize node, function or import, and onnxruntime gives the
// function form's outputs (max abs difference at most 1e-6 of the
// largest output value) for every op: Performer (plain and centred),
// Linformer (Gaussian and pooled), local+pooled (with sinks, a far-field
// gate as convert long --far writes it, ALiBi), Hedgehog, LARA,
// WindowAttention (ModernBERT's local layers) and a float16 model's typed
// bodies.
func TestInlineMatchesFunctions(t *testing.T) {
	needORT(t)
	fixture := func(parts ...string) func(t *testing.T) *onnxpb.ModelProto {
		return func(t *testing.T) *onnxpb.ModelProto {
			return loadModel(t, filepath.Join(append([]string{"..", "testdata"}, parts...)...))
		}
	}
	bert := fixture("bert-tiny.onnx")
	cases := []struct {
		name string
		load func(t *testing.T) *onnxpb.ModelProto
		conv func(m *onnxpb.ModelProto) (*onnxpb.ModelProto, *Report, error)
		ops  []string
		attr string // an attribute some custom node must carry
	}{
		{"performer", bert, func(m *onnxpb.ModelProto) (*onnxpb.ModelProto, *Report, error) {
			return ToPerformer(m, PerformerOptions{Features: 16, Seed: 1, FeatureMap: ops.FeaturesFavorPlus, Center: CenterOff})
		}, []string{ops.PerformerOp}, ""},
		{"performer-default", bert, func(m *onnxpb.ModelProto) (*onnxpb.ModelProto, *Report, error) {
			return ToPerformer(m, PerformerOptions{Features: 16, Seed: 1})
		}, []string{ops.PerformerOp}, ""},
		{"linformer-gaussian", bert, func(m *onnxpb.ModelProto) (*onnxpb.ModelProto, *Report, error) {
			return ToLinformer(m, LinformerOptions{Init: "gaussian", K: 4, MaxLen: 16, Seed: 1})
		}, []string{ops.LinformerOp}, ""},
		{"linformer-pool", bert, func(m *onnxpb.ModelProto) (*onnxpb.ModelProto, *Report, error) {
			return ToLinformer(m, LinformerOptions{K: 3})
		}, []string{ops.LinformerOp}, ""},
		{"local-pooled", bert, func(m *onnxpb.ModelProto) (*onnxpb.ModelProto, *Report, error) {
			return ToLocalPooled(m, LocalPooledOptions{Block: 4, Segments: 2})
		}, []string{ops.LocalPooledOp}, ""},
		{"long-far", bert, func(m *onnxpb.ModelProto) (*onnxpb.ModelProto, *Report, error) {
			return ToLong(m, LongOptions{Window: 4, MaxLength: 256, Far: true, Segments: 2, FarBias: -0.5})
		}, []string{ops.LocalPooledOp}, "far_bias"},
		{"local-pooled-alibi", fixture("fixtures", "longctx", "jina_v2_alibi.onnx"), func(m *onnxpb.ModelProto) (*onnxpb.ModelProto, *Report, error) {
			return ToLocalPooled(m, LocalPooledOptions{Block: 4, Segments: 2})
		}, []string{ops.LocalPooledOp}, "alibi"},
		{"hedgehog", bert, func(m *onnxpb.ModelProto) (*onnxpb.ModelProto, *Report, error) {
			return ToHedgehog(m, HedgehogOptions{Block: 4, Features: 4, Seed: 1})
		}, []string{ops.HedgehogOp}, ""},
		{"lara", bert, func(m *onnxpb.ModelProto) (*onnxpb.ModelProto, *Report, error) {
			return ToLARA(m, LaraOptions{Landmarks: 2, Samples: 2, Seed: 1})
		}, []string{ops.LaraOp}, ""},
		{"window", fixture("fixtures", "modernbert_eager_op17.onnx"), func(m *onnxpb.ModelProto) (*onnxpb.ModelProto, *Report, error) {
			return ToWindow(m, WindowOptions{})
		}, []string{ops.WindowOp}, ""},
		{"modernbert-local-pooled", fixture("fixtures", "modernbert_eager_op17.onnx"), func(m *onnxpb.ModelProto) (*onnxpb.ModelProto, *Report, error) {
			return ToLocalPooled(m, LocalPooledOptions{Block: 4, Segments: 2})
		}, []string{ops.LocalPooledOp, ops.WindowOp}, ""},
		{"fp16-local-pooled", fixture("fixtures", "published", "minilm_eager_op17.fp16_ortx.onnx"), func(m *onnxpb.ModelProto) (*onnxpb.ModelProto, *Report, error) {
			return ToLocalPooled(m, LocalPooledOptions{Block: 4, Segments: 2})
		}, []string{ops.LocalPooledOp}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			conv, _, err := c.conv(c.load(t))
			if err != nil {
				t.Fatal(err)
			}
			have := map[string]bool{}
			for _, n := range conv.Graph.Node {
				if n.GetDomain() == ops.Domain {
					have[n.GetOpType()] = true
					if c.attr != "" && onnx.Attr(n, c.attr) != nil {
						have[c.attr] = true
					}
				}
			}
			if c.attr != "" && !have[c.attr] {
				t.Fatalf("test set-up: no custom node carries %s", c.attr)
			}
			for _, op := range c.ops {
				if !have[op] {
					t.Fatalf("test set-up: the conversion wrote no %s (%v)", op, have)
				}
			}
			for _, f := range conv.Functions {
				if len(f.AttributeProto) > 0 && conv.GetIrVersion() < ops.FunctionIRVersion {
					t.Errorf("ir_version %d with attribute defaults in %s, want ≥ %d", conv.GetIrVersion(), f.GetName(), ops.FunctionIRVersion)
				}
			}
			inl, err := Inline(conv)
			if err != nil {
				t.Fatal(err)
			}
			if len(inl.Functions) != 0 {
				t.Errorf("%d functions left", len(inl.Functions))
			}
			for _, o := range inl.OpsetImport {
				if o.GetDomain() == ops.Domain {
					t.Errorf("the inlined model still imports %s", ops.Domain)
				}
			}
			for _, n := range inl.Graph.Node {
				if n.GetDomain() != "" {
					t.Fatalf("node %s of domain %q left", n.GetName(), n.GetDomain())
				}
			}
			if _, err := onnx.Encode(inl); err != nil {
				t.Fatal(err)
			}
			feed := modelFeeds(t, conv, 16, 5, 3, false)
			want, got := runORT(t, conv, feed), runORT(t, inl, feed)
			if len(got) != len(want) {
				t.Fatalf("%d outputs, want %d", len(got), len(want))
			}
			for name, w := range want {
				wv, err := w.AsFloat64s()
				if err != nil {
					t.Fatal(err)
				}
				gv, err := got[name].AsFloat64s()
				if err != nil || len(gv) != len(wv) {
					t.Fatalf("output %s: %v (%d values, want %d)", name, err, len(gv), len(wv))
				}
				var diff, top float64
				for i := range wv {
					diff = math.Max(diff, math.Abs(gv[i]-wv[i]))
					top = math.Max(top, math.Abs(wv[i]))
				}
				if !(diff <= 1e-6*top) {
					t.Errorf("output %s: max abs difference %.3g, max value %.3g: want ≤ 1e-6 of it", name, diff, top)
				}
			}
		})
	}
}

// Inline refuses a model without custom ops and one whose custom node
// has no function, and leaves its input alone.
func TestInlineRefuses(t *testing.T) {
	m := loadModel(t, filepath.Join("..", "testdata", "bert-tiny.onnx"))
	if _, err := Inline(m); err == nil || !strings.Contains(err.Error(), "no ai.linearize node") {
		t.Errorf("plain model: %v", err)
	}
	conv, _, err := ToLocalPooled(m, LocalPooledOptions{Block: 4, Segments: 2})
	if err != nil {
		t.Fatal(err)
	}
	before, err := onnx.Encode(conv)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Inline(conv); err != nil {
		t.Fatal(err)
	}
	after, err := onnx.Encode(conv)
	if err != nil {
		t.Fatal(err)
	}
	if string(before) != string(after) {
		t.Error("Inline modified its input")
	}
	conv.Functions = nil
	if _, err := Inline(conv); err == nil || !strings.Contains(err.Error(), "defines no function") {
		t.Errorf("model without the functions: %v", err)
	}
}
