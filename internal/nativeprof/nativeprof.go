package nativeprof

import "time"

// OpTime is the time a native session spent in one op type over all Runs.
type OpTime struct {
	Op    string // "MatMul", or "domain:Op" outside the default domain
	Calls int
	Total time.Duration
}

// profiler is implemented by infer's native session; its method's
// result type, from this internal package, keeps it out of reach of
// code outside the module.
type profiler interface {
	OpTimes() ([]OpTime, bool)
}

// Read returns the per-op-type times of a native session created with
// infer.NativeOptions.Profile, slowest first; ok is false for other
// sessions.
func Read(s any) (times []OpTime, ok bool) {
	p, isProfiler := s.(profiler)
	if !isProfiler {
		return nil, false
	}
	return p.OpTimes()
}
