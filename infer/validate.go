package infer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"

	"github.com/linearize/linearize/kernels"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

// DefaultTolerance is the agreement ValidateOps requires between a custom
// op's ONNX function body (run by onnxruntime) and its Go kernel: the max
// abs difference relative to the output's scale (max |Go output|).
const DefaultTolerance = 1e-4

// Precision floors of the tolerance: a node whose output is float16 or
// bfloat16 is computed in float32 by both sides and rounded once, so two
// correct results may differ by one unit in the last place of the
// largest output (2^-10 and 2^-7 of the output scale).
const (
	Float16Tolerance  = 1.0 / 1024
	BFloat16Tolerance = 1.0 / 128
)

// ModelTolerance is the default agreement between two backends' runs of
// a whole model, for an output of element type dt: DefaultTolerance for
// float32 and float64, 16 units in the last place of the output's scale
// for float16 (2^-6) and bfloat16 (2^-3). Each layer of a half-precision
// model rounds its values, so two correct backends drift apart with
// depth by about √layers units: 4.9 (2^-10 each) on a 22-layer float16
// ModernBERT-base at 128 tokens, 0.7 to 1.5 on the two-layer published
// fixtures (compare-backends --random-inputs; docs/library.md).
func ModelTolerance(dt onnx.DataType) float64 {
	switch dt {
	case onnx.Float16:
		return 16 * Float16Tolerance
	case onnx.BFloat16:
		return 16 * BFloat16Tolerance
	}
	return DefaultTolerance
}

// ModelPrecision is the narrowest floating-point type m's weights are
// stored in: BFloat16 or Float16 when an initializer of at least 1024
// elements is, else Float. A model converted to float16 with float32
// inputs and outputs (keep_io_types) computes in float16 all the same.
func ModelPrecision(m *onnxpb.ModelProto) onnx.DataType {
	dt := onnx.Float
	for _, t := range m.GetGraph().GetInitializer() {
		n := int64(1)
		for _, d := range t.GetDims() {
			n *= d
		}
		if n < 1024 {
			continue
		}
		switch onnx.DataType(t.GetDataType()) {
		case onnx.BFloat16:
			return onnx.BFloat16
		case onnx.Float16:
			dt = onnx.Float16
		}
	}
	return dt
}

// DefaultMaxGuarded is the share of a PerformerAttention node's output
// rows that its denominator guard may decide before the check fails: a
// larger share means the estimator is used outside its range (the trig
// kernel on a pretrained model's logit scale), whatever the agreement.
const DefaultMaxGuarded = 0.05

// ErrNotConverted is matched by errors.Is when ValidateOps is given a model
// with no node of the domain it checks.
var ErrNotConverted = errors.New("no converted ops")

// ValidateOptions configures ValidateOps.
type ValidateOptions struct {
	// Backend runs the model (DefaultBackend when empty: "ort" when
	// onnxruntime is built in) with the function body each converted node
	// carries: onnxruntime executes it, or the native backend interprets
	// its standard ops (never the Go kernel, which is the reference).
	Backend string
	Threads int
	// Tolerance on Diff.Scaled, the floor of the agreement; DefaultTolerance
	// when 0. A node beyond it still passes when both sides are within
	// float32 rounding of its function body evaluated in float64
	// (OpCheck.Rounding, RoundingFactor), unless Tolerance is below
	// StrictTolerance.
	Tolerance float64
	// Domain selects the nodes to check; ops.Domain ("ai.linearize") when
	// empty.
	Domain string
	// MaxGuarded is the largest share of guard-decided rows a node may
	// have (DefaultMaxGuarded when 0; 1 allows any).
	MaxGuarded float64
	// everyFloat64 evaluates every node's body in float64, not only the
	// nodes beyond the tolerance (tests).
	everyFloat64 bool
}

