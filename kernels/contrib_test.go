package kernels

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// Float64 references for the com.microsoft kernels. The infer package
// additionally checks every kernel against onnxruntime.

func msNode(op string, nIn int, attrs ...*onnxpb.AttributeProto) *Context {
	name, dom := "n", msDomain
	in := make([]string, nIn)
	for i := range in {
		in[i] = "i"
	}
	return &Context{Node: &onnxpb.NodeProto{Name: &name, OpType: &op, Domain: &dom, Input: in, Output: []string{"y"}, Attribute: attrs}, Threads: 2}
}

func aInt(name string, v int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: &name, Type: onnxpb.AttributeProto_INT.Enum(), I: &v}
}

func aFloat(name string, v float32) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: &name, Type: onnxpb.AttributeProto_FLOAT.Enum(), F: &v}
}

func aInts(name string, v ...int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: &name, Type: onnxpb.AttributeProto_INTS.Enum(), Ints: v}
}

func randT(rng *rand.Rand, scale float64, shape ...int) *onnx.Tensor {
	d := make([]float32, onnx.NumElements(shape))
	for i := range d {
		d[i] = float32(scale * rng.NormFloat64())
	}
	return onnx.NewFloat(shape, d)
}

func i32(shape []int, v ...int32) *onnx.Tensor {
	return &onnx.Tensor{DType: onnx.Int32, Shape: shape, Data: v}
}

func near(t *testing.T, what string, got []float32, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	scale := 0.0
	for _, w := range want {
		scale = max(scale, math.Abs(w))
	}
	for i := range got {
		if d := math.Abs(float64(got[i]) - want[i]); d > tol*max(scale, 1) || math.IsNaN(float64(got[i])) {
			t.Fatalf("%s: element %d = %v, want %v (scale %g)", what, i, got[i], want[i], scale)
		}
	}
}

// refAttention is softmax(scale·QKᵀ + addMask[b,i,j] + bias[b,h,i,j])·V per
// head on [B,L,N·d] activations, in float64.
func refAttention(q, k, v []float32, b, s, l, n, dk, dv int, scale float64, addMask func(b, i, j int) float64) []float64 {
	out := make([]float64, b*s*n*dv)
	for bi := 0; bi < b; bi++ {
		for h := 0; h < n; h++ {
			for i := 0; i < s; i++ {
				sc := make([]float64, l)
				mx := math.Inf(-1)
				for j := 0; j < l; j++ {
					var dot float64
					for d := 0; d < dk; d++ {
						dot += float64(q[(bi*s+i)*n*dk+h*dk+d]) * float64(k[(bi*l+j)*n*dk+h*dk+d])
					}
					sc[j] = scale*dot + addMask(bi, i, j)
					mx = max(mx, sc[j])
				}
				var sum float64
				for j := range sc {
					sc[j] = math.Exp(sc[j] - mx)
					sum += sc[j]
				}
				for d := 0; d < dv; d++ {
					var acc float64
					for j := 0; j < l; j++ {
						acc += sc[j] / sum * float64(v[(bi*l+j)*n*dv+h*dv+d])
					}
					out[(bi*s+i)*n*dv+h*dv+d] = acc
				}
			}
		}
	}
	return out
}

// project computes X·W + bias in float64 and rounds to float32 columns
// [off, off+w).
func project(x, w, bias []float32, rows, din, total, off, width int) []float32 {
	out := make([]float32, rows*width)
	for r := 0; r < rows; r++ {
		for c := 0; c < width; c++ {
			acc := float64(bias[off+c])
			for p := 0; p < din; p++ {
				acc += float64(x[r*din+p]) * float64(w[p*total+off+c])
			}
			out[r*width+c] = float32(acc)
		}
	}
	return out
}

func TestMSAttentionReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 2))
	b, s, din, n := 2, 6, 12, 3
	x := randT(rng, 1, b, s, din)
	const filter = -10000.0
	for _, c := range []struct {
		name      string
		hq, hv    int
		mask      *onnx.Tensor
		causal    bool
		scale     float32
		attnBias  *onnx.Tensor
		maskValue func(b, i, j int) float64
	}{
		{name: "nomask", hq: 12, hv: 12},
		{name: "lengths", hq: 12, hv: 12, mask: i32([]int{2}, 4, 6), maskValue: func(b, i, j int) float64 {
			if j >= []int{4, 6}[b] {
				return filter
			}
			return 0
		}},
		{name: "lengths+starts", hq: 12, hv: 12, mask: i32([]int{4}, 5, 6, 1, 2), maskValue: func(b, i, j int) float64 {
			if j >= []int{5, 6}[b] || j < []int{1, 2}[b] {
				return filter
			}
			return 0
		}},
		{name: "raw2d", hq: 12, hv: 12, mask: i32([]int{2, 6}, 1, 0, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1), maskValue: func(b, i, j int) float64 {
			if []int32{1, 0, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1}[b*6+j] == 0 {
				return filter
			}
			return 0
		}},
		{name: "causal+scale", hq: 12, hv: 12, causal: true, scale: 0.25, maskValue: func(b, i, j int) float64 {
			if j > i {
				return filter
			}
			return 0
		}},
		{name: "qkv_hidden_sizes", hq: 6, hv: 9},
	} {
		t.Run(c.name, func(t *testing.T) {
			total := 2*c.hq + c.hv
			w, bias := randT(rng, 0.4, din, total), randT(rng, 0.2, total)
			attrs := []*onnxpb.AttributeProto{aInt("num_heads", int64(n))}
			if c.hq*3 != total {
				attrs = append(attrs, aInts("qkv_hidden_sizes", int64(c.hq), int64(c.hq), int64(c.hv)))
			}
			if c.causal {
				attrs = append(attrs, aInt("unidirectional", 1))
			}
			scale := 1 / math.Sqrt(float64(c.hq/n))
			if c.scale != 0 {
				attrs = append(attrs, aFloat("scale", c.scale))
				scale = float64(c.scale)
			}
			in := []*onnx.Tensor{x, w, bias}
			if c.mask != nil {
				in = append(in, c.mask)
			}
			out, err := msAttention(msNode("Attention", len(in), attrs...), in)
			if err != nil {
				t.Fatal(err)
			}
			xd, wd, bd := x.Floats(), w.Floats(), bias.Floats()
			q := project(xd, wd, bd, b*s, din, total, 0, c.hq)
			k := project(xd, wd, bd, b*s, din, total, c.hq, c.hq)
			v := project(xd, wd, bd, b*s, din, total, 2*c.hq, c.hv)
			mv := c.maskValue
			if mv == nil {
				mv = func(int, int, int) float64 { return 0 }
			}
			want := refAttention(q, k, v, b, s, s, n, c.hq/n, c.hv/n, scale, mv)
			if got := out[0].Shape; len(got) != 3 || got[2] != c.hv {
				t.Fatalf("shape %v", got)
			}
			near(t, c.name, out[0].Floats(), want, 2e-5)
		})
	}
}

func TestMSMultiHeadAttentionReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 1))
	b, s, l, n, d := 2, 4, 5, 2, 8
	q, k, v := randT(rng, 1, b, s, d), randT(rng, 1, b, l, d), randT(rng, 1, b, l, 2*d)
	bias := randT(rng, 0.3, 4*d)
	kpm := i32([]int{b, l}, 1, 1, 0, 1, 1, 1, 1, 1, 1, 0)
	out, err := multiHeadAttention(msNode("MultiHeadAttention", 5, aInt("num_heads", int64(n))), []*onnx.Tensor{q, k, v, bias, kpm})
	if err != nil {
		t.Fatal(err)
	}
	addBias := func(x *onnx.Tensor, off int) []float32 {
		r := append([]float32(nil), x.Floats()...)
		w := x.Shape[2]
		for i := range r {
			r[i] += bias.Floats()[off+i%w]
		}
		return r
	}
	want := refAttention(addBias(q, 0), addBias(k, d), addBias(v, 2*d), b, s, l, n, d/n, 2*d/n, 1/math.Sqrt(float64(d/n)), func(bi, i, j int) float64 {
		if kpm.Data.([]int32)[bi*l+j] == 0 {
			return -10000
		}
		return 0
	})
	near(t, "MultiHeadAttention", out[0].Floats(), want, 2e-5)
}

func TestMSNormAndGeluReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	h := 10
	x, skip := randT(rng, 2, 3, 4, h), randT(rng, 1, 1, 4, h) // skip broadcast over the batch
	gamma, beta, bias := randT(rng, 1, h), randT(rng, 1, h), randT(rng, 1, h)
	out, err := skipLayerNorm(msNode("SkipLayerNormalization", 5, aFloat("epsilon", 1e-5)), []*onnx.Tensor{x, skip, gamma, beta, bias})
	if err != nil {
		t.Fatal(err)
	}
	want, sum := make([]float64, x.Len()), make([]float64, x.Len())
	for r := 0; r < x.Len()/h; r++ {
		var mean, vr float64
		for i := 0; i < h; i++ {
			v := float64(x.Floats()[r*h+i]) + float64(skip.Floats()[(r%4)*h+i]) + float64(bias.Floats()[i])
			sum[r*h+i] = v
			mean += v / float64(h)
		}
		for i := 0; i < h; i++ {
			vr += (sum[r*h+i] - mean) * (sum[r*h+i] - mean) / float64(h)
		}
		for i := 0; i < h; i++ {
			want[r*h+i] = (sum[r*h+i]-mean)/math.Sqrt(vr+1e-5)*float64(gamma.Floats()[i]) + float64(beta.Floats()[i])
		}
	}
	near(t, "SkipLayerNormalization", out[0].Floats(), want, 1e-5)
	near(t, "SkipLayerNormalization sum", out[3].Floats(), sum, 1e-6)

	gb := randT(rng, 1, h)
	for _, c := range []struct {
		name string
		k    Kernel
		in   []*onnx.Tensor
		f    func(x float64) float64
		bias bool
	}{
		{"Gelu", msGelu, []*onnx.Tensor{x}, func(v float64) float64 { return v * 0.5 * math.Erfc(-v/math.Sqrt2) }, false},
		{"BiasGelu", biasGelu, []*onnx.Tensor{x, gb}, func(v float64) float64 { return v * 0.5 * math.Erfc(-v/math.Sqrt2) }, true},
		{"FastGelu", fastGelu, []*onnx.Tensor{x, gb}, func(v float64) float64 {
			return v / (1 + math.Exp(-2*math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v))) // 0.5(1+tanh z) = σ(2z)
		}, true},
	} {
		got, err := c.k(msNode(c.name, len(c.in)), c.in)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]float64, x.Len())
		for i, v := range x.Floats() {
			a := float64(v)
			if c.bias {
				a += float64(gb.Floats()[i%h])
			}
			want[i] = c.f(a)
		}
		near(t, c.name, got[0].Floats(), want, 1e-6)
	}
}

func TestMSEmbedLayerNormReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	h := 6
	word, pos, seg := randT(rng, 1, 7, h), randT(rng, 1, 4, h), randT(rng, 1, 2, h)
	gamma, beta := randT(rng, 1, h), randT(rng, 1, h)
	ids, segs := i32([]int{2, 3}, 6, 0, 3, 2, 2, 5), i32([]int{2, 3}, 0, 1, 1, 0, 0, 1)
	mask := i32([]int{2, 3}, 1, 1, 0, 1, 0, 0)
	posIDs := i32([]int{1, 3}, 3, 1, 0)
	out, err := embedLayerNorm(msNode("EmbedLayerNormalization", 9), []*onnx.Tensor{ids, segs, word, pos, seg, gamma, beta, mask, posIDs})
	if err != nil {
		t.Fatal(err)
	}
	want := make([]float64, 2*3*h)
	for i := 0; i < 6; i++ {
		e := make([]float64, h)
		var mean, vr float64
		for j := range e {
			e[j] = float64(word.Floats()[int(ids.Data.([]int32)[i])*h+j]) + float64(pos.Floats()[int(posIDs.Data.([]int32)[i%3])*h+j]) + float64(seg.Floats()[int(segs.Data.([]int32)[i])*h+j])
			mean += e[j] / float64(h)
		}
		for j := range e {
			vr += (e[j] - mean) * (e[j] - mean) / float64(h)
		}
		for j := range e {
			want[i*h+j] = (e[j]-mean)/math.Sqrt(vr+1e-12)*float64(gamma.Floats()[j]) + float64(beta.Floats()[j])
		}
	}
	near(t, "EmbedLayerNormalization", out[0].Floats(), want, 1e-5)
	if mi := out[1].Data.([]int32); mi[0] != 2 || mi[1] != 1 {
		t.Errorf("mask_index = %v, want [2 1]", mi)
	}
}

func TestMSFusedMatMulReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	a, b := randT(rng, 1, 2, 1, 5, 3), randT(rng, 1, 4, 4, 5) // op(A) = Aᵀ [3×5], op(B) = Bᵀ [5×4]
	out, err := fusedMatMul(msNode("FusedMatMul", 2, aInt("transA", 1), aInt("transB", 1), aFloat("alpha", -0.5)), []*onnx.Tensor{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if sh := out[0].Shape; len(sh) != 4 || sh[0] != 2 || sh[1] != 4 || sh[2] != 3 || sh[3] != 4 {
		t.Fatalf("shape %v, want [2 4 3 4]", sh)
	}
	want := make([]float64, 2*4*3*4)
	for b0 := 0; b0 < 2; b0++ {
		for b1 := 0; b1 < 4; b1++ {
			for i := 0; i < 3; i++ {
				for j := 0; j < 4; j++ {
					var acc float64
					for p := 0; p < 5; p++ {
						acc += float64(a.Floats()[b0*15+p*3+i]) * float64(b.Floats()[b1*20+j*5+p])
					}
					want[((b0*4+b1)*3+i)*4+j] = -0.5 * acc
				}
			}
		}
	}
	near(t, "FusedMatMul", out[0].Floats(), want, 1e-6)
}

// TestMSBadInputs checks that malformed inputs give errors naming the
// problem, never panics.
func TestMSBadInputs(t *testing.T) {
	f := func(shape ...int) *onnx.Tensor { return onnx.NewFloat(shape, make([]float32, onnx.NumElements(shape))) }
	for _, c := range []struct {
		name string
		k    Kernel
		ctx  *Context
		in   []*onnx.Tensor
		msg  string
	}{
		{"Attention/no heads", msAttention, msNode("Attention", 3), []*onnx.Tensor{f(1, 2, 4), f(4, 12), f(12)}, "num_heads"},
		{"Attention/weights", msAttention, msNode("Attention", 3, aInt("num_heads", 2)), []*onnx.Tensor{f(1, 2, 4), f(5, 12), f(12)}, "weights"},
		{"Attention/mask", msAttention, msNode("Attention", 4, aInt("num_heads", 2)), []*onnx.Tensor{f(1, 2, 4), f(4, 12), f(12), i32([]int{3}, 1, 1, 1)}, "mask"},
		{"Attention/heads", msAttention, msNode("Attention", 3, aInt("num_heads", 5)), []*onnx.Tensor{f(1, 2, 4), f(4, 12), f(12)}, "heads"},
		{"Attention/past", msAttention, msNode("Attention", 5, aInt("num_heads", 2)), []*onnx.Tensor{f(1, 2, 4), f(4, 12), f(12), nil, f(2, 1, 2, 1, 2)}, "past"},
		{"MHA/shapes", multiHeadAttention, msNode("MultiHeadAttention", 3, aInt("num_heads", 2)), []*onnx.Tensor{f(1, 2, 4), f(1, 3, 6), f(1, 3, 4)}, "heads"},
		{"MHA/packedKV bias", multiHeadAttention, msNode("MultiHeadAttention", 4, aInt("num_heads", 2)), []*onnx.Tensor{f(1, 2, 4), f(1, 3, 2, 2, 2), nil, f(5)}, "bias"},
		{"MHA/4-D bias", multiHeadAttention, msNode("MultiHeadAttention", 4, aInt("num_heads", 2)), []*onnx.Tensor{f(1, 2, 4), f(1, 2, 3, 2), f(1, 2, 3, 2), f(3)}, "bias"},
		{"SkipLN/gamma", skipLayerNorm, msNode("SkipLayerNormalization", 3), []*onnx.Tensor{f(1, 2, 4), f(1, 2, 4), f(3)}, "gamma"},
		{"SkipLN/skip", skipLayerNorm, msNode("SkipLayerNormalization", 3), []*onnx.Tensor{f(1, 2, 4), f(3, 4), f(4)}, "skip"},
		{"EmbedLN/ids", embedLayerNorm, msNode("EmbedLayerNormalization", 7), []*onnx.Tensor{i32([]int{1, 2}, 0, 9), nil, f(3, 4), f(4, 4), nil, f(4), f(4)}, "out of range"},
		{"BiasGelu/bias", biasGelu, msNode("BiasGelu", 2), []*onnx.Tensor{f(2, 3), f(2)}, "bias"},
		{"FusedMatMul/inner", fusedMatMul, msNode("FusedMatMul", 2), []*onnx.Tensor{f(2, 3), f(2, 3)}, "inner"},
		{"FusedMatMul/transBatch", fusedMatMul, msNode("FusedMatMul", 2, aInt("transBatchA", 1)), []*onnx.Tensor{f(2, 3), f(3, 3)}, "transBatch"},
	} {
		_, err := c.k(c.ctx, c.in)
		if err == nil || !strings.Contains(err.Error(), c.msg) || !strings.HasPrefix(err.Error(), "kernels: ") {
			t.Errorf("%s: error %v, want one mentioning %q", c.name, err, c.msg)
		}
	}
}

// TestMSNoPanic feeds every com.microsoft kernel random shapes, types,
// absent inputs and attributes: each call must return a result or an
// error, never panic.
func TestMSNoPanic(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 13))
	// Kept apart from TestKernelsRandomInputsNoPanic's generator in
	// kernels_test.go: other package (ops_test), other dtype mix.
	tensor := func() *onnx.Tensor {
		if rng.IntN(8) == 0 {
			return nil
		}
		shape := make([]int, rng.IntN(6))
		for i := range shape {
			shape[i] = rng.IntN(5)
		}
		n := onnx.NumElements(shape)
		switch rng.IntN(4) {
		case 0:
			d := make([]int32, n)
			for i := range d {
				d[i] = int32(rng.IntN(9) - 2)
			}
			return &onnx.Tensor{DType: onnx.Int32, Shape: shape, Data: d}
		case 1:
			d := make([]int64, n)
			for i := range d {
				d[i] = int64(rng.IntN(9) - 2)
			}
			return onnx.NewInt64(shape, d)
		default:
			return randT(rng, 1, shape...)
		}
	}
	attrs := func() []*onnxpb.AttributeProto {
		var a []*onnxpb.AttributeProto
		for _, name := range []string{"num_heads", "unidirectional", "transA", "transB", "transBatchA"} {
			if rng.IntN(2) == 0 {
				a = append(a, aInt(name, int64(rng.IntN(6)-1)))
			}
		}
		if rng.IntN(3) == 0 {
			a = append(a, aInts("qkv_hidden_sizes", int64(rng.IntN(9)-1), int64(rng.IntN(9)-1), int64(rng.IntN(9)-1)))
		}
		if rng.IntN(3) == 0 {
			a = append(a, aFloat("scale", float32(rng.NormFloat64())))
		}
		return a
	}
	kernels := map[string]Kernel{
		"Attention": msAttention, "MultiHeadAttention": multiHeadAttention, "SkipLayerNormalization": skipLayerNorm,
		"EmbedLayerNormalization": embedLayerNorm, "Gelu": msGelu, "BiasGelu": biasGelu, "FastGelu": fastGelu, "FusedMatMul": fusedMatMul,
	}
	for _, name := range []string{"Attention", "MultiHeadAttention", "SkipLayerNormalization", "EmbedLayerNormalization", "Gelu", "BiasGelu", "FastGelu", "FusedMatMul"} {
		k := kernels[name]
		for trial := 0; trial < 3000; trial++ {
			in := make([]*onnx.Tensor, rng.IntN(10))
			for i := range in {
				in[i] = tensor()
			}
			ctx := msNode(name, len(in), attrs()...)
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("%s: panic %v with inputs %v attributes %v", name, r, in, ctx.Node.Attribute)
					}
				}()
				if _, err := k(ctx, in); err != nil && strings.Contains(err.Error(), "internal error") {
					t.Fatalf("%s: %v with inputs %v attributes %v", name, err, in, ctx.Node.Attribute)
				}
			}()
		}
	}
}

