package kernels

import (
	"math"
	"slices"

	"github.com/linearize/linearize/onnx"
)

// taps are the input positions and weights one output position of one
// axis reads; outside marks a tf_crop_and_resize position beyond the input
// (it takes extrapolation_value).
type taps struct {
	idx     []int
	w       []float64
	outside bool
}

// resize is the ONNX Resize (opset 11 to 19): nearest, linear or cubic
// interpolation, separable over the axes, in float64. Output sizes come
// from sizes, or from scales (floor(in·scale)); antialiased downsampling
// is not supported.
func resize(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	if err := ctx.checkInputs(in, 1, 4); err != nil {
		return nil, err
	}
	x := in[0]
	r := len(x.Shape)
	if r == 0 {
		return nil, ctx.errf("X must have rank ≥ 1")
	}
	switch x.DType {
	case onnx.Float, onnx.Double, onnx.Float16, onnx.BFloat16, onnx.Int8, onnx.Uint8, onnx.Int32, onnx.Int64:
	default:
		return nil, ctx.errf("unsupported type %s", onnx.TypeName(x.DType))
	}
	at, err := ctx.resizeAttributes()
	if err != nil {
		return nil, err
	}
	axes, err := ctx.resizeAxes(r)
	if err != nil {
		return nil, err
	}
	roi, scalesIn, sizesIn, err := ctx.resizeInputs(in)
	if err != nil {
		return nil, err
	}
	scale, out, err := ctx.resizeTarget(x.Shape, axes, scalesIn, sizesIn, at.policy)
	if err != nil {
		return nil, err
	}
	if ctx.attrInt("antialias", 0) != 0 && at.mode != "nearest" && slices.ContainsFunc(scale, func(s float64) bool { return s < 1 }) {
		return nil, ctx.errf("antialiased downsampling is not supported")
	}
	if at.coord == "tf_crop_and_resize" {
		if roi, err = ctx.cropROI(roi, axes, r); err != nil {
			return nil, err
		}
	}
	y, err := ctx.newTensor(x.DType, out)
	if err != nil {
		return nil, err
	}
	tables := make([][]taps, r)
	for ax := range r {
		if tables[ax], err = ctx.axisTaps(at, x.Shape[ax], out[ax], scale[ax], roi, ax, r); err != nil {
			return nil, err
		}
	}
	xs, err := x.AsFloat64s()
	if err != nil {
		return nil, ctx.errf("%v", err)
	}
	cur, shape, err := ctx.interpolate(xs, x.Shape, tables)
	if err != nil {
		return nil, err
	}
	if at.coord == "tf_crop_and_resize" {
		extrapolate(cur, shape, tables, at.extrap)
	}
	storeResized(y, cur, !onnx.IsFloat(x.DType))
	return []*onnx.Tensor{y}, nil
}

// resizeAttrs are the attributes of a Resize node.
type resizeAttrs struct {
	mode    string // nearest, linear or cubic
	coord   string // coordinate_transformation_mode
	nearest string // nearest_mode
	policy  string // keep_aspect_ratio_policy
	cubicA  float64
	exclude bool // exclude_outside
	extrap  float64
}

func (ctx *Context) resizeAttributes() (*resizeAttrs, error) {
	mode := ctx.attrString("mode", "nearest")
	if mode != "nearest" && mode != "linear" && mode != "cubic" {
		return nil, ctx.errf("mode %q is not nearest, linear or cubic", mode)
	}
	return &resizeAttrs{
		mode:    mode,
		coord:   ctx.attrString("coordinate_transformation_mode", "half_pixel"),
		nearest: ctx.attrString("nearest_mode", "round_prefer_floor"),
		cubicA:  float64(ctx.attrFloat("cubic_coeff_a", -0.75)),
		exclude: ctx.attrInt("exclude_outside", 0) != 0,
		extrap:  float64(ctx.attrFloat("extrapolation_value", 0)),
		policy:  ctx.attrString("keep_aspect_ratio_policy", "stretch"),
	}, nil
}