// OpCheck is the result for one converted node.
type OpCheck struct {
	Index  int    `json:"index"` // order among the checked nodes (the layer for one op per layer)
	Node   string `json:"node"`
	Op     string `json:"op"`
	Output string `json:"output"`
	Diff   Diff   `json:"diff"`
	OK     bool   `json:"ok"`
	Error  string `json:"error,omitempty"`
	// GuardedRows counts, for a node of an op whose kernel guards rows
	// (ops.GuardedRows; PerformerAttention), the output rows of Rows that
	// the op's denominator guard decides rather than the estimator
	// (ops.PerformerGuardedRows: trig or causal denominators
	// below epsilon, batches without a valid key). A large share
	// fails the check when they exceed ValidateOptions.MaxGuarded of Rows.
	GuardedRows int `json:"guarded_rows,omitempty"`
	Rows        int `json:"rows,omitempty"`
	// Tolerance is the tolerance this node was held to: the option, or
	// the precision floor of a float16/bfloat16 output when larger.
	Tolerance float64 `json:"tolerance"`
	// Rounding is the float64 check of a node whose disagreement exceeds
	// Tolerance (nil for the others): the node still passes when both
	// sides are within float32 rounding of the function body evaluated in
	// float64 (see RoundingFactor), and a failure names the side that is
	// off.
	Rounding *Rounding `json:"rounding,omitempty"`
}

// Validation is the result of ValidateOps.
type Validation struct {
	Backend   string    `json:"backend"`
	Tolerance float64   `json:"tolerance"`
	Checks    []OpCheck `json:"checks"`
}

// OK reports whether every node was checked and agreed.
func (v *Validation) OK() bool {
	for _, c := range v.Checks {
		if !c.OK {
			return false
		}
	}
	return len(v.Checks) > 0
}

// Failed counts the nodes that failed.
func (v *Validation) Failed() int {
	n := 0
	for _, c := range v.Checks {
		if !c.OK {
			n++
		}
	}
	return n
}

// ValidateOps checks every node of the given custom domain in m's graph:
// it runs m on feed with the nodes' inputs and outputs exposed, recomputes
// each node from its captured inputs with the Go kernel registered in
// package kernels (by package ops, for the custom ops), and compares that
// with what the backend produced. A node whose two sides disagree beyond
// the tolerance is evaluated once more, its function body in float64, and
// passes when both sides are within float32 rounding of that
// (OpCheck.Rounding; see RoundingFactor). An error is returned only when
// the model cannot be run at all; per-node failures (including a missing
// kernel) are reported in the checks.
func ValidateOps(m *onnxpb.ModelProto, feed map[string]*onnx.Tensor, opt ValidateOptions) (*Validation, error) {
	if m == nil || m.Graph == nil {
		return nil, fmt.Errorf("infer: validate: model has no graph")
	}
	if opt.Backend == "" {
		opt.Backend = DefaultBackend
	}
	if opt.Tolerance == 0 {
		opt.Tolerance = DefaultTolerance
	}
	if opt.Tolerance < 0 {
		return nil, fmt.Errorf("infer: validate: tolerance %g must be positive", opt.Tolerance)
	}
	if opt.Domain == "" {
		opt.Domain = ops.Domain
	}
	if opt.MaxGuarded == 0 {
		opt.MaxGuarded = DefaultMaxGuarded
	}
	if opt.MaxGuarded < 0 || opt.MaxGuarded > 1 {
		return nil, fmt.Errorf("infer: validate: guarded-row share %g must be in (0, 1]", opt.MaxGuarded)
	}
	ix := onnx.NewIndex(m.Graph)
	var nodes []*onnxpb.NodeProto
	var expose []string
	seen := map[string]bool{}
	add := func(name string) {
		if name != "" && !seen[name] && ix.Initializers[name] == nil {
			seen[name] = true
			expose = append(expose, name)
		}
	}
	for _, n := range m.Graph.Node {
		if n.GetDomain() != opt.Domain {
			continue
		}
		nodes = append(nodes, n)
		for _, in := range n.Input {
			add(in)
		}
		for _, o := range n.Output {
			add(o)
		}
	}
	if len(nodes) == 0 {
		return nil, fmt.Errorf("infer: validate: the model has no %s nodes (not a converted model?): %w", opt.Domain, ErrNotConverted)
	}
	var s Session
	var err error
	if opt.Backend == "native" {
		// The native backend would run each node with the very Go kernel
		// it is checked against; it runs the function bodies instead
		// (standard ops, interpreted in Go).
		s, err = NewNativeSessionWith(m, NativeOptions{Options: Options{Threads: opt.Threads, Expose: expose}, InlineFunctions: true})
	} else {
		s, err = Open(opt.Backend, m, Options{Threads: opt.Threads, Expose: expose})
	}
	if err != nil {
		return nil, fmt.Errorf("infer: validate: %w", err)
	}
	defer s.Close()
	got, err := s.Run(feed, expose...)
	if err != nil {
		return nil, fmt.Errorf("infer: validate: %w", err)
	}
	opset := onnx.OpsetVersion(m, opt.Domain)
	v := &Validation{Backend: opt.Backend, Tolerance: opt.Tolerance}
	for i, n := range nodes {
		c := OpCheck{Index: i, Node: n.GetName(), Op: n.GetOpType()}
		if len(n.Output) > 0 {
			c.Output = n.Output[0]
		}
		var in []*onnx.Tensor
		var kern *onnx.Tensor
		c.Error, in, kern = checkNode(n, opset, opt, ix, got, &c)
		c.Tolerance = opt.Tolerance
		if t := got[c.Output]; t != nil {
			c.Tolerance = precisionTolerance(t.DType, opt.Tolerance)
		}
		if c.Error == "" && c.Rows > 0 && float64(c.GuardedRows) > opt.MaxGuarded*float64(c.Rows) {
			c.Error = fmt.Sprintf("%d of %d output rows (%.0f%%) decided by the denominator guard, not the estimate: the estimator is used outside its range (more than %.0f%%)",
				c.GuardedRows, c.Rows, 100*float64(c.GuardedRows)/float64(c.Rows), 100*opt.MaxGuarded)
		}
		if c.Error == "" && c.Diff.Mismatch == "" && !c.Diff.HasNonFinite() && opt.Tolerance >= StrictTolerance && (c.Diff.Scaled > c.Tolerance || opt.everyFloat64) {
			// Beyond the floor: float32 rounding, or a wrong result? The
			// function body in float64 tells (see RoundingFactor). With
			// the native backend its output is the body evaluated in
			// float32 already.
			var native32 *onnx.Tensor
			if opt.Backend == "native" {
				native32 = got[c.Output]
			}
			c.Rounding = checkRounding(m, n, in, got[c.Output], kern, native32, opt.Threads)
		}
		c.OK = c.Error == "" && (c.Diff.OK(c.Tolerance) || c.Rounding.explains(c.Diff))
		v.Checks = append(v.Checks, c)
	}
	return v, nil
}

