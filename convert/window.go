package convert

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/linearize/linearize/kernels"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
	"google.golang.org/protobuf/proto"
)

// Sliding-window (local) attention: ModernBERT's local layers, Mistral-
// style causal windows. Exporters write them as dense n×n attention whose
// mask confines each query i to a band of keys, −L ≤ j − i ≤ R, combined
// with the padding mask. Attention restricted to the band is exact at
// O(n·(L+R)) cost, so such blocks are rewritten into WindowAttention
// (whatever conversion is asked for: the global blocks get the chosen op).
//
// How a band is read (readWindow): the mask term is split into factors —
// through Where(cond, 0, min) or Where(cond, scores, min), And (Or under
// a masked polarity), Not, Expand, boolean Casts, and Add of additive
// terms — and every factor is either per key (the padding mask, kept as
// the op's key bias) or depends on the sequence length only (constants,
// Shape, Range, ...). The length-only factors are then evaluated by the
// standard kernels (package kernels) at two probe lengths (graph inputs
// filled with ones and zeros: length-only values do not read them), and
// the result must be exactly the band −L ≤ j − i ≤ R at both, with the
// same L and R, not wider than the probe. What is read is thus what the graph computes,
// however the exporter built it (Range/Sub/Abs/LessOrEqual, a constant
// band, a causal triangle cut at a distance).

// Window is the band of keys a sliding-window block attends to: query i
// sees key j when −Left ≤ j − i ≤ Right (Right 0: a causal window).
type Window struct {
	Left  int `json:"left"`
	Right int `json:"right"`
}

// String writes the band as ±w, or −L..+R.
func (w Window) String() string {
	if w.Left == w.Right {
		return fmt.Sprintf("±%d", w.Left)
	}
	return fmt.Sprintf("−%d..+%d", w.Left, w.Right)
}

// BiasWindow: the scores are masked to a band of keys around each query
// (and maybe by a per-key padding mask, Block.BiasValue): a
// sliding-window block, converted exactly by WindowAttention.
const BiasWindow BiasKind = "window"

// BiasAlibi: an ALiBi bias −m_h·|i − j| (Block.Alibi) and maybe a per-key
// padding mask, with no window: global ALiBi attention
// (jina-embeddings-v2), which local-pooled converts keeping the bias.
const BiasAlibi BiasKind = "alibi"

// Probe lengths for reading a band, in pairs: the first length at which
// the band is narrower than half the length is verified at the second.
// The short pair reads narrow bands and ALiBi in models whose graph runs
// only up to a short length (a position or ALiBi buffer sliced to S).
var bandProbePairs = [][2]int{{17, 23}, {129, 166}, {513, 550}, {2049, 2086}}

// maxProbeElems bounds any tensor the probe evaluates (a band mask is
// S² booleans; the values it depends on are the model's first layers at
// the probe length).
const maxProbeElems = 1 << 25

// bandFactor is one factor of a mask condition: value v read with
// polarity keep (true: v true keeps the score; false: v true masks it).
type bandFactor struct {
	v    string
	keep bool
}

// bandSplit is a mask term read as band ∧ per-key mask.
type bandSplit struct {
	band []bandFactor // length-only factors
	// additive: length-only values added to the scores (0 in the band,
	// ≤ maskThreshold outside).
	additive []string
	// key is the per-key part as a bias term for coreBias, if any.
	key *biasTerm
	// alibi are the slopes m_h of an additive −m_h·|i − j| found among
	// the length-only values (probeBand), nil if none.
	alibi []float32
}