// resizeAxes returns the axes scales and sizes refer to: all, unless
// attribute axes names some.
func (ctx *Context) resizeAxes(r int) ([]int, error) {
	v, ok := ctx.attrInts("axes")
	if !ok || len(v) == 0 {
		axes := make([]int, r)
		for i := range axes {
			axes[i] = i
		}
		return axes, nil
	}
	axes := make([]int, 0, r)
	seen := map[int]bool{}
	for _, ax := range v {
		k, err := ctx.normAxis(ax, r)
		if err != nil {
			return nil, err
		}
		if seen[k] {
			return nil, ctx.errf("axes %v repeats axis %d", v, k)
		}
		seen[k] = true
		axes = append(axes, k)
	}
	return axes, nil
}

// resizeInputs reads the optional roi, scales and sizes inputs (an empty
// tensor counts as absent); exactly one of scales and sizes must be given.
func (ctx *Context) resizeInputs(in []*onnx.Tensor) (roi, scales []float64, sizes []int64, err error) {
	if roi, err = ctx.optFloats(opt(in, 1), "roi"); err != nil {
		return nil, nil, nil, err
	}
	if scales, err = ctx.optFloats(opt(in, 2), "scales"); err != nil {
		return nil, nil, nil, err
	}
	if t := opt(in, 3); t != nil && t.Len() > 0 {
		if sizes, err = ctx.intsInput(t, "sizes"); err != nil {
			return nil, nil, nil, err
		}
	}
	if (scales == nil) == (sizes == nil) {
		return nil, nil, nil, ctx.errf("exactly one of scales and sizes must be given")
	}
	return roi, scales, sizes, nil
}

// optFloats reads an optional float input as float64; nil when it is
// absent or empty.
func (ctx *Context) optFloats(t *onnx.Tensor, what string) ([]float64, error) {
	if t == nil || t.Len() == 0 {
		return nil, nil
	}
	if !onnx.IsFloat(t.DType) {
		return nil, ctx.errf("%s must be a float tensor, got %s", what, t)
	}
	return t.AsFloat64s()
}

// resizeTarget returns the scale and output size of every axis of an
// input of shape in, from scales or from sizes (and the aspect policy).
func (ctx *Context) resizeTarget(in []int, axes []int, scales []float64, sizes []int64, policy string) ([]float64, []int, error) {
	scale := make([]float64, len(in))
	for i := range scale {
		scale[i] = 1
	}
	out := cloneShape(in)
	if scales != nil {
		return scale, out, ctx.scaledSizes(scale, out, in, axes, scales)
	}
	if len(sizes) != len(axes) {
		return nil, nil, ctx.errf("sizes has %d values for %d axes", len(sizes), len(axes))
	}
	for j, ax := range axes {
		if sizes[j] < 0 || sizes[j] > MaxElements {
			return nil, nil, ctx.errf("sizes %v out of range", sizes)
		}
		out[ax] = int(sizes[j])
		if in[ax] > 0 {
			scale[ax] = float64(out[ax]) / float64(in[ax])
		}
	}
	switch policy {
	case "stretch":
	case "not_larger", "not_smaller":
		keepAspect(scale, out, in, axes, policy == "not_larger")
	default:
		return nil, nil, ctx.errf("keep_aspect_ratio_policy %q is not stretch, not_larger or not_smaller", policy)
	}
	return scale, out, nil
}

// scaledSizes sets scale and out on axes from the scales input: the output
// size is floor(in·scale), in float32 as onnxruntime computes it (5·1.4
// is 7, not 6).
func (ctx *Context) scaledSizes(scale []float64, out, in, axes []int, scales []float64) error {
	if len(scales) != len(axes) {
		return ctx.errf("scales has %d values for %d axes", len(scales), len(axes))
	}
	for j, ax := range axes {
		s := scales[j]
		if !(s > 0) || math.IsInf(s, 0) {
			return ctx.errf("scales %v must be positive and finite", scales)
		}
		scale[ax] = s
		o := math.Floor(float64(float32(in[ax]) * float32(s)))
		if o > MaxElements {
			return ctx.errf("scales %v make a too large output", scales)
		}
		out[ax] = int(o)
	}
	return nil
}

// keepAspect gives every axis of axes one scale, the smallest of theirs
// (notLarger) or the largest, and the output size round(scale·in).
func keepAspect(scale []float64, out, in, axes []int, notLarger bool) {
	common := math.Inf(-1)
	if notLarger {
		common = math.Inf(1)
	}
	for _, ax := range axes {
		if notLarger {
			common = math.Min(common, scale[ax])
		} else {
			common = math.Max(common, scale[ax])
		}
	}
	for _, ax := range axes {
		scale[ax] = common
		out[ax] = int(math.Floor(common*float64(in[ax]) + 0.5))
	}
}

