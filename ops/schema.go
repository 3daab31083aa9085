package ops

// One schema per custom op: its inputs, its attributes (type, default,
// range, doc line) and its doc line, declared once next to the op's
// attribute struct. Everything else that knows an op's signature is
// derived from the schema: the node a converter writes (NewLaraNode and
// the others: the attributes of the struct, defaults left out), the Go
// kernel's reading of a node (one generic parse, errors naming the node
// and the attribute), the range checks of an attribute struct, the input
// and attribute lists of the function body, CheckNode (what infer's
// validate checks before running a kernel) and the op reference in
// docs/ops.md (Reference, written by go generate). Adding an attribute is
// one field in the op's schema plus the kernel's use of it.

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/linearize/linearize/kernels"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// AttrType is the type of a custom op's attribute.
type AttrType int

// Attribute types of the custom ops.
const (
	AttrFloat  AttrType = iota + 1 // float32
	AttrInt                        // int64 (flags are 0 or 1)
	AttrString                     // string
	AttrFloats                     // list of float32
)

func (t AttrType) String() string {
	switch t {
	case AttrFloat:
		return "float"
	case AttrInt:
		return "int"
	case AttrString:
		return "string"
	case AttrFloats:
		return "floats"
	}
	return fmt.Sprintf("AttrType(%d)", int(t))
}

func (t AttrType) proto() onnxpb.AttributeProto_AttributeType {
	switch t {
	case AttrFloat:
		return onnxpb.AttributeProto_FLOAT
	case AttrInt:
		return onnxpb.AttributeProto_INT
	case AttrString:
		return onnxpb.AttributeProto_STRING
	case AttrFloats:
		return onnxpb.AttributeProto_FLOATS
	}
	return onnxpb.AttributeProto_UNDEFINED
}

// InputSchema is one input of a custom op.
type InputSchema struct {
	Name string
	// Optional inputs may be absent for the Go kernel (an empty name, or
	// left off the end of the list). The function bodies cannot test for
	// an absent input, so a converter passes every input a body reads.
	Optional bool
	Doc      string
}

// AttrSchema is one attribute of a custom op.
type AttrSchema struct {
	Name string
	Type AttrType
	// Default is the value of a node without the attribute (float32,
	// int64 or string, as Type), nil when it has none: then the
	// attribute is Required, or it is absent when unset (a list), or,
	// for scale, the Go kernel reads its absence as the zero value.
	Default  any
	Required bool
	// Min and Max bound an int attribute when Max > Min.
	Min, Max int64
	// Values, when set, are the values a string attribute may take.
	Values []string
	Doc    string
}

// OpSchema describes a custom op of Domain at DomainVersion.
type OpSchema struct {
	Op     string
	Doc    string // one line
	Inputs []InputSchema
	Output string // the output's doc (the op has one output, "out")
	Attrs  []AttrSchema
	File   string // the file holding the kernel and the function body
}

// minInputs is the length of the shortest input list a node may have:
// up to the last required input.
func (s *OpSchema) minInputs() int {
	n := 0
	for i, in := range s.Inputs {
		if !in.Optional {
			n = i + 1
		}
	}
	return n
}

// InputNames returns the names of the first n inputs (all when n < 0).
func (s *OpSchema) InputNames(n int) []string {
	if n < 0 || n > len(s.Inputs) {
		n = len(s.Inputs)
	}
	names := make([]string, n)
	for i := range names {
		names[i] = s.Inputs[i].Name
	}
	return names
}

// attr returns the attribute called name, or nil.
func (s *OpSchema) attr(name string) *AttrSchema {
	for i := range s.Attrs {
		if s.Attrs[i].Name == name {
			return &s.Attrs[i]
		}
	}
	return nil
}

// errorf returns an error of the op, naming node n when it has a name.
func (s *OpSchema) errorf(n *onnxpb.NodeProto, format string, args ...any) error {
	where := ""
	if n.GetName() != "" {
		where = fmt.Sprintf(" node %q", n.GetName())
	}
	return fmt.Errorf("ops: %s%s: %s", s.Op, where, fmt.Sprintf(format, args...))
}

// value reads attribute at of s's type: float32, int64, string or
// []float32, checking ranges; at nil gives the default (nil without one).
func (a *AttrSchema) value(at *onnxpb.AttributeProto) (any, error) {
	if at == nil {
		if a.Required {
			return nil, fmt.Errorf("attribute %s is required", a.Name)
		}
		return a.Default, nil
	}
	if at.GetType() != a.Type.proto() {
		return nil, fmt.Errorf("attribute %s has type %s, want %s", a.Name, at.GetType(), a.Type.proto())
	}
	var v any
	switch a.Type {
	case AttrFloat:
		v = at.GetF()
	case AttrInt:
		v = at.GetI()
	case AttrString:
		v = string(at.GetS())
	case AttrFloats:
		v = slices.Clone(at.GetFloats())
	}
	return v, a.check(v)
}

