package ops_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/linearize/linearize/kernels"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

type linCase struct {
	name       string
	b, h, s, d int
	dv, k, n   int
	perHead    bool
	shareKV    bool   // F is the same tensor (and graph input) as E
	bias       string // "none", "pad", "inf"
	sigma      float64
}

func linCases() []linCase {
	var cs []linCase
	for _, perHead := range []bool{false, true} {
		for _, shareKV := range []bool{false, true} {
			for _, bias := range []string{"none", "pad", "inf"} {
				for _, n := range []int{7, 12} { // S = N and S < N
					c := linCase{b: 2, h: 3, s: 7, d: 8, dv: 5, k: 4, n: n, perHead: perHead, shareKV: shareKV, bias: bias, sigma: 1}
					c.name = fmt.Sprintf("perhead=%v/kv=%v/bias=%s/N=%d", perHead, shareKV, bias, n)
					cs = append(cs, c)
				}
			}
		}
	}
	return cs
}

func (c linCase) inputs(seed uint64) (q, k, v, e, f, bias *onnx.Tensor) {
	rng := rand.New(rand.NewPCG(seed, 11))
	q, k, v = randQKV(rng, c.sigma, c.b, c.h, c.s, c.d, c.dv)
	hp := paramHeads(c.perHead, c.h)
	e = randTensor(rng, 1/math.Sqrt(float64(c.k)), hp, c.k, c.n)
	f = e
	if !c.shareKV {
		f = randTensor(rng, 1/math.Sqrt(float64(c.k)), hp, c.k, c.n)
	}
	switch c.bias {
	case "pad":
		bias = padBias(c.s, -1e4, 0, 3)
	case "inf":
		bias = padBias(c.s, float32(math.Inf(-1)), 2, 1)
	}
	return
}

// linformerRef evaluates the op's definition in float64: padded keys and
// values zeroed, Kp = E[:, :, :S]·K, Vp = F[:, :, :S]·V,
// out = softmax(scale·Q·Kpᵀ)·Vp.
func linformerRef(q, k, v, e, f, bias *onnx.Tensor, scale float64) []float64 {
	b, h, sq, d := q.Shape[0], q.Shape[1], q.Shape[2], q.Shape[3]
	sk, dv := k.Shape[2], v.Shape[3]
	kk, n := e.Shape[1], e.Shape[2]
	qd, kd, vd := widen(q.Floats()), widen(k.Floats()), widen(v.Floats())
	ed, fd := widen(e.Floats()), widen(f.Floats())
	out := make([]float64, b*h*sq*dv)
	for bh := 0; bh < b*h; bh++ {
		bi, hi := bh/h, bh%h
		eo, fo := 0, 0
		if e.Shape[0] > 1 {
			eo = hi * kk * n
		}
		if f.Shape[0] > 1 {
			fo = hi * kk * n
		}
		kp := make([]float64, kk*d)
		vp := make([]float64, kk*dv)
		for j := 0; j < sk; j++ {
			if bias != nil && float64(bias.Floats()[bi*sk+j]) <= -1e4 {
				continue
			}
			for r := 0; r < kk; r++ {
				for c := 0; c < d; c++ {
					kp[r*d+c] += ed[eo+r*n+j] * kd[(bh*sk+j)*d+c]
				}
				for c := 0; c < dv; c++ {
					vp[r*dv+c] += fd[fo+r*n+j] * vd[(bh*sk+j)*dv+c]
				}
			}
		}
		for i := 0; i < sq; i++ {
			p := make([]float64, kk)
			for r := range p {
				for c := 0; c < d; c++ {
					p[r] += qd[(bh*sq+i)*d+c] * kp[r*d+c]
				}
				p[r] *= scale
			}
			softmaxMix(out[(bh*sq+i)*dv:(bh*sq+i+1)*dv], p, func(r, c int) float64 { return vp[r*dv+c] })
		}
	}
	return out
}

