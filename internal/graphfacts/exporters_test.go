package graphfacts

import (
	"reflect"
	"testing"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

func axisAttr(v int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String("axis"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(v)}
}

// size is x.size(i) unsqueezed to one element, as torch writes a shape
// piece.
func (b *builder) size(x string, i int64) string {
	g := b.node("Gather", []string{b.node("Shape", []string{x}), b.init(onnx.NewInt64(nil, []int64{i}))}, axisAttr(0))
	return b.node("Unsqueeze", []string{g, b.ints(0)})
}

// TestTorchScriptRepeatKV: the shapes of the TorchScript export of
// transformers 5's Llama attention are proved: the heads split by
// view(*x.shape[:-1], −1, D) with the sizes read from the projection's
// input; a one-input Concat (the cache update) passes its dims on;
// repeat_kv's Expand shape Where(Equal(s, −1), 1, s) and its Reshape
// shape with the heads written Mul(x.size(1), n_rep).
func TestTorchScriptRepeatKV(t *testing.T) {
	const hkv, rep, d = 2, 2, 4 // x: [B,S,8]
	b := newBuilder("x")
	proj := b.node("MatMul", []string{"x", b.init(onnx.NewFloat([]int{8, hkv * d}, make([]float32, 8*hkv*d)))})
	split := b.node("Reshape", []string{proj, b.node("Concat", []string{b.size("x", 0), b.size("x", 1), b.ints(-1), b.ints(d)}, axisAttr(0))})
	k := b.node("Transpose", []string{split}, intsAttr("perm", 0, 2, 1, 3))
	cat := b.node("Concat", []string{k}, axisAttr(-2))
	u := b.node("Unsqueeze", []string{cat, b.ints(2)})
	s := b.node("Reshape", []string{b.node("Concat", []string{b.size(cat, 0), b.ints(hkv), b.ints(rep), b.size(cat, 2), b.ints(d)}, axisAttr(0)), b.ints(-1)})
	minus1, ones := b.ints(-1, -1, -1, -1, -1), b.ints(1, 1, 1, 1, 1)
	e := b.node("Expand", []string{u, b.node("Where", []string{b.node("Equal", []string{s, minus1}), ones, s})})
	heads := b.node("Unsqueeze", []string{b.node("Mul", []string{b.node("Gather", []string{b.node("Shape", []string{cat}), b.init(onnx.NewInt64(nil, []int64{1}))}, axisAttr(0)), b.init(onnx.NewInt64(nil, []int64{rep}))}), b.ints(0)})
	r := b.node("Reshape", []string{e, b.node("Concat", []string{b.size(cat, 0), heads, b.size(cat, 2), b.ints(d)}, axisAttr(0))})
	f := b.facts()
	for _, c := range []struct {
		name string
		got  []int64
		want []int64
	}{
		{"head split view(B, S, -1, D)", f.Dims(split), []int64{-1, -1, hkv, d}},
		{"one-input Concat", f.Dims(cat), []int64{-1, hkv, -1, d}},
		{"repeat_kv Expand", f.Dims(e), []int64{-1, hkv, rep, -1, d}},
		{"repeat_kv Reshape", f.Dims(r), []int64{-1, hkv * rep, -1, d}},
	} {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s: dims %v, want %v", c.name, c.got, c.want)
		}
	}
	where := ""
	for _, n := range b.g.Node {
		if n.GetOpType() == "Where" {
			where = n.Output[0]
		}
	}
	if got := f.ShapeValue(where); !reflect.DeepEqual(got, []int64{-1, hkv, rep, -1, d}) {
		t.Errorf("ShapeValue(Where(Equal(s, -1), 1, s)) = %v, want [-1 %d %d -1 %d]", got, hkv, rep, d)
	}
}

// TestExpandShapeLiteral: torch's expand(-1, H, -1, -1) is a constant
// [-1,H,-1,-1] compared with −1 (another Constant node of the same
// entries selected): the −1 entries read as 1 (keep the size), the Expand
// broadcasts [B,1,1,S] to [B,H,1,S].
func TestExpandShapeLiteral(t *testing.T) {
	b := newBuilder("x", "mask")
	m4 := b.node("Unsqueeze", []string{"mask", b.ints(1, 2)})
	lit := []int64{-1, 4, -1, -1}
	eq := b.node("Equal", []string{b.ints(lit...), b.ints(-1, -1, -1, -1)})
	sel := b.node("Where", []string{eq, b.ints(1, 1, 1, 1), b.ints(lit...)})
	e := b.node("Expand", []string{m4, sel})
	f := b.facts()
	if got := f.ShapeValue(sel); !reflect.DeepEqual(got, []int64{1, 4, 1, 1}) {
		t.Errorf("ShapeValue = %v, want [1 4 1 1]", got)
	}
	if got := f.Dims(e); !reflect.DeepEqual(got, []int64{-1, 4, 1, -1}) {
		t.Errorf("Dims(Expand) = %v, want [-1 4 1 -1]", got)
	}
}

