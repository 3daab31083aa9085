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
	"google.golang.org/protobuf/proto"
)

// DenseBandAttention is the float64 reference of LocalPooledAttention's
// band mode, computed densely over all n keys and independently of the op
// (no blocks, no reach): softmax(scale·q·kᵀ + key_bias + band)·v with band
// 0 where −left ≤ j − i ≤ right and −∞ elsewhere, Q, K [B,H,S,D], V
// [B,H,S,Dv], bias [B or 1,1,1,S or 1] or nil. As the op defines, keys
// whose bias is at or below −1e4 are padding and left out (not weighed
// e^bias), and a query without any valid key in its band gives zeros
// where a dense softmax would average the masked keys or give NaN; the
// other keys' bias is added (converters pass 0 there).
func DenseBandAttention(q, k, v, bias *onnx.Tensor, scale float64, left, right int) []float64 {
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
	scores := make([]float64, n)
	for bh := 0; bh < b*h; bh++ {
		for i := 0; i < n; i++ {
			top := math.Inf(-1)
			for j := 0; j < n; j++ {
				scores[j] = math.Inf(-1)
				kb, ok := keyBias(bh/h, j)
				if !ok || j-i < -left || j-i > right {
					continue
				}
				var dot float64
				for t := 0; t < d; t++ {
					dot += qd[(bh*n+i)*d+t] * kd[(bh*n+j)*d+t]
				}
				scores[j] = scale*dot + kb
				top = math.Max(top, scores[j])
			}
			if math.IsInf(top, -1) {
				continue // no valid key in the band: zeros
			}
			o := out[(bh*n+i)*dv : (bh*n+i+1)*dv]
			var den float64
			for j, s := range scores {
				if math.IsInf(s, -1) {
					continue
				}
				e := math.Exp(s - top)
				den += e
				for t := range o {
					o[t] += e * vd[(bh*n+j)*dv+t]
				}
			}
			for t := range o {
				o[t] /= den
			}
		}
	}
	return out
}

// bandCase is one configuration of the band mode.
type bandCase struct {
	name        string
	b, h, s     int
	d, dv       int
	blk, reach  int // reach as LocalPooledAttrs.Reach (NoReach: r = 0)
	left, right int
	bias        string // "none", "pad" (−1e4), "finfo" (float32 min), "holes" (masked runs inside the sequence), "one" (a row with one valid key)
}

func (c bandCase) attrs() ops.LocalPooledAttrs {
	return ops.LocalPooledAttrs{Scale: 0.4, Block: c.blk, Reach: c.reach, Band: true, WindowLeft: c.left, WindowRight: c.right}
}

func (c bandCase) inputs(seed uint64) (q, k, v, bias *onnx.Tensor) {
	rng := rand.New(rand.NewPCG(seed, 43))
	q, k, v = randQKV(rng, 1, c.b, c.h, c.s, c.d, c.dv)
	switch c.bias {
	case "pad":
		bias = padBias(c.s, -1e4, 0, c.s/3)
	case "finfo":
		bias = padBias(c.s, -math.MaxFloat32, c.s/4, c.s/2)
	case "one":
		bias = padBias(c.s, -1e9, 0, c.s-1)
	case "holes":
		// Row 0: every third key masked; row 1: a run of 2·max(L,R)+3
		// masked keys mid-sequence, so that the queries at its centre see
		// no valid key in their band while the sequence has some (a block
		// can have valid keys that a query's band does not).
		d := make([]float32, 2*c.s)
		for j := 0; j < c.s; j++ {
			if j%3 == 1 {
				d[j] = -1e4
			}
		}
		run := 2*max(c.left, c.right) + 3
		for j := c.s/2 - run/2; j < c.s/2-run/2+run && j < c.s; j++ {
			if j >= 0 {
				d[c.s+j] = -math.MaxFloat32
			}
		}
		bias = onnx.NewFloat([]int{2, 1, 1, c.s}, d)
	}
	return q, k, v, bias
}

