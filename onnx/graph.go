package onnx

import (
	"fmt"
	"strconv"

	"github.com/linearize/linearize/onnx/onnxpb"
)

// Index is a lookup structure over one graph: who produces and who consumes
// each value, and what is known of each value's type and shape. It is a
// snapshot: rebuild it after editing the graph.
type Index struct {
	Graph        *onnxpb.GraphProto
	Producer     map[string]*onnxpb.NodeProto
	Consumers    map[string][]*onnxpb.NodeProto
	Initializers map[string]*onnxpb.TensorProto
	ValueInfo    map[string]*onnxpb.ValueInfoProto // graph inputs, outputs and value_info
	GraphInputs  map[string]bool                   // inputs that are not initializers
	GraphOutputs map[string]bool
}

// NewIndex indexes g.
func NewIndex(g *onnxpb.GraphProto) *Index {
	ix := &Index{
		Graph:        g,
		Producer:     map[string]*onnxpb.NodeProto{},
		Consumers:    map[string][]*onnxpb.NodeProto{},
		Initializers: map[string]*onnxpb.TensorProto{},
		ValueInfo:    map[string]*onnxpb.ValueInfoProto{},
		GraphInputs:  map[string]bool{},
		GraphOutputs: map[string]bool{},
	}
	for _, t := range g.Initializer {
		ix.Initializers[t.GetName()] = t
	}
	for _, vi := range g.ValueInfo {
		ix.ValueInfo[vi.GetName()] = vi
	}
	for _, vi := range g.Input {
		ix.ValueInfo[vi.GetName()] = vi
		if ix.Initializers[vi.GetName()] == nil {
			ix.GraphInputs[vi.GetName()] = true
		}
	}
	for _, vi := range g.Output {
		ix.ValueInfo[vi.GetName()] = vi
		ix.GraphOutputs[vi.GetName()] = true
	}
	for _, n := range g.Node {
		for _, o := range n.Output {
			if o != "" {
				ix.Producer[o] = n
			}
		}
		for _, in := range NodeInputs(n) {
			ix.Consumers[in] = append(ix.Consumers[in], n)
		}
	}
	return ix
}

// NodeInputs returns the non-empty input names of n plus every outer-scope
// name that n's subgraphs (If/Loop/Scan bodies) refer to, each once. It
// walks n's subgraphs once; a caller that asks for the nodes of every
// level of a nest uses an outerRefs, which computes each subgraph's names
// once for all of them.
func NodeInputs(n *onnxpb.NodeProto) []string {
	return outerRefs(nil).nodeInputs(n)
}

// outerRefs memoizes outerNames per subgraph for one walk over a model
// that does not change it (nil: no memo).
type outerRefs map[*onnxpb.GraphProto][]string

// Refs memoizes the outer-scope names each subgraph reads, so that a walk
// that asks for NodeInputs or TopoSort at every level of a nest of If or
// Loop bodies costs each subgraph once rather than once per enclosing
// level (quadratic in the depth). A Refs is valid while the graphs it has
// seen are not modified.
type Refs struct{ m outerRefs }

// NewRefs returns an empty Refs.
func NewRefs() *Refs { return &Refs{outerRefs{}} }

// NodeInputs is NodeInputs with the subgraphs' names memoized.
func (r *Refs) NodeInputs(n *onnxpb.NodeProto) []string { return r.m.nodeInputs(n) }

// TopoSort is TopoSort with the subgraphs' names memoized.
func (r *Refs) TopoSort(g *onnxpb.GraphProto) ([]*onnxpb.NodeProto, error) {
	return topoSort(g, r.m)
}

