package convert

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/kernels"
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
// the fixture grown past the bound, as float32 or as int8 behind a
// DequantizeLinear with one scale, a scale per column or a scale per row,
// are those of the fixture as it is.
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

// TestLookupRowsValues: the rows a lookup decodes, dequantized with one
// scale, a scale per column or a scale (and zero point) per row, then
// gathered with the renumbered indices, equal (q − zero point)·scale of
// the whole table's rows computed here element by element.
func TestLookupRowsValues(t *testing.T) {
	const rows, cols = 5, 3
	q := []int8{-7, 3, 12, 0, 1, -2, 100, -100, 5, 9, 8, 7, -1, -1, 4}
	ids := []int64{4, 0, -1, 2, 4} // -1 is row 4
	for _, c := range []struct {
		name  string
		axis  int64
		scale []float32
		zero  []int8
	}{
		{"tensor", 1, []float32{0.5}, []int8{1}},
		{"column", 1, []float32{0.5, 0.25, 2}, []int8{1, -3, 0}},
		{"row", 0, []float32{0.5, 0.25, 2, 1, 0.125}, []int8{1, -3, 0, 7, -8}},
	} {
		t.Run(c.name, func(t *testing.T) {
			shape := []int{}
			if len(c.scale) > 1 {
				shape = []int{len(c.scale)}
			}
			g := &onnxpb.GraphProto{}
			for name, v := range map[string]*onnx.Tensor{
				"q":     {DType: onnx.Int8, Shape: []int{rows, cols}, Data: q},
				"scale": onnx.NewFloat(shape, c.scale),
				"zero":  {DType: onnx.Int8, Shape: shape, Data: c.zero},
			} {
				tp, err := onnx.EncodeTensor(name, v)
				if err != nil {
					t.Fatal(err)
				}
				g.Initializer = append(g.Initializer, tp)
			}
			dq := &onnxpb.NodeProto{Name: proto.String("dq"), OpType: proto.String("DequantizeLinear"),
				Input: []string{"q", "scale", "zero"}, Output: []string{"w"}, Attribute: []*onnxpb.AttributeProto{intAttr("axis", c.axis)}}
			g.Node = []*onnxpb.NodeProto{dq}
			m := &onnxpb.ModelProto{Graph: g, OpsetImport: []*onnxpb.OperatorSetIdProto{{Version: proto.Int64(13)}}}
			ix := onnx.NewIndex(g)
			p := newProber(m, ix)
			p.cache[1], p.feeds[1] = map[string]*onnx.Tensor{}, map[string]*onnx.Tensor{}
			idx := onnx.NewInt64([]int{1, len(ids)}, ids)
			part, renum, picked, err := tableRows(ix.Initializers["q"], idx)
			if err != nil {
				t.Fatal(err)
			}
			if len(picked) != 3 {
				t.Errorf("picked %v, want the 3 distinct rows", picked)
			}
			deq, err := p.dequantizeRows(dq, part, picked, rows, 1, 0)
			if err != nil {
				t.Fatal(err)
			}
			gather, err := kernels.Lookup("", "Gather", 13)
			if err != nil {
				t.Fatal(err)
			}
			out, err := gather(&kernels.Context{Node: &onnxpb.NodeProto{OpType: proto.String("Gather")}, Opset: 13}, []*onnx.Tensor{deq, renum})
			if err != nil {
				t.Fatal(err)
			}
			got := out[0].Floats()
			if fmt.Sprint(out[0].Shape) != fmt.Sprint([]int{1, len(ids), cols}) {
				t.Fatalf("shape %v", out[0].Shape)
			}
			for i, id := range ids {
				r := int((id + rows) % rows)
				for j := range cols {
					k := 0
					switch {
					case c.axis == 0:
						k = r
					case len(c.scale) > 1:
						k = j
					}
					want := (float64(q[r*cols+j]) - float64(c.zero[k])) * float64(c.scale[k])
					if float64(got[i*cols+j]) != want {
						t.Errorf("id %d col %d: %g, want %g", id, j, got[i*cols+j], want)
					}
				}
			}
		})
	}
}

// TestLookupRowsShortScale: a scale or zero point per row with fewer
// entries than the table has rows is refused, as DequantizeLinear on the
// whole table refuses it, even when every row read has an entry (rows 0
// and 1 of five, three scales).
func TestLookupRowsShortScale(t *testing.T) {
	g := &onnxpb.GraphProto{}
	for name, v := range map[string]*onnx.Tensor{
		"q":     {DType: onnx.Int8, Shape: []int{5, 2}, Data: make([]int8, 10)},
		"scale": onnx.NewFloat([]int{3}, []float32{0.5, 1, 2}),
	} {
		tp, err := onnx.EncodeTensor(name, v)
		if err != nil {
			t.Fatal(err)
		}
		g.Initializer = append(g.Initializer, tp)
	}
	dq := &onnxpb.NodeProto{Name: proto.String("dq"), OpType: proto.String("DequantizeLinear"),
		Input: []string{"q", "scale"}, Output: []string{"w"}, Attribute: []*onnxpb.AttributeProto{intAttr("axis", 0)}}
	g.Node = []*onnxpb.NodeProto{dq}
	m := &onnxpb.ModelProto{Graph: g, OpsetImport: []*onnxpb.OperatorSetIdProto{{Version: proto.Int64(13)}}}
	ix := onnx.NewIndex(g)
	p := newProber(m, ix)
	p.cache[1], p.feeds[1] = map[string]*onnx.Tensor{}, map[string]*onnx.Tensor{}
	part, _, picked, err := tableRows(ix.Initializers["q"], onnx.NewInt64([]int{2}, []int64{1, 0}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.dequantizeRows(dq, part, picked, 5, 1, 0); err == nil || !strings.Contains(err.Error(), "for a table of 5 rows") {
		t.Errorf("err %v, want the per-row scale refused for a table of 5 rows", err)
	}
}