func bandCases() []bandCase {
	return []bandCase{
		{"L=R=2/b2/r1/pad", 2, 2, 11, 4, 3, 2, 1, 2, 2, "pad"},
		{"L=R=2/b2/r1/holes", 2, 2, 17, 4, 3, 2, 1, 2, 2, "holes"},
		{"L=R=64/b64/r1/S=300", 2, 2, 300, 8, 6, 64, 1, 64, 64, "pad"},
		{"L=R=64/b64/r1/S=300/holes", 2, 1, 300, 8, 6, 64, 1, 64, 64, "holes"},
		{"causal L=5 R=0/b5/r1/S=23", 2, 3, 23, 6, 4, 5, 1, 5, 0, "finfo"},
		{"causal L=4 R=0/b4/r1/holes", 2, 2, 21, 4, 5, 4, 1, 4, 0, "holes"},
		{"L=3 R=7/b4/r2/S=19", 2, 2, 19, 5, 3, 4, 2, 3, 7, "pad"},
		{"L=6 R=1/b3/r2/S=20", 1, 2, 20, 4, 2, 3, 2, 6, 1, "none"},
		{"L=R=0/b1/r0", 2, 2, 9, 4, 3, 1, ops.NoReach, 0, 0, "pad"},
		{"L=R=0/b4/r0 aligned", 2, 2, 14, 4, 3, 4, ops.NoReach, 0, 0, "finfo"},
		{"S<b/L=R=8/b8/r1", 2, 2, 5, 4, 6, 8, 1, 8, 8, "pad"},
		{"band covers S/L=R=12/b12", 2, 2, 10, 4, 3, 12, 1, 12, 12, "finfo"},
		{"one valid key", 2, 2, 13, 4, 3, 3, 1, 2, 3, "one"},
	}
}

// TestLocalPooledBandMatchesDense: the Go kernel's band mode is the dense
// float64 attention restricted to the band.
func TestLocalPooledBandMatchesDense(t *testing.T) {
	for _, c := range bandCases() {
		t.Run(c.name, func(t *testing.T) {
			q, k, v, bias := c.inputs(1)
			a := c.attrs()
			got, err := ops.LocalPooled(q, k, v, bias, a)
			if err != nil {
				t.Fatal(err)
			}
			want := DenseBandAttention(q, k, v, bias, float64(a.Scale), c.left, c.right)
			scale := 1e-3
			for _, w := range want {
				scale = math.Max(scale, math.Abs(w))
			}
			if d := maxDiff(t, got.Floats(), want); d > 1e-5*scale {
				t.Errorf("max abs error vs the dense float64 band attention %.3g > %.3g", d, 1e-5*scale)
			}
		})
	}
}

// TestLocalPooledBandDiffers guards the reference: the band changes the
// output (a band wider than the sequence would not), and the kernel gives
// zeros exactly where the band holds no valid key.
func TestLocalPooledBandDiffers(t *testing.T) {
	c := bandCase{"", 2, 1, 17, 4, 3, 2, 1, 2, 2, "holes"}
	q, k, v, bias := c.inputs(5)
	a := c.attrs()
	banded, err := ops.LocalPooled(q, k, v, bias, a)
	if err != nil {
		t.Fatal(err)
	}
	a.Band, a.WindowLeft, a.WindowRight = false, 0, 0
	blocks, err := ops.LocalPooled(q, k, v, bias, a)
	if err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(t, banded.Floats(), widen(blocks.Floats())); d < 1e-3 {
		t.Errorf("the band changed the output by only %.3g", d)
	}
	// Row 1's masked run: the query at its centre has no valid key within 2.
	centre := c.s / 2
	for x, o := range banded.Floats()[(c.s+centre)*c.dv : (c.s+centre+1)*c.dv] {
		if o != 0 {
			t.Errorf("query %d of row 1 (no valid key in its band): output %d = %g, want 0", centre, x, o)
		}
	}
}

// TestLocalPooledBandFunctionMatchesKernel: the function body's band in
// onnxruntime agrees with the Go kernel.
func TestLocalPooledBandFunctionMatchesKernel(t *testing.T) {
	requireORT(t)
	for _, opset := range []int64{11, 13, 17, 18} {
		for i, c := range bandCases() {
			if opset != 17 && i%3 != 0 {
				continue // every case at one opset, a third at the others
			}
			t.Run(fmt.Sprintf("opset%d/%s", opset, c.name), func(t *testing.T) {
				q, k, v, bias := c.inputs(2)
				if bias == nil {
					bias = onnx.NewFloat([]int{1, 1, 1, 1}, []float32{0})
				}
				a := c.attrs()
				want, err := ops.LocalPooled(q, k, v, bias, a)
				if err != nil {
					t.Fatal(err)
				}
				fn, err := ops.LocalPooledFunction(opset, a)
				if err != nil {
					t.Fatal(err)
				}
				node := ops.NewLocalPooledNode("lp", []string{"Q", "K", "V", "key_bias"}, "out", a)
				in := map[string]*onnx.Tensor{"Q": q, "K": k, "V": v, "key_bias": bias}
				got := runORT(t, oneNodeModel(t, node, fn, opset, in), in)
				t.Logf("relative error %.2g", checkClose(t, "onnxruntime vs Go kernel", got, want, 1e-4))
			})
		}
	}
}

