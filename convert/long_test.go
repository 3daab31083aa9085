package convert_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/infer/infertest"
	"github.com/linearize/linearize/models"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// longBERT is a two-layer BERT with a W-row position table.
func longBERT(t *testing.T, w int) *onnxpb.ModelProto {
	t.Helper()
	m, err := models.BERT(models.Config{Vocab: 60, Hidden: 32, Heads: 4, Layers: 2, Intermediate: 64,
		MaxPositions: w, TypeVocab: 2, Opset: 17, Seed: 11, InitStd: 0.2})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// hidden runs m on the backend with ids (one row per sequence, all the
// same length; mask 0 on the last pad tokens of the last row) and returns
// last_hidden_state.
func hidden(t *testing.T, backend string, m *onnxpb.ModelProto, ids [][]int64, pad int) *onnx.Tensor {
	t.Helper()
	s, err := infer.Open(backend, m, infer.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b, n := len(ids), len(ids[0])
	flat, types, mask := make([]int64, 0, b*n), make([]int64, b*n), make([]int64, b*n)
	for r, row := range ids {
		flat = append(flat, row...)
		for i := range row {
			types[r*n+i] = int64(i % 2)
			if r < b-1 || i < n-pad {
				mask[r*n+i] = 1
			}
		}
	}
	out, err := s.Run(map[string]*onnx.Tensor{
		"input_ids":      onnx.NewInt64([]int{b, n}, flat),
		"token_type_ids": onnx.NewInt64([]int{b, n}, types),
		"attention_mask": onnx.NewInt64([]int{b, n}, mask),
	}, "last_hidden_state")
	if err != nil {
		t.Fatal(err)
	}
	return out["last_hidden_state"]
}

func randIDs(seed uint64, b, n int) [][]int64 {
	r := rand.New(rand.NewPCG(seed, 5))
	ids := make([][]int64, b)
	for i := range ids {
		ids[i] = make([]int64, n)
		for j := range ids[i] {
			ids[i][j] = int64(1 + r.IntN(59))
		}
	}
	return ids
}

func maxAbs(a, b []float32) float64 {
	var d float64
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}

// Up to one window the long model is the original model, whatever the
// far-field options, padded or not.
func TestLongExactWithinWindow(t *testing.T) {
	const w = 16
	m := longBERT(t, w)
	for _, o := range []convert.LongOptions{
		{MaxLength: 64},
		{MaxLength: 80, Far: true, Segments: 3, FarBias: 2, Sinks: convert.DefaultSinks},
		{MaxLength: 64, Far: true},
		{MaxLength: 64, Overlap: true},
	} {
		long, _, err := convert.ToLong(m, o)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{5, w} {
			ids := randIDs(uint64(n), 2, n)
			want := hidden(t, "native", m, ids, 2)
			got := hidden(t, "native", long, ids, 2)
			if d := maxAbs(got.Floats(), want.Floats()); d > 1e-5 {
				t.Errorf("%+v, %d tokens: max abs difference from the original %.3g > 1e-5", o, n, d)
			}
		}
	}
}

// Without the far field and the sinks, every window sees only itself at
// the positions the original model gives a window's tokens: the long
// model's token states are those of the original run on each window
// alone, which is chunking without the chunks' [CLS]/[SEP].
// A window shorter than the position table (8 of 16 rows) restarts
// positions every 8 tokens.
func TestLongNoFarIsWindowedOriginal(t *testing.T) {
	const windows = 3
	m := longBERT(t, 16)
	backends := []string{"native"}
	if infertest.ORT(t) {
		backends = append(backends, "ort")
	}
	for _, w := range []int{16, 8} {
		long, _, err := convert.ToLong(m, convert.LongOptions{MaxLength: 64, Window: w})
		if err != nil {
			t.Fatal(err)
		}
		ids := randIDs(uint64(w), 1, w*windows)
		for _, backend := range backends {
			got := hidden(t, backend, long, ids, 0).Floats()
			h := len(got) / (w * windows)
			for c := 0; c < windows; c++ {
				part := [][]int64{ids[0][c*w : (c+1)*w]}
				// Token types alternate from each window's first token, as in
				// the long input (w is even).
				want := hidden(t, "native", m, part, 0).Floats()
				if d := maxAbs(got[c*w*h:(c+1)*w*h], want); d > 1e-4 {
					t.Errorf("%s: window %d of %d: max abs difference from the original on the window alone %.3g > 1e-4", backend, c, w, d)
				}
			}
		}
	}
}

// The far field and the overlap carry context across windows: with them,
// a window's states depend on another window's tokens; without them (and
// with sinks outside that window) they do not.
func TestLongFarFieldCrossesWindows(t *testing.T) {
	const w = 16
	m := longBERT(t, w)
	a := randIDs(4, 1, 3*w)
	b := [][]int64{append([]int64(nil), a[0]...)}
	for j := w; j < 2*w; j++ { // change only the second window
		b[0][j] = 1 + (b[0][j]+7)%59
	}
	for _, c := range []struct {
		o      convert.LongOptions
		change bool
	}{
		{convert.LongOptions{MaxLength: 64, Far: true}, true},
		{convert.LongOptions{MaxLength: 64, Sinks: convert.DefaultSinks}, false}, // neither sink is in the second window
		{convert.LongOptions{MaxLength: 64}, false},
		// With overlap the first window's second half sees the second
		// window's first half.
		{convert.LongOptions{MaxLength: 64, Overlap: true}, true},
	} {
		long, _, err := convert.ToLong(m, c.o)
		if err != nil {
			t.Fatal(err)
		}
		ha, hb := hidden(t, "native", long, a, 0).Floats(), hidden(t, "native", long, b, 0).Floats()
		h := len(ha) / (3 * w)
		d := maxAbs(ha[:w*h], hb[:w*h]) // the first window
		if c.change && d < 1e-4 {
			t.Errorf("%+v: the first window ignores the last (max change %.3g)", c.o, d)
		}
		if !c.change && d != 0 {
			t.Errorf("%+v: the first window changed by %.3g with the last window", c.o, d)
		}
	}
}

// The function bodies onnxruntime runs agree with the Go kernels on a
// padded batch of several windows, and the model records its window.
func TestLongORTMatchesNative(t *testing.T) {
	const w = 16
	m := longBERT(t, w)
	long, rep, err := convert.ToLong(m, convert.LongOptions{MaxLength: 96, Far: true, Segments: 4, FarBias: -1, Sinks: convert.DefaultSinks})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Converted) != 2 || rep.Positions == nil || rep.Positions.NewRows != 96 {
		t.Fatalf("report: %d converted, positions %+v", len(rep.Converted), rep.Positions)
	}
	if convert.Meta(long, convert.MetaWindow) != "16" || convert.Meta(long, convert.MetaMaxLength) != "96" {
		t.Errorf("metadata window %q, max length %q; want 16 and 96", convert.Meta(long, convert.MetaWindow), convert.Meta(long, convert.MetaMaxLength))
	}
	if lim, err := convert.PositionLimit(long); err != nil || lim != 96 {
		t.Errorf("PositionLimit of the long model: %d, %v; want 96", lim, err)
	}
	if !infertest.ORT(t) {
		return
	}
	ids := randIDs(9, 2, 70)
	want := hidden(t, "native", long, ids, 13).Floats()
	got := hidden(t, "ort", long, ids, 13).Floats()
	if d := maxAbs(got, want); d > 1e-4 {
		t.Errorf("onnxruntime vs native: max abs difference %.3g > 1e-4", d)
	}
}

func TestLongOptionErrors(t *testing.T) {
	m := longBERT(t, 16)
	for _, c := range []struct {
		o     convert.LongOptions
		field string
	}{
		{convert.LongOptions{MaxLength: 16}, "MaxLength"},
		{convert.LongOptions{MaxLength: 1 << 21}, "MaxLength"},
		{convert.LongOptions{Window: 5}, "Window"},
		{convert.LongOptions{Window: 32}, "Window"},
		{convert.LongOptions{Far: true, Segments: -1}, "Segments"},
		{convert.LongOptions{Sinks: convert.NoSinks | convert.SinkFirst}, "Sinks"},
	} {
		_, _, err := convert.ToLong(m, c.o)
		var oe *convert.OptionError
		if !errors.As(err, &oe) || oe.Field != c.field || !errors.Is(err, convert.ErrInvalidOption) {
			t.Errorf("%+v: error %v, want an option error on %s", c.o, err, c.field)
		}
	}
	// A model without an absolute position table cannot restart positions.
	noPos := longBERT(t, 16)
	for _, n := range noPos.Graph.Node {
		if n.GetOpType() == "Gather" && strings.Contains(n.Input[0], "position") {
			n.Input[1] = "input_ids"
		}
	}
	if _, _, err := convert.ToLong(noPos, convert.LongOptions{}); err == nil || !strings.Contains(err.Error(), "position table") {
		t.Errorf("model without a position table: error %v", err)
	}
}

// A quantized position table (int8 integers behind DequantizeLinear, one
// scale), as dynamic-int8 exports store it, restarts every window as a
// float one does: the integers are tiled, and each window of the long
// model reads what the original reads on that window alone.
func TestLongQuantizedTableWindowed(t *testing.T) {
	const w, windows = 8, 3
	m := longBERT(t, 16)
	withStoredTable(onnx.Int8, false)(t, m)
	long, _, err := convert.ToLong(m, convert.LongOptions{MaxLength: 64, Window: w})
	if err != nil {
		t.Fatal(err)
	}
	ids := randIDs(uint64(w), 1, w*windows)
	got := hidden(t, "native", long, ids, 0).Floats()
	h := len(got) / (w * windows)
	for c := 0; c < windows; c++ {
		want := hidden(t, "native", m, [][]int64{ids[0][c*w : (c+1)*w]}, 0).Floats()
		if d := maxAbs(got[c*w*h:(c+1)*w*h], want); d > 1e-4 {
			t.Errorf("window %d: max abs difference from the original on the window alone %.3g > 1e-4", c, d)
		}
	}
}
