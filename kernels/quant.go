package kernels

import (
	"iter"
	"math"
	"slices"

	"github.com/linearize/linearize/internal/gemm"
	"github.com/linearize/linearize/onnx"
)

// Linear quantization: the standard QuantizeLinear, DequantizeLinear,
// DynamicQuantizeLinear, MatMulInteger and QLinearMatMul, and the
// com.microsoft QuantizeLinear, DequantizeLinear, MatMulIntegerToFloat and
// DynamicQuantizeMatMul that onnxruntime's quantizer and optimizer emit.
// Integer products accumulate in int32 (wrapping, as the specification
// allows); rounding is to nearest, ties to even; quantized values saturate
// to the range of their type.

// qint is an integer type a quantized tensor holds.
type qint interface {
	~int8 | ~uint8 | ~int16 | ~uint16 | ~int32
}

// opsetAtLeast reports whether the node's default-domain opset is v or
// later (an unknown opset, 0, counts as the newest).
func (ctx *Context) opsetAtLeast(v int64) bool {
	return ctx == nil || ctx.Opset == 0 || ctx.Opset >= v && !ctx.isMS()
}

// isMS reports whether the node is of the com.microsoft domain.
func (ctx *Context) isMS() bool {
	return ctx != nil && ctx.Node != nil && ctx.Node.GetDomain() == msDomain
}

// qLayout maps the elements of x, viewed as [outer, dim, inner] around the
// quantization axis, to their scale and zero point: element (o, j, i)
// uses parameter base(o, j) + i·step.
type qLayout struct {
	outer, dim, inner int
	kind              int // qPerTensor, qPerAxis or qBlocked
	block, blocks     int // blocked: axis elements per parameter, parameters along the axis
}

const (
	qPerTensor = iota
	qPerAxis
	qBlocked
)

func (l *qLayout) base(o, j int) int {
	switch l.kind {
	case qPerAxis:
		return j
	case qBlocked:
		return (o*l.blocks + j/l.block) * l.inner
	}
	return 0
}

func (l *qLayout) step() int {
	if l.kind == qBlocked {
		return 1
	}
	return 0
}

// params yields, for each element of x in order, its index and the index
// of its scale and zero point.
func (l *qLayout) params() iter.Seq2[int, int] {
	return func(yield func(idx, p int) bool) {
		idx, step := 0, l.step()
		for o := 0; o < l.outer; o++ {
			for j := 0; j < l.dim; j++ {
				b := l.base(o, j)
				for i := 0; i < l.inner; i++ {
					if !yield(idx, b+i*step) {
						return
					}
					idx++
				}
			}
		}
	}
}

// quantLayout checks the scale (and zero point) of a Quantize/Dequantize
// node against x: one element (per tensor), a vector along axis (per axis,
// opset 13) or x's shape with the axis divided in blocks of block_size
// (blocked, opset 21).
func (ctx *Context) quantLayout(x, scale, zp *onnx.Tensor) (*qLayout, error) {
	if zp != nil && !slices.Equal(zp.Shape, scale.Shape) && !(zp.Len() == 1 && scale.Len() == 1) {
		return nil, ctx.errf("zero point %v and scale %v must have one shape", zp.Shape, scale.Shape)
	}
	block := ctx.attrInt("block_size", 0)
	if block < 0 {
		return nil, ctx.errf("block_size %d is negative", block)
	}
	n := x.Len()
	if scale.Len() == 1 {
		return &qLayout{outer: 1, dim: 1, inner: n, kind: qPerTensor}, nil
	}
	if !ctx.opsetAtLeast(13) && !ctx.isMS() {
		return nil, ctx.errf("scale %v: opset %d allows only a per-tensor (one-element) scale", scale.Shape, ctx.Opset)
	}
	axis, err := ctx.normAxis(ctx.attrInt("axis", 1), len(x.Shape))
	if err != nil {
		return nil, err
	}
	l := &qLayout{outer: prod(x.Shape[:axis]), dim: x.Shape[axis], inner: prod(x.Shape[axis+1:]), kind: qPerAxis}
	if block == 0 {
		if len(scale.Shape) != 1 || scale.Shape[0] != l.dim {
			return nil, ctx.errf("per-axis scale %v must be a vector of the %d elements of axis %d of x %v", scale.Shape, l.dim, axis, x.Shape)
		}
		return l, nil
	}
	if !ctx.opsetAtLeast(21) {
		return nil, ctx.errf("block_size needs opset 21, the model has %d", ctx.Opset)
	}
	return ctx.blockedLayout(l, x, scale, axis, block)
}

