package onnx

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/linearize/linearize/onnx/onnxpb"
)

// Instantiate returns copies of f's body nodes for the call n, as an
// interpreter or an inliner needs them: the formal inputs and outputs are
// renamed to the call's actual values, every other value and every node
// name gets prefix, and attribute references (ref_attr_name) are resolved
// from the call's attributes, else f's defaults; a reference to an
// attribute given by neither is dropped (an absent optional attribute).
// An output the call leaves unnamed keeps an internal name, since the
// body may still read it. Subgraph attributes are copied unchanged (their
// inner names are not renamed). n and f are not modified.
func Instantiate(n *onnxpb.NodeProto, f *onnxpb.FunctionProto, prefix string) ([]*onnxpb.NodeProto, error) {
	if len(n.Input) > len(f.Input) {
		return nil, fmt.Errorf("onnx: node %q: %d inputs, function %s has %d", n.GetName(), len(n.Input), f.GetName(), len(f.Input))
	}
	if len(n.Output) > len(f.Output) {
		return nil, fmt.Errorf("onnx: node %q: %d outputs, function %s has %d", n.GetName(), len(n.Output), f.GetName(), len(f.Output))
	}
	rename := map[string]string{}
	for i, formal := range f.Input {
		actual := ""
		if i < len(n.Input) {
			actual = n.Input[i]
		}
		rename[formal] = actual
	}
	for i, formal := range f.Output {
		if i < len(n.Output) && n.Output[i] != "" {
			rename[formal] = n.Output[i]
		}
	}
	name := func(s string) string {
		if s == "" {
			return ""
		}
		if r, ok := rename[s]; ok {
			return r
		}
		return prefix + s
	}
	attrs := map[string]*onnxpb.AttributeProto{}
	for _, a := range f.AttributeProto {
		attrs[a.GetName()] = a
	}
	for _, a := range n.Attribute {
		attrs[a.GetName()] = a
	}
	body := make([]*onnxpb.NodeProto, 0, len(f.Node))
	for _, bn := range f.Node {
		c := &onnxpb.NodeProto{
			Name:     proto.String(prefix + bn.GetName()),
			OpType:   bn.OpType,
			Domain:   bn.Domain,
			Overload: bn.Overload,
		}
		for _, in := range bn.Input {
			c.Input = append(c.Input, name(in))
		}
		for _, o := range bn.Output {
			c.Output = append(c.Output, name(o))
		}
		for _, a := range bn.Attribute {
			if ref := a.GetRefAttrName(); ref != "" {
				v, ok := attrs[ref]
				if !ok {
					continue
				}
				ca := proto.Clone(v).(*onnxpb.AttributeProto)
				ca.Name = a.Name
				ca.RefAttrName = nil
				c.Attribute = append(c.Attribute, ca)
				continue
			}
			c.Attribute = append(c.Attribute, a)
		}
		body = append(body, c)
	}
	return body, nil
}

// InlineFunctions returns a copy of m in which every call of a model-local
// function of domain is replaced by the function's body (Instantiate, with
// the prefix "_inlfunc_OP_I/" for the call at graph position I; body nodes
// without a name are named after their op and place), as onnxruntime's
// optimizer saves a model; those functions and domain's opset import are
// dropped. Calls inside other functions and subgraphs are left alone. m is
// not modified; the copy shares initializer bytes with m (CloneShared).
func InlineFunctions(m *onnxpb.ModelProto, domain string) (*onnxpb.ModelProto, error) {
	out := CloneShared(m)
	fns := map[string]*onnxpb.FunctionProto{}
	var keep []*onnxpb.FunctionProto
	for _, f := range out.Functions {
		if f.GetDomain() == domain {
			fns[f.GetName()] = f
		} else {
			keep = append(keep, f)
		}
	}
	var nodes []*onnxpb.NodeProto
	for i, n := range out.Graph.GetNode() {
		f, ok := fns[n.GetOpType()]
		if !ok || n.GetDomain() != domain {
			nodes = append(nodes, n)
			continue
		}
		prefix := fmt.Sprintf("_inlfunc_%s_%d/", n.GetOpType(), i)
		body, err := Instantiate(n, f, prefix)
		if err != nil {
			return nil, err
		}
		for j, b := range body {
			if b.GetName() == prefix {
				b.Name = proto.String(fmt.Sprintf("%s%s_%d", prefix, b.GetOpType(), j))
			}
		}
		nodes = append(nodes, body...)
	}
	out.Graph.Node = nodes
	out.Functions = keep
	var imports []*onnxpb.OperatorSetIdProto
	for _, o := range out.OpsetImport {
		if o.GetDomain() != domain {
			imports = append(imports, o)
		}
	}
	out.OpsetImport = imports
	return out, nil
}
