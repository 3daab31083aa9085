package onnx

import (
	"errors"
	"fmt"
	"strings"

	"github.com/linearize/linearize/onnx/onnxpb"
)

// Problem is one defect Validate found.
type Problem struct {
	Where string // "node \"X\" (MatMul)", "tensor \"W\"", "graph", ...
	What  string
}

func (p Problem) String() string { return p.Where + ": " + p.What }

// ValidationError lists every defect found in a model.
type ValidationError struct {
	Problems []Problem
}

func (e *ValidationError) Error() string {
	if len(e.Problems) == 1 {
		return "onnx: invalid model: " + e.Problems[0].String()
	}
	return fmt.Sprintf("onnx: invalid model: %s (and %d more problems)", e.Problems[0], len(e.Problems)-1)
}

// ErrInvalid is matched by errors.Is for every *ValidationError.
var ErrInvalid = errors.New("onnx: invalid model")

func (e *ValidationError) Is(target error) bool { return target == ErrInvalid }

// Validate checks the structure of m before any work is done on it:
//
//   - every node input is a graph input, an initializer, the output of a
//     node, or (inside a subgraph) a name of an enclosing scope;
//   - no value is produced twice, and no node output shadows a graph input
//     or initializer;
//   - every graph output is produced;
//   - the graph has no cycle;
//   - every tensor's data is in the model (external data resolved, as
//     Load does) and matches its declared type and shape, dimensions
//     are non-negative and the element count is bounded (checked without
//     allocating from the declared size);
//   - every domain used by a node is imported (opset_import), is a
//     model-local function's domain, or is one onnxruntime resolves by
//     itself (com.microsoft, ai.onnx.ml);
//   - as onnx's checker requires: the names of a graph's inputs, of its
//     initializers, and of the main graph's outputs are each unique;
//     ir_version is within MinIRVersion..MaxIRVersion; the default
//     domain's opset is within 1..MaxOpset; every node of the default
//     domain is an ONNX operator at that opset (OpSince) or a model-local
//     function. Other domains' operators are not checked.
//
// It returns nil or a *ValidationError naming each node or tensor at fault.
func Validate(m *onnxpb.ModelProto) error {
	v := &validator{refs: outerRefs{}}
	if m.GetGraph() == nil {
		v.add("model", "no graph")
		return v.err()
	}
	if ir := m.GetIrVersion(); ir < MinIRVersion || ir > MaxIRVersion {
		v.add("model", fmt.Sprintf("ir_version %d is not one this tool knows (%d..%d)", ir, MinIRVersion, MaxIRVersion))
	}
	imported, opset := v.opsets("model", m.OpsetImport)
	if len(m.OpsetImport) == 0 {
		v.add("model", "no opset_import")
	}
	functions := map[string]bool{}
	for _, f := range m.Functions {
		functions[f.GetDomain()+":"+f.GetName()] = true
	}
	v.imported = imported
	v.functions = functions
	v.opset = opset
	v.graph(m.Graph, "graph", nil)
	v.outputsUnique(m.Graph, "graph")
	for _, f := range m.Functions {
		where := fmt.Sprintf("function %s:%s", f.GetDomain(), f.GetName())
		v.imported, v.opset = imported, opset
		if len(f.OpsetImport) > 0 { // a function body may import its own versions
			fi, fo := v.opsets(where, f.OpsetImport)
			v.imported = map[string]bool{}
			for d := range imported {
				v.imported[d] = true
			}
			for d := range fi {
				v.imported[d] = true
			}
			if fi[""] {
				v.opset = fo
			}
		}
		if !imported[f.GetDomain()] && f.GetDomain() != "" {
			v.add(where, fmt.Sprintf("domain %q is not in the model's opset_import", f.GetDomain()))
		}
		defined := map[string]bool{}
		for _, in := range f.Input {
			defined[in] = true
		}
		for _, n := range f.Node {
			v.node(n, defined, nil, where)
		}
		for _, o := range f.Output {
			if !defined[o] {
				v.add(where, fmt.Sprintf("output %q is not produced", o))
			}
		}
	}
	return v.err()
}

// implicitDomains are domains onnxruntime resolves without an opset_import
// entry (it assumes its own version); real exporters and onnxruntime's
// optimizer write models that rely on it.
var implicitDomains = map[string]bool{"com.microsoft": true, "ai.onnx.ml": true, "com.microsoft.nchwc": true}

type validator struct {
	refs      outerRefs // the outer names of each subgraph, computed once
	problems  []Problem
	imported  map[string]bool
	functions map[string]bool
	opset     int64 // version of the default domain in scope
}

