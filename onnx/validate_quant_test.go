package onnx_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

func dt(d onnx.DataType) *int32 { v := int32(d); return &v }

// quantModel is Y = DequantizeLinear(W, S, Z) with W a uint8 [4, 3]
// initializer quantized along axis 0 (S float32 [4], Z uint8 [4]);
// P = QuantizeLinear(X, PS, PZ) of a float [2, 3] input (PS a float
// scalar, PZ a uint8 scalar); and C = MatMulInteger(P, V, PZ, CZ) with V
// a uint8 [3, 4] weight and CZ its uint8 zero points per column [4].
// The cases below break one parameter each.
func quantModel() *onnxpb.ModelProto {
	w, _ := onnx.EncodeTensor("W", &onnx.Tensor{DType: onnx.Uint8, Shape: []int{4, 3}, Data: make([]uint8, 12)})
	s, _ := onnx.EncodeTensor("S", onnx.NewFloat([]int{4}, []float32{0.1, 0.2, 0.3, 0.4}))
	z := &onnxpb.TensorProto{Name: sp("Z"), DataType: dt(onnx.Uint8), Dims: []int64{4}, Int32Data: []int32{0, 128, 255, 3}}
	ps, _ := onnx.EncodeTensor("PS", onnx.NewFloat(nil, []float32{0.05}))
	pz := &onnxpb.TensorProto{Name: sp("PZ"), DataType: dt(onnx.Uint8), Int32Data: []int32{128}}
	v, _ := onnx.EncodeTensor("V", &onnx.Tensor{DType: onnx.Uint8, Shape: []int{3, 4}, Data: make([]uint8, 12)})
	cz := &onnxpb.TensorProto{Name: sp("CZ"), DataType: dt(onnx.Uint8), Dims: []int64{4}, Int32Data: []int32{1, 2, 3, 4}}
	axis0 := &onnxpb.AttributeProto{Name: sp("axis"), Type: onnxpb.AttributeProto_INT.Enum(), I: i64p(0)}
	return &onnxpb.ModelProto{
		IrVersion:   i64p(8),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: sp(""), Version: i64p(17)}},
		Graph: &onnxpb.GraphProto{
			Name: sp("g"),
			Node: []*onnxpb.NodeProto{
				{Name: sp("dq"), OpType: sp("DequantizeLinear"), Input: []string{"W", "S", "Z"}, Output: []string{"Y"}, Attribute: []*onnxpb.AttributeProto{axis0}},
				{Name: sp("q"), OpType: sp("QuantizeLinear"), Input: []string{"X", "PS", "PZ"}, Output: []string{"P"}},
				{Name: sp("mmi"), OpType: sp("MatMulInteger"), Input: []string{"P", "V", "PZ", "CZ"}, Output: []string{"C"}},
			},
			Initializer: []*onnxpb.TensorProto{w, s, z, ps, pz, v, cz},
			Input:       []*onnxpb.ValueInfoProto{onnx.MakeValueInfo("X", onnx.Float, []onnx.Dim{{Value: 2}, {Value: 3}})},
			Output: []*onnxpb.ValueInfoProto{
				onnx.MakeValueInfo("Y", onnx.Float, []onnx.Dim{{Value: 4}, {Value: 3}}),
				onnx.MakeValueInfo("C", onnx.Int32, []onnx.Dim{{Value: 2}, {Value: 4}}),
			},
		},
	}
}

func initializer(m *onnxpb.ModelProto, name string) *onnxpb.TensorProto {
	for _, t := range m.Graph.Initializer {
		if t.GetName() == name {
			return t
		}
	}
	panic(name)
}

// replace puts t in place of the initializer of its name.
func replace(m *onnxpb.ModelProto, t *onnxpb.TensorProto) {
	for i, old := range m.Graph.Initializer {
		if old.GetName() == t.GetName() {
			m.Graph.Initializer[i] = t
			return
		}
	}
	panic(t.GetName())
}

