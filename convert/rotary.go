package convert

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
	"google.golang.org/protobuf/proto"
)

// MetaMaxPositions is the metadata key ExtendPositions writes in a rotary
// model it scales: the longest input, in tokens, the model now reads.
// ContextLimit reads it before the config.json beside the model, which
// still states the length the model was trained for.
const MetaMaxPositions = "linearize.max_positions"

// MetaTrainedPositions is the metadata key ExtendPositions writes beside
// MetaMaxPositions: the length, in tokens, the rotary model was trained
// for. Inputs padded within it keep what they compute under the dynamic
// method, whose scale follows the padded length (embed pads no further).
const MetaTrainedPositions = "linearize.trained_positions"

// The rotary scaling methods of ExtendOptions.Method.
const (
	// RotaryNTK raises the base θ to θ·s^(d/(d−2)) for a scale s (the
	// "NTK-aware" scaling): the fastest frequency is kept, the slowest is
	// divided by s, those between by s^(2i/(d−2)).
	RotaryNTK = "ntk"
	// RotaryLinear divides every frequency by s (position
	// interpolation): positions 0..s·L read as 0..L did.
	RotaryLinear = "linear"
	// RotaryDynamic is the NTK scaling of transformers' "dynamic"
	// rope_type, computed in the graph from each input's length n: the
	// base becomes θ·(s·n/L − (s−1))^(d/(d−2)) once n passes the trained
	// length L, so inputs up to L give the original's outputs bit for
	// bit. Stored cos/sin tables cannot change with n and refuse it.
	RotaryDynamic = "dynamic"
	// RotaryYaRN keeps the frequencies that turn more than 32 times over
	// the trained length, divides those that turn less than once by s,
	// ramps linearly between (by dimension index), and scales cos and sin
	// by 0.1·ln s + 1 (YaRN, as transformers computes it).
	RotaryYaRN = "yarn"
)

// rotaryMethods are the methods a rotary model takes.
var rotaryMethods = []string{RotaryNTK, RotaryDynamic, RotaryLinear, RotaryYaRN}

// RotaryReport says what ExtendPositions did to one set of rotary
// frequencies.
type RotaryReport struct {
	// Value names the constant holding the inverse frequencies θ^(−2i/d),
	// i = 0 … d/2−1, or the cos and sin tables ("cos, sin") that store
	// them.
	Value string `json:"value"`
	// Dims is d, the rotated dimensions of each head (twice the
	// frequencies).
	Dims int `json:"dims"`
	// Base is θ, read from the frequencies.
	Base float64 `json:"base"`
	// Layers are the attention blocks (Block.Layer) whose queries and
	// keys the frequencies rotate; empty when no block was found.
	Layers []int `json:"layers,omitempty"`
	// Converted is the number of linear-attention ops (of a model
	// converted already) whose queries and keys it rotates.
	Converted int `json:"converted,omitempty"`
	// Scaled is false for frequencies that only sliding-window blocks
	// read: a window of ±w never sees a distance past the trained
	// length, so they are kept (their tables, if any, grow).
	Scaled bool `json:"scaled"`
	// CosSin are the Cos and Sin nodes scaled by the YaRN factor.
	CosSin int `json:"cos_sin,omitempty"`
	// Rows are the rows of cos and sin tables: a model that stores them
	// (GTE's exports) gets tables of the new length.
	Rows int `json:"rows,omitempty"`
}

// constValue is a constant of the graph: an initializer or the value of
// a Constant node.
type constValue struct {
	value  string
	init   *onnxpb.TensorProto    // the initializer, or
	attr   *onnxpb.AttributeProto // the Constant node's value attribute
	tensor *onnx.Tensor
}

// newConst returns v as a constant of ix (consts: the Constant nodes'
// values by output), decoded; nil when it is none.
func newConst(ix *onnx.Index, consts map[string]*onnxpb.AttributeProto, v string) *constValue {
	c := &constValue{value: v, init: ix.Initializers[v], attr: consts[v]}
	tp := c.init
	if tp == nil && c.attr != nil {
		tp = c.attr.GetT()
	}
	if tp == nil {
		return nil
	}
	t, err := onnx.DecodeTensor(tp)
	if err != nil {
		return nil
	}
	c.tensor = t
	return c
}

