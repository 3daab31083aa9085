package kernels_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/linearize/linearize/infer/infertest"
	"github.com/linearize/linearize/kernels"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// ConvTranspose against its definition in float64: every input element
// x[n, c, i] sends x·w[c, m, k] to output position i·stride + k·dilation −
// pad_begin of channel m of its group, the output sizes and paddings as
// the operator's documentation derives them from pads, output_padding,
// output_shape and auto_pad. The ONNX conformance data (TestConformance)
// covers the opset 1/11 examples; TestConvTransposeMatchesORT compares
// with onnxruntime.

// ctCase is one ConvTranspose form.
type ctCase struct {
	name    string
	x, w    []int // X [N, C, D...], W [C, M/group, K...]
	group   int
	strides []int
	dil     []int
	pads    []int
	outPad  []int
	outSh   []int
	autoPad string
	bias    bool
}

func ctCases() []ctCase {
	return []ctCase{
		{name: "2-D plain", x: []int{1, 2, 4, 5}, w: []int{2, 3, 3, 3}, bias: true},
		{name: "2-D strides pads", x: []int{2, 3, 4, 3}, w: []int{3, 2, 3, 2}, strides: []int{2, 3}, pads: []int{1, 0, 2, 1}, bias: true},
		{name: "groups", x: []int{2, 4, 3, 3}, w: []int{4, 3, 2, 2}, group: 2, strides: []int{2, 1}, bias: true},
		{name: "depthwise", x: []int{1, 3, 5, 4}, w: []int{3, 1, 3, 3}, group: 3, strides: []int{2, 2}, pads: []int{1, 1, 1, 1}},
		{name: "dilations output_padding", x: []int{1, 2, 3, 4}, w: []int{2, 2, 2, 3}, strides: []int{3, 2}, dil: []int{2, 2}, outPad: []int{1, 1}},
		{name: "output_shape", x: []int{1, 1, 3, 3}, w: []int{1, 2, 3, 3}, strides: []int{3, 2}, outSh: []int{10, 8}},
		{name: "output_shape smaller", x: []int{1, 2, 4, 4}, w: []int{2, 2, 3, 3}, strides: []int{2, 2}, outSh: []int{7, 8}},
		{name: "SAME_UPPER", x: []int{1, 2, 3, 4}, w: []int{2, 2, 3, 3}, strides: []int{2, 2}, autoPad: "SAME_UPPER"},
		{name: "SAME_LOWER", x: []int{1, 2, 3, 4}, w: []int{2, 2, 3, 3}, strides: []int{2, 2}, autoPad: "SAME_LOWER"},
		{name: "VALID", x: []int{1, 2, 3, 3}, w: []int{2, 1, 2, 2}, strides: []int{2, 2}, autoPad: "VALID", bias: true},
		{name: "1-D", x: []int{2, 3, 7}, w: []int{3, 2, 4}, strides: []int{2}, pads: []int{1, 2}, bias: true},
		{name: "3-D", x: []int{1, 2, 3, 2, 3}, w: []int{2, 2, 2, 3, 2}, strides: []int{1, 2, 2}, pads: []int{0, 1, 0, 1, 0, 1}},
		{name: "larger (threaded GEMM)", x: []int{2, 16, 12, 12}, w: []int{16, 8, 4, 4}, strides: []int{2, 2}, pads: []int{1, 1, 1, 1}, bias: true},
	}
}

func (c ctCase) attrs() []*onnxpb.AttributeProto {
	var a []*onnxpb.AttributeProto
	add := func(name string, v []int) {
		if v != nil {
			w := make([]int64, len(v))
			for i, x := range v {
				w[i] = int64(x)
			}
			a = append(a, kAttr(name, w))
		}
	}
	add("strides", c.strides)
	add("dilations", c.dil)
	add("pads", c.pads)
	add("output_padding", c.outPad)
	add("output_shape", c.outSh)
	add("kernel_shape", c.w[2:])
	if c.group > 0 {
		a = append(a, kAttr("group", c.group))
	}
	if c.autoPad != "" {
		a = append(a, kAttr("auto_pad", c.autoPad))
	}
	return a
}