func setFloats(m *onnxpb.ModelProto, name string, v ...float32) {
	x, _ := onnx.EncodeTensor(name, onnx.NewFloat([]int{len(v)}, v))
	if len(initializer(m, name).Dims) == 0 {
		x.Dims = nil
	}
	replace(m, x)
}

// TestValidateQuantParams: hostile scales and zero points of quantizing
// nodes are refused at load, each naming the node and the value.
func TestValidateQuantParams(t *testing.T) {
	if err := onnx.Validate(quantModel()); err != nil {
		t.Fatalf("the sound model is refused: %v", err)
	}
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	cases := []struct {
		name   string
		break_ func(m *onnxpb.ModelProto)
		want   string
	}{
		{"zero scale", func(m *onnxpb.ModelProto) { setFloats(m, "S", 0.1, 0.2, 0, 0.4) },
			`node "dq" (DequantizeLinear): scale "S" value 0 at index 2 is not a finite positive number`},
		{"negative scale", func(m *onnxpb.ModelProto) { setFloats(m, "S", 0.1, -0.2, 0.3, 0.4) }, `scale "S" value -0.2 at index 1`},
		{"NaN scale", func(m *onnxpb.ModelProto) { setFloats(m, "PS", nan) }, `node "q" (QuantizeLinear): scale "PS" value NaN at index 0`},
		{"Inf scale", func(m *onnxpb.ModelProto) { setFloats(m, "S", 0.1, 0.2, 0.3, inf) }, `scale "S" value +Inf at index 3`},
		{"float16 NaN scale", func(m *onnxpb.ModelProto) {
			h, _ := onnx.EncodeTensor("S", &onnx.Tensor{DType: onnx.Float16, Shape: []int{4}, Data: []uint16{0x3c00, 0x7e00, 0x3c00, 0x3c00}})
			replace(m, h)
		}, `scale "S" value NaN at index 1`},
		{"scale from a Constant node", func(m *onnxpb.ModelProto) {
			m.Graph.Initializer = remove(m.Graph.Initializer, "PS")
			m.Graph.Node = append([]*onnxpb.NodeProto{{Name: sp("c"), OpType: sp("Constant"), Output: []string{"PS"},
				Attribute: []*onnxpb.AttributeProto{{Name: sp("value_float"), Type: onnxpb.AttributeProto_FLOAT.Enum(), F: fp(-1)}}}}, m.Graph.Node...)
		}, `node "q" (QuantizeLinear): scale "PS" value -1 at index 0`},
		{"integer scale", func(m *onnxpb.ModelProto) {
			x, _ := onnx.EncodeTensor("S", onnx.NewInt64([]int{4}, []int64{1, 1, 1, 1}))
			replace(m, x)
		}, `scale "S" is int64, not floating point`},
		// A uint8 zero point whose int32_data holds 300 (DecodeTensor
		// would read 44).
		{"uint8 zero point 300", func(m *onnxpb.ModelProto) { initializer(m, "Z").Int32Data[1] = 300 },
			`node "dq" (DequantizeLinear): zero point "Z" value 300 at index 1 is outside uint8 (0..255)`},
		{"uint8 zero point -1", func(m *onnxpb.ModelProto) { initializer(m, "PZ").Int32Data[0] = -1 },
			`node "q" (QuantizeLinear): zero point "PZ" value -1 at index 0 is outside uint8 (0..255)`},
		{"int8 zero point 128", func(m *onnxpb.ModelProto) {
			w := initializer(m, "W")
			w.DataType = dt(onnx.Int8)
			z := initializer(m, "Z")
			z.DataType = dt(onnx.Int8)
			z.Int32Data = []int32{0, 1, 128, -128}
		}, `zero point "Z" value 128 at index 2 is outside int8 (-128..127)`},
		{"zero point of another type", func(m *onnxpb.ModelProto) { initializer(m, "Z").DataType = dt(onnx.Int8) },
			`node "dq" (DequantizeLinear): zero point "Z" is int8 but the quantized value "W" is uint8`},
		{"zero point unlike the declared output", func(m *onnxpb.ModelProto) {
			m.Graph.ValueInfo = append(m.Graph.ValueInfo, onnx.MakeValueInfo("P", onnx.Int8, []onnx.Dim{{Value: 2}, {Value: 3}}))
		}, `node "q" (QuantizeLinear): zero point "PZ" is uint8 but the quantized value "P" (the output) is int8`},
		{"float zero point", func(m *onnxpb.ModelProto) {
			x, _ := onnx.EncodeTensor("Z", onnx.NewFloat([]int{4}, []float32{0, 0, 0, 0}))
			replace(m, x)
		}, `zero point "Z" is float32, not a type a zero point may have`},
		{"per-axis scale of the wrong length", func(m *onnxpb.ModelProto) {
			setFloats(m, "S", 0.1, 0.2, 0.3)
			z := initializer(m, "Z")
			z.Dims, z.Int32Data = []int64{3}, []int32{0, 0, 0}
		}, `node "dq" (DequantizeLinear): scale "S" has 3 values for an axis of 4 (input "W")`},
		{"axis 1 of length 3", func(m *onnxpb.ModelProto) { m.Graph.Node[0].Attribute[0].I = i64p(1) }, `scale "S" has 4 values for an axis of 3`},
		{"zero point unlike its scale", func(m *onnxpb.ModelProto) {
			initializer(m, "Z").Dims = []int64{2, 2}
		}, `zero point "Z" has shape [2 2], its scale "S" [4]`},
		{"MatMulInteger zero point per column", func(m *onnxpb.ModelProto) {
			z := initializer(m, "CZ")
			z.Dims, z.Int32Data = []int64{3}, []int32{0, 0, 0}
		}, `node "mmi" (MatMulInteger): zero point "CZ" has 3 values for an axis of 4 (input "V")`},
		{"MatMulInteger zero point type", func(m *onnxpb.ModelProto) { initializer(m, "CZ").DataType = dt(onnx.Int8) },
			`node "mmi" (MatMulInteger): zero point "CZ" is int8 but the quantized value "V" is uint8`},
		{"com.microsoft QLinearAdd", func(m *onnxpb.ModelProto) {
			m.Graph.Node = append(m.Graph.Node, &onnxpb.NodeProto{Name: sp("qadd"), OpType: sp("QLinearAdd"), Domain: sp("com.microsoft"),
				Input: []string{"P", "PS", "PZ", "P", "PS", "PZ", "NS", "PZ"}, Output: []string{"A"}})
			ns, _ := onnx.EncodeTensor("NS", onnx.NewFloat(nil, []float32{-0.5}))
			m.Graph.Initializer = append(m.Graph.Initializer, ns)
		}, `node "qadd" (com.microsoft:QLinearAdd): scale "NS" value -0.5 at index 0`},
		{"no outputs", func(m *onnxpb.ModelProto) { m.Graph.Output = nil }, `graph: no outputs`},
		// Any narrow integer tensor, not only zero points.
		{"uint8 weight 256", func(m *onnxpb.ModelProto) {
			w := initializer(m, "W")
			w.RawData, w.Int32Data = nil, make([]int32, 12)
			w.Int32Data[5] = 256
		}, `tensor "W": value 256 at index 5 is outside uint8 (0..255)`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := quantModel()
			c.break_(m)
			err := onnx.Validate(m)
			if err == nil {
				t.Fatal("Validate accepted the model")
			}
			if !errors.Is(err, onnx.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q, want one naming %q", err, c.want)
			}
		})
	}
}

func remove(ts []*onnxpb.TensorProto, name string) []*onnxpb.TensorProto {
	var out []*onnxpb.TensorProto
	for _, t := range ts {
		if t.GetName() != name {
			out = append(out, t)
		}
	}
	return out
}

func fp(f float32) *float32 { return &f }
