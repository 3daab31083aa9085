package embed

import (
	"fmt"
	"testing"

	testenv "github.com/linearize/linearize/infer/infertest"
)

// TestBackendsAgree: onnxruntime and the native backend give the same
// vectors (when onnxruntime is installed: scripts/setup.sh).
func TestBackendsAgree(t *testing.T) {
	if !testenv.ORT(t) {
		return
	}
	path := modelDir(t)
	texts := []string{"the man is eating food", text(60, 3), ""}
	for _, mode := range []Mode{Truncate, Chunk, Long} {
		o := Options{Mode: mode, Window: 24}
		native := open(t, path, o)
		o.Backend = "ort"
		ort, err := Open(path, o)
		if err != nil {
			t.Fatal(err)
		}
		defer ort.Close()
		a, err := native.Embed(texts)
		if err != nil {
			t.Fatal(err)
		}
		b, err := ort.Embed(texts)
		if err != nil {
			t.Fatal(err)
		}
		for i := range texts {
			near(t, fmt.Sprintf("%s text %d", mode, i), b[i], toF64(a[i]), 1e-4)
		}
	}
}