// blockedLayout completes l for blocked quantization along axis.
func (ctx *Context) blockedLayout(l *qLayout, x, scale *onnx.Tensor, axis int, block int64) (*qLayout, error) {
	d := int64(l.dim)
	nb := d / block
	if d%block != 0 {
		nb++
	}
	if len(scale.Shape) != len(x.Shape) || int64(scale.Shape[axis]) != nb {
		return nil, ctx.errf("blocked scale %v: want x %v with axis %d holding ⌈%d/%d⌉ = %d blocks", scale.Shape, x.Shape, axis, d, block, nb)
	}
	for i, v := range scale.Shape {
		if i != axis && v != x.Shape[i] {
			return nil, ctx.errf("blocked scale %v: want x %v with axis %d holding ⌈%d/%d⌉ = %d blocks", scale.Shape, x.Shape, axis, d, block, nb)
		}
	}
	l.kind, l.block, l.blocks = qBlocked, int(min(block, d+1)), int(nb)
	return l, nil
}

// scaleValues returns a float32, float16 or bfloat16 scale as float32.
func (ctx *Context) scaleValues(t *onnx.Tensor, what string) ([]float32, error) {
	switch t.DType {
	case onnx.Float:
		return t.Floats(), nil
	case onnx.Float16, onnx.BFloat16:
		return toFloat32(t).Floats(), nil
	}
	return nil, ctx.errf("%s must be float32, float16 or bfloat16, got %s", what, t)
}

// zeroPoints returns the n values of an integer zero point (a one-element
// zero point repeated) widened to int32; zeros if zp is nil.
func zeroPoints(zp *onnx.Tensor, n int) []int32 {
	out := make([]int32, n)
	if zp == nil {
		return out
	}
	v, _ := zp.AsInt64s()
	for i := range out {
		if len(v) > 0 {
			out[i] = int32(v[min(i, len(v)-1)])
		}
	}
	return out
}

// dequantizeLinear is y = (x − x_zero_point)·x_scale, computed in float32
// and rounded to the scale's type (or output_dtype, opset 23).
func dequantizeLinear(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 2, 3); err != nil {
		return nil, err
	}
	x, scale, zp := in[0], in[1], opt(in, 2)
	switch x.DType {
	case onnx.Int8, onnx.Uint8, onnx.Int16, onnx.Uint16, onnx.Int32:
	default:
		return nil, ctx.errf("x must be int8, uint8, int16, uint16 or int32, got %s", x)
	}
	if zp != nil && zp.DType != x.DType {
		return nil, ctx.errf("x %s and zero point %s must have one type", x, zp)
	}
	sc, err := ctx.scaleValues(scale, "x_scale")
	if err != nil {
		return nil, err
	}
	outType := scale.DType
	if od := ctx.attrInt("output_dtype", 0); od != 0 {
		outType = onnx.DataType(od)
		if outType != onnx.Float && outType != onnx.Float16 && outType != onnx.BFloat16 {
			return nil, ctx.errf("output_dtype %d is not float32, float16 or bfloat16", od)
		}
	}
	l, err := ctx.quantLayout(x, scale, zp)
	if err != nil {
		return nil, err
	}
	y, err := ctx.newTensor(onnx.Float, x.Shape)
	if err != nil {
		return nil, err
	}
	zps, out := zeroPoints(zp, len(sc)), y.Floats()
	switch xd := x.Data.(type) {
	case []int8:
		dequantT(out, xd, zps, sc, l)
	case []uint8:
		dequantT(out, xd, zps, sc, l)
	case []int16:
		dequantT(out, xd, zps, sc, l)
	case []uint16:
		dequantT(out, xd, zps, sc, l)
	case []int32:
		dequantT(out, xd, zps, sc, l)
	}
	if outType != onnx.Float {
		y = fromFloat32(y, outType)
	}
	return []*onnx.Tensor{y}, nil
}

