package kernels_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/kernels"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// spatialCases are the convolution, pooling, normalisation and resize
// forms of vision, speech and hybrid encoders (and the edges of their
// attributes), on seeded random inputs.
func spatialCases() []xcase {
	rng := rand.New(rand.NewPCG(14, 2))
	f := func(shape ...int) *onnx.Tensor { return kRand(rng, shape...) }
	i64 := func(v ...int64) *onnx.Tensor { return onnx.NewInt64([]int{len(v)}, v) }
	f32 := func(v ...float32) *onnx.Tensor { return onnx.NewFloat([]int{len(v)}, v) }
	A := kAttr
	at := func(kv ...any) []*onnxpb.AttributeProto {
		var out []*onnxpb.AttributeProto
		for i := 0; i < len(kv); i += 2 {
			out = append(out, A(kv[i].(string), kv[i+1]))
		}
		return out
	}
	ints := func(v ...int64) []int64 { return v }
	u8 := make([]uint8, 2*3*7*7)
	for i := range u8 {
		u8[i] = uint8(rng.IntN(256))
	}
	return []xcase{
		// Conv
		{"Conv 2-D pads bias", "Conv", 11, at("pads", ints(1, 1, 1, 1)), []*onnx.Tensor{f(2, 3, 7, 6), f(4, 3, 3, 3), f(4)}, 1},
		{"Conv 2-D strides asymmetric pads dilations", "Conv", 11, at("pads", ints(0, 1, 2, 0), "strides", ints(2, 3), "dilations", ints(2, 1)), []*onnx.Tensor{f(1, 3, 9, 10), f(2, 3, 3, 2)}, 1},
		{"Conv 2-D groups", "Conv", 11, at("group", 2, "pads", ints(1, 0, 1, 2)), []*onnx.Tensor{f(2, 4, 6, 5), f(6, 2, 3, 3), f(6)}, 1},
		{"Conv 2-D depthwise", "Conv", 11, at("group", 4, "pads", ints(1, 1, 1, 1), "kernel_shape", ints(3, 3)), []*onnx.Tensor{f(1, 4, 5, 5), f(8, 1, 3, 3), f(8)}, 1},
		{"Conv 2-D patch embedding", "Conv", 11, at("strides", ints(4, 4), "kernel_shape", ints(4, 4)), []*onnx.Tensor{f(2, 3, 16, 16), f(8, 3, 4, 4), f(8)}, 1},
		{"Conv 2-D SAME_UPPER stride 2", "Conv", 11, at("auto_pad", "SAME_UPPER", "strides", ints(2, 2)), []*onnx.Tensor{f(1, 2, 7, 8), f(3, 2, 3, 2)}, 1},
		{"Conv 2-D SAME_LOWER", "Conv", 11, at("auto_pad", "SAME_LOWER", "strides", ints(1, 3)), []*onnx.Tensor{f(1, 2, 6, 7), f(3, 2, 2, 4)}, 1},
		{"Conv 2-D VALID", "Conv", 11, at("auto_pad", "VALID", "strides", ints(2, 1)), []*onnx.Tensor{f(1, 2, 6, 7), f(3, 2, 3, 3)}, 1},
		{"Conv 2-D 1x1", "Conv", 11, nil, []*onnx.Tensor{f(2, 8, 5, 5), f(4, 8, 1, 1), f(4)}, 1},
		{"Conv 1-D feature encoder", "Conv", 11, at("strides", ints(5)), []*onnx.Tensor{f(2, 1, 160), f(8, 1, 10)}, 1},
		{"Conv 1-D positional grouped", "Conv", 11, at("group", 4, "pads", ints(8, 8)), []*onnx.Tensor{f(1, 16, 15), f(16, 4, 16), f(16)}, 1},
		{"Conv 1-D depthwise separable", "Conv", 11, at("group", 6, "pads", ints(4, 4)), []*onnx.Tensor{f(2, 6, 9), f(6, 1, 9)}, 1},
		{"Conv 1-D stride 2 pad 1", "Conv", 11, at("strides", ints(2), "pads", ints(1, 1)), []*onnx.Tensor{f(2, 8, 32), f(8, 8, 3), f(8)}, 1},
		{"Conv 1-D pointwise", "Conv", 11, nil, []*onnx.Tensor{f(2, 12, 7), f(24, 12, 1), f(24)}, 1},
		{"Conv 3-D", "Conv", 11, at("pads", ints(1, 0, 1, 0, 1, 0)), []*onnx.Tensor{f(1, 2, 4, 5, 3), f(3, 2, 2, 3, 2), f(3)}, 1},
		// Pooling
		{"MaxPool 2-D stem", "MaxPool", 12, at("kernel_shape", ints(3, 3), "strides", ints(2, 2), "pads", ints(1, 1, 1, 1)), []*onnx.Tensor{f(2, 3, 9, 8)}, 1},
		{"MaxPool 2-D ceil dilations indices", "MaxPool", 12, at("kernel_shape", ints(2, 3), "strides", ints(2, 2), "dilations", ints(2, 1), "ceil_mode", 1), []*onnx.Tensor{f(2, 3, 8, 9)}, 2},
		{"MaxPool 2-D indices storage_order 1", "MaxPool", 12, at("kernel_shape", ints(2, 2), "storage_order", 1, "pads", ints(1, 0, 0, 1)), []*onnx.Tensor{f(1, 2, 5, 4)}, 2},
		{"MaxPool 1-D SAME_UPPER", "MaxPool", 12, at("kernel_shape", ints(3), "strides", ints(2), "auto_pad", "SAME_UPPER"), []*onnx.Tensor{f(2, 4, 10)}, 1},
		{"MaxPool uint8", "MaxPool", 12, at("kernel_shape", ints(3, 3), "strides", ints(2, 2)), []*onnx.Tensor{{DType: onnx.Uint8, Shape: []int{2, 3, 7, 7}, Data: u8}}, 1},
		{"AveragePool 2-D pads exclude", "AveragePool", 11, at("kernel_shape", ints(3, 3), "strides", ints(2, 2), "pads", ints(1, 1, 1, 1)), []*onnx.Tensor{f(2, 3, 8, 7)}, 1},
		{"AveragePool 2-D pads include", "AveragePool", 11, at("kernel_shape", ints(3, 2), "pads", ints(1, 0, 2, 1), "count_include_pad", 1), []*onnx.Tensor{f(2, 3, 6, 5)}, 1},
		{"AveragePool funnel ceil", "AveragePool", 11, at("kernel_shape", ints(2, 1), "strides", ints(2, 1), "ceil_mode", 1), []*onnx.Tensor{f(2, 1, 7, 8)}, 1},
		{"AveragePool ceil include pad", "AveragePool", 11, at("kernel_shape", ints(3, 3), "strides", ints(2, 2), "pads", ints(1, 1, 1, 1), "ceil_mode", 1, "count_include_pad", 1), []*onnx.Tensor{f(1, 2, 6, 6)}, 1},
		{"AveragePool 1-D SAME_LOWER", "AveragePool", 11, at("kernel_shape", ints(4), "strides", ints(3), "auto_pad", "SAME_LOWER"), []*onnx.Tensor{f(2, 3, 11)}, 1},
		{"AveragePool-19 dilations", "AveragePool", 19, at("kernel_shape", ints(2, 2), "dilations", ints(2, 2), "pads", ints(1, 1, 0, 0)), []*onnx.Tensor{f(1, 2, 7, 6)}, 1},
		{"GlobalAveragePool", "GlobalAveragePool", 13, nil, []*onnx.Tensor{f(2, 5, 4, 3)}, 1},
		{"GlobalMaxPool 1-D", "GlobalMaxPool", 13, nil, []*onnx.Tensor{f(2, 5, 9)}, 1},
		// Normalisation
		{"GroupNormalization-18 per group", "GroupNormalization", 18, at("num_groups", 2, "epsilon", float32(1e-5)), []*onnx.Tensor{f(2, 4, 3, 5), f(2), f(2)}, 1},
		{"GroupNormalization-21 per channel", "GroupNormalization", 21, at("num_groups", 3), []*onnx.Tensor{f(2, 6, 10), f(6), f(6)}, 1},
		{"GroupNormalization-21 one group per channel", "GroupNormalization", 21, at("num_groups", 4), []*onnx.Tensor{f(1, 4, 12), f(4), f(4)}, 1},
		{"InstanceNormalization 1-D", "InstanceNormalization", 6, at("epsilon", float32(1e-5)), []*onnx.Tensor{f(2, 4, 12), f(4), f(4)}, 1},
		// Resize
		{"Resize-13 cubic sizes (DINOv2 position table)", "Resize", 13, at("mode", "cubic", "cubic_coeff_a", float32(-0.75), "coordinate_transformation_mode", "half_pixel", "nearest_mode", "floor"), []*onnx.Tensor{f(1, 4, 3, 3), nil, nil, i64(1, 4, 5, 7)}, 1},
		{"Resize-13 cubic downsample", "Resize", 13, at("mode", "cubic"), []*onnx.Tensor{f(1, 2, 8, 7), nil, nil, i64(1, 2, 3, 4)}, 1},
		{"Resize-13 cubic exclude_outside", "Resize", 13, at("mode", "cubic", "exclude_outside", 1, "cubic_coeff_a", float32(-0.5)), []*onnx.Tensor{f(1, 2, 4, 4), nil, f32(1, 1, 1.5, 2.5)}, 1},
		{"Resize-13 cubic align_corners sizes", "Resize", 13, at("mode", "cubic", "coordinate_transformation_mode", "align_corners"), []*onnx.Tensor{f(1, 1, 4, 5), nil, nil, i64(1, 1, 7, 3)}, 1},
		{"Resize-13 linear pytorch_half_pixel", "Resize", 13, at("mode", "linear", "coordinate_transformation_mode", "pytorch_half_pixel"), []*onnx.Tensor{f(2, 3, 5, 4), nil, nil, i64(2, 3, 1, 9)}, 1},
		{"Resize-13 linear asymmetric scales", "Resize", 13, at("mode", "linear", "coordinate_transformation_mode", "asymmetric"), []*onnx.Tensor{f(1, 2, 4, 3), nil, f32(1, 1, 2, 0.7)}, 1},
		{"Resize-13 linear align_corners downsample scales", "Resize", 13, at("mode", "linear", "coordinate_transformation_mode", "align_corners"), []*onnx.Tensor{f(1, 1, 2, 4), nil, f32(1, 1, 0.6, 0.6)}, 1},
		{"Resize-13 cubic align_corners downsample scales", "Resize", 13, at("mode", "cubic", "coordinate_transformation_mode", "align_corners"), []*onnx.Tensor{f(1, 1, 4, 4), nil, f32(1, 1, 0.6, 0.6)}, 1},
		{"Resize-13 linear 1-D", "Resize", 13, at("mode", "linear"), []*onnx.Tensor{f(2, 3, 10), nil, f32(1, 1, 1.6)}, 1},
		{"Resize-13 nearest round_prefer_ceil", "Resize", 13, at("mode", "nearest", "nearest_mode", "round_prefer_ceil"), []*onnx.Tensor{f(1, 2, 4, 6), nil, f32(1, 1, 2, 0.5)}, 1},
		{"Resize-13 nearest tf_half_pixel_for_nn ceil", "Resize", 13, at("mode", "nearest", "coordinate_transformation_mode", "tf_half_pixel_for_nn", "nearest_mode", "ceil"), []*onnx.Tensor{f(1, 1, 5, 5), nil, nil, i64(1, 1, 3, 8)}, 1},
		{"Resize-11 nearest scales", "Resize", 11, at("mode", "nearest", "coordinate_transformation_mode", "asymmetric", "nearest_mode", "floor"), []*onnx.Tensor{f(1, 2, 3, 4), f32(), f32(1, 1, 2, 2)}, 1},
		{"Resize-11 tf_crop_and_resize", "Resize", 11, at("mode", "linear", "coordinate_transformation_mode", "tf_crop_and_resize", "extrapolation_value", float32(7)), []*onnx.Tensor{f(1, 1, 5, 6), f32(0, 0, -0.2, 0.1, 1, 1, 0.9, 1.3), f32(1, 1, 1.4, 1.5)}, 1},
		{"Resize-18 axes not_larger", "Resize", 18, at("mode", "linear", "axes", ints(2, 3), "keep_aspect_ratio_policy", "not_larger"), []*onnx.Tensor{f(1, 2, 4, 6), nil, nil, i64(6, 6)}, 1},
		{"Resize-19 half_pixel_symmetric", "Resize", 19, at("mode", "linear", "coordinate_transformation_mode", "half_pixel_symmetric"), []*onnx.Tensor{f(1, 2, 4, 5), nil, f32(1, 1, 1.7, 0.6)}, 1},
	}
}

