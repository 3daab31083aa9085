package graphfacts

import (
	"math"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// maxUniformElems bounds the constants Uniform reads element by element.
const maxUniformElems = 1 << 22

// Scalar returns the value of name when it is a single-element constant,
// or a constant expression over such (Sqrt, Cast, Reciprocal, Div, Mul,
// Add, Sub, Pow, Neg, Identity, Reshape/Unsqueeze/Squeeze/Expand of a
// scalar), as exporters write the score scale (keras:
// Div(scores, Sqrt(Cast(D)))).
func (f *Facts) Scalar(name string) (float64, bool) { return f.scalar(name, 0) }

// Uniform returns the value of name when every element of it is the same
// known number (booleans as 0 and 1): a Scalar, a constant whose elements
// are all equal, ConstantOfShape, an Expand/Reshape/Cast/... of one, and
// Not, And, Or, Where, comparisons and arithmetic over such values.
// And(false, x) is false and Or(true, x) true whatever x is. A vision
// model with no padding writes its mask as Where(Expand(all-true), 0, min)
// this way.
func (f *Facts) Uniform(name string) (float64, bool) { return f.uniform(name, 0) }

// ConstDerived reports whether v is computed from constants alone (sizes
// read with Shape count as constants: E[:, :, :S] sliced to a sequence
// length is).
func (f *Facts) ConstDerived(v string) bool { return f.constDerived(v, 0) }

func (f *Facts) constDerived(v string, depth int) bool { return f.derived(v, depth, false) }

// weightDerived reports whether v is computed from constants and from
// graph inputs that carry no tokens (rank 0 or 1, every dim fixed): a
// weight the graph builds at run time, as LoRA adapters chosen by a task
// id and added to a base weight (jina-embeddings-v3's published export
// takes task_id, a scalar). A value that reads a token-level input, or
// the shape of one, is not.
func (f *Facts) weightDerived(v string, depth int) bool { return f.derived(v, depth, true) }

// derived is constDerived, or with weights weightDerived.
func (f *Facts) derived(v string, depth int, weights bool) bool {
	if v == "" || depth > MaxDepth {
		return false
	}
	cache := f.constant
	if weights {
		cache = f.weights
	}
	return cached(cache, v, func() bool { return f.derivedWalk(v, depth, weights) })
}

func (f *Facts) derivedWalk(v string, depth int, weights bool) bool {
	if _, ok := Constant(f.Ix, v); ok {
		return true
	}
	if f.Ix.GraphInputs[v] {
		return weights && f.carriesNoTokens(v)
	}
	n := f.Ix.Producer[v]
	if n == nil || !DefaultDomain(n) {
		return false
	}
	switch n.GetOpType() {
	case "Shape", "Size", "Constant", "ConstantOfShape":
		if !weights { // sizes count as constants; a weight's must be its own
			return true
		}
	}
	for _, in := range n.Input {
		if in != "" && !f.derived(in, depth+1, weights) {
			return false
		}
	}
	return len(n.Input) > 0
}

// carriesNoTokens reports whether graph input v is declared of rank 0 or
// 1 with every dim fixed (a task id), not [batch, sequence, …].
func (f *Facts) carriesNoTokens(v string) bool {
	d := f.declaredDims(v)
	if d == nil || len(d) > 1 {
		return false
	}
	for _, x := range d {
		if x <= 0 {
			return false
		}
	}
	return true
}

func (f *Facts) scalar(name string, depth int) (float64, bool) {
	return foldCached(f.scalars, f.scalarFold, name, depth)
}

// foldCached is fold(name, depth) through cache: (0, false) past MaxDepth
// and for no value.
func foldCached(cache map[string]scalarFact, fold func(string, int) (float64, bool), name string, depth int) (float64, bool) {
	if depth > MaxDepth || name == "" {
		return 0, false
	}
	r := cached(cache, name, func() scalarFact {
		v, ok := fold(name, depth)
		return scalarFact{v, ok}
	})
	return r.v, r.ok
}

func (f *Facts) scalarFold(name string, depth int) (float64, bool) {
	if t, ok := Constant(f.Ix, name); ok {
		if t.Len() != 1 {
			return 0, false
		}
		v, err := t.AsFloat64s()
		if err != nil || len(v) != 1 {
			return 0, false
		}
		return v[0], true
	}
	n := f.Ix.Producer[name]
	if r := rulesOf(n).scalar; r != nil {
		return r(f, n, name, (*Facts).scalar, depth)
	}
	return 0, false
}

// input returns the fold get of input i of n.
func (get fold) input(f *Facts, n *onnxpb.NodeProto, i, depth int) (float64, bool) {
	return get(f, Input(n, i), depth+1)
}

// sizeFold folds x.size(i) of a value whose dimension i is known.
func (f *Facts) sizeFold(_ *onnxpb.NodeProto, name string, _ fold, depth int) (float64, bool) {
	if src, axis, ok := f.sizeOf(name, depth+1); ok {
		if d := f.dims(src, depth+1); axis >= 0 && axis < len(d) && d[axis] > 0 {
			return float64(d[axis]), true
		}
	}
	return 0, false
}

// sqrtFold is √a of a ≥ 0.
func sqrtFold(f *Facts, n *onnxpb.NodeProto, _ string, get fold, depth int) (float64, bool) {
	if a, ok := get.input(f, n, 0, depth); ok && a >= 0 {
		return math.Sqrt(a), true
	}
	return 0, false
}

// reciprocalFold is 1/a of a ≠ 0.
func reciprocalFold(f *Facts, n *onnxpb.NodeProto, _ string, get fold, depth int) (float64, bool) {
	if a, ok := get.input(f, n, 0, depth); ok && a != 0 {
		return 1 / a, true
	}
	return 0, false
}

// floorFold is ⌊a⌋ or ⌈a⌉ (paddle2onnx writes C // H as
// Cast(Floor(Div(Cast(C), H)))).
func floorFold(f *Facts, n *onnxpb.NodeProto, _ string, get fold, depth int) (float64, bool) {
	if a, ok := get.input(f, n, 0, depth); ok {
		if n.GetOpType() == "Ceil" {
			return math.Ceil(a), true
		}
		return math.Floor(a), true
	}
	return 0, false
}

// negFold is −a.
func negFold(f *Facts, n *onnxpb.NodeProto, _ string, get fold, depth int) (float64, bool) {
	if a, ok := get.input(f, n, 0, depth); ok {
		return -a, true
	}
	return 0, false
}

// firstFold is input 0's value: the op moves or copies it (Identity,
// Reshape, Expand, ...).
func firstFold(f *Facts, n *onnxpb.NodeProto, _ string, get fold, depth int) (float64, bool) {
	return get.input(f, n, 0, depth)
}

// castFold is a Cast's value: truncated towards zero by a Cast to an
// integer type.
func castFold(f *Facts, n *onnxpb.NodeProto, _ string, get fold, depth int) (float64, bool) {
	a, ok := get.input(f, n, 0, depth)
	if !ok {
		return 0, false
	}
	if CastsToInt(n) {
		return math.Trunc(a), true
	}
	return a, true
}

// truthCastFold is castFold, and a Cast to bool makes any non-zero value
// 1 (Uniform reads booleans as 0 and 1).
func truthCastFold(f *Facts, n *onnxpb.NodeProto, v string, get fold, depth int) (float64, bool) {
	if onnx.DataType(onnx.AttrInt(n, "to", 0)) != onnx.Bool {
		return castFold(f, n, v, get, depth)
	}
	a, ok := get.input(f, n, 0, depth)
	if !ok {
		return 0, false
	}
	return truth(a), true
}

// arithmeticFold is a·b, a/b (b ≠ 0), a+b, a−b or a^b of the inputs.
func arithmeticFold(f *Facts, n *onnxpb.NodeProto, _ string, get fold, depth int) (float64, bool) {
	a, okA := get.input(f, n, 0, depth)
	b, okB := get.input(f, n, 1, depth)
	if !okA || !okB {
		return 0, false
	}
	return arithmetic(n.GetOpType(), a, b)
}

// arithmetic is a·b, a/b (b ≠ 0), a+b, a−b or a^b for op.
func arithmetic(op string, a, b float64) (float64, bool) {
	switch op {
	case "Mul":
		return a * b, true
	case "Div":
		if b != 0 {
			return a / b, true
		}
	case "Add":
		return a + b, true
	case "Sub":
		return a - b, true
	case "Pow":
		return math.Pow(a, b), true
	}
	return 0, false
}

func (f *Facts) uniform(name string, depth int) (float64, bool) {
	return foldCached(f.uniforms, f.uniformFold, name, depth)
}

func (f *Facts) uniformFold(name string, depth int) (float64, bool) {
	if v, ok := f.scalar(name, depth); ok {
		return v, true
	}
	if t, ok := Constant(f.Ix, name); ok {
		return uniformValue(t)
	}
	n := f.Ix.Producer[name]
	if r := rulesOf(n).uniform; r != nil {
		return r(f, n, name, (*Facts).uniform, depth)
	}
	return 0, false
}

// uniformValue returns the value of every element of t when they are all
// the same number (booleans as 0 and 1, NaN refused).
func uniformValue(t *onnx.Tensor) (float64, bool) {
	if t.Len() == 0 || t.Len() > maxUniformElems {
		return 0, false
	}
	vals, err := t.AsFloat64s() // booleans as 0 and 1
	if err != nil || len(vals) == 0 {
		return 0, false
	}
	for _, x := range vals[1:] {
		if x != vals[0] {
			return 0, false
		}
	}
	if math.IsNaN(vals[0]) {
		return 0, false
	}
	return vals[0], true
}

// truth is a number read as a boolean: 1 when it is not zero, else 0.
func truth(x float64) float64 {
	if x != 0 {
		return 1
	}
	return 0
}

// constantOfShapeFold is the value attribute of ConstantOfShape (a float
// 0 when absent).
func constantOfShapeFold(_ *Facts, n *onnxpb.NodeProto, _ string, _ fold, _ int) (float64, bool) {
	for _, at := range n.Attribute {
		if at.GetName() == "value" && at.T != nil {
			t, err := onnx.DecodeTensor(at.T)
			if err != nil || t.Len() != 1 {
				return 0, false
			}
			if bs := t.Bools(); len(bs) == 1 {
				if bs[0] {
					return 1, true
				}
				return 0, true
			}
			v, err := t.AsFloat64s()
			if err != nil || len(v) != 1 {
				return 0, false
			}
			return v[0], true
		}
	}
	return 0, true // default value: a float 0
}

// notFold is the negation of a boolean.
func notFold(f *Facts, n *onnxpb.NodeProto, _ string, get fold, depth int) (float64, bool) {
	if a, ok := get.input(f, n, 0, depth); ok {
		return 1 - truth(a), true
	}
	return 0, false
}

// logicFold is And or Or of two booleans: And(false, x) is false and
// Or(true, x) true whatever x is.
func logicFold(f *Facts, n *onnxpb.NodeProto, _ string, get fold, depth int) (float64, bool) {
	a, okA := get.input(f, n, 0, depth)
	b, okB := get.input(f, n, 1, depth)
	absorbing := 0.0 // And(false, x) = false
	if n.GetOpType() == "Or" {
		absorbing = 1 // Or(true, x) = true
	}
	switch {
	case okA && truth(a) == absorbing, okB && truth(b) == absorbing:
		return absorbing, true
	case okA && okB:
		return 1 - absorbing, true
	}
	return 0, false
}

// whereFold is Where(c, a, b): the branch a uniform condition picks, or
// the value both branches share.
func whereFold(f *Facts, n *onnxpb.NodeProto, _ string, get fold, depth int) (float64, bool) {
	if c, ok := get.input(f, n, 0, depth); ok {
		if c != 0 {
			return get.input(f, n, 1, depth)
		}
		return get.input(f, n, 2, depth)
	}
	a, okA := get.input(f, n, 1, depth)
	b, okB := get.input(f, n, 2, depth)
	if okA && okB && a == b {
		return a, true
	}
	return 0, false
}

// compareFold is a comparison of two numbers, 1 when it holds, else 0.
func compareFold(f *Facts, n *onnxpb.NodeProto, _ string, get fold, depth int) (float64, bool) {
	a, okA := get.input(f, n, 0, depth)
	b, okB := get.input(f, n, 1, depth)
	if !okA || !okB {
		return 0, false
	}
	r := map[string]bool{"Equal": a == b, "Less": a < b, "Greater": a > b, "LessOrEqual": a <= b, "GreaterOrEqual": a >= b}[n.GetOpType()]
	if r {
		return 1, true
	}
	return 0, true
}
