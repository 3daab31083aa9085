package ops_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/ops"
)

type lpCase struct {
	name    string
	b, h, s int
	d, dv   int
	attrs   ops.LocalPooledAttrs
	bias    string // "none", "pad", "inf", "one" (a sequence with one valid key), "empty" (none valid)
	sigma   float64
}

func lpCases() []lpCase {
	var cs []lpCase
	sinks := []struct{ first, last bool }{{false, false}, {true, false}, {false, true}, {true, true}}
	i := 0
	for _, blk := range []int{0, 1, 3, 4} {
		for _, seg := range []int{1, 3, 8} {
			for _, sk := range sinks {
				for _, bias := range []string{"none", "pad", "inf", "one"} {
					i++
					// Thin the product: every (block, segments, sinks)
					// combination, biases rotating.
					if i%3 != 0 && bias != "pad" {
						continue
					}
					s := 11
					if i%2 == 0 {
						s = 16
					}
					a := ops.LocalPooledAttrs{Scale: 0.45, Block: blk, Segments: seg, SinkFirst: sk.first, SinkLast: sk.last}
					c := lpCase{b: 2, h: 2, s: s, d: 4, dv: 3, attrs: a, bias: bias, sigma: 1}
					c.name = fmt.Sprintf("b%d/k%d/sinks=%s/bias=%s/S=%d", blk, seg, a.Sinks(), bias, s)
					cs = append(cs, c)
				}
			}
		}
	}
	// Reach and the far-field gate: aligned windows (r = 0, as convert
	// long writes), a wider reach, and far_bias shared or per head.
	for _, x := range []struct {
		reach int
		beta  []float32
	}{{ops.NoReach, nil}, {ops.NoReach, []float32{-1.5}}, {2, nil}, {1, []float32{0.7, -2}}, {ops.NoReach, []float32{-0.5, 1.25}}} {
		for _, blk := range []int{3, 4} {
			// k = 0 (no far field) with b = 3, k = 3 with b = 4.
			a := ops.LocalPooledAttrs{Scale: 0.45, Block: blk, Segments: 3 * (blk - 3), SinkFirst: true, SinkLast: blk == 4, Reach: x.reach, FarBias: x.beta}
			c := lpCase{b: 2, h: 2, s: 16, d: 4, dv: 3, attrs: a, bias: "pad", sigma: 1}
			c.name = fmt.Sprintf("b%d/k%d/sinks=%s/reach=%d/beta=%v", blk, a.Segments, a.Sinks(), x.reach, x.beta)
			cs = append(cs, c)
		}
	}
	// The local part alone (convert long's default: no segments, no
	// sinks), which the function body computes with one Softmax: with
	// padding, with whole blocks without a valid key ("one" leaves a
	// single valid key, so those blocks must give zeros), aligned or
	// reaching.
	for _, x := range []struct {
		blk, reach int
		bias       string
	}{{4, ops.NoReach, "pad"}, {2, ops.NoReach, "inf"}, {3, ops.NoReach, "one"}, {4, 1, "pad"}, {5, ops.NoReach, "none"}} {
		a := ops.LocalPooledAttrs{Scale: 0.45, Block: x.blk, Reach: x.reach}
		c := lpCase{b: 2, h: 2, s: 13, d: 4, dv: 3, attrs: a, bias: x.bias, sigma: 1}
		c.name = fmt.Sprintf("b%d/k0/sinks=none/reach=%d/bias=%s", x.blk, x.reach, x.bias)
		cs = append(cs, c)
	}
	return cs
}

func (c lpCase) inputs(seed uint64) (q, k, v, bias *onnx.Tensor) {
	rng := rand.New(rand.NewPCG(seed, 31))
	q, k, v = randQKV(rng, c.sigma, c.b, c.h, c.s, c.d, c.dv)
	return q, k, v, caseBias(c.bias, c.s)
}

// caseBias is the [2,1,1,S] key bias of the LocalPooled and LARA cases:
// "pad" and "inf" pad a few keys, "one" leaves one key, "empty" none; nil
// for other kinds.
func caseBias(kind string, s int) *onnx.Tensor {
	switch kind {
	case "pad":
		return padBias(s, -1e4, 0, 4)
	case "inf":
		return padBias(s, float32(math.Inf(-1)), 3, 1)
	case "one":
		return padBias(s, -1e9, s-1, 2)
	case "empty":
		return padBias(s, -1e4, s, 0)
	}
	return nil
}

