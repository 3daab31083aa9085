package kernels_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/infer/infertest"
	"github.com/linearize/linearize/kernels"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// The quantization kernels against references written here from the
// specifications (ONNX operators, onnxruntime's contrib operators): integer
// arithmetic in int64, scales in float64 or in the precision the
// specification names, and closed forms for rounding and saturation. The
// ONNX conformance data (TestConformance) covers the opset 10/13 forms;
// TestQuantKernelsMatchORT compares every op with onnxruntime.

const qtMS = "com.microsoft"

// qtRun runs op of domain at opset on the native kernel.
func qtRun(domain, op string, opset int64, nout int, attrs []*onnxpb.AttributeProto, in ...*onnx.Tensor) (out []*onnx.Tensor, err error) {
	n := kNode(op, nout, attrs...)
	n.Domain = proto.String(domain)
	k, err := kernels.Lookup(domain, op, opset)
	if err != nil {
		return nil, err
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("PANIC: %v", r)
		}
	}()
	return k(&kernels.Context{Node: n, Opset: opset, Threads: 2}, in)
}

func qtMust(t *testing.T, domain, op string, opset int64, nout int, attrs []*onnxpb.AttributeProto, in ...*onnx.Tensor) []*onnx.Tensor {
	t.Helper()
	out, err := qtRun(domain, op, opset, nout, attrs, in...)
	if err != nil {
		t.Fatalf("%s (opset %d): %v", op, opset, err)
	}
	return out
}

func qtTensor(dt onnx.DataType, shape []int, v []float64) *onnx.Tensor {
	t, err := onnx.NewZeros(dt, shape)
	if err != nil {
		panic(err)
	}
	for i, x := range v {
		switch d := t.Data.(type) {
		case []float32:
			d[i] = float32(x)
		case []uint16:
			switch dt {
			case onnx.Float16:
				d[i] = onnx.FloatToHalf(float32(x))
			case onnx.BFloat16:
				d[i] = onnx.FloatToBFloat16(float32(x))
			default:
				d[i] = uint16(x)
			}
		case []int8:
			d[i] = int8(x)
		case []uint8:
			d[i] = uint8(x)
		case []int16:
			d[i] = int16(x)
		case []int32:
			d[i] = int32(x)
		}
	}
	return t
}

// qtRange is the saturation range of a quantized type.
func qtRange(dt onnx.DataType) (float64, float64) {
	switch dt {
	case onnx.Int8:
		return -128, 127
	case onnx.Int16:
		return -32768, 32767
	case onnx.Uint16:
		return 0, 65535
	}
	return 0, 255
}

// qtRandInts draws n integers uniformly from the range of dt.
func qtRandInts(rng *rand.Rand, dt onnx.DataType, n int) []float64 {
	lo, hi := qtRange(dt)
	if dt == onnx.Int32 {
		lo, hi = -1<<20, 1<<20
	}
	v := make([]float64, n)
	for i := range v {
		v[i] = lo + float64(rng.IntN(int(hi-lo)+1))
	}
	return v
}

func qtRandScales(rng *rand.Rand, n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = 0.005 + 0.1*rng.Float64()
	}
	return v
}

// qtParamIndex maps element i of x to its scale index: per tensor (scale
// of one element), per axis (a vector) or blocked (x's rank, axis divided
// in blocks).
func qtParamIndex(i int, x, scale []int, axis, block int) int {
	if onnx.NumElements(scale) == 1 {
		return 0
	}
	c := kIndex(i, x)
	if block == 0 {
		return c[axis]
	}
	c[axis] /= block
	return kFlat(c, scale)
}

// qtRoundPrec rounds a float32 quotient to the division's precision.
func qtRoundPrec(v float32, dt onnx.DataType) float64 {
	switch dt {
	case onnx.Float16:
		return float64(onnx.HalfToFloat(onnx.FloatToHalf(v)))
	case onnx.BFloat16:
		return float64(onnx.BFloat16ToFloat(onnx.FloatToBFloat16(v)))
	}
	return float64(v)
}

// qtQuantRef is QuantizeLinear as the specification writes it:
// saturate(round_half_even(x / y_scale) + y_zero_point), the division in
// float32 (exact for int32 x) or, from opset 23, in y_scale's type.
func qtQuantRef(c qlCase, x, s, z []float64) []float64 {
	lo, hi := qtRange(c.qType)
	out := make([]float64, len(x))
	for i := range x {
		p := qtParamIndex(i, c.xShape, c.sShape, c.axis, c.block)
		var q float64
		switch {
		case c.opset >= 23:
			q = qtRoundPrec(float32(x[i])/float32(s[p]), c.sType)
		case c.xType == onnx.Int32:
			q = x[i] / s[p]
		default:
			q = float64(float32(x[i]) / float32(s[p]))
		}
		zp := 0.0
		if z != nil {
			zp = z[p]
		}
		out[i] = math.Max(lo, math.Min(hi, math.RoundToEven(q)+zp))
	}
	return out
}

// qlCase is one QuantizeLinear/DequantizeLinear form.
type qlCase struct {
	name   string
	opset  int64
	xType  onnx.DataType // float type to quantize (or int32)
	sType  onnx.DataType
	qType  onnx.DataType // quantized type
	noZP   bool          // no zero point input (QuantizeLinear: uint8 unless output_dtype)
	outDT  bool          // give the quantized type as output_dtype
	xShape []int
	sShape []int
	axis   int // normalized quantization axis (attribute axisAttr)
	block  int
	attrs  []*onnxpb.AttributeProto
	// onlyReference: onnxruntime divides in float32 where opset 23
	// specifies the scale's precision.
	onlyReference bool
}