// TestPaddleShapePieces: paddle2onnx's SVTR (PaddleOCR <= 2.6, sizes read
// at run time): tokens from a 1x1 Conv flattened and transposed; the head
// split's shape a stack of sizes, C // H written
// Cast(Floor(Div(Cast(Shape(x)[2]), H))), each piece Reshape(·, []) and
// Unsqueeze, the shape read through Identity; the packed projection's Q
// scaled by paddle's scale op (x·s + 0).
func TestPaddleShapePieces(t *testing.T) {
	const cin, c, h = 3, 16, 4
	b := newBuilder()
	b.g.Input = append(b.g.Input, onnx.MakeValueInfo("img", onnx.Float, []onnx.Dim{{Value: -1, Param: "b"}, {Value: cin}, {Value: 1}, {Value: -1, Param: "w"}}))
	conv := b.node("Conv", []string{"img", b.init(onnx.NewFloat([]int{c, cin, 1, 1}, make([]float32, c*cin)))}, intsAttr("kernel_shape", 1, 1), intsAttr("strides", 1, 1), intsAttr("pads", 0, 0, 0, 0))
	flat := b.node("Reshape", []string{conv, b.node("Concat", []string{b.node("Slice", []string{b.node("Shape", []string{conv}), b.ints(0), b.ints(2), b.ints(0)}), b.ints(-1)}, axisAttr(0))})
	x := b.node("Transpose", []string{flat}, intsAttr("perm", 0, 2, 1)) // [B, W, C]
	shape := b.node("Identity", []string{b.node("Shape", []string{x})})
	piece := func(i int64) string {
		return b.node("Squeeze", []string{b.node("Slice", []string{shape, b.ints(i), b.ints(i + 1), b.ints(0)})}, intsAttr("axes", 0))
	}
	stack := func(v string) string {
		return b.node("Unsqueeze", []string{b.node("Reshape", []string{v, b.ints()})}, intsAttr("axes", 0)) // to a scalar, then [1]
	}
	n := piece(1)
	toF := &onnxpb.AttributeProto{Name: proto.String("to"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(int64(onnx.Float))}
	toI := &onnxpb.AttributeProto{Name: proto.String("to"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(int64(onnx.Int64))}
	d := b.node("Cast", []string{b.node("Floor", []string{b.node("Div", []string{b.node("Cast", []string{piece(2)}, toF), b.scalar(h)})})}, toI)
	qkv := b.node("Add", []string{b.node("MatMul", []string{x, b.init(onnx.NewFloat([]int{c, 3 * c}, make([]float32, 3*c*c)))}), b.init(onnx.NewFloat([]int{3 * c}, make([]float32, 3*c)))})
	split := b.node("Reshape", []string{qkv, b.node("Concat", []string{b.ints(0), stack(n), b.ints(3), b.ints(h), stack(d)}, axisAttr(0))})
	q := b.node("Squeeze", []string{b.node("Slice", []string{b.node("Transpose", []string{split}, intsAttr("perm", 2, 0, 3, 1, 4)), b.ints(0), b.ints(1), b.ints(0)})}, intsAttr("axes", 0))
	qs := b.node("Add", []string{b.node("Mul", []string{q, b.scalar(0.5)}), b.scalar(0)})
	f := b.facts()
	if got := f.Dims(conv); !reflect.DeepEqual(got, []int64{-1, c, 1, -1}) {
		t.Errorf("Dims(Conv 1x1) = %v, want [-1 %d 1 -1]", got, c)
	}
	if got := f.Dims(x); !reflect.DeepEqual(got, []int64{-1, -1, c}) {
		t.Errorf("Dims(tokens) = %v, want [-1 -1 %d]", got, c)
	}
	if v, ok := f.Scalar(d); !ok || v != c/h {
		t.Errorf("Scalar(C // H) = %v, %v; want %d", v, ok, c/h)
	}
	if got := f.Dims(split); !reflect.DeepEqual(got, []int64{-1, -1, 3, h, c / h}) {
		t.Errorf("Dims(head split) = %v, want [-1 -1 3 %d %d]", got, h, c/h)
	}
	if p, ok := f.ProjectionOf(qs); !ok || !p.Packed || p.Input != x {
		t.Errorf("ProjectionOf(q·s + 0) = %+v, %v; want the packed projection of the tokens", p, ok)
	}
}
