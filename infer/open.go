package infer

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/linearize/linearize/onnx/onnxpb"
)

// OpenFunc creates a session for a model.
type OpenFunc func(m *onnxpb.ModelProto, opts Options) (Session, error)

var (
	backendsMu sync.RWMutex
	backends   = map[string]OpenFunc{}
)

// RegisterBackend makes a backend available to Open under name. It is meant
// to be called from init; registering a name twice panics, since that is a
// programming error.
func RegisterBackend(name string, open OpenFunc) {
	backendsMu.Lock()
	defer backendsMu.Unlock()
	if _, dup := backends[name]; dup {
		panic("infer: backend " + name + " registered twice")
	}
	backends[name] = open
}

// Backends lists the registered backend names, sorted.
func Backends() []string {
	backendsMu.RLock()
	defer backendsMu.RUnlock()
	names := make([]string, 0, len(backends))
	for n := range backends {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Open creates a session for m with the named backend ("ort" or "native").
func Open(backend string, m *onnxpb.ModelProto, opts Options) (Session, error) {
	backendsMu.RLock()
	open, ok := backends[backend]
	backendsMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("infer: unknown backend %q (have %s)", backend, strings.Join(Backends(), ", "))
	}
	if m == nil || m.Graph == nil {
		return nil, fmt.Errorf("infer: %s: model has no graph", backend)
	}
	return open(m, opts)
}
