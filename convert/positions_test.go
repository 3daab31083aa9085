package convert_test

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/models"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

func needORT(t *testing.T) {
	t.Helper()
	if err := infer.ORTAvailable(); err != nil {
		t.Skipf("onnxruntime not available (install with scripts/setup.sh): %v", err)
	}
}

func smallBERT(t *testing.T, maxPos int) *onnxpb.ModelProto {
	t.Helper()
	cfg := models.Config{Vocab: 60, Hidden: 32, Heads: 4, Layers: 1, Intermediate: 64,
		MaxPositions: maxPos, TypeVocab: 2, Opset: 17, Seed: 9, InitStd: 0.2}
	m, err := models.BERT(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func nodeByName(g *onnxpb.GraphProto, name string) (int, *onnxpb.NodeProto) {
	for i, n := range g.Node {
		if n.GetName() == name {
			return i, n
		}
	}
	return -1, nil
}

func str(s string) *string { return &s }

// withRangeIDs replaces the Slice of the position_ids buffer by
// Unsqueeze(Range(0, seq_len, 1), 0), the form older exporters write.
func withRangeIDs(t *testing.T, m *onnxpb.ModelProto) {
	g := m.Graph
	i, sl := nodeByName(g, "/embeddings/Slice")
	if sl == nil {
		t.Fatal("builder changed: no /embeddings/Slice")
	}
	zero, _ := onnx.EncodeTensor("range_start", onnx.NewInt64([]int{}, []int64{0}))
	one, _ := onnx.EncodeTensor("range_delta", onnx.NewInt64([]int{}, []int64{1}))
	axes, _ := onnx.EncodeTensor("range_axes", onnx.NewInt64([]int{1}, []int64{0}))
	g.Initializer = append(g.Initializer, zero, one, axes)
	_, gat := nodeByName(g, "/embeddings/Gather") // the scalar seq_len
	rng := &onnxpb.NodeProto{OpType: str("Range"), Name: str("range"), Input: []string{"range_start", gat.Output[0], "range_delta"}, Output: []string{"range_out"}}
	unsq := &onnxpb.NodeProto{OpType: str("Unsqueeze"), Name: str("range_unsq"), Input: []string{"range_out", "range_axes"}, Output: sl.Output}
	g.Node[i] = rng
	g.Node = append(g.Node[:i+1], append([]*onnxpb.NodeProto{unsq}, g.Node[i+1:]...)...)
	onnx.RemoveDeadNodes(g)
}

// withStoredTable stores the position table as dt (int8 with a scale, or
// float16) and reads it through DequantizeLinear or Cast, before the
// Gather or (after) on the gathered rows.
func withStoredTable(dt onnx.DataType, after bool) func(*testing.T, *onnxpb.ModelProto) {
	return func(t *testing.T, m *onnxpb.ModelProto) {
		g := m.Graph
		const name = "embeddings.position_embeddings.weight"
		var gather *onnxpb.NodeProto
		for _, n := range g.Node {
			if n.GetOpType() == "Gather" && n.Input[0] == name {
				gather = n
			}
		}
		if gather == nil {
			t.Fatal("builder changed: no Gather of the position table")
		}
		tab := table(t, m, name)
		var stored *onnx.Tensor
		var read *onnxpb.NodeProto
		if dt == onnx.Float16 {
			h := make([]uint16, tab.Len())
			for i, x := range tab.Floats() {
				h[i] = onnx.FloatToHalf(x)
			}
			stored = &onnx.Tensor{DType: dt, Shape: tab.Shape, Data: h}
			read = &onnxpb.NodeProto{OpType: str("Cast"), Name: str("pos_read"), Input: []string{""}, Attribute: []*onnxpb.AttributeProto{{Name: str("to"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(int64(onnx.Float))}}}
		} else {
			scale := 0.0
			for _, x := range tab.Floats() {
				scale = math.Max(scale, math.Abs(float64(x))/127)
			}
			q := make([]int8, tab.Len())
			for i, x := range tab.Floats() {
				q[i] = int8(math.RoundToEven(float64(x) / scale))
			}
			stored = &onnx.Tensor{DType: dt, Shape: tab.Shape, Data: q}
			sc, _ := onnx.EncodeTensor("pos_scale", onnx.NewFloat([]int{}, []float32{float32(scale)}))
			zp, _ := onnx.EncodeTensor("pos_zero", &onnx.Tensor{DType: onnx.Int8, Shape: []int{}, Data: []int8{0}})
			g.Initializer = append(g.Initializer, sc, zp)
			read = &onnxpb.NodeProto{OpType: str("DequantizeLinear"), Name: str("pos_read"), Input: []string{"", "pos_scale", "pos_zero"}}
		}
		for i, init := range g.Initializer {
			if init.GetName() == name {
				enc, err := onnx.EncodeTensor(name, stored)
				if err != nil {
					t.Fatal(err)
				}
				g.Initializer[i] = enc
			}
		}
		if after {
			read.Input = append([]string{"pos_rows"}, read.Input[1:]...)
			read.Output = []string{gather.Output[0]}
			gather.Output[0] = "pos_rows"
		} else {
			read.Input = append([]string{name}, read.Input[1:]...)
			read.Output = []string{"pos_table"}
			gather.Input[0] = "pos_table"
		}
		at := 0
		for i, n := range g.Node {
			if n == gather {
				at = i
			}
		}
		if after {
			at++
		}
		g.Node = append(g.Node[:at], append([]*onnxpb.NodeProto{read}, g.Node[at:]...)...)
	}
}

// elems returns a table's stored values widened to float64 (exactly).
func elems(t *testing.T, x *onnx.Tensor) []float64 {
	t.Helper()
	out := make([]float64, x.Len())
	switch d := x.Data.(type) {
	case []float32:
		for i, v := range d {
			out[i] = float64(v)
		}
	case []uint16:
		for i, v := range d {
			out[i] = float64(onnx.HalfToFloat(v))
		}
	case []int8:
		for i, v := range d {
			out[i] = float64(v)
		}
	default:
		t.Fatalf("table of type %s", onnx.TypeName(x.DType))
	}
	return out
}

// withInputIDs makes position_ids a graph input [1, sequence].
func withInputIDs(t *testing.T, m *onnxpb.ModelProto) {
	g := m.Graph
	_, sl := nodeByName(g, "/embeddings/Slice")
	old := sl.Output[0]
	for _, n := range g.Node {
		for j, in := range n.Input {
			if in == old {
				n.Input[j] = "position_ids"
			}
		}
	}
	g.Input = append(g.Input, onnx.MakeValueInfo("position_ids", onnx.Int64, []onnx.Dim{{Value: 1}, {Value: -1, Param: "sequence_length"}}))
	onnx.RemoveDeadNodes(g)
}

func runHidden(t *testing.T, m *onnxpb.ModelProto, S int, withPos bool) ([]float32, error) {
	t.Helper()
	s, err := infer.Open("ort", m, infer.Options{Threads: 1})
	if err != nil {
		t.Fatalf("onnxruntime rejects the model: %v", err)
	}
	defer s.Close()
	rng := rand.New(rand.NewPCG(uint64(S), 1))
	ids, types, mask, pos := make([]int64, S), make([]int64, S), make([]int64, S), make([]int64, S)
	for i := range ids {
		ids[i] = int64(rng.IntN(60))
		types[i] = int64(rng.IntN(2))
		mask[i] = 1
		pos[i] = int64(i)
	}
	feed := map[string]*onnx.Tensor{
		"input_ids":      onnx.NewInt64([]int{1, S}, ids),
		"token_type_ids": onnx.NewInt64([]int{1, S}, types),
		"attention_mask": onnx.NewInt64([]int{1, S}, mask),
	}
	if withPos {
		feed["position_ids"] = onnx.NewInt64([]int{1, S}, pos)
	}
	out, err := s.Run(feed, "last_hidden_state")
	if err != nil {
		return nil, err
	}
	return out["last_hidden_state"].Floats(), nil
}

func table(t *testing.T, m *onnxpb.ModelProto, name string) *onnx.Tensor {
	t.Helper()
	for _, tp := range m.Graph.Initializer {
		if tp.GetName() == name {
			v, err := onnx.DecodeTensor(tp)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("no initializer %s", name)
	return nil
}

// TestExtendPositionsRunsLonger: for each way of forming position ids, a
// copy-extended model gives bit-identical outputs on inputs shorter than
// the old table, accepts inputs as long as the new one, while the original
// rejects them; the new rows tile the old ones.
func TestExtendPositionsRunsLonger(t *testing.T) {
	needORT(t)
	const old, newN = 16, 40
	cases := []struct {
		name    string
		edit    func(*testing.T, *onnxpb.ModelProto)
		source  string
		withPos bool
	}{
		{"slice", func(*testing.T, *onnxpb.ModelProto) {}, "slice of buffer", false},
		{"range", withRangeIDs, "range", false},
		{"input", withInputIDs, "input", true},
		// Published int8 and fp16 copies store the table quantized or in
		// half precision: read through a DequantizeLinear (before the
		// Gather, or after it as onnxruntime's quantize_dynamic writes)
		// or a Cast.
		{"int8 dequantized before", withStoredTable(onnx.Int8, false), "slice of buffer", false},
		{"int8 dequantized after", withStoredTable(onnx.Int8, true), "slice of buffer", false},
		{"float16 cast before", withStoredTable(onnx.Float16, false), "slice of buffer", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := smallBERT(t, old)
			tc.edit(t, m)
			ext, rep, err := convert.ExtendPositions(m, convert.ExtendOptions{MaxPositions: newN})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Table != "embeddings.position_embeddings.weight" || rep.Source != tc.source || rep.OldRows != old || rep.NewRows != newN {
				t.Fatalf("report %+v", rep)
			}
			if tc.name == "slice" && rep.PositionIDs != "embeddings.position_ids" {
				t.Errorf("position_ids buffer not extended: %+v", rep)
			}
			before, err := runHidden(t, m, 12, tc.withPos)
			if err != nil {
				t.Fatal(err)
			}
			after, err := runHidden(t, ext, 12, tc.withPos)
			if err != nil {
				t.Fatal(err)
			}
			for i := range before {
				if math.Float32bits(before[i]) != math.Float32bits(after[i]) {
					t.Fatalf("output %d changed on a 12-token input: %v → %v", i, before[i], after[i])
				}
			}
			if _, err := runHidden(t, m, newN, tc.withPos); err == nil {
				t.Errorf("the original model accepted %d tokens with a %d-row table", newN, old)
			}
			long, err := runHidden(t, ext, newN, tc.withPos)
			if err != nil {
				t.Fatalf("extended model rejects %d tokens: %v", newN, err)
			}
			for _, v := range long {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
					t.Fatal("non-finite output at full length")
				}
			}
			ot, nt := table(t, m, rep.Table), table(t, ext, rep.Table)
			if nt.DType != ot.DType {
				t.Fatalf("table stored as %s, was %s", onnx.TypeName(nt.DType), onnx.TypeName(ot.DType))
			}
			h := ot.Shape[1]
			ov, nv := elems(t, ot), elems(t, nt)
			for r := 0; r < newN; r++ {
				for j := 0; j < h; j++ {
					if nv[r*h+j] != ov[(r%old)*h+j] {
						t.Fatalf("row %d is not a copy of row %d", r, r%old)
					}
				}
			}
			// Token-type and word tables untouched.
			for _, name := range []string{"embeddings.token_type_embeddings.weight", "embeddings.word_embeddings.weight"} {
				a, b := table(t, m, name), table(t, ext, name)
				if len(a.Floats()) != len(b.Floats()) {
					t.Errorf("%s changed size", name)
				}
			}
		})
	}
}

// TestExtendTableInterpolate compares linear resampling with a float64
// evaluation of the piecewise-linear function through the learned rows.
func TestExtendTableInterpolate(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	for _, tc := range []struct{ old, newN, offset, hidden int }{
		{16, 40, 0, 3}, {10, 11, 0, 2}, {512, 4098, 2, 4}, {7, 100, 1, 1},
	} {
		rows := make([]float32, tc.old*tc.hidden)
		for i := range rows {
			rows[i] = float32(rng.NormFloat64())
		}
		got := convert.ExtendTable(rows, tc.old, tc.hidden, tc.newN, tc.offset, "interpolate")
		L, N := tc.old-tc.offset, tc.newN-tc.offset
		for r := 0; r < tc.offset; r++ {
			for j := 0; j < tc.hidden; j++ {
				if got[r*tc.hidden+j] != rows[r*tc.hidden+j] {
					t.Fatalf("%+v: offset row %d changed", tc, r)
				}
			}
		}
		for i := 0; i < N; i++ {
			x := float64(i) * float64(L-1) / float64(N-1)
			lo := int(math.Floor(x))
			if lo > L-2 {
				lo = L - 2
			}
			f := x - float64(lo)
			for j := 0; j < tc.hidden; j++ {
				a := float64(rows[(tc.offset+lo)*tc.hidden+j])
				b := float64(rows[(tc.offset+lo+1)*tc.hidden+j])
				want := a + f*(b-a)
				if d := math.Abs(float64(got[(tc.offset+i)*tc.hidden+j]) - want); d > 1e-6 {
					t.Fatalf("%+v: row %d col %d = %v, want %v", tc, i, j, got[(tc.offset+i)*tc.hidden+j], want)
				}
			}
		}
		// End points are the learned end points exactly.
		for j := 0; j < tc.hidden; j++ {
			if got[tc.offset*tc.hidden+j] != rows[tc.offset*tc.hidden+j] || got[(tc.newN-1)*tc.hidden+j] != rows[(tc.old-1)*tc.hidden+j] {
				t.Fatalf("%+v: end points moved", tc)
			}
		}
	}
}

// TestExtendTableCopyOffset: RoBERTa-style offset 2 keeps rows 0 and 1 and
// tiles rows 2.. (Longformer's recipe).
func TestExtendTableCopyOffset(t *testing.T) {
	const old, newN, h = 6, 15, 2
	rows := make([]float32, old*h)
	for i := range rows {
		rows[i] = float32(i)
	}
	got := convert.ExtendTable(rows, old, h, newN, 2, "copy")
	for r := 0; r < newN; r++ {
		src := r
		if r >= 2 {
			src = 2 + (r-2)%(old-2)
		}
		for j := 0; j < h; j++ {
			if got[r*h+j] != rows[src*h+j] {
				t.Fatalf("row %d = %v, want row %d", r, got[r*h:(r+1)*h], src)
			}
		}
	}
}

func TestExtendPositionsErrors(t *testing.T) {
	m := smallBERT(t, 16)
	for _, tc := range []struct {
		opts convert.ExtendOptions
		want string
	}{
		{convert.ExtendOptions{MaxPositions: 16}, "must exceed"},
		{convert.ExtendOptions{MaxPositions: 32, Method: "cubic"}, "method"},
		{convert.ExtendOptions{MaxPositions: 32, Offset: 15}, "offset"},
	} {
		if _, _, err := convert.ExtendPositions(m, tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one mentioning %q", tc.opts, err, tc.want)
		}
	}
	// A graph without a position table (remove the position Gather).
	noPos := smallBERT(t, 16)
	_, g := nodeByName(noPos.Graph, "/embeddings/position_embeddings/Gather")
	g.OpType = str("Identity")
	g.Input = []string{"embeddings.word_embeddings.weight"}
	if _, _, err := convert.ExtendPositions(noPos, convert.ExtendOptions{MaxPositions: 32}); err == nil {
		t.Error("extension of a model without position table succeeded")
	}
	// The input model is not modified.
	before, err := onnx.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := convert.ExtendPositions(m, convert.ExtendOptions{MaxPositions: 64}); err != nil {
		t.Fatal(err)
	}
	after, err := onnx.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	if string(before) != string(after) {
		t.Error("ExtendPositions modified its input")
	}
}

// TestExtendPositionsCorpus extends the 2-row position table of a graph
// written by another exporter (onnxruntime's fusion test-suite, Range
// position ids, fused Attention) and runs it on 6 tokens in onnxruntime.
func TestExtendPositionsCorpus(t *testing.T) {
	path := filepath.Join("..", "..", "shared", "corpus", "ort-fusion", "embed_layer_norm_format8_opset13.onnx")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("corpus file absent (%s): %v", path, err)
	}
	m, err := onnx.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	ext, rep, err := convert.ExtendPositions(m, convert.ExtendOptions{MaxPositions: 8})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OldRows != 2 || rep.NewRows != 8 {
		t.Fatalf("report %+v", rep)
	}
	needORT(t)
	runAt := func(m *onnxpb.ModelProto, S int) error {
		s, err := infer.Open("ort", m, infer.Options{Threads: 1})
		if err != nil {
			t.Fatalf("onnxruntime rejects the model: %v", err)
		}
		defer s.Close()
		feed := map[string]*onnx.Tensor{}
		for _, in := range s.Inputs() {
			shape := []int{2, S}
			n := 2 * S
			switch in.DType {
			case onnx.Int32:
				feed[in.Name] = &onnx.Tensor{DType: onnx.Int32, Shape: shape, Data: make([]int32, n)}
			case onnx.Int64:
				feed[in.Name] = onnx.NewInt64(shape, make([]int64, n))
			default:
				t.Fatalf("unexpected input %s of type %s", in.Name, onnx.TypeName(in.DType))
			}
		}
		_, err = s.Run(feed)
		return err
	}
	if err := runAt(m, 6); err == nil {
		t.Error("the original 2-position model accepted 6 tokens")
	}
	if err := runAt(ext, 6); err != nil {
		t.Fatalf("extended model rejects 6 tokens: %v", err)
	}
}

// A BERT exported without a token_type_ids input slices a registered
// all-zeros token_type_ids buffer exactly as it slices position_ids: the
// 2-row token-type table must not count as a second position table.
func TestTokenTypeBufferIsNotPositions(t *testing.T) {
	m := smallBERT(t, 16)
	g := m.Graph
	zeros, err := onnx.EncodeTensor("embeddings.token_type_ids", onnx.NewInt64([]int{1, 16}, make([]int64, 16)))
	if err != nil {
		t.Fatal(err)
	}
	starts, _ := onnx.EncodeTensor("tt_starts", onnx.NewInt64([]int{1}, []int64{0}))
	ends, _ := onnx.EncodeTensor("tt_ends", onnx.NewInt64([]int{1}, []int64{12}))
	axes, _ := onnx.EncodeTensor("tt_axes", onnx.NewInt64([]int{1}, []int64{1}))
	g.Initializer = append(g.Initializer, zeros, starts, ends, axes)
	_, gather := nodeByName(g, "/embeddings/token_type_embeddings/Gather")
	if gather == nil {
		t.Fatal("builder changed: no token-type Gather")
	}
	gather.Input[1] = "tt_sliced"
	slice := &onnxpb.NodeProto{Name: str("/embeddings/tt_Slice"), OpType: str("Slice"),
		Input: []string{"embeddings.token_type_ids", "tt_starts", "tt_ends", "tt_axes"}, Output: []string{"tt_sliced"}}
	g.Node = append([]*onnxpb.NodeProto{slice}, g.Node...)
	var inputs []*onnxpb.ValueInfoProto
	for _, in := range g.Input {
		if in.GetName() != "token_type_ids" {
			inputs = append(inputs, in)
		}
	}
	g.Input = inputs
	ext, rep, err := convert.ExtendPositions(m, convert.ExtendOptions{MaxPositions: 40})
	if err != nil {
		t.Fatalf("extend positions with a sliced token-type buffer: %v", err)
	}
	if rep.Table != "embeddings.position_embeddings.weight" || rep.PositionIDs != "embeddings.position_ids" {
		t.Errorf("extended %s (buffer %s), want the position table and its ids", rep.Table, rep.PositionIDs)
	}
	// The buffer grows with the positions, its zeros kept, so that the
	// model reads 40 tokens without a token_type_ids input.
	if tt := table(t, ext, "embeddings.token_type_ids"); tt.Len() != 40 || slices.Max(tt.Int64s()) != 0 || slices.Min(tt.Int64s()) != 0 {
		t.Errorf("token-type buffer %v %v, want 40 zeros", tt.Shape, tt.Int64s())
	}
	if lim, err := convert.PositionLimit(m); err != nil || lim != 16 {
		t.Errorf("PositionLimit = %d, %v; want 16", lim, err)
	}
}

// TestTokenTypeTableIsNotASecondCandidate: a token-type table indexed by
// a one-element slice of a buffer ([0] reads like a position id) is not a
// second position table: with two candidates, tables of two rows or fewer
// are token types.
func TestTokenTypeTableIsNotASecondCandidate(t *testing.T) {
	m := smallBERT(t, 16)
	g := m.Graph
	buf, _ := onnx.EncodeTensor("tt_buffer", onnx.NewInt64([]int{1, 1}, []int64{0}))
	starts, _ := onnx.EncodeTensor("tt_starts", onnx.NewInt64([]int{1}, []int64{0}))
	ends, _ := onnx.EncodeTensor("tt_ends", onnx.NewInt64([]int{1}, []int64{1}))
	axes, _ := onnx.EncodeTensor("tt_axes", onnx.NewInt64([]int{1}, []int64{1}))
	g.Initializer = append(g.Initializer, buf, starts, ends, axes)
	_, gather := nodeByName(g, "/embeddings/token_type_embeddings/Gather")
	if gather == nil {
		t.Fatal("builder changed: no token-type Gather")
	}
	gather.Input[1] = "tt_sliced"
	slice := &onnxpb.NodeProto{Name: str("/embeddings/tt_Slice"), OpType: str("Slice"),
		Input: []string{"tt_buffer", "tt_starts", "tt_ends", "tt_axes"}, Output: []string{"tt_sliced"}}
	g.Node = append([]*onnxpb.NodeProto{slice}, g.Node...)
	_, rep, err := convert.ExtendPositions(m, convert.ExtendOptions{MaxPositions: 40})
	if err != nil {
		t.Fatalf("extend positions: %v", err)
	}
	if rep.Table != "embeddings.position_embeddings.weight" {
		t.Errorf("extended %s, want the position table", rep.Table)
	}
}

// TestExtendPositionsRoBERTa: a RoBERTa-style model (the XLM-R fixture:
// position ids a CumSum over the mask from padding_idx+1 = 2, a 64-row
// table that admits 62 tokens) extended to read 100 tokens gets 102
// rows: rows 0 and 1 (padding, unused) as they were, and position rows
// that tile rows 2..63, so no token sits on the padding row. onnxruntime
// then reads 100 tokens and not 101, and gives the original's outputs
// bit for bit on 40. Offset 2 given is the offset found. The token-type
// buffer the export gathers by position ids (no token_type_ids input)
// grows with the table, as it does in a `convert long` model.
func TestExtendPositionsRoBERTa(t *testing.T) {
	needORT(t)
	m, err := onnx.Load(filepath.Join("..", "testdata", "fixtures", "xlmroberta_sdpa_op17.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	if lim, err := convert.PositionLimit(m); err != nil || lim != 62 {
		t.Fatalf("limit %d, %v; want 62 (64 rows less 2)", lim, err)
	}
	ext, rep, err := convert.ExtendPositions(m, convert.ExtendOptions{MaxPositions: 100})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Source != "cumsum" || rep.OldRows != 64 || rep.NewRows != 102 || rep.Tokens != 100 || !strings.Contains(rep.String(), "offset 2") {
		t.Fatalf("report %+v", rep)
	}
	if lim, err := convert.PositionLimit(ext); err != nil || lim != 100 {
		t.Fatalf("extended limit %d, %v; want 100", lim, err)
	}
	given, _, err := convert.ExtendPositions(m, convert.ExtendOptions{MaxPositions: 100, Offset: 2})
	if err != nil || !proto.Equal(given, ext) {
		t.Fatalf("Offset 2 given: %v, or a model other than the offset found gives", err)
	}
	ot, nt := table(t, m, rep.Table), table(t, ext, rep.Table)
	h := ot.Shape[1]
	ov, nv := elems(t, ot), elems(t, nt)
	for r := range 102 {
		src := r
		if r >= 2 {
			src = 2 + (r-2)%62
		}
		for j := range h {
			if nv[r*h+j] != ov[src*h+j] {
				t.Fatalf("row %d is not row %d", r, src)
			}
		}
	}
	run := func(m *onnxpb.ModelProto, S int) ([]float32, error) {
		s, err := infer.Open("ort", m, infer.Options{Threads: 1})
		if err != nil {
			t.Fatalf("onnxruntime rejects the model: %v", err)
		}
		defer s.Close()
		rng := rand.New(rand.NewPCG(uint64(S), 3))
		feed := map[string]*onnx.Tensor{}
		for _, v := range s.Inputs() {
			d := make([]int64, S)
			for i := range d {
				switch v.Name {
				case "input_ids":
					d[i] = 3 + int64(rng.IntN(40)) // never padding_idx 1
				case "attention_mask":
					d[i] = 1
				}
			}
			feed[v.Name] = onnx.NewInt64([]int{1, S}, d)
		}
		out, err := s.Run(feed, "last_hidden_state")
		if err != nil {
			return nil, err
		}
		return out["last_hidden_state"].Floats(), nil
	}
	before, err := run(m, 40)
	if err != nil {
		t.Fatal(err)
	}
	after, err := run(ext, 40)
	if err != nil {
		t.Fatal(err)
	}
	for i := range before {
		if math.Float32bits(before[i]) != math.Float32bits(after[i]) {
			t.Fatalf("output %d changed on 40 tokens: %v → %v", i, before[i], after[i])
		}
	}
	if _, err := run(m, 63); err == nil {
		t.Errorf("the original read 63 tokens past its 62")
	}
	if _, err := run(ext, 100); err != nil {
		t.Errorf("the extended model refuses 100 tokens: %v", err)
	}
	if _, err := run(ext, 101); err == nil {
		t.Errorf("the extended model read 101 tokens past its 100")
	}

	// convert long grows the table and the buffer the same way: its model
	// reads 256 tokens, and within one window is the original.
	long, _, err := convert.ToLong(m, convert.LongOptions{MaxLength: 256})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run(long, 256); err != nil {
		t.Errorf("the long model refuses 256 tokens: %v", err)
	}
	within, err := run(long, 40)
	if err != nil {
		t.Fatal(err)
	}
	for i := range before {
		if d := math.Abs(float64(within[i] - before[i])); !(d <= 1e-5) {
			t.Fatalf("long model on 40 tokens: output %d is %v, the original's %v", i, within[i], before[i])
		}
	}
}

// TestExtendRotaryPositionBuffer: GTE-v1.5's remote code slices a
// position_ids buffer 0, 1, …, 63 (max_position_embeddings) for its token
// types as well as its positions; scaling its rotary tables to 256 tokens
// grows that buffer too, so that onnxruntime reads 200 tokens (before,
// the tables grew and the buffer did not: a broadcast of 64 by 200).
func TestExtendRotaryPositionBuffer(t *testing.T) {
	needORT(t)
	m, err := onnx.Load(filepath.Join("..", "testdata", "fixtures", "longctx", "gte_v15.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	ext, rep, err := convert.ExtendPositions(m, convert.ExtendOptions{MaxPositions: 256, Trained: 64})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rep.String(), "extended to 256") {
		t.Errorf("report does not name the buffer:\n%s", rep)
	}
	for _, c := range []struct {
		m    *onnxpb.ModelProto
		n    int
		runs bool
	}{{m, 64, true}, {m, 65, false}, {ext, 200, true}, {ext, 256, true}} {
		feed, err := infer.RandomInputs(c.m, infer.GraphInputs(c.m), infer.RandomOptions{Batch: 1, SeqLen: c.n, Seed: 4})
		if err != nil {
			t.Fatal(err)
		}
		s, err := infer.Open("ort", c.m, infer.Options{Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.Run(feed)
		s.Close()
		if (err == nil) != c.runs {
			t.Errorf("%d tokens, extended %v: %v; want running %v", c.n, c.m == ext, err, c.runs)
		}
	}
}
