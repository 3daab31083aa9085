package infer

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/kernels"
	"github.com/linearize/linearize/models"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
	"google.golang.org/protobuf/proto"
)

// validateBackends are the backends a test runs: the native interpreter
// always, onnxruntime when installed.
func validateBackends() []string {
	if ORTAvailable() == nil {
		return []string{"native", "ort"}
	}
	return []string{"native"}
}

// oneNode is a model whose graph is one custom-op node reading the graph
// inputs in (every dimension symbolic) and writing "out", with its
// function body fn, at default-domain opset 17.
func oneNode(t *testing.T, node *onnxpb.NodeProto, fn *onnxpb.FunctionProto, in map[string]*onnx.Tensor) *onnxpb.ModelProto {
	t.Helper()
	g := &onnxpb.GraphProto{Name: proto.String("one_node"), Node: []*onnxpb.NodeProto{node}}
	seen := map[string]bool{}
	for _, name := range node.Input {
		if name == "" || seen[name] {
			continue
		}
		seen[name] = true
		x := in[name]
		dims := make([]onnx.Dim, len(x.Shape))
		for i := range dims {
			dims[i] = onnx.Dim{Value: -1, Param: fmt.Sprintf("%s_%d", name, i)}
		}
		g.Input = append(g.Input, onnx.MakeValueInfo(name, x.DType, dims))
	}
	g.Output = []*onnxpb.ValueInfoProto{onnx.MakeValueInfo("out", onnx.Float, nil)}
	m := &onnxpb.ModelProto{
		IrVersion:   proto.Int64(10),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(17)}},
		Graph:       g,
	}
	if err := ops.ImportFunction(m, fn); err != nil {
		t.Fatal(err)
	}
	return m
}

func gaussian(rng *rand.Rand, sigma float64, shape ...int) *onnx.Tensor {
	v := make([]float32, onnx.NumElements(shape))
	for i := range v {
		v[i] = float32(sigma * rng.NormFloat64())
	}
	return onnx.NewFloat(shape, v)
}

// shifted adds one random vector of norm ≈ offset·√D to every row of x
// (last axis D). Pretrained models' keys can share such a large
// component, since softmax attention is invariant to it (q·c is the same
// for every key); float32 still rounds the scores at their full
// magnitude, so the rounding error of LARA's output grows with the
// offset: an ill-conditioned input, on which a correct op must pass.
func shifted(rng *rand.Rand, x *onnx.Tensor, offset float64) *onnx.Tensor {
	d := x.Shape[len(x.Shape)-1]
	c := make([]float32, d)
	for i := range c {
		c[i] = float32(offset * rng.NormFloat64())
	}
	for i := range x.Floats() {
		x.Floats()[i] += c[i%d]
	}
	return x
}

// laraNode is a LaraAttention model (B=2, H=2, S=64, D=16, C=8) whose
// keys share a common offset (see shifted; the float32 rounding grows
// about as its square), the last four keys of batch row 1 padding;
// seeded.
func laraNode(t *testing.T, seed uint64, offset float64) (*onnxpb.ModelProto, map[string]*onnx.Tensor) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 33))
	B, H, S, D, C := 2, 2, 64, 16, 8
	bias := onnx.NewFloat([]int{B, 1, 1, S}, make([]float32, B*S))
	for s := S - 4; s < S; s++ {
		bias.Floats()[S+s] = -1e4
	}
	in := map[string]*onnx.Tensor{
		"Q":        gaussian(rng, 1, B, H, S, D),
		"K":        shifted(rng, gaussian(rng, 1, B, H, S, D), offset),
		"V":        gaussian(rng, 1, B, H, S, D),
		"Noise":    gaussian(rng, 1, 1, C, D),
		"key_bias": bias,
	}
	a := ops.LaraAttrs{Scale: 0.25, Landmarks: C}
	fn, err := ops.LaraFunction(17, a)
	if err != nil {
		t.Fatal(err)
	}
	return oneNode(t, ops.NewLaraNode("lara", []string{"Q", "K", "V", "Noise", "key_bias"}, "out", a), fn, in), in
}