// ctOr returns v[i], or def when v is nil.
func ctOr(v []int, i, def int) int {
	if v == nil {
		return def
	}
	return v[i]
}

// geometry returns the output spatial sizes and leading paddings of c as
// the operator documentation states them: out = stride·(in − 1) +
// output_padding + (kernel − 1)·dilation + 1 − pads, or with output_shape
// (or SAME_*, out = in·stride) total_padding = that size without pads −
// out, split with the larger half at the end for SAME_UPPER and at the
// beginning otherwise.
func (c ctCase) geometry() (out, begin []int) {
	r := len(c.x) - 2
	out, begin = make([]int, r), make([]int, r)
	for i := 0; i < r; i++ {
		s, d, k, in := ctOr(c.strides, i, 1), ctOr(c.dil, i, 1), c.w[2+i], c.x[2+i]
		full := s*(in-1) + ctOr(c.outPad, i, 0) + (k-1)*d + 1
		switch {
		case c.outSh != nil || c.autoPad == "SAME_UPPER" || c.autoPad == "SAME_LOWER":
			out[i] = in * s
			if c.outSh != nil {
				out[i] = c.outSh[i]
			}
			total := full - out[i]
			if c.autoPad == "SAME_UPPER" {
				begin[i] = int(math.Floor(float64(total) / 2))
			} else {
				begin[i] = total - int(math.Floor(float64(total)/2))
			}
		case c.autoPad == "VALID":
			out[i] = full
		default:
			begin[i] = ctOr(c.pads, i, 0)
			out[i] = full - begin[i] - ctOr(c.pads, r+i, 0)
		}
	}
	return out, begin
}

// ctRef is the definition: a scatter of every input element through every
// kernel offset, in float64.
func ctRef(c ctCase, x, w, b []float64) ([]float64, []int) {
	out, begin := c.geometry()
	g := max(c.group, 1)
	n, ch, mg := c.x[0], c.x[1], c.w[1]
	m, cg := mg*g, ch/g
	yShape := append([]int{n, m}, out...)
	y := make([]float64, onnx.NumElements(yShape))
	inSp, kSp := c.x[2:], c.w[2:]
	for bi := 0; bi < n; bi++ {
		for ci := 0; ci < ch; ci++ {
			for p := 0; p < onnx.NumElements(inSp); p++ {
				ip := kIndex(p, inSp)
				xv := x[(bi*ch+ci)*onnx.NumElements(inSp)+p]
				for mj := 0; mj < mg; mj++ {
					for q := 0; q < onnx.NumElements(kSp); q++ {
						kp := kIndex(q, kSp)
						if o, ok := ctTarget(c, ip, kp, begin, out); ok {
							oc := (ci/cg)*mg + mj
							y[(bi*m+oc)*onnx.NumElements(out)+o] += xv * w[(ci*mg+mj)*onnx.NumElements(kSp)+q]
						}
					}
				}
			}
		}
	}
	if b != nil {
		for i := range y {
			y[i] += b[(i/onnx.NumElements(out))%m]
		}
	}
	return y, yShape
}

// ctTarget returns the flat output position input position ip reaches
// through kernel offset kp, and whether it is inside the output.
func ctTarget(c ctCase, ip, kp, begin, out []int) (int, bool) {
	o := make([]int, len(ip))
	for i := range ip {
		o[i] = ip[i]*ctOr(c.strides, i, 1) + kp[i]*ctOr(c.dil, i, 1) - begin[i]
		if o[i] < 0 || o[i] >= out[i] {
			return 0, false
		}
	}
	return kFlat(o, out), true
}

// inputs draws X, W and B for c.
func (c ctCase) inputs(rng *rand.Rand) []*onnx.Tensor {
	in := []*onnx.Tensor{kRand(rng, c.x...), kRand(rng, c.w...)}
	if c.bias {
		in = append(in, kRand(rng, c.w[1]*max(c.group, 1)))
	}
	return in
}

func TestConvTransposeReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(201, 7))
	for _, c := range ctCases() {
		t.Run(c.name, func(t *testing.T) {
			in := c.inputs(rng)
			var b []float64
			if c.bias {
				b = kF64(in[2])
			}
			want, shape := ctRef(c, kF64(in[0]), kF64(in[1]), b)
			for _, dt := range []onnx.DataType{onnx.Float, onnx.Double, onnx.Float16} {
				typed := make([]*onnx.Tensor, len(in))
				for i, x := range in {
					if dt == onnx.Double {
						typed[i] = &onnx.Tensor{DType: onnx.Double, Shape: x.Shape, Data: kF64(x)}
					} else {
						typed[i] = qtTensor(dt, x.Shape, kF64(x))
					}
				}
				ref := want
				if dt == onnx.Float16 { // the definition on the inputs rounded to float16
					var bh []float64
					if c.bias {
						bh = kF64(typed[2])
					}
					ref, _ = ctRef(c, kF64(typed[0]), kF64(typed[1]), bh)
				}
				got := kRun(t, kNode("ConvTranspose", 1, c.attrs()...), 11, typed...)[0]
				tol := map[onnx.DataType]float64{onnx.Float: 1e-5, onnx.Double: 1e-12, onnx.Float16: 2e-3}[dt]
				if got.DType != dt {
					t.Fatalf("%s: output %s", onnx.TypeName(dt), got)
				}
				kClose(t, onnx.TypeName(dt), got, shape, ref, tol, tol*maxAbsF(ref))
			}
		})
	}
}

// TestConvTransposeWithoutKernelShape: kernel_shape, strides and the rest
// are optional; W gives the kernel.
func TestConvTransposeWithoutKernelShape(t *testing.T) {
	rng := rand.New(rand.NewPCG(202, 7))
	c := ctCase{x: []int{1, 2, 3, 3}, w: []int{2, 3, 2, 2}}
	in := c.inputs(rng)
	want, shape := ctRef(c, kF64(in[0]), kF64(in[1]), nil)
	got := kRun(t, kNode("ConvTranspose", 1), 1, in...)[0]
	kClose(t, "defaults", got, shape, want, 1e-5, 1e-5*maxAbsF(want))
}

// TestConvTransposeThreadsDeterministic: the parallel paths give the
// serial result bit for bit.
func TestConvTransposeThreadsDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(203, 7))
	for _, c := range ctCases() {
		in := c.inputs(rng)
		k, err := kernels.Lookup("", "ConvTranspose", 11)
		if err != nil {
			t.Fatal(err)
		}
		var outs [2]string
		for i, threads := range []int{1, 3} {
			y, err := k(&kernels.Context{Node: kNode("ConvTranspose", 1, c.attrs()...), Opset: 11, Threads: threads}, in)
			if err != nil {
				t.Fatal(err)
			}
			outs[i] = fmt.Sprint(y[0].Data)
		}
		if outs[0] != outs[1] {
			t.Errorf("%s: threaded result differs from the serial one", c.name)
		}
	}
}

