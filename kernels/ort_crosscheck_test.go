package kernels_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// TestStandardKernelsMatchORT runs single-node models in onnxruntime and
// in the native kernels: the forms the onnx 1.12 conformance data lacks
// (opsets 13–20, attribute-versus-input forms, the Einsum equations of
// tf2onnx/keras). Tolerance rtol 1e-5, atol 1e-6, as for conformance.

type xcase struct {
	name  string
	op    string
	opset int64
	attrs []*onnxpb.AttributeProto
	in    []*onnx.Tensor // nil entries are omitted optional inputs
	nout  int
}

func xcases() []xcase {
	rng := rand.New(rand.NewPCG(31, 32))
	f := func(shape ...int) *onnx.Tensor { return kRand(rng, shape...) }
	i64 := func(v ...int64) *onnx.Tensor { return onnx.NewInt64([]int{len(v)}, v) }
	s64 := func(v int64) *onnx.Tensor { return onnx.NewInt64([]int{}, []int64{v}) }
	i32 := func(shape []int, v ...int32) *onnx.Tensor {
		return &onnx.Tensor{DType: onnx.Int32, Shape: shape, Data: v}
	}
	b := func(shape []int, v ...bool) *onnx.Tensor {
		return &onnx.Tensor{DType: onnx.Bool, Shape: shape, Data: v}
	}
	A := kAttr
	return []xcase{
		{"Gelu", "Gelu", 20, nil, []*onnx.Tensor{f(3, 50)}, 1},
		{"Gelu tanh", "Gelu", 20, []*onnxpb.AttributeProto{A("approximate", "tanh")}, []*onnx.Tensor{f(3, 50)}, 1},
		{"Erf", "Erf", 13, nil, []*onnx.Tensor{f(4, 64)}, 1},
		{"Tanh", "Tanh", 13, nil, []*onnx.Tensor{f(4, 64)}, 1},
		{"Sigmoid", "Sigmoid", 13, nil, []*onnx.Tensor{f(4, 64)}, 1},
		{"Exp", "Exp", 13, nil, []*onnx.Tensor{f(4, 64)}, 1},
		{"LayerNorm-17 last", "LayerNormalization", 17, []*onnxpb.AttributeProto{A("epsilon", float32(1e-12))}, []*onnx.Tensor{f(2, 5, 32), f(32), f(32)}, 3},
		{"LayerNorm-17 axis 1 no bias", "LayerNormalization", 17, []*onnxpb.AttributeProto{A("axis", 1)}, []*onnx.Tensor{f(2, 5, 8), f(5, 8)}, 3},
		{"LayerNorm-13 extension", "LayerNormalization", 13, nil, []*onnx.Tensor{f(2, 5, 16), f(16), f(16)}, 1},
		{"Softmax-11 flattens", "Softmax", 11, []*onnxpb.AttributeProto{A("axis", 1)}, []*onnx.Tensor{f(2, 3, 4)}, 1},
		{"Softmax-11 default", "Softmax", 11, nil, []*onnx.Tensor{f(2, 3, 4)}, 1},
		{"Softmax-13 axis 1", "Softmax", 13, []*onnxpb.AttributeProto{A("axis", 1)}, []*onnx.Tensor{f(2, 3, 4)}, 1},
		{"Softmax-13 attention", "Softmax", 13, nil, []*onnx.Tensor{f(1, 2, 8, 8)}, 1},
		{"LogSoftmax-11 axis 0", "LogSoftmax", 11, []*onnxpb.AttributeProto{A("axis", 0)}, []*onnx.Tensor{f(2, 3, 4)}, 1},
		{"Split-18 num_outputs", "Split", 18, []*onnxpb.AttributeProto{A("num_outputs", 3), A("axis", 1)}, []*onnx.Tensor{f(2, 7)}, 3},
		{"Split-13 input", "Split", 13, []*onnxpb.AttributeProto{A("axis", -1)}, []*onnx.Tensor{f(2, 7), i64(3, 4)}, 2},
		{"ReduceMean-18 axes input", "ReduceMean", 18, []*onnxpb.AttributeProto{A("keepdims", 0)}, []*onnx.Tensor{f(2, 3, 4), i64(0, -1)}, 1},
		{"ReduceMax-18 noop", "ReduceMax", 18, []*onnxpb.AttributeProto{A("noop_with_empty_axes", 1)}, []*onnx.Tensor{f(2, 3)}, 1},
		{"ReduceSum-13 axes input", "ReduceSum", 13, nil, []*onnx.Tensor{f(2, 3, 4), i64(1)}, 1},
		{"ReduceProd-18 all", "ReduceProd", 18, nil, []*onnx.Tensor{f(2, 3)}, 1},
		{"ReduceMean-13 attribute", "ReduceMean", 13, []*onnxpb.AttributeProto{A("axes", []int64{-1})}, []*onnx.Tensor{f(2, 3, 16)}, 1},
		{"Pad-18 axes", "Pad", 18, nil, []*onnx.Tensor{f(2, 3, 4), i64(1, 2, 0, 3), onnx.NewFloat([]int{}, []float32{0.5}), i64(0, 2)}, 1},
		{"Pad-19 wrap", "Pad", 19, []*onnxpb.AttributeProto{A("mode", "wrap")}, []*onnx.Tensor{f(3, 4), i64(1, 2, 2, 3)}, 1},
		{"Pad-13 negative", "Pad", 13, nil, []*onnx.Tensor{f(3, 4), i64(-1, 1, 0, -2)}, 1},
		{"Einsum scores", "Einsum", 13, []*onnxpb.AttributeProto{A("equation", "bhqd,bhkd->bhqk")}, []*onnx.Tensor{f(1, 2, 5, 4), f(1, 2, 6, 4)}, 1},
		{"Einsum dense", "Einsum", 13, []*onnxpb.AttributeProto{A("equation", "abc,cd->abd")}, []*onnx.Tensor{f(2, 5, 4), f(4, 3)}, 1},
		{"Einsum out proj", "Einsum", 13, []*onnxpb.AttributeProto{A("equation", "bfnd,ndh->bfh")}, []*onnx.Tensor{f(2, 5, 3, 4), f(3, 4, 6)}, 1},
		{"Einsum keras", "Einsum", 13, []*onnxpb.AttributeProto{A("equation", "aecd,abcd->acbe")}, []*onnx.Tensor{f(2, 5, 3, 4), f(2, 6, 3, 4)}, 1},
		{"Einsum ellipsis", "Einsum", 13, []*onnxpb.AttributeProto{A("equation", "...ij,...jk->...ik")}, []*onnx.Tensor{f(2, 3, 4), f(2, 4, 5)}, 1},
		{"Reshape-14 allowzero", "Reshape", 14, []*onnxpb.AttributeProto{A("allowzero", 1)}, []*onnx.Tensor{f(0, 4), i64(4, 0)}, 1},
		{"Reshape-13 copy and infer", "Reshape", 13, nil, []*onnx.Tensor{f(2, 3, 4), i64(0, -1, 2)}, 1},
		{"Slice-13 negative steps", "Slice", 13, nil, []*onnx.Tensor{f(5, 7), i64(-1, 100), i64(-100, 0), i64(1, 0), i64(-2, -3)}, 1},
		{"Slice-13 defaults", "Slice", 13, nil, []*onnx.Tensor{f(5, 7), i64(1), i64(-1)}, 1},
		{"Where broadcast", "Where", 16, nil, []*onnx.Tensor{b([]int{2, 1}, true, false), f(3), f(2, 3)}, 1},
		{"Expand", "Expand", 13, nil, []*onnx.Tensor{f(3, 1), i64(2, 1, 4)}, 1},
		{"Tile", "Tile", 13, nil, []*onnx.Tensor{f(2, 3), i64(2, 3)}, 1},
		{"Gather axis 1 negative", "Gather", 13, []*onnxpb.AttributeProto{A("axis", 1)}, []*onnx.Tensor{f(3, 5, 2), onnx.NewInt64([]int{2, 2}, []int64{-1, 0, 2, -5})}, 1},
		{"Gather scalar index", "Gather", 13, nil, []*onnx.Tensor{f(3, 5), s64(-1)}, 1},
		{"GatherElements", "GatherElements", 13, []*onnxpb.AttributeProto{A("axis", 1)}, []*onnx.Tensor{f(3, 4), onnx.NewInt64([]int{3, 2}, []int64{0, 3, -1, 2, 1, 1})}, 1},
		{"Trilu lower k", "Trilu", 14, []*onnxpb.AttributeProto{A("upper", 0)}, []*onnx.Tensor{f(2, 4, 5), s64(1)}, 1},
		{"CumSum exclusive reverse", "CumSum", 14, []*onnxpb.AttributeProto{A("exclusive", 1), A("reverse", 1)}, []*onnx.Tensor{f(3, 4), s64(1)}, 1},
		{"Range float", "Range", 11, nil, []*onnx.Tensor{onnx.NewFloat([]int{}, []float32{1}), onnx.NewFloat([]int{}, []float32{-2}), onnx.NewFloat([]int{}, []float32{-0.7})}, 1},
		{"Range int64", "Range", 11, nil, []*onnx.Tensor{s64(0), s64(10), s64(3)}, 1},
		{"ArgMax last", "ArgMax", 13, []*onnxpb.AttributeProto{A("axis", 1), A("select_last_index", 1), A("keepdims", 0)}, []*onnx.Tensor{onnx.NewFloat([]int{2, 3}, []float32{1, 3, 3, 2, 2, 0})}, 1},
		{"TopK smallest", "TopK", 11, []*onnxpb.AttributeProto{A("largest", 0)}, []*onnx.Tensor{f(3, 6), i64(4)}, 2},
		{"Mod int", "Mod", 13, nil, []*onnx.Tensor{i32([]int{4}, -7, 7, -7, 7), i32([]int{4}, 3, -3, -3, 3)}, 1},
		{"Cast to float16", "Cast", 13, []*onnxpb.AttributeProto{A("to", int(onnx.Float16))}, []*onnx.Tensor{f(4, 8)}, 1},
		{"Cast to int32", "Cast", 13, []*onnxpb.AttributeProto{A("to", int(onnx.Int32))}, []*onnx.Tensor{onnx.NewFloat([]int{4}, []float32{-2.7, -0.5, 0.5, 2.7})}, 1},
		{"MatMul broadcast", "MatMul", 13, nil, []*onnx.Tensor{f(2, 1, 3, 4), f(3, 4, 2)}, 1},
		{"MatMul shared weight", "MatMul", 13, nil, []*onnx.Tensor{f(2, 6, 16), f(16, 24)}, 1},
		{"Gemm transposed", "Gemm", 13, []*onnxpb.AttributeProto{A("transA", 1), A("transB", 1), A("alpha", float32(0.5)), A("beta", float32(2))}, []*onnx.Tensor{f(4, 3), f(5, 4), f(5)}, 1},
		{"Clip-13 max only", "Clip", 13, nil, []*onnx.Tensor{f(3, 4), nil, onnx.NewFloat([]int{}, []float32{0.2})}, 1},
		{"Pow int exponent", "Pow", 15, nil, []*onnx.Tensor{f(3, 4), i64(2, 3, 1, 0)}, 1},
		{"Shape-15 start end", "Shape", 15, []*onnxpb.AttributeProto{A("start", -3), A("end", -1)}, []*onnx.Tensor{f(2, 3, 4, 5)}, 1},
		{"Squeeze-13 all", "Squeeze", 13, nil, []*onnx.Tensor{f(1, 3, 1, 2)}, 1},
		{"Unsqueeze-13 negative", "Unsqueeze", 13, nil, []*onnx.Tensor{f(3, 2), i64(-1, 0)}, 1},
		{"Dropout-13 mask", "Dropout", 13, nil, []*onnx.Tensor{f(3, 4), onnx.NewFloat([]int{}, []float32{0.3})}, 2},
		{"Sum variadic broadcast", "Sum", 13, nil, []*onnx.Tensor{f(2, 3), f(3), f(2, 1)}, 1},
		{"Mean variadic", "Mean", 13, nil, []*onnx.Tensor{f(2, 3), f(3), f(2, 1)}, 1},
		{"Max variadic", "Max", 13, nil, []*onnx.Tensor{f(2, 3), f(3), f(2, 1)}, 1},
		{"Flatten axis 0", "Flatten", 13, []*onnxpb.AttributeProto{A("axis", 0)}, []*onnx.Tensor{f(2, 3, 4)}, 1},
		{"Concat negative axis", "Concat", 13, []*onnxpb.AttributeProto{A("axis", -2)}, []*onnx.Tensor{f(2, 3, 4), f(2, 1, 4)}, 1},
		{"ConstantOfShape int64", "ConstantOfShape", 20, []*onnxpb.AttributeProto{{Name: proto.String("value"), Type: onnxpb.AttributeProto_TENSOR.Enum(), T: &onnxpb.TensorProto{DataType: proto.Int32(int32(onnx.Int64)), Dims: []int64{1}, Int64Data: []int64{7}}}}, []*onnx.Tensor{i64(2, 3)}, 1},
		{"NonZero", "NonZero", 13, nil, []*onnx.Tensor{onnx.NewFloat([]int{2, 3}, []float32{0, 1, 0, 2, 0, 3})}, 1},
		{"OneHot axis 0", "OneHot", 11, []*onnxpb.AttributeProto{A("axis", 0)}, []*onnx.Tensor{i64(0, 2, -1), s64(4), onnx.NewFloat([]int{2}, []float32{-1, 5})}, 1},
		{"Transpose default perm", "Transpose", 13, nil, []*onnx.Tensor{f(2, 3, 4)}, 1},
		{"Div broadcast", "Div", 14, nil, []*onnx.Tensor{f(2, 3, 4), f(3, 1)}, 1},
		{"Equal int64", "Equal", 13, nil, []*onnx.Tensor{i64(1, 2, 3), s64(2)}, 1},
		{"Sqrt", "Sqrt", 13, nil, []*onnx.Tensor{onnx.NewFloat([]int{4}, []float32{0, 0.25, 2, 1e6})}, 1},
	}
}