// performerNode is a PerformerAttention model (positive FAVOR+ features,
// M=32) on queries and keys of standard deviation sigma; seeded.
func performerNode(t *testing.T, seed uint64, sigma float64) (*onnxpb.ModelProto, map[string]*onnx.Tensor) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 34))
	B, H, S, D, M := 2, 2, 64, 16, 32
	in := map[string]*onnx.Tensor{
		"Q":        gaussian(rng, sigma, B, H, S, D),
		"K":        gaussian(rng, sigma, B, H, S, D),
		"V":        gaussian(rng, 1, B, H, S, D),
		"Omega":    gaussian(rng, 1, 1, M, D),
		"key_bias": onnx.NewFloat([]int{1, 1, 1, 1}, []float32{0}),
	}
	a := ops.PerformerAttrs{Scale: 0.25}
	fn, err := ops.PerformerFunction(ops.KernelPositive, 17)
	if err != nil {
		t.Fatal(err)
	}
	return oneNode(t, ops.NewPerformerNode("performer", []string{"Q", "K", "V", "Omega", "key_bias"}, "out", a), fn, in), in
}

// validateOne validates the one-node model m on in and returns its check.
func validateOne(t *testing.T, m *onnxpb.ModelProto, in map[string]*onnx.Tensor, opt ValidateOptions) (OpCheck, string) {
	t.Helper()
	v, err := ValidateOps(m, in, opt)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Checks) != 1 {
		t.Fatalf("%d checks, want 1", len(v.Checks))
	}
	var buf bytes.Buffer
	if err := v.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	return v.Checks[0], buf.String()
}

// TestValidateIllConditionedPasses: correct ops on inputs whose float32
// rounding exceeds DefaultTolerance pass, because both sides are within
// float32 rounding of the function body evaluated in float64; inputs
// within the tolerance pass without that evaluation.
func TestValidateIllConditionedPasses(t *testing.T) {
	cases := []struct {
		name string
		make func(*testing.T) (*onnxpb.ModelProto, map[string]*onnx.Tensor)
		// beyond: the case is built to disagree beyond DefaultTolerance
		// (checked: a case that does not is no test of the rule).
		beyond bool
	}{
		{"lara/offset 0", func(t *testing.T) (*onnxpb.ModelProto, map[string]*onnx.Tensor) { return laraNode(t, 1, 0) }, false},
		{"lara/offset 100/seed 1", func(t *testing.T) (*onnxpb.ModelProto, map[string]*onnx.Tensor) { return laraNode(t, 1, 100) }, true},
		{"lara/offset 100/seed 2", func(t *testing.T) (*onnxpb.ModelProto, map[string]*onnx.Tensor) { return laraNode(t, 2, 100) }, true},
		{"lara/offset 200", func(t *testing.T) (*onnxpb.ModelProto, map[string]*onnx.Tensor) { return laraNode(t, 3, 200) }, true},
		{"performer/sigma 1", func(t *testing.T) (*onnxpb.ModelProto, map[string]*onnx.Tensor) { return performerNode(t, 1, 1) }, false},
		{"performer/sigma 20", func(t *testing.T) (*onnxpb.ModelProto, map[string]*onnx.Tensor) { return performerNode(t, 1, 20) }, false},
	}
	for _, c := range cases {
		for _, backend := range validateBackends() {
			t.Run(c.name+"/"+backend, func(t *testing.T) {
				m, in := c.make(t)
				ch, table := validateOne(t, m, in, ValidateOptions{Backend: backend})
				if !ch.OK {
					t.Fatalf("a correct op fails:\n%s", table)
				}
				if !c.beyond {
					if ch.Rounding != nil && ch.Diff.Scaled <= DefaultTolerance {
						t.Errorf("evaluated in float64 although within the tolerance: %+v", ch.Rounding)
					}
					return
				}
				if ch.Diff.Scaled <= DefaultTolerance {
					t.Fatalf("err/scale %.3g is within the tolerance %g: the case is not ill-conditioned", ch.Diff.Scaled, DefaultTolerance)
				}
				r := ch.Rounding
				if r == nil || r.Error != "" || !r.Explained {
					t.Fatalf("rounding check %+v:\n%s", r, table)
				}
				// The rule, recomputed from the figures it reports.
				for _, e := range []RoundingError{r.Backend, r.Kernel} {
					if e.RMS > RoundingFactor*r.Float32.RMS || e.Max > PeakFactor*r.Float32.Max {
						t.Errorf("explained although %+v is beyond float32 rounding %+v", e, r.Float32)
					}
				}
				// The two sides cannot disagree by more than their
				// distances from the float64 evaluation (the scales
				// differ: max |Go kernel| vs max |float64|).
				if ch.Diff.Scaled > 1.01*(r.Backend.Max+r.Kernel.Max) {
					t.Errorf("err/scale %.3g > backend %.3g + kernel %.3g from float64", ch.Diff.Scaled, r.Backend.Max, r.Kernel.Max)
				}
				if !strings.Contains(table, "ok (rounding)") || !strings.Contains(table, "is float32 rounding, not a wrong result") {
					t.Errorf("table does not say why the node passes:\n%s", table)
				}
				// The tolerance stays a floor the user can raise: above
				// the disagreement, no float64 evaluation happens.
				ch, _ = validateOne(t, m, in, ValidateOptions{Backend: backend, Tolerance: 2 * ch.Diff.Scaled})
				if !ch.OK || ch.Rounding != nil {
					t.Errorf("raised tolerance: ok %v, rounding %+v", ch.OK, ch.Rounding)
				}
				// Below float32's precision it is held literally.
				ch, _ = validateOne(t, m, in, ValidateOptions{Backend: backend, Tolerance: StrictTolerance / 2})
				if ch.OK || ch.Rounding != nil {
					t.Errorf("strict tolerance: ok %v, rounding %+v", ch.OK, ch.Rounding)
				}
			})
		}
	}
}

