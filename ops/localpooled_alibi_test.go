package ops_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/linearize/linearize/kernels"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
	"google.golang.org/protobuf/proto"
)

// alibiSlopes returns ALiBi's geometric slopes 2^(−8(h+1)/H) (the
// published form for a power-of-two H; for other H still distinct
// slopes, which is all the tests need).
func alibiSlopes(h int) []float32 {
	out := make([]float32, h)
	for i := range out {
		out[i] = float32(math.Pow(2, -8*float64(i+1)/float64(h)))
	}
	return out
}

// strongSlopes returns h distinct slopes large enough to change a short
// sequence's attention markedly (one head without ALiBi, m = 0).
func strongSlopes(h int) []float32 {
	all := []float32{0.9, 0.3, 0, 0.05, 1.7}
	return slices.Clone(all[:h])
}

// denseAlibiAttention is the float64 reference of ALiBi attention,
// computed densely over all n keys and independently of the ops:
// softmax_j(scale·q_i·k_j + key_bias_j − m_h·|i − j|)·v_j over the valid
// keys j (bias above −1e4) with −left ≤ j − i ≤ right, i and j the
// positions (padding included); a query with no such key gives zeros.
// left = right = S is global (bidirectional) ALiBi attention, the
// attention of jina-embeddings-v2.
func denseAlibiAttention(q, k, v, bias *onnx.Tensor, scale float64, slopes []float32, left, right int) []float64 {
	b, h, n, d := q.Shape[0], q.Shape[1], q.Shape[2], q.Shape[3]
	dv := v.Shape[3]
	qd, kd, vd := widen(q.Floats()), widen(k.Floats()), widen(v.Floats())
	keyBias := func(bi, j int) (float64, bool) {
		if bias == nil {
			return 0, true
		}
		row, col := 0, j
		if bias.Shape[0] > 1 {
			row = bi
		}
		if bias.Shape[3] == 1 {
			col = 0
		}
		x := float64(bias.Floats()[row*bias.Shape[3]+col])
		return x, x > -1e4
	}
	out := make([]float64, b*h*n*dv)
	for bh := 0; bh < b*h; bh++ {
		m := float64(slopes[bh%h])
		for i := 0; i < n; i++ {
			var scores []float64
			var keys []int
			for j := 0; j < n; j++ {
				kb, ok := keyBias(bh/h, j)
				if !ok || j-i < -left || j-i > right {
					continue
				}
				var dot float64
				for t := 0; t < d; t++ {
					dot += qd[(bh*n+i)*d+t] * kd[(bh*n+j)*d+t]
				}
				scores = append(scores, scale*dot+kb-m*math.Abs(float64(i-j)))
				keys = append(keys, j)
			}
			if len(keys) == 0 {
				continue
			}
			softmaxMix(out[(bh*n+i)*dv:(bh*n+i+1)*dv], scores, func(x, c int) float64 { return vd[(bh*n+keys[x])*dv+c] })
		}
	}
	return out
}

// alibiBandCases are the band cases (bandCases) plus a four-head one with
// ALiBi's geometric slopes, L ≠ R and S not a multiple of the block.
func alibiBandCases() []bandCase {
	return append(bandCases(),
		bandCase{"h4 L=3 R=5/b5/r1/S=22/holes", 2, 4, 22, 4, 3, 5, 1, 3, 5, "holes"},
		bandCase{"h4 L=R=S-1=8/b8/r1/pad", 2, 4, 9, 4, 3, 8, 1, 8, 8, "pad"},
	)
}

// slopeSets are the slope choices of a case with h heads.
func slopeSets(h int) map[string][]float32 {
	return map[string][]float32{"geometric": alibiSlopes(h), "strong": strongSlopes(h)}
}

// relTo returns max |got − want| / max(1e-3, max |want|).
func relTo(t *testing.T, got *onnx.Tensor, want []float64) float64 {
	t.Helper()
	scale := 1e-3
	for _, w := range want {
		scale = math.Max(scale, math.Abs(w))
	}
	return maxDiff(t, got.Floats(), want) / scale
}