// replace sets the constant's value to t, keeping its name.
func (c *constValue) replace(t *onnx.Tensor) error {
	tp, err := onnx.EncodeTensor(c.value, t)
	if err != nil {
		return fmt.Errorf("convert: extend positions: %s: %w", c.value, err)
	}
	if c.init != nil {
		proto.Reset(c.init)
		proto.Merge(c.init, tp)
	} else {
		tp.Name = nil
		c.attr.T = tp
	}
	c.tensor = t
	return nil
}

// rotaryFreq is one inverse-frequency constant of a rotary embedding.
type rotaryFreq struct {
	*constValue
	freqs []float64
	base  float64
	trig  []*onnxpb.NodeProto // the Cos and Sin nodes it reaches
}

// errNoRotary says the model has neither an absolute position table nor
// rotary frequencies.
var errNoRotary = errors.New("convert: extend positions: no absolute position-embedding table (Gather from an initializer indexed by position ids) and no rotary frequencies (a constant θ^(−2i/d) that Cos and Sin read) found; a model with relative positions (ALiBi) needs no extension")

// findRotary returns the constants of inverse frequencies the graph's Cos
// and Sin nodes are computed from (within a few nodes: the product with
// the positions, a Concat, a Transpose), in graph order, each once.
func findRotary(ix *onnx.Index, consts map[string]*onnxpb.AttributeProto) []*rotaryFreq {
	var found []*rotaryFreq
	byValue := map[string]*rotaryFreq{}
	for _, n := range ix.Graph.Node {
		if (n.GetOpType() != "Cos" && n.GetOpType() != "Sin") || (n.GetDomain() != "" && n.GetDomain() != "ai.onnx") || len(n.Input) != 1 {
			continue
		}
		seen := map[string]bool{}
		var walk func(v string, depth int)
		walk = func(v string, depth int) {
			if depth > 6 || seen[v] {
				return
			}
			seen[v] = true
			if f := byValue[v]; f != nil {
				f.trig = append(f.trig, n)
				return
			}
			if f := rotaryConst(ix, consts, v); f != nil {
				byValue[v] = f
				f.trig = append(f.trig, n)
				found = append(found, f)
				return
			}
			p := ix.Producer[v]
			if p == nil {
				return
			}
			for _, in := range p.Input {
				if in != "" {
					walk(in, depth+1)
				}
			}
		}
		walk(n.Input[0], 0)
	}
	return found
}

// rotaryConst returns v as inverse frequencies when it is a floating
// constant of k ≥ 2 values along one axis forming θ^(−2i/d), d = 2k:
// the first 1, each the one before times a ratio below 1.
func rotaryConst(ix *onnx.Index, consts map[string]*onnxpb.AttributeProto, v string) *rotaryFreq {
	if (ix.Initializers[v] == nil && consts[v] == nil) || len(longAxes(ix, consts, v)) != 1 {
		return nil
	}
	c := newConst(ix, consts, v)
	if c == nil || !onnx.IsFloat(c.tensor.DType) || c.tensor.Len() < 2 || c.tensor.Len() > 1<<16 {
		return nil
	}
	t := c.tensor
	x, err := t.AsFloat64s()
	if err != nil || !(x[0] > 0 && x[0] <= 1+1e-6) {
		return nil
	}
	r := x[1] / x[0]
	if !(r > 0 && r < 1) {
		return nil
	}
	// float16 frequencies carry 3 digits; float32 about 7.
	tol := 1e-4
	if t.DType == onnx.Float16 || t.DType == onnx.BFloat16 {
		tol = 1e-2
	}
	for i := 1; i < len(x); i++ {
		want := x[0] * math.Pow(r, float64(i))
		if math.Abs(x[i]-want) > tol*want {
			return nil
		}
	}
	return &rotaryFreq{constValue: c, freqs: x, base: baseOf(x)}
}

// baseOf is θ of frequencies c·θ^(−2i/d), d = 2·len(f), read from the
// whole run (the last ratio), not the first step alone: f[k−1]/f[0] =
// θ^(−2(k−1)/d). c is 1 but for a model scaled before (GTE's caches).
func baseOf(f []float64) float64 {
	k := len(f)
	return math.Pow(f[k-1]/f[0], -float64(2*k)/(2*float64(k-1)))
}

