package ops_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/ops"
)

// windowCases are WindowAttention configurations: the band cases whose
// blocks are what WindowAttention uses (b = max(L, R, 1), reach 1).
func windowCases() []bandCase {
	var out []bandCase
	for _, c := range bandCases() {
		if c.reach == 1 && c.blk == max(c.left, c.right, 1) {
			out = append(out, c)
		}
	}
	return out
}

func (c bandCase) windowAttrs() ops.WindowAttrs {
	return ops.WindowAttrs{Scale: 0.4, Left: c.left, Right: c.right}
}

// TestWindowMatchesDense: WindowAttention's Go kernel is the dense float64
// attention restricted to the band (DenseBandAttention).
func TestWindowMatchesDense(t *testing.T) {
	cases := windowCases()
	if len(cases) < 5 {
		t.Fatalf("%d window cases", len(cases))
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q, k, v, bias := c.inputs(7)
			got, err := ops.WindowAttend(q, k, v, bias, c.windowAttrs())
			if err != nil {
				t.Fatal(err)
			}
			want := DenseBandAttention(q, k, v, bias, 0.4, c.left, c.right)
			scale := 0.0
			for _, x := range want {
				scale = math.Max(scale, math.Abs(x))
			}
			for i, x := range got.Floats() {
				if d := math.Abs(float64(x) - want[i]); d > 1e-5*scale {
					t.Fatalf("element %d: %g, want %g", i, x, want[i])
				}
			}
		})
	}
}

// TestWindowFunctionMatchesKernel: the function body in onnxruntime
// computes what the Go kernel does.
func TestWindowFunctionMatchesKernel(t *testing.T) {
	requireORT(t)
	for _, opset := range []int64{13, 17} {
		for _, c := range windowCases() {
			t.Run(fmt.Sprintf("opset%d/%s", opset, c.name), func(t *testing.T) {
				q, k, v, bias := c.inputs(3)
				if bias == nil {
					bias = onnx.NewFloat([]int{1, 1, 1, 1}, []float32{0})
				}
				a := c.windowAttrs()
				want, err := ops.WindowAttend(q, k, v, bias, a)
				if err != nil {
					t.Fatal(err)
				}
				fn, err := ops.WindowFunction(opset, a)
				if err != nil {
					t.Fatal(err)
				}
				node := ops.NewWindowNode("w", []string{"Q", "K", "V", "key_bias"}, "out", a)
				if err := ops.CheckNode(node); err != nil {
					t.Fatal(err)
				}
				in := map[string]*onnx.Tensor{"Q": q, "K": k, "V": v, "key_bias": bias}
				got := runORT(t, oneNodeModel(t, node, fn, opset, in), in)
				checkClose(t, "onnxruntime vs Go kernel", got, want, 1e-4)
			})
		}
	}
}

// TestWindowErrors: widths out of range are refused with the op's name.
func TestWindowErrors(t *testing.T) {
	q, k, v, _ := bandCases()[0].inputs(1)
	for _, a := range []ops.WindowAttrs{{Left: -1, Right: 2}, {Left: 2, Right: -3}, {Left: ops.MaxLocalBlock + 1, Right: 0}} {
		if _, err := ops.WindowAttend(q, k, v, nil, a); err == nil || !strings.Contains(err.Error(), ops.WindowOp) {
			t.Errorf("%+v: err %v, want a WindowAttention error", a, err)
		}
		if _, err := ops.WindowFunction(17, a); err == nil {
			t.Errorf("%+v: function built", a)
		}
	}
}