// localPooledRef evaluates the op's definition directly in float64, key by
// key: the exact set of every query is listed explicitly and every
// segment's mean and outside count are recounted per query (no blocks, no
// running sums, no matrix products). With ALiBi (a.Alibi) an exact score
// of query i and key j gets −m_h·|i − j| and a segment's −m_h·|i − p̄_c|,
// p̄_c the mean position of all its keys.
func localPooledRef(q, k, v, bias *onnx.Tensor, a ops.LocalPooledAttrs) []float64 {
	b, h, n, d := q.Shape[0], q.Shape[1], q.Shape[2], q.Shape[3]
	dv := v.Shape[3]
	qd, kd, vd := widen(q.Floats()), widen(k.Floats()), widen(v.Floats())
	scale := float64(a.Scale)
	reach := 1
	switch {
	case a.Reach == ops.NoReach:
		reach = 0
	case a.Reach > 0:
		reach = a.Reach
	}
	out := make([]float64, b*h*n*dv)
	for bh := 0; bh < b*h; bh++ {
		bi := bh / h
		var beta float64
		switch len(a.FarBias) {
		case 1:
			beta = float64(a.FarBias[0])
		case h:
			beta = float64(a.FarBias[bh%h])
		}
		var m float64
		if len(a.Alibi) > 0 {
			m = float64(a.Alibi[bh%h])
		}
		valid := func(j int) bool {
			if bias == nil {
				return true
			}
			row, col := 0, j
			if bias.Shape[0] > 1 {
				row = bi
			}
			if bias.Shape[3] == 1 {
				col = 0
			}
			return bias.Floats()[row*bias.Shape[3]+col] > -1e4
		}
		var validKeys []int
		for j := 0; j < n; j++ {
			if valid(j) {
				validKeys = append(validKeys, j)
			}
		}
		sink := map[int]bool{}
		if len(validKeys) > 0 {
			if a.SinkFirst {
				sink[validKeys[0]] = true
			}
			if a.SinkLast {
				sink[validKeys[len(validKeys)-1]] = true
			}
		}
		var rest []int
		for _, j := range validKeys {
			if !sink[j] {
				rest = append(rest, j)
			}
		}
		segOf := map[int]int{}
		for r, j := range rest {
			segOf[j] = r * a.Segments / len(rest)
		}
		dot := func(i int, x []float64) float64 {
			var s float64
			for t := 0; t < d; t++ {
				s += qd[(bh*n+i)*d+t] * x[t]
			}
			return s
		}
		for i := 0; i < n; i++ {
			exact := map[int]bool{}
			for j := range sink {
				exact[j] = true
			}
			if a.Block > 0 {
				for _, j := range rest {
					if bq, bk := i/a.Block, j/a.Block; bk >= bq-reach && bk <= bq+reach {
						exact[j] = true
					}
				}
			}
			var scores []float64
			var values [][]float64
			for j := range n {
				if exact[j] {
					scores = append(scores, scale*dot(i, kd[(bh*n+j)*d:(bh*n+j+1)*d])-m*math.Abs(float64(i-j)))
					values = append(values, vd[(bh*n+j)*dv:(bh*n+j+1)*dv])
				}
			}
			for c := 0; c < a.Segments; c++ {
				kbar, vbar := make([]float64, d), make([]float64, dv)
				members, outside, posSum := 0, 0, 0
				for _, j := range rest {
					if segOf[j] != c {
						continue
					}
					members++
					posSum += j
					if !exact[j] {
						outside++
					}
					for t := 0; t < d; t++ {
						kbar[t] += kd[(bh*n+j)*d+t]
					}
					for t := 0; t < dv; t++ {
						vbar[t] += vd[(bh*n+j)*dv+t]
					}
				}
				if outside == 0 {
					continue
				}
				for t := range kbar {
					kbar[t] /= float64(members)
				}
				for t := range vbar {
					vbar[t] /= float64(members)
				}
				pbar := float64(posSum) / float64(members)
				scores = append(scores, scale*dot(i, kbar)+math.Log(float64(outside))+beta-m*math.Abs(float64(i)-pbar))
				values = append(values, vbar)
			}
			if len(scores) == 0 {
				continue
			}
			top := math.Inf(-1)
			for _, s := range scores {
				top = math.Max(top, s)
			}
			var den float64
			for x, s := range scores {
				e := math.Exp(s - top)
				den += e
				for t := 0; t < dv; t++ {
					out[(bh*n+i)*dv+t] += e * values[x][t]
				}
			}
			for t := 0; t < dv; t++ {
				out[(bh*n+i)*dv+t] /= den
			}
		}
	}
	return out
}

func TestLocalPooledKernelMatchesDefinition(t *testing.T) {
	cases := append(lpCases(), lpCase{name: "empty", b: 2, h: 1, s: 7, d: 4, dv: 2, attrs: ops.LocalPooledAttrs{Scale: 0.5, Block: 2, Segments: 2, SinkFirst: true, SinkLast: true}, bias: "empty", sigma: 1})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q, k, v, bias := c.inputs(1)
			got, err := ops.LocalPooled(q, k, v, bias, c.attrs)
			if err != nil {
				t.Fatal(err)
			}
			want := localPooledRef(q, k, v, bias, c.attrs)
			if d := maxDiff(t, got.Floats(), want); d > 1e-5 {
				t.Errorf("max abs error vs the float64 definition %.3g > 1e-5", d)
			}
		})
	}
}