// longAxes returns the axes of more than one element of the constant v,
// read from its dims before it is decoded.
func longAxes(ix *onnx.Index, consts map[string]*onnxpb.AttributeProto, v string) []int {
	tp := ix.Initializers[v]
	if tp == nil && consts[v] != nil {
		tp = consts[v].GetT()
	}
	var axes []int
	for i, d := range tp.GetDims() {
		if d > 1 {
			axes = append(axes, i)
		}
	}
	return axes
}

// RotaryFrequencies returns the inverse frequencies θ^(−2i/d) a rotary
// model's method scales to s times its trained length, and the factor
// YaRN multiplies cos and sin by (1 for the others). trained is the
// trained length L (YaRN's correction range is computed from it).
func RotaryFrequencies(method string, base float64, dims int, s float64, trained int) ([]float64, float64) {
	f := make([]float64, dims/2)
	for i := range f {
		// θ^(−2i/d), computed as transformers does: 1/θ^(2i/d).
		f[i] = 1 / math.Pow(base, float64(2*i)/float64(dims))
	}
	return scaleFreqs(method, f, base, s, trained)
}

// scaleFreqs scales the frequencies f_i (c·θ^(−2i/d), c = 1 unless the
// model was scaled before) as RotaryFrequencies says.
func scaleFreqs(method string, f []float64, base float64, s float64, trained int) ([]float64, float64) {
	dims := 2 * len(f)
	out := slices.Clone(f)
	switch method {
	case RotaryLinear:
		for i := range out {
			out[i] /= s
		}
	case RotaryNTK:
		// θ' = θ·s^(d/(d−2)): θ'^(−2i/d) = θ^(−2i/d)·s^(−2i/(d−2)).
		for i := range out {
			out[i] *= math.Pow(s, -float64(2*i)/float64(dims-2))
		}
	case RotaryYaRN:
		// The dimension index at which a frequency turns `turns` times
		// over the trained length.
		at := func(turns float64) float64 {
			return float64(dims) * math.Log(float64(trained)/(turns*2*math.Pi)) / (2 * math.Log(base))
		}
		lo, hi := max(math.Floor(at(32)), 0), min(math.Ceil(at(1)), float64(dims-1))
		if lo == hi {
			hi += 0.001
		}
		for i := range out {
			ramp := min(max((float64(i)-lo)/(hi-lo), 0), 1) // 0: keep, 1: interpolate
			out[i] = out[i]/s*ramp + out[i]*(1-ramp)
		}
		return out, 0.1*math.Log(s) + 1
	}
	return out, 1
}