func TestLinformerKernelMatchesFormula(t *testing.T) {
	for _, c := range linCases() {
		t.Run(c.name, func(t *testing.T) {
			q, k, v, e, f, bias := c.inputs(1)
			got, err := ops.Linformer(q, k, v, e, f, bias, ops.LinformerAttrs{Scale: 0.4, Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			want := linformerRef(q, k, v, e, f, bias, 0.4)
			var wmax float64
			for _, x := range want {
				wmax = math.Max(wmax, math.Abs(x))
			}
			if d := maxDiff(t, got.Floats(), want); d > 1e-5*wmax {
				t.Errorf("max abs error %.3g > %.3g", d, 1e-5*wmax)
			}
		})
	}
}

// With k = S and E = F = identity the op is exact softmax attention (no
// padding), which is computed independently in float64.
func TestLinformerIdentityIsExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 12))
	for _, s := range []int{1, 5, 16} {
		const b, h, d, dv = 2, 3, 8, 6
		q, k, v := randQKV(rng, 1, b, h, s, d, dv)
		id := make([]float32, s*s)
		for i := 0; i < s; i++ {
			id[i*s+i] = 1
		}
		e := onnx.NewFloat([]int{1, s, s}, id)
		got, err := ops.Linformer(q, k, v, e, e, nil, ops.LinformerAttrs{})
		if err != nil {
			t.Fatal(err)
		}
		want := exactAttention(q, k, v, nil, 1/math.Sqrt(d))
		if dd := maxDiff(t, got.Floats(), want); dd > 1e-5 {
			t.Errorf("S=%d: max abs error vs exact attention %.3g > 1e-5", s, dd)
		}
	}
}

// bodyModel returns a one-node model of the case's function at opset, its
// inputs (a zero [1,1,1,1] bias when the case has none) and the Go
// kernel's output on them.
func (c linCase) bodyModel(t *testing.T, seed uint64, opset int64) (*onnxpb.ModelProto, map[string]*onnx.Tensor, *onnx.Tensor) {
	t.Helper()
	q, k, v, e, f, bias := c.inputs(seed)
	if bias == nil {
		bias = onnx.NewFloat([]int{1, 1, 1, 1}, []float32{0})
	}
	attrs := ops.LinformerAttrs{Scale: 0.4}
	want, err := ops.Linformer(q, k, v, e, f, bias, attrs)
	if err != nil {
		t.Fatal(err)
	}
	fn, err := ops.LinformerFunction(opset)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"Q", "K", "V", "E", "F", "key_bias"}
	if c.shareKV {
		names[4] = "E"
	}
	node := ops.NewLinformerNode("lin", names, "out", attrs)
	in := map[string]*onnx.Tensor{"Q": q, "K": k, "V": v, "E": e, "F": f, "key_bias": bias}
	return oneNodeModel(t, node, fn, opset, in), in, want
}

// Same loop as TestPerformerFunctionMatchesKernel, over another case type.
func TestLinformerFunctionMatchesKernel(t *testing.T) {
	requireORT(t)
	for _, opset := range []int64{11, 13, 17, 18} {
		for _, c := range linCases() {
			t.Run(fmt.Sprintf("opset%d/%s", opset, c.name), func(t *testing.T) {
				m, in, want := c.bodyModel(t, 2, opset)
				got := runORT(t, m, in)
				t.Logf("relative error %.2g", checkClose(t, "onnxruntime vs Go kernel", got, want, 1e-4))
			})
		}
	}
}