// editConstant changes the first float Constant of op's body holding
// from (value_float) to to: the body then computes another function.
func editConstant(t *testing.T, m *onnxpb.ModelProto, op string, from, to float32) {
	t.Helper()
	for _, f := range m.Functions {
		if f.GetName() != op {
			continue
		}
		for _, n := range f.Node {
			if n.GetOpType() != "Constant" {
				continue
			}
			for _, a := range n.Attribute {
				if a.GetName() == "value_float" && a.GetRefAttrName() == "" && a.GetF() == from {
					a.F = proto.Float32(to)
					return
				}
			}
		}
	}
	t.Fatalf("no constant %g in %s", from, op)
}

// wrongKernelDomain holds LaraAttention under a Go kernel that computes
// it with 1.1× the scale attribute: a kernel that is wrong, against a
// correct function body.
const wrongKernelDomain = "test.validate.wrong"

func init() {
	kernels.Register(wrongKernelDomain, ops.LaraOp, 1, func(ctx *kernels.Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
		n := proto.Clone(ctx.Node).(*onnxpb.NodeProto)
		n.Domain = proto.String(ops.Domain)
		for _, a := range n.Attribute {
			if a.GetName() == "scale" {
				a.F = proto.Float32(1.1 * a.GetF())
			}
		}
		k, err := kernels.Lookup(ops.Domain, ops.LaraOp, 1)
		if err != nil {
			return nil, err
		}
		return k(&kernels.Context{Node: n, Opset: ctx.Opset, Threads: ctx.Threads}, in)
	})
}

