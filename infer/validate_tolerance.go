package infer

import (
	"fmt"
	"math"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// How validate tells float32 rounding from a wrong result.
//
// The custom ops exponentiate scores (softmax, LARA's importance weights,
// Performer's positive features) and divide by sums of such terms, so how
// far two correct float32 evaluations may drift apart depends on the op's
// inputs: scores that are differences of large terms (a large component
// common to every key, which softmax cancels exactly but float32 rounds
// at full size) turn the last bit of a dot product into 1e-4 of the
// output scale and more. A fixed tolerance then either fails correct
// models (LaraAttention on e5-small-v2 at 1.4–2.5× 1e-4) or is so loose
// that it passes wrong ones on well-conditioned inputs.
//
// So a node whose two sides disagree beyond the tolerance (the floor) is
// measured against the truth instead of against each other: its function
// body is evaluated once more in float64 (every float constant, cast and
// input widened to double; the native interpreter runs it on the node's
// captured inputs). Three float32 evaluations of the op are compared with
// that float64 value: the backend's output (onnxruntime running the
// body), the Go kernel's, and the body run in float32 by the native
// interpreter (with --backend native, the backend's output itself). The
// last one, which neither checked side influences, measures the op's
// float32 rounding on these inputs — its condition times float32's
// precision, measured rather than derived, so it covers every op, option
// and input alike. The node passes when both sides are within a small
// multiple of it (RoundingFactor in RMS over the output, PeakFactor at
// the worst element): their disagreement is then rounding, whatever its
// size.
//
// A wrong result is not rounding. A body that computes something other
// than the kernel is evaluated in float64 as the same other thing, so the
// kernel is far from it while the backend is not ("the function body and
// the Go kernel compute different things"); a backend that evaluates the
// body wrongly is far from it while the kernel is not. The message names
// which (Rounding.Cause). Errors are relative to the float64 output's
// scale (max |value|), like Diff.Scaled. Nodes within the tolerance are
// not evaluated again: --tolerance stays a floor below which nothing else
// is asked, and the user can raise it (or, below StrictTolerance, make it
// literal).
//
// The price: where float32 itself is off by ρ, a wrong result below a few
// ρ passes (it still fails on the well-conditioned nodes of the same op).
// Analytic bounds per op (LARA's max/min importance-weight ratio,
// Performer's denominator) were the alternative; they need one derivation
// per op and feature map, each loose by an unknown constant, a new op
// would have none, and they could not say which side is wrong.

// RoundingFactor and PeakFactor bound each side's error from the float64
// evaluation, in RMS and at the worst element, by multiples of the native
// float32 evaluation's. The worst element of an error sits in the few
// worst-conditioned rows, and which evaluation rounds worst there is
// chance (summation order, onnxruntime's vectorised exp, the Go kernel's
// float64 normalisers): on 1200 seeded LaraAttention inputs with large
// key offsets that disagree beyond 1e-4 (up to 2e-2), onnxruntime's max
// error was up to 11× the native one's (median 1.0, 99th percentile 5.5),
// while its RMS error was at most 2.9× (99th percentile 1.6), the Go
// kernel's at most 1.5×. RMS is the stable measure, the peak bound only
// catches a few elements far off; a wrong result is off by what it
// computes differently, orders of magnitude above rounding on
// well-conditioned inputs.
const (
	RoundingFactor = 8
	PeakFactor     = 32
)

// StrictTolerance is float32's unit roundoff, 2⁻²⁴. A tolerance below it
// asks for agreement finer than float32 can hold, to the last bit: it is
// then held literally, without the float64 check, so that a user can
// still ask whether the two sides round alike.
const StrictTolerance = 0x1p-24

// RoundingError is one evaluation's distance from the float64 evaluation
// of the function body, relative to the float64 output's scale.
type RoundingError struct {
	Max float64 `json:"max"` // max abs error / scale
	RMS float64 `json:"rms"` // root-mean-square error / scale
}

// Rounding is the float64 check of a node whose sides disagree beyond the
// tolerance.
type Rounding struct {
	// Float32 is the body evaluated in float32 by the native interpreter:
	// the op's float32 rounding on these inputs.
	Float32 RoundingError `json:"float32"`
	// Backend and Kernel are the backend's output and the Go kernel's.
	Backend RoundingError `json:"backend"`
	Kernel  RoundingError `json:"kernel"`
	// Explained reports whether both sides are within float32 rounding
	// (Within): their disagreement is rounding, and the node passes
	// although it exceeds the tolerance.
	Explained bool `json:"explained"`
	// Error says why there is no float64 check (no function body in the
	// model, an op the interpreter cannot run in float64, a non-finite
	// result); the node is then held to the tolerance alone.
	Error string `json:"error,omitempty"`
}

// Within reports whether e is within float32 rounding: at most
// RoundingFactor times the native float32 evaluation's RMS error and
// PeakFactor times its max error.
func (r *Rounding) Within(e RoundingError) bool {
	return e.RMS <= RoundingFactor*r.Float32.RMS && e.Max <= PeakFactor*r.Float32.Max
}

// checkRounding evaluates n's function body in float64 (and in float32
// unless native32, the backend's output when that backend is the native
// interpreter, is given) on the inputs in and compares the backend's
// output got and the Go kernel's output kern with it.
func checkRounding(m *onnxpb.ModelProto, n *onnxpb.NodeProto, in []*onnx.Tensor, got, kern, native32 *onnx.Tensor, threads int) *Rounding {
	r := &Rounding{}
	ref, err := evalBody(m, n, in, true, threads)
	if err != nil {
		r.Error = "no float64 evaluation: " + err.Error()
		return r
	}
	if nan, inf := CountNonFinite(ref); nan+inf > 0 {
		r.Error = fmt.Sprintf("no float64 evaluation: it holds %d NaN and %d Inf values", nan, inf)
		return r
	}
	if native32 == nil {
		if native32, err = evalBody(m, n, in, false, threads); err != nil {
			r.Error = "no float32 evaluation by the native interpreter: " + err.Error()
			return r
		}
	}
	want, err := ref.AsFloat64s()
	if err != nil {
		r.Error = "float64 evaluation: " + err.Error()
		return r
	}
	scale := 0.0
	for _, y := range want {
		scale = max(scale, math.Abs(y))
	}
	if scale < 1e-12 {
		scale = 1 // as Diff.Scaled: absolute errors for an all-zero output
	}
	var errs [3]RoundingError
	for i, t := range []*onnx.Tensor{native32, got, kern} {
		x, err := t.AsFloat64s()
		if err == nil && len(x) != len(want) {
			err = fmt.Errorf("%d elements, the float64 evaluation %d", len(x), len(want))
		}
		if err != nil {
			r.Error = "float64 evaluation: " + err.Error()
			return r
		}
		var ss, mx float64
		for j, y := range want {
			d := math.Abs(x[j] - y)
			if math.IsNaN(d) || math.IsInf(d, 0) {
				if i == 0 {
					// No measure of the rounding: nothing is explained.
					r.Error = "the body's float32 evaluation by the native interpreter is not finite"
					return r
				}
				d = math.Inf(1)
			}
			ss += d * d
			mx = max(mx, d)
		}
		errs[i] = RoundingError{Max: mx / scale, RMS: math.Sqrt(ss/float64(len(want))) / scale}
	}
	r.Float32, r.Backend, r.Kernel = errs[0], errs[1], errs[2]
	r.Explained = r.Within(r.Backend) && r.Within(r.Kernel)
	return r
}

// explains reports whether r accepts a node whose disagreement d is
// beyond the tolerance: both sides within float32 rounding of the float64
// evaluation, every value finite and comparable.
func (r *Rounding) explains(d Diff) bool {
	return r != nil && r.Error == "" && r.Explained && d.Mismatch == "" && !d.HasNonFinite()
}

// Cause words the float64 check of a node: that the disagreement diff
// (err/scale) is float32 rounding, or which side is off from the function
// body evaluated in float64 and what that means. backend names the
// backend ("ort", "native").
func (r *Rounding) Cause(backend string, diff float64) string {
	if r == nil {
		return ""
	}
	if r.Error != "" {
		return r.Error
	}
	side := backendName(backend)
	e := func(x RoundingError) string { return fmt.Sprintf("%.2g (RMS %.2g)", x.Max, x.RMS) }
	rounding := fmt.Sprintf("the body evaluated in float32 is %s off: float32 rounding of this op on these inputs (allowed: %d× in RMS, %d× at the worst element)",
		e(r.Float32), RoundingFactor, PeakFactor)
	okB, okK := r.Within(r.Backend), r.Within(r.Kernel)
	switch {
	case okB && okK:
		return fmt.Sprintf("err/scale %.3g is float32 rounding, not a wrong result: %s is %s and the Go kernel %s from the function body evaluated in float64, and %s",
			diff, side, e(r.Backend), e(r.Kernel), rounding)
	case okB:
		return fmt.Sprintf("the function body and the Go kernel (the reference) compute different things: the body evaluated in float64 is %s from the Go kernel but %s from %s, and %s",
			e(r.Kernel), e(r.Backend), side, rounding)
	case okK:
		return fmt.Sprintf("%s is wrong, not the op: it is %s from the function body evaluated in float64, the Go kernel %s, and %s",
			side, e(r.Backend), e(r.Kernel), rounding)
	default:
		return fmt.Sprintf("neither side is within float32 rounding of the function body evaluated in float64 (%s %s, the Go kernel %s): the kernel computes something other than the body, and the backend evaluates the body wrongly; %s",
			side, e(r.Backend), e(r.Kernel), rounding)
	}
}

// backendName names a backend's output in messages.
func backendName(backend string) string {
	switch backend {
	case "ort":
		return "onnxruntime's output"
	case "native":
		return "the native interpreter's output"
	case "":
		return "the backend's output"
	}
	return "the " + backend + " output"
}

// evalBody runs n alone, as its model-local function body expanded by the
// native interpreter, on the inputs in (nil for an absent optional one);
// with wide, the body and the inputs are widened to float64 first
// (widenFunction). It returns n's first output.
func evalBody(m *onnxpb.ModelProto, n *onnxpb.NodeProto, in []*onnx.Tensor, wide bool, threads int) (*onnx.Tensor, error) {
	var fn *onnxpb.FunctionProto
	for _, f := range m.GetFunctions() {
		if f.GetDomain() == n.GetDomain() && f.GetName() == n.GetOpType() && f.GetOverload() == n.GetOverload() {
			fn = f
		}
	}
	if fn == nil {
		return nil, fmt.Errorf("the model has no function body for %s.%s", n.GetDomain(), n.GetOpType())
	}
	if len(n.Output) == 0 || n.Output[0] == "" {
		return nil, fmt.Errorf("node has no output")
	}
	if wide {
		var err error
		if fn, err = widenFunction(fn); err != nil {
			return nil, err
		}
	}
	g := &onnxpb.GraphProto{Name: proto.String("validate_float64"), Node: []*onnxpb.NodeProto{proto.Clone(n).(*onnxpb.NodeProto)}}
	feed := map[string]*onnx.Tensor{}
	for i, name := range n.Input {
		if name == "" || feed[name] != nil {
			continue
		}
		if i >= len(in) || in[i] == nil {
			return nil, fmt.Errorf("input %q is missing", name)
		}
		t := in[i]
		if wide {
			t = toDouble(t)
		}
		feed[name] = t
		dims := make([]onnx.Dim, len(t.Shape))
		for j, d := range t.Shape {
			dims[j] = onnx.Dim{Value: int64(d)}
		}
		g.Input = append(g.Input, onnx.MakeValueInfo(name, t.DType, dims))
	}
	g.Output = []*onnxpb.ValueInfoProto{onnx.MakeValueInfo(n.Output[0], onnx.Undefined, nil)}
	one := &onnxpb.ModelProto{
		IrVersion:   proto.Int64(max(m.GetIrVersion(), 9)),
		OpsetImport: m.GetOpsetImport(),
		Graph:       g,
		Functions:   []*onnxpb.FunctionProto{fn},
	}
	s, err := NewNativeSessionWith(one, NativeOptions{Options: Options{Threads: threads}, InlineFunctions: true})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	res, err := s.Run(feed, n.Output[0])
	if err != nil {
		return nil, err
	}
	out := res[n.Output[0]]
	if out == nil {
		return nil, fmt.Errorf("no output %q", n.Output[0])
	}
	if wide && out.DType != onnx.Double {
		return nil, fmt.Errorf("the widened body computes %s, not float64", onnx.TypeName(out.DType))
	}
	return out, nil
}

// halfOrFloat reports whether dt is float32, float16 or bfloat16: the
// element types widenFunction raises to float64.
func halfOrFloat(dt onnx.DataType) bool {
	return dt == onnx.Float || dt == onnx.Float16 || dt == onnx.BFloat16
}

// toDouble widens a float32, float16 or bfloat16 tensor to float64 and
// returns any other tensor as it is.
func toDouble(t *onnx.Tensor) *onnx.Tensor {
	if t == nil || !halfOrFloat(t.DType) {
		return t
	}
	v, err := t.AsFloat64s()
	if err != nil {
		return t
	}
	return &onnx.Tensor{DType: onnx.Double, Shape: append([]int(nil), t.Shape...), Data: v}
}

// widenFunction returns a copy of fn that computes in float64 where fn
// computes in float32 (or half precision): every Cast to a float type
// casts to double, every float constant (Constant, ConstantOfShape) is a
// double, so that with double inputs every float value in the body is a
// double. Integer and boolean values are untouched. A body whose float
// values come from elsewhere (an op with a dtype attribute) fails to run
// in float64, which the caller reports.
func widenFunction(fn *onnxpb.FunctionProto) (*onnxpb.FunctionProto, error) {
	out := proto.Clone(fn).(*onnxpb.FunctionProto)
	var nodes []*onnxpb.NodeProto
	castAfter := func(n *onnxpb.NodeProto) {
		y := n.Output[0]
		n.Output[0] = y + "/narrow"
		nodes = append(nodes, n, &onnxpb.NodeProto{
			OpType: proto.String("Cast"), Input: []string{y + "/narrow"}, Output: []string{y},
			Attribute: []*onnxpb.AttributeProto{{Name: proto.String("to"), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(int64(onnx.Double))}},
		})
	}
	for _, n := range out.Node {
		if n.GetDomain() != "" && n.GetDomain() != "ai.onnx" {
			nodes = append(nodes, n)
			continue
		}
		switch n.GetOpType() {
		case "Cast":
			for _, a := range n.Attribute {
				if a.GetName() == "to" && a.GetRefAttrName() == "" && halfOrFloat(onnx.DataType(a.GetI())) {
					a.I = proto.Int64(int64(onnx.Double))
				}
			}
			nodes = append(nodes, n)
		case "Constant", "ConstantOfShape":
			if len(n.Output) != 1 {
				return nil, fmt.Errorf("%s node with %d outputs", n.GetOpType(), len(n.Output))
			}
			var tensor *onnxpb.AttributeProto
			floatAttr := false
			for _, a := range n.Attribute {
				switch a.GetName() {
				case "value":
					tensor = a
				case "value_float", "value_floats":
					floatAttr = true
				}
			}
			switch {
			case floatAttr:
				castAfter(n)
			case tensor != nil && tensor.GetRefAttrName() != "":
				// A tensor passed in by attribute: its type is unknown
				// here; a float one makes the body fail in float64.
				nodes = append(nodes, n)
			case tensor != nil:
				wide, err := widenTensorProto(tensor.GetT())
				if err != nil {
					return nil, fmt.Errorf("%s node: %w", n.GetOpType(), err)
				}
				tensor.T = wide
				nodes = append(nodes, n)
			case n.GetOpType() == "ConstantOfShape":
				// No value: float32 zeros.
				castAfter(n)
			default:
				nodes = append(nodes, n)
			}
		default:
			nodes = append(nodes, n)
		}
	}
	out.Node = nodes
	return out, nil
}

// widenTensorProto returns tp as float64 when it is a float32 or half
// tensor, else tp itself.
func widenTensorProto(tp *onnxpb.TensorProto) (*onnxpb.TensorProto, error) {
	if tp == nil || !halfOrFloat(onnx.DataType(tp.GetDataType())) {
		return tp, nil
	}
	t, err := onnx.DecodeTensor(tp)
	if err != nil {
		return nil, err
	}
	return onnx.EncodeTensor(tp.GetName(), toDouble(t))
}
