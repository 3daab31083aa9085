package kernels

import (
	"slices"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// Control flow: If and Loop run GraphProto attributes (subgraphs). A
// subgraph may read values of the graphs that enclose it by name; the
// interpreter running the node provides them through Context.Scope.

// maxLoopIterations bounds a Loop whose trip count and condition would let
// it run (nearly) forever.
const maxLoopIterations = 1 << 24

// Subgraph is a GraphProto attribute prepared for repeated evaluation:
// nodes in topological order with their kernels, initializers decoded.
type Subgraph struct {
	g      *onnxpb.GraphProto
	nodes  []*onnxpb.NodeProto
	kernel []Kernel
	opset  []int64
	consts map[string]*onnx.Tensor
	// nested are the graph attributes of nodes (per node index) prepared
	// with this one.
	nested []map[*onnxpb.GraphProto]*Subgraph
}

// opsetFor is the opset a node of domain has inside a subgraph of the node
// ctx computes.
func (ctx *Context) opsetFor(domain string) int64 {
	if ctx.Opsets != nil {
		return ctx.Opsets(domain)
	}
	if domain == "" || domain == "ai.onnx" {
		return ctx.Opset
	}
	return 0
}

// CompileSubgraph looks up the kernels of g's nodes (those of nested
// subgraphs too, so that an unsupported op anywhere is reported now) and
// decodes its initializers. opset gives the version of each domain.
func CompileSubgraph(g *onnxpb.GraphProto, opset func(domain string) int64) (*Subgraph, error) {
	return compileSubgraph(g, opset, onnx.NewRefs())
}

// compileSubgraph is CompileSubgraph sharing refs with the levels around
// it, so that a nest of subgraphs costs each one once.
func compileSubgraph(g *onnxpb.GraphProto, opset func(domain string) int64, refs *onnx.Refs) (*Subgraph, error) {
	nodes, err := refs.TopoSort(g)
	if err != nil {
		return nil, err
	}
	sg := &Subgraph{g: g, nodes: nodes, consts: map[string]*onnx.Tensor{}, nested: make([]map[*onnxpb.GraphProto]*Subgraph, len(nodes))}
	for i, n := range nodes {
		v := opset(n.GetDomain())
		k, err := Lookup(n.GetDomain(), n.GetOpType(), v)
		if err != nil {
			return nil, fmtErr("node %q of subgraph %q: %v", n.GetName(), g.GetName(), err)
		}
		sg.kernel = append(sg.kernel, k)
		sg.opset = append(sg.opset, v)
		if sg.nested[i], err = compileAttributes(n, opset, refs); err != nil {
			return nil, err
		}
	}
	for _, t := range g.Initializer {
		v, err := onnx.DecodeTensor(t)
		if err != nil {
			return nil, fmtErr("initializer %q of subgraph %q: %v", t.GetName(), g.GetName(), err)
		}
		sg.consts[t.GetName()] = v
	}
	return sg, nil
}

// CompileAttributes prepares every graph attribute of n (nil when it has
// none).
func CompileAttributes(n *onnxpb.NodeProto, opset func(domain string) int64) (map[*onnxpb.GraphProto]*Subgraph, error) {
	return compileAttributes(n, opset, onnx.NewRefs())
}

func compileAttributes(n *onnxpb.NodeProto, opset func(domain string) int64, refs *onnx.Refs) (map[*onnxpb.GraphProto]*Subgraph, error) {
	var out map[*onnxpb.GraphProto]*Subgraph
	for _, a := range n.Attribute {
		for _, g := range append([]*onnxpb.GraphProto{a.G}, a.Graphs...) {
			if g == nil {
				continue
			}
			sg, err := compileSubgraph(g, opset, refs)
			if err != nil {
				return nil, fmtErr("attribute %s: %v", a.GetName(), err)
			}
			if out == nil {
				out = map[*onnxpb.GraphProto]*Subgraph{}
			}
			out[g] = sg
		}
	}
	return out, nil
}

// compile returns the graph attribute name of the node ctx computes,
// prepared.
func (ctx *Context) compile(name string) (*Subgraph, error) {
	a := ctx.attr(name)
	if a == nil || a.G == nil {
		return nil, ctx.errf("attribute %s (a graph) is required", name)
	}
	if sg, ok := ctx.Subgraphs[a.G]; ok {
		return sg, nil
	}
	sg, err := CompileSubgraph(a.G, ctx.opsetFor)
	if err != nil {
		return nil, ctx.errf("%s: %v", name, err)
	}
	return sg, nil
}

// Run evaluates the subgraph with its formal inputs bound to inputs (in
// order; missing trailing ones are absent) and returns its outputs. Names
// the subgraph does not define are resolved through ctx.Scope, the scope
// of the node that owns the subgraph.
func (sg *Subgraph) Run(ctx *Context, inputs []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if len(inputs) > len(sg.g.Input) {
		return nil, ctx.errf("subgraph %q takes %d inputs, got %d", sg.g.GetName(), len(sg.g.Input), len(inputs))
	}
	vals := make(map[string]*onnx.Tensor, len(sg.consts)+len(sg.nodes))
	for k, v := range sg.consts {
		vals[k] = v
	}
	for i, t := range inputs {
		if t != nil {
			vals[sg.g.Input[i].GetName()] = t
		}
	}
	lookup := func(name string) (*onnx.Tensor, bool) {
		if v, ok := vals[name]; ok {
			return v, true
		}
		if ctx.Scope != nil {
			return ctx.Scope(name)
		}
		return nil, false
	}
	args := make([]*onnx.Tensor, 0, 8)
	for i, n := range sg.nodes {
		args = args[:0]
		for _, in := range n.Input {
			if in == "" {
				args = append(args, nil)
				continue
			}
			v, ok := lookup(in)
			if !ok || v == nil {
				return nil, ctx.errf("subgraph %q: node %q (%s): input %q has no value", sg.g.GetName(), n.GetName(), n.GetOpType(), in)
			}
			args = append(args, v)
		}
		for len(args) > 0 && args[len(args)-1] == nil {
			args = args[:len(args)-1]
		}
		sub := &Context{Node: n, Opset: sg.opset[i], Threads: ctx.Threads, Scope: lookup, Opsets: ctx.Opsets, Subgraphs: sg.nested[i]}
		out, err := sg.kernel[i](sub, args)
		if err != nil {
			return nil, ctx.errf("subgraph %q: %v", sg.g.GetName(), err)
		}
		for j, o := range n.Output {
			if o == "" {
				continue
			}
			if j >= len(out) || out[j] == nil {
				return nil, ctx.errf("subgraph %q: node %q (%s) produced no value for output %q", sg.g.GetName(), n.GetName(), n.GetOpType(), o)
			}
			vals[o] = out[j]
		}
	}
	res := make([]*onnx.Tensor, len(sg.g.Output))
	for i, o := range sg.g.Output {
		v, ok := lookup(o.GetName())
		if !ok || v == nil {
			return nil, ctx.errf("subgraph %q: output %q was not computed", sg.g.GetName(), o.GetName())
		}
		res[i] = v
	}
	return res, nil
}

// scalarBool reads a one-element bool tensor.
func (ctx *Context) scalarBool(t *onnx.Tensor, what string) (bool, error) {
	b, ok := t.Data.([]bool)
	if !ok || len(b) != 1 {
		return false, ctx.errf("%s must be a single bool, got %s", what, t)
	}
	return b[0], nil
}

// ifOp runs then_branch or else_branch.
func ifOp(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 1, 1); err != nil {
		return nil, err
	}
	c, err := ctx.scalarBool(in[0], "cond")
	if err != nil {
		return nil, err
	}
	branch := "else_branch"
	if c {
		branch = "then_branch"
	}
	sg, err := ctx.compile(branch)
	if err != nil {
		return nil, err
	}
	out, err := sg.Run(ctx, nil)
	if err != nil {
		return nil, err
	}
	if ctx.Node != nil && len(out) < len(ctx.Node.Output) {
		return nil, ctx.errf("%s has %d outputs, the node %d", branch, len(out), len(ctx.Node.Output))
	}
	return out, nil
}