// TestValidateWrongOpFails: an op that computes something else fails on
// well- and ill-conditioned inputs alike, and the message names the cause
// (the body and the kernel differ; which side is off from float64).
func TestValidateWrongOpFails(t *testing.T) {
	const ill = 30 // key offset: float32 rounding allows more than DefaultTolerance
	cases := []struct {
		name           string
		offset         float64
		domain         string
		break_         func(*testing.T, *onnxpb.ModelProto)
		illConditioned bool
	}{
		{"body ×1.01", 0, "", func(t *testing.T, m *onnxpb.ModelProto) { scaleBody(t, m, ops.LaraOp, 1.01) }, false},
		{"body ×1.01, ill-conditioned", ill, "", func(t *testing.T, m *onnxpb.ModelProto) { scaleBody(t, m, ops.LaraOp, 1.01) }, true},
		// ½‖μ‖² with 0.45: the proposals' normalisers are wrong.
		{"body constant 0.5 → 0.45", 0, "", func(t *testing.T, m *onnxpb.ModelProto) { editConstant(t, m, ops.LaraOp, 0.5, 0.45) }, false},
		{"body constant 0.5 → 0.45, ill-conditioned", ill, "", func(t *testing.T, m *onnxpb.ModelProto) { editConstant(t, m, ops.LaraOp, 0.5, 0.45) }, true},
		{"kernel with 1.1× scale", 0, wrongKernelDomain, nil, false},
		{"kernel with 1.1× scale, ill-conditioned", ill, wrongKernelDomain, nil, true},
	}
	for _, c := range cases {
		for _, backend := range validateBackends() {
			t.Run(c.name+"/"+backend, func(t *testing.T) {
				m, in := laraNode(t, 5, c.offset)
				if c.break_ != nil {
					c.break_(t, m)
				}
				opt := ValidateOptions{Backend: backend}
				if c.domain != "" {
					m.Graph.Node[0].Domain = proto.String(c.domain)
					m.Functions[0].Domain = proto.String(c.domain)
					m.OpsetImport = append(m.OpsetImport, &onnxpb.OperatorSetIdProto{Domain: proto.String(c.domain), Version: proto.Int64(1)})
					opt.Domain = c.domain
				}
				ch, table := validateOne(t, m, in, opt)
				if ch.OK {
					t.Fatalf("a wrong op passes:\n%s", table)
				}
				r := ch.Rounding
				if r == nil || r.Error != "" || r.Explained {
					t.Fatalf("rounding check %+v:\n%s", r, table)
				}
				// Body and kernel differ, and the body evaluated in
				// float64 sides with the backend's evaluation of it.
				if r.Within(r.Kernel) || !r.Within(r.Backend) {
					t.Errorf("backend %+v, kernel %+v from float64, float32 rounding %+v: want the kernel off", r.Backend, r.Kernel, r.Float32)
				}
				// The case exercises the rule beyond the fixed tolerance:
				// float32 rounding allows more than DefaultTolerance here.
				if c.illConditioned && PeakFactor*r.Float32.Max <= DefaultTolerance {
					t.Errorf("float32 rounding %+v: the input is not ill-conditioned", r.Float32)
				}
				want := "FAIL: LaraAttention node lara: the function body and the Go kernel (the reference) compute different things"
				if !strings.Contains(table, want) {
					t.Errorf("table does not name the cause %q:\n%s", want, table)
				}
			})
		}
	}
}