// check validates a value of the attribute: ints within Min..Max, floats
// finite.
func (a *AttrSchema) check(v any) error {
	switch x := v.(type) {
	case int64:
		if a.Max > a.Min && (x < a.Min || x > a.Max) {
			return fmt.Errorf("%s %d, want %d..%d", a.Name, x, a.Min, a.Max)
		}
	case float32:
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return fmt.Errorf("%s %g must be finite", a.Name, x)
		}
	case []float32:
		for _, f := range x {
			if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
				return fmt.Errorf("%s %g must be finite", a.Name, f)
			}
		}
	case string:
		if len(a.Values) > 0 && !slices.Contains(a.Values, x) {
			return fmt.Errorf("%s %q, want %s", a.Name, x, strings.Join(a.Values, ", "))
		}
	}
	return nil
}

// proto encodes v as the attribute.
func (a *AttrSchema) proto(v any) *onnxpb.AttributeProto {
	switch x := v.(type) {
	case float32:
		return attrFloat(a.Name, x)
	case int64:
		return attrInt(a.Name, x)
	case string:
		return attrString(a.Name, x)
	case []float32:
		return &onnxpb.AttributeProto{Name: proto.String(a.Name), Type: onnxpb.AttributeProto_FLOATS.Enum(), Floats: slices.Clone(x)}
	}
	panic(fmt.Sprintf("ops: attribute %s: value %T", a.Name, v))
}

// written reports whether v is written on a node: not the default, and not
// an empty list.
func (a *AttrSchema) written(v any) bool {
	if fs, ok := v.([]float32); ok {
		return len(fs) > 0
	}
	return a.Required || a.Default == nil || v != a.Default
}

// field binds an attribute to the Go struct A of the op's attributes: get
// returns the value to write for a, set stores a value read from a node
// (or the default).
type field[A any] struct {
	AttrSchema
	get func(a *A) any
	set func(a *A, v any)
}

// schema binds an OpSchema to the op's attribute struct A.
type schema[A any] struct {
	OpSchema
	fields  []field[A]
	threads func(a *A) *int // the struct's Threads (not an attribute)
}

// binding is what the registry keeps of a schema[A].
type binding interface {
	spec() *OpSchema
	// checkAttrs reads the attributes of n as the kernel does.
	checkAttrs(n *onnxpb.NodeProto) error
}

func (s *schema[A]) spec() *OpSchema { return &s.OpSchema }

func (s *schema[A]) checkAttrs(n *onnxpb.NodeProto) error {
	_, err := s.parse(n)
	return err
}

// schemas are the custom ops' schemas (Schemas sorts them).
var schemas []binding

// referenceOrder is the order of Schemas and of the op reference.
var referenceOrder = []string{PerformerOp, LinformerOp, LocalPooledOp, HedgehogOp, LaraOp, WindowOp}

// keyBiasInput is every op's key_bias input.
var keyBiasInput = InputSchema{Name: "key_bias", Optional: true,
	Doc: "additive per-key bias [B or 1,1,1,Sk or 1]; keys at or below −1e4 are padding (optional in the Go kernel; converters always pass it, a zero [1,1,1,1] without a mask)"}

// selfQKV are the inputs Q, K, V of the self-attention ops (one length S:
// the keys stand at the queries' positions); crossQKV those of the ops of
// Sq queries and Sk keys.
var (
	selfQKV = []InputSchema{
		{Name: "Q", Doc: "queries [B,H,S,D] (self-attention: the keys' positions)"},
		{Name: "K", Doc: "keys [B,H,S,D]"},
		{Name: "V", Doc: "values [B,H,S,Dv]"},
	}
	crossQKV = []InputSchema{
		{Name: "Q", Doc: "queries [B,H,Sq,D]"},
		{Name: "K", Doc: "keys [B,H,Sk,D]"},
		{Name: "V", Doc: "values [B,H,Sk,Dv]"},
	}
)

// qkvInputs returns the inputs qkv (selfQKV or crossQKV) followed by more.
func qkvInputs(qkv []InputSchema, more ...InputSchema) []InputSchema {
	return append(slices.Clone(qkv), more...)
}

// scaleDoc is every op's scale attribute.
const scaleDoc = "multiplies q·k; converters always write it (the Go kernel reads 0 or its absence as 1/√D)"

// newSchema builds and records the schema of an op.
func newSchema[A any](s OpSchema, threads func(*A) *int, fields ...field[A]) *schema[A] {
	for _, f := range fields {
		s.Attrs = append(s.Attrs, f.AttrSchema)
	}
	sc := &schema[A]{OpSchema: s, fields: fields, threads: threads}
	schemas = append(schemas, sc)
	return sc
}