func dequantT[T qint](out []float32, x []T, zp []int32, sc []float32, l *qLayout) {
	for idx, p := range l.params() {
		out[idx] = (float32(x[idx]) - float32(zp[p])) * sc[p]
	}
}

// Precision of the division x / y_scale in QuantizeLinear.
const (
	precFloat32 = iota
	precFloat64
	precFloat16
	precBFloat16
)

// quantPrecision returns the precision of x / y_scale: the precision
// attribute if set, else (opset 23 on, where the specification ties it to
// y_scale) the scale's type; before opset 23, which leaves it open,
// float32 as onnxruntime computes it, and float64 for int32 x (exact, as
// the reference implementation computes it).
func (ctx *Context) quantPrecision(x, scale *onnx.Tensor) (int, error) {
	p := onnx.DataType(ctx.attrInt("precision", 0))
	if p == onnx.Undefined && ctx.opsetAtLeast(23) {
		p = scale.DType
	}
	switch p {
	case onnx.Undefined:
	case onnx.Float:
		return precFloat32, nil
	case onnx.Float16:
		return precFloat16, nil
	case onnx.BFloat16:
		return precBFloat16, nil
	default:
		return 0, ctx.errf("precision %s is not float32, float16 or bfloat16", onnx.TypeName(p))
	}
	if x.DType == onnx.Int32 {
		return precFloat64, nil
	}
	return precFloat32, nil
}

// roundTo rounds v to the given precision.
func roundTo(v float64, prec int) float64 {
	switch prec {
	case precFloat32:
		return float64(float32(v))
	case precFloat16:
		return float64(onnx.HalfToFloat(onnx.FloatToHalf(float32(v))))
	case precBFloat16:
		return float64(onnx.BFloat16ToFloat(onnx.FloatToBFloat16(float32(v))))
	}
	return v
}

// saturate rounds q to nearest even, adds the zero point and clamps to
// [lo, hi]; NaN maps to lo (as x86 runtimes do).
func saturate(q float64, zp int32, lo, hi float64) float64 {
	v := math.RoundToEven(q) + float64(zp)
	switch {
	case v != v || v < lo:
		return lo
	case v > hi:
		return hi
	}
	return v
}

// quantOutType is the type of y: the zero point's, else output_dtype
// (opset 21), else uint8.
func (ctx *Context) quantOutType(zp *onnx.Tensor) (onnx.DataType, error) {
	od := onnx.DataType(ctx.attrInt("output_dtype", 0))
	dt := od
	if zp != nil {
		if od != onnx.Undefined && od != zp.DType {
			return 0, ctx.errf("output_dtype %s differs from the zero point's type %s", onnx.TypeName(od), zp)
		}
		dt = zp.DType
	}
	if dt == onnx.Undefined {
		dt = onnx.Uint8
	}
	if _, _, ok := onnx.QuantRange(dt); !ok {
		return 0, ctx.errf("quantized type %s is not int8, uint8, int16 or uint16", onnx.TypeName(dt))
	}
	return dt, nil
}