func qlCases() []qlCase {
	A := kAttr
	return []qlCase{
		{name: "per-tensor uint8 opset 10", opset: 10, xType: onnx.Float, sType: onnx.Float, qType: onnx.Uint8, xShape: []int{3, 7}, sShape: []int{}},
		{name: "per-tensor int8 no zp opset 10", opset: 10, xType: onnx.Float, sType: onnx.Float, qType: onnx.Uint8, noZP: true, xShape: []int{20}, sShape: []int{}},
		{name: "int32 x opset 10", opset: 10, xType: onnx.Int32, sType: onnx.Float, qType: onnx.Int8, xShape: []int{2, 9}, sShape: []int{}},
		{name: "per-axis default axis 1", opset: 13, xType: onnx.Float, sType: onnx.Float, qType: onnx.Uint8, xShape: []int{2, 3, 4}, sShape: []int{3}, axis: 1},
		{name: "per-axis axis 0 int8", opset: 13, xType: onnx.Float, sType: onnx.Float, qType: onnx.Int8, xShape: []int{4, 5}, sShape: []int{4}, axis: 0, attrs: []*onnxpb.AttributeProto{A("axis", 0)}},
		{name: "per-axis axis -1", opset: 13, xType: onnx.Float, sType: onnx.Float, qType: onnx.Int8, xShape: []int{3, 2, 6}, sShape: []int{6}, axis: 2, attrs: []*onnxpb.AttributeProto{A("axis", -1)}},
		{name: "one-element vector scale", opset: 13, xType: onnx.Float, sType: onnx.Float, qType: onnx.Uint8, xShape: []int{3, 5}, sShape: []int{1}},
		{name: "float16 x and scale", opset: 19, xType: onnx.Float16, sType: onnx.Float16, qType: onnx.Int8, xShape: []int{32, 40}, sShape: []int{40}, axis: 1},
		{name: "bfloat16 per tensor", opset: 19, xType: onnx.BFloat16, sType: onnx.BFloat16, qType: onnx.Uint8, xShape: []int{5, 3}, sShape: []int{}},
		{name: "blocked axis 1 ragged", opset: 21, xType: onnx.Float, sType: onnx.Float, qType: onnx.Int8, xShape: []int{3, 10}, sShape: []int{3, 4}, axis: 1, block: 3, attrs: []*onnxpb.AttributeProto{A("block_size", 3)}},
		{name: "blocked axis 0", opset: 21, xType: onnx.Float, sType: onnx.Float, qType: onnx.Uint8, xShape: []int{8, 3, 2}, sShape: []int{2, 3, 2}, axis: 0, block: 4, attrs: []*onnxpb.AttributeProto{A("axis", 0), A("block_size", 4)}},
		{name: "float16 division opset 23", opset: 23, xType: onnx.Float16, sType: onnx.Float16, qType: onnx.Uint8, xShape: []int{32, 40}, sShape: []int{}, onlyReference: true},
		{name: "float32 x float16 scale opset 23", opset: 23, xType: onnx.Float, sType: onnx.Float16, qType: onnx.Int8, xShape: []int{32, 40}, sShape: []int{40}, axis: 1, onlyReference: true},
		{name: "int16", opset: 21, xType: onnx.Float, sType: onnx.Float, qType: onnx.Int16, xShape: []int{4, 4}, sShape: []int{4}, axis: 1},
		{name: "uint16 output_dtype no zp", opset: 21, xType: onnx.Float, sType: onnx.Float, qType: onnx.Uint16, noZP: true, outDT: true, xShape: []int{3, 4}, sShape: []int{}},
		{name: "int8 output_dtype no zp", opset: 21, xType: onnx.Float, sType: onnx.Float, qType: onnx.Int8, noZP: true, outDT: true, xShape: []int{3, 4}, sShape: []int{}},
	}
}

// inputs draws scale, zero point and x for c (x/y_scale spread over 1.4
// times the quantized range, so that some values saturate), as float64
// values and as the tensors of the node.
func (c qlCase) inputs(rng *rand.Rand) (x, s, z []float64, in []*onnx.Tensor) {
	n, ns := onnx.NumElements(c.xShape), onnx.NumElements(c.sShape)
	st := qtTensor(c.sType, c.sShape, qtRandScales(rng, ns))
	s = kF64(st) // the values the kernel sees (rounded to the scale type)
	in = []*onnx.Tensor{nil, st}
	lo, hi := qtRange(c.qType)
	if !c.noZP {
		z = qtRandInts(rng, c.qType, ns)
		for i := range z {
			z[i] = math.Round(z[i]/4 + (lo+hi)/2) // zero points near the middle of the range
		}
		in = append(in, qtTensor(c.qType, c.sShape, z))
	}
	x = make([]float64, n)
	for i := range x {
		x[i] = (2*rng.Float64() - 1) * 0.7 * (hi - lo) * s[qtParamIndex(i, c.xShape, c.sShape, c.axis, c.block)]
		if c.xType == onnx.Int32 {
			x[i] = math.Round(x[i] * 100)
		}
	}
	in[0] = qtTensor(c.xType, c.xShape, x)
	return kF64(in[0]), s, z, in
}

// msForm reports whether c is also a form of com.microsoft's
// QuantizeLinear/DequantizeLinear (per tensor or per axis; float32 or
// float16; no output_dtype).
func (c qlCase) msForm() bool {
	return c.block == 0 && !c.outDT && c.opset >= 13 && c.opset < 23 && (c.xType == onnx.Float || c.xType == onnx.Float16)
}

func (c qlCase) attributes() []*onnxpb.AttributeProto {
	a := append([]*onnxpb.AttributeProto(nil), c.attrs...)
	if c.outDT {
		a = append(a, kAttr("output_dtype", int(c.qType)))
	}
	return a
}

func TestQuantizeLinearReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(101, 7))
	for _, c := range qlCases() {
		t.Run(c.name, func(t *testing.T) {
			x, s, z, in := c.inputs(rng)
			want := qtQuantRef(c, x, s, z)
			got := qtMust(t, "", "QuantizeLinear", c.opset, 1, c.attributes(), in...)[0]
			if got.DType != c.qType {
				t.Fatalf("type %s, want %s", onnx.TypeName(got.DType), onnx.TypeName(c.qType))
			}
			kClose(t, "QuantizeLinear", got, c.xShape, want, 0, 0)
			if c.msForm() {
				got := qtMust(t, qtMS, "QuantizeLinear", 1, 1, c.attributes(), in...)[0]
				kClose(t, "com.microsoft QuantizeLinear", got, c.xShape, want, 0, 0)
			}
		})
	}
}

// TestQuantizeLinearRounding: ties round to even, values beyond the range
// saturate, infinities saturate and NaN maps to the bottom of the range.
func TestQuantizeLinearRounding(t *testing.T) {
	inf, nan := math.Inf(1), math.NaN()
	x := qtTensor(onnx.Float, []int{12}, []float64{0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, 1e6, -1e6, inf, -inf, nan})
	one := qtTensor(onnx.Float, []int{}, []float64{1})
	for _, c := range []struct {
		zp   *onnx.Tensor
		want []float64
	}{
		{qtTensor(onnx.Int8, []int{}, []float64{0}), []float64{0, 2, 2, 0, -2, -2, 126, 127, -128, 127, -128, -128}},
		{qtTensor(onnx.Uint8, []int{}, []float64{128}), []float64{128, 130, 130, 128, 126, 126, 254, 255, 0, 255, 0, 0}},
		{nil, []float64{0, 2, 2, 0, 0, 0, 126, 255, 0, 255, 0, 0}},
	} {
		in := []*onnx.Tensor{x, one}
		if c.zp != nil {
			in = append(in, c.zp)
		}
		got := qtMust(t, "", "QuantizeLinear", 13, 1, nil, in...)[0]
		kClose(t, fmt.Sprintf("zero point %v", c.zp), got, []int{12}, c.want, 0, 0)
	}
	// The division is float32's: float32(13.2)/float32(0.16) rounds to
	// 82.5 exactly, a tie that rounds to 82, where the exact quotient
	// 82.50000065 would round to 83.
	if math.RoundToEven(float64(float32(13.2))/float64(float32(0.16))) != 83 {
		t.Fatal("the exact quotient of float32(13.2)/float32(0.16) does not round to 83")
	}
	got := qtMust(t, "", "QuantizeLinear", 13, 1, nil, qtTensor(onnx.Float, []int{1}, []float64{13.2}), qtTensor(onnx.Float, []int{}, []float64{0.16}))[0]
	kClose(t, "13.2/0.16", got, []int{1}, []float64{82}, 0, 0)
}

func TestDequantizeLinearReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(102, 7))
	cases := qlCases()
	cases = append(cases,
		qlCase{name: "int32 no zp", opset: 13, sType: onnx.Float, qType: onnx.Int32, noZP: true, xShape: []int{4, 3}, sShape: []int{3}, axis: 1},
		qlCase{name: "uint16 per axis", opset: 21, sType: onnx.Float, qType: onnx.Uint16, xShape: []int{2, 5}, sShape: []int{2}, axis: 0, attrs: []*onnxpb.AttributeProto{kAttr("axis", -2)}},
		qlCase{name: "float16 scale", opset: 19, sType: onnx.Float16, qType: onnx.Int8, xShape: []int{6, 2}, sShape: []int{}},
		qlCase{name: "bfloat16 scale blocked", opset: 21, sType: onnx.BFloat16, qType: onnx.Uint8, xShape: []int{2, 7}, sShape: []int{2, 2}, axis: 1, block: 4, attrs: []*onnxpb.AttributeProto{kAttr("block_size", 4)}},
	)
	for _, c := range cases {
		if c.outDT || c.qType == onnx.Uint16 && c.opset < 21 {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			n, ns := onnx.NumElements(c.xShape), onnx.NumElements(c.sShape)
			x := qtRandInts(rng, c.qType, n)
			s := kF64(qtTensor(c.sType, c.sShape, qtRandScales(rng, ns)))
			in := []*onnx.Tensor{qtTensor(c.qType, c.xShape, x), qtTensor(c.sType, c.sShape, s)}
			var z []float64
			if !c.noZP {
				z = qtRandInts(rng, c.qType, ns)
				in = append(in, qtTensor(c.qType, c.sShape, z))
			}
			got := qtMust(t, "", "DequantizeLinear", c.opset, 1, c.attrs, in...)[0]
			if got.DType != c.sType {
				t.Fatalf("type %s, want the scale's %s", onnx.TypeName(got.DType), onnx.TypeName(c.sType))
			}
			if c.msForm() {
				ms := qtMust(t, qtMS, "DequantizeLinear", 1, 1, c.attrs, in...)[0]
				kClose(t, "com.microsoft DequantizeLinear", ms, c.xShape, kF64(got), 0, 0)
			}
			want := make([]float64, n)
			for i := range want {
				p := qtParamIndex(i, c.xShape, c.sShape, c.axis, c.block)
				zp := float32(0)
				if z != nil {
					zp = float32(z[p])
				}
				want[i] = qtRoundPrec((float32(x[i])-zp)*float32(s[p]), c.sType)
			}
			kClose(t, "DequantizeLinear", got, c.xShape, want, 0, 0)
		})
	}
}

// qtDynamicRef is DynamicQuantizeLinear's specification in float32: the
// range [min(x, 0), max(x, 0)] mapped onto [0, 255] (scale 1 for an empty
// range), the zero point rounded half to even from the clamped
// intermediate, y = saturate(round(x / scale) + zero point).
func qtDynamicRef(x []float32) (y []float64, scale float32, zp float64) {
	var lo, hi float32
	for _, v := range x {
		lo, hi = float32(math.Min(float64(lo), float64(v))), float32(math.Max(float64(hi), float64(v)))
	}
	scale = 1
	if hi != lo {
		scale = (hi - lo) / 255
	}
	zp = math.RoundToEven(math.Max(0, math.Min(255, float64(-lo/scale))))
	y = make([]float64, len(x))
	for i, v := range x {
		y[i] = math.Max(0, math.Min(255, math.RoundToEven(float64(v/scale))+zp))
	}
	return y, scale, zp
}

func TestDynamicQuantizeLinearReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(103, 7))
	for _, c := range []struct {
		name  string
		x     []float32
		y     []float64 // closed form, or nil
		scale float32
		zp    float64
	}{
		{name: "range 255", x: []float32{-51, 0, 204, 100.4}, y: []float64{0, 51, 255, 151}, scale: 1, zp: 51},
		{name: "all zero", x: []float32{0, 0, 0}, y: []float64{0, 0, 0}, scale: 1, zp: 0},
		{name: "positive only", x: []float32{0.5, 2.55}, y: []float64{50, 255}, scale: 0.01, zp: 0},
		{name: "negative only", x: []float32{-2.55, -1.02}, y: []float64{0, 153}, scale: 0.01, zp: 255},
		{name: "empty", x: []float32{}, y: []float64{}, scale: 1, zp: 0},
		{name: "random", x: kRand(rng, 5, 33).Floats()},
		{name: "random skewed", x: func() []float32 {
			v := kRand(rng, 64).Floats()
			for i := range v {
				v[i] = 3*v[i] + 4
			}
			return v
		}()},
	} {
		t.Run(c.name, func(t *testing.T) {
			y, scale, zp := qtDynamicRef(c.x)
			if c.y != nil {
				if math.Abs(float64(scale-c.scale)) > 1e-7 || zp != c.zp {
					t.Fatalf("reference scale %g zp %g, closed form %g %g", scale, zp, c.scale, c.zp)
				}
				y = c.y
			}
			out := qtMust(t, "", "DynamicQuantizeLinear", 11, 3, nil, onnx.NewFloat([]int{len(c.x)}, c.x))
			kClose(t, "y", out[0], []int{len(c.x)}, y, 0, 0)
			kClose(t, "y_scale", out[1], []int{}, []float64{float64(scale)}, 0, 0)
			kClose(t, "y_zero_point", out[2], []int{}, []float64{zp}, 0, 0)
			if out[0].DType != onnx.Uint8 || out[2].DType != onnx.Uint8 {
				t.Errorf("types %s, %s, want uint8", out[0], out[2])
			}
		})
	}
}

// qtMatMulRef is numpy matmul of integer matrices given as float64 (exact
// below 2⁵³), each batch entry of a [..., m, k] and b [..., k, n]
// broadcast; it returns the result with its shape (1-D operands promoted
// and the added dims removed).
func qtMatMulRef(a, b []float64, as, bs []int) ([]float64, []int) {
	pa, pb := as, bs
	if len(pa) == 1 {
		pa = []int{1, pa[0]}
	}
	if len(pb) == 1 {
		pb = []int{pb[0], 1}
	}
	m, k, n := pa[len(pa)-2], pa[len(pa)-1], pb[len(pb)-1]
	ab, bb := pa[:len(pa)-2], pb[:len(pb)-2]
	r := max(len(ab), len(bb))
	batch := make([]int, r)
	for i := range batch {
		da, db := qtDimFromEnd(ab, r-1-i), qtDimFromEnd(bb, r-1-i)
		batch[i] = max(da, db)
	}
	nb := onnx.NumElements(batch)
	out := make([]float64, nb*m*n)
	for e := 0; e < nb; e++ {
		c := kIndex(e, batch)
		ai, bi := qtBroadcastIndex(c, ab), qtBroadcastIndex(c, bb)
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				var acc float64
				for p := 0; p < k; p++ {
					acc += a[(ai*m+i)*k+p] * b[(bi*k+p)*n+j]
				}
				out[(e*m+i)*n+j] = acc
			}
		}
	}
	shape := append(batch, m, n)
	if len(as) == 1 {
		shape = append(shape[:len(shape)-2], n)
	}
	if len(bs) == 1 {
		shape = shape[:len(shape)-1]
	}
	return out, shape
}