// Appending padded tokens leaves the outputs at real tokens unchanged: the
// padded keys and values are zeroed, so the extra columns of E and F see
// zeros.
func TestLinformerPaddingInvariance(t *testing.T) {
	for _, masked := range []float32{-1e4, float32(math.Inf(-1))} {
		rng := rand.New(rand.NewPCG(13, 13))
		const b, h, s, pad, d, dv, kk, n = 2, 2, 6, 5, 8, 3, 4, 16
		q, k, v := randQKV(rng, 1, b, h, s+pad, d, dv)
		poisonPadding(v, s) // padded values must never be read
		e := randTensor(rng, 0.5, h, kk, n)
		f := randTensor(rng, 0.5, h, kk, n)
		full, err := ops.Linformer(q, k, v, e, f, padBias(s+pad, masked, pad, pad), ops.LinformerAttrs{})
		if err != nil {
			t.Fatal(err)
		}
		short, err := ops.Linformer(prefix(q, s), prefix(k, s), prefix(v, s), e, f, nil, ops.LinformerAttrs{})
		if err != nil {
			t.Fatal(err)
		}
		checkClose(t, fmt.Sprintf("bias %g: padded vs unpadded", masked), prefix(full, s), short, 1e-5)
	}
}

func TestLinformerLargeNormsFinite(t *testing.T) {
	c := linCase{b: 2, h: 2, s: 9, d: 16, dv: 4, k: 5, n: 12, perHead: true, bias: "pad", sigma: 10}
	q, k, v, e, f, bias := c.inputs(3)
	attrs := ops.LinformerAttrs{Scale: 0.25}
	got, err := ops.Linformer(q, k, v, e, f, bias, attrs)
	if err != nil {
		t.Fatal(err)
	}
	maxDiff(t, got.Floats(), make([]float64, got.Len()))
	requireORT(t)
	fn, err := ops.LinformerFunction(17)
	if err != nil {
		t.Fatal(err)
	}
	node := ops.NewLinformerNode("lin", []string{"Q", "K", "V", "E", "F", "key_bias"}, "out", attrs)
	in := map[string]*onnx.Tensor{"Q": q, "K": k, "V": v, "E": e, "F": f, "key_bias": bias}
	checkClose(t, "large norms: onnxruntime vs Go kernel", runORT(t, oneNodeModel(t, node, fn, 17, in), in), got, 1e-4)
}

// An error table like TestLaraErrors', with this op's inputs.
func TestLinformerErrors(t *testing.T) {
	rng := rand.New(rand.NewPCG(14, 14))
	q := randTensor(rng, 1, 1, 2, 9, 4)
	v := randTensor(rng, 1, 1, 2, 9, 5)
	e := randTensor(rng, 1, 1, 3, 8)
	_, err := ops.Linformer(q, q, v, e, e, nil, ops.LinformerAttrs{})
	if err == nil || !strings.Contains(err.Error(), "exceeds") || !strings.HasPrefix(err.Error(), "ops: ") {
		t.Errorf("S > N: error %v", err)
	}
	e = randTensor(rng, 1, 1, 3, 9)
	for _, c := range []struct {
		name string
		e, f *onnx.Tensor
	}{
		{"E heads", randTensor(rng, 1, 3, 3, 9), e},
		{"F rows", e, randTensor(rng, 1, 1, 2, 9)},
		{"E rank", randTensor(rng, 1, 3, 9), e},
		{"F nil", e, nil},
	} {
		if _, err := ops.Linformer(q, q, v, c.e, c.f, nil, ops.LinformerAttrs{}); err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
}

// The registered kernels return errors, never panic, on malformed inputs.
func TestLinearKernelsRejectBadInputs(t *testing.T) {
	f := func(shape ...int) *onnx.Tensor { return onnx.NewFloat(shape, make([]float32, onnx.NumElements(shape))) }
	broken := &onnx.Tensor{DType: onnx.Float, Shape: []int{1, 1, 2, 2}, Data: []float32{1}}
	ints := onnx.NewInt64([]int{1, 1, 1, 2}, []int64{1, 2})
	q := f(1, 1, 2, 2)
	cases := [][]*onnx.Tensor{
		{},
		{nil, nil, nil, nil},
		{q, q, q, nil},
		{q, q, q, nil, nil},
		{q, q, q, broken, broken},
		{broken, q, q, f(1, 3, 2), f(1, 3, 2)},
		{q, f(1, 1, 3, 2), q, f(1, 3, 2), f(1, 3, 2)},
		{q, q, q, f(1, 3, 2), f(1, 3, 2), ints},
		{q, q, q, f(1, 3, 2), f(1, 3, 2), f(2, 1, 1, 2)},
		{q, q, q, f(1, 3, 2), f(1, 3, 2), f(1, 2)},
		{q, q, q, f(1, 3), f(1, 3, 2), f(1, 1, 1, 2)},
		{q, q, q, f(1, 0, 2), f(1, 0, 2)},
		{ints, ints, ints, ints, ints, ints},
		{f(0, 1, 2, 2), f(0, 1, 2, 2), f(0, 1, 2, 2), f(1, 3, 2), f(1, 3, 2)},
	}
	for _, op := range []string{ops.PerformerOp, ops.LinformerOp} {
		kern, err := kernels.Lookup(ops.Domain, op, 1)
		if err != nil {
			t.Fatal(err)
		}
		for i, in := range cases {
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Errorf("%s case %d: panic: %v", op, i, r)
					}
				}()
				_, _ = kern(&kernels.Context{}, in)
			}()
		}
	}
}