// TestRoundingNamesTheSide: checkRounding, given a backend output that
// is off from a correct op, blames the backend; given both sides off,
// says so; given the correct outputs, finds rounding.
func TestRoundingNamesTheSide(t *testing.T) {
	m, in := laraNode(t, 7, 0)
	n := m.Graph.Node[0]
	ins := make([]*onnx.Tensor, len(n.Input))
	for i, name := range n.Input {
		ins[i] = in[name]
	}
	kern, err := ops.Lara(in["Q"], in["K"], in["V"], in["Noise"], in["key_bias"], ops.LaraAttrs{Scale: 0.25, Landmarks: 8})
	if err != nil {
		t.Fatal(err)
	}
	native, err := evalBody(m, n, ins, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	// off adds 1% of the output scale to the values of one output row
	// (query 5 of the first head): a local error.
	off := func(x *onnx.Tensor) *onnx.Tensor {
		y := x.Clone()
		scale := 0.0
		for _, v := range y.Floats() {
			scale = max(scale, math.Abs(float64(v)))
		}
		dv := y.Shape[3]
		for j := 5 * dv; j < 6*dv; j++ {
			y.Floats()[j] += float32(0.01 * scale)
		}
		return y
	}
	for _, c := range []struct {
		name      string
		got, kern *onnx.Tensor
		explained bool
		want      string
	}{
		{"correct", native, kern, true, "is float32 rounding, not a wrong result"},
		{"backend off", off(native), kern, false, "onnxruntime's output is wrong, not the op"},
		{"kernel off", native, off(kern), false, "the function body and the Go kernel (the reference) compute different things"},
		{"both off", off(native), off(kern), false, "neither side is within float32 rounding"},
	} {
		r := checkRounding(m, n, ins, c.got, c.kern, native, 0)
		if r.Error != "" || r.Explained != c.explained {
			t.Errorf("%s: %+v", c.name, r)
		}
		d := CompareTensors(c.got, c.kern)
		if cause := r.Cause("ort", d.Scaled); !strings.Contains(cause, c.want) {
			t.Errorf("%s: cause %q, want %q", c.name, cause, c.want)
		}
	}
}

// TestValidateNonFiniteNeverRounding: a NaN fails whatever float64 says;
// no float64 evaluation is attempted.
func TestValidateNonFiniteNeverRounding(t *testing.T) {
	m, in := laraNode(t, 9, 1)
	in["V"].Floats()[3] = float32(math.NaN()) // a valid key's value: the NaN reaches the output
	for _, backend := range validateBackends() {
		ch, table := validateOne(t, m, in, ValidateOptions{Backend: backend, Tolerance: 1})
		if ch.OK || ch.Rounding != nil || !ch.Diff.HasNonFinite() {
			t.Errorf("%s: ok %v, rounding %+v:\n%s", backend, ch.OK, ch.Rounding, table)
		}
	}
}

// TestFloat64BodiesEveryOp: every op's function body, as the converters
// write it (every option family, and a float16 model), evaluates in
// float64 on the native interpreter, and on these well-conditioned
// inputs each side is within float32 rounding of it.
func TestFloat64BodiesEveryOp(t *testing.T) {
	cfg := models.TinyConfig()
	bert, err := models.BERT(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ccfg := cfg
	ccfg.Causal = true
	causal, err := models.BERT(ccfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg11 := cfg
	cfg11.Opset = 11 // function bodies without value_float constants
	bert11, err := models.BERT(cfg11)
	if err != nil {
		t.Fatal(err)
	}
	mcfg := models.ModernBERTTinyConfig()
	modern, err := models.ModernBERT(mcfg)
	if err != nil {
		t.Fatal(err)
	}
	type conv func() (*onnxpb.ModelProto, *convert.Report, error)
	cases := []struct {
		name string
		base *onnxpb.ModelProto
		conv conv
	}{
		{"performer favor+", bert, func() (*onnxpb.ModelProto, *convert.Report, error) {
			return convert.ToPerformer(bert, convert.PerformerOptions{Features: 16, Seed: 3, FeatureMap: ops.FeaturesFavorPlus, Center: convert.CenterOff})
		}},
		{"performer centred", bert, func() (*onnxpb.ModelProto, *convert.Report, error) {
			return convert.ToPerformer(bert, convert.PerformerOptions{Features: 16, Seed: 3})
		}},
		{"performer favor++", bert, func() (*onnxpb.ModelProto, *convert.Report, error) {
			return convert.ToPerformer(bert, convert.PerformerOptions{Features: 16, Seed: 3, FeatureMap: ops.FeaturesFavorPP})
		}},
		{"performer trig", bert, func() (*onnxpb.ModelProto, *convert.Report, error) {
			return convert.ToPerformer(bert, convert.PerformerOptions{Features: 16, Seed: 3, Kernel: ops.KernelTrig})
		}},
		{"linformer gaussian", bert, func() (*onnxpb.ModelProto, *convert.Report, error) {
			return convert.ToLinformer(bert, convert.LinformerOptions{Init: "gaussian", K: 8, MaxLen: cfg.MaxPositions, Seed: 3})
		}},
		{"linformer pool", bert, func() (*onnxpb.ModelProto, *convert.Report, error) {
			return convert.ToLinformer(bert, convert.LinformerOptions{Init: "pool", K: 4})
		}},
		{"lara", bert, func() (*onnxpb.ModelProto, *convert.Report, error) {
			return convert.ToLARA(bert, convert.LaraOptions{Landmarks: 4, Seed: 3})
		}},
		{"local-pooled", bert, func() (*onnxpb.ModelProto, *convert.Report, error) {
			return convert.ToLocalPooled(bert, convert.LocalPooledOptions{Block: 4, Segments: 2})
		}},
		{"hedgehog", bert, func() (*onnxpb.ModelProto, *convert.Report, error) {
			return convert.ToHedgehog(bert, convert.HedgehogOptions{Features: 8, Block: 4, Seed: 3})
		}},
		{"lara opset 11", bert11, func() (*onnxpb.ModelProto, *convert.Report, error) {
			return convert.ToLARA(bert11, convert.LaraOptions{Landmarks: 4, Seed: 3})
		}},
		{"performer opset 11", bert11, func() (*onnxpb.ModelProto, *convert.Report, error) {
			return convert.ToPerformer(bert11, convert.PerformerOptions{Features: 16, Seed: 3})
		}},
		{"local-pooled opset 11", bert11, func() (*onnxpb.ModelProto, *convert.Report, error) {
			return convert.ToLocalPooled(bert11, convert.LocalPooledOptions{Block: 4, Segments: 2})
		}},
		{"performer causal", causal, func() (*onnxpb.ModelProto, *convert.Report, error) {
			return convert.ToPerformer(causal, convert.PerformerOptions{Features: 16, Seed: 3, FeatureMap: ops.FeaturesFavorPlus, Center: convert.CenterOff, Chunk: 4})
		}},
		{"window", modern, func() (*onnxpb.ModelProto, *convert.Report, error) {
			return convert.ToWindow(modern, convert.WindowOptions{})
		}},
		{"local-pooled on modernbert", modern, func() (*onnxpb.ModelProto, *convert.Report, error) {
			return convert.ToLocalPooled(modern, convert.LocalPooledOptions{Block: 4, Segments: 2})
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, _, err := c.conv()
			if err != nil {
				t.Fatal(err)
			}
			feed := paddedFeed(t, m, 2, 24, 5)
			v, err := ValidateOps(m, feed, ValidateOptions{Backend: "native", everyFloat64: true})
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			v.WriteTable(&buf)
			if !v.OK() {
				t.Fatalf("validation fails:\n%s", buf.String())
			}
			if len(v.Checks) == 0 {
				t.Fatal("no checks")
			}
			for _, ch := range v.Checks {
				r := ch.Rounding
				if r == nil || r.Error != "" || !r.Explained {
					t.Errorf("%s: %+v", ch.Node, r)
					continue
				}
				// A float32 evaluation is not exact: zero would mean the
				// widened body still computed in float32.
				if r.Float32.Max == 0 || r.Float32.Max > DefaultTolerance {
					t.Errorf("%s: float32 rounding %.3g of a well-conditioned input", ch.Node, r.Float32)
				}
			}
		})
	}
}

// TestFloat64BodyHalfPrecision: a float16 model's typed body (inputs cast
// to float32, output to float16) widens to float64 too.
func TestFloat64BodyHalfPrecision(t *testing.T) {
	m, in := laraNode(t, 11, 1)
	fn, err := ops.TypedFunction(m.Functions[0], onnx.Float16)
	if err != nil {
		t.Fatal(err)
	}
	m.Functions[0] = fn
	half := map[string]*onnx.Tensor{}
	for name, x := range in {
		h := make([]uint16, x.Len())
		for i, v := range x.Floats() {
			h[i] = onnx.FloatToHalf(v)
		}
		half[name] = &onnx.Tensor{DType: onnx.Float16, Shape: x.Shape, Data: h}
	}
	for _, vi := range m.Graph.Input {
		vi.Type.GetTensorType().ElemType = proto.Int32(int32(onnx.Float16))
	}
	m.Graph.Output[0].Type.GetTensorType().ElemType = proto.Int32(int32(onnx.Float16))
	n := m.Graph.Node[0]
	ins := make([]*onnx.Tensor, len(n.Input))
	for i, name := range n.Input {
		ins[i] = half[name]
	}
	ref, err := evalBody(m, n, ins, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	if ref.DType != onnx.Double {
		t.Fatalf("float64 evaluation is %s", onnx.TypeName(ref.DType))
	}
	for _, backend := range validateBackends() {
		v, err := ValidateOps(m, half, ValidateOptions{Backend: backend, everyFloat64: true})
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		v.WriteTable(&buf)
		ch := v.Checks[0]
		if !v.OK() || ch.Rounding == nil || ch.Rounding.Error != "" {
			t.Errorf("%s: %+v\n%s", backend, ch.Rounding, buf.String())
		}
	}
}