// readWindow looks for a band among the bias terms of a block Detect
// refused for a per-query-key or causal bias. When every such term is a
// band (with, at most, one per-key factor each), the block becomes a
// window block: b.Window is set, the terms are replaced by their per-key
// parts, and the block's reason says how it converts.
func (mt *matcher) readWindow(c *coreMatch, b *Block) {
	if c.folded || c.single || b.Cross {
		return
	}
	var keys []biasTerm
	var win *Window
	var alibi []float32
	for i := range c.biases {
		bt := &c.biases[i]
		if bt.kind != BiasPerQueryKey && bt.kind != BiasCausal {
			keys = append(keys, *bt)
			continue
		}
		sp, ok := mt.splitBand(bt)
		if !ok {
			return
		}
		w, banded, ok := mt.probeBand(sp)
		if !ok || sp.alibi != nil && alibi != nil && !slices.Equal(sp.alibi, alibi) {
			return
		}
		if sp.alibi != nil {
			alibi = sp.alibi
		}
		switch {
		case !banded:
		case win == nil:
			win = &w
		default:
			// Two bands: their intersection.
			win.Left, win.Right = min(win.Left, w.Left), min(win.Right, w.Right)
		}
		if sp.key != nil {
			keys = append(keys, *sp.key)
		}
	}
	if win == nil && alibi == nil {
		return
	}
	if win == nil {
		// Global ALiBi attention (jina-embeddings-v2).
		c.biases = keys
		b.Alibi = alibi
		b.Bias, b.BiasValue, b.BiasFactor = BiasAlibi, "", 0
		for _, bt := range keys {
			if bt.kind == BiasPerKey && b.BiasValue == "" {
				b.BiasValue, b.BiasFactor = bt.value, bt.factor
			}
		}
		b.Convertible = false
		b.Reason = fmt.Sprintf("ALiBi bias −m_h·|i−j| (slopes %s): local-pooled keeps it (exact in the local blocks, at each segment's mean distance beyond); the other conversions do not", slopesText(alibi))
		c.form = append(c.form, "alibi")
		return
	}
	c.biases = keys
	b.Window = win
	b.Alibi = alibi
	b.Bias, b.BiasValue, b.BiasFactor, b.Causal, b.causalOnly = BiasWindow, "", 0, false, false
	for _, bt := range keys {
		if bt.kind == BiasPerKey && b.BiasValue == "" {
			b.BiasValue, b.BiasFactor = bt.value, bt.factor
		}
	}
	b.Convertible = false
	b.Reason = fmt.Sprintf("sliding-window attention (band %s): exact as WindowAttention, which every conversion writes for it (convert window converts these blocks alone)", win)
	c.form = append(c.form, "window")
}

// splitBand reads bias term bt as length-only band factors and at most one
// per-key factor.
func (mt *matcher) splitBand(bt *biasTerm) (*bandSplit, bool) {
	sp := &bandSplit{}
	if bt.where {
		// Where(cond, scores, fill) keeps the scores where cond holds.
		var keyF []bandFactor
		if !mt.condFactors(bt.value, bt.scoresOnTrue, &sp.band, &keyF, 0) || len(keyF) > 1 {
			return nil, false
		}
		if len(keyF) == 1 {
			if keyF[0].keep != bt.scoresOnTrue {
				return nil, false // the key factor's polarity is flipped: not rebuilt
			}
			k := *bt
			k.kind, k.value, k.keyValue = BiasPerKey, keyF[0].v, keyF[0].v
			sp.key = &k
		}
		return sp, len(sp.band) > 0
	}
	if !mt.additiveBand(bt, bt.value, sp, 0) || sp.key != nil && sp.key.kind != BiasPerKey {
		return nil, false
	}
	return sp, len(sp.band)+len(sp.additive) > 0
}

// additiveBand reads the additive value v (a sum of terms) into sp.
func (mt *matcher) additiveBand(bt *biasTerm, v string, sp *bandSplit, depth int) bool {
	if depth > 8 {
		return false
	}
	if mt.ConstDerived(v) {
		sp.additive = append(sp.additive, v)
		return true
	}
	n := mt.Ix.Producer[v]
	if n == nil || !defaultDomain(n) {
		return false
	}
	switch n.GetOpType() {
	case "Add":
		return mt.additiveBand(bt, inp(n, 0), sp, depth+1) && mt.additiveBand(bt, inp(n, 1), sp, depth+1)
	case "Where":
		// Where(cond, a, b) of scalars: cond keeps where a is the larger.
		a, okA := mt.Scalar(inp(n, 1))
		z, okB := mt.Scalar(inp(n, 2))
		if !okA || !okB {
			break
		}
		var keep bool
		switch {
		case a > maskThreshold && z <= maskThreshold:
			keep = true
		case z > maskThreshold && a <= maskThreshold:
			keep = false
		default:
			return false
		}
		var keyF []bandFactor
		if !mt.condFactors(inp(n, 0), keep, &sp.band, &keyF, 0) || len(keyF) > 1 {
			return false
		}
		if len(keyF) == 1 {
			if sp.key != nil || keyF[0].keep != keep {
				return false
			}
			k := *bt
			k.kind, k.value, k.keyValue, k.rebuildWhere, k.where = BiasPerKey, keyF[0].v, keyF[0].v, n, false
			sp.key = &k
		}
		return true
	}
	if sp.key == nil && mt.isPerKey(v) {
		k := *bt
		k.kind, k.value, k.keyValue = BiasPerKey, v, v
		if !queryFree(mt.Units(v)) {
			k.sliceKey = true
		}
		sp.key = &k
		return true
	}
	return false
}

