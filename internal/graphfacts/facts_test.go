package graphfacts

import (
	"fmt"
	"math"
	"reflect"
	"testing"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// builder makes small graphs for the tests.
type builder struct {
	g *onnxpb.GraphProto
	n int
}

func newBuilder(inputs ...string) *builder {
	b := &builder{g: &onnxpb.GraphProto{}}
	for _, in := range inputs {
		shape := []onnx.Dim{{Value: -1, Param: "b"}, {Value: -1, Param: "s"}, {Value: 8}}
		if in == "mask" {
			shape = shape[:2] // [B,S]
		}
		b.g.Input = append(b.g.Input, onnx.MakeValueInfo(in, onnx.Float, shape))
	}
	return b
}

func (b *builder) node(op string, in []string, attrs ...*onnxpb.AttributeProto) string {
	b.n++
	out := fmt.Sprintf("%s_%d", op, b.n)
	b.g.Node = append(b.g.Node, &onnxpb.NodeProto{Name: proto.String(out), OpType: proto.String(op), Input: in, Output: []string{out}, Attribute: attrs})
	return out
}

func (b *builder) init(t *onnx.Tensor) string {
	b.n++
	name := fmt.Sprintf("c%d", b.n)
	tp, err := onnx.EncodeTensor(name, t)
	if err != nil {
		panic(err)
	}
	b.g.Initializer = append(b.g.Initializer, tp)
	return name
}

func (b *builder) scalar(v float32) string { return b.init(onnx.NewFloat(nil, []float32{v})) }
func (b *builder) ints(v ...int64) string  { return b.init(onnx.NewInt64([]int{len(v)}, v)) }

func (b *builder) facts() *Facts { return New(onnx.NewIndex(b.g), 17) }

func intsAttr(name string, v ...int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INTS.Enum(), Ints: v}
}