// quantizeLinear is y = saturate(round(x / y_scale) + y_zero_point).
func quantizeLinear(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 2, 3); err != nil {
		return nil, err
	}
	x, scale, zp := in[0], in[1], opt(in, 2)
	if x.DType != onnx.Float && x.DType != onnx.Float16 && x.DType != onnx.BFloat16 && x.DType != onnx.Int32 {
		return nil, ctx.errf("x must be float32, float16, bfloat16 or int32, got %s", x)
	}
	sc, err := ctx.scaleValues(scale, "y_scale")
	if err != nil {
		return nil, err
	}
	dt, err := ctx.quantOutType(zp)
	if err != nil {
		return nil, err
	}
	prec, err := ctx.quantPrecision(x, scale)
	if err != nil {
		return nil, err
	}
	l, err := ctx.quantLayout(x, scale, zp)
	if err != nil {
		return nil, err
	}
	xs, err := x.AsFloat64s()
	if err != nil {
		return nil, ctx.errf("%v", err)
	}
	y, err := ctx.newTensor(dt, x.Shape)
	if err != nil {
		return nil, err
	}
	q := &quantizer{zp: zeroPoints(zp, len(sc)), sc: sc, prec: prec, l: l}
	q.lo, q.hi, _ = onnx.QuantRange(dt)
	switch yd := y.Data.(type) {
	case []int8:
		quantT(yd, xs, q)
	case []uint8:
		quantT(yd, xs, q)
	case []int16:
		quantT(yd, xs, q)
	case []uint16:
		quantT(yd, xs, q)
	}
	return []*onnx.Tensor{y}, nil
}

// quantizer holds what quantT needs besides the data.
type quantizer struct {
	zp     []int32
	sc     []float32
	prec   int
	lo, hi float64
	l      *qLayout
}

func quantT[T qint](y []T, x []float64, q *quantizer) {
	for idx, p := range q.l.params() {
		v := roundTo(x[idx]/float64(q.sc[p]), q.prec)
		y[idx] = T(saturate(v, q.zp[p], q.lo, q.hi))
	}
}

// dynamicQuantParams returns the uint8 scale and zero point of
// DynamicQuantizeLinear for x: the range [min(x, 0), max(x, 0)] mapped
// onto [0, 255], in float32; a zero range gives scale 1.
func dynamicQuantParams(x []float32) (scale float32, zp uint8) {
	var lo, hi float32
	for _, v := range x {
		lo, hi = min(lo, v), max(hi, v)
	}
	if lo != lo || hi != hi { // min and max propagate NaN
		lo, hi = 0, 0
		for _, v := range x {
			if v == v {
				lo, hi = min(lo, v), max(hi, v)
			}
		}
	}
	scale = 1
	if hi != lo {
		scale = (hi - lo) / 255
	}
	z := 0 - lo/scale
	return scale, uint8(saturate(float64(min(max(z, 0), 255)), 0, 0, 255))
}

// quantizeU8 writes round(x / scale) + zp saturated to uint8, with the
// division in float32.
func quantizeU8(y []uint8, x []float32, scale float32, zp uint8) {
	for i, v := range x {
		y[i] = uint8(saturate(float64(v/scale), int32(zp), 0, 255))
	}
}

// dynamicQuantizeLinear quantizes float32 x to uint8 with the scale and
// zero point that map [min(x, 0), max(x, 0)] onto [0, 255]; it returns y,
// y_scale and y_zero_point.
func dynamicQuantizeLinear(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 1, 1); err != nil {
		return nil, err
	}
	x := in[0]
	if x.DType != onnx.Float {
		return nil, ctx.errf("x must be float32, got %s", x)
	}
	xd := x.Floats()
	scale, zp := dynamicQuantParams(xd)
	y, err := ctx.newTensor(onnx.Uint8, x.Shape)
	if err != nil {
		return nil, err
	}
	quantizeU8(y.Data.([]uint8), xd, scale, zp)
	return []*onnx.Tensor{y,
		onnx.NewFloat([]int{}, []float32{scale}),
		{DType: onnx.Uint8, Shape: []int{}, Data: []uint8{zp}}}, nil
}

// matmulGeom checks the shapes of a matmul of a and b (see matmulShapes)
// and sets the batch offsets.
func (ctx *Context) matmulGeom(a, b []int) (*mmGeom, error) {
	if len(a) == 0 || len(b) == 0 {
		return nil, ctx.errf("A and B must have rank ≥ 1, got %v and %v", a, b)
	}
	g, err := ctx.matmulShapes(a, b)
	if err != nil {
		return nil, err
	}
	if n := onnx.NumElements(g.full); n < 0 || n > MaxElements {
		return nil, ctx.errf("output shape %v is too large", g.full)
	}
	g.offsets()
	return g, nil
}