// TestSpatialKernelsMatchORT cross-checks Conv, the pools, the group and
// instance normalisations and Resize against onnxruntime. Conv sums in a
// different order than onnxruntime's (im2col + GEMM against MLAS), so its
// outputs get an absolute tolerance relative to their scale.
func TestSpatialKernelsMatchORT(t *testing.T) {
	if err := infer.ORTAvailable(); err != nil {
		t.Skipf("onnxruntime not available (install it with scripts/setup.sh): %v", err)
	}
	for _, c := range spatialCases() {
		t.Run(c.name, func(t *testing.T) {
			atol := 1e-6
			if c.op == "Conv" {
				atol = 1e-6 * math.Max(1, maxAbsT(kRun(t, kNode(c.op, 1, c.attrs...), c.opset, c.in...)[0]))
			}
			crossCheckORT(t, c, 1e-5, atol)
		})
	}
}

func maxAbsT(t *onnx.Tensor) float64 {
	m := 0.0
	for _, v := range kF64(t) {
		m = math.Max(m, math.Abs(v))
	}
	return m
}

// TestConvDirect checks Conv against a float64 direct sum over the window
// (no im2col, no GEMM) in float64 and float32, padding and grouping
// included.
func TestConvDirect(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	type cs struct {
		x, w            []int
		group           int
		strides, dil    []int
		begin, end      []int
		double, hasBias bool
	}
	for _, c := range []cs{
		{[]int{2, 4, 7, 6}, []int{6, 2, 3, 2}, 2, []int{2, 1}, []int{1, 2}, []int{1, 0}, []int{2, 1}, false, true},
		{[]int{1, 3, 11}, []int{3, 1, 4}, 3, []int{3}, []int{2}, []int{3}, []int{1}, true, false},
		{[]int{2, 2, 3, 4, 5}, []int{4, 2, 2, 2, 3}, 1, []int{1, 2, 1}, []int{1, 1, 2}, []int{0, 1, 1}, []int{1, 0, 2}, false, true},
	} {
		r := len(c.x) - 2
		x, w := kRand(rng, c.x...), kRand(rng, c.w...)
		b := kRand(rng, c.w[0])
		in := []*onnx.Tensor{x, w}
		if c.hasBias {
			in = append(in, b)
		}
		if c.double {
			for i, t := range in {
				v, _ := t.AsFloat64s()
				in[i] = &onnx.Tensor{DType: onnx.Double, Shape: t.Shape, Data: v}
			}
		}
		pads := make([]int64, 0, 2*r)
		for _, p := range append(append([]int{}, c.begin...), c.end...) {
			pads = append(pads, int64(p))
		}
		toI := func(v []int) []int64 {
			o := make([]int64, len(v))
			for i := range v {
				o[i] = int64(v[i])
			}
			return o
		}
		node := kNode("Conv", 1, kAttr("group", c.group), kAttr("strides", toI(c.strides)), kAttr("dilations", toI(c.dil)), kAttr("pads", pads))
		got := kRun(t, node, 11, in...)[0]
		// Reference: a direct sum.
		xs, ws, bs := kF64(x), kF64(w), kF64(b)
		n, ch, m := c.x[0], c.x[1], c.w[0]
		cg, mg := ch/c.group, m/c.group
		outSp := make([]int, r)
		for i := range outSp {
			outSp[i] = (c.x[2+i]+c.begin[i]+c.end[i]-c.dil[i]*(c.w[2+i]-1)-1)/c.strides[i] + 1
		}
		shape := append([]int{n, m}, outSp...)
		want := make([]float64, onnx.NumElements(shape))
		xStr, wStr := strides(c.x), strides(c.w)
		opos := make([]int, r)
		for i := range want {
			// decode i
			rem := i
			sp := onnx.NumElements(outSp)
			bn, oc := rem/(m*sp), rem/sp%m
			rem %= sp
			for a := r - 1; a >= 0; a-- {
				opos[a] = rem % outSp[a]
				rem /= outSp[a]
			}
			g := oc / mg
			s := 0.0
			if c.hasBias {
				s = bs[oc]
			}
			kpos := make([]int, r)
			kk := onnx.NumElements(c.w[2:])
			for ic := 0; ic < cg; ic++ {
				for k := 0; k < kk; k++ {
					rk := k
					for a := r - 1; a >= 0; a-- {
						kpos[a] = rk % c.w[2+a]
						rk /= c.w[2+a]
					}
					xo, wo, ok := bn*xStr[0]+(g*cg+ic)*xStr[1], oc*wStr[0]+ic*wStr[1], true
					for a := 0; a < r; a++ {
						p := opos[a]*c.strides[a] - c.begin[a] + kpos[a]*c.dil[a]
						if p < 0 || p >= c.x[2+a] {
							ok = false
							break
						}
						xo += p * xStr[2+a]
						wo += kpos[a] * wStr[2+a]
					}
					if ok {
						s += xs[xo] * ws[wo]
					}
				}
			}
			want[i] = s
		}
		tol := 1e-5
		if c.double {
			tol = 1e-12
		}
		kClose(t, fmt.Sprintf("Conv %v", c.x), got, shape, want, tol, tol)
	}
}