// With at most k non-sink keys every segment holds one key, and with a block
// covering the sequence every key is exact: both must give exact softmax
// attention (computed independently, with the mask as an additive bias).
func TestLocalPooledExactCases(t *testing.T) {
	for _, c := range []struct {
		name  string
		s     int
		attrs ops.LocalPooledAttrs
	}{
		{"segments=S, no block", 9, ops.LocalPooledAttrs{Segments: 9}},
		{"segments>S with sinks", 9, ops.LocalPooledAttrs{Segments: 16, SinkFirst: true, SinkLast: true}},
		{"segments=S-2 with both sinks", 10, ops.LocalPooledAttrs{Segments: 8, SinkFirst: true, SinkLast: true}},
		{"block covers S", 12, ops.LocalPooledAttrs{Block: 12, Segments: 2}},
		{"neighbour blocks cover S", 12, ops.LocalPooledAttrs{Block: 6, Segments: 1}},
		{"block and segments", 20, ops.LocalPooledAttrs{Block: 3, Segments: 20, SinkLast: true}},
		// convert long's guarantee: a sequence within one aligned window is
		// the original attention, whatever the far-field gate.
		{"aligned window covers S, gated", 12, ops.LocalPooledAttrs{Block: 12, Segments: 4, Reach: ops.NoReach, FarBias: []float32{-3}, SinkFirst: true, SinkLast: true}},
		{"aligned window covers S, no far field", 12, ops.LocalPooledAttrs{Block: 12, Reach: ops.NoReach, SinkFirst: true}},
		{"aligned window longer than S, per-head gate", 9, ops.LocalPooledAttrs{Block: 512, Segments: 64, Reach: ops.NoReach, FarBias: []float32{1, 2, -1}, SinkFirst: true, SinkLast: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, bias := range []string{"none", "pad"} {
				lc := lpCase{b: 2, h: 3, s: c.s, d: 8, dv: 5, bias: bias, sigma: 1.5}
				q, k, v, bm := lc.inputs(7)
				c.attrs.Scale = 0.3
				got, err := ops.LocalPooled(q, k, v, bm, c.attrs)
				if err != nil {
					t.Fatal(err)
				}
				want := exactAttention(q, k, v, bm, 0.3)
				if d := maxDiff(t, got.Floats(), want); d > 1e-5 {
					t.Errorf("bias %s: max abs error vs exact attention %.3g > 1e-5", bias, d)
				}
			}
		})
	}
}

func TestLocalPooledFunctionMatchesKernel(t *testing.T) {
	requireORT(t)
	cases := append(lpCases(), lpCase{name: "empty", b: 2, h: 1, s: 7, d: 4, dv: 2, attrs: ops.LocalPooledAttrs{Scale: 0.5, Block: 2, Segments: 2, SinkFirst: true, SinkLast: true}, bias: "empty", sigma: 1})
	for _, opset := range []int64{11, 13, 17, 18} {
		for i, c := range cases {
			if opset != 17 && i%4 != 0 {
				continue // every case at one opset, a quarter at the others
			}
			t.Run(fmt.Sprintf("opset%d/%s", opset, c.name), func(t *testing.T) {
				q, k, v, bias := c.inputs(2)
				if bias == nil {
					bias = onnx.NewFloat([]int{1, 1, 1, 1}, []float32{0})
				}
				want, err := ops.LocalPooled(q, k, v, bias, c.attrs)
				if err != nil {
					t.Fatal(err)
				}
				fn, err := ops.LocalPooledFunction(opset, c.attrs)
				if err != nil {
					t.Fatal(err)
				}
				node := ops.NewLocalPooledNode("lp", []string{"Q", "K", "V", "key_bias"}, "out", c.attrs)
				in := map[string]*onnx.Tensor{"Q": q, "K": k, "V": v, "key_bias": bias}
				got := runORT(t, oneNodeModel(t, node, fn, opset, in), in)
				t.Logf("relative error %.2g", checkClose(t, "onnxruntime vs Go kernel", got, want, 1e-4))
			})
		}
	}
}

