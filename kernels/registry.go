package kernels

import (
	"fmt"
	"maps"
	"slices"
	"sort"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// Context is what a kernel knows of the node it computes.
type Context struct {
	Node  *onnxpb.NodeProto
	Opset int64 // the model's opset for the node's domain
	// Threads bounds the goroutines a kernel may use; 0 or 1 means serial.
	Threads int
	// Scope resolves the names a subgraph of the node (If, Loop) reads
	// from the graphs enclosing it; nil when the node sees no outer values.
	Scope func(name string) (*onnx.Tensor, bool)
	// Opsets gives the model's opset version of a domain, for the nodes
	// of subgraphs; nil means Opset for the default domain and the newest
	// registered kernel for the others.
	Opsets func(domain string) int64
	// Subgraphs holds the node's graph attributes already prepared with
	// CompileSubgraph (by the interpreter, once); a graph not in it is
	// prepared on each call.
	Subgraphs map[*onnxpb.GraphProto]*Subgraph
}

// Kernel computes the outputs of one node. Absent optional inputs are nil.
// A kernel never modifies its inputs.
type Kernel func(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error)

type entry struct {
	since  int64
	kernel Kernel
}

var registry = map[string][]entry{} // "domain:op" -> sorted by since

func key(domain, op string) string {
	if domain == "ai.onnx" {
		domain = ""
	}
	return domain + ":" + op
}

// Register adds a kernel for op in domain, valid from opset version since.
// Kernels for later versions of the same op override earlier ones for
// models at those versions. Register is meant to be called from init.
func Register(domain, op string, since int64, k Kernel) {
	k0 := key(domain, op)
	es := append(registry[k0], entry{since, k})
	sort.Slice(es, func(i, j int) bool { return es[i].since < es[j].since })
	registry[k0] = es
}

// Lookup returns the kernel for op in domain at the model's opset version
// for that domain.
func Lookup(domain, op string, opset int64) (Kernel, error) {
	es := registry[key(domain, op)]
	var best Kernel
	for _, e := range es {
		if e.since <= opset || opset == 0 {
			best = e.kernel
		}
	}
	if best == nil {
		d := domain
		if d == "" {
			d = "ai.onnx"
		}
		return nil, fmt.Errorf("kernels: op %s (domain %s, opset %d) is not supported by the native backend", op, d, opset)
	}
	return best, nil
}

// Supported lists the registered ops as "domain:op" (":op" for the default
// domain), sorted.
func Supported() []string {
	return slices.Sorted(maps.Keys(registry))
}