// cropROI checks tf_crop_and_resize's roi, [starts..., ends...] over axes
// or over all r axes, and extends the former to all axes (0 to 1 on the
// others).
func (ctx *Context) cropROI(roi []float64, axes []int, r int) ([]float64, error) {
	if len(roi) != 2*len(axes) && len(roi) != 2*r {
		return nil, ctx.errf("tf_crop_and_resize needs roi of %d values, got %d", 2*len(axes), len(roi))
	}
	if len(roi) != 2*len(axes) || len(axes) == r {
		return roi, nil
	}
	full := make([]float64, 2*r)
	for i := 0; i < r; i++ {
		full[i], full[r+i] = 0, 1
	}
	for j, ax := range axes {
		full[ax], full[r+ax] = roi[j], roi[len(axes)+j]
	}
	return full, nil
}

// axisTaps returns the taps of each of the m output positions of axis ax
// (input size n).
func (ctx *Context) axisTaps(at *resizeAttrs, n, m int, scale float64, roi []float64, ax, r int) ([]taps, error) {
	tb := make([]taps, m)
	for o := range tb {
		xo, err := ctx.originalCoord(at.coord, o, n, m, scale, roi, ax, r)
		if err != nil {
			return nil, err
		}
		if at.coord == "tf_crop_and_resize" && (xo < 0 || xo > float64(n-1)) {
			tb[o].outside = true
			continue
		}
		if n == 0 {
			continue
		}
		switch at.mode {
		case "nearest":
			i, err := ctx.nearestIndex(at.nearest, xo)
			if err != nil {
				return nil, err
			}
			tb[o] = taps{idx: []int{min(max(i, 0), n-1)}, w: []float64{1}}
		case "linear":
			x0 := math.Floor(xo)
			t := xo - x0
			i0 := int(x0)
			tb[o] = taps{idx: []int{clampInt(i0, n), clampInt(i0+1, n)}, w: []float64{1 - t, t}}
		case "cubic":
			tb[o] = cubicTaps(xo, n, at.cubicA, at.exclude)
		}
	}
	return tb, nil
}

// cubicTaps are the four taps around input coordinate xo of an axis of
// size n; with exclude, the taps outside the input weigh 0 and the others
// are renormalized.
func cubicTaps(xo float64, n int, a float64, exclude bool) taps {
	x0 := math.Floor(xo)
	i0 := int(x0)
	w := cubicWeights(xo-x0, a)
	var tp taps
	sum := 0.0
	for k := -1; k <= 2; k++ {
		wk := w[k+1]
		if exclude && (i0+k < 0 || i0+k >= n) {
			wk = 0
		}
		sum += wk
		tp.idx = append(tp.idx, clampInt(i0+k, n))
		tp.w = append(tp.w, wk)
	}
	if exclude && sum != 0 {
		for k := range tp.w {
			tp.w[k] /= sum
		}
	}
	return tp
}

// interpolate resizes xs (shape) one axis after the other with the taps
// of each axis, skipping the axes the taps leave unchanged.
func (ctx *Context) interpolate(xs []float64, shape []int, tables [][]taps) ([]float64, []int, error) {
	cur, shape := xs, cloneShape(shape)
	for ax, tb := range tables {
		if identityTaps(tb, shape[ax]) {
			continue
		}
		next := cloneShape(shape)
		next[ax] = len(tb)
		if err := ctx.budget("interpolation buffer", onnx.Double, next); err != nil {
			return nil, nil, err
		}
		cur, shape = resizeAxis(cur, shape, ax, tb)
	}
	return cur, shape, nil
}

// extrapolate sets the positions of y (shape) that some axis's taps mark
// outside the input to v.
func extrapolate(y []float64, shape []int, tables [][]taps, v float64) {
	pos := make([]int, len(shape))
	for i := range y {
		for ax := range shape {
			if tables[ax][pos[ax]].outside {
				y[i] = v
				break
			}
		}
		nextIndex(pos, shape)
	}
}

