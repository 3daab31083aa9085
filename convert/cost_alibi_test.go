package convert_test

import (
	"bytes"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/onnx"
)

// TestCostModelAlibi: a global ALiBi encoder (jina-embeddings-v2's form)
// is priced as the rewrites treat it. Local-pooled, which keeps the bias,
// converts every block, and the cost model prices the whole model as
// local-pooled layers; the other conversions convert none (checked by
// running each rewrite), and the cost model prices them as the original
// and gives them no crossover.
func TestCostModelAlibi(t *testing.T) {
	m, err := onnx.Load(filepath.Join("..", "testdata", "fixtures", "longctx", "jina_v2_alibi.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	d, notes, err := convert.ModelDims(m)
	if err != nil {
		t.Fatal(err)
	}
	if d.Layers != 2 || d.AlibiLayers != 2 || d.DenseLayers != 0 || d.WindowLayers != 0 {
		t.Fatalf("dims %+v, want 2 layers, both global ALiBi", d)
	}
	if len(notes) == 0 || !strings.Contains(notes[0], "2 are global ALiBi (local-pooled converts them keeping the bias") {
		t.Errorf("notes %q", notes)
	}

	// What each rewrite does with the blocks.
	lp, rep, err := convert.ToLocalPooled(m, convert.LocalPooledOptions{})
	if err != nil || lp == nil || len(rep.Converted) != 2 {
		t.Fatalf("local-pooled: %v; report %+v", err, rep)
	}
	_, rep, err = convert.ToPerformer(m, convert.PerformerOptions{})
	if err == nil && len(rep.Converted) != 0 {
		t.Fatalf("performer converted %d ALiBi blocks", len(rep.Converted))
	}

	c := convert.NewCostModel(d, nil, convert.Weights{})
	for _, n := range []int{512, 8192} {
		if got, want := c.Total(convert.LocalPooled, n), int64(d.Layers)*c.Layer(convert.LocalPooled, n).Total; got != want {
			t.Errorf("n = %d: local-pooled model %d MACs, want %d (every layer converted)", n, got, want)
		}
		for _, f := range []convert.Form{convert.Performer, convert.Linformer, convert.Hedgehog, convert.Lara} {
			if got, want := c.Total(f, n), c.Total(convert.Original, n); got != want {
				t.Errorf("n = %d: %s model %d MACs, want the original's %d (no block converted)", n, f, got, want)
			}
		}
	}
	var buf bytes.Buffer
	if err := c.WriteCostTable(&buf, []int{512, 8192}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"performer none (converts no block)", "hedgehog none (converts no block)", "local-pooled " + strconv.Itoa(c.Crossover(convert.LocalPooled))} {
		if !strings.Contains(out, want) {
			t.Errorf("cost table lacks %q:\n%s", want, out)
		}
	}
	if x := c.Crossover(convert.LocalPooled); x <= 0 || x > 8192 {
		t.Errorf("local-pooled crossover %d", x)
	}
}

// TestModelDimsGatedNote: ModelDims reads a gated FFN's widths, the
// summed width of the products reading the hidden state and the width of
// the one writing it, and says so in a note naming the weights, for the
// exporters' packed form (ModernBERT: hidden 32, intermediate 64 in
// gen_fixtures.py, so Wi [32, 128] and Wo [64, 32]) and the form with
// separate input and gate weights (nomic-bert: fc11 and fc12 [32, 64], fc2
// [64, 32] in gen_longctx.py); a plain FFN (BERT: intermediate 64) and
// ConvBERT, whose span-conv weights are not an FFN, get no such note and
// FFNOut 0.
func TestModelDimsGatedNote(t *testing.T) {
	for _, tc := range []struct {
		file        string
		ffn, ffnOut int
		want        string
	}{
		{"modernbert_eager_op17.onnx", 128, 64, "weights [32, 128] in, [64, 32] out, priced n·h·(128 + 64) MACs"},
		{"modernbert_sdpa_dynamo_op18.onnx", 128, 64, "weights [32, 128] in, [64, 32] out"},
		{"longctx/nomic_bert.onnx", 128, 64, "two weights [32, 64] in per [64, 32] out, priced n·h·(128 + 64) MACs"},
		{"bert_eager_op17.onnx", 64, 0, ""},
		{"convbert_eager_op17.onnx", 0, 0, ""},
	} {
		t.Run(tc.file, func(t *testing.T) {
			m, err := onnx.Load("../testdata/fixtures/" + tc.file)
			if err != nil {
				t.Fatal(err)
			}
			d, notes, err := convert.ModelDims(m)
			if err != nil {
				t.Fatal(err)
			}
			if (tc.ffn > 0 && d.FFN != tc.ffn) || d.FFNOut != tc.ffnOut {
				t.Errorf("FFN %d, FFNOut %d; want %d, %d", d.FFN, d.FFNOut, tc.ffn, tc.ffnOut)
			}
			var gated []string
			for _, n := range notes {
				if strings.Contains(n, "gated") {
					gated = append(gated, n)
				}
			}
			switch {
			case tc.want == "" && len(gated) > 0:
				t.Errorf("a plain FFN noted as gated: %q", gated)
			case tc.want != "" && (len(gated) != 1 || !strings.Contains(gated[0], tc.want)):
				t.Errorf("gated notes %q, want one with %q", gated, tc.want)
			}
		})
	}
}

// TestModelDimsPublishedPrecisions reads the FFN widths of the published
// precision forms (float16 by onnxconverter-common and onnxruntime's
// transformers tools, int8 by dynamic quantization — MatMulInteger —,
// QDQ and weight-only int8 — DequantizeLinear before the MatMul) and
// requires the widths ModelDims reads from the float32 export they were
// made from, without the note that no FFN weight was found.
func TestModelDimsPublishedPrecisions(t *testing.T) {
	files, err := filepath.Glob("../testdata/fixtures/published/*.onnx")
	if err != nil || len(files) < 10 {
		t.Fatalf("published fixtures: %d files, %v", len(files), err)
	}
	for _, file := range files {
		base := filepath.Base(file)
		source, _, _ := strings.Cut(base, ".")
		t.Run(base, func(t *testing.T) {
			ref, err := onnx.Load("../testdata/fixtures/" + source + ".onnx")
			if err != nil {
				t.Fatal(err)
			}
			want, _, err := convert.ModelDims(ref)
			if err != nil {
				t.Fatal(err)
			}
			m, err := onnx.Load(file)
			if err != nil {
				t.Fatal(err)
			}
			got, notes, err := convert.ModelDims(m)
			if err != nil {
				t.Fatal(err)
			}
			if got.FFN != want.FFN || got.FFNOut != want.FFNOut {
				t.Errorf("FFN %d, FFNOut %d; the float32 source %s.onnx: %d, %d (notes %q)", got.FFN, got.FFNOut, source, want.FFN, want.FFNOut, notes)
			}
			for _, n := range notes {
				if strings.Contains(n, "no FFN MatMul weight") {
					t.Errorf("note %q", n)
				}
			}
		})
	}
}

// TestModelDimsComputedWeights: a model whose weights are computed at run
// time (jina-embeddings-v3's export: W + B[task]·A[task] for a task_id
// input) has the widths of its configuration (gen_fixtures.py: hidden 32,
// 4 heads of 8, FFN 64, not gated), those of the same model exported
// with constant weights, and no FFN width assumed.
func TestModelDimsComputedWeights(t *testing.T) {
	want := convert.Dims{Layers: 2, Hidden: 32, Heads: 4, HeadDim: 8, FFN: 64}
	for _, file := range []string{"jinav3lora_eager_op17.onnx", "jinav3lora_sdpa_op17.onnx", "jinav3_eager_op17.onnx"} {
		m, err := onnx.Load("../testdata/fixtures/" + file)
		if err != nil {
			t.Fatal(err)
		}
		got, notes, err := convert.ModelDims(m)
		if err != nil {
			t.Fatal(err)
		}
		if got.Layers != want.Layers || got.Hidden != want.Hidden || got.Heads != want.Heads || got.HeadDim != want.HeadDim ||
			got.FFN != want.FFN || got.FFNOut != want.FFNOut || len(notes) != 0 {
			t.Errorf("%s: %+v, notes %q; want %+v and no notes", file, got, notes, want)
		}
	}
}
