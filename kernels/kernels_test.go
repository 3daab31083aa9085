package kernels_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/linearize/linearize/kernels"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// Semantics the onnx 1.12 conformance data does not cover (or covers only
// at one opset), each checked against a float64 reference computed here
// independently of the kernels, or against a closed form.

func kAttr(name string, v any) *onnxpb.AttributeProto {
	a := &onnxpb.AttributeProto{Name: &name}
	var typ onnxpb.AttributeProto_AttributeType
	switch x := v.(type) {
	case int:
		i := int64(x)
		a.I, typ = &i, onnxpb.AttributeProto_INT
	case float32:
		a.F, typ = &x, onnxpb.AttributeProto_FLOAT
	case []int64:
		a.Ints, typ = x, onnxpb.AttributeProto_INTS
	case string:
		a.S, typ = []byte(x), onnxpb.AttributeProto_STRING
	default:
		panic(fmt.Sprintf("kAttr: %T", v))
	}
	a.Type = &typ
	return a
}

func kNode(op string, nout int, attrs ...*onnxpb.AttributeProto) *onnxpb.NodeProto {
	n := &onnxpb.NodeProto{OpType: &op, Attribute: attrs}
	for i := range nout {
		n.Output = append(n.Output, fmt.Sprintf("y%d", i))
	}
	return n
}

func kRun(t *testing.T, n *onnxpb.NodeProto, opset int64, in ...*onnx.Tensor) []*onnx.Tensor {
	t.Helper()
	out, err := kTry(n, opset, in...)
	if err != nil {
		t.Fatalf("%s (opset %d): %v", n.GetOpType(), opset, err)
	}
	return out
}