// storeResized writes the float64 results into y, rounded to nearest even
// for an integer type.
func storeResized(y *onnx.Tensor, v []float64, integer bool) {
	if yd, ok := y.Data.([]float32); ok {
		for i, e := range v {
			yd[i] = float32(e)
		}
		return
	}
	for i, e := range v {
		if integer {
			e = math.RoundToEven(e)
		}
		setFloat(y, i, e)
	}
}

func clampInt(i, n int) int { return min(max(i, 0), n-1) }

// originalCoord maps output position o of an axis of input size n and
// output size m to a coordinate in the input.
func (ctx *Context) originalCoord(mode string, o, n, m int, scale float64, roi []float64, ax, r int) (float64, error) {
	x := float64(o)
	switch mode {
	case "half_pixel":
		return (x+0.5)/scale - 0.5, nil
	case "half_pixel_symmetric":
		adj := float64(m) / (scale * float64(n))
		center := float64(n) / 2
		return center*(1-adj) + (x+0.5)/scale - 0.5, nil
	case "pytorch_half_pixel":
		if m > 1 {
			return (x+0.5)/scale - 0.5, nil
		}
		return 0, nil
	case "align_corners":
		if m == 1 {
			return 0, nil
		}
		return x * float64(n-1) / float64(m-1), nil
	case "asymmetric":
		return x / scale, nil
	case "tf_half_pixel_for_nn":
		return (x + 0.5) / scale, nil
	case "tf_crop_and_resize":
		start, end := roi[ax], roi[r+ax]
		if m > 1 {
			return start*float64(n-1) + x*(end-start)*float64(n-1)/float64(m-1), nil
		}
		return 0.5 * (start + end) * float64(n-1), nil
	}
	return 0, ctx.errf("coordinate_transformation_mode %q is not supported", mode)
}

// nearestIndex rounds an input coordinate as nearest_mode says.
func (ctx *Context) nearestIndex(mode string, x float64) (int, error) {
	switch mode {
	case "round_prefer_floor":
		if x-math.Floor(x) == 0.5 {
			return int(math.Floor(x)), nil
		}
		return int(math.Round(x)), nil
	case "round_prefer_ceil":
		if x-math.Floor(x) == 0.5 {
			return int(math.Ceil(x)), nil
		}
		return int(math.Round(x)), nil
	case "floor":
		return int(math.Floor(x)), nil
	case "ceil":
		return int(math.Ceil(x)), nil
	}
	return 0, ctx.errf("nearest_mode %q is not supported", mode)
}

// cubicWeights are the Keys cubic convolution weights of the taps at
// offsets −1, 0, 1, 2 from floor(x), t = x − floor(x).
func cubicWeights(t, a float64) [4]float64 {
	k := func(d float64) float64 { // d = |distance|
		switch {
		case d <= 1:
			return ((a+2)*d-(a+3))*d*d + 1
		case d < 2:
			return ((a*d-5*a)*d+8*a)*d - 4*a
		}
		return 0
	}
	return [4]float64{k(t + 1), k(t), k(1 - t), k(2 - t)}
}

func identityTaps(tb []taps, n int) bool {
	if len(tb) != n {
		return false
	}
	for o, tp := range tb {
		for k, i := range tp.idx {
			if tp.outside || (i == o) != (tp.w[k] == 1) || (i != o && tp.w[k] != 0) {
				return false
			}
		}
	}
	return true
}

// resizeAxis interpolates x (shape) along axis ax with the taps of each
// output position.
func resizeAxis(x []float64, shape []int, ax int, tb []taps) ([]float64, []int) {
	outer, inner := prod(shape[:ax]), prod(shape[ax+1:])
	n, m := shape[ax], len(tb)
	y := make([]float64, outer*m*inner)
	for o := 0; o < outer; o++ {
		src := x[o*n*inner : (o+1)*n*inner]
		dst := y[o*m*inner : (o+1)*m*inner]
		for j, tp := range tb {
			row := dst[j*inner : (j+1)*inner]
			for k, i := range tp.idx {
				w := tp.w[k]
				if w == 0 {
					continue
				}
				s := src[i*inner : (i+1)*inner]
				for e := range row {
					row[e] += w * s[e]
				}
			}
		}
	}
	shape = cloneShape(shape)
	shape[ax] = m
	return y, shape
}
