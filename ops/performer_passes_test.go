package ops_test

import (
	"strings"
	"testing"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/ops"
)

// featurePasses runs the function body of variant v inlined in the native
// backend, with every value of the body exposed, and returns the body's
// nodes that touch a tensor of at least B·H·n·M elements (the features),
// products (MatMul) aside: the elementwise passes over the features.
func featurePasses(t *testing.T, c variantCase, v ops.PerformerVariant, kernel ops.PerformerKernel) []string {
	t.Helper()
	in := c.inputs(5)
	if in.Bias == nil {
		in.Bias = onnx.NewFloat([]int{1, 1, 1, 1}, []float32{0})
	}
	fn, err := ops.PerformerFunctionFor(v, 17)
	if err != nil {
		t.Fatal(err)
	}
	a := c.attrs()
	a.Kernel = kernel
	names, feed := perfNodeInputs(in, v.Balance, in.DerfA != nil)
	node := ops.NewPerformerNode("perf", names, "out", a)
	m := oneNodeModel(t, node, fn, 17, feed)
	// The native backend names the inlined values "<node>/<call>/<value>".
	var expose []string
	for _, n := range fn.Node {
		for _, o := range n.Output {
			if o != "out" {
				expose = append(expose, "perf/1/"+o)
			}
		}
	}
	s, err := infer.NewNativeSessionWith(m, infer.NativeOptions{Options: infer.Options{Threads: 1, Expose: expose}, InlineFunctions: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	vals, err := s.Run(feed, append(expose, "out")...)
	if err != nil {
		t.Fatal(err)
	}
	size := func(name string) int {
		if name == "" {
			return 0
		}
		x, ok := vals[name]
		if !ok {
			x, ok = vals["perf/1/"+name]
		}
		if !ok {
			x, ok = feed[name]
		}
		if !ok {
			t.Fatalf("value %s not computed", name)
		}
		return x.Len()
	}
	big := c.b * c.h * max(c.s, c.sq) * c.m
	var passes []string
	for _, n := range fn.Node {
		if n.GetOpType() == "MatMul" {
			continue
		}
		largest := 0
		for _, x := range append(append([]string(nil), n.Input...), n.Output...) {
			largest = max(largest, size(x))
		}
		if largest >= big {
			passes = append(passes, n.GetOpType())
		}
	}
	return passes
}

// TestPerformerFunctionPasses counts the elementwise passes of each
// positive body over the [B,H,n,M] features (the part of the body that
// decides its speed at long lengths) and requires the documented budget:
// keys ReduceMax, Sub, Exp; queries one Softmax.
func TestPerformerFunctionPasses(t *testing.T) {
	base := variantCase{b: 2, h: 2, s: 40, d: 8, dv: 5, m: 24, sigma: 0.5, mean: 0.2, bias: "pad", features: ops.FeaturesFavorPlus}
	for _, c := range []struct {
		name   string
		c      variantCase
		kernel ops.PerformerKernel
		budget int
	}{
		{"favor+", base, ops.KernelPositive, 4},
		{"trig", base, ops.KernelTrig, 0},
		{"favor+/center", variantCase{center: true}, ops.KernelPositive, 4},
		{"favor+/balance", variantCase{balance: "shared"}, ops.KernelPositive, 4},
		{"favor++", variantCase{features: ops.FeaturesFavorPP}, ops.KernelPositive, 4},
		{"favor++/center/balance", variantCase{features: ops.FeaturesFavorPP, center: true, balance: "perhead"}, ops.KernelPositive, 4},
		{"sderf", variantCase{features: ops.FeaturesSDERF, balance: "shared"}, ops.KernelPositive, 4},
		{"aderf/center", variantCase{features: ops.FeaturesADERF, balance: "perhead", center: true}, ops.KernelPositive, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			vc := base
			vc.center, vc.balance = c.c.center, c.c.balance
			if c.c.features != "" {
				vc.features = c.c.features
			}
			v := vc.variant()
			v.Kernel = c.kernel
			p := featurePasses(t, vc, v, c.kernel)
			t.Logf("%d nodes over the features: %s", len(p), strings.Join(p, " "))
			if c.budget > 0 && len(p) > c.budget {
				t.Errorf("%d passes over the features, budget %d", len(p), c.budget)
			}
		})
	}
}