// pooledLinformerRef evaluates LinformerAttention's pooled mode in float64
// from its definition, for queries from any sequence: per (batch, head),
// the sinks (first and/or last valid key) exact, the other m valid keys in
// k contiguous segments by rank (⌊r·k/m⌋), each segment one key k̄_c
// scoring scale·q·k̄_c + log |S_c| and weighing v̄_c; one softmax.
func pooledLinformerRef(q, k, v, bias *onnx.Tensor, a ops.LinformerAttrs) []float64 {
	b, h, sq, d := q.Shape[0], q.Shape[1], q.Shape[2], q.Shape[3]
	sk, dv := k.Shape[2], v.Shape[3]
	qd, kd, vd := widen(q.Floats()), widen(k.Floats()), widen(v.Floats())
	out := make([]float64, b*h*sq*dv)
	for bi := 0; bi < b; bi++ {
		var valid []int
		for j := 0; j < sk; j++ {
			if bias == nil || bias.Floats()[(bi%bias.Shape[0])*bias.Shape[3]+j%bias.Shape[3]] > -1e4 {
				valid = append(valid, j)
			}
		}
		var sinks, rest []int
		for i, j := range valid {
			first, last := i == 0, i == len(valid)-1
			if (a.SinkFirst && first) || (a.SinkLast && last) {
				sinks = append(sinks, j)
			} else {
				rest = append(rest, j)
			}
		}
		segs := make([][]int, a.Segments)
		for r, j := range rest {
			c := r * a.Segments / len(rest)
			segs[c] = append(segs[c], j)
		}
		for hi := 0; hi < h; hi++ {
			bh := bi*h + hi
			key := func(j, t int) float64 { return kd[(bh*sk+j)*d+t] }
			val := func(j, t int) float64 { return vd[(bh*sk+j)*dv+t] }
			for i := 0; i < sq; i++ {
				var logits []float64
				var values [][]float64
				dot := func(kv func(t int) float64) float64 {
					var s float64
					for t := 0; t < d; t++ {
						s += qd[(bh*sq+i)*d+t] * kv(t)
					}
					return float64(a.Scale) * s
				}
				for _, j := range sinks {
					logits = append(logits, dot(func(t int) float64 { return key(j, t) }))
					vj := make([]float64, dv)
					for t := range vj {
						vj[t] = val(j, t)
					}
					values = append(values, vj)
				}
				for _, seg := range segs {
					if len(seg) == 0 {
						continue
					}
					mean := func(x func(j, t int) float64, t int) float64 {
						var s float64
						for _, j := range seg {
							s += x(j, t)
						}
						return s / float64(len(seg))
					}
					logits = append(logits, dot(func(t int) float64 { return mean(key, t) })+math.Log(float64(len(seg))))
					vc := make([]float64, dv)
					for t := range vc {
						vc[t] = mean(val, t)
					}
					values = append(values, vc)
				}
				if len(logits) == 0 {
					continue // no valid key: zeros
				}
				softmaxMix(out[(bh*sq+i)*dv:(bh*sq+i+1)*dv], logits, func(j, c int) float64 { return values[j][c] })
			}
		}
	}
	return out
}

