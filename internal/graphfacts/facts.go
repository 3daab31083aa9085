// Package graphfacts computes, once per graph, what the attention matcher
// of package convert needs to know about the values of an ONNX graph:
// folded constants and their values (scalars, tensors whose elements are
// all equal), what is known of each value's dimensions and which of its
// axes have size one or carry no variation, the values of shape tensors,
// and where a value comes from (the width of the projection feeding it,
// constant factors applied to it on the way).
//
// What each op contributes to each kind of fact is one small rule in a
// table keyed by domain and op type (rules.go), as kernels/registry.go keys
// kernels.
//
// Every query walks the graph backwards from a value, under one depth
// policy (MaxDepth), and is memoized per value, so a matcher that asks the
// same question from many places pays for it once. A Facts is a snapshot
// of its graph: build a new one after editing the graph.
package graphfacts

import (
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// MaxDepth is how many producers any walk follows back from the value it
// starts at. It is the one depth policy of the package: a fact needing a
// longer walk is unknown.
const MaxDepth = 40

// Facts answers questions about the values of one graph.
type Facts struct {
	// Ix indexes the graph the facts are about.
	Ix *onnx.Index
	// Opset is the default-domain opset the graph runs at (0: unknown).
	Opset int64

	scalars  map[string]scalarFact
	uniforms map[string]scalarFact
	constant map[string]bool
	weights  map[string]bool // weightDerived
	ranges   map[string]bool
	bcast    map[string][]int64 // Broadcast: axes values vary along
	units    map[string][]int64 // Units: rank and size-one axes
	dimsMemo map[string][]int64
	dimsDone map[string]bool
	widths   map[string]int64
	// overruled: declared shapes a proof contradicts (dimsWalk).
	overruled map[string]Overruling
	// guessed: values whose dims prove only the trailing axes, with a
	// guessed rank (dimsWalk).
	guessed map[string]bool
}

type scalarFact struct {
	v  float64
	ok bool
}

// cached returns cache[v], computing it with walk and storing it the first
// time.
func cached[T any](cache map[string]T, v string, walk func() T) T {
	if r, ok := cache[v]; ok {
		return r
	}
	r := walk()
	cache[v] = r
	return r
}

// New returns the facts of the graph ix indexes, run at opset.
func New(ix *onnx.Index, opset int64) *Facts {
	return &Facts{Ix: ix, Opset: opset,
		scalars: map[string]scalarFact{}, uniforms: map[string]scalarFact{}, constant: map[string]bool{}, weights: map[string]bool{}, ranges: map[string]bool{},
		bcast: map[string][]int64{}, units: map[string][]int64{},
		dimsMemo: map[string][]int64{}, dimsDone: map[string]bool{}, widths: map[string]int64{},
		overruled: map[string]Overruling{}, guessed: map[string]bool{}}
}

// Input returns input i of n, or "" when n has fewer inputs (a malformed
// node then fails to match instead of panicking).
func Input(n *onnxpb.NodeProto, i int) string {
	if n == nil || i < 0 || i >= len(n.Input) {
		return ""
	}
	return n.Input[i]
}

// DefaultDomain reports whether n is an operator of the default ONNX
// domain.
func DefaultDomain(n *onnxpb.NodeProto) bool {
	d := n.GetDomain()
	return d == "" || d == "ai.onnx"
}

// Constant is ix.Constant that also rejects a malformed value (nil, or
// data that does not match its shape), so callers may index it freely.
func Constant(ix *onnx.Index, name string) (t *onnx.Tensor, ok bool) {
	if n := ix.Producer[name]; n != nil && n.GetOpType() == "Constant" {
		// A Constant whose value attribute carries no tensor is not a
		// constant (onnx.ConstantNodeValue does not expect it).
		for _, a := range n.Attribute {
			if a.GetName() == "value" && a.T == nil {
				return nil, false
			}
		}
	}
	t, ok = ix.Constant(name)
	if !ok || t == nil || t.Check() != nil {
		return nil, false
	}
	return t, true
}

// Ints returns the value of an integer constant (initializer or Constant
// node).
func Ints(ix *onnx.Index, name string) ([]int64, bool) {
	t, ok := Constant(ix, name)
	if !ok {
		return nil, false
	}
	v, err := t.AsInt64s()
	return v, err == nil
}

// CastsToInt reports whether n is a Cast to an integer type.
func CastsToInt(n *onnxpb.NodeProto) bool {
	switch onnx.DataType(onnx.AttrInt(n, "to", 0)) {
	case onnx.Int8, onnx.Int16, onnx.Int32, onnx.Int64, onnx.Uint8, onnx.Uint16, onnx.Uint32, onnx.Uint64:
		return true
	}
	return false
}

// FloatCast reports whether n is a Cast to a floating-point type.
func FloatCast(n *onnxpb.NodeProto) bool {
	if n.GetOpType() != "Cast" {
		return false
	}
	switch onnx.DataType(onnx.AttrInt(n, "to", 0)) {
	case onnx.Float, onnx.Double, onnx.Float16, onnx.BFloat16:
		return true
	}
	return false
}

// axesOf returns the axes of an Unsqueeze/Squeeze/Reduce node: the
// attribute (before opset 13) or the constant second input.
func axesOf(ix *onnx.Index, n *onnxpb.NodeProto) []int64 {
	if a := onnx.AttrInts(n, "axes"); a != nil {
		return a
	}
	if len(n.Input) > 1 {
		a, _ := Ints(ix, Input(n, 1))
		return a
	}
	return nil
}

// IsPerm reports whether p is a permutation of 0..len(p)-1.
func IsPerm(p []int64) bool {
	seen := make([]bool, len(p))
	for _, x := range p {
		if x < 0 || x >= int64(len(p)) || seen[x] {
			return false
		}
		seen[x] = true
	}
	return true
}

// Permute returns d reordered by p (out[i] = d[p[i]]), or nil when p is
// not a permutation of d's axes (a malformed perm attribute).
func Permute(d []int64, p []int) []int64 {
	if len(d) != len(p) {
		return nil
	}
	out := make([]int64, len(p))
	seen := make([]bool, len(p))
	for i, j := range p {
		if j < 0 || j >= len(d) || seen[j] {
			return nil
		}
		seen[j] = true
		out[i] = d[j]
	}
	return out
}