func (r outerRefs) nodeInputs(n *onnxpb.NodeProto) []string {
	seen := map[string]bool{}
	var out []string
	add := func(s string) {
		if s != "" && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	for _, in := range n.Input {
		add(in)
	}
	for _, a := range n.Attribute {
		if a.G != nil {
			for _, s := range r.outerNames(a.G) {
				add(s)
			}
		}
		for _, g := range a.Graphs {
			for _, s := range r.outerNames(g) {
				add(s)
			}
		}
	}
	return out
}

// outerNames returns the names a subgraph uses but does not define, each
// once.
func (r outerRefs) outerNames(g *onnxpb.GraphProto) []string {
	if names, ok := r[g]; ok {
		return names
	}
	defined := map[string]bool{}
	for _, vi := range g.Input {
		defined[vi.GetName()] = true
	}
	for _, t := range g.Initializer {
		defined[t.GetName()] = true
	}
	for _, n := range g.Node {
		for _, o := range n.Output {
			defined[o] = true
		}
	}
	out := []string{}
	for _, n := range g.Node {
		for _, in := range r.nodeInputs(n) {
			if !defined[in] {
				defined[in] = true // listed once
				out = append(out, in)
			}
		}
	}
	for _, o := range g.Output {
		if !defined[o.GetName()] {
			defined[o.GetName()] = true
			out = append(out, o.GetName())
		}
	}
	if r != nil {
		r[g] = out
	}
	return out
}

// Constant returns the value of name if it is an initializer or the output
// of a Constant node (value, value_float(s), value_int(s)).
func (ix *Index) Constant(name string) (*Tensor, bool) {
	if t, ok := ix.Initializers[name]; ok {
		v, err := DecodeTensor(t)
		return v, err == nil
	}
	n := ix.Producer[name]
	if n == nil || n.GetOpType() != "Constant" || (n.GetDomain() != "" && n.GetDomain() != "ai.onnx") {
		return nil, false
	}
	v, err := ConstantNodeValue(n)
	return v, err == nil
}

// ConstantNodeValue returns the tensor a Constant node produces.
func ConstantNodeValue(n *onnxpb.NodeProto) (*Tensor, error) {
	for _, a := range n.Attribute {
		switch a.GetName() {
		case "value":
			return DecodeTensor(a.GetT())
		case "value_float":
			return &Tensor{DType: Float, Shape: []int{}, Data: []float32{a.GetF()}}, nil
		case "value_floats":
			return &Tensor{DType: Float, Shape: []int{len(a.Floats)}, Data: append([]float32{}, a.Floats...)}, nil
		case "value_int":
			return &Tensor{DType: Int64, Shape: []int{}, Data: []int64{a.GetI()}}, nil
		case "value_ints":
			return &Tensor{DType: Int64, Shape: []int{len(a.Ints)}, Data: append([]int64{}, a.Ints...)}, nil
		}
	}
	return nil, fmt.Errorf("onnx: Constant node %q has no supported value attribute", n.GetName())
}

// TopoSort returns g's nodes in an order where every node follows the
// producers of its inputs. Among ready nodes the original order is kept. It
// fails on a cycle, naming a node on it.
func TopoSort(g *onnxpb.GraphProto) ([]*onnxpb.NodeProto, error) {
	return topoSort(g, nil)
}

// topoSort is TopoSort with the subgraphs' outer names taken from refs.
func topoSort(g *onnxpb.GraphProto, refs outerRefs) ([]*onnxpb.NodeProto, error) {
	producer := map[string]int{}
	for i, n := range g.Node {
		for _, o := range n.Output {
			if o != "" {
				producer[o] = i
			}
		}
	}
	indeg := make([]int, len(g.Node))
	users := make([][]int, len(g.Node))
	for i, n := range g.Node {
		seen := map[int]bool{}
		for _, in := range refs.nodeInputs(n) {
			if p, ok := producer[in]; ok && !seen[p] {
				seen[p] = true
				indeg[i]++
				users[p] = append(users[p], i)
			}
		}
	}
	// A min-heap on the original index keeps the order stable.
	ready := &intHeap{}
	for i, d := range indeg {
		if d == 0 {
			ready.push(i)
		}
	}
	out := make([]*onnxpb.NodeProto, 0, len(g.Node))
	for ready.len() > 0 {
		i := ready.pop()
		out = append(out, g.Node[i])
		for _, u := range users[i] {
			indeg[u]--
			if indeg[u] == 0 {
				ready.push(u)
			}
		}
	}
	if len(out) != len(g.Node) {
		for i, d := range indeg {
			if d > 0 {
				return nil, fmt.Errorf("onnx: graph has a cycle through node %q (%s)", g.Node[i].GetName(), g.Node[i].GetOpType())
			}
		}
	}
	return out, nil
}

type intHeap struct{ a []int }

func (h *intHeap) len() int { return len(h.a) }
func (h *intHeap) push(v int) {
	h.a = append(h.a, v)
	i := len(h.a) - 1
	for i > 0 {
		p := (i - 1) / 2
		if h.a[p] <= h.a[i] {
			break
		}
		h.a[p], h.a[i] = h.a[i], h.a[p]
		i = p
	}
}
func (h *intHeap) pop() int {
	top := h.a[0]
	last := len(h.a) - 1
	h.a[0] = h.a[last]
	h.a = h.a[:last]
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(h.a) && h.a[l] < h.a[m] {
			m = l
		}
		if r < len(h.a) && h.a[r] < h.a[m] {
			m = r
		}
		if m == i {
			break
		}
		h.a[m], h.a[i] = h.a[i], h.a[m]
		i = m
	}
	return top
}