// strides is stridesOf in util.go, which this package (ops_test) cannot
// reach.
func strides(shape []int) []int {
	s := make([]int, len(shape))
	acc := 1
	for i := len(shape) - 1; i >= 0; i-- {
		s[i] = acc
		acc *= shape[i]
	}
	return s
}

// TestSpatialErrors: malformed attributes and shapes are errors naming the
// node, never panics.
func TestSpatialErrors(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	f := func(shape ...int) *onnx.Tensor { return kRand(rng, shape...) }
	ints := func(v ...int64) []int64 { return v }
	for _, c := range []struct {
		op    string
		attrs []*onnxpb.AttributeProto
		in    []*onnx.Tensor
		want  string
	}{
		{"Conv", nil, []*onnx.Tensor{f(1, 3, 4), f(2, 2, 3)}, "channels per group"},
		{"Conv", []*onnxpb.AttributeProto{kAttr("group", 2)}, []*onnx.Tensor{f(1, 3, 4), f(2, 1, 3)}, "does not divide"},
		{"Conv", []*onnxpb.AttributeProto{kAttr("strides", ints(0))}, []*onnx.Tensor{f(1, 1, 4), f(1, 1, 3)}, "must be positive"},
		{"Conv", nil, []*onnx.Tensor{f(1, 1, 2), f(1, 1, 3)}, "exceeds padded input"},
		{"Conv", []*onnxpb.AttributeProto{kAttr("pads", ints(1))}, []*onnx.Tensor{f(1, 1, 4), f(1, 1, 3)}, "pads has 1 values"},
		{"Conv", []*onnxpb.AttributeProto{kAttr("auto_pad", "BOGUS")}, []*onnx.Tensor{f(1, 1, 4), f(1, 1, 3)}, "auto_pad"},
		{"Conv", []*onnxpb.AttributeProto{kAttr("pads", ints(1<<40, 0))}, []*onnx.Tensor{f(1, 1, 4), f(1, 1, 3)}, "out of range"},
		{"Conv", nil, []*onnx.Tensor{f(1, 1, 4), f(1, 1, 3), f(2)}, "B must have shape"},
		{"Conv", nil, []*onnx.Tensor{f(4), f(3)}, "rank"},
		{"MaxPool", nil, []*onnx.Tensor{f(1, 1, 4)}, "kernel_shape is required"},
		{"MaxPool", []*onnxpb.AttributeProto{kAttr("kernel_shape", ints(2, 2))}, []*onnx.Tensor{f(1, 1, 4)}, "kernel_shape"},
		{"AveragePool", []*onnxpb.AttributeProto{kAttr("kernel_shape", ints(5))}, []*onnx.Tensor{f(1, 1, 4)}, "exceeds padded input"},
		{"GroupNormalization", []*onnxpb.AttributeProto{kAttr("num_groups", 3)}, []*onnx.Tensor{f(1, 4, 2), f(3), f(3)}, "does not divide"},
		{"GroupNormalization", []*onnxpb.AttributeProto{kAttr("num_groups", 2)}, []*onnx.Tensor{f(1, 4, 2), f(4), f(4)}, "must have shape [2]"},
		{"Resize", nil, []*onnx.Tensor{f(1, 2), nil, onnx.NewFloat([]int{2}, []float32{1, 1e30})}, "too large"},
		{"Resize", nil, []*onnx.Tensor{f(1, 2), nil, onnx.NewFloat([]int{2}, []float32{1, -1})}, "positive"},
		{"Resize", nil, []*onnx.Tensor{f(1, 2)}, "exactly one of scales and sizes"},
		{"Resize", []*onnxpb.AttributeProto{kAttr("mode", "area")}, []*onnx.Tensor{f(1, 2), nil, onnx.NewFloat([]int{2}, []float32{1, 2})}, "mode"},
		{"Loop", nil, []*onnx.Tensor{nil, nil}, "attribute body"},
		{"If", nil, []*onnx.Tensor{f(1)}, "single bool"},
	} {
		n := kNode(c.op, 1, c.attrs...)
		n.Name = proto.String("bad")
		_, err := kTry(n, 18, c.in...)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "kernels: "+c.op+" node \"bad\": ") {
			t.Errorf("%s %v: error %v, want one naming the node and containing %q", c.op, c.attrs, err, c.want)
		}
	}
}

