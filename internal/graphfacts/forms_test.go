package graphfacts

import (
	"math"
	"reflect"
	"testing"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// TestLeadingShapeHeadSplit: torch's view(*x.shape[:-1], H, -1) writes
// the leading sizes as one piece Shape(x)[0:-1] (a Slice of Shape, or
// Shape with end −1 from opset 15): the split's dims are proved, the head
// size solved from the projection's width, and x.size(−1) of the split
// folds to it (SDPA's run-time scale).
func TestLeadingShapeHeadSplit(t *testing.T) {
	for _, c := range []struct {
		name string
		lead func(b *builder, p string) string
	}{
		{"Slice(Shape(x), 0, -1)", func(b *builder, p string) string {
			return b.node("Slice", []string{b.node("Shape", []string{p}), b.ints(0), b.ints(-1)})
		}},
		{"Shape(x, end=-1)", func(b *builder, p string) string {
			return b.node("Shape", []string{p}, intAttr("end", -1))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newBuilder("x")
			p := b.node("Add", []string{b.init(onnx.NewFloat([]int{8}, make([]float32, 8))), b.node("MatMul", []string{"x", b.init(onnx.NewFloat([]int{8, 8}, make([]float32, 64)))})})
			shape := b.node("Concat", []string{c.lead(b, p), b.ints(2), b.ints(-1)}, intAttr("axis", 0))
			split := b.node("Reshape", []string{p, shape})
			q := b.node("Transpose", []string{split}, intsAttr("perm", 0, 2, 1, 3))
			d := b.node("Cast", []string{b.node("Gather", []string{b.node("Shape", []string{q}), b.init(onnx.NewInt64(nil, []int64{-1}))})}, intAttr("to", int64(onnx.Float)))
			s := b.node("Reciprocal", []string{b.node("Sqrt", []string{b.node("Sqrt", []string{d})})})
			f := b.facts()
			if got, want := f.Dims(q), []int64{-1, 2, -1, 4}; !reflect.DeepEqual(got, want) {
				t.Errorf("Dims(q) = %v, want %v", got, want)
			}
			if v, ok := f.Scalar(s); !ok || math.Abs(v-math.Pow(4, -0.25)) > 1e-12 {
				t.Errorf("Scalar(d^-1/4) = %v, %v; want %v", v, ok, math.Pow(4, -0.25))
			}
		})
	}
}

// TestGuessedRank: a shape piece whose length nothing proves leaves the
// reshape's rank unknown rather than taken as one entry; an elementwise
// op with an input of unknown rank proves only trailing axes, and a
// Reshape does not copy axis 0 out of them (it solves the head split from
// the projection's width instead).
func TestGuessedRank(t *testing.T) {
	b := newBuilder("x")
	b.g.Input = append(b.g.Input, &onnxpb.ValueInfoProto{Name: proto.String("y")}) // rank unknown
	unknownPiece := b.node("Reshape", []string{"x", b.node("Concat", []string{b.node("Shape", []string{"y"}), b.ints(8)}, intAttr("axis", 0))})
	p := b.node("Add", []string{b.init(onnx.NewFloat([]int{8}, make([]float32, 8))), b.node("MatMul", []string{"y", b.init(onnx.NewFloat([]int{8, 8}, make([]float32, 64)))})})
	split := b.node("Reshape", []string{p, b.ints(0, 0, -1, 4)})
	f := b.facts()
	if got := f.Dims(unknownPiece); got != nil {
		t.Errorf("Dims(Reshape to Concat(Shape(y), [8])) = %v, want unknown (the piece's length is not proved)", got)
	}
	if got, want := f.Dims(p), []int64{8}; !reflect.DeepEqual(got, want) || !f.rankGuessed(p) {
		t.Errorf("Dims(bias + y·W) = %v (guessed %v), want %v with a guessed rank", got, f.rankGuessed(p), want)
	}
	if got, want := f.Dims(split), []int64{-1, -1, 2, 4}; !reflect.DeepEqual(got, want) {
		t.Errorf("Dims(head split of bias + y·W) = %v, want %v", got, want)
	}
}

// TestShapeKeepingFusedOps: onnxruntime's fused ops that keep their
// input's shape (SkipLayerNormalization, FastGelu) pass its dims on;
// SkipLayerNormalization's mean output does not.
func TestShapeKeepingFusedOps(t *testing.T) {
	b := newBuilder("x")
	g := b.init(onnx.NewFloat([]int{8}, make([]float32, 8)))
	b.msNode("SkipLayerNormalization", []string{"x", "x", g, g})
	outs := b.outputs(2)
	gelu := b.msNode("FastGelu", []string{outs[0]})
	f := b.facts()
	for _, c := range []struct {
		v    string
		want []int64
	}{{outs[0], []int64{-1, -1, 8}}, {gelu, []int64{-1, -1, 8}}, {outs[1], nil}} {
		if got := f.Dims(c.v); !reflect.DeepEqual(got, c.want) {
			t.Errorf("Dims(%s) = %v, want %v", c.v, got, c.want)
		}
	}
}

// TestQuantizedConstants: a constant quantized and dequantized
// (quantize_static's QDQ pair on the score scale) folds to the value
// QuantizeLinear's rounding gives, saturating in the zero point's type; a
// mask behind a per-tensor QDQ pair varies where the mask does, and a
// per-axis scale adds its axis.
func TestQuantizedConstants(t *testing.T) {
	b := newBuilder("x", "mask")
	u8 := func(v uint8) string { return b.init(&onnx.Tensor{DType: onnx.Uint8, Shape: []int{}, Data: []uint8{v}}) }
	i8 := func(v int8) string { return b.init(&onnx.Tensor{DType: onnx.Int8, Shape: []int{}, Data: []int8{v}}) }
	qdq := func(x, s, zp string) string {
		return b.node("DequantizeLinear", []string{b.node("QuantizeLinear", []string{x, s, zp}), s, zp})
	}
	exact := qdq(b.scalar(0.35355339), b.scalar(float32(0.35355339/255)), u8(0))
	rounded := qdq(b.scalar(0.3), b.scalar(0.25), u8(0))     // 1.2 → 1 → 0.25
	saturated := qdq(b.scalar(-2), b.scalar(0.01), i8(0))    // −200 → −128 → −1.28
	halfEven := qdq(b.scalar(0.625), b.scalar(0.25), u8(10)) // 2.5 → 2 (+10) → 0.5
	m := b.node("Unsqueeze", []string{"mask", b.ints(1, 2)}) // [B,1,1,S]
	perTensor := qdq(m, b.scalar(0.1), u8(0))                // varies as the mask
	perAxis := b.node("DequantizeLinear", []string{m, b.init(onnx.NewFloat([]int{4}, []float32{1, 2, 3, 4}))}, intAttr("axis", 1))
	f := b.facts()
	for _, c := range []struct {
		name string
		v    string
		want float64
	}{
		{"exact", exact, 0.35355339},
		{"rounded", rounded, 0.25},
		{"saturated", saturated, -1.28},
		{"half to even", halfEven, 0.5},
	} {
		if v, ok := f.Scalar(c.v); !ok || math.Abs(v-c.want) > 1e-6 {
			t.Errorf("Scalar(%s QDQ) = %v, %v; want %v", c.name, v, ok, c.want)
		}
	}
	if got, want := f.Broadcast(perTensor), []int64{-1, 1, 1, -1}; !reflect.DeepEqual(got, want) {
		t.Errorf("Broadcast(per-tensor QDQ of the mask) = %v, want %v", got, want)
	}
	if got, want := f.Broadcast(perAxis), []int64{-1, -1, 1, -1}; !reflect.DeepEqual(got, want) {
		t.Errorf("Broadcast(per-axis DequantizeLinear along axis 1) = %v, want %v", got, want)
	}
}

// TestPackedGather: q, k, v gathered at constant indices of a packed
// projection [3,B,H,S,D] (paddle2onnx's qkv[0]) come from that
// projection (packed, not unsplit); a projection's own output is unsplit.
func TestPackedGather(t *testing.T) {
	b := newBuilder("x")
	w := b.init(onnx.NewFloat([]int{8, 24}, make([]float32, 192)))
	p := b.node("MatMul", []string{"x", w})
	qkv := b.node("Transpose", []string{b.node("Reshape", []string{p, b.ints(0, -1, 3, 2, 4)})}, intsAttr("perm", 2, 0, 3, 1, 4))
	q := b.node("Gather", []string{qkv, b.init(onnx.NewInt64(nil, []int64{0}))}, intAttr("axis", 0))
	f := b.facts()
	proj, ok := f.ProjectionOf(q)
	if !ok || !proj.Packed || proj.Weight != w || proj.Input != "x" {
		t.Errorf("ProjectionOf(qkv[0]) = %+v, %v; want the packed x·%s", proj, ok, w)
	}
	if got, want := f.Dims(q), []int64{-1, 2, -1, 4}; !reflect.DeepEqual(got, want) {
		t.Errorf("Dims(qkv[0]) = %v, want %v", got, want)
	}
	if f.Unsplit(q) || !f.Unsplit(p) {
		t.Errorf("Unsplit: qkv[0] %v, x·W %v; want false, true", f.Unsplit(q), f.Unsplit(p))
	}
}
