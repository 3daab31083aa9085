package infer

import (
	"github.com/linearize/linearize/onnx"
)

// Value describes one input or output of a model.
type Value struct {
	Name  string
	DType onnx.DataType
	Shape []onnx.Dim // nil when the rank is unknown
}

// Session runs one model. Both backends (onnxruntime and native Go)
// implement it with the same semantics, so that their results can be
// compared value by value.
type Session interface {
	// Inputs and Outputs list the model's graph inputs (initializers
	// excluded) and outputs in declaration order.
	Inputs() []Value
	Outputs() []Value
	// Run evaluates the model. names selects outputs (graph outputs, or
	// values made visible with Options.Expose); empty means every graph
	// output. The result maps each requested name to its tensor.
	Run(inputs map[string]*onnx.Tensor, names ...string) (map[string]*onnx.Tensor, error)
	Close() error
}

// Options configures a session.
type Options struct {
	// Threads bounds intra-op parallelism; 0 lets the backend choose.
	Threads int
	// Expose names internal values that Run may also return (added as
	// extra graph outputs in a copy of the model).
	Expose []string
}