// pooledCases are pooled-mode calls: every sinks setting, padding, k
// below, at and above the valid keys, and cross-attention (Sq ≠ Sk).
func pooledCases() []struct {
	name   string
	sq, sk int
	a      ops.LinformerAttrs
	bias   string
} {
	var cs []struct {
		name   string
		sq, sk int
		a      ops.LinformerAttrs
		bias   string
	}
	for _, sk := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
		for _, seg := range []int{1, 3, 20} {
			for _, x := range []struct {
				sq   int
				bias string
			}{{11, "pad"}, {11, "none"}, {5, "inf"}, {11, "one"}} {
				a := ops.LinformerAttrs{Scale: 0.45, Segments: seg, SinkFirst: sk[0], SinkLast: sk[1]}
				cs = append(cs, struct {
					name   string
					sq, sk int
					a      ops.LinformerAttrs
					bias   string
				}{fmt.Sprintf("k%d/sinks=%s/bias=%s/Sq=%d", seg, a.Sinks(), x.bias, x.sq), x.sq, 11, a, x.bias})
			}
		}
	}
	return cs
}

// The pooled mode computes exactly LocalPooledAttention without local
// blocks (the same numbers, through the ops' own nodes and kernels), and
// both match the float64 definition, also with queries from another
// sequence than the keys.
func TestLinformerPooledMatchesDefinition(t *testing.T) {
	lin, err := kernels.Lookup(ops.Domain, ops.LinformerOp, 1)
	if err != nil {
		t.Fatal(err)
	}
	lp, err := kernels.Lookup(ops.Domain, ops.LocalPooledOp, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range pooledCases() {
		rng := rand.New(rand.NewPCG(uint64(c.sq), 41))
		q := randTensor(rng, 1, 2, 2, c.sq, 4)
		k, v := randTensor(rng, 1, 2, 2, c.sk, 4), randTensor(rng, 1, 2, 2, c.sk, 3)
		bias := caseBias(c.bias, c.sk)
		got, err := ops.Linformer(q, k, v, nil, nil, bias, c.a)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if d := maxDiff(t, got.Floats(), pooledLinformerRef(q, k, v, bias, c.a)); d > 1e-5 {
			t.Errorf("%s: kernel differs from the definition by %.3g", c.name, d)
		}
		if c.sq != c.sk {
			continue // LocalPooledAttention is self-attention
		}
		node := ops.NewLinformerNode("lin", []string{"Q", "K", "V", "", "", "key_bias"}, "out", c.a)
		viaNode, err := lin(&kernels.Context{Node: node}, []*onnx.Tensor{q, k, v, nil, nil, bias})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		la := ops.LocalPooledAttrs{Scale: c.a.Scale, Segments: c.a.Segments, SinkFirst: c.a.SinkFirst, SinkLast: c.a.SinkLast}
		want, err := lp(&kernels.Context{Node: ops.NewLocalPooledNode("lp", []string{"Q", "K", "V", "key_bias"}, "out", la)}, []*onnx.Tensor{q, k, v, bias})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		checkClose(t, c.name+": pooled LinformerAttention vs LocalPooledAttention", viaNode[0], want[0], 0)
		checkClose(t, c.name+": node vs Linformer", viaNode[0], got, 0)
	}
}

// The pooled function body (LocalPooledAttention's without local blocks,
// under LinformerAttention's name, E and F passed as "") in onnxruntime
// matches the Go kernel at every supported opset tested, and gives what
// LocalPooledAttention's body gives on the same inputs.
func TestLinformerPooledFunctionMatchesKernel(t *testing.T) {
	requireORT(t)
	for _, opset := range []int64{11, 13, 17, 18} {
		for i, c := range pooledCases() {
			if opset != 17 && i%3 != 0 {
				continue // every case at opset 17, a third at the others
			}
			t.Run(fmt.Sprintf("opset%d/%s", opset, c.name), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(i), 43))
				q := randTensor(rng, 1, 2, 2, c.sq, 4)
				k, v := randTensor(rng, 1, 2, 2, c.sk, 4), randTensor(rng, 1, 2, 2, c.sk, 3)
				bias := caseBias(c.bias, c.sk)
				if bias == nil {
					bias = onnx.NewFloat([]int{1, 1, 1, 1}, []float32{0})
				}
				want, err := ops.Linformer(q, k, v, nil, nil, bias, c.a)
				if err != nil {
					t.Fatal(err)
				}
				fn, err := ops.LinformerFunctionFor(opset, c.a)
				if err != nil {
					t.Fatal(err)
				}
				in := map[string]*onnx.Tensor{"Q": q, "K": k, "V": v, "key_bias": bias}
				node := ops.NewLinformerNode("lin", []string{"Q", "K", "V", "", "", "key_bias"}, "out", c.a)
				got := runORT(t, oneNodeModel(t, node, fn, opset, in), in)
				t.Logf("relative error %.2g", checkClose(t, "onnxruntime vs Go kernel", got, want, 1e-4))
				if c.sq != c.sk {
					return
				}
				la := ops.LocalPooledAttrs{Scale: c.a.Scale, Segments: c.a.Segments, SinkFirst: c.a.SinkFirst, SinkLast: c.a.SinkLast}
				lfn, err := ops.LocalPooledFunction(opset, la)
				if err != nil {
					t.Fatal(err)
				}
				lnode := ops.NewLocalPooledNode("lp", []string{"Q", "K", "V", "key_bias"}, "out", la)
				checkClose(t, "LinformerAttention body vs LocalPooledAttention body", got, runORT(t, oneNodeModel(t, lnode, lfn, opset, in), in), 1e-6)
			})
		}
	}
}

