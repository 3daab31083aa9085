package graphfacts

import (
	"math"

	"github.com/linearize/linearize/onnx"
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

func (f *Facts) constDerived(v string, depth int) bool {
	if v == "" || depth > MaxDepth {
		return false
	}
	return cached(f.constant, v, func() bool { return f.constDerivedWalk(v, depth) })
}

func (f *Facts) constDerivedWalk(v string, depth int) bool {
	if _, ok := Constant(f.Ix, v); ok {
		return true
	}
	if f.Ix.GraphInputs[v] {
		return false
	}
	n := f.Ix.Producer[v]
	if n == nil || !DefaultDomain(n) {
		return false
	}
	switch n.GetOpType() {
	case "Shape", "Size", "Constant", "ConstantOfShape":
		return true
	}
	for _, in := range n.Input {
		if in != "" && !f.constDerived(in, depth+1) {
			return false
		}
	}
	return len(n.Input) > 0
}

func (f *Facts) scalar(name string, depth int) (float64, bool) {
	if depth > MaxDepth || name == "" {
		return 0, false
	}
	r := cached(f.scalars, name, func() scalarFact {
		v, ok := f.scalarFold(name, depth)
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
	if isQuantizer(n) {
		return f.quantizeScalar(n, name, depth)
	}
	if n == nil || !DefaultDomain(n) {
		return 0, false
	}
	arg := func(i int) (float64, bool) {
		if i >= len(n.Input) || Input(n, i) == "" {
			return 0, false
		}
		return f.scalar(Input(n, i), depth+1)
	}
	switch n.GetOpType() {
	case "Gather", "Slice":
		return f.sizeScalar(name, depth)
	case "Sqrt":
		if a, ok := arg(0); ok && a >= 0 {
			return math.Sqrt(a), true
		}
	case "Reciprocal":
		if a, ok := arg(0); ok && a != 0 {
			return 1 / a, true
		}
	case "Neg":
		if a, ok := arg(0); ok {
			return -a, true
		}
	case "Cast", "Identity", "Reshape", "Unsqueeze", "Squeeze", "Expand":
		if a, ok := arg(0); ok {
			if n.GetOpType() == "Cast" && CastsToInt(n) {
				return math.Trunc(a), true
			}
			return a, true
		}
	case "Mul", "Div", "Add", "Sub", "Pow":
		a, okA := arg(0)
		b, okB := arg(1)
		if okA && okB {
			return arithmetic(n.GetOpType(), a, b)
		}
	}
	return 0, false
}

// sizeScalar folds x.size(i) of a value whose dimension i is known.
func (f *Facts) sizeScalar(name string, depth int) (float64, bool) {
	if src, axis, ok := f.sizeOf(name, depth+1); ok {
		if d := f.dims(src, depth+1); axis >= 0 && axis < len(d) && d[axis] > 0 {
			return float64(d[axis]), true
		}
	}
	return 0, false
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
	if depth > MaxDepth || name == "" {
		return 0, false
	}
	r := cached(f.uniforms, name, func() scalarFact {
		v, ok := f.uniformFold(name, depth)
		return scalarFact{v, ok}
	})
	return r.v, r.ok
}

func (f *Facts) uniformFold(name string, depth int) (float64, bool) {
	if v, ok := f.scalar(name, depth); ok {
		return v, true
	}
	if t, ok := Constant(f.Ix, name); ok {
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
	n := f.Ix.Producer[name]
	if n == nil || !DefaultDomain(n) {
		return 0, false
	}
	arg := func(i int) (float64, bool) { return f.uniform(Input(n, i), depth+1) }
	truth := func(x float64) float64 {
		if x != 0 {
			return 1
		}
		return 0
	}
	switch n.GetOpType() {
	case "Identity", "Expand", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Tile", "Transpose":
		return arg(0)
	case "Cast":
		a, ok := arg(0)
		if !ok {
			return 0, false
		}
		switch {
		case onnx.DataType(onnx.AttrInt(n, "to", 0)) == onnx.Bool:
			return truth(a), true
		case CastsToInt(n):
			return math.Trunc(a), true
		}
		return a, true
	case "ConstantOfShape":
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
	case "Not":
		if a, ok := arg(0); ok {
			return 1 - truth(a), true
		}
	case "And", "Or":
		a, okA := arg(0)
		b, okB := arg(1)
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
	case "Where":
		c, ok := arg(0)
		if ok {
			if c != 0 {
				return arg(1)
			}
			return arg(2)
		}
		a, okA := arg(1)
		b, okB := arg(2)
		if okA && okB && a == b {
			return a, true
		}
	case "Neg":
		if a, ok := arg(0); ok {
			return -a, true
		}
	case "Add", "Sub", "Mul", "Div":
		a, okA := arg(0)
		b, okB := arg(1)
		if !okA || !okB {
			return 0, false
		}
		switch n.GetOpType() {
		case "Add":
			return a + b, true
		case "Sub":
			return a - b, true
		case "Mul":
			return a * b, true
		}
		if b != 0 {
			return a / b, true
		}
	case "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual":
		a, okA := arg(0)
		b, okB := arg(1)
		if !okA || !okB {
			return 0, false
		}
		r := map[string]bool{"Equal": a == b, "Less": a < b, "Greater": a > b, "LessOrEqual": a <= b, "GreaterOrEqual": a >= b}[n.GetOpType()]
		if r {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}