// RemoveDeadNodes deletes nodes whose outputs reach no graph output, then
// initializers and value_info entries nothing uses any more. Graph inputs
// are kept. It returns the number of nodes removed.
func RemoveDeadNodes(g *onnxpb.GraphProto) int {
	live := map[string]bool{}
	for _, o := range g.Output {
		live[o.GetName()] = true
	}
	keep := make([]bool, len(g.Node))
	changed := true
	for changed {
		changed = false
		for i, n := range g.Node {
			if keep[i] {
				continue
			}
			for _, o := range n.Output {
				if o != "" && live[o] {
					keep[i] = true
					break
				}
			}
			if keep[i] {
				changed = true
				for _, in := range NodeInputs(n) {
					live[in] = true
				}
			}
		}
	}
	var nodes []*onnxpb.NodeProto
	for i, n := range g.Node {
		if keep[i] {
			nodes = append(nodes, n)
		}
	}
	removed := len(g.Node) - len(nodes)
	g.Node = nodes
	var inits []*onnxpb.TensorProto
	for _, t := range g.Initializer {
		if live[t.GetName()] {
			inits = append(inits, t)
		}
	}
	g.Initializer = inits
	var vis []*onnxpb.ValueInfoProto
	for _, vi := range g.ValueInfo {
		if live[vi.GetName()] {
			vis = append(vis, vi)
		}
	}
	g.ValueInfo = vis
	return removed
}

// Namer hands out names not yet used anywhere in a graph (values, nodes,
// initializers).
type Namer struct{ used map[string]bool }

// NewNamer returns a Namer that knows every name in g. It walks g's lists
// as NewIndex does, but keeps every name, node names too, in one set.
func NewNamer(g *onnxpb.GraphProto) *Namer {
	nm := &Namer{used: map[string]bool{}}
	for _, t := range g.Initializer {
		nm.used[t.GetName()] = true
	}
	for _, vis := range [][]*onnxpb.ValueInfoProto{g.Input, g.Output, g.ValueInfo} {
		for _, vi := range vis {
			nm.used[vi.GetName()] = true
		}
	}
	for _, n := range g.Node {
		nm.used[n.GetName()] = true
		for _, s := range n.Input {
			nm.used[s] = true
		}
		for _, s := range n.Output {
			nm.used[s] = true
		}
	}
	return nm
}

// Name returns base if unused, else base_1, base_2, ..., and marks it used.
func (nm *Namer) Name(base string) string {
	name := base
	for i := 1; nm.used[name]; i++ {
		name = base + "_" + strconv.Itoa(i)
	}
	nm.used[name] = true
	return name
}

