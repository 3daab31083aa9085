package models

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// graph accumulates nodes and initializers with exporter-like names.
type graph struct {
	opset   int
	nodes   []*onnxpb.NodeProto
	inits   []*onnxpb.TensorProto
	names   map[string]bool
	matmuls int // counter for onnx::MatMul_N weight names
	err     error
}

func newGraph(opset int) *graph {
	return &graph{opset: opset, names: map[string]bool{}, matmuls: 1000}
}

// node appends a node named name (a path like "/encoder/layer.0/Add") with
// one output "<name>_output_0" and returns that output.
func (g *graph) node(op, name string, inputs []string, attrs ...*onnxpb.AttributeProto) string {
	out := name + "_output_0"
	g.nodeOut(op, name, inputs, []string{out}, attrs...)
	return out
}

func (g *graph) nodeOut(op, name string, inputs, outputs []string, attrs ...*onnxpb.AttributeProto) {
	if g.names[name] {
		g.fail(fmt.Errorf("models: duplicate node name %q", name))
	}
	g.names[name] = true
	n := &onnxpb.NodeProto{OpType: &op, Name: &name, Input: inputs, Output: outputs, Attribute: attrs}
	g.nodes = append(g.nodes, n)
}

func (g *graph) fail(err error) {
	if g.err == nil {
		g.err = err
	}
}

// init adds an initializer.
func (g *graph) init(name string, t *onnx.Tensor) string {
	if g.names["init:"+name] {
		g.fail(fmt.Errorf("models: duplicate initializer %q", name))
		return name
	}
	g.names["init:"+name] = true
	tp, err := onnx.EncodeTensor(name, t)
	if err != nil {
		g.fail(fmt.Errorf("models: %w", err))
		return name
	}
	g.inits = append(g.inits, tp)
	return name
}

// constant emits a Constant node holding t, named like the exporter's
// "/path/Constant" nodes, and returns its output.
func (g *graph) constant(name string, t *onnx.Tensor) string {
	tp, err := onnx.EncodeTensor("", t)
	if err != nil {
		g.fail(fmt.Errorf("models: %w", err))
	}
	tp.Name = nil
	return g.node("Constant", name, nil, attrTensor("value", tp))
}

func (g *graph) constInts(name string, v ...int64) string {
	return g.constant(name, onnx.NewInt64([]int{len(v)}, v))
}

func (g *graph) constScalarInt(name string, v int64) string {
	return g.constant(name, onnx.NewInt64([]int{}, []int64{v}))
}

func (g *graph) constScalarFloat(name string, v float32) string {
	return g.constant(name, onnx.NewFloat([]int{}, []float32{v}))
}

// unsqueeze handles the axes attribute (opset < 13) vs input (≥ 13) forms.
func (g *graph) unsqueeze(name, x string, axes ...int64) string {
	if g.opset >= 13 {
		a := g.constInts(name+"_axes", axes...)
		return g.node("Unsqueeze", name, []string{x, a})
	}
	return g.node("Unsqueeze", name, []string{x}, attrInts("axes", axes...))
}

// viewBS is x.view(B, S, dims...) through the exporter's shape chain: B
// and S gathered from Shape(x), the dims constants, all named under p.
func (g *graph) viewBS(p, x string, dims ...int64) string {
	s0 := g.node("Shape", p+"/Shape", []string{x})
	i0 := g.constScalarInt(p+"/Constant", 0)
	b := g.node("Gather", p+"/Gather", []string{s0, i0}, attrInt("axis", 0))
	s1 := g.node("Shape", p+"/Shape_1", []string{x})
	i1 := g.constScalarInt(p+"/Constant_1", 1)
	s := g.node("Gather", p+"/Gather_1", []string{s1, i1}, attrInt("axis", 0))
	parts := []string{g.unsqueeze(p+"/Unsqueeze", b, 0), g.unsqueeze(p+"/Unsqueeze_1", s, 0)}
	for i, d := range dims {
		parts = append(parts, g.constInts(fmt.Sprintf("%s/Constant_%d", p, i+2), d))
	}
	shape := g.node("Concat", p+"/Concat", parts, attrInt("axis", 0))
	return g.node("Reshape", p+"/Reshape", []string{x, shape})
}