// TestLocalPooledBandFunctionLinear: the band body holds no [S,S] value:
// no constant of the body is larger than a few values (the band mask is
// built by Range), so its size does not grow with the window either.
func TestLocalPooledBandFunctionLinear(t *testing.T) {
	small, err := ops.LocalPooledFunction(17, ops.LocalPooledAttrs{Scale: 0.5, Block: 2, Band: true, WindowLeft: 2, WindowRight: 2})
	if err != nil {
		t.Fatal(err)
	}
	big, err := ops.LocalPooledFunction(17, ops.LocalPooledAttrs{Scale: 0.5, Block: 4096, Band: true, WindowLeft: 4095, WindowRight: 0})
	if err != nil {
		t.Fatal(err)
	}
	if a, b := proto.Size(small), proto.Size(big); b > a+64 {
		t.Errorf("function body of a 4096-key window is %d bytes, of a 2-key one %d", b, a)
	}
}

// TestLocalPooledBandHalfInORT: the float16 body (TypedFunction) of the
// band runs in onnxruntime and agrees with the float32 kernel on the same
// rounded inputs within one unit in the last place.
func TestLocalPooledBandHalfInORT(t *testing.T) {
	requireORT(t)
	for _, c := range []bandCase{bandCases()[1], bandCases()[4], bandCases()[6]} {
		for _, opset := range []int64{13, 17} {
			t.Run(fmt.Sprintf("opset%d/%s", opset, c.name), func(t *testing.T) {
				q, k, v, bias := c.inputs(3)
				if bias == nil {
					bias = onnx.NewFloat([]int{1, 1, 1, 1}, []float32{0})
				}
				in := map[string]*onnx.Tensor{"Q": q, "K": k, "V": v, "key_bias": bias}
				for name, x := range in {
					if name == "key_bias" {
						// float32's minimum overflows float16 to −Inf,
						// which the op reads as padding too; −1e4 rounds
						// to −1e4 in float16.
						continue
					}
					in[name] = widenHalf(roundTo(x, onnx.Float16))
				}
				a := c.attrs()
				hc := halfCase{
					node: ops.NewLocalPooledNode("lp", []string{"Q", "K", "V", "key_bias"}, "out", a),
					in:   in,
					half: []string{"Q", "K", "V", "key_bias"},
				}
				fn32, err := ops.LocalPooledFunction(opset, a)
				if err != nil {
					t.Fatal(err)
				}
				fn, err := ops.TypedFunction(fn32, onnx.Float16)
				if err != nil {
					t.Fatal(err)
				}
				m, feed := typedModel(t, hc, fn, opset, onnx.Float16)
				got := runORT(t, m, feed)
				// The reference sees the key bias as onnxruntime does
				// (rounded to float16).
				want32, err := ops.LocalPooled(in["Q"], in["K"], in["V"], widenHalf(feed["key_bias"]), a)
				if err != nil {
					t.Fatal(err)
				}
				if off := ulpOff(t, got, widen(want32.Floats()), onnx.Float16); off > 1.01 {
					t.Errorf("onnxruntime float16 vs float32 kernel: %.2f units in the last place (want ≤ 1)", off)
				}
			})
		}
	}
}

// TestLocalPooledBandNode: a band is written as window_left and
// window_right (R = 0 included), read back, and absent without a band.
func TestLocalPooledBandNode(t *testing.T) {
	in := []string{"Q", "K", "V", "key_bias"}
	for _, a := range []ops.LocalPooledAttrs{
		{Scale: 0.5, Block: 64, Reach: 1, Band: true, WindowLeft: 64, WindowRight: 64},
		{Scale: 0.5, Block: 8, Reach: 1, Band: true, WindowLeft: 8, WindowRight: 0},
		{Scale: 0.5, Block: 1, Reach: ops.NoReach, Band: true},
	} {
		n := ops.NewLocalPooledNode("lp", in, "out", a)
		if l, r := onnx.AttrInt(n, "window_left", -9), onnx.AttrInt(n, "window_right", -9); l != int64(a.WindowLeft) || r != int64(a.WindowRight) {
			t.Errorf("%+v: node has window_left %d, window_right %d", a, l, r)
		}
		if err := ops.CheckNode(n); err != nil {
			t.Errorf("%+v: CheckNode: %v", a, err)
		}
		got, err := ops.ParseLocalPooledAttrs(n)
		if err != nil || !got.Band || got.WindowLeft != a.WindowLeft || got.WindowRight != a.WindowRight || got.Block != a.Block || got.Reach != a.Reach {
			t.Errorf("ParseLocalPooledAttrs(NewLocalPooledNode(%+v)) = %+v, %v", a, got, err)
		}
	}
	n := ops.NewLocalPooledNode("lp", in, "out", ops.LocalPooledAttrs{Scale: 0.5, Block: 4})
	for _, at := range n.Attribute {
		if strings.HasPrefix(at.GetName(), "window_") {
			t.Errorf("a node without a band has %s", at.GetName())
		}
	}
	got, err := ops.ParseLocalPooledAttrs(n)
	if err != nil || got.Band || got.WindowLeft != ops.NoWindow || got.WindowRight != ops.NoWindow {
		t.Errorf("no band: parsed %+v, %v", got, err)
	}
}