// precisionTolerance raises tol to the rounding floor of a half-precision
// output.
func precisionTolerance(dt onnx.DataType, tol float64) float64 {
	switch dt {
	case onnx.Float16:
		return max(tol, Float16Tolerance)
	case onnx.BFloat16:
		return max(tol, BFloat16Tolerance)
	}
	return tol
}

// checkNode recomputes n with its Go kernel and fills c.Diff; it returns a
// reason when that is impossible.
func checkNode(n *onnxpb.NodeProto, opset int64, opt ValidateOptions, ix *onnx.Index, got map[string]*onnx.Tensor, c *OpCheck) (reason string, in []*onnx.Tensor, kern *onnx.Tensor) {
	if n.GetDomain() == ops.Domain {
		// The node against its op's schema: inputs, attribute names,
		// types and ranges.
		if err := ops.CheckNode(n); err != nil {
			return err.Error(), nil, nil
		}
	}
	k, err := kernels.Lookup(n.GetDomain(), n.GetOpType(), opset)
	if err != nil {
		return err.Error(), nil, nil
	}
	in = make([]*onnx.Tensor, len(n.Input))
	for j, name := range n.Input {
		switch {
		case name == "":
		case ix.Initializers[name] != nil:
			t, err := onnx.DecodeTensor(ix.Initializers[name])
			if err != nil {
				return fmt.Sprintf("initializer %q: %v", name, err), nil, nil
			}
			in[j] = t
		default:
			t, ok := got[name]
			if !ok {
				return fmt.Sprintf("input %q was not captured", name), nil, nil
			}
			in[j] = t
		}
	}
	ctx := &kernels.Context{Node: n, Opset: opset, Threads: opt.Threads}
	outs, err := k(ctx, in)
	if err != nil {
		return fmt.Sprintf("Go kernel: %v", err), nil, nil
	}
	// The kernel accepted these inputs, so a count cannot fail.
	if g, rows, ok := ops.GuardedRows(ctx, in); ok {
		c.GuardedRows, c.Rows = g, rows
	}
	if len(outs) == 0 || got[c.Output] == nil {
		return "no output to compare", nil, nil
	}
	// The Go kernel is the reference.
	c.Diff = CompareTensors(got[c.Output], outs[0])
	if nf := c.Diff.NonFinite("the "+opt.Backend+" output (function body)", "the Go kernel's"); nf != "" {
		// A NaN on both sides is no agreement: fail, and say whether the
		// node was fed non-finite values (NaN or Inf weights upstream).
		nan, inf := 0, 0
		for _, t := range in {
			n, i := CountNonFinite(t)
			nan, inf = nan+n, inf+i
		}
		if nan+inf > 0 {
			nf += "; " + strings.TrimPrefix(NonFiniteText(nan, inf, "its inputs", 0, 0, ""), "non-finite: ")
		}
		return nf, in, outs[0]
	}
	return "", in, outs[0]
}

