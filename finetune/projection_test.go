package finetune

import (
	"strings"
	"testing"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/internal/graphfacts"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// TestBlockProjection: the projection Detect proved is used as it is when
// the fit can update it, and refused with the reason otherwise; without
// one, the converted graph's facts find it behind the node's input.
func TestBlockProjection(t *testing.T) {
	g := &onnxpb.GraphProto{}
	for _, name := range []string{"w", "b", "wt"} {
		tp, err := onnx.EncodeTensor(name, onnx.NewFloat([]int{4, 4}, make([]float32, 16)))
		if err != nil {
			t.Fatal(err)
		}
		g.Initializer = append(g.Initializer, tp)
	}
	node := func(op string, in []string, out string, attrs ...*onnxpb.AttributeProto) {
		g.Node = append(g.Node, &onnxpb.NodeProto{Name: proto.String(op + "_" + out), OpType: proto.String(op), Input: in, Output: []string{out}, Attribute: attrs})
	}
	node("MatMul", []string{"x", "w"}, "xw")
	node("Add", []string{"xw", "b"}, "q")
	node("Transpose", []string{"q"}, "qt")
	node("Gemm", []string{"x", "wt"}, "k", &onnxpb.AttributeProto{Name: proto.String("transB"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(1)})
	f := graphfacts.New(onnx.NewIndex(g), 17)
	inits := initializerIndex(g)

	p, err := blockProjection(f, inits, "Q", &convert.Projection{Input: "x", Weight: "w", Bias: "b"}, "ignored")
	if err != nil || p != (projection{x: "x", w: "w", b: "b"}) {
		t.Errorf("proved projection: %+v, %v", p, err)
	}
	p, err = blockProjection(f, inits, "Q", nil, "qt")
	if err != nil || p != (projection{x: "x", w: "w", b: "b"}) {
		t.Errorf("projection found in the converted graph: %+v, %v", p, err)
	}
	for _, c := range []struct {
		pr   *convert.Projection
		v    string
		want string
	}{
		{nil, "x", "is not computed from a projection"},
		{&convert.Projection{Input: "x", Weight: "nope"}, "", "is not an initializer"},
		{&convert.Projection{Input: "x", Weight: "w", Bias: "nope"}, "", "bias \"nope\" is not an initializer"},
		{&convert.Projection{Input: "x", Weight: "wt", Transposed: true}, "", "held transposed"},
	} {
		if _, err := blockProjection(f, inits, "K", c.pr, c.v); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.pr, err, c.want)
		}
	}
}