func TestScalarAndUniform(t *testing.T) {
	b := newBuilder("x")
	// keras: Sqrt(Cast(8)) folds to √8.
	sq := b.node("Sqrt", []string{b.node("Cast", []string{b.ints(8)}, &onnxpb.AttributeProto{Name: proto.String("to"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(int64(onnx.Float))})})
	// An all-true [1,1,4,1] guard expanded by a runtime shape, and-ed
	// with a value of the graph: And(true, x) is not uniform, And(false, x) is.
	tr := b.init(&onnx.Tensor{DType: onnx.Bool, Shape: []int{1, 1, 4, 1}, Data: []bool{true, true, true, true}})
	fa := b.init(&onnx.Tensor{DType: onnx.Bool, Shape: []int{1}, Data: []bool{false}})
	exp := b.node("Expand", []string{tr, b.node("Shape", []string{"x"})})
	andX := b.node("And", []string{exp, b.node("Cast", []string{"x"}, &onnxpb.AttributeProto{Name: proto.String("to"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(int64(onnx.Bool))})})
	andF := b.node("And", []string{fa, andX})
	where := b.node("Where", []string{exp, b.scalar(0), b.scalar(-1e9)})
	mixed := b.init(onnx.NewFloat([]int{2}, []float32{1, 2}))
	f := b.facts()
	if v, ok := f.Scalar(sq); !ok || math.Abs(v-math.Sqrt(8)) > 1e-12 {
		t.Errorf("Scalar(Sqrt(Cast(8))) = %v, %v; want √8", v, ok)
	}
	for _, c := range []struct {
		name string
		v    string
		want float64
		ok   bool
	}{
		{"all-true expanded", exp, 1, true},
		{"And(true, x)", andX, 0, false},
		{"And(false, x)", andF, 0, true},
		{"Where(true, 0, -1e9)", where, 0, true},
		{"non-uniform constant", mixed, 0, false},
		{"graph input", "x", 0, false},
	} {
		v, ok := f.Uniform(c.v)
		if ok != c.ok || (ok && v != c.want) {
			t.Errorf("Uniform(%s) = %v, %v; want %v, %v", c.name, v, ok, c.want, c.ok)
		}
	}
}

// TestBroadcastExpandedMask: a per-key mask [B,1,1,S] expanded to the
// score shape varies only along the batch and key axes; a guard constant
// and-ed into it does not add variation.
func TestBroadcastExpandedMask(t *testing.T) {
	b := newBuilder("x", "mask")
	m := b.node("Unsqueeze", []string{b.node("Unsqueeze", []string{"mask", b.ints(1)}), b.ints(2)})
	full := b.node("Concat", []string{b.ints(2), b.ints(4), b.ints(5), b.ints(5)}, &onnxpb.AttributeProto{Name: proto.String("axis"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(0)})
	e := b.node("Expand", []string{m, full})
	guard := b.init(&onnx.Tensor{DType: onnx.Bool, Shape: []int{1, 1, 5, 1}, Data: []bool{true, true, true, true, true}})
	g := b.node("And", []string{guard, m})
	f := b.facts()
	want := []int64{-1, 1, 1, -1}
	for name, v := range map[string]string{"expanded": e, "guarded": g} {
		if got := f.Broadcast(v); !reflect.DeepEqual(got, want) {
			t.Errorf("Broadcast(%s) = %v, want %v", name, got, want)
		}
	}
	if got := f.Units(e); !reflect.DeepEqual(got, []int64{-1, -1, -1, -1}) {
		t.Errorf("Units(expanded) = %v, want [-1 -1 -1 -1] (its size is [2,4,5,5])", got)
	}
}

// TestProjectionPreScaleMerged: Q = rotary(split(x·W + b)·s) is found to
// come from x·W + b with the factor s, and the core output's merge is
// followed to the [B,S,H·D] value.
func TestProjectionPreScaleMerged(t *testing.T) {
	b := newBuilder("x")
	w := b.init(onnx.NewFloat([]int{8, 8}, make([]float32, 64)))
	bias := b.init(onnx.NewFloat([]int{8}, make([]float32, 8)))
	p := b.node("Add", []string{b.node("MatMul", []string{"x", w}), bias})
	q := b.node("Transpose", []string{b.node("Reshape", []string{b.node("Mul", []string{p, b.scalar(0.25)}), b.ints(0, 0, 2, 4)})}, intsAttr("perm", 0, 2, 1, 3))
	cos, sin := b.init(onnx.NewFloat([]int{4}, make([]float32, 4))), b.init(onnx.NewFloat([]int{4}, make([]float32, 4)))
	x1 := b.node("Slice", []string{q, b.ints(0), b.ints(2), b.ints(-1)})
	x2 := b.node("Slice", []string{q, b.ints(2), b.ints(4), b.ints(-1)})
	half := b.node("Concat", []string{b.node("Neg", []string{x2}), x1}, &onnxpb.AttributeProto{Name: proto.String("axis"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(-1)})
	rot := b.node("Add", []string{b.node("Mul", []string{q, cos}), b.node("Mul", []string{half, sin})})
	out := b.node("Reshape", []string{b.node("Transpose", []string{rot}, intsAttr("perm", 0, 2, 1, 3)), b.ints(0, 0, 8)})
	b.node("Shape", []string{rot}) // a shape-only use does not stop the merge
	f := b.facts()
	if s := f.PreScale(rot); s != 0.25 {
		t.Errorf("PreScale = %v, want 0.25", s)
	}
	proj, ok := f.ProjectionOf(rot)
	if !ok || proj.Input != "x" || proj.Weight != w || proj.Bias != bias {
		t.Errorf("ProjectionOf = %+v, %v; want x·%s + %s", proj, ok, w, bias)
	}
	if got := f.ProjWidth(rot); got != 8 {
		t.Errorf("ProjWidth = %d, want 8", got)
	}
	if got := f.Merged(rot); got != out {
		t.Errorf("Merged = %q, want %q", got, out)
	}
	if got := f.Dims(q); !reflect.DeepEqual(got, []int64{-1, 2, -1, 4}) {
		t.Errorf("Dims(q) = %v, want [-1 2 -1 4]", got)
	}
}

// TestDeepGraphIsLinear: queries on a long residual chain (each value
// used twice) finish: every fact is memoized per value.
func TestDeepGraphIsLinear(t *testing.T) {
	b := newBuilder("x")
	v := "x"
	for i := 0; i < 200; i++ {
		v = b.node("Add", []string{v, b.node("Relu", []string{v})})
	}
	f := b.facts()
	if f.ConstDerived(v) || f.FromRange(v) {
		t.Error("a residual chain over an input is neither constant nor a Range")
	}
	if _, ok := f.Uniform(v); ok {
		t.Error("a residual chain over an input is not uniform")
	}
	_ = f.Dims(v)
	_ = f.Broadcast(v)
	_ = f.ProjWidth(v)
}

// TestMergedValueStops: the merge is followed only while the value has
// one consumer (Shape aside) that is a default-domain Transpose or
// Reshape, and stops at a graph output; a nil index returns the value.
func TestMergedValueStops(t *testing.T) {
	b := newBuilder("x")
	t1 := b.node("Transpose", []string{"x"}, intsAttr("perm", 0, 2, 1, 3))
	r1 := b.node("Reshape", []string{t1, b.ints(0, 0, 8)})
	b.node("Relu", []string{r1})
	b.node("Add", []string{r1, "x"}) // two real consumers: stop at r1
	t2 := b.node("Transpose", []string{"x"}, intsAttr("perm", 0, 2, 1, 3))
	b.g.Output = append(b.g.Output, &onnxpb.ValueInfoProto{Name: proto.String(t2)})
	b.node("Reshape", []string{t2, b.ints(0, 0, 8)}) // past a graph output: not followed
	ix := onnx.NewIndex(b.g)
	if got := MergedValue(ix, t1); got != r1 {
		t.Errorf("MergedValue(%s) = %q, want %q", t1, got, r1)
	}
	if got := MergedValue(ix, t2); got != t2 {
		t.Errorf("MergedValue(%s) = %q, want the graph output itself", t2, got)
	}
	if got := MergedValue(nil, "v"); got != "v" {
		t.Errorf("MergedValue(nil) = %q, want v", got)
	}
}

// TestSizesAndHeadSplit: x.size(i) pieces of a shape resolve to known
// dimensions; the literal −1 of a head split view(B, S, H, −1) is solved
// from the projection width; x.size(−1) of the split folds to the head
// size (DeBERTa's scale sqrt(size(−1)·3)); the folded view
// [−1, S, size(−1)] keeps it.
func TestSizesAndHeadSplit(t *testing.T) {
	b := newBuilder("x")
	w := b.init(onnx.NewFloat([]int{8, 8}, make([]float32, 64)))
	p := b.node("Add", []string{b.node("MatMul", []string{"x", w}), b.init(onnx.NewFloat([]int{8}, make([]float32, 8)))})
	size := func(v string, i int64) string {
		return b.node("Unsqueeze", []string{b.node("Gather", []string{b.node("Shape", []string{v}), b.init(onnx.NewInt64(nil, []int64{i}))}), b.ints(0)})
	}
	split := b.node("Reshape", []string{p, b.node("Concat", []string{size(p, 0), size(p, 1), b.ints(2), b.ints(-1)}, &onnxpb.AttributeProto{Name: proto.String("axis"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(0)})})
	last := b.node("Squeeze", []string{b.node("Slice", []string{b.node("Shape", []string{split}), b.ints(-1), b.ints(math.MaxInt64)}), b.ints(0)})
	scale := b.node("Sqrt", []string{b.node("Mul", []string{b.node("Cast", []string{last}, &onnxpb.AttributeProto{Name: proto.String("to"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(int64(onnx.Float))}), b.scalar(3)})})
	t4 := b.node("Transpose", []string{split}, intsAttr("perm", 0, 2, 1, 3))
	folded := b.node("Reshape", []string{t4, b.node("Concat", []string{b.ints(-1), size(split, 1), size(split, -1)}, &onnxpb.AttributeProto{Name: proto.String("axis"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(0)})})
	f := b.facts()
	if got := f.Dims(split); !reflect.DeepEqual(got, []int64{-1, -1, 2, 4}) {
		t.Errorf("Dims(split) = %v, want [-1 -1 2 4]", got)
	}
	if s, ok := f.Scalar(scale); !ok || math.Abs(s-math.Sqrt(12)) > 1e-12 {
		t.Errorf("Scalar(sqrt(size(-1)·3)) = %v, %v; want %v", s, ok, math.Sqrt(12))
	}
	if got := f.Dims(folded); !reflect.DeepEqual(got, []int64{-1, -1, 4}) {
		t.Errorf("Dims(folded) = %v, want [-1 -1 4]", got)
	}
}

// TestConvProjection: a pointwise Conv over channels-first x is a
// projection (marked Conv) whose output is channels-first; a Conv with a
// wider kernel is not.
func TestConvProjection(t *testing.T) {
	b := newBuilder("x")
	xc := b.node("Transpose", []string{"x"}, intsAttr("perm", 0, 2, 1))
	w := b.init(onnx.NewFloat([]int{8, 2, 1}, make([]float32, 16)))
	bias := b.init(onnx.NewFloat([]int{8}, make([]float32, 8)))
	conv := b.node("Conv", []string{xc, w, bias}, intsAttr("kernel_shape", 1), intsAttr("pads", 0, 0))
	q := b.node("Transpose", []string{b.node("Reshape", []string{conv, b.ints(0, 2, 4, -1)})}, intsAttr("perm", 0, 1, 3, 2))
	wide := b.node("Conv", []string{xc, b.init(onnx.NewFloat([]int{8, 8, 3}, make([]float32, 192)))}, intsAttr("kernel_shape", 3), intsAttr("pads", 1, 1))
	f := b.facts()
	proj, ok := f.ProjectionOf(q)
	if !ok || !proj.Conv || proj.Input != xc || proj.Weight != w || proj.Bias != bias {
		t.Errorf("ProjectionOf = %+v, %v; want a Conv projection of %s by %s + %s", proj, ok, xc, w, bias)
	}
	if got := f.ProjWidth(q); got != 8 {
		t.Errorf("ProjWidth = %d, want 8", got)
	}
	if !f.ChannelsFirst(conv) || f.ChannelsFirst(wide) || f.ChannelsFirst("x") {
		t.Errorf("ChannelsFirst: conv %v wide %v x %v; want true false false", f.ChannelsFirst(conv), f.ChannelsFirst(wide), f.ChannelsFirst("x"))
	}
	if _, ok := f.ProjectionOf(wide); ok {
		t.Errorf("a width-3 Conv read as a projection")
	}
}

// TestPreScaleThroughConstantBias: Funnel's q·s + r·s (r a constant) has
// the factor s on q.
func TestPreScaleThroughConstantBias(t *testing.T) {
	b := newBuilder("x")
	r := b.node("Mul", []string{b.init(onnx.NewFloat([]int{8}, make([]float32, 8))), b.scalar(0.5)})
	q := b.node("Add", []string{b.node("Mul", []string{"x", b.scalar(0.5)}), r})
	if s := b.facts().PreScale(q); s != 0.5 {
		t.Errorf("PreScale = %v, want 0.5", s)
	}
}