// TestWindowAlibiMatchesDense: WindowAttention with alibi (Go kernel) is
// the dense float64 ALiBi attention restricted to the band, and
// LocalPooledAttention's band mode (any block and reach covering the band)
// is the same; a band with L, R ≥ S − 1 is global ALiBi attention.
func TestWindowAlibiMatchesDense(t *testing.T) {
	for _, c := range alibiBandCases() {
		for name, slopes := range slopeSets(c.h) {
			t.Run(c.name+"/"+name, func(t *testing.T) {
				q, k, v, bias := c.inputs(11)
				want := denseAlibiAttention(q, k, v, bias, 0.4, slopes, c.left, c.right)
				a := c.attrs()
				a.Alibi = slopes
				got, err := ops.LocalPooled(q, k, v, bias, a)
				if err != nil {
					t.Fatal(err)
				}
				if d := relTo(t, got, want); d > 1e-5 {
					t.Errorf("LocalPooledAttention band: relative error vs dense ALiBi %.3g > 1e-5", d)
				}
				if c.reach != 1 || c.blk != max(c.left, c.right, 1) {
					return // not WindowAttention's blocks
				}
				wa := c.windowAttrs()
				wa.Alibi = slopes
				got, err = ops.WindowAttend(q, k, v, bias, wa)
				if err != nil {
					t.Fatal(err)
				}
				if d := relTo(t, got, want); d > 1e-5 {
					t.Errorf("WindowAttention: relative error vs dense ALiBi %.3g > 1e-5", d)
				}
				if c.left >= c.s-1 && c.right >= c.s-1 {
					global := denseAlibiAttention(q, k, v, bias, 0.4, slopes, c.s, c.s)
					if d := relTo(t, got, global); d > 1e-5 {
						t.Errorf("band covering S: relative error vs global ALiBi %.3g > 1e-5", d)
					}
				}
			})
		}
	}
}

// TestAlibiChangesOutput guards the references: the slopes change the
// output markedly, head by head (a head with slope 0 not at all).
func TestAlibiChangesOutput(t *testing.T) {
	c := bandCase{"", 2, 3, 17, 4, 3, 8, 1, 8, 8, "pad"}
	q, k, v, bias := c.inputs(4)
	plain, err := ops.WindowAttend(q, k, v, bias, c.windowAttrs())
	if err != nil {
		t.Fatal(err)
	}
	wa := c.windowAttrs()
	wa.Alibi = strongSlopes(3) // 0.9, 0.3, 0
	alibi, err := ops.WindowAttend(q, k, v, bias, wa)
	if err != nil {
		t.Fatal(err)
	}
	per := c.s * c.dv
	for bi := 0; bi < c.b; bi++ {
		for h := 0; h < c.h; h++ {
			off := (bi*c.h + h) * per
			d := maxDiff(t, alibi.Floats()[off:off+per], widen(plain.Floats()[off:off+per]))
			switch m := wa.Alibi[h]; {
			case m == 0 && d != 0:
				t.Errorf("row %d head %d (slope 0): output changed by %.3g", bi, h, d)
			case m > 0 && d < 1e-2:
				t.Errorf("row %d head %d (slope %g): output changed by only %.3g", bi, h, m, d)
			}
		}
	}
}

// alibiLPCase is a LocalPooledAttention configuration with ALiBi.
type alibiLPCase struct {
	name  string
	b, h  int
	s     int
	attrs ops.LocalPooledAttrs
	bias  string // caseBias kinds: "none", "pad", "inf", "one"
}

func (c alibiLPCase) inputs(seed uint64) (q, k, v, bias *onnx.Tensor) {
	rng := rand.New(rand.NewPCG(seed, 59))
	q, k, v = randQKV(rng, 1, c.b, c.h, c.s, 6, 4)
	bias = caseBias(c.bias, c.s)
	if bias != nil && c.b == 1 {
		bias = onnx.NewFloat([]int{1, 1, 1, c.s}, bias.Floats()[:c.s])
	}
	return q, k, v, bias
}