// condFactors splits the boolean condition v, read with polarity keep,
// into length-only factors (band) and per-key ones (key). Under keep
// polarity a conjunction keeps when every factor does; under the masked
// polarity a disjunction masks when any factor does.
func (mt *matcher) condFactors(v string, keep bool, band, key *[]bandFactor, depth int) bool {
	if depth > 16 {
		return false
	}
	if mt.ConstDerived(v) {
		*band = append(*band, bandFactor{v, keep})
		return true
	}
	n := mt.Ix.Producer[v]
	if n != nil && defaultDomain(n) {
		switch n.GetOpType() {
		case "Expand", "Identity":
			return mt.condFactors(inp(n, 0), keep, band, key, depth+1)
		case "Cast":
			if onnx.AttrInt(n, "to", 0) == int64(onnx.Bool) && mt.boolValued(inp(n, 0)) {
				return mt.condFactors(inp(n, 0), keep, band, key, depth+1)
			}
		case "Not":
			return mt.condFactors(inp(n, 0), !keep, band, key, depth+1)
		case "And", "Or":
			if (n.GetOpType() == "And") == keep {
				return mt.condFactors(inp(n, 0), keep, band, key, depth+1) && mt.condFactors(inp(n, 1), keep, band, key, depth+1)
			}
		}
	}
	if mt.isPerKey(v) {
		*key = append(*key, bandFactor{v, keep})
		return true
	}
	return false
}

// boolValued reports whether v holds booleans (a comparison, a logical op
// or a boolean Cast): casting it to bool changes nothing.
func (mt *matcher) boolValued(v string) bool {
	n := mt.Ix.Producer[v]
	if n == nil {
		return false
	}
	switch n.GetOpType() {
	case "And", "Or", "Not", "Xor", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "IsNaN", "IsInf":
		return true
	case "Cast":
		return onnx.AttrInt(n, "to", 0) == int64(onnx.Bool)
	}
	return false
}

// probeBand evaluates the length-only parts of sp at the probe lengths
// and reads the band they keep (banded false: they mask nothing, which
// is only a reading when they carry ALiBi, sp.alibi) and the ALiBi
// slopes among them.
func (mt *matcher) probeBand(sp *bandSplit) (w Window, banded, ok bool) {
	if s0 := mt.fixedBandLength(sp); s0 > 0 {
		// A band given as a constant [S0,S0]: the model runs at S0 only.
		keep, slopes, ok := mt.bandKeep(sp, s0)
		if !ok {
			return Window{}, false, false
		}
		w, masked, ok := readBand(keep, s0)
		if !ok || !masked && slopes == nil {
			return Window{}, false, false
		}
		sp.alibi = slopes
		return w, masked, true
	}
	for i, pair := range bandProbePairs {
		s := pair[0]
		keep, slopes, ok := mt.bandKeep(sp, s)
		if !ok {
			if i == 0 {
				continue // the graph may not run this short (a fixed minimum)
			}
			return Window{}, false, false
		}
		w, masked, ok := readBand(keep, s)
		if !ok {
			return Window{}, false, false
		}
		wide := !masked || 2*max(w.Left, w.Right) >= s
		if wide && (slopes == nil || i+1 < len(bandProbePairs) && masked) {
			continue // wider than this probe: try a longer one
		}
		s2 := pair[1]
		keep2, slopes2, ok := mt.bandKeep(sp, s2)
		if !ok || !slices.Equal(slopes, slopes2) {
			return Window{}, false, false
		}
		w2, masked2, ok := readBand(keep2, s2)
		if wide {
			// Global ALiBi: nothing masked at either length.
			if masked || masked2 {
				return Window{}, false, false
			}
			sp.alibi = slopes
			return Window{}, false, true
		}
		if !ok || w2 != w {
			return Window{}, false, false
		}
		sp.alibi = slopes
		return w, true, true
	}
	return Window{}, false, false
}

// fixedBandLength returns S0 when a length-only value of sp is a
// constant whose last two dims are [S0,S0] (S0 > 1): a band or ALiBi
// table of a fixed-length export; 0 otherwise.
func (mt *matcher) fixedBandLength(sp *bandSplit) int {
	vals := slices.Clone(sp.additive)
	for _, bf := range sp.band {
		vals = append(vals, bf.v)
	}
	for _, v := range vals {
		d := mt.Dims(v)
		if _, isConst := constant(mt.Ix, v); !isConst && mt.Ix.Initializers[v] == nil {
			continue
		}
		if tp := mt.Ix.Initializers[v]; tp != nil {
			d = tp.Dims
		}
		if r := len(d); r >= 2 && d[r-1] == d[r-2] && d[r-1] > 1 {
			return int(d[r-1])
		}
	}
	return 0
}

