package ops

import (
	"github.com/linearize/linearize/kernels"
	"github.com/linearize/linearize/onnx"
)

// guards are the custom ops whose Go kernel guards rows the estimator
// cannot compute (a denominator out of range), by op type: each counts
// them on a node's inputs (PerformerGuardedRows).
var guards = map[string]func(ctx *kernels.Context, in []*onnx.Tensor) (guarded, rows int, err error){}

// registerGuard records the guarded-row count of op.
func registerGuard(op string, count func(ctx *kernels.Context, in []*onnx.Tensor) (guarded, rows int, err error)) bool {
	guards[op] = count
	return true
}

// GuardedRows counts, for a node of Domain whose kernel guards rows
// (ctx.Node; PerformerAttention), the output rows decided by the guard and
// all rows, on the inputs in its kernel accepted. ok is false for the
// other nodes, or when the count fails.
func GuardedRows(ctx *kernels.Context, in []*onnx.Tensor) (guarded, rows int, ok bool) {
	if ctx == nil || ctx.Node == nil || ctx.Node.GetDomain() != Domain {
		return 0, 0, false
	}
	count := guards[ctx.Node.GetOpType()]
	if count == nil {
		return 0, 0, false
	}
	guarded, rows, err := count(ctx, in)
	return guarded, rows, err == nil
}
