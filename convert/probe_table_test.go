package convert

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// Forms of a grown embedding table (widenEmbeddings).
const (
	tableFloat     = "float"      // the initializer itself
	tableQDQTensor = "qdq-tensor" // int8 through DequantizeLinear, one scale
	tableQDQColumn = "qdq-column" // int8 through DequantizeLinear, a scale per column (axis 1)
	tableQDQRow    = "qdq-row"    // int8 through DequantizeLinear, a scale per row (axis 0)
)

// widenEmbeddings grows every table of m the input ids are looked up in
// (Gather(table, input_ids)) to the fewest rows that hold more than elems
// values: its rows as they were, then zeros. The ids the probe feeds stay
// within the original rows, so the grown model computes what m computes.
// In the QDQ forms the grown table is int8 (zeros: the probe reads only
// the table's shape downstream) behind a DequantizeLinear, as onnxruntime's
// QDQ quantizer writes a quantized Gather.
func widenEmbeddings(t *testing.T, m *onnxpb.ModelProto, elems int64, form string) (grown []string) {
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
		rows, cols := elems/tp.Dims[1]+1, tp.Dims[1]
		grown = append(grown, tp.GetName())
		if form == tableFloat {
			table, err := onnx.DecodeTensor(tp)
			if err != nil {
				t.Fatal(err)
			}
			big := make([]byte, rows*cols*4)
			copy(big, onnx.EncodeRaw(table))
			tp.Dims[0] = rows
			tp.RawData, tp.FloatData = big, nil
			continue
		}
		q := tp.GetName() + "_quantized"
		scale, zero := []float32{0.01}, []int8{0}
		axis := int64(1)
		switch form {
		case tableQDQColumn:
			scale, zero = make([]float32, cols), make([]int8, cols)
		case tableQDQRow:
			scale, zero, axis = make([]float32, rows), make([]int8, rows), 0
		}
		for i := range scale {
			scale[i] = 0.01
		}
		shape := []int{}
		if len(scale) > 1 {
			shape = []int{len(scale)}
		}
		for name, v := range map[string]*onnx.Tensor{
			q + "_scale":      onnx.NewFloat(shape, scale),
			q + "_zero_point": {DType: onnx.Int8, Shape: shape, Data: zero},
		} {
			c, err := onnx.EncodeTensor(name, v)
			if err != nil {
				t.Fatal(err)
			}
			m.Graph.Initializer = append(m.Graph.Initializer, c)
		}
		m.Graph.Initializer = append(m.Graph.Initializer, &onnxpb.TensorProto{
			Name: proto.String(q), DataType: proto.Int32(int32(onnx.Int8)), Dims: []int64{rows, cols}, RawData: make([]byte, rows*cols)})
		dq := &onnxpb.NodeProto{Name: proto.String(q + "_dq"), OpType: proto.String("DequantizeLinear"),
			Input: []string{q, q + "_scale", q + "_zero_point"}, Output: []string{q + "_dequantized"},
			Attribute: []*onnxpb.AttributeProto{intAttr("axis", axis)}}
		m.Graph.Node = append([]*onnxpb.NodeProto{dq}, m.Graph.Node...)
		n.Input[0] = q + "_dequantized"
	}
	return grown
}

// TestProbeLargeEmbeddingTable: a real vocabulary makes the embedding
// table larger than the probe decodes whole (ModernBERT-base's 50368 ×
// 768 is 38.7M values, jina-v2's 61056 × 768 is 46.9M, the bound is
// 2^25 = 33.6M), and TorchScript exports take their band and ALiBi masks'
// length from the embeddings' shape. The window and the slopes read from
// the fixture grown past the bound, as float32 or int8 behind a per-tensor
// or per-column DequantizeLinear, are those of the fixture as it is; a
// scale per table row is refused (the block is read as not convertible,
// without an error).
func TestProbeLargeEmbeddingTable(t *testing.T) {
	for _, file := range []string{"modernbert_eager_op17.onnx", "modernbert_sdpa_op14.onnx", "longctx/jina_v2_alibi.onnx"} {
		path := filepath.Join(fixtureDir, filepath.FromSlash(file))
		want, err := Detect(loadModel(t, path))
		if err != nil {
			t.Fatal(err)
		}
		for _, form := range []string{tableFloat, tableQDQTensor, tableQDQColumn, tableQDQRow} {
			t.Run(file+"/"+form, func(t *testing.T) {
				m := loadModel(t, path)
				if grown := widenEmbeddings(t, m, maxProbeElems, form); len(grown) == 0 {
					t.Fatal("no Gather(table, input_ids) to grow")
				}
				got, err := Detect(m)
				if err != nil {
					t.Fatal(err)
				}
				if got.Count() != want.Count() {
					t.Fatalf("%d blocks, want %d\n%s", got.Count(), want.Count(), got.Explain())
				}
				read := 0
				for i, w := range want.Blocks {
					g := got.Blocks[i]
					if w.Window == nil && w.Alibi == nil {
						continue
					}
					read++
					if form == tableQDQRow {
						if g.Window != nil || g.Alibi != nil || g.Convertible {
							t.Errorf("block %d: window %v alibi %v convertible %v, want it refused", i, g.Window, g.Alibi, g.Convertible)
						}
						continue
					}
					if fmt.Sprint(g.Window) != fmt.Sprint(w.Window) || fmt.Sprint(g.Alibi) != fmt.Sprint(w.Alibi) || g.Bias != w.Bias {
						t.Errorf("block %d: window %v alibi %v bias %s (%s), want window %v alibi %v bias %s",
							i, g.Window, g.Alibi, g.Bias, g.Reason, w.Window, w.Alibi, w.Bias)
					}
				}
				if read == 0 {
					t.Fatal("the fixture has neither a window nor ALiBi: the test reads nothing")
				}
			})
		}
	}
}