// bandKeep evaluates sp's length-only factors at length s and returns the
// [s,s] matrix of the scores they keep, and the ALiBi slopes of an
// additive value that is −m_h·|i − j| where it keeps (nil if none).
func (mt *matcher) bandKeep(sp *bandSplit, s int) ([]bool, []float32, bool) {
	if mt.probe == nil {
		return nil, nil, false
	}
	keep := make([]bool, s*s)
	for i := range keep {
		keep[i] = true
	}
	and := func(v string, f func(x float64) bool) bool {
		t, err := mt.probe.eval(v, s)
		if err != nil {
			return false
		}
		vals, err := t.AsFloat64s()
		if err != nil {
			return false
		}
		r := len(t.Shape)
		for i := 0; i < r-2; i++ {
			if t.Shape[i] != 1 {
				return false // differs by batch or head: not one band
			}
		}
		rows, cols := 1, 1
		if r >= 2 {
			rows = t.Shape[r-2]
		}
		if r >= 1 {
			cols = t.Shape[r-1]
		}
		if rows != 1 && rows != s || cols != 1 && cols != s {
			return false
		}
		for i := 0; i < s; i++ {
			for j := 0; j < s; j++ {
				x := vals[(i%rows)*cols+j%cols]
				if !f(x) {
					keep[i*s+j] = false
				}
			}
		}
		return true
	}
	for _, bf := range sp.band {
		want := bf.keep
		if !and(bf.v, func(x float64) bool { return (x != 0) == want }) {
			return nil, nil, false
		}
	}
	var slopes []float32
	for _, v := range sp.additive {
		if sl, kept, ok := mt.probeAlibi(v, s); ok {
			if slopes != nil {
				return nil, nil, false // two ALiBi terms
			}
			slopes = sl
			for i := range keep {
				keep[i] = keep[i] && kept[i]
			}
			continue
		}
		inside := true
		if !and(v, func(x float64) bool {
			if x > maskThreshold && x != 0 {
				inside = false // a kept score is shifted: not a pure band
			}
			return x > maskThreshold
		}) || !inside {
			return nil, nil, false
		}
	}
	return keep, slopes, true
}

// probeAlibi evaluates v at length s and reads it as an ALiBi bias: per
// head h, −m_h·|i − j| (up to float32 rounding) where it is above
// maskThreshold, the same masked pattern for every head, some slope
// nonzero. It returns the slopes and the kept [s,s] pattern.
func (mt *matcher) probeAlibi(v string, s int) ([]float32, []bool, bool) {
	t, err := mt.probe.eval(v, s)
	if err != nil {
		return nil, nil, false
	}
	vals, err := t.AsFloat64s()
	if err != nil || s < 2 {
		return nil, nil, false
	}
	r := len(t.Shape)
	if r < 2 || t.Shape[r-1] != s || t.Shape[r-2] != s {
		return nil, nil, false
	}
	heads := 1
	if r >= 3 {
		heads = t.Shape[r-3]
	}
	for i := 0; i < r-3; i++ {
		if t.Shape[i] != 1 {
			return nil, nil, false
		}
	}
	slopes := make([]float32, heads)
	keep := make([]bool, s*s)
	nonzero := false
	for h := 0; h < heads; h++ {
		m := vals[h*s*s+1] // i = 0, j = 1: −m
		if !(m > maskThreshold) {
			return nil, nil, false
		}
		m = -m
		if m != 0 {
			nonzero = true
		}
		slopes[h] = float32(m)
		for i := 0; i < s; i++ {
			for j := 0; j < s; j++ {
				x := vals[(h*s+i)*s+j]
				kept := x > maskThreshold
				if h == 0 {
					keep[i*s+j] = kept
				} else if keep[i*s+j] != kept {
					return nil, nil, false
				}
				want := -m * math.Abs(float64(i-j))
				if kept && math.Abs(x-want) > 1e-5*(1+math.Abs(want)) {
					return nil, nil, false
				}
			}
		}
	}
	return slopes, keep, nonzero
}

// slopesText writes ALiBi slopes briefly.
func slopesText(m []float32) string {
	if len(m) <= 3 {
		return fmt.Sprint(m)
	}
	return fmt.Sprintf("[%g %g … %g]", m[0], m[1], m[len(m)-1])
}

