package convert

import (
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// rotaryCache is a rotary embedding stored as tables: cos(p·f_c) and
// sin(p·f_c) for positions p (the rows) and the frequency f_c of each
// column c, as exports of GTE-v1.5's remote code bake its cos_cached and
// sin_cached buffers, gathered by position ids.
type rotaryCache struct {
	cos, sin *constValue
	rowAxis  int // the axis of positions; the other long axis holds columns
	rows     int
	// colFreq is, for each column, the index i of its frequency
	// θ^(−2i/d) (a rotate-half table repeats the d/2 frequencies, an
	// interleaved one doubles each).
	colFreq []int
	freqs   []float64 // the d/2 frequencies, from 1 down
	base    float64
}

// minCacheRows is the fewest rows a table needs to be read as a cache.
const minCacheRows = 8

// findRotaryCaches finds pairs of constants that are a rotary embedding's
// cos and sin tables: two long axes (positions, columns), the cos table's
// first row all ones and the sin table's all zeros, and every sampled row
// p equal to cos(p·f_c) and sin(p·f_c) for per-column frequencies f_c
// (read from row 1) that form θ^(−2i/d).
func findRotaryCaches(ix *onnx.Index, consts map[string]*onnxpb.AttributeProto) []*rotaryCache {
	type candidate struct {
		value string
		shape []int64
	}
	var cosT, sinT []candidate
	names := make([]string, 0, len(ix.Initializers)+len(consts))
	for v := range ix.Initializers {
		names = append(names, v)
	}
	for v := range consts {
		names = append(names, v)
	}
	sort.Strings(names)
	for _, v := range names {
		axes := longAxes(ix, consts, v)
		if len(axes) != 2 || len(ix.Consumers[v]) == 0 {
			continue
		}
		tp := ix.Initializers[v]
		if tp == nil {
			tp = consts[v].GetT()
		}
		if !onnx.IsFloat(onnx.DataType(tp.GetDataType())) || tp.GetDims()[axes[0]] < minCacheRows {
			continue
		}
		first := firstRow(tp, axes)
		switch {
		case first == nil:
		case allNear(first, 1):
			cosT = append(cosT, candidate{v, tp.GetDims()})
		case allNear(first, 0):
			sinT = append(sinT, candidate{v, tp.GetDims()})
		}
	}
	// Only tables of one shape pair up; they are decoded whole then.
	var found []*rotaryCache
	used := map[string]bool{}
	for _, c := range cosT {
		for _, s := range sinT {
			if used[s.value] || !slices.Equal(c.shape, s.shape) {
				continue
			}
			cc, sc := newConst(ix, consts, c.value), newConst(ix, consts, s.value)
			if cc == nil || sc == nil || cc.tensor.Len() > 1<<28 {
				continue
			}
			if rc := pairCache(ix, consts, cc, sc); rc != nil {
				used[s.value] = true
				found = append(found, rc)
				break
			}
		}
	}
	return found
}

// firstRow returns the first row (position 0) of a table whose long axes
// are axes, reading only that row when the positions are its first axis
// (DecodeRows: a word embedding's first row, not the table); nil when it
// cannot be read cheaply.
func firstRow(tp *onnxpb.TensorProto, axes []int) []float64 {
	cols := int(tp.GetDims()[axes[1]])
	var t *onnx.Tensor
	var err error
	switch {
	case axes[0] == 0:
		t, err = onnx.DecodeRows(tp, []int{0})
	case onnx.NumElements(dimsOf(tp)) <= 1<<20:
		t, err = onnx.DecodeTensor(tp)
	default:
		return nil
	}
	if err != nil {
		return nil
	}
	x, err := t.AsFloat64s()
	if err != nil || len(x) < cols {
		return nil
	}
	return x[:cols]
}

func dimsOf(tp *onnxpb.TensorProto) []int {
	d := make([]int, len(tp.GetDims()))
	for i, v := range tp.GetDims() {
		d[i] = int(v)
	}
	return d
}

func allNear(x []float64, v float64) bool {
	for _, a := range x {
		if math.Abs(a-v) > 1e-6 {
			return false
		}
	}
	return len(x) > 0
}

// pairCache returns c and s as one rotary cache when they hold cos(p·f_c)
// and sin(p·f_c); nil otherwise.
func pairCache(ix *onnx.Index, consts map[string]*onnxpb.AttributeProto, c, s *constValue) *rotaryCache {
	axes := longAxes(ix, consts, c.value)
	rows, cols := c.tensor.Shape[axes[0]], c.tensor.Shape[axes[1]]
	cx, err1 := c.tensor.AsFloat64s()
	sx, err2 := s.tensor.AsFloat64s()
	if err1 != nil || err2 != nil {
		return nil
	}
	// Row p, column j is element p·cols + j: the long axes are the only
	// ones of more than one element.
	f := make([]float64, cols)
	for j := range f {
		f[j] = math.Atan2(sx[cols+j], cx[cols+j])
		if !(f[j] > 0 && f[j] <= 1+1e-6) {
			return nil
		}
	}
	tol := 2e-3 // float32 angles p·f lose about 1e-3 at p = 8192
	if c.tensor.DType == onnx.Float16 || c.tensor.DType == onnx.BFloat16 {
		tol = 2e-2
	}
	for _, p := range sampleRows(rows) {
		for j := range f {
			a := float64(p) * f[j]
			if math.Abs(cx[p*cols+j]-math.Cos(a)) > tol || math.Abs(sx[p*cols+j]-math.Sin(a)) > tol {
				return nil
			}
		}
	}
	// The distinct frequencies, from the fastest, must be θ^(−2i/d).
	distinct := slices.Clone(f)
	slices.SortFunc(distinct, func(a, b float64) int {
		switch {
		case a > b:
			return -1
		case a < b:
			return 1
		}
		return 0
	})
	distinct = slices.CompactFunc(distinct, func(a, b float64) bool { return math.Abs(a-b) <= 1e-6*a })
	k := len(distinct)
	if k < 2 {
		return nil
	}
	r := distinct[1] / distinct[0]
	for i := 2; i < k; i++ {
		if want := distinct[0] * math.Pow(r, float64(i)); math.Abs(distinct[i]-want) > 1e-3*want {
			return nil
		}
	}
	rc := &rotaryCache{cos: c, sin: s, rowAxis: axes[0], rows: rows, freqs: distinct, colFreq: make([]int, cols)}
	for j, fj := range f {
		i := slices.IndexFunc(distinct, func(d float64) bool { return math.Abs(d-fj) <= 1e-6*d })
		if i < 0 {
			return nil
		}
		rc.colFreq[j] = i
	}
	// The frequencies read back from float tables carry their rounding:
	// they are set to c·θ^(−2i/d) from the fitted θ (c = 1 when the first
	// is 1 to the tables' precision, as in a model not scaled before).
	rc.base = baseOf(distinct)
	c0 := distinct[0]
	if math.Abs(c0-1) < 1e-5 {
		c0 = 1
	}
	for i := range rc.freqs {
		rc.freqs[i] = c0 / math.Pow(rc.base, float64(2*i)/float64(2*k))
	}
	return rc
}

// sampleRows are the rows of a table of n checked: the first 16, every
// n/16-th, and the last.
func sampleRows(n int) []int {
	var out []int
	for p := 0; p < min(n, 16); p++ {
		out = append(out, p)
	}
	for p := 16; p < n; p += max(1, n/16) {
		out = append(out, p)
	}
	return append(out, n-1)
}

func (rc *rotaryCache) report() RotaryReport {
	return RotaryReport{Value: rc.cos.value + ", " + rc.sin.value, Dims: 2 * len(rc.freqs), Base: rc.base, Rows: rc.rows}
}

func (rc *rotaryCache) starts() []string { return []string{rc.cos.value, rc.sin.value} }

// scale writes tables of max(rows, n) rows from the scaled frequencies
// (and YaRN's factor on both).
func (rc *rotaryCache) scale(g *onnxpb.GraphProto, _ *onnx.Index, method string, s float64, trained, n int) (int, int, error) {
	if method == RotaryDynamic {
		return 0, 0, fmt.Errorf("convert: extend positions: %s, %s are stored cos/sin tables, which cannot change with the input's length: method dynamic does not apply (use ntk, linear or yarn)", rc.cos.value, rc.sin.value)
	}
	nf, factor := scaleFreqs(method, rc.freqs, rc.base, s, trained)
	rows := max(rc.rows, n)
	cols := len(rc.colFreq)
	if int64(rows)*int64(cols) > 1<<28 {
		return 0, 0, fmt.Errorf("%w: extend positions: cos/sin tables %s, %s of %d × %d (limit %d elements)", ErrTableTooLarge, rc.cos.value, rc.sin.value, rows, cols, 1<<28)
	}
	cx, sx := make([]float64, rows*cols), make([]float64, rows*cols)
	for p := 0; p < rows; p++ {
		for j, i := range rc.colFreq {
			a := float64(p) * nf[i]
			cx[p*cols+j], sx[p*cols+j] = factor*math.Cos(a), factor*math.Sin(a)
		}
	}
	shape := slices.Clone(rc.cos.tensor.Shape)
	shape[rc.rowAxis] = rows
	for _, t := range []struct {
		c *constValue
		x []float64
	}{{rc.cos, cx}, {rc.sin, sx}} {
		if err := t.c.replace(floatsOfType(shape, t.x, t.c.tensor.DType)); err != nil {
			return 0, 0, err
		}
		if t.c.init != nil {
			declared := rows
			if rc.rowAxis != 0 {
				declared = -1 // a declared shape of other leading axes is dropped
			}
			setDeclaredRows(g, t.c.value, declared)
		}
	}
	return 0, rows, nil
}
