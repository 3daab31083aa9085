package onnx

import (
	"errors"
	"fmt"
	"math"
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
//   - the main graph has outputs;
//   - integers held in a wider field fit their type (int32_data of a
//     uint8 tensor in 0..255, ...);
//   - the constant scales and zero points (initializers, Constant nodes)
//     of quantizing nodes (QuantizeLinear, DequantizeLinear,
//     MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv, and
//     com.microsoft's QLinear*, DynamicQuantizeMatMul,
//     MatMulIntegerToFloat, QAttention, QGemm) are sound: every scale
//     finite and positive, every zero point inside its type and of the
//     quantized value's type, scale and zero point of one shape, and a
//     1-D one as long as the axis it quantizes where the value's
//     dimensions are known;
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
	if len(m.Graph.Output) == 0 {
		v.add("graph", "no outputs: nothing the model computes can be read")
	}
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
	v.quant(g) // first: its problems name the node
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
		return
	}
	// A narrow type's values held in a wider field must fit it: decoding
	// would wrap them silently (300 in a uint8 tensor reads as 44).
	if rng, ok := narrowRanges[dt]; ok {
		if at, val, bad := outOfRange(t, rng); bad {
			v.add(w, fmt.Sprintf("value %d at index %d is outside %s (%d..%d)", val, at, TypeName(dt), rng[0], rng[1]))
		}
	}
	if dt == Uint32 {
		for i, x := range t.Uint64Data {
			if x > math.MaxUint32 {
				v.add(w, fmt.Sprintf("value %d at index %d is outside uint32", x, i))
				break
			}
		}
	}
}

// narrowRanges are the ranges of the types int32_data holds in a wider
// integer (float16 and bfloat16 as their bits).
var narrowRanges = map[DataType][2]int64{
	Int8: {-128, 127}, Uint8: {0, 255}, Int16: {-32768, 32767}, Uint16: {0, 65535},
	Float16: {0, 65535}, BFloat16: {0, 65535},
}

// quantParams names, for one operand of a quantizing op, the inputs
// holding the operand, its scale and its zero point (−1: none), and the
// axis of the operand a 1-D scale or zero point runs along (perAxis;
// nil: scalars only, or a layout not checked).
type quantParams struct {
	data, scale, zp int
	perAxis         func(n *onnxpb.NodeProto, rank int) int
	// output: the quantized value is the op's first output (its type
	// is the zero point's); data, if any, is the float input it is
	// computed from (whose dims the axis indexes).
	output bool
}

// attrAxis is the axis attribute (default 1) as Q/DQ read it.
func attrAxis(n *onnxpb.NodeProto, rank int) int {
	axis := int64(1)
	for _, a := range n.Attribute {
		if a.GetName() == "axis" {
			axis = a.GetI()
		}
		if a.GetName() == "block_size" && a.GetI() > 0 {
			return -1 // blocked: the scale has the operand's rank
		}
	}
	if axis < 0 {
		axis += int64(rank)
	}
	if axis < 0 || axis >= int64(rank) {
		return -1
	}
	return int(axis)
}

func rowsAxis(_ *onnxpb.NodeProto, rank int) int {
	if rank < 2 {
		return -1
	}
	return rank - 2
}

func colsAxis(_ *onnxpb.NodeProto, rank int) int { return rank - 1 }

func firstAxis(_ *onnxpb.NodeProto, rank int) int {
	if rank < 1 {
		return -1
	}
	return 0
}