func qtDimFromEnd(s []int, i int) int {
	if i < len(s) {
		return s[len(s)-1-i]
	}
	return 1
}

// qtBroadcastIndex is the flat index in shape s of the batch coordinates
// c (right-aligned; dims of 1 broadcast).
func qtBroadcastIndex(c, s []int) int {
	off := len(c) - len(s)
	idx := 0
	for i, d := range s {
		v := c[off+i]
		if d == 1 {
			v = 0
		}
		idx = idx*d + v
	}
	return idx
}

// qtCenter subtracts a per-row (rows) or per-column zero point zp of shape
// zs from a [..., r, c]: zp is a scalar, a vector along the rows (columns)
// or [..., r, 1] ([..., 1, c]).
func qtCenter(a []float64, as []int, zp []float64, zs []int, rows bool) []float64 {
	out := make([]float64, len(a))
	pa := as
	if len(pa) == 1 && rows {
		pa = []int{1, pa[0]}
	} else if len(pa) == 1 {
		pa = []int{pa[0], 1}
	}
	for i, v := range a {
		c := kIndex(i, pa)
		z := 0.0
		switch {
		case zp == nil:
		case len(zp) == 1:
			z = zp[0]
		case len(zs) == 1 && rows:
			z = zp[c[len(c)-2]]
		case len(zs) == 1:
			z = zp[c[len(c)-1]]
		default:
			zc := append([]int(nil), c[len(c)-len(zs):]...)
			if rows {
				zc[len(zc)-1] = 0
			} else {
				zc[len(zc)-2] = 0
			}
			for j := range zs {
				if zs[j] == 1 {
					zc[j] = 0
				}
			}
			z = zp[kFlat(zc, zs)]
		}
		out[i] = v - z
	}
	return out
}

// miCase is one integer matmul form.
type miCase struct {
	name         string
	aType, bType onnx.DataType
	as, bs       []int
	azs, bzs     []int // zero point shapes (nil: none)
}

func miCases() []miCase {
	return []miCase{
		{name: "uint8 scalar zps", aType: onnx.Uint8, bType: onnx.Uint8, as: []int{4, 3}, bs: []int{3, 5}, azs: []int{}, bzs: []int{}},
		{name: "int8 per-row and per-column", aType: onnx.Int8, bType: onnx.Int8, as: []int{3, 6}, bs: []int{6, 4}, azs: []int{3}, bzs: []int{4}},
		{name: "mixed 3-D N-D zps", aType: onnx.Uint8, bType: onnx.Int8, as: []int{2, 3, 4}, bs: []int{4, 5}, azs: []int{2, 3, 1}, bzs: []int{1, 5}},
		{name: "batch broadcast", aType: onnx.Int8, bType: onnx.Uint8, as: []int{2, 1, 3, 4}, bs: []int{3, 4, 2}, azs: []int{1}, bzs: []int{3, 1, 2}},
		{name: "1-D A", aType: onnx.Uint8, bType: onnx.Uint8, as: []int{4}, bs: []int{4, 3}, azs: []int{}, bzs: []int{3}},
		{name: "1-D B", aType: onnx.Uint8, bType: onnx.Int8, as: []int{2, 4}, bs: []int{4}, azs: []int{2}, bzs: []int{}},
		{name: "no zero points", aType: onnx.Int8, bType: onnx.Int8, as: []int{5, 7}, bs: []int{7, 3}},
		{name: "long K in exact float32 slices", aType: onnx.Uint8, bType: onnx.Uint8, as: []int{2, 5, 600}, bs: []int{600, 7}, azs: []int{}, bzs: []int{7}},
		{name: "long K batched B", aType: onnx.Int8, bType: onnx.Int8, as: []int{3, 600}, bs: []int{2, 600, 9}, azs: []int{3}},
		{name: "empty K", aType: onnx.Uint8, bType: onnx.Uint8, as: []int{2, 0}, bs: []int{0, 3}, azs: []int{}},
	}
}

// inputs draws A, B and their zero points: the node's inputs and the
// centered operands as float64.
func (c miCase) inputs(rng *rand.Rand) (in []*onnx.Tensor, ac, bc []float64) {
	a := qtRandInts(rng, c.aType, onnx.NumElements(c.as))
	b := qtRandInts(rng, c.bType, onnx.NumElements(c.bs))
	in = []*onnx.Tensor{qtTensor(c.aType, c.as, a), qtTensor(c.bType, c.bs, b), nil, nil}
	var az, bz []float64
	if c.azs != nil {
		az = qtRandInts(rng, c.aType, onnx.NumElements(c.azs))
		in[2] = qtTensor(c.aType, c.azs, az)
	}
	if c.bzs != nil {
		bz = qtRandInts(rng, c.bType, onnx.NumElements(c.bzs))
		in[3] = qtTensor(c.bType, c.bzs, bz)
	}
	return in, qtCenter(a, c.as, az, c.azs, true), qtCenter(b, c.bs, bz, c.bzs, false)
}

func TestMatMulIntegerReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(104, 7))
	for _, c := range miCases() {
		t.Run(c.name, func(t *testing.T) {
			in, ac, bc := c.inputs(rng)
			want, shape := qtMatMulRef(ac, bc, c.as, c.bs)
			got := qtMust(t, "", "MatMulInteger", 10, 1, nil, in...)[0]
			if got.DType != onnx.Int32 {
				t.Fatalf("type %s, want int32", got)
			}
			kClose(t, "MatMulInteger", got, shape, want, 0, 0)
		})
	}
}

// TestMatMulIntegerWrapsInt32: the accumulation is in int32, and wraps
// around when the sum exceeds it (40000·255·255 = 2 601 000 000 > 2³¹).
func TestMatMulIntegerWrapsInt32(t *testing.T) {
	const k = 40000
	a, b := make([]float64, k), make([]float64, k)
	for i := range a {
		a[i], b[i] = 255, 255
	}
	got := qtMust(t, "", "MatMulInteger", 10, 1, nil, qtTensor(onnx.Uint8, []int{1, k}, a), qtTensor(onnx.Uint8, []int{k, 1}, b))[0]
	sum := int64(k) * 255 * 255
	kClose(t, "wrapped sum", got, []int{1, 1}, []float64{float64(int32(sum))}, 0, 0)
	if int64(int32(sum)) == sum {
		t.Fatal("the test sum does not overflow int32")
	}
}