// matParam expands a quantization parameter of a matmul operand with
// batch dims batch to one value per (matrix, row) when rows is set, or per
// (matrix, column): a scalar, a vector of the n rows (columns), or a
// tensor of the operand's rank with shape [..., n, 1] ([..., 1, n]) whose
// leading dims broadcast to batch. A nil parameter gives nil.
func (ctx *Context) matParam(p *onnx.Tensor, what string, batch []int, n int, rows bool) ([]float64, error) {
	if p == nil {
		return nil, nil
	}
	v, err := p.AsFloat64s()
	if err != nil {
		return nil, ctx.errf("%s: %v", what, err)
	}
	full := append(cloneShape(batch), n)
	ps := p.Shape
	if r := len(ps); r >= 2 {
		other, vec := ps[r-1], ps[r-2]
		if !rows {
			other, vec = vec, other
		}
		if other != 1 {
			return nil, ctx.errf("%s has shape %v: want a scalar, a vector of %d or a matrix with one %s", what, ps, n, lineName(!rows))
		}
		ps = append(cloneShape(ps[:r-2]), vec)
	}
	if len(ps) > len(full) {
		return nil, ctx.errf("%s %v has a higher rank than its operand", what, p.Shape)
	}
	for i, d := range ps {
		if f := full[len(full)-len(ps)+i]; d != f && d != 1 {
			return nil, ctx.errf("%s %v does not fit an operand of %d %ss over batch %v", what, p.Shape, n, lineName(rows), batch)
		}
	}
	st := bstrides(ps, full)
	out := make([]float64, prod(full))
	idx := make([]int, len(full))
	for i := range out {
		o := 0
		for j, x := range idx {
			o += x * st[j]
		}
		out[i] = v[o]
		nextIndex(idx, full)
	}
	return out, nil
}

func lineName(rows bool) string {
	if rows {
		return "row"
	}
	return "column"
}

// int8Operand checks that t is int8 or uint8 and that its zero point, if
// any, has its type.
func (ctx *Context) int8Operand(t, zp *onnx.Tensor, what string) error {
	if t.DType != onnx.Int8 && t.DType != onnx.Uint8 {
		return ctx.errf("%s must be int8 or uint8, got %s", what, t)
	}
	if zp != nil && zp.DType != t.DType {
		return ctx.errf("%s %s and its zero point %s must have one type", what, t, zp)
	}
	return nil
}

// centered returns the values of an int8/uint8 operand [batch..., r, c]
// minus their zero points (zp per (matrix, row) when rows is set, else per
// (matrix, column); nil for none) as float32, and their largest magnitude.
func centered(t *onnx.Tensor, zp []float64, r, c int, rows bool) ([]float32, float32) {
	if d, ok := t.Data.([]int8); ok {
		return centeredT(d, zp, r, c, rows)
	}
	return centeredT(t.Data.([]uint8), zp, r, c, rows)
}

func centeredT[T int8 | uint8](v []T, zp []float64, r, c int, rows bool) ([]float32, float32) {
	out := make([]float32, len(v))
	var big float32
	for i, x := range v {
		z := 0.0
		if zp != nil {
			mat, in := i/(r*c), i%(r*c)
			if rows {
				z = zp[mat*r+in/c]
			} else {
				z = zp[mat*c+in%c]
			}
		}
		// Zero points are in the operand's range: |x − z| ≤ 255.
		out[i] = float32(int32(x) - int32(z))
		big = max(big, abs32(out[i]))
	}
	return out, big
}

func abs32(v float32) float32 {
	if v < 0 {
		return -v
	}
	return v
}

// exactFloat32 bounds the integers float32 holds exactly (2²⁴).
const exactFloat32 = 1 << 24

