package convert

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

// TestFixturesLocalPooled: every convertible exporter fixture, text,
// vision and audio, converts to LocalPooledAttention and
//   - with at least as many segments as tokens the op is exact, so the
//     converted model gives the original's outputs in onnxruntime (1e-5);
//   - a compressing conversion (blocks of 2, 2 segments, both sinks) and
//     the pooled Linformer (no local part, first sink) are
//     padding-invariant (text: padded vs unpadded; fixed-length text: the
//     padded tokens' ids do not matter) and, for text, agree between
//     onnxruntime (function body) and the native backend (Go kernel);
//     unmasked vision/audio models run to finite outputs.
//
// Its loop over the fixtures is TestFixturesConvert's; the checks differ.
func TestFixturesLocalPooled(t *testing.T) {
	needORT(t)
	for _, f := range convertibleFixtures(t) {
		seq := f.seqLen()
		t.Run(f.File, func(t *testing.T) {
			m, full, want := fixtureReference(t, f, seq)
			exact, rep, err := ToLocalPooled(m, LocalPooledOptions{Block: 2, Segments: seq})
			if err != nil {
				t.Fatal(err)
			}
			if ownConverted(rep) != f.Convertible || rep.Op != ops.LocalPooledOp {
				t.Fatalf("converted %d blocks with %s, want %d: %+v", ownConverted(rep), rep.Op, f.Convertible, rep.Skipped)
			}
			if d := infer.CompareTensors(runORT(t, exact, full)["last_hidden_state"], want); !d.OK(1e-5) {
				t.Errorf("segments ≥ S (exact) vs original: %v", d)
			}
			if f.PaddingVariant != "" {
				// Not padding-invariant itself (see fixtureEntry): the
				// exact conversion matches it on padded inputs.
				checkPaddedExact(t, f, m, exact, seq, 1e-5)
				return
			}
			for name, o := range map[string]LocalPooledOptions{
				"local-pooled": {Block: 2, Segments: 2},
				"pooled":       {NoLocal: true, Segments: 2, Sinks: SinkFirst},
			} {
				cm, _, err := ToLocalPooled(m, o)
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case f.variableText():
					// 5 real tokens padded to 8 vs the same 5.
					checkPadding(t, name, f, cm, seq)
					full := fixtureFeeds(f, 2, seq, []int{seq, 6}, 11)
					nat, ort := runNative(t, cm, full), runORT(t, cm, full)
					for out, w := range ort {
						if d := infer.CompareTensors(nat[out], w); !d.OK(1e-4) {
							t.Errorf("%s output %s: native vs onnxruntime: %v", name, out, d)
						}
					}
				case f.masked():
					// A fixed length: the padded tokens' ids do not change
					// the outputs at the real tokens.
					checkPadIDs(t, name, f, cm, seq)
				default:
					// No mask (vision, audio): the compressed conversion runs
					// to finite outputs (the native backend lacks their
					// convolutions, issue 14).
					checkFinite(t, name, cm, full)
				}
			}
		})
	}
}

// TestCorpusLocalPooledExact: on the runnable corpus models (onnxruntime's
// fused Attention and MultiHeadAttention, keras2onnx BERT, Whisper), enough
// segments make the conversion exact.
func TestCorpusLocalPooledExact(t *testing.T) {
	dir := corpusDir(t)
	needORT(t)
	for _, c := range corpusRunnable {
		if c.file == "attention_mask_no_cast.onnx" {
			continue // every key masked by its constant mask (see TestCorpusLinformerIdentityExact)
		}
		t.Run(c.file, func(t *testing.T) {
			m := loadModel(t, filepath.Join(dir, c.file))
			in := modelFeeds(t, m, c.seq, 0, 3, true)
			cm, rep, err := ToLocalPooled(m, LocalPooledOptions{Block: 1, Segments: c.seq, Sinks: NoSinks})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Converted) == 0 {
				t.Fatalf("nothing converted: %+v", rep.Skipped)
			}
			got, want := runORT(t, cm, in), runORT(t, m, in)
			for name, w := range want {
				if d := infer.CompareTensors(got[name], w); !d.OK(1e-5) {
					t.Errorf("output %s: exact local-pooled vs original: %v", name, d)
				}
			}
		})
	}
}

func TestLocalPooledDeterministicAndOptions(t *testing.T) {
	m := loadModel(t, filepath.Join("..", "testdata", "bert-tiny.onnx"))
	encode := encodeWith(t, m, ToLocalPooled)
	a, b := encode(LocalPooledOptions{}), encode(LocalPooledOptions{})
	if !bytes.Equal(a, b) {
		t.Error("the same model and options gave different bytes")
	}
	if bytes.Equal(a, encode(LocalPooledOptions{Block: 32})) {
		t.Error("--block 32 gave the same model as the default 64")
	}
	out, rep, err := ToLocalPooled(m, LocalPooledOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Params != 0 || rep.Options.Block != 64 || rep.Options.Segments != 64 || rep.Options.Sinks != DefaultSinks {
		t.Errorf("defaults: params %d, options %v", rep.Params, rep.Options)
	}
	var nodes []*onnxpb.NodeProto
	for _, n := range out.Graph.Node {
		if n.GetOpType() == ops.LocalPooledOp {
			nodes = append(nodes, n)
		}
	}
	if len(nodes) != len(rep.Converted) || len(nodes) == 0 {
		t.Fatalf("%d LocalPooledAttention nodes, report says %d converted", len(nodes), len(rep.Converted))
	}
	for _, c := range []struct {
		o    LocalPooledOptions
		want string
	}{
		{LocalPooledOptions{Block: -2}, "block -2"},
		{LocalPooledOptions{Segments: -1}, "segments -1"},
		{LocalPooledOptions{Segments: 1 << 20}, "segments"},
		{LocalPooledOptions{Sinks: NoSinks | SinkFirst}, `sinks Sinks(5)`},
	} {
		if _, _, err := ToLocalPooled(m, c.o); err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "convert: ") {
			t.Errorf("%+v: error %v, want one naming %q", c.o, err, c.want)
		}
	}
}