// quantOps are the ops whose scales and zero points Validate checks
// where they are constants (initializers or Constant nodes), by domain
// ("" or com.microsoft) and op type.
var quantOps = map[string][]quantParams{
	"QuantizeLinear":   {{data: 0, scale: 1, zp: 2, perAxis: attrAxis, output: true}},
	"DequantizeLinear": {{data: 0, scale: 1, zp: 2, perAxis: attrAxis}},
	"MatMulInteger":    {{data: 0, scale: -1, zp: 2, perAxis: rowsAxis}, {data: 1, scale: -1, zp: 3, perAxis: colsAxis}},
	"ConvInteger":      {{data: 0, scale: -1, zp: 2}, {data: 1, scale: -1, zp: 3, perAxis: firstAxis}},
	"QLinearMatMul": {{data: 0, scale: 1, zp: 2, perAxis: rowsAxis}, {data: 3, scale: 4, zp: 5, perAxis: colsAxis},
		{data: -1, scale: 6, zp: 7, output: true}},
	"QLinearConv": {{data: 0, scale: 1, zp: 2}, {data: 3, scale: 4, zp: 5, perAxis: firstAxis},
		{data: -1, scale: 6, zp: 7, output: true}},
	// com.microsoft
	"QLinearAdd":               {{data: 0, scale: 1, zp: 2}, {data: 3, scale: 4, zp: 5}, {data: -1, scale: 6, zp: 7, output: true}},
	"QLinearMul":               {{data: 0, scale: 1, zp: 2}, {data: 3, scale: 4, zp: 5}, {data: -1, scale: 6, zp: 7, output: true}},
	"QLinearSigmoid":           {{data: 0, scale: 1, zp: 2}, {data: -1, scale: 3, zp: 4, output: true}},
	"QLinearLeakyRelu":         {{data: 0, scale: 1, zp: 2}, {data: -1, scale: 3, zp: 4, output: true}},
	"QLinearSoftmax":           {{data: 0, scale: 1, zp: 2}, {data: -1, scale: 3, zp: 4, output: true}},
	"QLinearGlobalAveragePool": {{data: 0, scale: 1, zp: 2}, {data: -1, scale: 3, zp: 4, output: true}},
	"QLinearAveragePool":       {{data: 0, scale: 1, zp: 2}, {data: -1, scale: 3, zp: 4, output: true}},
	"QLinearReduceMean":        {{data: 0, scale: 1, zp: 2}, {data: -1, scale: 3, zp: 4, output: true}},
	"DynamicQuantizeMatMul":    {{data: 1, scale: 2, zp: 3, perAxis: colsAxis}},
	"MatMulIntegerToFloat":     {{data: 0, scale: 2, zp: 4}, {data: 1, scale: 3, zp: 5, perAxis: colsAxis}},
	"QAttention":               {{data: 0, scale: 3, zp: 6}, {data: 1, scale: 4, zp: 7}},
	"QGemm":                    {{data: 0, scale: 1, zp: 2}, {data: 3, scale: 4, zp: 5}, {data: -1, scale: 7, zp: 8, output: true}},
}

// quantOnlyMicrosoft are the quantOps that exist only in com.microsoft.
var quantOnlyMicrosoft = map[string]bool{
	"QLinearAdd": true, "QLinearMul": true, "QLinearSigmoid": true, "QLinearLeakyRelu": true, "QLinearSoftmax": true,
	"QLinearGlobalAveragePool": true, "QLinearAveragePool": true, "QLinearReduceMean": true,
	"DynamicQuantizeMatMul": true, "MatMulIntegerToFloat": true, "QAttention": true, "QGemm": true,
}

// zeroPointTypes are the element types a zero point (and a quantized
// operand) may have, with their ranges.
var zeroPointTypes = map[DataType][2]int64{
	Int8: {-128, 127}, Uint8: {0, 255}, Int16: {-32768, 32767}, Uint16: {0, 65535},
	Int32: {math.MinInt32, math.MaxInt32},
}

// valueFacts are what a graph says of a value: its element type and
// dimensions (−1: unknown), and its constant tensor if it has one.
type valueFacts struct {
	dtype DataType
	dims  []int64
	known bool // dtype and dims are declared
	konst *onnxpb.TensorProto
}