// opsets reads an opset_import list: the domains it imports ("ai.onnx"
// read as ""), and the default domain's version, which must be one
// opSince knows.
func (v *validator) opsets(where string, ops []*onnxpb.OperatorSetIdProto) (map[string]bool, int64) {
	imported := map[string]bool{}
	var opset int64
	for _, op := range ops {
		d := op.GetDomain()
		if d == "ai.onnx" {
			d = ""
		}
		imported[d] = true
		if d == "" {
			if ver := op.GetVersion(); ver < 1 || ver > MaxOpset {
				v.add(where, fmt.Sprintf("opset %d of the default domain is not one this tool knows (1..%d)", ver, MaxOpset))
			} else if ver > opset {
				opset = ver
			}
		}
	}
	return imported, opset
}

// outputsUnique checks that no name is a graph output twice.
func (v *validator) outputsUnique(g *onnxpb.GraphProto, where string) {
	seen := map[string]bool{}
	for _, o := range g.Output {
		if seen[o.GetName()] {
			v.add(where, fmt.Sprintf("output %q is listed twice among the graph outputs", o.GetName()))
		}
		seen[o.GetName()] = true
	}
}

const maxProblems = 50

func (v *validator) add(where, what string) {
	if len(v.problems) < maxProblems {
		v.problems = append(v.problems, Problem{where, what})
	}
}

func (v *validator) err() error {
	if len(v.problems) == 0 {
		return nil
	}
	return &ValidationError{Problems: v.problems}
}

func nodeWhere(n *onnxpb.NodeProto) string {
	op := n.GetOpType()
	if d := n.GetDomain(); d != "" {
		op = d + ":" + op
	}
	return fmt.Sprintf("node %q (%s)", n.GetName(), op)
}

// scope counts, per name, the enclosing graphs that define it: a graph
// adds its names on entry and removes them on exit, so that a subgraph
// nested d deep costs its own names, not a copy of the d scopes around it.
type scope map[string]int

func (s scope) push(names map[string]bool) {
	for k := range names {
		s[k]++
	}
}

func (s scope) pop(names map[string]bool) {
	for k := range names {
		if s[k]--; s[k] <= 0 {
			delete(s, k)
		}
	}
}

// graph checks g; outer holds the names visible from enclosing scopes (nil:
// none, as for a subgraph of a function body's node).
func (v *validator) graph(g *onnxpb.GraphProto, where string, outer scope) {
	if outer == nil {
		outer = scope{}
	}
	inits := map[string]bool{}
	for _, t := range g.Initializer {
		v.tensor(t)
		if t.GetName() == "" {
			v.add(where, "initializer without a name")
		} else if inits[t.GetName()] {
			v.add(where, fmt.Sprintf("initializer %q is defined twice", t.GetName()))
		}
		inits[t.GetName()] = true
	}
	for _, st := range g.SparseInitializer {
		if st.GetValues() == nil || st.GetIndices() == nil {
			v.add(where, "sparse initializer without values or indices")
			continue
		}
		v.tensor(st.GetValues())
		v.tensor(st.GetIndices())
		if name := st.GetValues().GetName(); inits[name] {
			v.add(where, fmt.Sprintf("initializer %q is defined twice", name))
		}
		inits[st.GetValues().GetName()] = true
	}
	inputs := map[string]bool{}
	for _, in := range g.Input {
		if inputs[in.GetName()] {
			v.add(where, fmt.Sprintf("input %q is listed twice among the graph inputs", in.GetName()))
		}
		inputs[in.GetName()] = true
	}
	own := map[string]bool{} // produced in this graph
	for _, n := range g.Node {
		for _, o := range n.Output {
			if o == "" {
				continue
			}
			if own[o] {
				v.add(nodeWhere(n), fmt.Sprintf("output %q is produced by another node too", o))
			} else if (inits[o] || inputs[o]) && outer[o] == 0 {
				v.add(nodeWhere(n), fmt.Sprintf("output %q shadows a graph input or initializer", o))
			}
			own[o] = true
		}
	}
	for _, names := range []map[string]bool{inits, inputs, own} {
		outer.push(names)
	}
	for _, n := range g.Node {
		v.node(n, nil, outer, where)
	}
	for _, o := range g.Output {
		if outer[o.GetName()] == 0 {
			v.add(where, fmt.Sprintf("output %q is not produced by any node", o.GetName()))
		}
	}
	for _, names := range []map[string]bool{inits, inputs, own} {
		outer.pop(names)
	}
	if len(v.problems) == 0 {
		if _, err := topoSort(g, v.refs); err != nil {
			v.add(where, strings.TrimPrefix(err.Error(), "onnx: "))
		}
	}
}