// Schemas returns the schemas of the custom ops (PerformerAttention,
// LinformerAttention, LocalPooledAttention, HedgehogAttention,
// LaraAttention).
func Schemas() []OpSchema {
	out := make([]OpSchema, len(schemas))
	for i, s := range schemas {
		out[i] = *s.spec()
	}
	slices.SortStableFunc(out, func(a, b OpSchema) int {
		return slices.Index(referenceOrder, a.Op) - slices.Index(referenceOrder, b.Op)
	})
	return out
}

// SchemaOf returns the schema of the custom op of type op.
func SchemaOf(op string) (OpSchema, bool) {
	if b := bindingOf(op); b != nil {
		return *b.spec(), true
	}
	return OpSchema{}, false
}

func bindingOf(op string) binding {
	for _, b := range schemas {
		if b.spec().Op == op {
			return b
		}
	}
	return nil
}

// parse reads the attributes of node n (defaults for the absent ones).
func (s *schema[A]) parse(n *onnxpb.NodeProto) (A, error) {
	var a A
	for i := range s.fields {
		f := &s.fields[i]
		v, err := f.value(onnx.Attr(n, f.Name))
		if err != nil {
			return a, s.errorf(n, "%v", err)
		}
		if v != nil {
			f.set(&a, v)
		}
	}
	return a, nil
}

// check validates the attribute values of a against the schema's ranges.
func (s *schema[A]) check(a *A) error {
	for i := range s.fields {
		f := &s.fields[i]
		if err := f.check(f.get(a)); err != nil {
			return fmt.Errorf("ops: %s: %v", s.Op, err)
		}
	}
	return nil
}

// node returns a node of the op reading inputs and writing output, with
// the attributes of a that differ from their defaults.
func (s *schema[A]) node(name string, inputs []string, output string, a *A) *onnxpb.NodeProto {
	n := &onnxpb.NodeProto{
		Name:   proto.String(name),
		OpType: proto.String(s.Op),
		Domain: proto.String(Domain),
		Input:  slices.Clone(inputs),
		Output: []string{output},
	}
	for i := range s.fields {
		f := &s.fields[i]
		if v := f.get(a); f.written(v) {
			n.Attribute = append(n.Attribute, f.proto(v))
		}
	}
	return n
}

// call checks a node's inputs against the schema and reads its
// attributes: in is returned padded with nil to every input, and a
// carries ctx's thread budget.
func (s *schema[A]) call(ctx *kernels.Context, in []*onnx.Tensor) (A, []*onnx.Tensor, error) {
	var a A
	var n *onnxpb.NodeProto
	if ctx != nil {
		n = ctx.Node
	}
	if lo, hi := s.minInputs(), len(s.Inputs); len(in) < lo || len(in) > hi {
		want := fmt.Sprintf("%d to %d", lo, hi)
		if lo == hi {
			want = fmt.Sprint(lo)
		}
		return a, nil, s.errorf(n, "got %d inputs, want %s (%s)", len(in), want, strings.Join(s.InputNames(-1), ", "))
	}
	if n != nil {
		var err error
		if a, err = s.parse(n); err != nil {
			return a, nil, err
		}
		*s.threads(&a) = ctx.Threads
	}
	full := make([]*onnx.Tensor, len(s.Inputs))
	copy(full, in)
	return a, full, nil
}

// register registers the op's Go kernel (kernels.HalfWidened: half-precision
// inputs are widened to float32): compute gets the node's attributes (with
// ctx's thread budget) and its inputs, padded with nil to every input of
// the schema.
func (s *schema[A]) register(compute func(a A, in []*onnx.Tensor) (*onnx.Tensor, error)) {
	kernels.Register(Domain, s.Op, 1, kernels.HalfWidened(func(ctx *kernels.Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
		a, in, err := s.call(ctx, in)
		if err != nil {
			return nil, err
		}
		out, err := compute(a, in)
		return attentionOut(ctx, out, err)
	}))
}

// function wraps the body b built into a FunctionProto of the op with the
// first inputs inputs of the schema, its output "out" and every attribute:
// those with a default as attribute_proto; a list without one (far_bias,
// alibi: absent means none) as attribute_proto too, an empty list the body
// never reads (the values it serves are built into it); the others by
// name: scale and the required ones, which every node carries. So every
// attribute a body declares is either defaulted or set by every node, as
// onnx's reference evaluator needs (it looks up each declared attribute),
// and the file needs IR version 9 (ImportFunction raises it).
func (s *schema[A]) function(b *fnBuilder, doc string, inputs int) *onnxpb.FunctionProto {
	var names []string
	var defaults []*onnxpb.AttributeProto
	for i := range s.Attrs {
		at := &s.Attrs[i]
		switch {
		case at.Default != nil:
			defaults = append(defaults, at.proto(at.Default))
		case at.Type == AttrFloats && !at.Required:
			defaults = append(defaults, at.proto([]float32{}))
		default:
			names = append(names, at.Name)
		}
	}
	return b.function(s.Op, doc, s.InputNames(inputs), []string{"out"}, names, defaults)
}