// imatmul computes c = a·b in int32 for each output batch entry, a and b
// holding integers of magnitude at most amax and bmax. float32 GEMMs over
// slices of the inner dimension short enough that every partial sum stays
// within ±2²⁴ compute each slice exactly, in any summation order; the
// slices add up in int32, wrapping as 32-bit accumulation does.
func imatmul(g *mmGeom, a, b []float32, amax, bmax float32, c []int32, threads int) {
	m, n, k := g.m, g.n, g.k
	if m*n == 0 || k == 0 || amax*bmax == 0 {
		return
	}
	kc := max(1, int(exactFloat32/(float64(amax)*float64(bmax))))
	rows, nb := m, len(g.aoff)
	if bShared(g) { // one B for every batch entry: fold the batch into the rows
		rows, nb = nb*m, 1
	}
	tmp := make([]float32, rows*n)
	for bi := 0; bi < nb; bi++ {
		ab, bb, cb := a[g.aoff[bi]*m*k:], b[g.boff[bi]*k*n:], c[bi*rows*n:][:rows*n]
		for k0 := 0; k0 < k; k0 += kc {
			kk := min(kc, k-k0)
			gemm.Sgemm(false, false, rows, n, kk, 1, ab[k0:], k, bb[k0*n:], n, 0, tmp, n, threads)
			for i, v := range tmp {
				cb[i] += int32(v)
			}
		}
	}
}

// bShared reports whether every output batch entry reads B's only matrix
// and A's matrices in order.
func bShared(g *mmGeom) bool {
	for i := range g.aoff {
		if g.aoff[i] != i || g.boff[i] != 0 {
			return false
		}
	}
	return true
}

// intProduct computes the int32 matmul (A − a_zero_point)·(B − b_zero_point)
// of int8/uint8 operands, zero points per row of A and per column of B.
func (ctx *Context) intProduct(a, b, azp, bzp *onnx.Tensor) (*mmGeom, []int32, error) {
	if err := ctx.int8Operand(a, azp, "A"); err != nil {
		return nil, nil, err
	}
	if err := ctx.int8Operand(b, bzp, "B"); err != nil {
		return nil, nil, err
	}
	g, err := ctx.matmulGeom(a.Shape, b.Shape)
	if err != nil {
		return nil, nil, err
	}
	az, err := ctx.matParam(azp, "a_zero_point", g.aBatch, g.m, true)
	if err != nil {
		return nil, nil, err
	}
	bz, err := ctx.matParam(bzp, "b_zero_point", g.bBatch, g.n, false)
	if err != nil {
		return nil, nil, err
	}
	y, err := ctx.newTensor(onnx.Int32, g.out)
	if err != nil {
		return nil, nil, err
	}
	ac, amax := centered(a, az, g.m, g.k, true)
	bc, bmax := centered(b, bz, g.k, g.n, false)
	c := y.Data.([]int32)
	imatmul(g, ac, bc, amax, bmax, c, ctx.threads())
	return g, c, nil
}

// matMulInteger is the int32 product (A − a_zero_point)·(B − b_zero_point)
// with numpy matmul broadcasting.
func matMulInteger(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 2, 4); err != nil {
		return nil, err
	}
	g, c, err := ctx.intProduct(in[0], in[1], opt(in, 2), opt(in, 3))
	if err != nil {
		return nil, err
	}
	return []*onnx.Tensor{{DType: onnx.Int32, Shape: g.out, Data: c}}, nil
}

// oneValue returns the single value of a per-tensor parameter.
func (ctx *Context) oneValue(t *onnx.Tensor, what string) (float64, error) {
	if t == nil {
		return 0, nil
	}
	if t.Len() != 1 {
		return 0, ctx.errf("%s must have one element, got shape %v", what, t.Shape)
	}
	v, err := t.AsFloat64s()
	if err != nil {
		return 0, ctx.errf("%s: %v", what, err)
	}
	return v[0], nil
}