// The pooled mode refuses E and F, sinks belong to it, and the node's
// attributes round-trip.
func TestLinformerPooledErrors(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	q, k, v := randQKV(rng, 1, 1, 2, 6, 4, 3)
	e := randTensor(rng, 0.5, 1, 3, 6)
	for _, c := range []struct {
		name string
		e    *onnx.Tensor
		a    ops.LinformerAttrs
		want string
	}{
		{"E in the pooled mode", e, ops.LinformerAttrs{Segments: 2}, "E and F must be absent"},
		{"sinks without segments", e, ops.LinformerAttrs{SinkFirst: true}, "pooled mode"},
		{"huge segments", nil, ops.LinformerAttrs{Segments: ops.MaxSegments + 1}, "segments"},
		{"no E nor segments", nil, ops.LinformerAttrs{}, "E must be float32"},
	} {
		_, err := ops.Linformer(q, k, v, c.e, c.e, nil, c.a)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "ops: "+ops.LinformerOp+": ") {
			t.Errorf("%s: error %v, want one naming %s and mentioning %q", c.name, err, ops.LinformerOp, c.want)
		}
	}
	a := ops.LinformerAttrs{Scale: 0.5, Segments: 7, SinkLast: true}
	n := ops.NewLinformerNode("lin", []string{"Q", "K", "V", "", "", "key_bias"}, "out", a)
	if !ops.IsPooledLinformer(n) {
		t.Error("IsPooledLinformer: false for a pooled node")
	}
	lp, bias, err := ops.PooledAttrs(n)
	if err != nil || bias != 5 || lp.Block != 0 || lp.Segments != 7 || !lp.SinkLast || lp.SinkFirst || lp.Scale != 0.5 {
		t.Errorf("PooledAttrs = %+v, %d, %v; want segments 7, sinks last, key_bias input 5", lp, bias, err)
	}
	if ops.IsPooledLinformer(ops.NewLinformerNode("lin", []string{"Q", "K", "V", "E", "F", "key_bias"}, "out", ops.LinformerAttrs{Scale: 0.5})) {
		t.Error("IsPooledLinformer: true for a node with E and F")
	}
}