// extendRotary scales the rotary frequencies of out (a copy of the model
// the caller may change) so that it reads opts.MaxPositions tokens.
func extendRotary(out *onnxpb.ModelProto, opts ExtendOptions, method string) (*ExtendReport, error) {
	if !slices.Contains(rotaryMethods, method) {
		return nil, optionError("extend positions", "Method", fmt.Sprintf("%q: the model has rotary positions; want %s", method, strings.Join(rotaryMethods, ", ")))
	}
	g := out.Graph
	ix := onnx.NewIndex(g)
	sets := rotarySets(ix, constantValues(g))
	if len(sets) == 0 {
		return nil, errNoRotary
	}
	for _, p := range out.GetMetadataProps() {
		if p.GetKey() == MetaMaxPositions {
			return nil, fmt.Errorf("convert: extend positions: the rotary frequencies were scaled already (metadata %s = %s): scale the original model", MetaMaxPositions, p.GetValue())
		}
	}
	trained := opts.Trained
	src := "ExtendOptions.Trained"
	if trained == 0 {
		lim, err := ContextLimit(out, "")
		if err != nil {
			return nil, err
		}
		trained, src = lim.Tokens, lim.Source
	}
	if trained <= 0 {
		return nil, errors.New("convert: extend positions: the length the rotary model was trained for is unknown: put its config.json (max_position_embeddings) beside the model, or give the length (ExtendOptions.Trained, extend-positions --trained-length)")
	}
	n := opts.MaxPositions
	if n <= trained {
		return nil, fmt.Errorf("convert: extend positions: --max-positions %d must exceed the %d tokens the model was trained for (%s)", n, trained, src)
	}
	if n > MaxContextTokens {
		return nil, fmt.Errorf("convert: extend positions: --max-positions %d is above %d", n, MaxContextTokens)
	}
	s := float64(n) / float64(trained)
	rep := &ExtendReport{Method: method, OldRows: trained, NewRows: n, Source: "rotary frequencies", Factor: s}
	// The blocks are found once, before the constants change (which
	// changes no block), for the trace and the memory note.
	det, detErr := Detect(out)
	if detErr != nil {
		det = nil
	}
	blocks := rotaryBlocks(det, ix, sets)
	for i, set := range sets {
		r := set.report()
		r.Layers, r.Converted, r.Scaled = blocks[i].layers, blocks[i].converted, !blocks[i].windowOnly
		m := method
		if !r.Scaled {
			m = "" // kept; tables still grow to the new length
		}
		var err error
		if r.CosSin, r.Rows, err = set.scale(g, ix, m, s, trained, n); err != nil {
			return nil, err
		}
		rep.Rotary = append(rep.Rotary, r)
	}
	if !slices.ContainsFunc(rep.Rotary, func(r RotaryReport) bool { return r.Scaled }) {
		return nil, errors.New("convert: extend positions: every rotary embedding feeds sliding-window blocks only, which never see a distance past the trained length: nothing to scale")
	}
	for _, b := range typeBuffers(ix, trained) {
		if err := extendIDBuffer(ix, b, n); err != nil {
			return nil, err
		}
		rep.Notes = append(rep.Notes, fmt.Sprintf("buffer %s (token types or position ids read by position) extended to %d", b, n))
	}
	setMeta(out, MetaMaxPositions, strconv.Itoa(n))
	setMeta(out, MetaTrainedPositions, strconv.Itoa(trained))
	if note := denseMemoryNote(out, det, n); note != "" {
		rep.Notes = append(rep.Notes, note)
	}
	return rep, nil
}

// denseMemoryNote warns when m still computes softmax attention over all
// n tokens: its n×n scores at the new length, as the cost model prices
// the original's peak memory (PeakBytes), and that a conversion reads
// that length in linear memory. It is "" for a model whose every global
// block is converted, or when the cost model cannot read m.
func denseMemoryNote(m *onnxpb.ModelProto, det *Detection, n int) string {
	if det == nil {
		return ""
	}
	dims, _, err := modelDims(m, det)
	if err != nil {
		return ""
	}
	cm := NewCostModel(dims, Sizes{}, DefaultWeights)
	peak := cm.PeakBytes(Original, n)
	if peak < 1<<30 {
		return ""
	}
	return fmt.Sprintf("its softmax attention over %d tokens needs about %.0f GiB at peak (the cost model: convert inspect --cost); `convert window` and `local-pooled` (or any conversion) read that length in linear memory", n, float64(peak)/(1<<30))
}

// rotarySet is one rotary embedding of the graph: frequencies Cos and
// Sin read (rotaryFreq), or tables of cos and sin (rotaryCache).
type rotarySet interface {
	// report describes it (Value, Dims, Base, Rows).
	report() RotaryReport
	// starts are the values the search for the blocks it feeds starts
	// from.
	starts() []string
	// scale rewrites it for method at scale s (trained length L, new
	// length n; method "" keeps the frequencies, and tables only grow)
	// and returns the Cos and Sin outputs it scaled and the rows of its
	// tables (0 for frequencies).
	scale(g *onnxpb.GraphProto, ix *onnx.Index, method string, s float64, trained, n int) (cosSin, rows int, err error)
}

// rotarySets finds the rotary embeddings of the graph: frequencies, then
// cos/sin tables.
func rotarySets(ix *onnx.Index, consts map[string]*onnxpb.AttributeProto) []rotarySet {
	var sets []rotarySet
	for _, f := range findRotary(ix, consts) {
		sets = append(sets, f)
	}
	for _, c := range findRotaryCaches(ix, consts) {
		sets = append(sets, c)
	}
	return sets
}

func (f *rotaryFreq) report() RotaryReport {
	return RotaryReport{Value: f.value, Dims: 2 * len(f.freqs), Base: f.base}
}

func (f *rotaryFreq) starts() []string {
	var out []string
	for _, t := range f.trig {
		out = append(out, t.Output...)
	}
	return out
}

