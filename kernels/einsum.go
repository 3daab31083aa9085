package kernels

import (
	"sort"
	"strings"

	"github.com/linearize/linearize/internal/gemm"
	"github.com/linearize/linearize/onnx"
)

// einsumSpec is a parsed equation: one label list per operand and for the
// output, each label a rune ('...' expanded to reserved labels).
type einsumSpec struct {
	in  [][]rune
	out []rune
}

// ellipsis dimensions get labels from this private range.
const ellipsisBase = 0x10000

func parseEinsum(eq string, ranks []int) (*einsumSpec, error) {
	eq = strings.ReplaceAll(eq, " ", "")
	lhs, rhs, explicit := strings.Cut(eq, "->")
	terms := strings.Split(lhs, ",")
	if len(terms) != len(ranks) {
		return nil, fmtErr("equation %q has %d operands, node has %d inputs", eq, len(terms), len(ranks))
	}
	sp := &einsumSpec{}
	ell := -1 // number of dimensions '...' stands for (max over operands)
	expand := func(term string, rank int) ([]rune, error) {
		before, after, has := strings.Cut(term, "...")
		var labels []rune
		for _, c := range before + after {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
				return nil, fmtErr("invalid label %q in equation %q", c, eq)
			}
		}
		if !has {
			if rank >= 0 && len(term) != rank {
				return nil, fmtErr("term %q does not match operand rank %d", term, rank)
			}
			return []rune(term), nil
		}
		n := rank - len(before) - len(after)
		if rank < 0 {
			n = ell
		}
		if n < 0 {
			return nil, fmtErr("term %q does not match operand rank %d", term, rank)
		}
		if rank >= 0 {
			ell = max(ell, n)
		}
		labels = append(labels, []rune(before)...)
		for i := range n {
			labels = append(labels, rune(ellipsisBase+ell-n+i))
		}
		return append(labels, []rune(after)...), nil
	}
	// First pass finds the ellipsis width; second builds labels right
	// aligned to it (numpy broadcasting of the ellipsis dimensions).
	for i, t := range terms {
		if _, err := expand(t, ranks[i]); err != nil {
			return nil, err
		}
	}
	for i, t := range terms {
		l, err := expand(t, ranks[i])
		if err != nil {
			return nil, err
		}
		sp.in = append(sp.in, l)
	}
	if explicit {
		l, err := expand(rhs, -1)
		if err != nil {
			return nil, err
		}
		sp.out = l
	} else {
		// Implicit output: ellipsis dims, then labels seen once, sorted.
		count := map[rune]int{}
		for _, l := range sp.in {
			for _, c := range l {
				count[c]++
			}
		}
		for i := range max(ell, 0) {
			sp.out = append(sp.out, rune(ellipsisBase+i))
		}
		var once []rune
		for c, n := range count {
			if n == 1 && c < ellipsisBase {
				once = append(once, c)
			}
		}
		sort.Slice(once, func(i, j int) bool { return once[i] < once[j] })
		sp.out = append(sp.out, once...)
	}
	seen := map[rune]bool{}
	for _, c := range sp.out {
		if seen[c] {
			return nil, fmtErr("output label %q repeated in %q", c, eq)
		}
		seen[c] = true
	}
	return sp, nil
}

func einsum(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	dt, err := ctx.sameTypeInputs(in)
	if err != nil {
		return nil, err
	}
	if dt == onnx.Float16 || dt == onnx.BFloat16 {
		return viaFloat32(ctx, in, einsum)
	}
	ranks := make([]int, len(in))
	for i, t := range in {
		ranks[i] = len(t.Shape)
	}
	eq := ctx.attrString("equation", "")
	sp, err := parseEinsum(eq, ranks)
	if err != nil {
		return nil, ctx.errf("%v", err)
	}
	size := map[rune]int{}
	for i, l := range sp.in {
		for k, c := range l {
			d := in[i].Shape[k]
			if s, ok := size[c]; ok && s != d && s != 1 && d != 1 {
				return nil, ctx.errf("label %q has sizes %d and %d in %q", c, s, d, eq)
			}
			if s, ok := size[c]; !ok || s == 1 {
				size[c] = d
			}
		}
	}
	shape := make([]int, len(sp.out))
	for k, c := range sp.out {
		s, ok := size[c]
		if !ok {
			return nil, ctx.errf("output label %q appears in no input of %q", c, eq)
		}
		shape[k] = s
	}
	if err := ctx.budget("output", dt, shape); err != nil {
		return nil, err
	}
	if dt == onnx.Float && len(in) == 2 {
		if out, ok := einsumGemm(ctx, sp, in, size, shape); ok {
			return []*onnx.Tensor{out}, nil
		}
	}
	if err := ctx.budget("accumulator", onnx.Double, shape); err != nil {
		return nil, err
	}
	n, err := ctx.numericFor(dt, dtypesOf(onnx.Float, onnx.Double, onnx.Int32, onnx.Int64))
	if err != nil {
		return nil, err
	}
	data := n.einsum(sp, in, size, shape)
	return []*onnx.Tensor{{DType: dt, Shape: shape, Data: data}}, nil
}