// TestQLinearMatMulReference: y = saturate(round(acc · m) + y_zero_point)
// with acc the exact integer product of the centered operands and m the
// multiplier a_scale·b_scale / y_scale computed in the scales' type.
func TestQLinearMatMulReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(105, 7))
	for _, c := range []struct {
		mi    miCase
		yType onnx.DataType
		sType onnx.DataType
		opset int64
	}{
		{miCase{name: "uint8 2-D", aType: onnx.Uint8, bType: onnx.Uint8, as: []int{3, 8}, bs: []int{8, 4}, azs: []int{}, bzs: []int{}}, onnx.Uint8, onnx.Float, 10},
		{miCase{name: "int8 3-D", aType: onnx.Int8, bType: onnx.Int8, as: []int{2, 3, 8}, bs: []int{2, 8, 5}, azs: []int{}, bzs: []int{}}, onnx.Int8, onnx.Float, 10},
		{miCase{name: "per-row a per-column b", aType: onnx.Uint8, bType: onnx.Int8, as: []int{4, 6}, bs: []int{6, 3}, azs: []int{4}, bzs: []int{1, 3}}, onnx.Int8, onnx.Float, 10},
		{miCase{name: "float16 scales", aType: onnx.Int8, bType: onnx.Uint8, as: []int{3, 5}, bs: []int{5, 4}, azs: []int{}, bzs: []int{4}}, onnx.Uint8, onnx.Float16, 21},
	} {
		t.Run(c.mi.name, func(t *testing.T) {
			in, ac, bc := c.mi.inputs(rng)
			acc, shape := qtMatMulRef(ac, bc, c.mi.as, c.mi.bs)
			asv := kF64(qtTensor(c.sType, c.mi.azs, qtRandScales(rng, onnx.NumElements(c.mi.azs))))
			bsv := kF64(qtTensor(c.sType, c.mi.bzs, qtRandScales(rng, onnx.NumElements(c.mi.bzs))))
			ys := kF64(qtTensor(c.sType, []int{}, []float64{0.5 + rng.Float64()}))[0]
			yz := math.Round(qtRandInts(rng, c.yType, 1)[0] / 2)
			node := []*onnx.Tensor{in[0], qtTensor(c.sType, c.mi.azs, asv), in[2], in[1], qtTensor(c.sType, c.mi.bzs, bsv), in[3],
				qtTensor(c.sType, []int{}, []float64{ys}), qtTensor(c.yType, []int{}, []float64{yz})}
			got := qtMust(t, "", "QLinearMatMul", c.opset, 1, nil, node...)[0]
			lo, hi := qtRange(c.yType)
			m, n := shape[len(shape)-2], shape[len(shape)-1]
			want := make([]float64, len(acc))
			for i := range acc {
				sa, sb := asv[0], bsv[0]
				if len(asv) > 1 {
					sa = asv[(i/n)%m]
				}
				if len(bsv) > 1 {
					sb = bsv[i%n]
				}
				mult := float64(float32(float32(sa)*float32(sb)) / float32(ys))
				if c.sType == onnx.Float16 {
					mult = qtRoundPrec(float32(qtRoundPrec(float32(sa)*float32(sb), onnx.Float16))/float32(ys), onnx.Float16)
				}
				want[i] = math.Max(lo, math.Min(hi, math.RoundToEven(acc[i]*mult)+yz))
			}
			kClose(t, "QLinearMatMul", got, shape, want, 0, 0)
		})
	}
}

// mfCase is one MatMulIntegerToFloat / DynamicQuantizeMatMul form.
type mfCase struct {
	name          string
	bType         onnx.DataType
	as, bs        []int
	bss, bzs      []int // b_scale and b_zero_point shapes (bzs nil: none)
	bias          bool
	aType         onnx.DataType // MatMulIntegerToFloat A
	sType         onnx.DataType // scale type (float32 or float16)
	azp           bool          // MatMulIntegerToFloat: a_zero_point given
	onlyReference bool          // a form onnxruntime's CPU kernel lacks
}

func mfCases() []mfCase {
	return []mfCase{
		{name: "uint8×uint8 scalar", aType: onnx.Uint8, bType: onnx.Uint8, as: []int{4, 6}, bs: []int{6, 5}, bss: []int{}, bzs: []int{}, azp: true, sType: onnx.Float},
		{name: "uint8×int8 bias", aType: onnx.Uint8, bType: onnx.Int8, as: []int{2, 3, 16}, bs: []int{16, 8}, bss: []int{1}, bias: true, azp: true, sType: onnx.Float},
		{name: "per-column scale and zp", aType: onnx.Uint8, bType: onnx.Uint8, as: []int{2, 5, 12}, bs: []int{12, 7}, bss: []int{7}, bzs: []int{7}, bias: true, azp: true, sType: onnx.Float},
		{name: "int8 B per-column no zp", aType: onnx.Uint8, bType: onnx.Int8, as: []int{3, 9}, bs: []int{9, 4}, bss: []int{4}, sType: onnx.Float},
		{name: "float16 scales", aType: onnx.Int8, bType: onnx.Int8, as: []int{3, 9}, bs: []int{9, 4}, bss: []int{4}, bzs: []int{}, bias: true, azp: true, sType: onnx.Float16, onlyReference: true},
		{name: "int8 A", aType: onnx.Int8, bType: onnx.Uint8, as: []int{3, 9}, bs: []int{9, 4}, bss: []int{}, azp: true, sType: onnx.Float, onlyReference: true},
	}
}

// inputs draws the MatMulIntegerToFloat inputs of c and returns them with
// the float64 reference (acc · a_scale · b_scale + bias).
func (c mfCase) inputs(rng *rand.Rand) ([]*onnx.Tensor, []float64, []int) {
	mi := miCase{aType: c.aType, bType: c.bType, as: c.as, bs: c.bs, bzs: c.bzs}
	if c.azp {
		mi.azs = []int{}
	}
	qin, ac, bc := mi.inputs(rng)
	acc, shape := qtMatMulRef(ac, bc, c.as, c.bs)
	n := shape[len(shape)-1]
	asc := qtTensor(c.sType, []int{}, qtRandScales(rng, 1))
	bsc := qtTensor(c.sType, c.bss, qtRandScales(rng, onnx.NumElements(c.bss)))
	sa, sb := kF64(asc), kF64(bsc)
	in := []*onnx.Tensor{qin[0], qin[1], asc, bsc, qin[2], qin[3], nil}
	var bias []float64
	if c.bias {
		in[6] = qtTensor(c.sType, []int{n}, kF64(kRand(rng, n)))
		bias = kF64(in[6])
	}
	want := make([]float64, len(acc))
	for i, v := range acc {
		want[i] = v * sa[0] * sb[(i%n)%len(sb)]
		if bias != nil {
			want[i] += bias[i%n]
		}
	}
	return in, want, shape
}

func TestMatMulIntegerToFloatReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(106, 7))
	for _, c := range mfCases() {
		t.Run(c.name, func(t *testing.T) {
			in, want, shape := c.inputs(rng)
			got := qtMust(t, qtMS, "MatMulIntegerToFloat", 1, 1, nil, in...)[0]
			if got.DType != c.sType {
				t.Fatalf("type %s, want %s", got, onnx.TypeName(c.sType))
			}
			tol := 1e-6
			if c.sType == onnx.Float16 {
				tol = 1e-3
			}
			kClose(t, "MatMulIntegerToFloat", got, shape, want, tol, tol*maxAbsF(want))
		})
	}
}

func maxAbsF(v []float64) float64 {
	m := 0.0
	for _, x := range v {
		m = math.Max(m, math.Abs(x))
	}
	return m
}

// TestDynamicQuantizeMatMulReference: A quantized as DynamicQuantizeLinear
// specifies (qtDynamicRef), then the MatMulIntegerToFloat product with
// that scale and zero point.
func TestDynamicQuantizeMatMulReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(107, 7))
	for _, c := range mfCases() {
		if c.sType != onnx.Float || c.aType != onnx.Uint8 {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			a := kRand(rng, c.as...)
			aq, as, az := qtDynamicRef(a.Floats())
			in, _, _ := c.inputs(rng)
			bc := qtCenter(kF64(in[1]), c.bs, qtOptF64(in[5]), c.bzs, false)
			ac := qtCenter(aq, c.as, []float64{az}, []int{}, true)
			acc, shape := qtMatMulRef(ac, bc, c.as, c.bs)
			sb, n := kF64(in[3]), shape[len(shape)-1]
			want := make([]float64, len(acc))
			for i, v := range acc {
				want[i] = v * float64(as) * sb[(i%n)%len(sb)]
				if in[6] != nil {
					want[i] += kF64(in[6])[i%n]
				}
			}
			got := qtMust(t, qtMS, "DynamicQuantizeMatMul", 1, 1, nil, a, in[1], in[3], in[5], in[6])[0]
			kClose(t, "DynamicQuantizeMatMul", got, shape, want, 1e-6, 1e-6*maxAbsF(want))
		})
	}
}

func qtOptF64(t *onnx.Tensor) []float64 {
	if t == nil {
		return nil
	}
	return kF64(t)
}

// TestQuantBadInputs: malformed inputs are errors naming the node, not
// panics.
func TestQuantBadInputs(t *testing.T) {
	f := func(shape ...int) *onnx.Tensor {
		return qtTensor(onnx.Float, shape, make([]float64, onnx.NumElements(shape)))
	}
	u8 := func(shape ...int) *onnx.Tensor {
		return qtTensor(onnx.Uint8, shape, make([]float64, onnx.NumElements(shape)))
	}
	i8 := func(shape ...int) *onnx.Tensor {
		return qtTensor(onnx.Int8, shape, make([]float64, onnx.NumElements(shape)))
	}
	A := kAttr
	for _, c := range []struct {
		domain, op string
		opset      int64
		attrs      []*onnxpb.AttributeProto
		in         []*onnx.Tensor
	}{
		{"", "QuantizeLinear", 13, nil, []*onnx.Tensor{f(2, 3), f(4)}},                                    // scale length ≠ axis 1
		{"", "QuantizeLinear", 10, nil, []*onnx.Tensor{f(2, 3), f(3)}},                                    // per-axis before opset 13
		{"", "QuantizeLinear", 13, []*onnxpb.AttributeProto{A("axis", 5)}, []*onnx.Tensor{f(2, 3), f(3)}}, // axis out of range
		{"", "QuantizeLinear", 13, nil, []*onnx.Tensor{f(2, 3), f(3), u8(2)}},                             // zero point shape ≠ scale shape
		{"", "QuantizeLinear", 13, nil, []*onnx.Tensor{f(2, 3), f(), f()}},                                // float zero point
		{"", "QuantizeLinear", 21, []*onnxpb.AttributeProto{A("output_dtype", int(onnx.Int8))}, []*onnx.Tensor{f(2), f(), u8()}},
		{"", "QuantizeLinear", 21, []*onnxpb.AttributeProto{A("block_size", 2)}, []*onnx.Tensor{f(2, 5), f(2, 2)}}, // ⌈5/2⌉ = 3 blocks
		{"", "QuantizeLinear", 21, []*onnxpb.AttributeProto{A("block_size", -1)}, []*onnx.Tensor{f(2, 4), f(2, 2)}},
		{"", "QuantizeLinear", 21, []*onnxpb.AttributeProto{A("block_size", 2)}, []*onnx.Tensor{f(2, 4), f(3, 2)}},
		{"", "QuantizeLinear", 13, nil, []*onnx.Tensor{u8(2), f()}}, // uint8 x
		{"", "DequantizeLinear", 13, nil, []*onnx.Tensor{f(2), f()}},
		{"", "DequantizeLinear", 13, nil, []*onnx.Tensor{u8(2), f(), i8()}},
		{"", "DequantizeLinear", 13, nil, []*onnx.Tensor{u8(2, 3), f(2, 3)}}, // 2-D scale without block_size
		{"", "DequantizeLinear", 13, nil, []*onnx.Tensor{u8(2, 3), u8()}},    // integer scale
		{"", "DequantizeLinear", 13, nil, []*onnx.Tensor{u8(2, 3)}},
		{"", "DynamicQuantizeLinear", 11, nil, []*onnx.Tensor{u8(3)}},
		{"", "MatMulInteger", 10, nil, []*onnx.Tensor{u8(2, 3), u8(4, 2)}},
		{"", "MatMulInteger", 10, nil, []*onnx.Tensor{f(2, 3), u8(3, 2)}},
		{"", "MatMulInteger", 10, nil, []*onnx.Tensor{u8(2, 3), u8(3, 2), i8()}},
		{"", "MatMulInteger", 10, nil, []*onnx.Tensor{u8(2, 3), u8(3, 2), u8(3)}},          // a_zero_point neither scalar nor per row
		{"", "MatMulInteger", 10, nil, []*onnx.Tensor{u8(2, 3), u8(3, 2), nil, u8(3, 2)}},  // b_zero_point [K, N]
		{"", "MatMulInteger", 10, nil, []*onnx.Tensor{u8(2, 3), u8(3, 2), u8(5, 2, 1)}},    // a_zero_point rank above A's
		{"", "MatMulInteger", 10, nil, []*onnx.Tensor{u8(2, 2, 3), u8(3, 3, 2)}},           // batch 2 vs 3
		{"", "MatMulInteger", 10, nil, []*onnx.Tensor{u8(), u8(3, 2)}},                     // rank 0
		{"", "QLinearMatMul", 10, nil, []*onnx.Tensor{u8(2, 3), f(), u8(), u8(3, 2), f()}}, // missing inputs
		{"", "QLinearMatMul", 10, nil, []*onnx.Tensor{u8(2, 3), f(), u8(), u8(3, 2), f(), u8(), f(2), u8()}},
		{"", "QLinearMatMul", 10, nil, []*onnx.Tensor{u8(2, 3), f(), u8(), u8(3, 2), f(), u8(), u8(), u8()}},
		{"", "QLinearMatMul", 10, nil, []*onnx.Tensor{u8(2, 3), f(), u8(), u8(3, 2), f(), u8(), f(), f()}},
		{qtMS, "MatMulIntegerToFloat", 1, nil, []*onnx.Tensor{u8(2, 3), u8(3, 4), f(), f(5)}},                // b_scale does not broadcast
		{qtMS, "MatMulIntegerToFloat", 1, nil, []*onnx.Tensor{u8(2, 3), u8(3, 4), f(), f(), nil, nil, f(3)}}, // bias ≠ [N]
		{qtMS, "MatMulIntegerToFloat", 1, nil, []*onnx.Tensor{u8(2, 3), u8(3, 4), u8(), f()}},
		{qtMS, "MatMulIntegerToFloat", 1, nil, []*onnx.Tensor{u8(2, 3), u8(3, 4), f(), qtTensor(onnx.Float16, []int{}, []float64{1})}},
		{qtMS, "DynamicQuantizeMatMul", 1, nil, []*onnx.Tensor{u8(2, 3), u8(3, 4), f()}},
		{qtMS, "DynamicQuantizeMatMul", 1, nil, []*onnx.Tensor{f(2, 3), u8(3, 4), f(), nil, f(2)}},
		{qtMS, "DynamicQuantizeMatMul", 1, nil, []*onnx.Tensor{f(2, 3), f(3, 4), f()}},
	} {
		_, err := qtRun(c.domain, c.op, c.opset, 1, c.attrs, c.in...)
		if err == nil || strings.Contains(err.Error(), "PANIC") || !strings.Contains(err.Error(), "kernels: "+c.op) {
			t.Errorf("%s %v %v: want an error naming the op, got %v", c.op, c.attrs, c.in, err)
		}
	}
}

