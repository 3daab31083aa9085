package ops

import (
	"strings"
	"testing"

	"github.com/linearize/linearize/onnx"
)

// TestLinearOpsBoundAllocations feeds the Performer and Linformer kernels
// inputs that are small themselves but whose output or intermediate
// tensors would hold more than kernels.MaxElements elements: each must
// refuse with an error naming the op, not try to allocate (tens of GiB) or
// overflow.
// (LocalPooledAttention's output is V's size and its intermediates are
// smaller, so it has no such case.)
func TestLinearOpsBoundAllocations(t *testing.T) {
	zeros := func(shape ...int) *onnx.Tensor { return onnx.NewFloat(shape, make([]float32, onnx.NumElements(shape))) }
	const big = 1 << 16 // big·big = 2^32 > kernels.MaxElements
	cases := []struct {
		name string
		run  func() error
		want string
	}{
		{"performer output", func() error {
			_, err := Performer(zeros(1, 1, big, 1), zeros(1, 1, 1, 1), zeros(1, 1, 1, big), zeros(1, 4, 1), nil, PerformerAttrs{})
			return err
		}, PerformerOp},
		{"performer features", func() error {
			_, err := Performer(zeros(1, 1, 4096, 1), zeros(1, 1, 4096, 1), zeros(1, 1, 4096, 1), zeros(1, 1<<20, 1), nil, PerformerAttrs{})
			return err
		}, PerformerOp},
		{"linformer output", func() error {
			_, err := Linformer(zeros(1, 1, big, 1), zeros(1, 1, 1, 1), zeros(1, 1, 1, big), zeros(1, 2, 4), zeros(1, 2, 4), nil, LinformerAttrs{})
			return err
		}, LinformerOp},
		{"linformer projections", func() error {
			_, err := Linformer(zeros(1, 1, 4096, 1), zeros(1, 1, 4, 1), zeros(1, 1, 4, 1), zeros(1, 1<<20, 4), zeros(1, 1<<20, 4), nil, LinformerAttrs{})
			return err
		}, LinformerOp},
	}
	for _, c := range cases {
		err := c.run()
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "exceed") {
			t.Errorf("%s: error %q does not name %s and the bound", c.name, err, c.want)
		}
	}
}
