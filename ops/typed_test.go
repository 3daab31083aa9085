package ops_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/linearize/linearize/kernels"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
	"google.golang.org/protobuf/proto"
)

// Half-precision models feed the ops float16 or bfloat16 tensors. The ops
// compute in float32 and round the output once, so the reference for a
// half-precision run is the float32 computation on the same (rounded)
// inputs, rounded to the half type: a correct result is within one unit
// in the last place of it. Where the op is exact attention (a local block
// covering the sequence), the reference is the float64 definition.

// halfCase is one op with its float32 inputs already rounded to the half
// type under test (so both sides see the same numbers).
type halfCase struct {
	name   string
	node   *onnxpb.NodeProto
	fn     func(opset int64) (*onnxpb.FunctionProto, error)
	in     map[string]*onnx.Tensor // float32
	half   []string                // inputs given in the half type (the rest stay float32: added weights)
	exact  func() []float64        // float64 definition, or nil
	kernel func(in map[string]*onnx.Tensor) (*onnx.Tensor, error)
}

func roundTo(t *onnx.Tensor, dt onnx.DataType) *onnx.Tensor {
	src := t.Floats()
	d := make([]uint16, len(src))
	for i, x := range src {
		if dt == onnx.Float16 {
			d[i] = onnx.FloatToHalf(x)
		} else {
			d[i] = onnx.FloatToBFloat16(x)
		}
	}
	return &onnx.Tensor{DType: dt, Shape: t.Shape, Data: d}
}

func widenHalf(t *onnx.Tensor) *onnx.Tensor {
	src := t.Data.([]uint16)
	d := make([]float32, len(src))
	for i, x := range src {
		if t.DType == onnx.Float16 {
			d[i] = onnx.HalfToFloat(x)
		} else {
			d[i] = onnx.BFloat16ToFloat(x)
		}
	}
	return onnx.NewFloat(t.Shape, d)
}

func halfCases(t *testing.T, dt onnx.DataType) []halfCase {
	rng := rand.New(rand.NewPCG(5, uint64(dt)))
	b, h, s, d := 2, 3, 12, 8
	q, k, v := randQKV(rng, 1, b, h, s, d, d)
	// Round Q, K, V to the half type first: both sides then compute on
	// the same numbers.
	for _, x := range []**onnx.Tensor{&q, &k, &v} {
		*x = widenHalf(roundTo(*x, dt))
	}
	// −3·10⁴: a mask value that stays at or below the ops' padding
	// threshold (−10⁴) in both types; −10⁴ itself rounds to −9984 in
	// bfloat16.
	bias := padBias(s, -3e4, 0, 3)
	var cases []halfCase
	for _, lp := range []struct {
		name  string
		a     ops.LocalPooledAttrs
		exact bool
	}{
		{"local+pooled block covers S", ops.LocalPooledAttrs{Scale: 0.3, Block: s, Segments: 2}, true},
		{"local+pooled block 3", ops.LocalPooledAttrs{Scale: 0.3, Block: 3, Segments: 2, SinkFirst: true}, false},
		{"local band L=3 R=2", ops.LocalPooledAttrs{Scale: 0.3, Block: 4, Band: true, WindowLeft: 3, WindowRight: 2}, true},
	} {
		c := halfCase{
			name: lp.name,
			node: ops.NewLocalPooledNode("lp", []string{"Q", "K", "V", "key_bias"}, "out", lp.a),
			fn:   func(opset int64) (*onnxpb.FunctionProto, error) { return ops.LocalPooledFunction(opset, lp.a) },
			in:   map[string]*onnx.Tensor{"Q": q, "K": k, "V": v, "key_bias": bias},
			half: []string{"Q", "K", "V", "key_bias"},
			kernel: func(in map[string]*onnx.Tensor) (*onnx.Tensor, error) {
				return ops.LocalPooled(in["Q"], in["K"], in["V"], in["key_bias"], lp.a)
			},
		}
		switch {
		case lp.exact && lp.a.Band:
			c.exact = func() []float64 { return DenseBandAttention(q, k, v, bias, 0.3, lp.a.WindowLeft, lp.a.WindowRight) }
		case lp.exact:
			c.exact = func() []float64 { return exactAttention(q, k, v, bias, 0.3) }
		}
		cases = append(cases, c)
	}
	// The pooled Linformer: E and F absent (""), which the typed body
	// must not cast.
	la := ops.LinformerAttrs{Scale: 0.3, Segments: 3, SinkFirst: true, SinkLast: true}
	cases = append(cases, halfCase{
		name: "linformer pooled",
		node: ops.NewLinformerNode("lin", []string{"Q", "K", "V", "", "", "key_bias"}, "out", la),
		fn:   func(opset int64) (*onnxpb.FunctionProto, error) { return ops.LinformerFunctionFor(opset, la) },
		in:   map[string]*onnx.Tensor{"Q": q, "K": k, "V": v, "key_bias": bias},
		half: []string{"Q", "K", "V", "key_bias"},
		kernel: func(in map[string]*onnx.Tensor) (*onnx.Tensor, error) {
			return ops.Linformer(in["Q"], in["K"], in["V"], nil, nil, in["key_bias"], la)
		},
	})
	omega := randTensor(rng, 1, h, 16, d)
	pa := ops.PerformerAttrs{Scale: 0.3, Kernel: "positive"}
	cases = append(cases, halfCase{
		name: "performer positive",
		node: ops.NewPerformerNode("perf", []string{"Q", "K", "V", "Omega", "key_bias"}, "out", pa),
		fn:   func(opset int64) (*onnxpb.FunctionProto, error) { return ops.PerformerFunction("positive", opset) },
		in:   map[string]*onnx.Tensor{"Q": q, "K": k, "V": v, "Omega": omega, "key_bias": bias},
		half: []string{"Q", "K", "V", "key_bias"},
		kernel: func(in map[string]*onnx.Tensor) (*onnx.Tensor, error) {
			return ops.Performer(in["Q"], in["K"], in["V"], in["Omega"], in["key_bias"], pa)
		},
	})
	return cases
}