// oneKeySegmentCases have at least as many segments as non-sink valid
// keys, so every segment holds one key and LocalPooledAttention with alibi
// is exact dense global ALiBi attention.
func oneKeySegmentCases() []alibiLPCase {
	return []alibiLPCase{
		{"no block/segments=S/both sinks", 2, 3, 13, ops.LocalPooledAttrs{Scale: 0.35, Segments: 13, SinkFirst: true, SinkLast: true}, "pad"},
		{"no block/segments>S", 2, 4, 11, ops.LocalPooledAttrs{Scale: 0.35, Segments: 16}, "inf"},
		{"b3/r1/segments=S/first sink", 2, 3, 17, ops.LocalPooledAttrs{Scale: 0.35, Block: 3, Segments: 17, SinkFirst: true}, "pad"},
		{"b4/r0/segments=S", 2, 4, 14, ops.LocalPooledAttrs{Scale: 0.35, Block: 4, Reach: ops.NoReach, Segments: 14}, "none"},
		{"b2/r2/segments=S+3/last sink", 2, 2, 15, ops.LocalPooledAttrs{Scale: 0.35, Block: 2, Reach: 2, Segments: 18, SinkLast: true}, "inf"},
		{"b5/r1/segments=S/both sinks/one key", 2, 3, 12, ops.LocalPooledAttrs{Scale: 0.35, Block: 5, Segments: 12, SinkFirst: true, SinkLast: true}, "one"},
	}
}

// pooledAlibiCases have segments of several keys: the pooled far field
// approximates ALiBi at each segment's mean position.
func pooledAlibiCases() []alibiLPCase {
	return []alibiLPCase{
		{"no block/k3/both sinks", 2, 3, 16, ops.LocalPooledAttrs{Scale: 0.45, Segments: 3, SinkFirst: true, SinkLast: true}, "pad"},
		{"no block/k4", 2, 2, 11, ops.LocalPooledAttrs{Scale: 0.45, Segments: 4}, "inf"},
		{"b3/r1/k3/first sink", 2, 3, 19, ops.LocalPooledAttrs{Scale: 0.45, Block: 3, Segments: 3, SinkFirst: true}, "pad"},
		{"b4/r0/k5/both sinks/far_bias", 2, 4, 23, ops.LocalPooledAttrs{Scale: 0.45, Block: 4, Reach: ops.NoReach, Segments: 5, SinkFirst: true, SinkLast: true, FarBias: []float32{-1, 0.5, 0, 1}}, "pad"},
		{"b2/r2/k2/last sink", 2, 2, 17, ops.LocalPooledAttrs{Scale: 0.45, Block: 2, Reach: 2, Segments: 2, SinkLast: true}, "one"},
		{"b3/r0/k0 local only/batch 1", 1, 3, 14, ops.LocalPooledAttrs{Scale: 0.45, Block: 3, Reach: ops.NoReach}, "pad"},
		{"b4/r1/k0/sinks", 2, 2, 18, ops.LocalPooledAttrs{Scale: 0.45, Block: 4, SinkFirst: true, SinkLast: true}, "inf"},
	}
}

// TestLocalPooledAlibiOneKeySegments: with one key per segment (and no
// far_bias) LocalPooledAttention with alibi is dense global ALiBi
// attention: log 1 = 0, and p̄_c is the key's own position.
func TestLocalPooledAlibiOneKeySegments(t *testing.T) {
	for _, c := range oneKeySegmentCases() {
		for name, slopes := range slopeSets(c.h) {
			t.Run(c.name+"/"+name, func(t *testing.T) {
				q, k, v, bias := c.inputs(13)
				a := c.attrs
				a.Alibi = slopes
				got, err := ops.LocalPooled(q, k, v, bias, a)
				if err != nil {
					t.Fatal(err)
				}
				want := denseAlibiAttention(q, k, v, bias, float64(a.Scale), slopes, c.s, c.s)
				if d := relTo(t, got, want); d > 1e-5 {
					t.Errorf("relative error vs dense global ALiBi %.3g > 1e-5", d)
				}
			})
		}
	}
}