// TestMSNoPanicNearValid perturbs well-formed Attention and
// MultiHeadAttention calls (one dimension off, odd mask forms and values)
// so that the deeper checks are exercised.
func TestMSNoPanicNearValid(t *testing.T) {
	rng := rand.New(rand.NewPCG(14, 15))
	dim := func(v int) int {
		if rng.IntN(6) == 0 {
			return max(0, v+rng.IntN(3)-1)
		}
		return v
	}
	mask := func(b, s, l int) *onnx.Tensor {
		var shape []int
		switch rng.IntN(6) {
		case 0:
			return nil
		case 1:
			shape = []int{dim(b)}
		case 2:
			shape = []int{dim(2 * b)}
		case 3:
			shape = []int{dim(b), dim(l)}
		case 4:
			shape = []int{dim(b), dim(s), dim(l)}
		default:
			shape = []int{dim(b), 1, dim(s), dim(l)}
		}
		d := make([]int32, onnx.NumElements(shape))
		for i := range d {
			d[i] = int32(rng.IntN(2*l+3) - l)
		}
		return &onnx.Tensor{DType: onnx.Int32, Shape: shape, Data: d}
	}
	for trial := 0; trial < 4000; trial++ {
		b, s, l, n, h := 1+rng.IntN(2), 1+rng.IntN(4), 1+rng.IntN(4), 1+rng.IntN(3), 1+rng.IntN(3)
		d := n * h
		var name string
		var k Kernel
		var in []*onnx.Tensor
		if rng.IntN(2) == 0 {
			name, k = "Attention", msAttention
			total := dim(3 * d)
			in = []*onnx.Tensor{randT(rng, 1, dim(b), dim(s), dim(d)), randT(rng, 1, dim(d), total), randT(rng, 1, dim(total)), mask(b, s, s)}
			if rng.IntN(3) == 0 {
				in = append(in, nil, randT(rng, 1, dim(b), dim(n), dim(s), dim(s)))
			}
		} else {
			name, k = "MultiHeadAttention", multiHeadAttention
			switch rng.IntN(4) {
			case 0:
				in = []*onnx.Tensor{randT(rng, 1, dim(b), dim(s), dim(n), dim(3), dim(h))}
			case 1:
				in = []*onnx.Tensor{randT(rng, 1, dim(b), dim(s), dim(d)), randT(rng, 1, dim(b), dim(l), dim(n), dim(2), dim(h))}
			case 2:
				in = []*onnx.Tensor{randT(rng, 1, dim(b), dim(s), dim(d)), randT(rng, 1, dim(b), dim(n), dim(l), dim(h)), randT(rng, 1, dim(b), dim(n), dim(l), dim(h))}
			default:
				in = []*onnx.Tensor{randT(rng, 1, dim(b), dim(s), dim(d)), randT(rng, 1, dim(b), dim(l), dim(d)), randT(rng, 1, dim(b), dim(l), dim(d))}
			}
			for len(in) < 3 {
				in = append(in, nil)
			}
			in = append(in, randT(rng, 1, dim(3*d)), mask(b, s, l))
			if rng.IntN(3) == 0 {
				in = append(in, randT(rng, 1, dim(b), dim(n), dim(s), dim(l)))
			}
		}
		attrs := []*onnxpb.AttributeProto{aInt("num_heads", int64(dim(n)))}
		if rng.IntN(3) == 0 {
			attrs = append(attrs, aInt("unidirectional", 1))
		}
		ctx := msNode(name, len(in), attrs...)
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("%s: panic %v with inputs %v", name, r, in)
				}
			}()
			if _, err := k(ctx, in); err != nil && strings.Contains(err.Error(), "internal error") {
				t.Fatalf("%s: %v with inputs %v", name, err, in)
			}
		}()
	}
}