// readBand reads keep ([s,s]) as the band −L ≤ j − i ≤ R: masked reports
// whether anything is masked; ok is false when keep is no such band.
func readBand(keep []bool, s int) (w Window, masked, ok bool) {
	w = Window{Left: -1, Right: -1}
	for i := 0; i < s; i++ {
		for j := 0; j < s; j++ {
			if !keep[i*s+j] {
				masked = true
				continue
			}
			if i-j > w.Left {
				w.Left = i - j
			}
			if j-i > w.Right {
				w.Right = j - i
			}
		}
	}
	if w.Left < 0 || w.Right < 0 {
		return w, masked, false
	}
	for i := 0; i < s; i++ {
		for j := 0; j < s; j++ {
			if keep[i*s+j] != (j-i >= -w.Left && j-i <= w.Right) {
				return w, masked, false
			}
		}
	}
	return w, masked, true
}

// prober evaluates values of a graph that depend on the sequence length
// only, at a given length, with the native kernels.
type prober struct {
	m     *onnxpb.ModelProto
	ix    *onnx.Index
	cache map[int]map[string]*onnx.Tensor
	feeds map[int]map[string]*onnx.Tensor
}

func newProber(m *onnxpb.ModelProto, ix *onnx.Index) *prober {
	return &prober{m: m, ix: ix, cache: map[int]map[string]*onnx.Tensor{}, feeds: map[int]map[string]*onnx.Tensor{}}
}

// eval computes value v at sequence length s.
func (p *prober) eval(v string, s int) (t *onnx.Tensor, err error) {
	defer func() {
		if r := recover(); r != nil {
			t, err = nil, fmt.Errorf("convert: probing %q: %v", v, r)
		}
	}()
	if p.cache[s] == nil {
		p.cache[s] = map[string]*onnx.Tensor{}
		f, err := p.inputs(s)
		if err != nil {
			return nil, err
		}
		p.feeds[s] = f
	}
	return p.value(v, s, 0)
}

func (p *prober) value(v string, s, depth int) (*onnx.Tensor, error) {
	vals := p.cache[s]
	if t, ok := vals[v]; ok {
		return t, nil
	}
	if t, ok := p.feeds[s][v]; ok {
		return t, nil
	}
	if tp := p.ix.Initializers[v]; tp != nil {
		n := int64(1)
		for _, d := range tp.Dims {
			n *= d
			if n > maxProbeElems || d < 0 {
				// A table of the model's longest length (an ALiBi or
				// band buffer sliced to S): not decoded here.
				return nil, fmt.Errorf("convert: probing: initializer %q of %v is larger than the probe reads", v, tp.Dims)
			}
		}
	}
	if t, ok := constant(p.ix, v); ok {
		return t, nil
	}
	if depth > 4096 {
		return nil, fmt.Errorf("convert: probing %q: too deep", v)
	}
	n := p.ix.Producer[v]
	if n == nil {
		return nil, fmt.Errorf("convert: probing: %q has no value", v)
	}
	lk := p.lookupTable(n)
	in := make([]*onnx.Tensor, len(n.Input))
	for i, x := range n.Input {
		if x == "" || i == 0 && lk != nil {
			continue
		}
		t, err := p.value(x, s, depth+1)
		if err != nil {
			return nil, err
		}
		in[i] = t
	}
	if lk != nil {
		rows, idx, picked, err := tableRows(lk.table, in[1])
		if err == nil && lk.dq != nil {
			rows, err = p.dequantizeRows(lk.dq, rows, picked, lk.table.Dims[0], s, depth)
		}
		if err != nil {
			return nil, fmt.Errorf("convert: probing %q: %w", n.GetName(), err)
		}
		in[0], in[1] = rows, idx
	}
	k, err := kernels.Lookup(n.GetDomain(), n.GetOpType(), onnx.OpsetVersion(p.m, n.GetDomain()))
	if err != nil {
		return nil, err
	}
	out, err := k(&kernels.Context{Node: n, Opset: onnx.OpsetVersion(p.m, n.GetDomain())}, in)
	if err != nil {
		return nil, err
	}
	for i, o := range n.Output {
		if i < len(out) && o != "" {
			if out[i] != nil && out[i].Len() > maxProbeElems {
				return nil, fmt.Errorf("convert: probing: %q has %d elements", o, out[i].Len())
			}
			vals[o] = out[i]
		}
	}
	t, ok := vals[v]
	if !ok || t == nil {
		return nil, fmt.Errorf("convert: probing: %q not computed", v)
	}
	return t, nil
}