// reduceMeanLast is ReduceMean over the last axis, keepdims=1 (axes as
// an attribute below opset 18).
func (g *graph) reduceMeanLast(name, x string) string {
	if g.opset >= 18 {
		a := g.constInts(name+"_axes", -1)
		return g.node("ReduceMean", name, []string{x, a}, attrInt("keepdims", 1))
	}
	return g.node("ReduceMean", name, []string{x}, attrInts("axes", -1), attrInt("keepdims", 1))
}

// layerNorm emits LayerNormalization (opset ≥ 17) or its decomposition.
func (g *graph) layerNorm(prefix, x, gamma, beta string, eps float32) string {
	if g.opset >= 17 {
		return g.node("LayerNormalization", prefix+"/LayerNormalization", []string{x, gamma, beta},
			attrInt("axis", -1), attrFloat("epsilon", eps))
	}
	mean := g.reduceMeanLast(prefix+"/ReduceMean", x)
	d := g.node("Sub", prefix+"/Sub", []string{x, mean})
	two := g.constScalarFloat(prefix+"/Constant", 2)
	sq := g.node("Pow", prefix+"/Pow", []string{d, two})
	v := g.reduceMeanLast(prefix+"/ReduceMean_1", sq)
	e := g.constScalarFloat(prefix+"/Constant_1", eps)
	ve := g.node("Add", prefix+"/Add", []string{v, e})
	sd := g.node("Sqrt", prefix+"/Sqrt", []string{ve})
	n := g.node("Div", prefix+"/Div", []string{d, sd})
	s := g.node("Mul", prefix+"/Mul", []string{n, gamma})
	return g.node("Add", prefix+"/Add_1", []string{s, beta})
}

func attrInt(name string, v int64) *onnxpb.AttributeProto {
	t := onnxpb.AttributeProto_INT
	return &onnxpb.AttributeProto{Name: &name, Type: &t, I: &v}
}

func attrFloat(name string, v float32) *onnxpb.AttributeProto {
	t := onnxpb.AttributeProto_FLOAT
	return &onnxpb.AttributeProto{Name: &name, Type: &t, F: &v}
}

func attrInts(name string, v ...int64) *onnxpb.AttributeProto {
	t := onnxpb.AttributeProto_INTS
	return &onnxpb.AttributeProto{Name: &name, Type: &t, Ints: v}
}

func attrTensor(name string, v *onnxpb.TensorProto) *onnxpb.AttributeProto {
	t := onnxpb.AttributeProto_TENSOR
	return &onnxpb.AttributeProto{Name: &name, Type: &t, T: v}
}

// irVersion is the IR version a model of the default-domain opset
// declares.
func irVersion(opset int) int64 {
	switch {
	case opset <= 14:
		return 7
	case opset <= 18:
		return 8
	case opset <= 20:
		return 9
	default:
		return 10
	}
}

// batchSeq is the [batch_size, sequence_length] shape of the builders'
// inputs.
func batchSeq() []onnx.Dim {
	return []onnx.Dim{{Value: -1, Param: "batch_size"}, {Value: -1, Param: "sequence_length"}}
}