// CheckNode checks a node of Domain against its op's schema: a known op,
// an input count within the schema's, every required input named, every
// attribute known, of its type and within its range, required ones
// present.
func CheckNode(n *onnxpb.NodeProto) error {
	b := bindingOf(n.GetOpType())
	if n.GetDomain() != Domain || b == nil {
		return fmt.Errorf("ops: %s.%s is not a custom op of %s", n.GetDomain(), n.GetOpType(), Domain)
	}
	s := b.spec()
	if lo := s.minInputs(); len(n.Input) < lo || len(n.Input) > len(s.Inputs) {
		return s.errorf(n, "%d inputs, want %d to %d (%s)", len(n.Input), lo, len(s.Inputs), strings.Join(s.InputNames(-1), ", "))
	}
	for i, name := range n.Input {
		if name == "" && !s.Inputs[i].Optional {
			return s.errorf(n, "input %s is required", s.Inputs[i].Name)
		}
	}
	if len(n.Output) != 1 {
		return s.errorf(n, "%d outputs, want 1", len(n.Output))
	}
	for _, at := range n.Attribute {
		if s.attr(at.GetName()) == nil {
			return s.errorf(n, "unknown attribute %s", at.GetName())
		}
	}
	return b.checkAttrs(n)
}

// Field constructors: each binds one attribute of spec s to a field of A
// through the pointer p returns.

// floatField binds a float32 field.
func floatField[A any](s AttrSchema, p func(*A) *float32) field[A] {
	s.Type = AttrFloat
	return field[A]{s, func(a *A) any { return *p(a) }, func(a *A, v any) { *p(a) = v.(float32) }}
}

// intField binds an int field, written as it is.
func intField[A any](s AttrSchema, p func(*A) *int) field[A] {
	s.Type = AttrInt
	return field[A]{s, func(a *A) any { return int64(*p(a)) }, func(a *A, v any) { *p(a) = int(v.(int64)) }}
}

// flagField binds a bool field, an int attribute 0 or 1.
func flagField[A any](s AttrSchema, p func(*A) *bool) field[A] {
	s.Type, s.Default, s.Min, s.Max = AttrInt, int64(0), 0, 1
	get := func(a *A) any {
		if *p(a) {
			return int64(1)
		}
		return int64(0)
	}
	return field[A]{s, get, func(a *A, v any) { *p(a) = v.(int64) == 1 }}
}

// stringField binds a string-typed field.
func stringField[A any, T ~string](s AttrSchema, p func(*A) *T) field[A] {
	s.Type = AttrString
	return field[A]{s, func(a *A) any { return string(*p(a)) }, func(a *A, v any) { *p(a) = T(v.(string)) }}
}

// floatsField binds a []float32 field (absent when empty).
func floatsField[A any](s AttrSchema, p func(*A) *[]float32) field[A] {
	s.Type = AttrFloats
	return field[A]{s, func(a *A) any { return *p(a) }, func(a *A, v any) { *p(a) = v.([]float32) }}
}

// zeroIsDefault makes the field's zero value stand for its default (an
// empty Kernel is "positive", a zero Epsilon 1e-6).
func zeroIsDefault[A any](f field[A]) field[A] {
	get := f.get
	f.get = func(a *A) any {
		v := get(a)
		switch x := v.(type) {
		case float32:
			if x == 0 {
				return f.Default
			}
		case int64:
			if x == 0 {
				return f.Default
			}
		case string:
			if x == "" {
				return f.Default
			}
		}
		return v
	}
	return f
}

// sinksField binds the sinks attribute ("none", "first", "last" or
// "first,last") to two bools.
func sinksField[A any](doc string, p func(*A) (first, last *bool)) field[A] {
	s := AttrSchema{Name: "sinks", Type: AttrString, Default: "none", Values: []string{"none", "first", "last", "first,last"}, Doc: doc}
	get := func(a *A) any {
		first, last := p(a)
		return sinksValue(*first, *last)
	}
	set := func(a *A, v any) {
		first, last := p(a)
		*first, *last, _ = ParseSinks(v.(string))
	}
	return field[A]{s, get, set}
}

// scaleField is every op's scale attribute: no default in the function
// (1/√D depends on the input), always written by the converters.
func scaleField[A any](doc string, p func(*A) *float32) field[A] {
	return floatField(AttrSchema{Name: "scale", Doc: doc}, p)
}

func sinksValue(first, last bool) string {
	switch {
	case first && last:
		return "first,last"
	case first:
		return "first"
	case last:
		return "last"
	}
	return "none"
}