// qlinearMatMul multiplies quantized a and b and requantizes the int32
// product with a_scale·b_scale / y_scale (scales per row of a and per
// column of b, the multiplier rounded to the scales' type as the reference
// computes it), then adds y_zero_point and saturates.
func qlinearMatMul(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 8, 8); err != nil {
		return nil, err
	}
	a, as, b, bs, ys, yzp := in[0], in[1], in[3], in[4], in[6], in[7]
	if as.DType != onnx.Float && as.DType != onnx.Float16 && as.DType != onnx.BFloat16 {
		return nil, ctx.errf("a_scale must be float32, float16 or bfloat16, got %s", as)
	}
	if bs.DType != as.DType || ys.DType != as.DType {
		return nil, ctx.errf("a_scale %s, b_scale %s and y_scale %s must have one type", as, bs, ys)
	}
	g, c, err := ctx.intProduct(a, b, in[2], in[5])
	if err != nil {
		return nil, err
	}
	asv, err := ctx.matParam(as, "a_scale", g.aBatch, g.m, true)
	if err != nil {
		return nil, err
	}
	bsv, err := ctx.matParam(bs, "b_scale", g.bBatch, g.n, false)
	if err != nil {
		return nil, err
	}
	ysv, err := ctx.oneValue(ys, "y_scale")
	if err != nil {
		return nil, err
	}
	dt := yzp.DType
	lo, hi, _ := onnx.QuantRange(dt)
	if dt != onnx.Int8 && dt != onnx.Uint8 {
		return nil, ctx.errf("y_zero_point must be int8 or uint8, got %s", yzp)
	}
	yz, err := ctx.oneValue(yzp, "y_zero_point")
	if err != nil {
		return nil, err
	}
	prec := map[onnx.DataType]int{onnx.Float: precFloat32, onnx.Float16: precFloat16, onnx.BFloat16: precBFloat16}[as.DType]
	y, err := ctx.newTensor(dt, g.out)
	if err != nil {
		return nil, err
	}
	for r, v := range c {
		bi, rest := r/(g.m*g.n), r%(g.m*g.n)
		mult := roundTo(roundTo(asv[g.aoff[bi]*g.m+rest/g.n]*bsv[g.boff[bi]*g.n+rest%g.n], prec)/ysv, prec)
		setFloat(y, r, saturate(float64(v)*mult, int32(yz), lo, hi))
	}
	return []*onnx.Tensor{y}, nil
}

// floatParam returns a float32 or float16 parameter of a com.microsoft
// quantized matmul as float32, checking its type against want.
func (ctx *Context) floatParam(t *onnx.Tensor, what string, want onnx.DataType) ([]float32, error) {
	if t == nil {
		return nil, nil
	}
	if t.DType != want {
		return nil, ctx.errf("%s must be %s like the scales, got %s", what, onnx.TypeName(want), t)
	}
	return ctx.scaleValues(t, what)
}

// scaleProduct returns a_scale·b_scale (in float32) broadcast, and checks
// that it broadcasts onto the output shape out.
func (ctx *Context) scaleProduct(as, bs *onnx.Tensor, out []int) (*onnx.Tensor, error) {
	av, err := ctx.floatParam(as, "a_scale", as.DType)
	if err != nil {
		return nil, err
	}
	bv, err := ctx.floatParam(bs, "b_scale", as.DType)
	if err != nil {
		return nil, err
	}
	p, err := ctx.plan2(as.Shape, bs.Shape, onnx.Float)
	if err != nil {
		return nil, err
	}
	if s, err := broadcastShapes(p.Out, out); err != nil || !slices.Equal(s, out) {
		return nil, ctx.errf("scales %v and %v do not broadcast to the output %v", as.Shape, bs.Shape, out)
	}
	prod := make([]float32, p.N)
	p.runs(func(o, a, b int) {
		for i := range max(p.Inner, 1) {
			prod[o+i] = av[a+i*p.SA] * bv[b+i*p.SB]
		}
	})
	return onnx.NewFloat(p.Out, prod), nil
}

