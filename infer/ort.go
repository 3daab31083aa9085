//go:build cgo && !linearize_noort

package infer

import (
	"encoding/binary"
	"fmt"
	"math"

	ort "github.com/yalue/onnxruntime_go"
	"google.golang.org/protobuf/proto"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

func init() {
	RegisterBackend("ort", func(m *onnxpb.ModelProto, opts Options) (Session, error) {
		return NewORTSession(m, opts)
	})
}

// ortSession runs a model with onnxruntime.
//
// onnxruntime_go v1.27.0 has three gaps that the session works around by
// editing a private copy of the model (the caller's model is never
// modified):
//
//   - Rank-0 outputs: the library turns every output into a Tensor[T] whose
//     constructor rejects an empty shape, so a scalar output fails. Outputs
//     whose rank is 0 or unknown are therefore fetched as two values,
//     Reshape(x, [-1]) (rank 1) and Shape(x), and put back together in Go.
//   - Float16 outputs: for types without a Go equivalent the library copies
//     one byte per element instead of two, truncating the data. Float16 and
//     bfloat16 outputs are fetched through Cast(to=FLOAT), which is exact,
//     and converted back to half-precision bits in Go.
//   - Zero-input models: Run indexes the first input unconditionally and
//     panics when there is none. Such models get one unused float input
//     that the session feeds itself.
//
// Float16 inputs are passed as CustomDataTensors, which the library
// supports; rank-0 inputs use its Scalar type.
type ortSession struct {
	sess    *ort.DynamicAdvancedSession
	inputs  []Value
	outputs []Value
	byName  map[string]Value // declared inputs by name

	feedNames []string // ORT input names in order; may hold the dummy
	dummy     string   // name of the dummy input, or ""

	fetchNames []string             // ORT output names in order
	fetch      map[string]fetchSpec // by public output name
}

// fetchSpec says how one public output is read from the ORT outputs.
type fetchSpec struct {
	value int // index into fetchNames of the value (possibly flattened/cast)
	shape int // index of its Shape output, or -1 when value has the shape
	half  onnx.DataType
}

// NewORTSession creates an onnxruntime session for m. opts.Threads sets
// the intra-op thread count; opts.Expose names internal values that Run
// can also return.
func NewORTSession(m *onnxpb.ModelProto, opts Options) (Session, error) {
	if err := initORT(); err != nil {
		return nil, err
	}
	if m == nil || m.Graph == nil {
		return nil, fmt.Errorf("infer: ort: model has no graph")
	}
	s := &ortSession{byName: map[string]Value{}, fetch: map[string]fetchSpec{}}
	s.readSignature(m.Graph)
	info := valueInfos(m.Graph)
	want, err := s.returnable(m.Graph, info, opts.Expose)
	if err != nil {
		return nil, err
	}
	mc := proto.Clone(m).(*onnxpb.ModelProto)
	gc := mc.Graph
	declareOutputs(gc, want, info)
	needInfo, err := resolveTypes(mc, want)
	if err != nil {
		return nil, err
	}
	dropScalarDeclarations(gc)
	namer := onnx.NewNamer(gc)
	if extra := s.planFetches(gc, namer, want); extra || needInfo {
		ensureDefaultOpset(mc)
	}
	if len(s.feedNames) == 0 {
		s.dummy = namer.Name("linearize_unused_input")
		gc.Input = append(gc.Input, onnx.MakeValueInfo(s.dummy, onnx.Float, []onnx.Dim{{Value: 1}}))
		s.feedNames = []string{s.dummy}
	}
	sess, err := newDynamicSession(mc, s.feedNames, s.fetchNames, opts.Threads)
	if err != nil {
		return nil, err
	}
	s.sess = sess
	return s, nil
}

// readSignature records g's inputs (initializers excluded) and outputs.
func (s *ortSession) readSignature(g *onnxpb.GraphProto) {
	inits := map[string]bool{}
	for _, t := range g.Initializer {
		inits[t.GetName()] = true
	}
	for _, vi := range g.Input {
		if inits[vi.GetName()] {
			continue
		}
		v := valueOf(vi)
		s.inputs = append(s.inputs, v)
		s.byName[v.Name] = v
		s.feedNames = append(s.feedNames, v.Name)
	}
	for _, vi := range g.Output {
		s.outputs = append(s.outputs, valueOf(vi))
	}
}

// returnable lists the values Run may return: graph outputs, then the
// exposed values (DType Undefined when nothing declares their type).
func (s *ortSession) returnable(g *onnxpb.GraphProto, info map[string]*onnxpb.ValueInfoProto, expose []string) ([]Value, error) {
	want := make([]Value, 0, len(s.outputs)+len(expose))
	seen := map[string]bool{}
	for _, v := range s.outputs {
		want = append(want, v)
		seen[v.Name] = true
	}
	for _, name := range expose {
		if seen[name] {
			continue
		}
		seen[name] = true
		if !producedOrDeclared(g, name) {
			return nil, fmt.Errorf("infer: ort: cannot expose %q: no such value in the graph", name)
		}
		v := Value{Name: name, DType: onnx.Undefined}
		if vi, ok := info[name]; ok {
			v = valueOf(vi)
		}
		want = append(want, v)
	}
	return want, nil
}

// declareOutputs makes every wanted value a graph output of gc, with its
// declared type where it has one.
func declareOutputs(gc *onnxpb.GraphProto, want []Value, info map[string]*onnxpb.ValueInfoProto) {
	declared := map[string]bool{}
	for _, vi := range gc.Output {
		declared[vi.GetName()] = true
	}
	for _, v := range want {
		if declared[v.Name] {
			continue
		}
		if vi, ok := info[v.Name]; ok {
			gc.Output = append(gc.Output, proto.Clone(vi).(*onnxpb.ValueInfoProto))
		} else {
			// No declared type: onnxruntime infers the type of a graph
			// output that lacks one.
			n := v.Name
			gc.Output = append(gc.Output, &onnxpb.ValueInfoProto{Name: &n})
		}
	}
}

// resolveTypes fills in the type and shape of the wanted values of
// unknown type from onnxruntime's shape inference over mc, which knows
// them, before the session decides how to fetch them. It reports whether
// it had to ask.
func resolveTypes(mc *onnxpb.ModelProto, want []Value) (asked bool, err error) {
	for _, v := range want {
		if v.DType == onnx.Undefined {
			asked = true
		}
	}
	if !asked {
		return false, nil
	}
	data, err := onnx.Encode(mc)
	if err != nil {
		return true, fmt.Errorf("infer: ort: %v", err)
	}
	_, outs, err := ort.GetInputOutputInfoWithONNXData(data)
	if err != nil {
		return true, fmt.Errorf("infer: ort: creating session: %v", err)
	}
	got := map[string]ort.InputOutputInfo{}
	for _, o := range outs {
		got[o.Name] = o
	}
	for i, v := range want {
		if v.DType != onnx.Undefined {
			continue
		}
		o, ok := got[v.Name]
		if !ok || o.OrtValueType != ort.ONNXTypeTensor {
			return true, fmt.Errorf("infer: ort: value %q is not a tensor", v.Name)
		}
		want[i].DType = onnx.DataType(o.DataType)
		// A reported rank of 0 may mean "unknown"; fetch such values
		// through Reshape+Shape, which is right either way.
		if len(o.Dimensions) > 0 {
			want[i].Shape = make([]onnx.Dim, len(o.Dimensions))
			for j, d := range o.Dimensions {
				want[i].Shape[j] = onnx.Dim{Value: d}
			}
		}
	}
	return true, nil
}

// dropScalarDeclarations removes the shape of graph outputs declared rank
// 0: such an output may be anything at run time (a PP-OCR export declares
// a scalar and returns [1, 40, 18385]), and its declared shape would let
// onnxruntime fold the Shape fetched for it into the declaration. The
// runtime is trusted instead.
func dropScalarDeclarations(gc *onnxpb.GraphProto) {
	for _, o := range gc.Output {
		if tt := o.GetType().GetTensorType(); tt != nil && tt.Shape != nil && len(tt.Shape.Dim) == 0 {
			tt.Shape = nil
		}
	}
}

// fetchPlan rewrites the outputs the library cannot fetch directly: it
// adds the nodes and outputs that fetch them to its graph and records in
// the session how each public value is read back.
type fetchPlan struct {
	s         *ortSession
	gc        *onnxpb.GraphProto
	namer     *onnx.Namer
	extraOut  []*onnxpb.ValueInfoProto
	flatShape string // the [-1] initializer of the flattening Reshapes, once made
}

// planFetches plans how each wanted value is fetched and reports whether
// it added graph outputs.
func (s *ortSession) planFetches(gc *onnxpb.GraphProto, namer *onnx.Namer, want []Value) (added bool) {
	p := &fetchPlan{s: s, gc: gc, namer: namer}
	for _, v := range want {
		s.fetch[v.Name] = p.fetch(v)
	}
	gc.Output = append(gc.Output, p.extraOut...)
	return len(p.extraOut) > 0
}

// fetch plans one value: through Cast(to=FLOAT) when it is half
// precision, flattened with its Shape beside it when its rank is 0 or
// unknown.
func (p *fetchPlan) fetch(v Value) fetchSpec {
	spec := fetchSpec{shape: -1}
	src := v.Name
	if v.DType == onnx.Float16 || v.DType == onnx.BFloat16 {
		src = p.castToFloat(src)
		spec.half = v.DType
	}
	switch {
	case len(v.Shape) == 0:
		flat, shp := p.flatten(src)
		spec.value = p.addOut(flat)
		spec.shape = p.addOut(shp)
	case src != v.Name:
		spec.value = p.addOut(src)
	default:
		p.s.fetchNames = append(p.s.fetchNames, src)
		spec.value = len(p.s.fetchNames) - 1
	}
	return spec
}

// addOut fetches name as a new graph output; it returns its index among
// the fetched names.
func (p *fetchPlan) addOut(name string) int {
	p.s.fetchNames = append(p.s.fetchNames, name)
	n := name
	p.extraOut = append(p.extraOut, &onnxpb.ValueInfoProto{Name: &n})
	return len(p.s.fetchNames) - 1
}

// castToFloat adds Cast(src, to=FLOAT) and returns its output.
func (p *fetchPlan) castToFloat(src string) string {
	c := p.namer.Name(src + "_as_float")
	p.gc.Node = append(p.gc.Node, &onnxpb.NodeProto{
		OpType: proto.String("Cast"), Name: proto.String(p.namer.Name("linearize_cast")),
		Input: []string{src}, Output: []string{c},
		Attribute: []*onnxpb.AttributeProto{{
			Name: proto.String("to"), Type: onnxpb.AttributeProto_INT.Enum(),
			I: proto.Int64(int64(onnx.Float)),
		}},
	})
	return c
}

// flatten adds Reshape(src, [-1]) and Shape(src) and returns their
// outputs.
func (p *fetchPlan) flatten(src string) (flat, shp string) {
	if p.flatShape == "" {
		p.flatShape = p.namer.Name("linearize_flat_shape")
		p.gc.Initializer = append(p.gc.Initializer, &onnxpb.TensorProto{
			Name: proto.String(p.flatShape), Dims: []int64{1},
			DataType: proto.Int32(int32(onnx.Int64)), Int64Data: []int64{-1},
		})
	}
	flat = p.namer.Name(src + "_flat")
	shp = p.namer.Name(src + "_shape")
	p.gc.Node = append(p.gc.Node,
		&onnxpb.NodeProto{
			OpType: proto.String("Reshape"), Name: proto.String(p.namer.Name("linearize_flatten")),
			Input: []string{src, p.flatShape}, Output: []string{flat},
		},
		&onnxpb.NodeProto{
			OpType: proto.String("Shape"), Name: proto.String(p.namer.Name("linearize_shape")),
			Input: []string{src}, Output: []string{shp},
		})
	return flat, shp
}

// newDynamicSession encodes mc and opens an onnxruntime session over it
// with threads intra-op threads (0: onnxruntime's default).
func newDynamicSession(mc *onnxpb.ModelProto, feeds, fetches []string, threads int) (*ort.DynamicAdvancedSession, error) {
	data, err := onnx.Encode(mc)
	if err != nil {
		return nil, fmt.Errorf("infer: ort: %v", err)
	}
	so, err := ort.NewSessionOptions()
	if err != nil {
		return nil, fmt.Errorf("infer: ort: session options: %v", err)
	}
	defer so.Destroy()
	if threads > 0 {
		if err := so.SetIntraOpNumThreads(threads); err != nil {
			return nil, fmt.Errorf("infer: ort: threads: %v", err)
		}
		if err := so.SetInterOpNumThreads(1); err != nil {
			return nil, fmt.Errorf("infer: ort: threads: %v", err)
		}
	}
	sess, err := ort.NewDynamicAdvancedSessionWithONNXData(data, feeds, fetches, so)
	if err != nil {
		return nil, fmt.Errorf("infer: ort: creating session: %v", err)
	}
	return sess, nil
}

// ensureDefaultOpset adds an ai.onnx opset import when the model has none,
// so that the nodes added for the workarounds resolve.
func ensureDefaultOpset(m *onnxpb.ModelProto) {
	if onnx.OpsetVersion(m, "") > 0 {
		return
	}
	m.OpsetImport = append(m.OpsetImport, &onnxpb.OperatorSetIdProto{Domain: proto.String(""), Version: proto.Int64(13)})
}

// valueInfos maps value names to their declared types (value_info, graph
// inputs and outputs).
func valueInfos(g *onnxpb.GraphProto) map[string]*onnxpb.ValueInfoProto {
	m := map[string]*onnxpb.ValueInfoProto{}
	for _, list := range [][]*onnxpb.ValueInfoProto{g.ValueInfo, g.Input, g.Output} {
		for _, vi := range list {
			if vi.GetType().GetTensorType() != nil && vi.GetType().GetTensorType().GetElemType() != 0 {
				m[vi.GetName()] = vi
			}
		}
	}
	return m
}

func (s *ortSession) Inputs() []Value  { return append([]Value(nil), s.inputs...) }
func (s *ortSession) Outputs() []Value { return append([]Value(nil), s.outputs...) }

func (s *ortSession) Close() error {
	if s.sess == nil {
		return nil
	}
	err := s.sess.Destroy()
	s.sess = nil
	if err != nil {
		return fmt.Errorf("infer: ort: %v", err)
	}
	return nil
}

func (s *ortSession) Run(inputs map[string]*onnx.Tensor, names ...string) (map[string]*onnx.Tensor, error) {
	if s.sess == nil {
		return nil, fmt.Errorf("infer: ort: session is closed")
	}
	if err := CheckInputs(s.inputs, inputs); err != nil {
		return nil, err
	}
	if len(names) == 0 {
		for _, v := range s.outputs {
			names = append(names, v.Name)
		}
	}
	for _, n := range names {
		if _, ok := s.fetch[n]; !ok {
			return nil, fmt.Errorf("infer: ort: %q is neither a graph output nor an exposed value", n)
		}
	}
	feeds := make([]ort.Value, len(s.feedNames))
	defer func() {
		for _, v := range feeds {
			if v != nil {
				v.Destroy()
			}
		}
	}()
	for i, n := range s.feedNames {
		var t *onnx.Tensor
		if n == s.dummy {
			t = onnx.NewFloat([]int{1}, []float32{0})
		} else {
			t = inputs[n]
		}
		v, err := toORT(t)
		if err != nil {
			return nil, fmt.Errorf("infer: ort: input %q: %v", n, err)
		}
		feeds[i] = v
	}
	outs := make([]ort.Value, len(s.fetchNames))
	defer func() {
		for _, v := range outs {
			if v != nil {
				v.Destroy()
			}
		}
	}()
	if err := s.sess.Run(feeds, outs); err != nil {
		return nil, fmt.Errorf("infer: ort: %v", err)
	}
	res := make(map[string]*onnx.Tensor, len(names))
	for _, n := range names {
		spec := s.fetch[n]
		t, err := fromORT(outs[spec.value])
		if err != nil {
			return nil, fmt.Errorf("infer: ort: output %q: %v", n, err)
		}
		if spec.shape >= 0 {
			st, err := fromORT(outs[spec.shape])
			if err != nil {
				return nil, fmt.Errorf("infer: ort: output %q: %v", n, err)
			}
			dims := st.Int64s()
			shape := make([]int, len(dims))
			for i, d := range dims {
				shape[i] = int(d)
			}
			if onnx.NumElements(shape) != t.Len() {
				return nil, fmt.Errorf("infer: ort: output %q: shape %v does not match %d elements", n, shape, t.Len())
			}
			t.Shape = shape
		}
		if spec.half != onnx.Undefined {
			f := t.Floats()
			h := make([]uint16, len(f))
			for i, x := range f {
				if spec.half == onnx.Float16 {
					h[i] = onnx.FloatToHalf(x)
				} else {
					h[i] = uint16(math.Float32bits(x) >> 16)
				}
			}
			t = &onnx.Tensor{DType: spec.half, Shape: t.Shape, Data: h}
		}
		res[n] = t
	}
	return res, nil
}

// toORT wraps t as an onnxruntime value that shares t's memory where the
// library allows it.
func toORT(t *onnx.Tensor) (ort.Value, error) {
	if err := t.Check(); err != nil {
		return nil, err
	}
	shape := make(ort.Shape, len(t.Shape))
	for i, d := range t.Shape {
		shape[i] = int64(d)
	}
	if e, ok := ortTypes[t.DType]; ok {
		return e.toORT(shape, t.Data)
	}
	if d, ok := t.Data.([]uint16); ok { // Float16, BFloat16
		if len(shape) == 0 {
			return nil, fmt.Errorf("rank-0 %s inputs are not supported by onnxruntime_go", onnx.TypeName(t.DType))
		}
		// The library has no half-precision Go type; pass the bits.
		b := make([]byte, 2*len(d))
		for i, h := range d {
			binary.LittleEndian.PutUint16(b[2*i:], h)
		}
		if len(b) == 0 {
			b = make([]byte, 2) // NewCustomDataTensor wants a non-empty buffer
		}
		return ort.NewCustomDataTensor(shape, b, ort.TensorElementDataType(t.DType))
	}
	return nil, fmt.Errorf("element type %s is not supported", onnx.TypeName(t.DType))
}

// ortTypes are the element types onnxruntime_go has a Go type for (the
// Go type of their data, see onnx.Tensor).
var ortTypes = map[onnx.DataType]ortType{
	onnx.Float: ortElem[float32]{}, onnx.Double: ortElem[float64]{},
	onnx.Int8: ortElem[int8]{}, onnx.Uint8: ortElem[uint8]{},
	onnx.Int16: ortElem[int16]{}, onnx.Uint16: ortElem[uint16]{},
	onnx.Int32: ortElem[int32]{}, onnx.Uint32: ortElem[uint32]{},
	onnx.Int64: ortElem[int64]{}, onnx.Uint64: ortElem[uint64]{},
	onnx.Bool: ortElem[bool]{},
}

// ortType moves the data of one element type to and from onnxruntime.
type ortType interface {
	// toORT wraps data (of the type's Go slice type) as a value of the
	// given shape that shares its memory.
	toORT(shape ort.Shape, data any) (ort.Value, error)
	// fromORT returns the data of v, or false when v is not a tensor of
	// this type.
	fromORT(v ort.Value) (any, bool)
}

type ortElem[T ort.TensorData] struct{}

func (ortElem[T]) toORT(shape ort.Shape, data any) (ort.Value, error) {
	d, ok := data.([]T)
	if !ok {
		return nil, fmt.Errorf("data of type %T does not match its element type", data)
	}
	if len(shape) == 0 {
		return ort.NewScalar(d[0])
	}
	return ort.NewTensor(shape, d)
}

func (ortElem[T]) fromORT(v ort.Value) (any, bool) {
	x, ok := v.(*ort.Tensor[T])
	if !ok {
		return nil, false
	}
	return x.GetData(), true
}

// fromORT copies an onnxruntime output into a Tensor.
func fromORT(v ort.Value) (*onnx.Tensor, error) {
	shape := make([]int, len(v.GetShape()))
	for i, d := range v.GetShape() {
		shape[i] = int(d)
	}
	dt := onnx.DataType(v.DataType())
	e, ok := ortTypes[dt]
	var data any
	if ok {
		data, ok = e.fromORT(v)
	}
	if !ok {
		return nil, fmt.Errorf("onnxruntime returned a value of type %T, which linearize does not read", v)
	}
	// The library already copied the data into a Go slice; Destroy only
	// releases the ORT value that points at it, so the slice stays valid.
	return &onnx.Tensor{DType: dt, Shape: shape, Data: data}, nil
}