// Appending padded tokens leaves the outputs at real tokens unchanged, in
// the kernel and in the function body; padded keys and values hold NaN,
// which must never be read.
func TestLocalPooledPaddingInvariance(t *testing.T) {
	for _, a := range []ops.LocalPooledAttrs{
		{Scale: 0.4, Block: 4, Segments: 3, SinkFirst: true, SinkLast: true},
		{Scale: 0.4, Block: 0, Segments: 4, SinkFirst: true, SinkLast: true},
		{Scale: 0.4, Block: 3, Segments: 2},
		{Scale: 0.4, Block: 3, Band: true, WindowLeft: 2, WindowRight: 3},
	} {
		for _, masked := range []float32{-1e4, float32(math.Inf(-1))} {
			rng := rand.New(rand.NewPCG(17, 17))
			const b, h, s, pad, d, dv = 2, 2, 13, 6, 8, 3
			q, k, v := randQKV(rng, 1, b, h, s+pad, d, dv)
			poisonPadding(v, s)
			poisonPadding(k, s)
			bias := padBias(s+pad, masked, pad, pad)
			what := fmt.Sprintf("b%d/k%d/sinks=%s/bias %g", a.Block, a.Segments, a.Sinks(), masked)
			full, err := ops.LocalPooled(q, k, v, bias, a)
			if err != nil {
				t.Fatal(err)
			}
			short, err := ops.LocalPooled(prefix(q, s), prefix(k, s), prefix(v, s), nil, a)
			if err != nil {
				t.Fatal(err)
			}
			checkClose(t, what+": padded vs unpadded (Go kernel)", prefix(full, s), short, 1e-5)
			fn, err := ops.LocalPooledFunction(17, a)
			if err != nil {
				t.Fatal(err)
			}
			node := ops.NewLocalPooledNode("lp", []string{"Q", "K", "V", "key_bias"}, "out", a)
			in := map[string]*onnx.Tensor{"Q": q, "K": k, "V": v, "key_bias": bias}
			checkPaddedBody(t, what, node, fn, in, s, short, 1e-5)
		}
	}
}

func TestLocalPooledLargeScoresFinite(t *testing.T) {
	c := lpCase{b: 2, h: 2, s: 17, d: 16, dv: 4, bias: "pad", sigma: 10,
		attrs: ops.LocalPooledAttrs{Scale: 0.25, Block: 4, Segments: 3, SinkFirst: true, SinkLast: true}}
	q, k, v, bias := c.inputs(3)
	got, err := ops.LocalPooled(q, k, v, bias, c.attrs)
	if err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(t, got.Floats(), localPooledRef(q, k, v, bias, c.attrs)); d > 1e-4 {
		t.Errorf("large scores: max abs error vs definition %.3g", d)
	}
	requireORT(t)
	fn, err := ops.LocalPooledFunction(17, c.attrs)
	if err != nil {
		t.Fatal(err)
	}
	node := ops.NewLocalPooledNode("lp", []string{"Q", "K", "V", "key_bias"}, "out", c.attrs)
	in := map[string]*onnx.Tensor{"Q": q, "K": k, "V": v, "key_bias": bias}
	checkClose(t, "large scores: onnxruntime vs Go kernel", runORT(t, oneNodeModel(t, node, fn, 17, in), in), got, 1e-4)
}

// An error table like TestPerformerErrors', with this op's inputs.
func TestLocalPooledErrors(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 19))
	q := randTensor(rng, 1, 1, 2, 9, 4)
	v := randTensor(rng, 1, 1, 2, 9, 3)
	for _, c := range []struct {
		name string
		a    ops.LocalPooledAttrs
		q    *onnx.Tensor
		want string
	}{
		{"no segments and no block", ops.LocalPooledAttrs{}, q, "segments 0"},
		{"negative block", ops.LocalPooledAttrs{Block: -1, Segments: 2}, q, "block -1"},
		{"huge segments", ops.LocalPooledAttrs{Segments: 1 << 20}, q, "segments"},
		{"nan scale", ops.LocalPooledAttrs{Segments: 2, Scale: float32(math.NaN())}, q, "finite"},
		{"far_bias per head mismatch", ops.LocalPooledAttrs{Segments: 2, FarBias: []float32{1, 2, 3}}, q, "far_bias"},
		{"nan far_bias", ops.LocalPooledAttrs{Segments: 2, FarBias: []float32{float32(math.NaN())}}, q, "far_bias"},
		{"reach too large", ops.LocalPooledAttrs{Block: 2, Segments: 2, Reach: ops.MaxReach + 1}, q, "reach"},
		{"cross attention", ops.LocalPooledAttrs{Segments: 2}, randTensor(rng, 1, 1, 2, 5, 4), "self-attention"},
	} {
		_, err := ops.LocalPooled(c.q, q, v, nil, c.a)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "ops: ") {
			t.Errorf("%s: error %v, want one mentioning %q", c.name, err, c.want)
		}
	}
	if _, _, err := ops.ParseSinks("first,middle"); err == nil {
		t.Error("ParseSinks accepted middle")
	}
	if _, err := ops.LocalPooledFunction(10, ops.LocalPooledAttrs{Segments: 2}); err == nil {
		t.Error("function body built for opset 10")
	}
}
