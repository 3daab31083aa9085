package graphfacts

import (
	"reflect"
	"testing"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// msNode adds a com.microsoft node.
func (b *builder) msNode(op string, in []string, attrs ...*onnxpb.AttributeProto) string {
	out := b.node(op, in, attrs...)
	b.g.Node[len(b.g.Node)-1].Domain = proto.String("com.microsoft")
	return out
}

// outputs gives the last node more outputs (name_1, name_2, ...).
func (b *builder) outputs(k int) []string {
	n := b.g.Node[len(b.g.Node)-1]
	for i := 1; i < k; i++ {
		n.Output = append(n.Output, n.Output[0]+"_out"+string(rune('0'+i)))
	}
	return n.Output
}

func int8s(shape []int) *onnx.Tensor {
	d := make([]int8, onnx.NumElements(shape))
	for i := range d {
		d[i] = int8(i%7 - 3)
	}
	return &onnx.Tensor{DType: onnx.Int8, Shape: shape, Data: d}
}

func intAttr(name string, v int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(v)}
}

// TestQuantizedProjections: each form onnxruntime's quantization tools
// write for a projection x·W of width 8 ([8, 8] weight), followed by a
// bias and torch's head split view(B, S, −1, 4), proves the split's dims
// [B, S, 2, 4] (the heads solved from the width), the projection's width,
// and the projection itself (the float input x, the integer weight).
func TestQuantizedProjections(t *testing.T) {
	type built struct {
		out, weight, quantized string
		// noProjection: the form is read for dims and width only.
		noProjection bool
	}
	cases := []struct {
		name  string
		input string // the graph input the projection reads ("x": [b,s,8]; "y": no declared shape)
		build func(b *builder, x string) built
	}{
		{"quantize_dynamic: DynamicQuantizeLinear, MatMulInteger, Cast, Mul", "x", func(b *builder, x string) built {
			b.node("DynamicQuantizeLinear", []string{x})
			dq := b.outputs(3)
			w := b.init(int8s([]int{8, 8}))
			mm := b.node("MatMulInteger", []string{dq[0], w, dq[2], b.init(&onnx.Tensor{DType: onnx.Int8, Shape: []int{}, Data: []int8{0}})})
			scale := b.node("Mul", []string{dq[1], b.scalar(0.01)})
			cast := b.node("Cast", []string{mm}, intAttr("to", int64(onnx.Float)))
			return built{b.node("Mul", []string{cast, scale}), w, "MatMulInteger", false}
		}},
		{"the same over an input of unknown rank", "y", func(b *builder, x string) built {
			b.node("DynamicQuantizeLinear", []string{x})
			dq := b.outputs(3)
			w := b.init(int8s([]int{8, 8}))
			mm := b.node("MatMulInteger", []string{dq[0], w})
			cast := b.node("Cast", []string{mm}, intAttr("to", int64(onnx.Float)))
			return built{b.node("Mul", []string{b.node("Mul", []string{dq[1], b.scalar(0.01)}), cast}), w, "MatMulInteger", false}
		}},
		{"QOperator: QuantizeLinear, QLinearMatMul, DequantizeLinear", "x", func(b *builder, x string) built {
			s, zp := b.scalar(0.1), b.init(&onnx.Tensor{DType: onnx.Uint8, Shape: []int{}, Data: []uint8{128}})
			q := b.node("QuantizeLinear", []string{x, s, zp})
			w := b.init(int8s([]int{8, 8}))
			mm := b.node("QLinearMatMul", []string{q, s, zp, w, s, b.init(&onnx.Tensor{DType: onnx.Int8, Shape: []int{}, Data: []int8{0}}), s, zp})
			return built{b.node("DequantizeLinear", []string{mm, s, zp}), w, "QLinearMatMul", false}
		}},
		{"QDQ: MatMul of DequantizeLinear(QuantizeLinear(x)) and DequantizeLinear(W)", "x", func(b *builder, x string) built {
			s, zp := b.scalar(0.1), b.init(&onnx.Tensor{DType: onnx.Uint8, Shape: []int{}, Data: []uint8{128}})
			xq := b.node("DequantizeLinear", []string{b.node("QuantizeLinear", []string{x, s, zp}), s, zp})
			wq := b.init(int8s([]int{8, 8}))
			w := b.node("DequantizeLinear", []string{wq, b.init(onnx.NewFloat([]int{8}, make([]float32, 8))), b.init(&onnx.Tensor{DType: onnx.Int8, Shape: []int{8}, Data: make([]int8, 8)})}, intAttr("axis", 1))
			return built{b.node("MatMul", []string{xq, w}), w, "QDQ", false}
		}},
		{"weight-only: MatMul of x and DequantizeLinear(W)", "x", func(b *builder, x string) built {
			w := b.node("DequantizeLinear", []string{b.init(int8s([]int{8, 8})), b.scalar(0.02)})
			return built{b.node("MatMul", []string{x, w}), w, "QDQ", false}
		}},
		{"com.microsoft MatMulIntegerToFloat", "x", func(b *builder, x string) built {
			b.node("DynamicQuantizeLinear", []string{x})
			dq := b.outputs(3)
			w := b.init(int8s([]int{8, 8}))
			return built{b.msNode("MatMulIntegerToFloat", []string{dq[0], w, dq[1], b.scalar(0.01), dq[2]}), w, "MatMulIntegerToFloat", false}
		}},
		{"com.microsoft DynamicQuantizeMatMul", "x", func(b *builder, x string) built {
			w := b.init(int8s([]int{8, 8}))
			return built{b.msNode("DynamicQuantizeMatMul", []string{x, w, b.scalar(0.01)}), w, "DynamicQuantizeMatMul", false}
		}},
		{"com.microsoft MatMulNBits (4-bit, packed weight)", "x", func(b *builder, x string) built {
			w := b.init(&onnx.Tensor{DType: onnx.Uint8, Shape: []int{8, 1, 4}, Data: make([]uint8, 32)})
			return built{b.msNode("MatMulNBits", []string{x, w, b.init(onnx.NewFloat([]int{8}, make([]float32, 8)))}, intAttr("K", 8), intAttr("N", 8), intAttr("bits", 4), intAttr("block_size", 16)), w, "MatMulNBits", false}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := newBuilder("x")
			b.g.Input = append(b.g.Input, &onnxpb.ValueInfoProto{Name: proto.String("y")})
			bt := c.build(b, c.input)
			bias := b.init(onnx.NewFloat([]int{8}, make([]float32, 8)))
			split := b.node("Reshape", []string{b.node("Add", []string{bias, bt.out}), b.ints(0, 0, -1, 4)})
			heads := b.node("Transpose", []string{split}, intsAttr("perm", 0, 2, 1, 3))
			f := b.facts()
			want := []int64{-1, -1, 2, 4} // for "y", solved from the weight's width alone
			if got := f.Dims(split); !reflect.DeepEqual(got, want) {
				t.Errorf("Dims(head split) = %v, want %v", got, want)
			}
			if got := f.ProjWidth(heads); got != 8 {
				t.Errorf("ProjWidth = %d, want 8", got)
			}
			p, ok := f.ProjectionOf(heads)
			if !ok || p.Input != c.input || p.Weight != bt.weight || p.Bias != bias || p.Quantized != bt.quantized {
				t.Errorf("ProjectionOf = %+v, %v; want input %s, weight %s, bias %s, quantized %q", p, ok, c.input, bt.weight, bias, bt.quantized)
			}
		})
	}
}

// TestQuantizerDims: DynamicQuantizeLinear's scale and zero point are
// scalars, its output 0 has its input's shape; a dequantized value's
// consumer chain gives the input width of the projection reading it.
func TestQuantizerDims(t *testing.T) {
	b := newBuilder("x")
	b.node("DynamicQuantizeLinear", []string{"x"})
	dq := b.outputs(3)
	merged := b.node("Relu", []string{"x"})
	b.node("DynamicQuantizeLinear", []string{merged})
	mq := b.outputs(3)
	b.node("MatMulInteger", []string{mq[0], b.init(int8s([]int{8, 6})), mq[2]})
	f := b.facts()
	for _, c := range []struct {
		v    string
		want []int64
	}{
		{dq[0], []int64{-1, -1, 8}},
		{dq[1], []int64{}},
		{dq[2], []int64{}},
	} {
		if got := f.Dims(c.v); !reflect.DeepEqual(got, c.want) {
			t.Errorf("Dims(%s) = %v, want %v", c.v, got, c.want)
		}
	}
	if got := f.InputWidth(merged); got != 8 {
		t.Errorf("InputWidth through DynamicQuantizeLinear → MatMulInteger = %d, want 8 (the weight's rows)", got)
	}
}