// CountNonFinite counts the NaN and the infinite elements of a
// floating-point tensor (0, 0 for other types and nil).
func CountNonFinite(t *onnx.Tensor) (nan, inf int) {
	if t == nil {
		return 0, 0
	}
	count := func(x float64) {
		switch {
		case math.IsNaN(x):
			nan++
		case math.IsInf(x, 0):
			inf++
		}
	}
	switch d := t.Data.(type) {
	case []float32:
		for _, x := range d {
			count(float64(x))
		}
	case []float64:
		for _, x := range d {
			count(x)
		}
	case []uint16:
		if t.DType == onnx.Float16 || t.DType == onnx.BFloat16 {
			if v, err := t.AsFloat64s(); err == nil {
				for _, x := range v {
					count(x)
				}
			}
		}
	}
	return nan, inf
}

// WriteTable prints one line per checked node.
func (v *Validation) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\top\tnode\tmax abs\tscale\terr/scale\tmax rel\tcosine\tresult")
	for _, c := range v.Checks {
		res := "ok"
		switch {
		case !c.OK:
			res = "FAIL"
		case !c.Diff.OK(c.Tolerance):
			res = "ok (rounding)"
		}
		if c.Error != "" {
			fmt.Fprintf(tw, "%d\t%s\t%s\t\t\t\t\t\t%s: %s\n", c.Index, c.Op, c.Node, res, c.Error)
			continue
		}
		if c.Diff.Mismatch != "" {
			fmt.Fprintf(tw, "%d\t%s\t%s\t\t\t\t\t\t%s: %s\n", c.Index, c.Op, c.Node, res, c.Diff.Mismatch)
			continue
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%.3g\t%.3g\t%.3g\t%.3g\t%.7f\t%s\n", c.Index, c.Op, c.Node,
			c.Diff.MaxAbs, c.Diff.Scale, c.Diff.Scaled, c.Diff.MaxRel, c.Diff.Cosine, res)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	raised := 0.0
	rounding := 0
	for _, c := range v.Checks {
		raised = max(raised, c.Tolerance)
		if c.Rounding != nil && c.Error == "" && !c.Diff.OK(c.Tolerance) {
			verdict := "FAIL"
			if c.OK {
				verdict, rounding = "ok", rounding+1
			}
			fmt.Fprintf(w, "%s: %s node %s: %s\n", verdict, c.Op, c.Node, c.Rounding.Cause(v.Backend, c.Diff.Scaled))
		}
		if c.GuardedRows > 0 && c.Error == "" {
			fmt.Fprintf(w, "note: %s node %s: %d of %d output rows decided by the denominator guard (denominator below epsilon, or no valid key), not by the estimate\n", c.Op, c.Node, c.GuardedRows, c.Rows)
		}
	}
	if raised > v.Tolerance {
		fmt.Fprintf(w, "note: half-precision outputs are held to one unit in their last place (%.3g of the output scale) instead of %g: both sides compute in float32 and round once\n", raised, v.Tolerance)
	}
	more := ""
	if rounding > 0 {
		more = fmt.Sprintf("; %d of them beyond it but within float32 rounding of the function body evaluated in float64", rounding)
	}
	_, err := fmt.Fprintf(w, "%d of %d ops within tolerance %g (max abs error relative to output scale%s)\n", len(v.Checks)-v.Failed(), len(v.Checks), v.Tolerance, more)
	return err
}

// WriteJSON writes the validation as indented JSON.
func (v *Validation) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		*Validation
		OK bool `json:"ok"`
	}{v, v.OK()})
}