// TestMSThreadedSameAsSerial checks that the row-parallel paths (large
// inputs) give the same bits as the serial ones verified above.
func TestMSThreadedSameAsSerial(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 17))
	h := 256
	x, skip := randT(rng, 1, 4, 64, h), randT(rng, 1, 4, 64, h)
	gamma, beta, bias := randT(rng, 1, h), randT(rng, 1, h), randT(rng, 1, h)
	for _, c := range []struct {
		name string
		k    Kernel
		in   []*onnx.Tensor
	}{
		{"BiasGelu", biasGelu, []*onnx.Tensor{x, bias}},
		{"FastGelu", fastGelu, []*onnx.Tensor{x}},
		{"SkipLayerNormalization", skipLayerNorm, []*onnx.Tensor{x, skip, gamma, beta, bias}},
	} {
		var outs [][]float32
		for _, threads := range []int{1, 3} {
			ctx := msNode(c.name, len(c.in))
			ctx.Threads = threads
			out, err := c.k(ctx, c.in)
			if err != nil {
				t.Fatal(err)
			}
			outs = append(outs, out[0].Floats())
		}
		for i := range outs[0] {
			if outs[0][i] != outs[1][i] {
				t.Fatalf("%s: element %d: serial %v, threaded %v", c.name, i, outs[0][i], outs[1][i])
			}
		}
	}
}