// einsumLoop is the general path: one pass over the joint index space of
// all labels, accumulating products (in float64 for floats).
func einsumLoop[T number](sp *einsumSpec, in []*onnx.Tensor, size map[rune]int, shape []int) []T {
	var labels []rune
	pos := map[rune]int{}
	add := func(c rune) {
		if _, ok := pos[c]; !ok {
			pos[c] = len(labels)
			labels = append(labels, c)
		}
	}
	for _, c := range sp.out {
		add(c)
	}
	for _, l := range sp.in {
		for _, c := range l {
			add(c)
		}
	}
	dims := make([]int, len(labels))
	for i, c := range labels {
		dims[i] = size[c]
	}
	// Per operand, the stride each joint label moves it by (0 for a
	// broadcast size-1 dimension; repeated labels add up: diagonals).
	strides := make([][]int, len(in))
	for i, l := range sp.in {
		st := make([]int, len(labels))
		xs := stridesOf(in[i].Shape)
		for k, c := range l {
			if in[i].Shape[k] != 1 {
				st[pos[c]] += xs[k]
			}
		}
		strides[i] = st
	}
	os := stridesOf(shape)
	ostr := make([]int, len(labels))
	for k, c := range sp.out {
		ostr[pos[c]] = os[k]
	}
	data := make([][]T, len(in))
	for i, t := range in {
		data[i] = t.Data.([]T)
	}
	acc := make([]float64, prod(shape))
	total := prod(dims)
	idx := make([]int, len(dims))
	offs := make([]int, len(in))
	oo := 0
	for range total {
		p := 1.0
		for i := range in {
			p *= float64(data[i][offs[i]])
		}
		acc[oo] += p
		for k := len(dims) - 1; k >= 0; k-- {
			idx[k]++
			oo += ostr[k]
			for i := range in {
				offs[i] += strides[i][k]
			}
			if idx[k] < dims[k] {
				break
			}
			oo -= ostr[k] * dims[k]
			for i := range in {
				offs[i] -= strides[i][k] * dims[k]
			}
			idx[k] = 0
		}
	}
	out := make([]T, len(acc))
	for i, v := range acc {
		out[i] = T(v)
	}
	return out
}

// einsumGemm computes a two-operand float32 einsum as a batched GEMM when
// each label is either batch (both inputs and output), contracted (both
// inputs only), or free (one input and output), with no repeated or
// broadcast labels: permute A to [batch, freeA, contract], B to [batch,
// contract, freeB], multiply, permute to the output order.
func einsumGemm(ctx *Context, sp *einsumSpec, in []*onnx.Tensor, size map[rune]int, shape []int) (*onnx.Tensor, bool) {
	la, lb := sp.in[0], sp.in[1]
	g, ok := gemmLabels(sp, in, size)
	if !ok {
		return nil, false
	}
	nb, m, n, k := labelsSize(size, g.batch), labelsSize(size, g.freeA), labelsSize(size, g.freeB), labelsSize(size, g.contract)
	a := permuteLabels(in[0], la, g.batch, g.freeA, g.contract)
	// B is read as [batch, contract, freeB] or, transposed, as [batch,
	// freeB, contract], whichever needs no copy ("abc,cd->abd" and
	// "bhqd,bhkd->bhqk").
	c := make([]float32, nb*m*n)
	if inOrder(lb, g.batch, g.contract, g.freeB) {
		b := in[1].Floats()
		for i := range nb {
			gemm.Sgemm(false, false, m, n, k, 1, a[i*m*k:], max(k, 1), b[i*k*n:], max(n, 1), 0, c[i*m*n:], max(n, 1), ctx.threads())
		}
	} else {
		bT := permuteLabels(in[1], lb, g.batch, g.freeB, g.contract)
		for i := range nb {
			gemm.Sgemm(false, true, m, n, k, 1, a[i*m*k:], max(k, 1), bT[i*n*k:], max(k, 1), 0, c[i*m*n:], max(n, 1), ctx.threads())
		}
	}
	// c is [batch, freeA, freeB]; permute to the output order.
	tmpLabels := append(append(append([]rune{}, g.batch...), g.freeA...), g.freeB...)
	tmpShape := make([]int, len(tmpLabels))
	for i, l := range tmpLabels {
		tmpShape[i] = size[l]
	}
	return onnx.NewFloat(shape, permuteLabels(onnx.NewFloat(tmpShape, c), tmpLabels, sp.out)), true
}

