//go:build !cgo || linearize_noort

package infer

import (
	"fmt"

	"github.com/linearize/linearize/onnx/onnxpb"
)

// This build has no onnxruntime backend: onnxruntime_go needs cgo, and the
// build either had cgo disabled (CGO_ENABLED=0, a cross-compile) or asked
// for the pure-Go core with the linearize_noort tag. Everything else — the
// native backend, validation against it, conversion, finetuning — works
// unchanged; the "ort" backend stays registered so that asking for it gives
// an error that says why, instead of "unknown backend".

const errNoORT = "infer: this binary was built without onnxruntime support (it needs cgo; rebuild with CGO_ENABLED=1 and without the linearize_noort tag), so only the native backend is available"

func init() {
	RegisterBackend("ort", func(m *onnxpb.ModelProto, opts Options) (Session, error) {
		return NewORTSession(m, opts)
	})
}

// NewORTSession always fails in this build: see errNoORT.
func NewORTSession(m *onnxpb.ModelProto, opts Options) (Session, error) {
	return nil, fmt.Errorf("%s", errNoORT)
}

// ORTAvailable reports why onnxruntime cannot be used in this build.
func ORTAvailable() error { return fmt.Errorf("%s", errNoORT) }

// DefaultBackend is the backend used when none is named: "native" in this
// build, which has no onnxruntime.
const DefaultBackend = "native"