// A lookup is a Gather along axis 0 whose table is larger than the probe
// decodes (an embedding table: ModernBERT-base's 50368 × 768 is past
// maxProbeElems). The probe decodes only the rows the indices select
// (tableRows): TorchScript exports take the sequence length of their band
// and ALiBi masks from the embeddings' shape.
type lookup struct {
	table *onnxpb.TensorProto
	// dq is the DequantizeLinear between table and the Gather in QDQ
	// exports (nil when the Gather reads the initializer itself).
	dq *onnxpb.NodeProto
}

// lookupTable returns the lookup n is, or nil when n is not a Gather
// along axis 0 of a too large initializer, read directly or through a
// DequantizeLinear.
func (p *prober) lookupTable(n *onnxpb.NodeProto) *lookup {
	if n.GetOpType() != "Gather" || !defaultDomain(n) || len(n.Input) != 2 {
		return nil
	}
	lk := &lookup{table: p.ix.Initializers[n.Input[0]]}
	if dq := p.ix.Producer[n.Input[0]]; lk.table == nil && dq != nil && dq.GetOpType() == "DequantizeLinear" &&
		(defaultDomain(dq) || dq.GetDomain() == "com.microsoft") && len(dq.Input) >= 2 {
		lk.table, lk.dq = p.ix.Initializers[dq.Input[0]], dq
	}
	tp := lk.table
	if tp == nil || len(tp.Dims) == 0 {
		return nil
	}
	if axis := onnx.AttrInt(n, "axis", 0); axis != 0 && axis != -int64(len(tp.Dims)) {
		return nil
	}
	elems := int64(1)
	for _, d := range tp.Dims {
		if d < 0 {
			return nil
		}
		elems *= d
		if elems > maxProbeElems {
			return lk
		}
	}
	return nil
}