// intToFloat computes y = float32(acc)·scale + bias for the int32 product
// acc, the scale broadcast onto the output and the bias along its last
// axis, and rounds to dt.
func (ctx *Context) intToFloat(g *mmGeom, acc []int32, scale *onnx.Tensor, bias []float32, dt onnx.DataType) (*onnx.Tensor, error) {
	y, err := ctx.newTensor(onnx.Float, g.out)
	if err != nil {
		return nil, err
	}
	yd, sd := y.Floats(), scale.Floats()
	p, err := makePlan2(g.out, scale.Shape)
	if err != nil {
		return nil, ctx.errf("%v", err)
	}
	p.runs(func(o, _, s int) {
		for i := range max(p.Inner, 1) {
			yd[o+i] = float32(acc[o+i]) * sd[s+i*p.SB]
		}
	})
	if bias != nil {
		for i := range yd {
			yd[i] += bias[i%len(bias)]
		}
	}
	if dt != onnx.Float {
		y = fromFloat32(y, dt)
	}
	return y, nil
}

// biasOf checks the optional bias of a com.microsoft quantized matmul: a
// vector of the n output columns.
func (ctx *Context) biasOf(t *onnx.Tensor, n int, dt onnx.DataType) ([]float32, error) {
	if t == nil {
		return nil, nil
	}
	if len(t.Shape) != 1 || t.Shape[0] != n {
		return nil, ctx.errf("bias must have shape [%d], got %v", n, t.Shape)
	}
	if n == 0 {
		return nil, nil
	}
	return ctx.floatParam(t, "bias", dt)
}

// matMulIntegerToFloat (com.microsoft) is
// Y = (A − a_zero_point)·(B − b_zero_point) · a_scale · b_scale + bias:
// the int32 product converted to float32, multiplied by the product of
// the scales (each broadcast onto Y: scalars, or per column of B) and the
// bias added along the last axis. Scales and bias are float32 or float16,
// Y has their type.
func matMulIntegerToFloat(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 4, 7); err != nil {
		return nil, err
	}
	as, bs := in[2], in[3]
	if as.DType != onnx.Float && as.DType != onnx.Float16 {
		return nil, ctx.errf("a_scale must be float32 or float16, got %s", as)
	}
	g, acc, err := ctx.intProduct(in[0], in[1], opt(in, 4), opt(in, 5))
	if err != nil {
		return nil, err
	}
	scale, err := ctx.scaleProduct(as, bs, g.out)
	if err != nil {
		return nil, err
	}
	bias, err := ctx.biasOf(opt(in, 6), g.n, as.DType)
	if err != nil {
		return nil, err
	}
	return oneOutput(ctx.intToFloat(g, acc, scale, bias, as.DType))
}

// dynamicQuantizeMatMul (com.microsoft) quantizes float32 A to uint8 as
// DynamicQuantizeLinear does and computes MatMulIntegerToFloat with that
// scale and zero point: Y = (A_q − a_zp)·(B − b_zero_point)·a_scale·b_scale
// + bias.
func dynamicQuantizeMatMul(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 3, 5); err != nil {
		return nil, err
	}
	a, b, bs := in[0], in[1], in[2]
	if a.DType != onnx.Float || bs.DType != onnx.Float {
		return nil, ctx.errf("A and b_scale must be float32, got %s and %s", a, bs)
	}
	scale, zp := dynamicQuantParams(a.Floats())
	aq := &onnx.Tensor{DType: onnx.Uint8, Shape: a.Shape, Data: make([]uint8, a.Len())}
	quantizeU8(aq.Data.([]uint8), a.Floats(), scale, zp)
	azp := &onnx.Tensor{DType: onnx.Uint8, Shape: []int{}, Data: []uint8{zp}}
	ascale := onnx.NewFloat([]int{}, []float32{scale})
	return matMulIntegerToFloat(ctx, []*onnx.Tensor{aq, b, ascale, bs, azp, opt(in, 3), opt(in, 4)})
}