// TestLocalPooledAlibiMatchesDefinition: with segments of several keys
// the Go kernel computes the definition (localPooledRef: exact scores
// −m·|i − j|, pooled scores −m·|i − p̄_c|) in float64.
func TestLocalPooledAlibiMatchesDefinition(t *testing.T) {
	for _, c := range append(pooledAlibiCases(), oneKeySegmentCases()...) {
		for name, slopes := range slopeSets(c.h) {
			t.Run(c.name+"/"+name, func(t *testing.T) {
				q, k, v, bias := c.inputs(17)
				a := c.attrs
				a.Alibi = slopes
				got, err := ops.LocalPooled(q, k, v, bias, a)
				if err != nil {
					t.Fatal(err)
				}
				if d := relTo(t, got, localPooledRef(q, k, v, bias, a)); d > 1e-5 {
					t.Errorf("relative error vs the float64 definition %.3g > 1e-5", d)
				}
			})
		}
	}
}

// alibiFunctionCase is one node to run in onnxruntime against its Go
// kernel.
type alibiFunctionCase struct {
	name   string
	node   *onnxpb.NodeProto
	fn     func(opset int64) (*onnxpb.FunctionProto, error)
	kernel func(q, k, v, bias *onnx.Tensor) (*onnx.Tensor, error)
	inputs func() (q, k, v, bias *onnx.Tensor)
}

func alibiFunctionCases() []alibiFunctionCase {
	in := []string{"Q", "K", "V", "key_bias"}
	var cs []alibiFunctionCase
	for i, c := range alibiBandCases() {
		slopes := strongSlopes(c.h)
		if i%2 == 1 {
			slopes = alibiSlopes(c.h)
		}
		c := c
		if c.reach == 1 && c.blk == max(c.left, c.right, 1) {
			wa := c.windowAttrs()
			wa.Alibi = slopes
			cs = append(cs, alibiFunctionCase{
				name: "window/" + c.name,
				node: ops.NewWindowNode("w", in, "out", wa),
				fn:   func(opset int64) (*onnxpb.FunctionProto, error) { return ops.WindowFunction(opset, wa) },
				kernel: func(q, k, v, bias *onnx.Tensor) (*onnx.Tensor, error) {
					return ops.WindowAttend(q, k, v, bias, wa)
				},
				inputs: func() (q, k, v, bias *onnx.Tensor) { return c.inputs(19) },
			})
			continue
		}
		a := c.attrs()
		a.Alibi = slopes
		cs = append(cs, lpFunctionCase("band/"+c.name, a, func() (q, k, v, bias *onnx.Tensor) { return c.inputs(19) }))
	}
	for _, c := range append(pooledAlibiCases(), oneKeySegmentCases()...) {
		a := c.attrs
		a.Alibi = alibiSlopes(c.h)
		cs = append(cs, lpFunctionCase("pooled/"+c.name, a, func() (q, k, v, bias *onnx.Tensor) { return c.inputs(23) }))
	}
	return cs
}

func lpFunctionCase(name string, a ops.LocalPooledAttrs, inputs func() (q, k, v, bias *onnx.Tensor)) alibiFunctionCase {
	return alibiFunctionCase{
		name:   name,
		node:   ops.NewLocalPooledNode("lp", []string{"Q", "K", "V", "key_bias"}, "out", a),
		fn:     func(opset int64) (*onnxpb.FunctionProto, error) { return ops.LocalPooledFunction(opset, a) },
		kernel: func(q, k, v, bias *onnx.Tensor) (*onnx.Tensor, error) { return ops.LocalPooled(q, k, v, bias, a) },
		inputs: inputs,
	}
}

// TestLocalPooledAlibiFunctionMatchesKernel: the function bodies with
// alibi (WindowAttention, LocalPooledAttention's band, blocks with
// segments and sinks, no blocks) in onnxruntime agree with the Go kernels
// at opsets 13 and 17.
func TestLocalPooledAlibiFunctionMatchesKernel(t *testing.T) {
	requireORT(t)
	for _, opset := range []int64{13, 17} {
		for _, c := range alibiFunctionCases() {
			t.Run(fmt.Sprintf("opset%d/%s", opset, c.name), func(t *testing.T) {
				q, k, v, bias := c.inputs()
				if bias == nil {
					bias = onnx.NewFloat([]int{1, 1, 1, 1}, []float32{0})
				}
				want, err := c.kernel(q, k, v, bias)
				if err != nil {
					t.Fatal(err)
				}
				fn, err := c.fn(opset)
				if err != nil {
					t.Fatal(err)
				}
				if err := ops.CheckNode(c.node); err != nil {
					t.Fatal(err)
				}
				in := map[string]*onnx.Tensor{"Q": q, "K": k, "V": v, "key_bias": bias}
				got := runORT(t, oneNodeModel(t, c.node, fn, opset, in), in)
				checkClose(t, "onnxruntime vs Go kernel", got, want, 1e-4)
			})
		}
	}
}