// dequantizeRows applies dq to the rows picked of its quantized table of
// size rows. A scale (and zero point) per row (axis 0) must have one
// entry per table row, as DequantizeLinear on the whole table requires,
// and is narrowed to the picked rows' entries; scales per block are
// refused.
func (p *prober) dequantizeRows(dq *onnxpb.NodeProto, rows *onnx.Tensor, picked []int, size int64, s, depth int) (*onnx.Tensor, error) {
	in := []*onnx.Tensor{rows}
	for _, x := range dq.Input[1:] {
		var t *onnx.Tensor
		if x != "" {
			var err error
			if t, err = p.value(x, s, depth+1); err != nil {
				return nil, err
			}
		}
		in = append(in, t)
	}
	if onnx.AttrInt(dq, "block_size", 0) != 0 {
		return nil, fmt.Errorf("DequantizeLinear %q: blocked scales", dq.GetName())
	}
	if axis := onnx.AttrInt(dq, "axis", 1); in[1] != nil && in[1].Len() > 1 && (axis == 0 || axis == -int64(len(rows.Shape))) {
		// Gather the picked rows' scales and zero points, as the rows.
		gather, err := kernels.Lookup("", "Gather", 13)
		if err != nil {
			return nil, err
		}
		at := make([]int64, len(picked))
		for i, r := range picked {
			at[i] = int64(r)
		}
		ctx := &kernels.Context{Node: &onnxpb.NodeProto{OpType: proto.String("Gather"), Name: proto.String(dq.GetName() + "/rows")}, Opset: 13}
		for i := 1; i < len(in); i++ {
			if in[i] == nil {
				continue
			}
			if len(in[i].Shape) != 1 || int64(in[i].Shape[0]) != size {
				return nil, fmt.Errorf("DequantizeLinear %q: per-row input %d of shape %v for a table of %d rows", dq.GetName(), i, in[i].Shape, size)
			}
			out, err := gather(ctx, []*onnx.Tensor{in[i], onnx.NewInt64([]int{len(at)}, at)})
			if err != nil {
				return nil, fmt.Errorf("DequantizeLinear %q: %w", dq.GetName(), err)
			}
			in[i] = out[0]
		}
	}
	opset := onnx.OpsetVersion(p.m, dq.GetDomain())
	k, err := kernels.Lookup(dq.GetDomain(), dq.GetOpType(), opset)
	if err != nil {
		return nil, err
	}
	out, err := k(&kernels.Context{Node: dq, Opset: opset}, in)
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// tableRows returns the rows of table that the indices idx select, and
// idx renumbered to index them: Gather of the two is Gather of the whole
// table and idx. picked lists the rows' numbers in the table.
func tableRows(table *onnxpb.TensorProto, idx *onnx.Tensor) (rows, renumbered *onnx.Tensor, picked []int, err error) {
	if idx == nil {
		return nil, nil, nil, fmt.Errorf("no indices")
	}
	vals, err := idx.AsInt64s()
	if err != nil {
		return nil, nil, nil, err
	}
	size := table.Dims[0]
	at := map[int64]int64{}
	renum := make([]int64, len(vals)) // vals may be idx's own data
	for i, r := range vals {
		if r < 0 {
			r += size
		}
		if r < 0 || r >= size {
			return nil, nil, nil, fmt.Errorf("index %d is outside [-%d, %d)", vals[i], size, size)
		}
		j, ok := at[r]
		if !ok {
			j = int64(len(picked))
			at[r] = j
			picked = append(picked, int(r))
		}
		renum[i] = j
	}
	rows, err = onnx.DecodeRows(table, picked)
	if err != nil {
		return nil, nil, nil, err
	}
	return rows, onnx.NewInt64(append([]int(nil), idx.Shape...), renum), picked, nil
}

// inputs fills the graph inputs for length s: the first symbolic dim of
// an input of rank ≥ 2 is the batch (1), the other symbolic dims s; masks
// are ones, everything else zeros.
func (p *prober) inputs(s int) (map[string]*onnx.Tensor, error) {
	feeds := map[string]*onnx.Tensor{}
	for _, vi := range p.ix.Graph.GetInput() {
		name := vi.GetName()
		if !p.ix.GraphInputs[name] {
			continue
		}
		tt := vi.GetType().GetTensorType()
		if tt == nil || tt.GetShape() == nil {
			return nil, fmt.Errorf("convert: probing: input %q has no shape", name)
		}
		dims := tt.GetShape().GetDim()
		shape := make([]int, len(dims))
		n := 1
		for i, d := range dims {
			switch {
			case d.GetDimParam() == "" && d.GetDimValue() > 0:
				shape[i] = int(d.GetDimValue())
			case i == 0 && len(dims) >= 2:
				shape[i] = 1
			default:
				shape[i] = s
			}
			n *= shape[i]
		}
		if n > maxProbeElems {
			return nil, fmt.Errorf("convert: probing: input %q of %d elements", name, n)
		}
		dt := onnx.DataType(tt.GetElemType())
		one := strings.Contains(strings.ToLower(name), "mask")
		t, err := filledTensor(dt, shape, n, one)
		if err != nil {
			return nil, fmt.Errorf("convert: probing: input %q: %w", name, err)
		}
		feeds[name] = t
	}
	return feeds, nil
}

func filledTensor(dt onnx.DataType, shape []int, n int, one bool) (*onnx.Tensor, error) {
	switch dt {
	case onnx.Int64:
		return onnx.NewInt64(shape, filled(n, one, int64(1))), nil
	case onnx.Int32:
		return &onnx.Tensor{DType: dt, Shape: shape, Data: filled(n, one, int32(1))}, nil
	case onnx.Float:
		return onnx.NewFloat(shape, filled(n, one, float32(1))), nil
	case onnx.Bool:
		return &onnx.Tensor{DType: dt, Shape: shape, Data: filled(n, one, true)}, nil
	}
	return nil, fmt.Errorf("element type %s", onnx.TypeName(dt))
}

// filled returns n values, each v when one is set, else the zero value.
func filled[T any](n int, one bool, v T) []T {
	d := make([]T, n)
	if one {
		for i := range d {
			d[i] = v
		}
	}
	return d
}

// windowPlan is what a conversion does with sliding-window blocks: each
// becomes a WindowAttention node (exact). A model holds one
// WindowAttention function body, built for one band and one precision:
// the first window block converted sets them, and a block with another
// band or precision is skipped with the reason.
type windowPlan struct {
	used   bool
	band   Window
	alibi  []float32
	fnType onnx.DataType
}

// skipReason says why window block b is not converted ("" when it is).
func (p *windowPlan) skipReason(rw *rewriter, b *Block) string {
	if b.core == nil {
		return "sliding-window block in a fused node: not converted"
	}
	dt, why := rw.blockType(b)
	if why != "" {
		return why
	}
	if p.used && (*b.Window != p.band || dt != p.fnType || !slices.Equal(b.Alibi, p.alibi)) {
		return fmt.Sprintf("window %s in %s (ALiBi %v) while the window blocks converted before it have %s in %s (ALiBi %v): a model holds one WindowAttention body", b.Window, onnx.TypeName(dt), b.Alibi != nil, p.band, onnx.TypeName(p.fnType), p.alibi != nil)
	}
	return ""
}

// globalReason is why convert window leaves block b as it is.
func (p *windowPlan) globalReason(b *Block) string {
	if !b.Convertible {
		return b.Reason
	}
	return "global attention: convert window converts the sliding-window blocks alone (local-pooled, hedgehog, performer, linformer and lara convert both)"
}

// function is the WindowAttention body of the plan's band.
func (p *windowPlan) function(opset int64) (*onnxpb.FunctionProto, error) {
	return ops.WindowFunction(opset, p.band.attrs(0, p.alibi))
}

func (w Window) attrs(scale float64, alibi []float32) ops.WindowAttrs {
	return ops.WindowAttrs{Scale: float32(scale), Left: w.Left, Right: w.Right, Alibi: alibi}
}

// rewriteWindow replaces window block b by a WindowAttention node.
func (rw *rewriter) rewriteWindow(b *Block) (*onnxpb.NodeProto, error) {
	dt, _ := rw.blockType(b)
	saved := rw.dtype
	rw.dtype = dt
	defer func() { rw.dtype = saved }()
	node, err := rw.rewriteCore(b, ops.WindowOp, func(b *Block, q, k, v, bias string) (*onnxpb.NodeProto, error) {
		return ops.NewWindowNode(rw.names.Name(fmt.Sprintf("linearize/layer%d/WindowAttention", b.Layer)),
			[]string{q, k, v, bias}, rw.names.Name(fmt.Sprintf("linearize/layer%d/attn", b.Layer)), b.Window.attrs(b.Scale, b.Alibi)), nil
	})
	if err != nil {
		return nil, err
	}
	if !rw.win.used {
		rw.win.used, rw.win.band, rw.win.fnType, rw.win.alibi = true, *b.Window, dt, b.Alibi
		rw.report.Window = b.Window
	}
	return node, nil
}

// mainConverted reports whether any block was converted into the
// conversion's own op (not WindowAttention).
func (rw *rewriter) mainConverted() bool {
	for _, br := range rw.report.Converted {
		if br.Op == "" {
			return true
		}
	}
	return false
}

// WindowOptions configures ToWindow.
type WindowOptions struct {
	// Layers selects blocks by their Detect layer index; nil means all.
	Layers []int
	// Positions, when MaxPositions > 0, first grows the absolute position
	// table (ExtendPositions).
	Positions ExtendOptions
}

// ToWindow returns a copy of m in which every sliding-window attention
// block (Block.Window: a mask that confines each query to a band of keys
// around it) is a WindowAttention node, and nothing else changes. The
// converted model computes the original's output to float rounding, at a
// cost linear in the sequence length for those blocks. The global blocks
// are left as they are; every other conversion (ToLocalPooled,
// ToPerformer, ...) converts the window blocks the same way and the
// global ones with its own op. m is not modified.
func ToWindow(m *onnxpb.ModelProto, o WindowOptions) (*onnxpb.ModelProto, *Report, error) {
	rw := &rewriter{op: ops.WindowOp, layers: o.Layers, positions: o.Positions}
	return rw.run(m)
}

// Windowed is the cost-model form of ToWindow: WindowAttention, exact
// attention to the band of each query, computed over blocks of b =
// Dims.Window (the 3b keys of the block and both neighbours, masked to
// the band).
const Windowed Form = "window"

// windowConversion is ToWindow in the registry (registry.go). Every
// other conversion converts the window blocks the same way, which the
// cost model prices (Dims.WindowLayers).
var windowConversion = Conversion{
	Name:  string(Windowed),
	Op:    ops.WindowOp,
	Exact: true,
	bench: func(m *onnxpb.ModelProto, _ Sizes, _ uint64) (*onnxpb.ModelProto, *Report, error) {
		return ToWindow(m, WindowOptions{})
	},
	describe: func(ReportOptions) string { return "window blocks only" },
	cost: conversionCost{
		layer:  windowCost,
		priced: func(c CostModel) bool { return c.Dims.WindowLayers > 0 },
	},
}

// windowCost prices WindowAttention with blocks of b = Dims.Window:
// core n·h·6b, elementwise 26·n·h + 5·H·n·3b (local+pooled's local part).
func windowCost(c CostModel, n int, lc *LayerCost) {
	N, h, H := int64(n), int64(c.Dims.Hidden), int64(c.Dims.Heads)
	b := int64(max(c.Dims.Window, 1))
	lc.Core = N * h * 6 * b
	lc.Exps = H * N * 3 * b
	lc.Elementwise = 26*N*h + 5*H*N*3*b
	lc.keep(4*H*N*3*b, "window scores H·n·3b")
}
