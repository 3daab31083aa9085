package convert

import (
	"github.com/linearize/linearize/internal/graphfacts"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// Short names for the graph helpers of internal/graphfacts used across
// the package (the matcher, the rewrites).

func defaultDomain(n *onnxpb.NodeProto) bool { return graphfacts.DefaultDomain(n) }

// inp returns input i of n, or "" when n has fewer inputs.
func inp(n *onnxpb.NodeProto, i int) string { return graphfacts.Input(n, i) }

// constant returns the value of a well-formed constant (initializer or
// Constant node).
func constant(ix *onnx.Index, name string) (*onnx.Tensor, bool) { return graphfacts.Constant(ix, name) }

// intsOf returns the value of an integer constant.
func intsOf(ix *onnx.Index, name string) ([]int64, bool) { return graphfacts.Ints(ix, name) }

// isPerm reports whether p is a permutation of 0..len(p)-1.
func isPerm(p []int64) bool { return graphfacts.IsPerm(p) }