// TestLocalPooledAlibiHalfInORT: the float16 bodies (TypedFunction) with
// alibi run in onnxruntime and agree with the float32 kernels on the same
// rounded inputs within one unit in the last place.
func TestLocalPooledAlibiHalfInORT(t *testing.T) {
	requireORT(t)
	cases := alibiFunctionCases()
	var picked []alibiFunctionCase
	for _, c := range cases {
		if c.name == "window/h4 L=3 R=5/b5/r1/S=22/holes" || c.name == "pooled/b3/r1/k3/first sink" {
			picked = append(picked, c)
		}
	}
	if len(picked) != 2 {
		t.Fatalf("picked %d cases", len(picked))
	}
	const opset = 17
	for _, c := range picked {
		t.Run(c.name, func(t *testing.T) {
			q, k, v, bias := c.inputs()
			in := map[string]*onnx.Tensor{"Q": widenHalf(roundTo(q, onnx.Float16)), "K": widenHalf(roundTo(k, onnx.Float16)), "V": widenHalf(roundTo(v, onnx.Float16)), "key_bias": bias}
			hc := halfCase{node: c.node, in: in, half: []string{"Q", "K", "V", "key_bias"}}
			fn32, err := c.fn(opset)
			if err != nil {
				t.Fatal(err)
			}
			fn, err := ops.TypedFunction(fn32, onnx.Float16)
			if err != nil {
				t.Fatal(err)
			}
			m, feed := typedModel(t, hc, fn, opset, onnx.Float16)
			got := runORT(t, m, feed)
			want, err := c.kernel(in["Q"], in["K"], in["V"], widenHalf(feed["key_bias"]))
			if err != nil {
				t.Fatal(err)
			}
			if off := ulpOff(t, got, widen(want.Floats()), onnx.Float16); off > 1.01 {
				t.Errorf("onnxruntime float16 vs float32 kernel: %.2f units in the last place (want ≤ 1)", off)
			}
		})
	}
}

// TestAlibiNodes: alibi is written as a float list (absent without ALiBi),
// passes CheckNode and reads back, for both ops.
func TestAlibiNodes(t *testing.T) {
	in := []string{"Q", "K", "V", "key_bias"}
	slopes := alibiSlopes(8)
	lp := ops.NewLocalPooledNode("lp", in, "out", ops.LocalPooledAttrs{Scale: 0.5, Block: 4, Segments: 3, Alibi: slopes})
	w := ops.NewWindowNode("w", in, "out", ops.WindowAttrs{Scale: 0.5, Left: 3, Right: 1, Alibi: slopes})
	for _, n := range []*onnxpb.NodeProto{lp, w} {
		if err := ops.CheckNode(n); err != nil {
			t.Errorf("%s: CheckNode: %v", n.GetOpType(), err)
		}
		at := onnx.Attr(n, "alibi")
		if at == nil || at.GetType() != onnxpb.AttributeProto_FLOATS || !slices.Equal(at.GetFloats(), slopes) {
			t.Errorf("%s: alibi attribute %v, want floats %v", n.GetOpType(), at, slopes)
		}
	}
	if a, err := ops.ParseLocalPooledAttrs(lp); err != nil || !slices.Equal(a.Alibi, slopes) {
		t.Errorf("ParseLocalPooledAttrs: %+v, %v", a, err)
	}
	if a, err := ops.ParseWindowAttrs(w); err != nil || !slices.Equal(a.Alibi, slopes) || a.Left != 3 || a.Right != 1 {
		t.Errorf("ParseWindowAttrs: %+v, %v", a, err)
	}
	for _, n := range []*onnxpb.NodeProto{
		ops.NewLocalPooledNode("lp", in, "out", ops.LocalPooledAttrs{Scale: 0.5, Block: 4, Segments: 3}),
		ops.NewWindowNode("w", in, "out", ops.WindowAttrs{Scale: 0.5, Left: 3, Right: 1}),
	} {
		if onnx.Attr(n, "alibi") != nil {
			t.Errorf("%s without ALiBi has an alibi attribute", n.GetOpType())
		}
	}
	// The registered kernel reads alibi from the node.
	kernel, err := kernels.Lookup(ops.Domain, ops.WindowOp, 1)
	if err != nil {
		t.Fatal(err)
	}
	c := bandCase{"", 2, 2, 10, 4, 3, 3, 1, 3, 1, "pad"}
	q, k, v, bias := c.inputs(29)
	wa := ops.WindowAttrs{Scale: 0.5, Left: 3, Right: 1, Alibi: strongSlopes(2)}
	out, err := kernel(&kernels.Context{Node: ops.NewWindowNode("w", in, "out", wa), Opset: 1}, []*onnx.Tensor{q, k, v, bias})
	if err != nil {
		t.Fatal(err)
	}
	if d := relTo(t, out[0], denseAlibiAttention(q, k, v, bias, 0.5, wa.Alibi, 3, 1)); d > 1e-5 {
		t.Errorf("kernel from the node: relative error vs dense ALiBi %.3g", d)
	}
}