// loopOp runs body while the trip count M (if given) is not reached and the
// condition holds: the cond input (if given) before the first iteration,
// then the body's condition output. Inputs: M, cond, then N loop-carried
// initial values. The body maps (iteration, cond, N carried) to (cond, N carried,
// K scan outputs); the node returns the final carried values and each scan
// output stacked over the iterations on a new first axis.
func loopOp(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 0, -1); err != nil {
		return nil, err
	}
	sg, err := ctx.compile("body")
	if err != nil {
		return nil, err
	}
	nCarried := max(len(in)-2, 0)
	if ctx.Node != nil {
		nCarried = max(len(ctx.Node.Input)-2, 0)
	}
	carried := make([]*onnx.Tensor, nCarried)
	for i := range carried {
		if t := opt(in, i+2); t != nil {
			carried[i] = t
		} else {
			return nil, ctx.errf("loop-carried input %d is missing", i)
		}
	}
	nOut := len(sg.g.Output)
	if len(sg.g.Input) != 2+nCarried || nOut < 1+nCarried {
		return nil, ctx.errf("body has %d inputs and %d outputs; with %d loop-carried values it needs %d inputs and at least %d outputs", len(sg.g.Input), nOut, nCarried, 2+nCarried, 1+nCarried)
	}
	nScan := nOut - 1 - nCarried
	trip := int64(-1)
	if m := opt(in, 0); m != nil {
		v, err := ctx.intsInput(m, "M")
		if err != nil || len(v) != 1 {
			return nil, ctx.errf("M must be a single integer, got %s", m)
		}
		trip = max(v[0], 0)
	}
	cond, hasCond := true, false // the condition before the first iteration
	if c := opt(in, 1); c != nil {
		if cond, err = ctx.scalarBool(c, "cond"); err != nil {
			return nil, err
		}
		hasCond = true
	}
	if trip < 0 && !hasCond {
		return nil, ctx.errf("neither a trip count nor a condition: the loop would not end")
	}
	scans := make([][]*onnx.Tensor, nScan)
	condT := &onnx.Tensor{DType: onnx.Bool, Shape: []int{}, Data: []bool{cond}}
	for it := int64(0); (trip < 0 || it < trip) && cond; it++ {
		if it >= maxLoopIterations {
			return nil, ctx.errf("more than %d iterations", maxLoopIterations)
		}
		args := append([]*onnx.Tensor{onnx.NewInt64([]int{}, []int64{it}), condT}, carried...)
		out, err := sg.Run(ctx, args)
		if err != nil {
			return nil, err
		}
		// The body's condition ends the loop even when the node has no
		// cond input (as onnxruntime and the ONNX reference run it).
		if cond, err = ctx.scalarBool(out[0], "the body's condition"); err != nil {
			return nil, err
		}
		condT = out[0]
		copy(carried, out[1:1+nCarried])
		for k := range scans {
			t := out[1+nCarried+k]
			// The parts so far, stacked at the end, stay within the budget.
			if err := ctx.budget("stacked scan output", t.DType, append([]int{int(it) + 1}, t.Shape...)); err != nil {
				return nil, err
			}
			scans[k] = append(scans[k], t)
		}
	}
	res := append([]*onnx.Tensor{}, carried...)
	for k, parts := range scans {
		t, err := ctx.stack(parts, sg.g.Output[1+nCarried+k])
		if err != nil {
			return nil, err
		}
		res = append(res, t)
	}
	return res, nil
}