// graphFacts collects the declared types and shapes of g's values and
// its constants (initializers, Constant nodes).
func graphFacts(g *onnxpb.GraphProto) map[string]*valueFacts {
	facts := map[string]*valueFacts{}
	fromInfo := func(vi *onnxpb.ValueInfoProto) {
		tt := vi.GetType().GetTensorType()
		if tt == nil || tt.GetShape() == nil {
			return
		}
		f := &valueFacts{dtype: DataType(tt.GetElemType()), known: true}
		for _, d := range tt.GetShape().GetDim() {
			if dv, ok := d.GetValue().(*onnxpb.TensorShapeProto_Dimension_DimValue); ok && dv.DimValue > 0 {
				f.dims = append(f.dims, dv.DimValue)
			} else {
				f.dims = append(f.dims, -1)
			}
		}
		facts[vi.GetName()] = f
	}
	for _, list := range [][]*onnxpb.ValueInfoProto{g.Input, g.ValueInfo, g.Output} {
		for _, vi := range list {
			fromInfo(vi)
		}
	}
	konst := func(name string, t *onnxpb.TensorProto) {
		if name == "" || t == nil {
			return
		}
		facts[name] = &valueFacts{dtype: DataType(t.GetDataType()), dims: t.GetDims(), known: true, konst: t}
	}
	for _, t := range g.Initializer {
		konst(t.GetName(), t)
	}
	for _, n := range g.Node {
		if n.GetOpType() != "Constant" || (n.GetDomain() != "" && n.GetDomain() != "ai.onnx") || len(n.Output) != 1 {
			continue
		}
		for _, a := range n.Attribute {
			switch a.GetName() {
			case "value":
				konst(n.Output[0], a.GetT())
			case "value_float":
				konst(n.Output[0], &onnxpb.TensorProto{DataType: proto32(int32(Float)), FloatData: []float32{a.GetF()}})
			case "value_floats":
				konst(n.Output[0], &onnxpb.TensorProto{DataType: proto32(int32(Float)), Dims: []int64{int64(len(a.GetFloats()))}, FloatData: a.GetFloats()})
			case "value_int":
				konst(n.Output[0], &onnxpb.TensorProto{DataType: proto32(int32(Int64)), Int64Data: []int64{a.GetI()}})
			}
		}
	}
	return facts
}

func proto32(v int32) *int32 { return &v }

// quant checks the constant scales and zero points of g's quantizing
// nodes: scales finite and positive, zero points inside their type and
// of the quantized operand's type, and 1-D scales and zero points as
// long as the axis they quantize.
func (v *validator) quant(g *onnxpb.GraphProto) {
	var facts map[string]*valueFacts
	for _, n := range g.Node {
		params, ok := quantOps[n.GetOpType()]
		if !ok {
			continue
		}
		d := n.GetDomain()
		if d == "ai.onnx" {
			d = ""
		}
		if d != "com.microsoft" && (d != "" || quantOnlyMicrosoft[n.GetOpType()]) {
			continue
		}
		if facts == nil {
			facts = graphFacts(g)
		}
		for _, p := range params {
			v.quantOperand(n, p, facts)
		}
	}
}

// input returns the facts of node input i (nil when absent or unknown).
func input(n *onnxpb.NodeProto, i int, facts map[string]*valueFacts) (string, *valueFacts) {
	if i < 0 || i >= len(n.Input) || n.Input[i] == "" {
		return "", nil
	}
	return n.Input[i], facts[n.Input[i]]
}