func (f *rotaryFreq) scale(g *onnxpb.GraphProto, ix *onnx.Index, method string, s float64, trained, n int) (int, int, error) {
	switch method {
	case "":
		return 0, 0, nil
	case RotaryDynamic:
		return 0, 0, f.dynamic(g, ix, s, trained)
	}
	nf, factor := scaleFreqs(method, f.freqs, f.base, s, trained)
	if err := f.replace(floatsOfType(slices.Clone(f.tensor.Shape), nf, f.tensor.DType)); err != nil {
		return 0, 0, err
	}
	if factor == 1 {
		return 0, 0, nil
	}
	k, err := scaleTrig(g, ix, f.trig, factor)
	return k, 0, err
}

func toFloat32s(x []float64) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = float32(v)
	}
	return out
}

// freqBlocks is which attention blocks one set of frequencies rotates.
type freqBlocks struct {
	layers     []int // the softmax blocks (Block.Layer)
	converted  int   // the linear-attention ops (a converted model's)
	windowOnly bool  // every such block or op is a sliding window
}

// rotaryBlocks finds, for each set of frequencies, the attention blocks
// whose queries or keys are computed from it: the softmax blocks of det
// (Detect's; nil when it failed) and the linear-attention ops of a model
// converted already (WindowAttention for its sliding windows). When none
// is found, every set is scaled.
func rotaryBlocks(det *Detection, ix *onnx.Index, sets []rotarySet) []freqBlocks {
	out := make([]freqBlocks, len(sets))
	var blocks []*Block
	if det != nil {
		blocks = det.Blocks
	}
	// The search stops at a block's queries, keys and values, and at a
	// linear-attention op: past them it would run through that block's
	// output into every later layer (values are reached where rotated
	// queries and keys are stacked with them, as in Nomic's packed
	// exports).
	stop := map[string]bool{}
	for _, b := range blocks {
		stop[b.Q], stop[b.K], stop[b.V] = true, true, true
	}
	for i, set := range sets {
		reach := map[string]bool{}
		linear := map[*onnxpb.NodeProto]bool{}
		queue := set.starts()
		for len(queue) > 0 && len(reach) < 1<<20 {
			v := queue[0]
			queue = queue[1:]
			if reach[v] {
				continue
			}
			reach[v] = true
			if stop[v] {
				continue
			}
			for _, c := range ix.Consumers[v] {
				if c.GetDomain() == ops.Domain {
					linear[c] = true
					continue
				}
				// A shape read from the rotary tables (Nomic's exports
				// slice the hidden states by it) is no rotation.
				if op := c.GetOpType(); op == "Shape" || op == "Size" {
					continue
				}
				queue = append(queue, c.Output...)
			}
		}
		window := true
		for _, b := range blocks {
			if reach[b.Q] || reach[b.K] {
				out[i].layers = append(out[i].layers, b.Layer)
				window = window && b.Window != nil
			}
		}
		for n := range linear {
			out[i].converted++
			window = window && n.GetOpType() == ops.WindowOp
		}
		out[i].windowOnly = window && (len(out[i].layers) > 0 || out[i].converted > 0)
	}
	return out
}

// scaleTrig multiplies the outputs of the Cos and Sin nodes by factor
// (YaRN's attention factor), in their own type, and returns how many it
// scaled.
func scaleTrig(g *onnxpb.GraphProto, ix *onnx.Index, trig []*onnxpb.NodeProto, factor float64) (int, error) {
	types := newElemTypes(ix)
	done := 0
	for _, n := range trig {
		out := n.Output[0]
		dt := types.of(out)
		if dt == 0 {
			dt = onnx.Float
		}
		scaled := out + "/linearize_yarn_scaled"
		cname := out + "/linearize_yarn_factor"
		ct, err := onnx.EncodeTensor(cname, floatsOfType([]int{}, []float64{factor}, dt))
		if err != nil {
			return done, fmt.Errorf("convert: extend positions: %s: %w", n.GetName(), err)
		}
		g.Initializer = append(g.Initializer, ct)
		for _, c := range ix.Consumers[out] {
			for k, in := range c.Input {
				if in == out {
					c.Input[k] = scaled
				}
			}
		}
		mul := &onnxpb.NodeProto{OpType: proto.String("Mul"), Name: proto.String(out + "/linearize_yarn"), Input: []string{out, cname}, Output: []string{scaled}}
		at := slices.Index(g.Node, n)
		g.Node = slices.Insert(g.Node, at+1, mul)
		done++
	}
	return done, nil
}