// typedModel is oneNodeModel with the half inputs declared in dt.
func typedModel(t *testing.T, c halfCase, fn *onnxpb.FunctionProto, opset int64, dt onnx.DataType) (*onnxpb.ModelProto, map[string]*onnx.Tensor) {
	t.Helper()
	feed := map[string]*onnx.Tensor{}
	for name, x := range c.in {
		feed[name] = x
	}
	for _, name := range c.half {
		feed[name] = roundTo(c.in[name], dt)
	}
	g := &onnxpb.GraphProto{Name: proto.String("typed"), Node: []*onnxpb.NodeProto{c.node}}
	for _, name := range c.node.Input {
		if name == "" { // an absent optional input
			continue
		}
		x := feed[name]
		dims := make([]onnx.Dim, len(x.Shape))
		for i := range dims {
			dims[i] = onnx.Dim{Value: -1, Param: fmt.Sprintf("%s_%d", name, i)}
		}
		g.Input = append(g.Input, onnx.MakeValueInfo(name, x.DType, dims))
	}
	g.Output = []*onnxpb.ValueInfoProto{onnx.MakeValueInfo("out", dt, nil)}
	m := &onnxpb.ModelProto{
		IrVersion:   proto.Int64(10),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(opset)}},
		Graph:       g,
	}
	if err := ops.ImportFunction(m, fn); err != nil {
		t.Fatal(err)
	}
	data, err := onnx.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	if m, err = onnx.Decode(data); err != nil {
		t.Fatal(err)
	}
	return m, feed
}

// ulpOff returns the largest |got − want| in units of the last place of
// the output scale (max |want|) in dt: 2^-10 or 2^-7 of the scale.
func ulpOff(t *testing.T, got *onnx.Tensor, want []float64, dt onnx.DataType) float64 {
	t.Helper()
	if got.DType != dt {
		t.Fatalf("output type %s, want %s", onnx.TypeName(got.DType), onnx.TypeName(dt))
	}
	g := widenHalf(got).Floats()
	if len(g) != len(want) {
		t.Fatalf("%d outputs, want %d", len(g), len(want))
	}
	scale := 0.0
	for _, w := range want {
		scale = math.Max(scale, math.Abs(w))
	}
	ulp := scale / 1024
	if dt == onnx.BFloat16 {
		ulp = scale / 128
	}
	worst := 0.0
	for i := range g {
		worst = math.Max(worst, math.Abs(float64(g[i])-want[i])/ulp)
	}
	return worst
}