// model is the model a builder returns: graph "main_graph" of nodes and
// g's initializers, reading the int64 [batch_size, sequence_length]
// inputs and writing outputs, at g's opset and its IR version (irVersion),
// produced by linearize/models 1, with doc as its doc string, followed by
// the number of supplied weights when there are any.
func (g *graph) model(nodes []*onnxpb.NodeProto, inputs []string, outputs []*onnxpb.ValueInfoProto, doc string, supplied int) *onnxpb.ModelProto {
	name := "main_graph"
	graphPB := &onnxpb.GraphProto{Name: &name, Node: nodes, Initializer: g.inits, Output: outputs}
	for _, in := range inputs {
		graphPB.Input = append(graphPB.Input, onnx.MakeValueInfo(in, onnx.Int64, batchSeq()))
	}
	ir := irVersion(g.opset)
	opset := int64(g.opset)
	producer, version := "linearize/models", "1"
	if supplied > 0 {
		doc += fmt.Sprintf(", %d supplied weights", supplied)
	}
	empty := ""
	return &onnxpb.ModelProto{
		IrVersion:       &ir,
		ProducerName:    &producer,
		ProducerVersion: &version,
		DocString:       &doc,
		OpsetImport:     []*onnxpb.OperatorSetIdProto{{Domain: &empty, Version: &opset}},
		Graph:           graphPB,
	}
}

// weights draws or looks up parameter tensors.
type weights struct {
	rng   *rand.Rand
	std   float64
	given map[string]*onnx.Tensor
	used  map[string]bool
	err   error
}

// newWeights returns the weights of a build: the given ones (by
// state-dict name) where supplied, else drawn at standard deviation std
// from the PCG generator of seed and stream.
func newWeights(seed, stream uint64, std float64, given map[string]*onnx.Tensor) *weights {
	return &weights{rng: rand.New(rand.NewPCG(seed, stream)), std: std, given: given, used: map[string]bool{}}
}

// done returns the first error of the build, or an error naming a
// supplied weight that no parameter of family took.
func (w *weights) done(g *graph, family string) error {
	if w.err != nil {
		return w.err
	}
	if g.err != nil {
		return g.err
	}
	var unused []string
	for name := range w.given {
		if !w.used[name] {
			unused = append(unused, name)
		}
	}
	if len(unused) > 0 {
		sort.Strings(unused)
		return fmt.Errorf("models: %d supplied weights are not %s parameters, e.g. %q", len(unused), family, unused[0])
	}
	return nil
}

func (w *weights) fail(err error) {
	if w.err == nil {
		w.err = err
	}
}

// get returns the tensor called name (a Hugging Face state-dict name) from
// the supplied weights, or draws one: "normal" entries N(0, std²), "ones"
// 1 + N(0, std²) (LayerNorm gains), "bias" N(0, std²).
func (w *weights) get(name string, shape []int, kind string) *onnx.Tensor {
	if t, ok := w.given[name]; ok {
		w.used[name] = true
		if t.DType != onnx.Float {
			w.fail(fmt.Errorf("models: weight %q is %s, want float32", name, onnx.TypeName(t.DType)))
			return onnx.NewFloat(shape, make([]float32, onnx.NumElements(shape)))
		}
		if !slices.Equal(t.Shape, shape) {
			w.fail(fmt.Errorf("models: weight %q has shape %v, want %v", name, t.Shape, shape))
			return onnx.NewFloat(shape, make([]float32, onnx.NumElements(shape)))
		}
		return onnx.NewFloat(append([]int{}, shape...), append([]float32{}, t.Floats()...))
	}
	n := onnx.NumElements(shape)
	d := make([]float32, n)
	for i := range d {
		v := w.rng.NormFloat64() * w.std
		if kind == "ones" {
			v += 1
		}
		d[i] = float32(v)
	}
	return onnx.NewFloat(append([]int{}, shape...), d)
}

// transpose2 returns the transpose of a 2-D float tensor.
func transpose2(t *onnx.Tensor) *onnx.Tensor {
	r, c := t.Shape[0], t.Shape[1]
	src := t.Floats()
	dst := make([]float32, r*c)
	for i := 0; i < r; i++ {
		for j := 0; j < c; j++ {
			dst[j*r+i] = src[i*c+j]
		}
	}
	return onnx.NewFloat([]int{c, r}, dst)
}

func itoa(i int) string { return strconv.Itoa(i) }

// float32Min is the most negative finite float32, the value PyTorch's
// torch.finfo(torch.float32).min puts into the extended attention mask.
const float32Min = -math.MaxFloat32