// TestAlibiErrors: a slope count other than the heads, non-finite,
// negative or huge slopes, and alibi where no op defines it are errors
// naming the op, never a panic or a silent answer.
func TestAlibiErrors(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 31))
	q, k, v := randQKV(rng, 1, 1, 3, 9, 4, 3)
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	lp := func(slopes ...float32) ops.LocalPooledAttrs {
		return ops.LocalPooledAttrs{Scale: 0.5, Block: 4, Segments: 2, Alibi: slopes}
	}
	win := func(slopes ...float32) ops.WindowAttrs {
		return ops.WindowAttrs{Scale: 0.5, Left: 2, Right: 2, Alibi: slopes}
	}
	for _, c := range []struct {
		name     string
		slopes   []float32
		want     string
		function bool // the function builder refuses it too (the count needs the input)
	}{
		{"too few slopes", []float32{0.5, 0.25}, "2 alibi slopes for 3 heads, want one per head", false},
		{"too many slopes", []float32{0.5, 0.25, 0.125, 0.0625}, "4 alibi slopes for 3 heads", false},
		{"one slope for three heads", []float32{0.5}, "1 alibi slopes for 3 heads", false},
		{"NaN slope", []float32{0.5, nan, 0.1}, "alibi", true},
		{"+Inf slope", []float32{0.5, 0.1, inf}, "alibi", true},
		{"-Inf slope", []float32{-inf, 0.5, 0.1}, "alibi", true},
		{"negative slope", []float32{0.5, -0.25, 0.1}, "alibi slope -0.25 of head 1, want a finite value 0..10000", true},
		{"huge slope", []float32{0.5, 2e4, 0.1}, "alibi slope 20000 of head 1", true},
	} {
		for _, op := range []string{ops.LocalPooledOp, ops.WindowOp} {
			var err, fnErr error
			if op == ops.LocalPooledOp {
				_, err = ops.LocalPooled(q, k, v, nil, lp(c.slopes...))
				_, fnErr = ops.LocalPooledFunction(17, lp(c.slopes...))
			} else {
				_, err = ops.WindowAttend(q, k, v, nil, win(c.slopes...))
				_, fnErr = ops.WindowFunction(17, win(c.slopes...))
			}
			if err == nil || !strings.HasPrefix(err.Error(), "ops: "+op+": ") || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s %s: kernel error %v, want one naming the op and mentioning %q", op, c.name, err, c.want)
			}
			if c.function && (fnErr == nil || !strings.Contains(fnErr.Error(), c.want)) {
				t.Errorf("%s %s: function error %v, want one mentioning %q", op, c.name, fnErr, c.want)
			}
			if !c.function && fnErr != nil {
				t.Errorf("%s %s: function: %v", op, c.name, fnErr)
			}
		}
	}
	// Nodes: non-finite slopes fail CheckNode (the schema), a wrong count
	// the kernel, naming the node.
	floats := func(v ...float32) *onnxpb.AttributeProto {
		return &onnxpb.AttributeProto{Name: proto.String("alibi"), Type: onnxpb.AttributeProto_FLOATS.Enum(), Floats: v}
	}
	in := []string{"Q", "K", "V"}
	for _, n := range []*onnxpb.NodeProto{
		ops.NewLocalPooledNode("n1", in, "out", ops.LocalPooledAttrs{Scale: 0.5, Block: 4, Segments: 2}),
		ops.NewWindowNode("n1", in, "out", ops.WindowAttrs{Scale: 0.5, Left: 2, Right: 2}),
	} {
		bad := proto.Clone(n).(*onnxpb.NodeProto)
		bad.Attribute = append(bad.Attribute, floats(0.5, nan, 0.1))
		if err := ops.CheckNode(bad); err == nil || !strings.Contains(err.Error(), "alibi NaN must be finite") || !strings.Contains(err.Error(), `node "n1"`) {
			t.Errorf("%s: CheckNode on a NaN slope: %v", n.GetOpType(), err)
		}
		short := proto.Clone(n).(*onnxpb.NodeProto)
		short.Attribute = append(short.Attribute, floats(0.5, 0.1))
		if err := ops.CheckNode(short); err != nil {
			t.Errorf("%s: CheckNode: %v (the count is the kernel's to check)", n.GetOpType(), err)
		}
		kernel, err := kernels.Lookup(ops.Domain, n.GetOpType(), 1)
		if err != nil {
			t.Fatal(err)
		}
		_, err = kernel(&kernels.Context{Node: short, Opset: 1}, []*onnx.Tensor{q, k, v})
		if err == nil || !strings.Contains(err.Error(), "2 alibi slopes for 3 heads") || !strings.Contains(err.Error(), `node "n1"`) {
			t.Errorf("%s: kernel on 2 slopes for 3 heads: %v", n.GetOpType(), err)
		}
	}
	// LinformerAttention (the pooled mode included) has no alibi.
	ln := ops.NewLinformerNode("n1", []string{"Q", "K", "V", "", "", "key_bias"}, "out", ops.LinformerAttrs{Scale: 0.5, Segments: 4})
	ln.Attribute = append(ln.Attribute, floats(0.5, 0.25, 0.125))
	if err := ops.CheckNode(ln); err == nil || !strings.Contains(err.Error(), "unknown attribute alibi") {
		t.Errorf("LinformerAttention with alibi: CheckNode %v, want unknown attribute alibi", err)
	}
}