func (v *validator) quantOperand(n *onnxpb.NodeProto, p quantParams, facts map[string]*valueFacts) {
	w := nodeWhere(n)
	dataName, data := input(n, p.data, facts)
	scaleName, scale := input(n, p.scale, facts)
	zpName, zp := input(n, p.zp, facts)
	// The quantized operand's element type: the data's, else (an
	// output) the output_dtype attribute's.
	var qtype DataType
	if data != nil && data.known && !p.output {
		qtype = data.dtype
	}
	if p.output {
		if len(n.Output) > 0 {
			if out := facts[n.Output[0]]; out != nil && out.known {
				qtype = out.dtype
			}
		}
		for _, a := range n.Attribute {
			if a.GetName() == "output_dtype" && a.GetI() != 0 {
				qtype = DataType(a.GetI())
			}
		}
	}
	// The quantized axis's length, when the operand's dims are known.
	axisLen := int64(-1)
	if data != nil && data.known && p.perAxis != nil {
		if ax := p.perAxis(n, len(data.dims)); ax >= 0 && ax < len(data.dims) {
			axisLen = data.dims[ax]
		}
	}
	checkLen := func(what, name string, t *onnxpb.TensorProto) {
		if len(t.GetDims()) != 1 || t.GetDims()[0] == 1 || axisLen < 0 {
			return
		}
		if t.GetDims()[0] != axisLen {
			v.add(w, fmt.Sprintf("%s %q has %d values for an axis of %d (input %q)", what, name, t.GetDims()[0], axisLen, dataName))
		}
	}
	if scale != nil && scale.konst != nil {
		v.quantScale(w, scaleName, scale.konst)
		checkLen("scale", scaleName, scale.konst)
	}
	if zp == nil || zp.konst == nil {
		return
	}
	t := zp.konst
	dt := DataType(t.GetDataType())
	rng, ok := zeroPointTypes[dt]
	if !ok {
		if ElemSize(dt) > 0 { // other types are refused as unsupported
			v.add(w, fmt.Sprintf("zero point %q is %s, not a type a zero point may have (int8, uint8, int16, uint16, int32)", zpName, TypeName(dt)))
		}
		return
	}
	if qtype != Undefined && qtype != dt {
		v.add(w, fmt.Sprintf("zero point %q is %s but the quantized value %s is %s", zpName, TypeName(dt), quantName(n, dataName, p), TypeName(qtype)))
	}
	if at, val, bad := outOfRange(t, rng); bad {
		v.add(w, fmt.Sprintf("zero point %q value %d at index %d is outside %s (%d..%d)", zpName, val, at, TypeName(dt), rng[0], rng[1]))
	}
	checkLen("zero point", zpName, t)
	// One zero point per scale: a scalar and a one-value vector are both
	// per-tensor (exporters pair them), more values must match in shape.
	if scale != nil && scale.konst != nil {
		sd, zd := scale.konst.GetDims(), t.GetDims()
		if ns, nz := numel(sd), numel(zd); ns != nz || ns > 1 && fmt.Sprint(sd) != fmt.Sprint(zd) {
			v.add(w, fmt.Sprintf("zero point %q has shape %v, its scale %q %v", zpName, zd, scaleName, sd))
		}
	}
}

// numel is the element count of valid dims (Validate bounds them).
func numel(dims []int64) int64 {
	n := int64(1)
	for _, d := range dims {
		n *= d
	}
	return n
}

func quantName(n *onnxpb.NodeProto, dataName string, p quantParams) string {
	if p.output && len(n.Output) > 0 {
		return fmt.Sprintf("%q (the output)", n.Output[0])
	}
	return fmt.Sprintf("%q", dataName)
}

// quantScale checks a constant scale: floating point, every value finite
// and positive.
func (v *validator) quantScale(w, name string, t *onnxpb.TensorProto) {
	switch DataType(t.GetDataType()) {
	case Float, Float16, BFloat16, Double:
	default:
		v.add(w, fmt.Sprintf("scale %q is %s, not floating point", name, TypeName(DataType(t.GetDataType()))))
		return
	}
	x, err := DecodeTensor(t)
	if err != nil {
		return // the tensor's own check says why
	}
	vals, err := x.AsFloat64s()
	if err != nil {
		return
	}
	for i, s := range vals {
		if !(s > 0) || math.IsInf(s, 0) {
			v.add(w, fmt.Sprintf("scale %q value %.7g at index %d is not a finite positive number", name, s, i))
			return
		}
	}
}

// outOfRange finds a value of an integer tensor outside rng. Values in
// raw_data fit their type by construction; those in int32_data need
// not (300 in a uint8 tensor), and DecodeTensor would wrap them.
func outOfRange(t *onnxpb.TensorProto, rng [2]int64) (at int, val int64, bad bool) {
	if t.RawData != nil {
		return 0, 0, false
	}
	for i, x := range t.Int32Data {
		if int64(x) < rng[0] || int64(x) > rng[1] {
			return i, int64(x), true
		}
	}
	return 0, 0, false
}