// TestQuantRandomInputsNoPanic feeds the com.microsoft kernels (which the
// standard-kernel fuzz tests do not reach) seeded random shapes and types.
func TestQuantRandomInputsNoPanic(t *testing.T) {
	rng := rand.New(rand.NewPCG(108, 7))
	types := []onnx.DataType{onnx.Float, onnx.Uint8, onnx.Int8, onnx.Float16}
	tensor := func() *onnx.Tensor {
		shape := make([]int, rng.IntN(4))
		for i := range shape {
			shape[i] = rng.IntN(4)
		}
		return qtTensor(types[rng.IntN(len(types))], shape, qtRandInts(rng, onnx.Int8, onnx.NumElements(shape)))
	}
	for _, op := range []string{"MatMulIntegerToFloat", "DynamicQuantizeMatMul", "QuantizeLinear", "DequantizeLinear"} {
		for range 2000 {
			in := make([]*onnx.Tensor, rng.IntN(8))
			for i := range in {
				if rng.IntN(6) > 0 {
					in[i] = tensor()
				}
			}
			if _, err := qtRun(qtMS, op, 1, 1, nil, in...); err != nil && strings.Contains(err.Error(), "PANIC") {
				t.Fatalf("%s %v: %v", op, in, err)
			}
		}
	}
}

// qtORT runs one node in onnxruntime: inputs in (nil: omitted), outputs
// of the given types; the default domain at opset, com.microsoft at 1.
func qtORT(t *testing.T, domain, op string, opset int64, attrs []*onnxpb.AttributeProto, in []*onnx.Tensor, outTypes []onnx.DataType) []*onnx.Tensor {
	t.Helper()
	node := kNode(op, len(outTypes), attrs...)
	node.Domain = proto.String(domain)
	g := &onnxpb.GraphProto{Name: proto.String("q"), Node: []*onnxpb.NodeProto{node}}
	feed := map[string]*onnx.Tensor{}
	for i, x := range in {
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
	for i, dt := range outTypes {
		g.Output = append(g.Output, onnx.MakeValueInfo(node.Output[i], dt, nil))
	}
	def := opset
	if domain != "" {
		def = 17
	}
	m := &onnxpb.ModelProto{IrVersion: proto.Int64(10), Graph: g,
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(def)}, {Domain: proto.String(qtMS), Version: proto.Int64(1)}}}
	s, err := infer.NewORTSession(m, infer.Options{Threads: 1})
	if err != nil {
		t.Fatalf("onnxruntime: %v", err)
	}
	defer s.Close()
	res, err := s.Run(feed)
	if err != nil {
		t.Fatalf("onnxruntime run: %v", err)
	}
	out := make([]*onnx.Tensor, len(outTypes))
	for i := range out {
		if out[i] = res[node.Output[i]]; out[i] == nil {
			t.Fatalf("onnxruntime did not return %s", node.Output[i])
		}
	}
	return out
}

// qtDiff returns the largest |got − want| and the largest |want|; shapes
// and types must agree.
func qtDiff(t *testing.T, got, want *onnx.Tensor) (float64, float64) {
	t.Helper()
	if got.DType != want.DType || fmt.Sprint(got.Shape) != fmt.Sprint(want.Shape) {
		t.Fatalf("native %s, onnxruntime %s", got, want)
	}
	g, w := kF64(got), kF64(want)
	var d, s float64
	for i := range w {
		d, s = math.Max(d, math.Abs(g[i]-w[i])), math.Max(s, math.Abs(w[i]))
		if math.IsNaN(g[i]) != math.IsNaN(w[i]) {
			d = math.Inf(1)
		}
	}
	return d, s
}

// qxCase is one node for the onnxruntime comparison; tol bounds the
// largest difference relative to the output's largest magnitude (0: the
// outputs must be identical).
type qxCase struct {
	name   string
	domain string
	op     string
	opset  int64
	attrs  []*onnxpb.AttributeProto
	in     []*onnx.Tensor
	outs   []onnx.DataType
	tol    float64
}

