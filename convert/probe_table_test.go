package convert

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// widenEmbeddings grows every table of m the input ids are looked up in
// (Gather(table, input_ids)) to the fewest rows that hold more than elems
// values: its rows as they were, then zeros. The ids the probe feeds stay
// within the original rows, so the grown model computes what m computes.
func widenEmbeddings(t *testing.T, m *onnxpb.ModelProto, elems int64) (grown []string) {
	t.Helper()
	ix := onnx.NewIndex(m.Graph)
	for _, n := range m.Graph.Node {
		if n.GetOpType() != "Gather" || len(n.Input) != 2 || n.Input[1] != "input_ids" {
			continue
		}
		tp := ix.Initializers[n.Input[0]]
		if tp == nil || len(tp.Dims) != 2 || tp.Dims[0]*tp.Dims[1] > elems {
			continue
		}
		rows := elems/tp.Dims[1] + 1
		table, err := onnx.DecodeTensor(tp)
		if err != nil {
			t.Fatal(err)
		}
		raw := onnx.EncodeRaw(table)
		big := make([]byte, rows*int64(len(raw))/tp.Dims[0])
		copy(big, raw)
		tp.Dims[0] = rows
		tp.RawData, tp.FloatData, tp.Int32Data = big, nil, nil
		grown = append(grown, tp.GetName())
	}
	return grown
}

// TestProbeLargeEmbeddingTable: a real vocabulary makes the embedding
// table larger than the probe decodes whole (ModernBERT-base's 50368 ×
// 768 is 38.7M values, jina-v2's 61056 × 768 is 46.9M, the bound is
// 2^25 = 33.6M), and TorchScript exports take their band and ALiBi masks'
// length from the embeddings' shape. The window and the slopes read from
// the fixture grown past the bound are those of the fixture as it is.
func TestProbeLargeEmbeddingTable(t *testing.T) {
	for _, file := range []string{"modernbert_eager_op17.onnx", "modernbert_sdpa_op14.onnx", "longctx/jina_v2_alibi.onnx"} {
		t.Run(file, func(t *testing.T) {
			path := filepath.Join(fixtureDir, filepath.FromSlash(file))
			want, err := Detect(loadModel(t, path))
			if err != nil {
				t.Fatal(err)
			}
			m := loadModel(t, path)
			if grown := widenEmbeddings(t, m, maxProbeElems); len(grown) == 0 {
				t.Fatal("no Gather(table, input_ids) to grow")
			}
			got, err := Detect(m)
			if err != nil {
				t.Fatal(err)
			}
			if got.Count() != want.Count() {
				t.Fatalf("%d blocks, want %d\n%s", got.Count(), want.Count(), got.Explain())
			}
			windows := 0
			for i, w := range want.Blocks {
				g := got.Blocks[i]
				if w.Window != nil {
					windows++
				}
				if fmt.Sprint(g.Window) != fmt.Sprint(w.Window) || fmt.Sprint(g.Alibi) != fmt.Sprint(w.Alibi) || g.Bias != w.Bias || g.Convertible != w.Convertible {
					t.Errorf("block %d: window %v alibi %v bias %s convertible %v (%s), want window %v alibi %v bias %s convertible %v",
						i, g.Window, g.Alibi, g.Bias, g.Convertible, g.Reason, w.Window, w.Alibi, w.Bias, w.Convertible)
				}
			}
			if windows == 0 && len(want.Blocks[0].Alibi) == 0 {
				t.Fatal("the fixture has neither a window nor ALiBi: the test reads nothing")
			}
		})
	}
}