// einsumRoles sorts the labels of a two-operand einsum by role: in both
// inputs and the output (batch), in one input and the output (freeA,
// freeB), in both inputs only (contract).
type einsumRoles struct {
	batch, freeA, freeB, contract []rune
}

// gemmLabels gives each label of a two-operand einsum its role, or false
// when a label repeats within an input, is broadcast (its size differs
// from the joint size), or is summed over one input only.
func gemmLabels(sp *einsumSpec, in []*onnx.Tensor, size map[rune]int) (*einsumRoles, bool) {
	la, lb := sp.in[0], sp.in[1]
	inA, okA := labelSet(la, in[0].Shape, size)
	inB, okB := labelSet(lb, in[1].Shape, size)
	if !okA || !okB {
		return nil, false
	}
	inO := map[rune]bool{}
	for _, c := range sp.out {
		inO[c] = true
	}
	g := &einsumRoles{}
	for _, c := range sp.out {
		switch {
		case inA[c] && inB[c]:
			g.batch = append(g.batch, c)
		case inA[c]:
			g.freeA = append(g.freeA, c)
		case inB[c]:
			g.freeB = append(g.freeB, c)
		}
	}
	for _, c := range la {
		if !inO[c] {
			if !inB[c] {
				return nil, false // summed over one operand only
			}
			g.contract = append(g.contract, c)
		}
	}
	for _, c := range lb {
		if !inO[c] && !inA[c] {
			return nil, false
		}
	}
	return g, true
}

// labelSet returns the labels of an operand of the given shape, or false
// when one repeats or has a size other than its joint size.
func labelSet(labels []rune, shape []int, size map[rune]int) (map[rune]bool, bool) {
	set := map[rune]bool{}
	for k, c := range labels {
		if set[c] || shape[k] != size[c] {
			return nil, false
		}
		set[c] = true
	}
	return set, true
}

// labelsSize returns the product of the sizes of labels.
func labelsSize(size map[rune]int, labels []rune) int {
	n := 1
	for _, c := range labels {
		n *= size[c]
	}
	return n
}

// inOrder reports whether labels are the groups one after the other.
func inOrder(labels []rune, groups ...[]rune) bool {
	at := 0
	natural := true
	for _, g := range groups {
		for _, l := range g {
			if at >= len(labels) || labels[at] != l {
				natural = false
			}
			at++
		}
	}
	return natural
}

// permuteLabels returns the data of t (labelled labels, one per axis)
// with its axes in the order of the groups: t's own data when that is
// its order, else a permuted copy.
func permuteLabels(t *onnx.Tensor, labels []rune, groups ...[]rune) []float32 {
	at := map[rune]int{}
	for k, c := range labels {
		at[c] = k
	}
	xs := stridesOf(t.Shape)
	var sh, st []int
	identity := true
	for _, g := range groups {
		for _, c := range g {
			if at[c] != len(sh) {
				identity = false
			}
			sh = append(sh, t.Shape[at[c]])
			st = append(st, xs[at[c]])
		}
	}
	if identity {
		return t.Floats()
	}
	dst := make([]float32, prod(sh))
	walkT(dst, t.Floats(), walk{Shape: sh, SrcStrides: st, DstStrides: stridesOf(sh)})
	return dst
}