func kTry(n *onnxpb.NodeProto, opset int64, in ...*onnx.Tensor) (out []*onnx.Tensor, err error) {
	k, err := kernels.Lookup("", n.GetOpType(), opset)
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

func kRand(rng *rand.Rand, shape ...int) *onnx.Tensor {
	d := make([]float32, onnx.NumElements(shape))
	for i := range d {
		d[i] = float32(rng.NormFloat64())
	}
	return onnx.NewFloat(shape, d)
}

func kF64(t *onnx.Tensor) []float64 {
	v, err := t.AsFloat64s()
	if err != nil {
		panic(err)
	}
	return v
}

func kClose(t *testing.T, what string, got *onnx.Tensor, shape []int, want []float64, rtol, atol float64) {
	t.Helper()
	if fmt.Sprint(got.Shape) != fmt.Sprint(shape) {
		t.Errorf("%s: shape %v, want %v", what, got.Shape, shape)
		return
	}
	g := kF64(got)
	if len(g) != len(want) {
		t.Errorf("%s: %d elements, want %d", what, len(g), len(want))
		return
	}
	for i := range want {
		if math.Abs(g[i]-want[i]) > atol+rtol*math.Abs(want[i]) || math.IsNaN(g[i]) != math.IsNaN(want[i]) {
			t.Errorf("%s: element %d = %g, want %g", what, i, g[i], want[i])
			return
		}
	}
}

// kIndex converts a flat index to coordinates of shape.
func kIndex(i int, shape []int) []int {
	c := make([]int, len(shape))
	for k := len(shape) - 1; k >= 0; k-- {
		c[k] = i % shape[k]
		i /= shape[k]
	}
	return c
}

func kFlat(c, shape []int) int {
	i := 0
	for k := range shape {
		i = i*shape[k] + c[k]
	}
	return i
}

func TestSoftmaxAxisSemantics(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	shape := []int{2, 3, 4}
	x := kRand(rng, shape...)
	xv := kF64(x)
	for _, opset := range []int64{11, 13} {
		for _, axis := range []int{-3, -1, 0, 1, 2, 99} { // 99: the default
			for _, op := range []string{"Softmax", "LogSoftmax"} {
				var attrs []*onnxpb.AttributeProto
				ax := axis
				if axis == 99 {
					ax = 1
					if opset >= 13 {
						ax = -1
					}
				} else {
					attrs = append(attrs, kAttr("axis", axis))
				}
				if ax < 0 {
					ax += 3
				}
				// Reference: elements i and j share a group when they agree on
				// every coordinate outside the normalised axes: before 13 the
				// axes ax..end, from 13 the axis ax alone.
				group := func(c []int) string {
					var key []int
					for k := range c {
						inside := k == ax || (opset < 13 && k >= ax)
						if !inside {
							key = append(key, c[k])
						}
					}
					return fmt.Sprint(key)
				}
				sums, maxes := map[string]float64{}, map[string]float64{}
				for i := range xv {
					g := group(kIndex(i, shape))
					if m, ok := maxes[g]; !ok || xv[i] > m {
						maxes[g] = xv[i]
					}
				}
				for i := range xv {
					g := group(kIndex(i, shape))
					sums[g] += math.Exp(xv[i] - maxes[g])
				}
				want := make([]float64, len(xv))
				for i := range xv {
					g := group(kIndex(i, shape))
					if op == "Softmax" {
						want[i] = math.Exp(xv[i]-maxes[g]) / sums[g]
					} else {
						want[i] = xv[i] - maxes[g] - math.Log(sums[g])
					}
				}
				out := kRun(t, kNode(op, 1, attrs...), opset, x)
				kClose(t, fmt.Sprintf("%s opset %d axis %d", op, opset, axis), out[0], shape, want, 1e-5, 1e-6)
			}
		}
	}
}

func TestReshapeZeroAndAllowzero(t *testing.T) {
	cases := []struct {
		in        []int
		spec      []int64
		allowzero int
		want      []int // nil: an error
	}{
		{[]int{2, 3, 4}, []int64{0, -1}, 0, []int{2, 12}},
		{[]int{2, 3, 4}, []int64{0, 0, 2, 2}, 0, []int{2, 3, 2, 2}},
		{[]int{2, 3, 4}, []int64{-1, 0}, 0, []int{8, 3}},
		{[]int{0, 3}, []int64{3, 0}, 1, []int{3, 0}},
		{[]int{0, 3}, []int64{0, 3}, 0, []int{0, 3}},
		{[]int{2, 3}, []int64{0, 3}, 1, nil},    // 0 is a real zero: 0 ≠ 6 elements
		{[]int{0, 3}, []int64{0, -1}, 1, nil},   // -1 beside a real 0 is ambiguous
		{[]int{2, 3}, []int64{-1, -1}, 0, nil},  // two -1
		{[]int{2, 3}, []int64{4, -1}, 0, nil},   // 6 not divisible by 4
		{[]int{2, 3}, []int64{0, 0, 0}, 0, nil}, // copies a dimension the input lacks
		{[]int{2, 3}, []int64{-2, 3}, 0, nil},   // negative other than -1
	}
	for _, c := range cases {
		x, _ := onnx.NewZeros(onnx.Float, c.in)
		spec := onnx.NewInt64([]int{len(c.spec)}, c.spec)
		out, err := kTry(kNode("Reshape", 1, kAttr("allowzero", c.allowzero)), 14, x, spec)
		name := fmt.Sprintf("Reshape %v to %v allowzero=%d", c.in, c.spec, c.allowzero)
		if c.want == nil {
			if err == nil || strings.Contains(err.Error(), "PANIC") {
				t.Errorf("%s: want an error, got %v %v", name, out, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if fmt.Sprint(out[0].Shape) != fmt.Sprint(c.want) {
			t.Errorf("%s: shape %v, want %v", name, out[0].Shape, c.want)
		}
	}
}

// kEinsumRef evaluates an explicit einsum equation (no ellipsis) by brute
// force over all label assignments, in float64.
func kEinsumRef(eq string, in []*onnx.Tensor) ([]int, []float64) {
	lhs, rhs, _ := strings.Cut(eq, "->")
	terms := strings.Split(lhs, ",")
	size := map[byte]int{}
	var labels []byte
	for i, term := range terms {
		for k := range len(term) {
			if _, ok := size[term[k]]; !ok {
				labels = append(labels, term[k])
			}
			size[term[k]] = in[i].Shape[k]
		}
	}
	shape := make([]int, len(rhs))
	for k := range len(rhs) {
		shape[k] = size[rhs[k]]
	}
	out := make([]float64, onnx.NumElements(shape))
	vals := make([][]float64, len(in))
	for i, t := range in {
		vals[i] = kF64(t)
	}
	assign := map[byte]int{}
	var rec func(int)
	rec = func(li int) {
		if li == len(labels) {
			p := 1.0
			for i, term := range terms {
				c := make([]int, len(term))
				for k := range len(term) {
					c[k] = assign[term[k]]
				}
				p *= vals[i][kFlat(c, in[i].Shape)]
			}
			c := make([]int, len(rhs))
			for k := range len(rhs) {
				c[k] = assign[rhs[k]]
			}
			out[kFlat(c, shape)] += p
			return
		}
		for v := range size[labels[li]] {
			assign[labels[li]] = v
			rec(li + 1)
		}
	}
	rec(0)
	return shape, out
}

func TestEinsumEquations(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	cases := []struct {
		eq     string
		shapes [][]int
	}{
		{"bhqd,bhkd->bhqk", [][]int{{2, 3, 5, 4}, {2, 3, 6, 4}}}, // attention scores (tf2onnx)
		{"bhqk,bhkd->bhqd", [][]int{{2, 3, 5, 6}, {2, 3, 6, 4}}}, // attention context
		{"abc,cd->abd", [][]int{{2, 5, 4}, {4, 3}}},              // dense layer
		{"bfnd,ndh->bfh", [][]int{{2, 5, 3, 4}, {3, 4, 6}}},      // attention output projection
		{"abc,cde->abde", [][]int{{2, 5, 4}, {4, 3, 2}}},         // QKV projection to heads
		{"bqhd,bkhd->bhqk", [][]int{{2, 5, 3, 4}, {2, 6, 3, 4}}}, // keras MultiHeadAttention
		{"bhqk,bkhd->bqhd", [][]int{{2, 3, 5, 6}, {2, 6, 3, 4}}},
		{"ij,jk->ik", [][]int{{3, 4}, {4, 5}}},
		{"ij->ji", [][]int{{3, 4}}},
		{"ii->i", [][]int{{4, 4}}},
		{"ij->", [][]int{{3, 4}}},
		{"i,i->", [][]int{{5}, {5}}},
		{"i,j->ij", [][]int{{3}, {4}}},
		{"bij,bjk,bkl->bil", [][]int{{2, 3, 4}, {2, 4, 2}, {2, 2, 3}}},
		{"ab,ab->ab", [][]int{{3, 4}, {3, 4}}},
		{"abc,ac->ab", [][]int{{2, 3, 4}, {2, 4}}},
	}
	for _, c := range cases {
		var in []*onnx.Tensor
		for _, s := range c.shapes {
			in = append(in, kRand(rng, s...))
		}
		shape, want := kEinsumRef(c.eq, in)
		out := kRun(t, kNode("Einsum", 1, kAttr("equation", c.eq)), 12, in...)
		kClose(t, "Einsum "+c.eq, out[0], shape, want, 1e-5, 1e-5)
	}
	// Implicit output: labels seen once, in alphabetical order.
	a, b := kRand(rng, 3, 4), kRand(rng, 4, 5)
	shape, want := kEinsumRef("ij,jk->ik", []*onnx.Tensor{a, b})
	out := kRun(t, kNode("Einsum", 1, kAttr("equation", "ij,jk")), 12, a, b)
	kClose(t, "Einsum ij,jk", out[0], shape, want, 1e-5, 1e-5)
	// Ellipsis with broadcasting batch dimensions.
	a, b = kRand(rng, 2, 1, 3, 4), kRand(rng, 5, 4, 2)
	out = kRun(t, kNode("Einsum", 1, kAttr("equation", "...ij,...jk->...ik")), 12, a, b)
	av, bv := kF64(a), kF64(b)
	wantE := make([]float64, 2*5*3*2)
	for p := range 2 {
		for q := range 5 {
			for i := range 3 {
				for k := range 2 {
					for j := range 4 {
						wantE[((p*5+q)*3+i)*2+k] += av[(p*3+i)*4+j] * bv[(q*4+j)*2+k]
					}
				}
			}
		}
	}
	kClose(t, "Einsum ...ij,...jk->...ik", out[0], []int{2, 5, 3, 2}, wantE, 1e-5, 1e-5)
	for _, bad := range []string{"ij,jk->il", "ij->ii", "i1->i", "ij,j->"} {
		if _, err := kTry(kNode("Einsum", 1, kAttr("equation", bad)), 12, kRand(rng, 3, 4), kRand(rng, 4, 5)); err == nil || strings.Contains(err.Error(), "PANIC") {
			t.Errorf("Einsum %q: want an error, got %v", bad, err)
		}
	}
}

// kMatMulRef is numpy matmul in float64 for rank ≥ 2 operands.
func kMatMulRef(a, b *onnx.Tensor) ([]int, []float64) {
	as, bs := a.Shape, b.Shape
	m, k, n := as[len(as)-2], as[len(as)-1], bs[len(bs)-1]
	r := max(len(as), len(bs))
	batch := make([]int, r-2)
	for i := range batch {
		da, db := 1, 1
		if j := i - (r - len(as)); j >= 0 {
			da = as[j]
		}
		if j := i - (r - len(bs)); j >= 0 {
			db = bs[j]
		}
		batch[i] = max(da, db)
	}
	shape := append(append([]int{}, batch...), m, n)
	out := make([]float64, onnx.NumElements(shape))
	av, bv := kF64(a), kF64(b)
	for o := range out {
		c := kIndex(o, shape)
		pick := func(s []int, row, col int) int {
			cc := make([]int, len(s))
			for i := range len(s) - 2 {
				bi := c[i+r-len(s)]
				if s[i] == 1 {
					bi = 0
				}
				cc[i] = bi
			}
			cc[len(s)-2], cc[len(s)-1] = row, col
			return kFlat(cc, s)
		}
		i, j := c[r-2], c[r-1]
		for p := range k {
			out[o] += av[pick(as, i, p)] * bv[pick(bs, p, j)]
		}
	}
	return shape, out
}

func TestMatMulBroadcastAndVectors(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	cases := [][2][]int{
		{{3, 4}, {4, 5}},
		{{2, 3, 4}, {4, 5}},            // shared weight: one folded GEMM
		{{2, 3, 4}, {2, 4, 5}},         // batched
		{{2, 1, 3, 4}, {3, 4, 2}},      // broadcast batch
		{{1, 3, 4}, {2, 4, 5}},         // a broadcast over b's batch
		{{2, 3, 0}, {0, 5}},            // empty contraction: zeros
		{{2, 2, 3, 64}, {2, 2, 64, 3}}, // attention-like
	}
	for _, c := range cases {
		a, b := kRand(rng, c[0]...), kRand(rng, c[1]...)
		shape, want := kMatMulRef(a, b)
		out := kRun(t, kNode("MatMul", 1), 13, a, b)
		kClose(t, fmt.Sprintf("MatMul %v×%v", c[0], c[1]), out[0], shape, want, 1e-5, 1e-5)
	}
	// 1-D operands: promoted, then the added dimension removed.
	v, m := kRand(rng, 4), kRand(rng, 2, 4, 3)
	// The reference computes [1 4]×[2 4 3] = [2 1 3]; ONNX drops the
	// prepended 1, so the op's shape is [2 3] with the same values.
	_, want := kMatMulRef(onnx.NewFloat([]int{1, 4}, v.Floats()), m)
	out := kRun(t, kNode("MatMul", 1), 13, v, m)
	kClose(t, "MatMul [4]×[2 4 3]", out[0], []int{2, 3}, want, 1e-5, 1e-5)
	w := kRand(rng, 3)
	_, want = kMatMulRef(m, onnx.NewFloat([]int{3, 1}, w.Floats()))
	out = kRun(t, kNode("MatMul", 1), 13, m, w)
	kClose(t, "MatMul [2 4 3]×[3]", out[0], []int{2, 4}, want, 1e-5, 1e-5)
	out = kRun(t, kNode("MatMul", 1), 13, w, w)
	dot := 0.0
	for _, x := range kF64(w) {
		dot += x * x
	}
	kClose(t, "MatMul [3]×[3]", out[0], []int{}, []float64{dot}, 1e-5, 1e-6)
	if _, err := kTry(kNode("MatMul", 1), 13, kRand(rng, 2, 3), kRand(rng, 4, 5)); err == nil || strings.Contains(err.Error(), "PANIC") {
		t.Errorf("MatMul [2 3]×[4 5]: want an error, got %v", err)
	}
}

func TestGemmAttributes(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const m, k, n = 3, 4, 5
	for _, ta := range []int{0, 1} {
		for _, tb := range []int{0, 1} {
			for _, cshape := range [][]int{nil, {n}, {1}, {m, 1}, {m, n}} {
				as, bs := []int{m, k}, []int{k, n}
				if ta == 1 {
					as = []int{k, m}
				}
				if tb == 1 {
					bs = []int{n, k}
				}
				a, b := kRand(rng, as...), kRand(rng, bs...)
				in := []*onnx.Tensor{a, b}
				var c *onnx.Tensor
				if cshape != nil {
					c = kRand(rng, cshape...)
					in = append(in, c)
				}
				alpha, beta := float32(0.5), float32(2)
				av, bv := kF64(a), kF64(b)
				want := make([]float64, m*n)
				for i := range m {
					for j := range n {
						s := 0.0
						for p := range k {
							x, y := av[i*k+p], bv[p*n+j]
							if ta == 1 {
								x = av[p*m+i]
							}
							if tb == 1 {
								y = bv[j*k+p]
							}
							s += x * y
						}
						want[i*n+j] = float64(alpha) * s
						if c != nil {
							cv := kF64(c)
							ci := 0
							switch len(cshape) {
							case 1:
								if cshape[0] == n {
									ci = j
								}
							case 2:
								ci = i*cshape[1] + min(j, cshape[1]-1)
							}
							want[i*n+j] += float64(beta) * cv[ci]
						}
					}
				}
				before := fmt.Sprint(kF64(a))
				out := kRun(t, kNode("Gemm", 1, kAttr("transA", ta), kAttr("transB", tb), kAttr("alpha", alpha), kAttr("beta", beta)), 13, in...)
				kClose(t, fmt.Sprintf("Gemm transA=%d transB=%d C%v", ta, tb, cshape), out[0], []int{m, n}, want, 1e-5, 1e-5)
				if fmt.Sprint(kF64(a)) != before {
					t.Errorf("Gemm modified its input")
				}
			}
		}
	}
}

func TestLayerNormalizationAxes(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, shape := range [][]int{{2, 3, 8}, {2, 1024, 16}} { // the second splits rows over threads
		for _, opset := range []int64{11, 17} { // 11: onnxruntime's default-domain extension
			for _, axis := range []int{-1, 1} {
				for _, withBias := range []bool{false, true} {
					x := kRand(rng, shape...)
					ax := axis
					if ax < 0 {
						ax += 3
					}
					norm := shape[ax:]
					scale := kRand(rng, norm...)
					in := []*onnx.Tensor{x, scale}
					var bias *onnx.Tensor
					if withBias {
						bias = kRand(rng, norm...)
						in = append(in, bias)
					}
					eps := float32(1e-3)
					rows, d := onnx.NumElements(shape[:ax]), onnx.NumElements(norm)
					xv, sv := kF64(x), kF64(scale)
					var bv []float64
					if bias != nil {
						bv = kF64(bias)
					}
					want := make([]float64, len(xv))
					means, invs := make([]float64, rows), make([]float64, rows)
					for r := range rows {
						mu := 0.0
						for j := range d {
							mu += xv[r*d+j]
						}
						mu /= float64(d)
						v := 0.0
						for j := range d {
							v += (xv[r*d+j] - mu) * (xv[r*d+j] - mu)
						}
						inv := 1 / math.Sqrt(v/float64(d)+float64(eps))
						means[r], invs[r] = mu, inv
						for j := range d {
							want[r*d+j] = (xv[r*d+j] - mu) * inv * sv[j]
							if bias != nil {
								want[r*d+j] += bv[j]
							}
						}
					}
					out := kRun(t, kNode("LayerNormalization", 3, kAttr("axis", axis), kAttr("epsilon", eps)), opset, in...)
					name := fmt.Sprintf("LayerNormalization %v opset %d axis %d bias %v", shape, opset, axis, withBias)
					kClose(t, name, out[0], shape, want, 1e-5, 1e-5)
					stat := append(append([]int{}, shape[:ax]...), make([]int, 3-ax)...)
					for i := ax; i < 3; i++ {
						stat[i] = 1
					}
					kClose(t, name+" Mean", out[1], stat, means, 1e-5, 1e-6)
					kClose(t, name+" InvStdDev", out[2], stat, invs, 1e-5, 1e-6)
				}
			}
		}
	}
}

func TestGeluForms(t *testing.T) {
	xs := []float32{-6, -3, -1, -0.5, 0, 0.25, 1, 2, 5}
	x := onnx.NewFloat([]int{len(xs)}, xs)
	exact := make([]float64, len(xs))
	approx := make([]float64, len(xs))
	for i, v := range xs {
		f := float64(v)
		// Φ(x) from the complementary error function, a different route
		// than the kernel's erf.
		exact[i] = f * 0.5 * math.Erfc(-f/math.Sqrt2)
		approx[i] = 0.5 * f * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(f+0.044715*f*f*f)))
	}
	out := kRun(t, kNode("Gelu", 1), 20, x)
	kClose(t, "Gelu", out[0], []int{len(xs)}, exact, 1e-6, 1e-7)
	out = kRun(t, kNode("Gelu", 1, kAttr("approximate", "tanh")), 20, x)
	kClose(t, "Gelu tanh", out[0], []int{len(xs)}, approx, 1e-6, 1e-7)
	if _, err := kTry(kNode("Gelu", 1, kAttr("approximate", "fast")), 20, x); err == nil {
		t.Errorf("Gelu approximate=fast: want an error")
	}
	if _, err := kernels.Lookup("", "Gelu", 19); err == nil {
		t.Errorf("Gelu claimed at opset 19, where it does not exist")
	}
}

// kSliceRef is Python slicing x[start:end:step] along one axis of a 1-D
// range, with ONNX clamping.
func kSliceRef(d int, start, end, step int64) []int {
	var idx []int
	s, e := start, end
	if s < 0 {
		s += int64(d)
	}
	if e < 0 {
		e += int64(d)
	}
	if step > 0 {
		s, e = min(max(s, 0), int64(d)), min(max(e, 0), int64(d))
		for i := s; i < e; i += step {
			idx = append(idx, int(i))
		}
	} else {
		s, e = min(max(s, 0), int64(d)-1), min(max(e, -1), int64(d)-1)
		for i := s; i > e; i += step {
			idx = append(idx, int(i))
		}
	}
	return idx
}

func TestSliceForms(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	shape := []int{4, 7}
	x := kRand(rng, shape...)
	xv := kF64(x)
	cases := []struct{ start, end, step int64 }{
		{1, 5, 1}, {-3, 100, 1}, {0, -1, 2}, {6, 0, -1}, {-1, -100, -2},
		{100, -100, -3}, {5, 2, 1}, {math.MinInt64 + 1, math.MaxInt64, 3}, {math.MaxInt64, math.MinInt64, -1},
	}
	for _, c := range cases {
		idx := kSliceRef(7, c.start, c.end, c.step)
		want := []float64{}
		for r := range 4 {
			for _, j := range idx {
				want = append(want, xv[r*7+j])
			}
		}
		wshape := []int{4, len(idx)}
		i64 := func(v int64) *onnx.Tensor { return onnx.NewInt64([]int{1}, []int64{v}) }
		out := kRun(t, kNode("Slice", 1), 13, x, i64(c.start), i64(c.end), i64(1), i64(c.step))
		kClose(t, fmt.Sprintf("Slice axis 1 %d:%d:%d", c.start, c.end, c.step), out[0], wshape, want, 0, 0)
		if c.step == 1 && c.start > math.MinInt32 && c.end < math.MaxInt32 {
			// The attribute form (opset < 10) has no steps.
			out = kRun(t, kNode("Slice", 1, kAttr("starts", []int64{c.start}), kAttr("ends", []int64{c.end}), kAttr("axes", []int64{1})), 9, x)
			kClose(t, fmt.Sprintf("Slice-1 axis 1 %d:%d", c.start, c.end), out[0], wshape, want, 0, 0)
		}
	}
	if _, err := kTry(kNode("Slice", 1), 13, x, onnx.NewInt64([]int{1}, []int64{0}), onnx.NewInt64([]int{1}, []int64{2}), onnx.NewInt64([]int{1}, []int64{0}), onnx.NewInt64([]int{1}, []int64{0})); err == nil {
		t.Errorf("Slice with step 0: want an error")
	}
}

func TestSplitForms(t *testing.T) {
	x := onnx.NewFloat([]int{7}, []float32{0, 1, 2, 3, 4, 5, 6})
	check := func(name string, out []*onnx.Tensor, sizes []int) {
		t.Helper()
		if len(out) != len(sizes) {
			t.Fatalf("%s: %d outputs, want %d", name, len(out), len(sizes))
		}
		at := 0
		for i, s := range sizes {
			want := make([]float64, s)
			for j := range want {
				want[j] = float64(at + j)
			}
			at += s
			kClose(t, fmt.Sprintf("%s output %d", name, i), out[i], []int{s}, want, 0, 0)
		}
	}
	// opset 18 num_outputs: ceil(7/3)=3 per chunk, the last smaller.
	check("Split-18 num_outputs=3", kRun(t, kNode("Split", 3, kAttr("num_outputs", 3)), 18, x), []int{3, 3, 1})
	check("Split-13 input", kRun(t, kNode("Split", 2), 13, x, onnx.NewInt64([]int{2}, []int64{2, 5})), []int{2, 5})
	check("Split-11 attribute", kRun(t, kNode("Split", 3, kAttr("split", []int64{1, 2, 4})), 11, x), []int{1, 2, 4})
	y := onnx.NewFloat([]int{6}, []float32{0, 1, 2, 3, 4, 5})
	check("Split-13 equal", kRun(t, kNode("Split", 3), 13, y), []int{2, 2, 2})
	if _, err := kTry(kNode("Split", 2), 13, x); err == nil {
		t.Errorf("Split of 7 into 2 equal parts: want an error")
	}
	if _, err := kTry(kNode("Split", 2), 13, x, onnx.NewInt64([]int{2}, []int64{2, 2})); err == nil {
		t.Errorf("Split sizes not summing to 7: want an error")
	}
}

func TestReduceAxesForms(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	shape := []int{2, 3, 4}
	x := kRand(rng, shape...)
	xv := kF64(x)
	ref := func(kind string, axes []int, keep bool) ([]int, []float64) {
		red := map[int]bool{}
		for _, a := range axes {
			red[(a+3)%3] = true
		}
		if len(axes) == 0 {
			red = map[int]bool{0: true, 1: true, 2: true}
		}
		var oshape []int
		for k, d := range shape {
			if !red[k] {
				oshape = append(oshape, d)
			} else if keep {
				oshape = append(oshape, 1)
			}
		}
		if oshape == nil {
			oshape = []int{}
		}
		acc := map[int][]float64{}
		for i, v := range xv {
			c := kIndex(i, shape)
			var oc []int
			for k := range c {
				if !red[k] {
					oc = append(oc, c[k])
				} else if keep {
					oc = append(oc, 0)
				}
			}
			o := kFlat(oc, oshape)
			acc[o] = append(acc[o], v)
		}
		out := make([]float64, onnx.NumElements(oshape))
		for o, vs := range acc {
			switch kind {
			case "ReduceSum":
				for _, v := range vs {
					out[o] += v
				}
			case "ReduceMean":
				for _, v := range vs {
					out[o] += v / float64(len(vs))
				}
			case "ReduceMax":
				out[o] = math.Inf(-1)
				for _, v := range vs {
					out[o] = math.Max(out[o], v)
				}
			case "ReduceProd":
				out[o] = 1
				for _, v := range vs {
					out[o] *= v
				}
			}
		}
		return oshape, out
	}
	for _, kind := range []string{"ReduceSum", "ReduceMean", "ReduceMax", "ReduceProd"} {
		inputFrom := int64(18)
		if kind == "ReduceSum" {
			inputFrom = 13
		}
		for _, axes := range [][]int{{1}, {-1}, {0, 2}, {0, 1, 2}, nil} {
			for _, keep := range []int{0, 1} {
				wshape, want := ref(kind, axes, keep == 1)
				ax := make([]int64, len(axes))
				for i, a := range axes {
					ax[i] = int64(a)
				}
				name := fmt.Sprintf("%s axes %v keepdims %d", kind, axes, keep)
				// Attribute form, one opset before axes became an input.
				attrs := []*onnxpb.AttributeProto{kAttr("keepdims", keep)}
				if axes != nil {
					attrs = append(attrs, kAttr("axes", ax))
				}
				out := kRun(t, kNode(kind, 1, attrs...), inputFrom-1, x)
				kClose(t, name+" (attribute)", out[0], wshape, want, 1e-5, 1e-6)
				// Input form.
				in := []*onnx.Tensor{x}
				if axes != nil {
					in = append(in, onnx.NewInt64([]int{len(ax)}, ax))
				}
				out = kRun(t, kNode(kind, 1, kAttr("keepdims", keep)), inputFrom, in...)
				kClose(t, name+" (input)", out[0], wshape, want, 1e-5, 1e-6)
			}
		}
		// noop_with_empty_axes: identity when no axes are given.
		out := kRun(t, kNode(kind, 1, kAttr("noop_with_empty_axes", 1)), inputFrom, x, onnx.NewInt64([]int{0}, nil))
		kClose(t, kind+" noop_with_empty_axes", out[0], shape, xv, 0, 0)
	}
}

func TestSqueezeUnsqueezeForms(t *testing.T) {
	x, _ := onnx.NewZeros(onnx.Float, []int{1, 3, 1, 2})
	cases := []struct {
		op    string
		axes  []int64 // nil: absent
		shape []int
	}{
		{"Squeeze", nil, []int{3, 2}},
		{"Squeeze", []int64{0}, []int{3, 1, 2}},
		{"Squeeze", []int64{-2}, []int{1, 3, 2}},
		{"Unsqueeze", []int64{0}, []int{1, 1, 3, 1, 2}},
		{"Unsqueeze", []int64{-1, 1}, []int{1, 1, 3, 1, 2, 1}},
		{"Unsqueeze", []int64{5, 0}, []int{1, 1, 3, 1, 2, 1}},
	}
	for _, c := range cases {
		var attrs []*onnxpb.AttributeProto
		in := []*onnx.Tensor{x}
		if c.axes != nil {
			attrs = append(attrs, kAttr("axes", c.axes))
			in = append(in, onnx.NewInt64([]int{len(c.axes)}, c.axes))
		}
		for _, form := range []struct {
			opset int64
			node  *onnxpb.NodeProto
			in    []*onnx.Tensor
		}{{11, kNode(c.op, 1, attrs...), in[:1]}, {13, kNode(c.op, 1), in}} {
			out := kRun(t, form.node, form.opset, form.in...)
			if fmt.Sprint(out[0].Shape) != fmt.Sprint(c.shape) {
				t.Errorf("%s axes %v opset %d: shape %v, want %v", c.op, c.axes, form.opset, out[0].Shape, c.shape)
			}
		}
	}
	if _, err := kTry(kNode("Squeeze", 1), 13, x, onnx.NewInt64([]int{1}, []int64{1})); err == nil {
		t.Errorf("Squeeze of a dimension of size 3: want an error")
	}
}

func TestClipForms(t *testing.T) {
	x := onnx.NewFloat([]int{5}, []float32{-3, -1, 0, 1, 3})
	want := []float64{-2, -1, 0, 1, 2}
	out := kRun(t, kNode("Clip", 1, kAttr("min", float32(-2)), kAttr("max", float32(2))), 6, x)
	kClose(t, "Clip-6", out[0], []int{5}, want, 0, 0)
	lo, hi := onnx.NewFloat([]int{}, []float32{-2}), onnx.NewFloat([]int{}, []float32{2})
	out = kRun(t, kNode("Clip", 1), 13, x, lo, hi)
	kClose(t, "Clip-13", out[0], []int{5}, want, 0, 0)
	out = kRun(t, kNode("Clip", 1), 13, x, nil, hi)
	kClose(t, "Clip-13 max only", out[0], []int{5}, []float64{-3, -1, 0, 1, 2}, 0, 0)
}

// kBroadcastRef applies f over the numpy broadcast of a and b.
func kBroadcastRef(a, b *onnx.Tensor, f func(x, y float64) float64) ([]int, []float64) {
	r := max(len(a.Shape), len(b.Shape))
	dim := func(s []int, k int) int {
		if j := k - (r - len(s)); j >= 0 {
			return s[j]
		}
		return 1
	}
	shape := make([]int, r)
	for k := range r {
		shape[k] = dim(a.Shape, k)
		if shape[k] == 1 {
			shape[k] = dim(b.Shape, k)
		}
	}
	av, bv := kF64(a), kF64(b)
	out := make([]float64, onnx.NumElements(shape))
	pick := func(s []int, c []int) int {
		cc := make([]int, len(s))
		for j := range s {
			if s[j] != 1 {
				cc[j] = c[j+r-len(s)]
			}
		}
		return kFlat(cc, s)
	}
	for i := range out {
		c := kIndex(i, shape)
		out[i] = f(av[pick(a.Shape, c)], bv[pick(b.Shape, c)])
	}
	return shape, out
}

func TestBinaryBroadcasting(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	shapes := [][2][]int{
		{{2, 3, 4}, {2, 3, 4}}, {{2, 3, 4}, {4}}, {{2, 3, 4}, {}}, {{}, {2, 3}},
		{{2, 1, 4}, {3, 1}}, {{1, 3, 1}, {2, 1, 5}}, {{4, 1}, {1, 4}}, {{2, 3, 4}, {3, 1}},
		{{2, 0, 3}, {3}},
		{{8, 64, 300}, {64, 1}}, {{8, 64, 300}, {300}}, // large: split over threads
	}
	fs := map[string]func(x, y float64) float64{
		"Add": func(x, y float64) float64 { return x + y },
		"Sub": func(x, y float64) float64 { return x - y },
		"Mul": func(x, y float64) float64 { return x * y },
		"Div": func(x, y float64) float64 { return x / y },
		"Pow": func(x, y float64) float64 { return math.Pow(math.Abs(x), y) },
		"Max": math.Max,
		"Min": math.Min,
	}
	for op, f := range fs {
		for _, s := range shapes {
			a, b := kRand(rng, s[0]...), kRand(rng, s[1]...)
			if op == "Pow" {
				for i, v := range a.Floats() {
					a.Floats()[i] = float32(math.Abs(float64(v)))
				}
			}
			shape, want := kBroadcastRef(a, b, f)
			out := kRun(t, kNode(op, 1), 13, a, b)
			kClose(t, fmt.Sprintf("%s %v %v", op, s[0], s[1]), out[0], shape, want, 1e-6, 1e-6)
		}
	}
	if _, err := kTry(kNode("Add", 1), 13, kRand(rng, 2, 3), kRand(rng, 4)); err == nil {
		t.Errorf("Add [2 3]+[4]: want an error")
	}
	if _, err := kTry(kNode("Div", 1), 13, onnx.NewInt64([]int{2}, []int64{1, 2}), onnx.NewInt64([]int{2}, []int64{1, 0})); err == nil || strings.Contains(err.Error(), "PANIC") {
		t.Errorf("integer division by zero: want an error, got %v", err)
	}
	// Where broadcasts all three inputs.
	c := &onnx.Tensor{DType: onnx.Bool, Shape: []int{2, 1}, Data: []bool{true, false}}
	x, y := kRand(rng, 3), kRand(rng, 2, 3)
	out := kRun(t, kNode("Where", 1), 16, c, x, y)
	xv, yv := kF64(x), kF64(y)
	want := []float64{xv[0], xv[1], xv[2], yv[3], yv[4], yv[5]}
	kClose(t, "Where", out[0], []int{2, 3}, want, 0, 0)
}

func TestCastConversions(t *testing.T) {
	x := onnx.NewFloat([]int{6}, []float32{-2.7, -0.5, 0, 0.5, 65504, 1e-8})
	// float → int truncates toward zero; → bool is "nonzero".
	out := kRun(t, kNode("Cast", 1, kAttr("to", int(onnx.Int64))), 13, x)
	kClose(t, "Cast float→int64", out[0], []int{6}, []float64{-2, 0, 0, 0, 65504, 0}, 0, 0)
	out = kRun(t, kNode("Cast", 1, kAttr("to", int(onnx.Bool))), 13, x)
	if got := fmt.Sprint(out[0].Data); got != "[true true false true true true]" {
		t.Errorf("Cast float→bool = %s", got)
	}
	// float16: 65504 is the largest finite half; 1e-8 underflows to 0.
	out = kRun(t, kNode("Cast", 1, kAttr("to", int(onnx.Float16))), 13, x)
	back := kRun(t, kNode("Cast", 1, kAttr("to", int(onnx.Float))), 13, out[0])
	kClose(t, "Cast float→float16→float", back[0], []int{6}, []float64{-2.69921875, -0.5, 0, 0.5, 65504, 0}, 0, 0)
}

// TestKernelsRejectBadInputs calls every standard kernel with malformed
// inputs: each must return an error, never panic.
func TestKernelsRejectBadInputs(t *testing.T) {
	f := func(shape ...int) *onnx.Tensor {
		d := make([]float32, onnx.NumElements(shape))
		return onnx.NewFloat(shape, d)
	}
	i64 := func(v ...int64) *onnx.Tensor { return onnx.NewInt64([]int{len(v)}, v) }
	broken := &onnx.Tensor{DType: onnx.Float, Shape: []int{3}, Data: []float32{1}} // data shorter than shape
	inputs := [][]*onnx.Tensor{
		{},
		{nil},
		{broken},
		{f(2, 3), broken},
		{f(2, 3), f(4, 5)},
		{f(2, 3), i64(9, 9, 9)},
		{f(2, 3), i64(-7)},
		{f(), f()},
		{f(2, 3), i64(1), i64(99), i64(5), i64(1)},
		{onnx.NewInt64([]int{2}, []int64{1, 2}), f(2)},
	}
	for _, name := range kernels.Supported() {
		if !strings.HasPrefix(name, ":") {
			continue
		}
		op := name[1:]
		for _, opset := range []int64{11, 13, 18, 21} {
			if _, err := kernels.Lookup("", op, opset); err != nil {
				continue
			}
			for i, in := range inputs {
				attrs := []*onnxpb.AttributeProto{kAttr("axis", 5), kAttr("perm", []int64{3, 3}), kAttr("to", 999)}
				for _, n := range []*onnxpb.NodeProto{kNode(op, 2), kNode(op, 2, attrs...)} {
					if _, err := kTry(n, opset, in...); err != nil && strings.Contains(err.Error(), "PANIC") {
						t.Errorf("%s opset %d inputs %d (attrs %d): %v", op, opset, i, len(n.Attribute), err)
					}
				}
				// A context without a node (a kernel called directly).
				k, _ := kernels.Lookup("", op, opset)
				func() {
					defer func() {
						if r := recover(); r != nil {
							t.Errorf("%s opset %d inputs %d without a node: PANIC %v", op, opset, i, r)
						}
					}()
					k(&kernels.Context{Opset: opset}, in)
				}()
			}
		}
	}
}

// TestKernelsRandomInputsNoPanic feeds every standard kernel seeded random
// inputs (random ranks, sizes, types, attribute values and input counts);
// whatever they make of them, kernels must return a result or an error.
func TestKernelsRandomInputsNoPanic(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	tensor := func() *onnx.Tensor {
		r := rng.IntN(4)
		shape := make([]int, r)
		for i := range shape {
			shape[i] = rng.IntN(4)
		}
		n := onnx.NumElements(shape)
		switch rng.IntN(8) {
		case 4:
			d := make([]float64, n)
			for i := range d {
				d[i] = rng.NormFloat64()
			}
			return &onnx.Tensor{DType: onnx.Double, Shape: shape, Data: d}
		case 5:
			d := make([]int32, n)
			for i := range d {
				d[i] = int32(rng.IntN(9) - 4)
			}
			return &onnx.Tensor{DType: onnx.Int32, Shape: shape, Data: d}
		case 6:
			d := make([]uint16, n)
			for i := range d {
				d[i] = onnx.FloatToHalf(float32(rng.NormFloat64()))
			}
			return &onnx.Tensor{DType: onnx.Float16, Shape: shape, Data: d}
		case 7:
			d := make([]uint8, n)
			for i := range d {
				d[i] = uint8(rng.IntN(5))
			}
			return &onnx.Tensor{DType: onnx.Uint8, Shape: shape, Data: d}
		case 0:
			d := make([]int64, n)
			for i := range d {
				d[i] = int64(rng.IntN(9) - 4)
			}
			return onnx.NewInt64(shape, d)
		case 1:
			d := make([]bool, n)
			for i := range d {
				d[i] = rng.IntN(2) == 0
			}
			return &onnx.Tensor{DType: onnx.Bool, Shape: shape, Data: d}
		default:
			return kRand(rng, shape...)
		}
	}
	ints := func() []int64 {
		v := make([]int64, rng.IntN(4))
		for i := range v {
			v[i] = int64(rng.IntN(9) - 4)
		}
		return v
	}
	attrPool := func() []*onnxpb.AttributeProto {
		var a []*onnxpb.AttributeProto
		for _, name := range []string{"axis", "keepdims", "to", "k", "batch_dims", "num_outputs", "transA", "upper", "largest", "exclusive"} {
			if rng.IntN(3) == 0 {
				a = append(a, kAttr(name, rng.IntN(9)-4))
			}
		}
		for _, name := range []string{"axes", "perm", "split", "starts", "ends", "pads"} {
			if rng.IntN(4) == 0 {
				a = append(a, kAttr(name, ints()))
			}
		}
		if rng.IntN(4) == 0 {
			a = append(a, kAttr("equation", []string{"ij,jk->ik", "ii->i", "...i->i", "i,i", "ab->ba", "->"}[rng.IntN(6)]))
		}
		if rng.IntN(4) == 0 {
			a = append(a, kAttr("mode", []string{"constant", "reflect", "edge", "wrap"}[rng.IntN(4)]))
		}
		return a
	}
	for _, name := range kernels.Supported() {
		if !strings.HasPrefix(name, ":") {
			continue
		}
		op := name[1:]
		for range 300 {
			opset := []int64{9, 11, 13, 18, 21}[rng.IntN(5)]
			if _, err := kernels.Lookup("", op, opset); err != nil {
				continue
			}
			in := make([]*onnx.Tensor, rng.IntN(5))
			for i := range in {
				if rng.IntN(8) > 0 {
					in[i] = tensor()
				}
			}
			n := kNode(op, 1+rng.IntN(3), attrPool()...)
			if _, err := kTry(n, opset, in...); err != nil && strings.Contains(err.Error(), "PANIC") {
				t.Errorf("%s opset %d attrs %v inputs %v: %v", op, opset, n.Attribute, in, err)
			}
		}
	}
}

// TestKernelsRefuseHugeOutputs: shapes that would need more than
// kernels.MaxElements (2³¹) elements are errors, not allocations.
func TestKernelsRefuseHugeOutputs(t *testing.T) {
	big := int64(1) << 20
	f := onnx.NewFloat([]int{1}, []float32{1})
	cases := []struct {
		op string
		in []*onnx.Tensor
	}{
		{"Expand", []*onnx.Tensor{f, onnx.NewInt64([]int{3}, []int64{big, big, 4})}},
		{"ConstantOfShape", []*onnx.Tensor{onnx.NewInt64([]int{2}, []int64{big, big})}},
		{"Tile", []*onnx.Tensor{f, onnx.NewInt64([]int{1}, []int64{big * big})}},
		{"Range", []*onnx.Tensor{onnx.NewInt64([]int{}, []int64{0}), onnx.NewInt64([]int{}, []int64{big * big}), onnx.NewInt64([]int{}, []int64{1})}},
		{"Range", []*onnx.Tensor{onnx.NewFloat([]int{}, []float32{0}), onnx.NewFloat([]int{}, []float32{1}), onnx.NewFloat([]int{}, []float32{float32(math.NaN())})}},
	}
	for _, c := range cases {
		if out, err := kTry(kNode(c.op, 1), 13, c.in...); err == nil || strings.Contains(err.Error(), "PANIC") {
			t.Errorf("%s %v: want an error, got %v %v", c.op, c.in, out, err)
		}
	}
	// Broadcasting two large vectors against each other.
	a, _ := onnx.NewZeros(onnx.Float, []int{1 << 16, 1})
	b, _ := onnx.NewZeros(onnx.Float, []int{1, 1 << 16})
	if _, err := kTry(kNode("Add", 1), 13, a, b); err == nil {
		t.Errorf("Add [65536 1] + [1 65536]: want an error")
	}
}