func TestConvTransposeBadInputs(t *testing.T) {
	f := func(shape ...int) *onnx.Tensor { return kRand(rand.New(rand.NewPCG(1, 1)), shape...) }
	A := kAttr
	for _, c := range []struct {
		attrs []*onnxpb.AttributeProto
		in    []*onnx.Tensor
	}{
		{nil, []*onnx.Tensor{f(1, 2, 3), f(3, 1, 2)}},                                                // W's first dim ≠ C
		{nil, []*onnx.Tensor{f(1, 2), f(2, 1)}},                                                      // rank 2
		{nil, []*onnx.Tensor{f(1, 2, 3), f(2, 1, 2, 2)}},                                             // ranks differ
		{[]*onnxpb.AttributeProto{A("group", 3)}, []*onnx.Tensor{f(1, 2, 3), f(2, 1, 2)}},            // group ∤ C
		{[]*onnxpb.AttributeProto{A("group", 0)}, []*onnx.Tensor{f(1, 2, 3), f(2, 1, 2)}},            // group 0
		{nil, []*onnx.Tensor{f(1, 2, 3), f(2, 1, 2), f(3)}},                                          // B ≠ [M]
		{[]*onnxpb.AttributeProto{A("strides", []int64{0})}, []*onnx.Tensor{f(1, 2, 3), f(2, 1, 2)}}, // stride 0
		{[]*onnxpb.AttributeProto{A("strides", []int64{1, 1})}, []*onnx.Tensor{f(1, 2, 3), f(2, 1, 2)}},
		{[]*onnxpb.AttributeProto{A("pads", []int64{3, 3})}, []*onnx.Tensor{f(1, 2, 3), f(2, 1, 2)}}, // negative output size
		{[]*onnxpb.AttributeProto{A("pads", []int64{-1, 0})}, []*onnx.Tensor{f(1, 2, 3), f(2, 1, 2)}},
		{[]*onnxpb.AttributeProto{A("output_shape", []int64{-4})}, []*onnx.Tensor{f(1, 2, 3), f(2, 1, 2)}},
		{[]*onnxpb.AttributeProto{A("output_shape", []int64{1, 2, 3, 4})}, []*onnx.Tensor{f(1, 2, 3), f(2, 1, 2)}},
		{[]*onnxpb.AttributeProto{A("output_shape", []int64{1 << 40})}, []*onnx.Tensor{f(1, 2, 3), f(2, 1, 2)}},
		{[]*onnxpb.AttributeProto{A("strides", []int64{1 << 30}), A("dilations", []int64{1 << 30})}, []*onnx.Tensor{f(1, 2, 3000), f(2, 1, 2000)}}, // huge output
		{[]*onnxpb.AttributeProto{A("auto_pad", "SAME")}, []*onnx.Tensor{f(1, 2, 3), f(2, 1, 2)}},
		{[]*onnxpb.AttributeProto{A("kernel_shape", []int64{3})}, []*onnx.Tensor{f(1, 2, 3), f(2, 1, 2)}},
		{nil, []*onnx.Tensor{f(1, 2, 3), f(2, 1, 0)}}, // empty kernel
		{nil, []*onnx.Tensor{f(1, 2, 3), qtTensor(onnx.Int32, []int{2, 1, 2}, []float64{1, 2, 3, 4})}},
		{nil, []*onnx.Tensor{{DType: onnx.Float, Shape: []int{1, 2, 0, 1 << 40}, Data: []float32{}}, f(2, 1, 2, 2)}}, // absurd empty input
	} {
		_, err := qtRun("", "ConvTranspose", 11, 1, c.attrs, c.in...)
		if err == nil || strings.Contains(err.Error(), "PANIC") || !strings.Contains(err.Error(), "kernels: ConvTranspose") {
			t.Errorf("%v %v: want an error naming the op, got %v", c.attrs, c.in, err)
		}
	}
}

// TestConvTransposeMatchesORT compares with onnxruntime, which agrees with
// the documentation's padding rules for explicit pads, output_shape and
// auto_pad.
func TestConvTransposeMatchesORT(t *testing.T) {
	if !infertest.ORT(t) {
		return
	}
	rng := rand.New(rand.NewPCG(204, 7))
	for _, c := range ctCases() {
		t.Run(c.name, func(t *testing.T) {
			in := c.inputs(rng)
			want := qtORT(t, "", "ConvTranspose", 17, c.attrs(), in, []onnx.DataType{onnx.Float})[0]
			got := kRun(t, kNode("ConvTranspose", 1, c.attrs()...), 17, in...)[0]
			d, s := qtDiff(t, got, want)
			if d > 1e-5*s {
				t.Errorf("max |native − onnxruntime| = %g (output scale %g)", d, s)
			}
			t.Logf("max abs difference %g (scale %g)", d, s)
		})
	}
}
