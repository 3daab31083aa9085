package kernels

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/linearize/linearize/internal/rusage"
	"github.com/linearize/linearize/onnx"
)

// The tensor budget bounds the bytes of any one tensor a kernel allocates
// whose size a model's values or broadcasting decide (ConstantOfShape,
// Expand, Tile, Range, Pad, Resize, OneHot, Gather, broadcast elementwise
// ops, MatMul's batch broadcast, Attention's QKV projection and scores,
// ...), so that a model that declares a 6 GB tensor is refused with an
// error before the allocation rather than ending the process with Go's
// fatal "out of memory". It is checked before allocating; errors wrap
// ErrTensorBudget.

// MaxTensorBytesEnv names the environment variable that sets the tensor
// budget: a byte count, optionally with a binary unit (K, M, G, T, with
// or without "iB"), such as 2G or 536870912.
const MaxTensorBytesEnv = "LINEARIZE_MAX_TENSOR_BYTES"

// fallbackMemory stands for the machine's memory where it cannot be read.
const fallbackMemory = 8 << 30

// ErrTensorBudget is wrapped by every error of a kernel that refused to
// allocate a tensor larger than MaxTensorBytes.
var ErrTensorBudget = errors.New("kernels: tensor larger than the tensor budget")

var (
	budgetSet  atomic.Int64 // set by SetMaxTensorBytes; 0: the default
	budgetOnce sync.Once
	budgetDef  int64
)

// MaxTensorBytes returns the bytes one tensor may take: the value given to
// SetMaxTensorBytes, else DefaultMaxTensorBytes (with a malformed
// environment variable, the machine's share).
func MaxTensorBytes() int64 {
	if n := budgetSet.Load(); n > 0 {
		return n
	}
	budgetOnce.Do(func() {
		n, err := DefaultMaxTensorBytes()
		if err != nil {
			n = machineBudget()
		}
		budgetDef = n
	})
	return budgetDef
}

// SetMaxTensorBytes sets the tensor budget to n bytes for every kernel
// from now on and returns the previous setting (0 for the default); n ≤ 0
// restores the default.
func SetMaxTensorBytes(n int64) (prev int64) {
	return budgetSet.Swap(max(n, 0))
}

// DefaultMaxTensorBytes returns the budget the environment variable
// MaxTensorBytesEnv sets, or where it is unset, a quarter of the memory
// the process may use (rusage.Memory: physical memory, bounded by a
// cgroup limit and ulimit -v; 8 GiB where none can be read). It fails for
// a malformed or non-positive value of the variable.
func DefaultMaxTensorBytes() (int64, error) {
	s, ok := os.LookupEnv(MaxTensorBytesEnv)
	if !ok || strings.TrimSpace(s) == "" {
		return machineBudget(), nil
	}
	n, err := parseBytes(s)
	if err != nil {
		return 0, fmt.Errorf("kernels: $%s: %v", MaxTensorBytesEnv, err)
	}
	return n, nil
}

func machineBudget() int64 {
	m := rusage.Memory()
	if m <= 0 {
		m = fallbackMemory
	}
	return max(m/4, 1)
}

// parseBytes reads a positive byte count: digits, optionally followed by
// K, M, G or T (powers of 1024, with or without "iB" or "B").
func parseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	u := strings.ToUpper(t)
	u = strings.TrimSuffix(strings.TrimSuffix(u, "B"), "I")
	shift := 0
	if k := len(u); k > 0 {
		switch u[k-1] {
		case 'K':
			shift = 10
		case 'M':
			shift = 20
		case 'G':
			shift = 30
		case 'T':
			shift = 40
		}
		if shift > 0 {
			u = u[:k-1]
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(u), 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q is not a positive byte count (such as 2G or 536870912)", s)
	}
	if n > math.MaxInt64>>shift {
		return 0, fmt.Errorf("%q is more than %d bytes", s, int64(math.MaxInt64))
	}
	return n << shift, nil
}

// TensorBytes returns the bytes a tensor of type dt and shape takes, as
// the tensor budget counts them, or -1 when they overflow an int64 or a
// dimension is negative. A string counts as its header (16 bytes), an
// unknown type as 8.
func TensorBytes(dt onnx.DataType, shape []int) int64 {
	n := onnx.NumElements(shape)
	if n < 0 {
		return -1
	}
	size := int64(onnx.ElemSize(dt))
	if size == 0 {
		size = 8
		if dt == onnx.String {
			size = 16
		}
	}
	if int64(n) > math.MaxInt64/size {
		return -1
	}
	return int64(n) * size
}

// budget checks a tensor of type dt and shape that the kernel is about to
// allocate (what names it: "output", "broadcast", ...) against
// MaxTensorBytes.
func (ctx *Context) budget(what string, dt onnx.DataType, shape []int) error {
	b := TensorBytes(dt, shape)
	if b >= 0 && b <= MaxTensorBytes() {
		return nil
	}
	size := "more than 2^63 bytes"
	if b >= 0 {
		size = fmtBytes(b)
	}
	return ctx.budgetErr(fmt.Sprintf("%s %s%v would take %s", what, onnx.TypeName(dt), shape, size))
}

// budgetBytes checks a buffer of n elements of size bytes each (n or size
// negative: overflowed) against MaxTensorBytes.
func (ctx *Context) budgetBytes(what string, n, size int64) error {
	if n >= 0 && size > 0 && n <= MaxTensorBytes()/size {
		return nil
	}
	desc := "more than 2^63 bytes"
	if n >= 0 && size > 0 && n <= math.MaxInt64/size {
		desc = fmtBytes(n * size)
	}
	return ctx.budgetErr(fmt.Sprintf("%s of %d elements would take %s", what, n, desc))
}

func (ctx *Context) budgetErr(msg string) error {
	return ctx.wrapErr([]error{ErrTensorBudget}, fmt.Sprintf("%s, more than the %s one tensor may take (the tensor budget, set by $%s)", msg, fmtBytes(MaxTensorBytes()), MaxTensorBytesEnv))
}

// fmtBytes writes n bytes as "6400000000 bytes (6.0 GiB)".
func fmtBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%d bytes (%.1f GiB)", n, float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%d bytes (%.1f MiB)", n, float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d bytes", n)
}

// plan2 is makePlan2 for a kernel whose output has type dt: the broadcast
// of as and bs, checked against the tensor budget before the kernel
// allocates it.
func (ctx *Context) plan2(as, bs []int, dt onnx.DataType) (*plan2, error) {
	p, err := makePlan2(as, bs)
	if err != nil {
		return nil, ctx.errf("%v", err)
	}
	if err := ctx.budget("broadcast output", dt, p.Out); err != nil {
		return nil, err
	}
	return p, nil
}

// rangeBudget checks the output of Range over the scalars in (of type dt)
// before it is generated.
func (ctx *Context) rangeBudget(in []*onnx.Tensor, dt onnx.DataType) error {
	var v [3]float64
	for i, t := range in {
		f, err := t.AsFloat64s()
		if err != nil || len(f) != 1 {
			return nil // the kernel reports it
		}
		v[i] = f[0]
	}
	n := math.Max(math.Ceil((v[1]-v[0])/v[2]), 0)
	if v[2] == 0 || !(n <= MaxElements) {
		return nil // the kernel refuses a zero delta and a range past MaxElements
	}
	return ctx.budget("output", dt, []int{int(n)})
}