func qxCases() []qxCase {
	rng := rand.New(rand.NewPCG(109, 7))
	var cs []qxCase
	for _, c := range qlCases() {
		if c.xType == onnx.Int32 || c.xType == onnx.BFloat16 || c.onlyReference {
			continue // onnxruntime's CPU QuantizeLinear takes float and float16 x
		}
		_, _, _, in := c.inputs(rng)
		cs = append(cs, qxCase{name: "QuantizeLinear " + c.name, op: "QuantizeLinear", opset: c.opset, attrs: c.attributes(), in: in, outs: []onnx.DataType{c.qType}})
		q, err := qtRun("", "QuantizeLinear", c.opset, 1, c.attributes(), in...)
		if err != nil {
			panic(err)
		}
		dq := []*onnx.Tensor{q[0], in[1]}
		if len(in) > 2 {
			dq = append(dq, in[2])
		}
		cs = append(cs, qxCase{name: "DequantizeLinear " + c.name, op: "DequantizeLinear", opset: c.opset, attrs: c.attrs, in: dq, outs: []onnx.DataType{c.sType}, tol: 1e-7})
		if c.msForm() && len(c.sShape) > 0 {
			attrs := c.attrs
			if len(c.sShape) == 1 && c.sShape[0] > 1 && attrs == nil {
				attrs = []*onnxpb.AttributeProto{kAttr("axis", 1)} // per axis needs it explicitly
			}
			cs = append(cs,
				qxCase{name: "com.microsoft QuantizeLinear " + c.name, domain: qtMS, op: "QuantizeLinear", attrs: attrs, in: in, outs: []onnx.DataType{c.qType}},
				qxCase{name: "com.microsoft DequantizeLinear " + c.name, domain: qtMS, op: "DequantizeLinear", attrs: attrs, in: dq, outs: []onnx.DataType{c.sType}, tol: 1e-7})
		}
	}
	for _, x := range []*onnx.Tensor{kRand(rng, 4, 33), onnx.NewFloat([]int{3, 5}, kRand(rng, 15).Floats())} {
		for i, v := range x.Floats() {
			x.Floats()[i] = 2*v + 1.5
		}
		cs = append(cs, qxCase{name: fmt.Sprintf("DynamicQuantizeLinear %v", x.Shape), op: "DynamicQuantizeLinear", opset: 11, in: []*onnx.Tensor{x}, outs: []onnx.DataType{onnx.Uint8, onnx.Float, onnx.Uint8}})
	}
	for _, c := range miCases() {
		if len(c.azs) > 0 && onnx.NumElements(c.azs) > 1 || len(c.as) == 1 || len(c.bs) == 1 || onnx.NumElements(c.as) == 0 {
			continue // onnxruntime takes a scalar a_zero_point and rank ≥ 2 operands
		}
		in, _, _ := c.inputs(rng)
		in[1] = qtNarrowB(in[0], in[1])
		cs = append(cs, qxCase{name: "MatMulInteger " + c.name, op: "MatMulInteger", opset: 10, in: qtTrim(in), outs: []onnx.DataType{onnx.Int32}})
	}
	return append(cs, qxQLinearCases(rng)...)
}

// qxQLinearCases are the QLinearMatMul and com.microsoft comparisons.
func qxQLinearCases(rng *rand.Rand) []qxCase {
	var cs []qxCase
	for _, c := range []struct {
		mi    miCase
		opset int64
	}{
		{miCase{name: "uint8", aType: onnx.Uint8, bType: onnx.Uint8, as: []int{32, 64}, bs: []int{64, 48}, azs: []int{}, bzs: []int{}}, 10},
		{miCase{name: "int8 3-D per-column b", aType: onnx.Int8, bType: onnx.Int8, as: []int{2, 24, 64}, bs: []int{64, 40}, azs: []int{}, bzs: []int{1, 40}}, 21},
	} {
		in, _, _ := c.mi.inputs(rng)
		in[1] = qtNarrowB(in[0], in[1])
		for _, i := range []int{2, 3} { // zero points near the middle: unbiased products
			lo, hi := qtRange(in[i].DType)
			v := qtRandInts(rng, onnx.Int8, in[i].Len())
			for j := range v {
				v[j] = math.Round((lo+hi)/2 + v[j]/16)
			}
			in[i] = qtTensor(in[i].DType, in[i].Shape, v)
		}
		sc := func(shape []int) *onnx.Tensor {
			return qtTensor(onnx.Float, shape, qtRandScales(rng, onnx.NumElements(shape)))
		}
		as, bs := sc(c.mi.azs), sc(c.mi.bzs)
		// y_scale spreads the outputs over about ±60 steps: the centered
		// operands have a standard deviation near 74 (uniform over 256
		// values), their products summed over k near 74²·√k.
		k := float64(c.mi.as[len(c.mi.as)-1])
		ys := kF64(as)[0] * kF64(bs)[0] * 74 * 74 * math.Sqrt(k) / 60
		lo, hi := qtRange(c.mi.aType)
		node := []*onnx.Tensor{in[0], as, in[2], in[1], bs, in[3],
			qtTensor(onnx.Float, []int{}, []float64{ys}), qtTensor(c.mi.aType, []int{}, []float64{math.Round((lo + hi) / 2)})}
		cs = append(cs, qxCase{name: "QLinearMatMul " + c.mi.name, op: "QLinearMatMul", opset: c.opset, in: node, outs: []onnx.DataType{c.mi.aType}})
	}
	for _, c := range mfCases() {
		if c.onlyReference {
			continue
		}
		in, _, _ := c.inputs(rng)
		in[1] = qtNarrowB(in[0], in[1])
		cs = append(cs, qxCase{name: "MatMulIntegerToFloat " + c.name, domain: qtMS, op: "MatMulIntegerToFloat", in: qtTrim(in), outs: []onnx.DataType{onnx.Float}, tol: 1e-6})
		a := kRand(rng, c.as...)
		cs = append(cs, qxCase{name: "DynamicQuantizeMatMul " + c.name, domain: qtMS, op: "DynamicQuantizeMatMul", in: qtTrim([]*onnx.Tensor{a, in[1], in[3], in[5], in[6]}), outs: []onnx.DataType{onnx.Float}, tol: 1e-6})
	}
	return cs
}

// qtNarrowB halves int8 values of b (to [−64, 63]) when a is uint8:
// onnxruntime's uint8×int8 CPU kernels (x86 AVX2 without VNNI) add pairs of
// products in saturating int16, which 255·127·2 overflows; weights of at
// most 7 bits (quantize_dynamic's reduce_range) keep them exact.
func qtNarrowB(a, b *onnx.Tensor) *onnx.Tensor {
	if a.DType != onnx.Uint8 || b.DType != onnx.Int8 {
		return b
	}
	c := b.Clone()
	for i, v := range c.Data.([]int8) {
		c.Data.([]int8)[i] = v / 2
	}
	return c
}

// qtTrim drops trailing absent inputs.
func qtTrim(in []*onnx.Tensor) []*onnx.Tensor {
	for len(in) > 0 && in[len(in)-1] == nil {
		in = in[:len(in)-1]
	}
	return in
}

// TestQuantKernelsMatchORT runs every quantization op in onnxruntime and
// natively on seeded random inputs and logs the largest differences:
// integer outputs must be identical, float outputs agree within tol of the
// output's magnitude.
func TestQuantKernelsMatchORT(t *testing.T) {
	if !infertest.ORT(t) {
		return
	}
	for _, c := range qxCases() {
		t.Run(c.name, func(t *testing.T) {
			want := qtORT(t, c.domain, c.op, c.opset, c.attrs, c.in, c.outs)
			opset := c.opset
			if c.domain != "" {
				opset = 1
			}
			got := qtMust(t, c.domain, c.op, opset, len(c.outs), c.attrs, c.in...)
			for i := range want {
				d, s := qtDiff(t, got[i], want[i])
				if d > c.tol*math.Max(s, 1e-30) {
					t.Errorf("output %d: max |native − onnxruntime| = %g (output scale %g, tolerance %g)", i, d, s, c.tol*s)
				}
				t.Logf("output %d %s: max abs difference %g (scale %g)", i, got[i], d, s)
			}
		})
	}
}
