package kernels

import (
	"strings"
	"testing"
)

// A panic in a worker goroutine must reach the caller's goroutine (where
// the native backend recovers it into an error naming the node) instead of
// killing the process.
func TestWorkerPanicReachesCaller(t *testing.T) {
	for _, c := range []struct {
		name string
		run  func()
	}{
		{"parallel", func() {
			Parallel(8, 3, func(i int) {
				if i == 5 {
					panic("boom 5")
				}
			})
		}},
		{"parallelFor", func() {
			parallelFor(1000, 4, 10, func(lo, hi int) {
				if lo > 0 {
					panic("boom chunk")
				}
			})
		}},
	} {
		func() {
			defer func() {
				r := recover()
				if r == nil || !strings.Contains(strings.ToLower(fmtAny(r)), "boom") {
					t.Errorf("%s: recovered %v in the caller, want the worker's panic", c.name, r)
				}
			}()
			c.run()
		}()
	}
	// No panic: every index runs once.
	seen := make([]int, 50)
	Parallel(50, 4, func(i int) { seen[i]++ })
	for i, n := range seen {
		if n != 1 {
			t.Fatalf("index %d ran %d times", i, n)
		}
	}
}

func fmtAny(v any) string {
	if e, ok := v.(error); ok {
		return e.Error()
	}
	if s, ok := v.(string); ok {
		return s
	}
	return ""
}