// stack joins equal-shaped tensors on a new first axis; with none, it
// returns an empty tensor of the type (and known shape) vi declares.
func (ctx *Context) stack(parts []*onnx.Tensor, vi *onnxpb.ValueInfoProto) (*onnx.Tensor, error) {
	if len(parts) == 0 {
		dt, dims, ok := onnx.TensorType(vi)
		if !ok || dt == onnx.Undefined {
			return nil, ctx.errf("scan output %q: no iterations and no declared type", vi.GetName())
		}
		shape := []int{0}
		for _, d := range dims {
			shape = append(shape, int(max(d.Value, 0)))
		}
		return ctx.newTensor(dt, shape)
	}
	first := parts[0]
	views := make([]*onnx.Tensor, len(parts))
	for i, p := range parts {
		if p.DType != first.DType || !slices.Equal(p.Shape, first.Shape) {
			return nil, ctx.errf("scan output %q: iteration %d gives %s, iteration 0 gave %s", vi.GetName(), i, p, first)
		}
		views[i] = view(p, append([]int{1}, p.Shape...))
	}
	node := &onnxpb.NodeProto{OpType: strPtr(ctx.Node.GetOpType()), Name: strPtr(ctx.Node.GetName()), Attribute: []*onnxpb.AttributeProto{{
		Name: strPtr("axis"), Type: onnxpb.AttributeProto_INT.Enum(), I: int64Ptr(0),
	}}}
	out, err := concat(&Context{Node: node, Opset: 13}, views)
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

func strPtr(s string) *string { return &s }
func int64Ptr(v int64) *int64 { return &v }