// TestAlibiFunctionLinear: the ALiBi body holds no [S,S] value and no
// constant that grows with the window: a 4096-key window's body is the
// size of a 2-key one's, and ALiBi adds a fixed number of nodes.
func TestAlibiFunctionLinear(t *testing.T) {
	slopes := alibiSlopes(16)
	small, err := ops.WindowFunction(17, ops.WindowAttrs{Scale: 0.5, Left: 2, Right: 2, Alibi: slopes})
	if err != nil {
		t.Fatal(err)
	}
	big, err := ops.WindowFunction(17, ops.WindowAttrs{Scale: 0.5, Left: 4095, Right: 4095, Alibi: slopes})
	if err != nil {
		t.Fatal(err)
	}
	if a, b := proto.Size(small), proto.Size(big); b > a+64 {
		t.Errorf("function body of a 4096-key window is %d bytes, of a 2-key one %d", b, a)
	}
	plain, err := ops.LocalPooledFunction(17, ops.LocalPooledAttrs{Scale: 0.5, Block: 64, Segments: 32, SinkFirst: true})
	if err != nil {
		t.Fatal(err)
	}
	withAlibi, err := ops.LocalPooledFunction(17, ops.LocalPooledAttrs{Scale: 0.5, Block: 64, Segments: 32, SinkFirst: true, Alibi: slopes})
	if err != nil {
		t.Fatal(err)
	}
	if extra := len(withAlibi.Node) - len(plain.Node); extra <= 0 || extra > 40 {
		t.Errorf("alibi added %d nodes to the body", extra)
	}
}