func TestStandardKernelsMatchORT(t *testing.T) {
	if err := infer.ORTAvailable(); err != nil {
		t.Skipf("onnxruntime not available (install it with scripts/setup.sh): %v", err)
	}
	for _, c := range xcases() {
		t.Run(c.name, func(t *testing.T) { crossCheckORT(t, c, 1e-5, 1e-6) })
	}
}

// crossCheckORT runs c's node in onnxruntime and in the native kernel and
// compares every output (tolerances as compareTensors).
func crossCheckORT(t *testing.T, c xcase, rtol, atol float64) {
	t.Helper()
	node := kNode(c.op, c.nout, c.attrs...)
	feed := map[string]*onnx.Tensor{}
	g := &onnxpb.GraphProto{Name: proto.String("x"), Node: []*onnxpb.NodeProto{node}}
	for i, x := range c.in {
		name := ""
		if x != nil {
			name = fmt.Sprintf("x%d", i)
			feed[name] = x
			dims := make([]onnx.Dim, len(x.Shape))
			for k := range dims {
				dims[k] = onnx.Dim{Value: int64(x.Shape[k])}
			}
			g.Input = append(g.Input, onnx.MakeValueInfo(name, x.DType, dims))
		}
		node.Input = append(node.Input, name)
	}
	want := kRun(t, node, c.opset, c.in...)
	for i, y := range want {
		if i < c.nout {
			g.Output = append(g.Output, onnx.MakeValueInfo(node.Output[i], y.DType, nil))
		}
	}
	m := &onnxpb.ModelProto{
		IrVersion:   proto.Int64(9),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(c.opset)}},
		Graph:       g,
	}
	s, err := infer.NewORTSession(m, infer.Options{Threads: 1})
	if err != nil {
		t.Fatalf("onnxruntime: %v", err)
	}
	defer s.Close()
	res, err := s.Run(feed)
	if err != nil {
		t.Fatalf("onnxruntime run: %v", err)
	}
	for i := range c.nout {
		ref := res[node.Output[i]]
		if ref == nil {
			t.Fatalf("onnxruntime did not return %s", node.Output[i])
		}
		if err := compareTensors(want[i], ref, rtol, atol); err != nil {
			t.Errorf("output %d: native %s vs onnxruntime %s: %v", i, want[i], ref, err)
		}
	}
}
