package convert

import (
	"fmt"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

// funcKey names a model-local function.
func funcKey(domain, name, overload string) string { return domain + "\x00" + name + "\x00" + overload }

// hasSoftmax reports whether a function body (or a local function it
// calls) contains a Softmax.
func hasSoftmax(f *onnxpb.FunctionProto, fns map[string]*onnxpb.FunctionProto, depth int) bool {
	if depth > 8 {
		return false
	}
	for _, n := range f.Node {
		if n.GetOpType() == "Softmax" && defaultDomain(n) {
			return true
		}
		if g, ok := fns[funcKey(n.GetDomain(), n.GetOpType(), n.GetOverload())]; ok && hasSoftmax(g, fns, depth+1) {
			return true
		}
	}
	return false
}

// inlineAttention returns a copy of m in which every call of a model-local
// function that contains a Softmax (PyTorch's export_modules_as_functions)
// is replaced by the function's body, so attention inside functions can be
// matched and rewritten like any other, and for each inlined node the
// function it came from. m is returned unchanged when no such call exists.
func inlineAttention(m *onnxpb.ModelProto) (*onnxpb.ModelProto, map[string]string, error) {
	if len(m.Functions) == 0 {
		return m, nil, nil
	}
	fns := map[string]*onnxpb.FunctionProto{}
	for _, f := range m.Functions {
		fns[funcKey(f.GetDomain(), f.GetName(), f.GetOverload())] = f
	}
	want := map[string]bool{}
	for k, f := range fns {
		// The linear-attention ops' own definitions are not attention to
		// find (LinformerAttention's body holds a Softmax over k
		// projected keys): their calls stay as they are.
		if f.GetDomain() != ops.Domain && hasSoftmax(f, fns, 0) {
			want[k] = true
		}
	}
	if len(want) == 0 {
		return m, nil, nil
	}
	out := onnx.CloneShared(m)
	inlined := map[string]string{} // inlined node name -> function
	var expand func(nodes []*onnxpb.NodeProto, depth int) ([]*onnxpb.NodeProto, error)
	calls := 0
	expand = func(nodes []*onnxpb.NodeProto, depth int) ([]*onnxpb.NodeProto, error) {
		if depth > 8 {
			return nil, fmt.Errorf("local functions nest deeper than 8")
		}
		var res []*onnxpb.NodeProto
		for _, n := range nodes {
			k := funcKey(n.GetDomain(), n.GetOpType(), n.GetOverload())
			f, ok := fns[k]
			if !ok || !want[k] {
				res = append(res, n)
				continue
			}
			calls++
			prefix := n.GetName()
			if prefix == "" {
				prefix = fmt.Sprintf("%s_call%d", f.GetName(), calls)
			}
			body, err := instantiate(n, f, prefix+"/")
			if err != nil {
				return nil, fmt.Errorf("inlining %s.%s at %s: %w", f.GetDomain(), f.GetName(), nodeName(n), err)
			}
			body, err = expand(body, depth+1)
			if err != nil {
				return nil, err
			}
			for _, b := range body {
				if _, seen := inlined[b.GetName()]; !seen {
					inlined[b.GetName()] = f.GetDomain() + "." + f.GetName()
				}
			}
			res = append(res, body...)
		}
		return res, nil
	}
	nodes, err := expand(out.Graph.Node, 0)
	if err != nil {
		return nil, nil, err
	}
	out.Graph.Node = nodes
	// Drop the inlined definitions nothing calls any more.
	called := map[string]bool{}
	var mark func(nodes []*onnxpb.NodeProto)
	mark = func(nodes []*onnxpb.NodeProto) {
		for _, n := range nodes {
			k := funcKey(n.GetDomain(), n.GetOpType(), n.GetOverload())
			if f, ok := fns[k]; ok && !called[k] {
				called[k] = true
				mark(f.Node)
			}
		}
	}
	mark(out.Graph.Node)
	var keep []*onnxpb.FunctionProto
	for _, f := range out.Functions {
		if called[funcKey(f.GetDomain(), f.GetName(), f.GetOverload())] {
			keep = append(keep, f)
		}
	}
	out.Functions = keep
	return out, inlined, nil
}

// instantiate returns the body of f for the call n (onnx.Instantiate);
// a body holding a subgraph is refused, since its inner names would not be
// renamed.
func instantiate(n *onnxpb.NodeProto, f *onnxpb.FunctionProto, prefix string) ([]*onnxpb.NodeProto, error) {
	for _, bn := range f.Node {
		for _, a := range bn.Attribute {
			if a.G != nil || len(a.Graphs) > 0 {
				return nil, fmt.Errorf("node %s has a subgraph", nodeName(bn))
			}
		}
	}
	return onnx.Instantiate(n, f, prefix)
}

// Inline returns a copy of m, a model converted by this package, in which
// every node of the custom ops (domain ops.Domain) is replaced by its
// function's body (onnx.InlineFunctions): the result holds standard ops
// only, with neither the ops' model-local functions nor the import of
// their domain, for runtimes and tools without model-local functions. It
// computes what m computes: onnxruntime inlines the same bodies when it
// loads m (a body built for a lower opset than the model's, above 23,
// runs at the model's opset there as here). The ir_version is kept. A
// model without such a node is an error, as is one whose custom node has
// no function, sits inside a subgraph or another function, or whose body
// would write a value the graph already names. m is not modified; the
// copy shares initializer bytes with m.
func Inline(m *onnxpb.ModelProto) (*onnxpb.ModelProto, error) {
	if m.GetGraph() == nil {
		return nil, fmt.Errorf("convert: inline: model has no graph")
	}
	defined := map[string]bool{}
	for _, f := range m.Functions {
		if f.GetDomain() == ops.Domain {
			defined[f.GetName()] = true
		}
	}
	calls := 0
	for _, n := range m.Graph.Node {
		if n.GetDomain() != ops.Domain {
			continue
		}
		if !defined[n.GetOpType()] {
			return nil, fmt.Errorf("convert: inline: node %s: the model defines no function %s.%s", nodeName(n), ops.Domain, n.GetOpType())
		}
		calls++
	}
	if calls == 0 {
		return nil, fmt.Errorf("convert: inline: the model has no %s node to inline", ops.Domain)
	}
	out, err := onnx.InlineFunctions(m, ops.Domain)
	if err != nil {
		return nil, fmt.Errorf("convert: inline: %w", err)
	}
	var left []string
	var walk func(nodes []*onnxpb.NodeProto)
	walk = func(nodes []*onnxpb.NodeProto) {
		for _, n := range nodes {
			if n.GetDomain() == ops.Domain {
				left = append(left, nodeName(n))
			}
			for _, a := range n.Attribute {
				if a.G != nil {
					walk(a.G.Node)
				}
				for _, g := range a.Graphs {
					walk(g.Node)
				}
			}
		}
	}
	walk(out.Graph.Node)
	for _, f := range out.Functions {
		walk(f.Node)
	}
	if len(left) > 0 {
		return nil, fmt.Errorf("convert: inline: %s nodes inside subgraphs or other functions are not inlined: %v", ops.Domain, left)
	}
	seen := map[string]bool{}
	for _, in := range out.Graph.Input {
		seen[in.GetName()] = true
	}
	for _, t := range out.Graph.Initializer {
		seen[t.GetName()] = true
	}
	for _, n := range out.Graph.Node {
		for _, o := range n.Output {
			if o == "" {
				continue
			}
			if seen[o] {
				return nil, fmt.Errorf("convert: inline: value %q is written twice once the bodies are inlined (node %s)", o, nodeName(n))
			}
			seen[o] = true
		}
	}
	return out, nil
}