// floatsOfType is a tensor of the values x in the floating type dt.
func floatsOfType(shape []int, x []float64, dt onnx.DataType) *onnx.Tensor {
	if dt == onnx.Double {
		return &onnx.Tensor{DType: onnx.Double, Shape: shape, Data: slices.Clone(x)}
	}
	return tableOfType(onnx.NewFloat(shape, toFloat32s(x)), dt)
}

// rotaryString is ExtendReport.String for a rotary model.
func (r *ExtendReport) rotaryString() string {
	s := fmt.Sprintf("rotary positions: %d → %d tokens (×%.4g, method %s); metadata %s = %d, %s = %d", r.OldRows, r.NewRows, r.Factor, r.Method, MetaMaxPositions, r.NewRows, MetaTrainedPositions, r.OldRows)
	for _, f := range r.Rotary {
		what := "scaled"
		if !f.Scaled {
			what = "kept"
		}
		if f.Rows > 0 {
			what += fmt.Sprintf(", cos/sin tables of %d rows", f.Rows)
		}
		if f.CosSin > 0 {
			what += fmt.Sprintf(", %d Cos/Sin outputs scaled by %.4g", f.CosSin, 0.1*math.Log(r.Factor)+1)
		}
		s += fmt.Sprintf("\n  %s: %s: %s", f.Value, f, what)
	}
	for _, n := range r.Notes {
		s += "\nnote: " + n
	}
	return s
}

// String says which frequencies these are and what they rotate:
// "θ 160000 over 64 dims (blocks 0,3,6)", "θ 10000 over 64 dims (blocks
// 1-2,4-5, sliding windows only)", "(2 converted ops)".
func (r RotaryReport) String() string {
	var feeds []string
	if len(r.Layers) > 0 {
		feeds = append(feeds, "blocks "+layerList(r.Layers))
	}
	if r.Converted > 0 {
		feeds = append(feeds, fmt.Sprintf("%d converted op%s", r.Converted, map[bool]string{true: "s"}[r.Converted > 1]))
	}
	if len(feeds) == 0 {
		feeds = append(feeds, "blocks unknown")
	}
	if !r.Scaled {
		feeds = append(feeds, "sliding windows only")
	}
	return fmt.Sprintf("θ %.6g over %d dims (%s)", r.Base, r.Dims, strings.Join(feeds, ", "))
}

// RotaryEmbeddings returns the rotary embeddings of m, as ExtendPositions
// finds them, without changing m: each one's constant, dimensions, base
// θ and the blocks it rotates; Scaled says whether ExtendPositions would
// scale it (false when only sliding-window blocks read it). det is m's
// Detection when the caller has it, nil to have it found. It returns nil
// for a model without rotary positions.
func RotaryEmbeddings(m *onnxpb.ModelProto, det *Detection) []RotaryReport {
	if m == nil || m.Graph == nil {
		return nil
	}
	ix := onnx.NewIndex(m.Graph)
	sets := rotarySets(ix, constantValues(m.Graph))
	if len(sets) == 0 {
		return nil
	}
	if det == nil {
		if d, err := Detect(m); err == nil {
			det = d
		}
	}
	blocks := rotaryBlocks(det, ix, sets)
	var out []RotaryReport
	for i, set := range sets {
		r := set.report()
		r.Layers, r.Converted, r.Scaled = blocks[i].layers, blocks[i].converted, !blocks[i].windowOnly
		out = append(out, r)
	}
	return out
}

// constantValues maps the outputs of g's Constant nodes that hold a
// tensor to their value attribute.
func constantValues(g *onnxpb.GraphProto) map[string]*onnxpb.AttributeProto {
	consts := map[string]*onnxpb.AttributeProto{}
	for _, n := range g.Node {
		if n.GetOpType() == "Constant" && len(n.Output) == 1 {
			for _, a := range n.Attribute {
				if a.GetName() == "value" && a.GetT() != nil {
					consts[n.Output[0]] = a
				}
			}
		}
	}
	return consts
}
