// Package infertest tells tests whether onnxruntime is installed, and
// makes its absence fail instead of pass quietly where CI requires it. It
// sits above infer (it asks infer whether the library loads), so only
// tests import it.
package infertest

import (
	"os"
	"testing"

	"github.com/linearize/linearize/infer"
)

// RequireORTEnv is the environment variable .ci/run sets: with it, a test
// part that needs onnxruntime fails when the library cannot be loaded,
// instead of being left out.
const RequireORTEnv = "LINEARIZE_REQUIRE_ORT"

// ORT reports whether onnxruntime can be used, for tests that check an
// onnxruntime part only when it is there. When it is not, the test logs
// that the part was left out (naming the command that installs it), or
// fails if RequireORTEnv is set.
func ORT(t testing.TB) bool {
	t.Helper()
	err := infer.ORTAvailable()
	if err == nil {
		return true
	}
	if os.Getenv(RequireORTEnv) != "" {
		t.Fatalf("onnxruntime is required (%s is set) but cannot be loaded: %v", RequireORTEnv, err)
	}
	t.Logf("onnxruntime not available, its part of this test is left out (install it with scripts/setup.sh): %v", err)
	return false
}