// OpsetVersion returns the opset version m imports for domain ("" and
// "ai.onnx" are the same domain), or 0 if it imports none.
func OpsetVersion(m *onnxpb.ModelProto, domain string) int64 {
	v, _ := ImportedOpset(m.OpsetImport, domain)
	return v
}

// ImportedOpset returns the version of domain ("" and "ai.onnx" are the
// same domain) in imports (a model's or a function's opset_import), and
// whether they name the domain at all.
func ImportedOpset(imports []*onnxpb.OperatorSetIdProto, domain string) (int64, bool) {
	if domain == "ai.onnx" {
		domain = ""
	}
	for _, op := range imports {
		d := op.GetDomain()
		if d == "ai.onnx" {
			d = ""
		}
		if d == domain {
			return op.GetVersion(), true
		}
	}
	return 0, false
}

// Attr returns the attribute of n called name, or nil.
func Attr(n *onnxpb.NodeProto, name string) *onnxpb.AttributeProto {
	for _, a := range n.Attribute {
		if a.GetName() == name {
			return a
		}
	}
	return nil
}

// AttrInt returns an integer attribute or def.
func AttrInt(n *onnxpb.NodeProto, name string, def int64) int64 {
	if a := Attr(n, name); a != nil {
		return a.GetI()
	}
	return def
}

// AttrFloat returns a float attribute or def.
func AttrFloat(n *onnxpb.NodeProto, name string, def float32) float32 {
	if a := Attr(n, name); a != nil {
		return a.GetF()
	}
	return def
}

// AttrInts returns an integer-list attribute, or nil if absent.
func AttrInts(n *onnxpb.NodeProto, name string) []int64 {
	if a := Attr(n, name); a != nil {
		return a.Ints
	}
	return nil
}

// AttrString returns a string attribute or def.
func AttrString(n *onnxpb.NodeProto, name string, def string) string {
	if a := Attr(n, name); a != nil {
		return string(a.GetS())
	}
	return def
}

// Dim is one dimension of a value's declared shape: a known size (Value ≥
// 0), a named symbolic size (Param), or unknown (Value −1, Param "").
type Dim struct {
	Value int64
	Param string
}

// TensorType returns the element type and declared shape of a value. ok is
// false when the value is not a tensor; shape is nil when its rank is
// unknown.
func TensorType(vi *onnxpb.ValueInfoProto) (dt DataType, shape []Dim, ok bool) {
	tt := vi.GetType().GetTensorType()
	if tt == nil {
		return Undefined, nil, false
	}
	dt = DataType(tt.GetElemType())
	if tt.Shape == nil {
		return dt, nil, true
	}
	shape = make([]Dim, len(tt.Shape.Dim))
	for i, d := range tt.Shape.Dim {
		switch v := d.Value.(type) {
		case *onnxpb.TensorShapeProto_Dimension_DimValue:
			shape[i] = Dim{Value: v.DimValue}
		case *onnxpb.TensorShapeProto_Dimension_DimParam:
			shape[i] = Dim{Value: -1, Param: v.DimParam}
		default:
			shape[i] = Dim{Value: -1}
		}
	}
	return dt, shape, true
}

// MakeValueInfo builds a tensor ValueInfoProto; a negative dim with an
// empty param is written as an unknown dimension.
func MakeValueInfo(name string, dt DataType, shape []Dim) *onnxpb.ValueInfoProto {
	et := int32(dt)
	tt := &onnxpb.TypeProto_Tensor{ElemType: &et}
	if shape != nil {
		tt.Shape = &onnxpb.TensorShapeProto{}
		for _, d := range shape {
			dim := &onnxpb.TensorShapeProto_Dimension{}
			if d.Value >= 0 {
				dim.Value = &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d.Value}
			} else if d.Param != "" {
				dim.Value = &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: d.Param}
			}
			tt.Shape.Dim = append(tt.Shape.Dim, dim)
		}
	}
	return &onnxpb.ValueInfoProto{Name: &name, Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{TensorType: tt}}}
}
