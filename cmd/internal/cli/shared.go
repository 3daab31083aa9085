package cli

import (
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// DefaultSeed is the default of every --seed.
const DefaultSeed = 1

// BenchThreads is the thread count bench and bench-backends time with
// unless --threads says otherwise: fixed rather than the backend's
// default, so that timings compare across runs and machines.
const BenchThreads = 2

// OpenBothBackends opens m in the native backend and in onnxruntime
// (compare-backends, bench-backends); the caller closes both.
func OpenBothBackends(m *onnxpb.ModelProto, threads int) (nat, ref infer.Session, err error) {
	opts := infer.Options{Threads: threads}
	if nat, err = infer.NewNativeSession(m, opts); err != nil {
		return nil, nil, RuntimeFailure(err)
	}
	if ref, err = infer.NewORTSession(m, opts); err != nil {
		nat.Close()
		return nil, nil, RuntimeFailure(err)
	}
	return nat, ref, nil
}