// TestTypedFunctionsInORT: the typed function bodies load in onnxruntime
// with float16 and bfloat16 inputs, return the inputs' type, and agree
// with the float32 computation on the same numbers within one unit in the
// last place (with the float64 definition where the op is exact).
func TestTypedFunctionsInORT(t *testing.T) {
	requireORT(t)
	for _, dt := range []onnx.DataType{onnx.Float16, onnx.BFloat16} {
		for _, c := range halfCases(t, dt) {
			for _, opset := range []int64{13, 17} {
				t.Run(fmt.Sprintf("%s/%s/opset%d", onnx.TypeName(dt), c.name, opset), func(t *testing.T) {
					fn32, err := c.fn(opset)
					if err != nil {
						t.Fatal(err)
					}
					fn, err := ops.TypedFunction(fn32, dt)
					if err != nil {
						t.Fatal(err)
					}
					m, feed := typedModel(t, c, fn, opset, dt)
					got := runORT(t, m, feed)
					want32, err := c.kernel(c.in)
					if err != nil {
						t.Fatal(err)
					}
					if off := ulpOff(t, got, widen(want32.Floats()), dt); off > 1.01 {
						t.Errorf("onnxruntime vs float32 kernel: %.2f units in the last place (want ≤ 1)", off)
					}
					if c.exact != nil {
						if off := ulpOff(t, got, c.exact(), dt); off > 1.01 {
							t.Errorf("onnxruntime vs float64 attention: %.2f units in the last place (want ≤ 1)", off)
						}
					}
				})
			}
		}
	}
}

// TestKernelsTakeHalfInputs: the registered Go kernels accept float16 and
// bfloat16 inputs (as a half-precision model's native run feeds them) and
// return the float32 result rounded to Q's type.
func TestKernelsTakeHalfInputs(t *testing.T) {
	for _, dt := range []onnx.DataType{onnx.Float16, onnx.BFloat16} {
		for _, c := range halfCases(t, dt) {
			t.Run(onnx.TypeName(dt)+"/"+c.name, func(t *testing.T) {
				k, err := kernels.Lookup(ops.Domain, c.node.GetOpType(), 1)
				if err != nil {
					t.Fatal(err)
				}
				in := make([]*onnx.Tensor, len(c.node.Input))
				for i, name := range c.node.Input {
					in[i] = c.in[name]
					for _, h := range c.half {
						if h == name {
							in[i] = roundTo(c.in[name], dt)
						}
					}
				}
				out, err := k(&kernels.Context{Node: c.node, Opset: 1}, in)
				if err != nil {
					t.Fatal(err)
				}
				want32, err := c.kernel(c.in)
				if err != nil {
					t.Fatal(err)
				}
				if off := ulpOff(t, out[0], widen(want32.Floats()), dt); off > 0.51 {
					t.Errorf("%.2f units in the last place from the rounded float32 result (want ≤ ½)", off)
				}
			})
		}
	}
}

// TestTypedFunctionShape: the typed body casts each input once to float32
// before the float32 body and each output once to the type after it, and
// float32 gets the body unchanged.
func TestTypedFunctionShape(t *testing.T) {
	fn, err := ops.LocalPooledFunction(17, ops.LocalPooledAttrs{Scale: 0.3, Block: 4, Segments: 2})
	if err != nil {
		t.Fatal(err)
	}
	same, err := ops.TypedFunction(fn, onnx.Float)
	if err != nil || same != fn {
		t.Fatalf("float32: got a new function (err %v)", err)
	}
	half, err := ops.TypedFunction(fn, onnx.Float16)
	if err != nil {
		t.Fatal(err)
	}
	if len(half.Node) != len(fn.Node)+len(fn.Input)+len(fn.Output) {
		t.Fatalf("%d nodes, want %d", len(half.Node), len(fn.Node)+len(fn.Input)+len(fn.Output))
	}
	for i, x := range fn.Input {
		n := half.Node[i]
		if n.GetOpType() != "Cast" || n.Input[0] != x || onnx.AttrInt(n, "to", 0) != int64(onnx.Float) {
			t.Errorf("node %d: %s(%v) to %d, want Cast(%s) to float", i, n.GetOpType(), n.Input, onnx.AttrInt(n, "to", 0), x)
		}
	}
	last := half.Node[len(half.Node)-1]
	if last.GetOpType() != "Cast" || last.Output[0] != fn.Output[0] || onnx.AttrInt(last, "to", 0) != int64(onnx.Float16) {
		t.Errorf("last node %s → %v, want Cast to float16 → %s", last.GetOpType(), last.Output, fn.Output[0])
	}
	if _, err := ops.TypedFunction(fn, onnx.Int8); err == nil {
		t.Error("int8: no error")
	}
}