// node checks one node. In a function body (defined != nil) names become
// defined in order; in a graph (in != nil) any name in scope is available.
func (v *validator) node(n *onnxpb.NodeProto, defined map[string]bool, in scope, where string) {
	w := nodeWhere(n)
	d := n.GetDomain()
	if d == "ai.onnx" {
		d = ""
	}
	if !v.imported[d] && !v.functions[n.GetDomain()+":"+n.GetOpType()] && !implicitDomains[d] {
		v.add(w, fmt.Sprintf("domain %q is not in the model's opset_import", n.GetDomain()))
	}
	if n.GetOpType() == "" {
		v.add(w, "no op_type")
	} else if d == "" && v.imported[""] && v.opset > 0 && !v.functions[n.GetDomain()+":"+n.GetOpType()] && !knownOp(n.GetOpType(), v.opset) {
		if s := OpSince(n.GetOpType()); s > 0 {
			v.add(w, fmt.Sprintf("op type %q needs opset %d; the model imports opset %d", n.GetOpType(), s, v.opset))
		} else {
			v.add(w, fmt.Sprintf("op type %q is not an ONNX operator (default domain, opset %d)", n.GetOpType(), v.opset))
		}
	}
	for _, name := range n.Input {
		if name == "" {
			continue
		}
		ok := (defined != nil && defined[name]) || in[name] > 0
		if !ok {
			v.add(w, fmt.Sprintf("input %q is not a graph input, initializer or node output", name))
		}
	}
	for _, a := range n.Attribute {
		if a.T != nil {
			v.tensor(a.T)
		}
		for _, t := range a.Tensors {
			v.tensor(t)
		}
		if a.G != nil {
			v.graph(a.G, w+" attribute "+a.GetName(), in)
		}
		for _, g := range a.Graphs {
			v.graph(g, w+" attribute "+a.GetName(), in)
		}
	}
	if defined != nil {
		for _, o := range n.Output {
			defined[o] = true
		}
	}
}

// tensor checks a TensorProto's size against its data without decoding it.
func (v *validator) tensor(t *onnxpb.TensorProto) {
	if t == nil {
		return
	}
	w := fmt.Sprintf("tensor %q", t.GetName())
	n := int64(1)
	for _, d := range t.GetDims() {
		if d < 0 {
			v.add(w, fmt.Sprintf("negative dimension %d", d))
			return
		}
		// A dimension past the bound is refused even beside a zero one
		// (no elements), as DecodeTensor refuses it.
		if d > MaxTensorElements || (d != 0 && n > MaxTensorElements/d) {
			v.add(w, fmt.Sprintf("shape %v exceeds %d elements", t.GetDims(), int64(MaxTensorElements)))
			return
		}
		n *= d
	}
	if t.GetDataLocation() == onnxpb.TensorProto_EXTERNAL {
		// Load resolves external data (and checks it) before validating;
		// a model decoded from bytes cannot, and nothing can run it.
		v.add(w, "external data not loaded (Load reads it from the model's folder)")
		return
	}
	if t.Segment != nil {
		v.add(w, "segmented tensors are not supported")
		return
	}
	dt := DataType(t.GetDataType())
	if t.RawData != nil && dt != String {
		es := int64(ElemSize(dt))
		if es == 0 {
			v.add(w, fmt.Sprintf("unsupported element type %s", TypeName(dt)))
			return
		}
		if int64(len(t.RawData)) != n*es {
			v.add(w, fmt.Sprintf("raw_data has %d bytes, shape %v of %s needs %d", len(t.RawData), t.GetDims(), TypeName(dt), n*es))
		}
		return
	}
	var have int
	switch dt {
	case Float:
		have = len(t.FloatData)
	case Double:
		have = len(t.DoubleData)
	case Int64:
		have = len(t.Int64Data)
	case Uint32, Uint64:
		have = len(t.Uint64Data)
	case Int32, Int16, Int8, Uint16, Uint8, Bool, Float16, BFloat16:
		have = len(t.Int32Data)
	case String:
		have = len(t.StringData)
	default:
		v.add(w, fmt.Sprintf("unsupported element type %s", TypeName(dt)))
		return
	}
	if int64(have) != n {
		v.add(w, fmt.Sprintf("%d values, shape %v needs %d", have, t.GetDims(), n))
	}
}