// TestSpatialRandomNoPanic feeds Conv, the pools, GroupNormalization and
// Resize seeded random shapes and window attributes, mostly valid, a few
// corrupted: each call returns a result or an error, and most succeed.
func TestSpatialRandomNoPanic(t *testing.T) {
	rng := rand.New(rand.NewPCG(77, 78))
	pick := func(lo, hi int) int64 { // in [lo, hi], sometimes out of range
		switch rng.IntN(40) {
		case 0:
			return -1
		case 1:
			return 1 << 40
		case 2:
			return 0
		}
		return int64(lo + rng.IntN(hi-lo+1))
	}
	list := func(n, lo, hi int) []int64 {
		if rng.IntN(30) == 0 {
			n = rng.IntN(4)
		}
		v := make([]int64, n)
		for i := range v {
			v[i] = pick(lo, hi)
		}
		return v
	}
	for _, op := range []string{"Conv", "MaxPool", "AveragePool", "GroupNormalization", "Resize"} {
		ok := 0
		for range 300 {
			sp := 1 + rng.IntN(3)
			n, c := 1+rng.IntN(2), 1+rng.IntN(4)
			xs := []int{n, c}
			for range sp {
				xs = append(xs, 1+rng.IntN(6))
			}
			var attrs []*onnxpb.AttributeProto
			add := func(name string, v any) {
				if rng.IntN(3) > 0 {
					attrs = append(attrs, kAttr(name, v))
				}
			}
			kernel := list(sp, 1, 3)
			add("strides", list(sp, 1, 3))
			add("dilations", list(sp, 1, 2))
			add("pads", list(2*sp, 0, 2))
			if rng.IntN(4) == 0 {
				attrs = append(attrs, kAttr("auto_pad", []string{"NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER", "x"}[rng.IntN(5)]))
			}
			in := []*onnx.Tensor{kRand(rng, xs...)}
			switch op {
			case "Conv":
				g := 1
				if c%2 == 0 && rng.IntN(2) == 0 {
					g = 2
				}
				add("group", int(pick(g, g)))
				ws := []int{g * (1 + rng.IntN(3)), c / g}
				for _, k := range kernel {
					ws = append(ws, int(min(max(k, 0), 4)))
				}
				in = append(in, kRand(rng, ws...))
				if rng.IntN(2) == 0 {
					in = append(in, kRand(rng, ws[0]))
				}
			case "MaxPool", "AveragePool":
				attrs = append(attrs, kAttr("kernel_shape", kernel))
				add("ceil_mode", rng.IntN(2))
				add("count_include_pad", rng.IntN(2))
				add("storage_order", rng.IntN(2))
			case "GroupNormalization":
				attrs = append(attrs, kAttr("num_groups", int(pick(1, c))))
				in = append(in, kRand(rng, c), kRand(rng, c))
			case "Resize":
				attrs = append(attrs, kAttr("mode", []string{"nearest", "linear", "cubic"}[rng.IntN(3)]))
				attrs = append(attrs, kAttr("coordinate_transformation_mode", []string{"half_pixel", "align_corners", "asymmetric", "tf_crop_and_resize", "pytorch_half_pixel", "half_pixel_symmetric"}[rng.IntN(6)]))
				add("exclude_outside", rng.IntN(2))
				roi := kRand(rng, 2*len(xs))
				if rng.IntN(2) == 0 {
					sc := make([]float32, len(xs))
					for i := range sc {
						sc[i] = float32(pick(1, 8)) / 4
					}
					in = append(in, roi, onnx.NewFloat([]int{len(sc)}, sc))
				} else {
					in = append(in, roi, nil, onnx.NewInt64([]int{len(xs)}, list(len(xs), 1, 7)))
				}
			}
			nd := kNode(op, 1+rng.IntN(2), attrs...)
			_, err := kTry(nd, []int64{11, 13, 18, 19, 21}[rng.IntN(5)], in...)
			if err != nil && strings.Contains(err.Error(), "PANIC") {
				t.Errorf("%s attrs %v inputs %v: %v", op, nd.Attribute, in, err)
			}
			if err == nil {
				ok++
			}
		}
		t.Logf("%s: %d of 300 random calls succeeded", op, ok)
		if ok < 60 {
			t.Errorf("%s: only %d of 300 random calls succeeded: the generator no longer reaches the kernels", op, ok)
		}
	}
}

// TestConvThreadsDeterministic: Conv gives bit-identical outputs whatever
// the thread count (grouped products run in parallel, large ones through a
// parallel GEMM whose summation order does not depend on the split).
func TestConvThreadsDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	k, err := kernels.Lookup("", "Conv", 11)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		group int
		x, w  []int
	}{{1, []int{2, 16, 40}, []int{32, 16, 5}}, {8, []int{3, 16, 40}, []int{16, 2, 7}}, {1, []int{1, 64, 24, 24}, []int{64, 64, 3, 3}}} {
		in := []*onnx.Tensor{kRand(rng, c.x...), kRand(rng, c.w...)}
		node := kNode("Conv", 1, kAttr("group", c.group))
		var ref []float32
		for _, threads := range []int{1, 2, 3} {
			out, err := k(&kernels.Context{Node: node, Opset: 11, Threads: threads}, in)
			if err != nil {
				t.Fatal(err)
			}
			got := out[0].Floats()
			if ref == nil {
				ref = got
				continue
			}
			for i := range ref {
				if got[i] != ref[i] {
					t.Fatalf("group %d threads %d: element %d = %v, 1 thread %v", c.group, threads, i, got[i], ref[i])
				}
			}
		}
	}
}
