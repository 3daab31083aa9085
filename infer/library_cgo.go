//go:build cgo && !linearize_noort

package infer

import (
	"fmt"
	"sync"

	ort "github.com/yalue/onnxruntime_go"
)

var (
	ortOnce sync.Once
	ortErr  error
)

// initORT loads the shared library and creates the onnxruntime environment,
// once per process. onnxruntime's own log goes quiet (fatal only): every
// failure reaches the caller as an error value instead.
func initORT() error {
	ortOnce.Do(func() {
		p, err := LibraryPath()
		if err != nil {
			ortErr = err
			return
		}
		ort.SetSharedLibraryPath(p)
		if err := ort.InitializeEnvironment(ort.WithLogLevelFatal()); err != nil {
			ortErr = fmt.Errorf("infer: loading onnxruntime from %s: %v (reinstall with scripts/setup.sh)", p, err)
		}
	})
	return ortErr
}

// ORTAvailable reports whether the onnxruntime library can be loaded; the
// error says how to install it. Tests that need onnxruntime skip with its
// message.
func ORTAvailable() error { return initORT() }

// DefaultBackend is the backend used when none is named: onnxruntime, the
// reference the native backend is checked against.
const DefaultBackend = "ort"