// TestLocalPooledBandErrors: what the band excludes is an error naming
// the op and the attribute, never a panic, in the Go kernel (struct and
// node), the function builder and CheckNode.
func TestLocalPooledBandErrors(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 23))
	q := randTensor(rng, 1, 1, 2, 9, 4)
	v := randTensor(rng, 1, 1, 2, 9, 3)
	band := func(blk, reach, l, r int) ops.LocalPooledAttrs {
		return ops.LocalPooledAttrs{Scale: 0.5, Block: blk, Reach: reach, Band: true, WindowLeft: l, WindowRight: r}
	}
	withSegments := band(4, 1, 2, 2)
	withSegments.Segments = 2
	withSinks := band(4, 1, 2, 2)
	withSinks.SinkFirst = true
	withLast := band(4, 1, 2, 2)
	withLast.SinkLast = true
	noFlag := ops.LocalPooledAttrs{Scale: 0.5, Block: 4, WindowLeft: 3, WindowRight: 3}
	for _, c := range []struct {
		name string
		a    ops.LocalPooledAttrs
		want string
	}{
		{"band with segments", withSegments, "segments 2, want 0"},
		{"band with first sink", withSinks, `sinks "first", want none`},
		{"band with last sink", withLast, `sinks "last", want none`},
		{"blocks do not cover the left width", band(4, 1, 5, 2), "block 4 × reach 1 = 4 does not cover the band"},
		{"blocks do not cover the right width", band(3, 2, 1, 7), "block·reach ≥ 7"},
		{"reach 0 and a width", band(4, ops.NoReach, 1, 0), "block 4 × reach 0 = 0"},
		{"no block", band(0, 1, 0, 0), "segments 0"},
		{"negative left", band(4, 1, -2, 2), "window_left -2, want -1..65536"},
		{"negative right", band(4, 1, 2, -3), "window_right -3, want -1..65536"},
		{"right unset", band(4, 1, 2, ops.NoWindow), "a band needs both"},
		{"left unset", band(4, 1, ops.NoWindow, 0), "a band needs both"},
		{"huge width", band(4, 1, ops.MaxLocalBlock+1, 0), "window_left 65537"},
		{"widths without Band", noFlag, "without Band"},
	} {
		_, err := ops.LocalPooled(q, q, v, nil, c.a)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "ops: LocalPooledAttention: ") {
			t.Errorf("%s: kernel error %v, want one mentioning %q", c.name, err, c.want)
		}
		if _, err := ops.LocalPooledFunction(17, c.a); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: function error %v, want one mentioning %q", c.name, err, c.want)
		}
	}
	// Nodes: a width below −1 fails CheckNode; one width alone reads as a
	// band without the other, which the kernel refuses.
	kernel, err := kernels.Lookup(ops.Domain, ops.LocalPooledOp, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		attrs    map[string]int64
		check    bool // CheckNode refuses it (else only the kernel)
		wantText string
	}{
		{"window_left -2", map[string]int64{"window_left": -2, "window_right": 1}, true, "window_left -2, want -1..65536"},
		{"window_right -5", map[string]int64{"window_left": 1, "window_right": -5}, true, "window_right -5"},
		{"window_left alone", map[string]int64{"window_left": 2}, false, "a band needs both"},
		{"window_right alone", map[string]int64{"window_right": 0}, false, "a band needs both"},
		{"band with segments", map[string]int64{"window_left": 1, "window_right": 1, "segments": 2}, false, "segments 2, want 0"},
	} {
		n := ops.NewLocalPooledNode("n1", []string{"Q", "K", "V"}, "out", ops.LocalPooledAttrs{Scale: 0.5, Block: 4})
		for name, x := range c.attrs {
			n.Attribute = append(n.Attribute, &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(x)})
		}
		err := ops.CheckNode(n)
		if c.check && (err == nil || !strings.Contains(err.Error(), c.wantText) || !strings.Contains(err.Error(), `node "n1"`)) {
			t.Errorf("%s: CheckNode error %v, want one naming the node and mentioning %q", c.name, err, c.wantText)
		}
		if !c.check && err != nil {
			t.Errorf("%s: CheckNode: %v", c.name, err)
		}
		_, err = kernel(&kernels.Context{Node: n, Opset: 1}, []*onnx.Tensor{q, q, v})
		if err == nil || !strings.Contains(err.Error(), c.wantText) {
			t.Errorf("%s: kernel error %v, want one mentioning %q", c.name, err, c.wantText)
		}
	}
}
