package ops_test

import (
	"fmt"
	"testing"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

// runInlined runs the model in the native backend with the function body
// expanded into standard ops (the kernel is not used), so that the body is
// checked without onnxruntime too.
func runInlined(t *testing.T, m *onnxpb.ModelProto, inputs map[string]*onnx.Tensor) *onnx.Tensor {
	t.Helper()
	s, err := infer.NewNativeSessionWith(m, infer.NativeOptions{InlineFunctions: true})
	return runOut(t, "native (functions inlined)", s, err, inputs)
}

func TestFunctionBodiesInNativeBackend(t *testing.T) {
	for _, opset := range []int64{11, 17, 18} {
		for _, c := range perfCases() {
			if c.perHead {
				continue
			}
			t.Run(fmt.Sprintf("opset%d/performer/%s", opset, c.name), func(t *testing.T) {
				m, in, want := c.bodyModel(t, 8, opset)
				checkClose(t, "inlined function vs Go kernel", runInlined(t, m, in), want, 1e-4)
			})
		}
		for _, c := range linCases() {
			if c.perHead || c.n != 12 {
				continue
			}
			t.Run(fmt.Sprintf("opset%d/linformer/%s", opset, c.name), func(t *testing.T) {
				m, in, want := c.bodyModel(t, 8, opset)
				checkClose(t, "inlined function vs Go kernel", runInlined(t, m, in), want, 1e-4)
			})
		}
	}
}

// One onnxruntime session serves several batch sizes and sequence lengths:
// the function bodies have no fixed shapes.
func TestFunctionsDynamicShapes(t *testing.T) {
	requireORT(t)
	type run struct{ b, s int }
	runs := []run{{1, 3}, {3, 9}, {2, 1}}
	for _, op := range []string{ops.PerformerOp, ops.LinformerOp} {
		var fn *onnxpb.FunctionProto
		var node *onnxpb.NodeProto
		var err error
		var names []string
		if op == ops.PerformerOp {
			fn, err = ops.PerformerFunction(ops.KernelPositive, 17)
			names = []string{"Q", "K", "V", "Omega", "key_bias"}
			node = ops.NewPerformerNode("p", names, "out", ops.PerformerAttrs{Scale: 0.3})
		} else {
			fn, err = ops.LinformerFunction(17)
			names = []string{"Q", "K", "V", "E", "F", "key_bias"}
			node = ops.NewLinformerNode("l", names, "out", ops.LinformerAttrs{Scale: 0.3})
		}
		if err != nil {
			t.Fatal(err)
		}
		check := sharedSession(t, node, fn)
		for i, r := range runs {
			var in map[string]*onnx.Tensor
			var want *onnx.Tensor
			if op == ops.PerformerOp {
				c := perfCase{kernel: ops.KernelPositive, b: r.b, h: 2, s: r.s, d: 8, dv: 4, m: 12, sigma: 0.5}
				q, k, v, omega, _ := c.inputs(uint64(20 + i))
				bias := padBias(r.s, -1e4, make([]int, r.b)...)
				bias.Floats()[len(bias.Floats())-1] = -1e4
				in = map[string]*onnx.Tensor{"Q": q, "K": k, "V": v, "Omega": omega, "key_bias": bias}
				want, err = ops.Performer(q, k, v, omega, bias, ops.PerformerAttrs{Scale: 0.3})
			} else {
				c := linCase{b: r.b, h: 2, s: r.s, d: 8, dv: 4, k: 3, n: 10, sigma: 1}
				q, k, v, e, f, _ := c.inputs(uint64(20 + i))
				bias := padBias(r.s, -1e4, make([]int, r.b)...)
				bias.Floats()[len(bias.Floats())-1] = -1e4
				in = map[string]*onnx.Tensor{"Q": q, "K": k, "V": v, "E": e, "F": f, "key_bias": bias}
				want, err = ops.Linformer(q, k, v, e, f, bias, ops.LinformerAttrs{Scale: 0.3})
			}
			if err != nil {
				t.Fatal(err)
			}
			check(fmt.Sprintf("%s B=%d S=%d", op, r.b, r.s), in, want)
		}
	}
}
