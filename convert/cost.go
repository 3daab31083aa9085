package convert

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/linearize/linearize/internal/graphfacts"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// Dims are the dimensions of a BERT-style encoder that decide its cost.
type Dims struct {
	Layers  int `json:"layers"`
	Hidden  int `json:"hidden"` // Heads·HeadDim
	Heads   int `json:"heads"`
	HeadDim int `json:"head_dim"`
	// FFN is the summed width of the FFN products that read the hidden
	// state (the [h, f] weights: 3072 in BERT-base; 2304 in
	// ModernBERT-base, whose one weight packs the GeGLU input and gate),
	// FFNOut the width of the one that writes it back (the [f′, h]
	// weight: 1152 in ModernBERT-base); 0 means FFN, a plain FFN.
	FFN          int `json:"ffn"`
	FFNOut       int `json:"ffn_out,omitempty"`
	MaxPositions int `json:"max_positions"` // rows of the position table, 0 if none
	// WeightBytes is the size of the model's initializers.
	WeightBytes int64 `json:"weight_bytes"`
	// WindowLayers of the Layers are sliding-window blocks of band
	// ±Window (the larger side): every conversion makes them
	// WindowAttention, priced as the Windowed form. DenseLayers are blocks
	// no conversion takes (refused), priced as the original. AlibiLayers
	// are global ALiBi blocks (Block.Alibi, jina-embeddings-v2): a
	// conversion that keeps the bias (Conversion.KeepsAlibi: local-pooled)
	// converts them, priced as its form; the others leave them dense.
	WindowLayers int `json:"window_layers,omitempty"`
	Window       int `json:"window,omitempty"`
	DenseLayers  int `json:"dense_layers,omitempty"`
	AlibiLayers  int `json:"alibi_layers,omitempty"`
}

// Form is an attention form the cost model prices.
type Form string

// The baseline forms; each conversion's form (Performer, Linformer,
// LocalPooled, Hedgehog, Lara, Windowed) is declared with the
// conversion (Conversion.Form).
const (
	// Original is the unfused softmax attention the converters read.
	Original Form = "original"
	// Fused is onnxruntime's fused softmax attention as its transformers
	// optimizer writes it by default (com.microsoft Attention, or
	// MultiHeadAttention with a mask): the original's MACs, the H·n·n
	// scores materialised once and normalised in place.
	Fused Form = "fused"
	// Flash is onnxruntime's MultiHeadAttention without mask or bias,
	// which its CPU kernel runs as flash attention: the original's MACs,
	// scores computed block by block in cache, memory linear in n.
	Flash Form = "flash"
)

// CostModel counts the multiply-accumulates (MACs) of one forward pass of
// batch 1 at sequence length n, per layer:
//
//	projections  4·n·h²                   Q, K, V and output dense
//	FFN          n·h·(f + f′)             dense in (f wide) and out (f′ wide)
//	core, original   2·n²·h               Q·Kᵀ and P·V over all heads
//
// with h = H·d; Fused and Flash have the original's MACs, and each
// conversion's core is priced in its own file, beside its rewrite
// (performerCost in performer.go: 4·n·M·h + 2·n·M·H; linformerCost:
// 4·n·k·h; localPooledCost: n·h·(6b + 4k + 4s); hedgehogCost; laraCost;
// windowCost). Exponentials (H·n² for the softmax, 2·H·n·M for the
// Performer features) are reported (Exps). Work prices a pass with
// Weights: each form's core MACs, the elementwise passes of the attention
// core (Elementwise, see Layer), the exponentials and a fixed cost per
// layer, all in MACs of the projections' GEMMs; with the zero Weights the
// predicted speedup of a form is original MACs / form MACs. LayerNorms,
// biases, activations, rotary embeddings and the head split and merge,
// which every form has, are not counted in the MACs; Weights.Token prices
// them per token and hidden unit. NewCostModel prices every conversion at
// its defaults.
type CostModel struct {
	Dims     Dims
	Features int // Performer M
	K        int // Linformer k
	// Block (b), Segments (k) and Sinks (0, 1 or 2 tokens) price
	// LocalPooledAttention; the form is priced only when Segments > 0.
	Block, Segments, Sinks int
	// Landmarks (C) and Samples (per landmark) price LaraAttention; the
	// form is priced only when Landmarks > 0.
	Landmarks, Samples int
	// MapFeatures (F) prices HedgehogAttention with the window of Block
	// (reach 1); the form is priced only when MapFeatures > 0.
	MapFeatures int
	// Weights price the work beyond MACs (the zero value: MACs only;
	// DefaultWeights: fitted on a measured machine).
	Weights Weights
}

// LayerCost is the cost of one layer at one length.
type LayerCost struct {
	Form        Form  `json:"form"`
	Length      int   `json:"length"`
	Projections int64 `json:"projection_macs"`
	Core        int64 `json:"core_macs"`
	FFN         int64 `json:"ffn_macs"`
	Total       int64 `json:"total_macs"`
	Exps        int64 `json:"exps"`
	// Elementwise counts the elements the attention core's elementwise
	// ops, reductions and copies touch (each op counts its largest
	// operand once; a Softmax op counts three passes: maximum, exp and
	// sum, normalisation). See Layer for the counts per form.
	Elementwise int64 `json:"elementwise"`
	// Largest is the size in bytes of the largest float32 intermediate:
	// the H·n·n scores for the original form, H·n·M features or H·n·k
	// scores for the linear forms, or the n·f FFN activation.
	Largest     int64  `json:"largest_intermediate_bytes"`
	LargestName string `json:"largest_intermediate"`
}

// peakFactor is how many largest-intermediate-sized buffers onnxruntime
// keeps alive at once in an unfused attention block (scores, scaled
// scores, masked scores, probabilities); measured while planning (13.1 GiB
// peak for 3.2 GB of scores at n = 8192).
const peakFactor = 4

// fusedPeakFactor is peakFactor for the Fused form: onnxruntime's fused
// Attention kernel writes the scores into one buffer and normalises them
// in place.
const fusedPeakFactor = 1

// Layer returns the cost of one layer of form f at length n.
//
// Elementwise counts, per layer, the elements of every elementwise op,
// reduction and copy of the attention core over tensors that grow with n
// times a width (n·h, H·n·n, H·n·M, H·n·k, n·k, ...); tensors of n times a
// constant (masks, per-key norms, H·n row maxima) are left out:
//
//	original      5·H·n²   Div (scale), Add (mask), Softmax (3 passes)
//	fused         4·H·n²   mask copied into the scores, Softmax in place
//	flash         2·H·n²   running maximum, exp and sum, in cache
//
// and each conversion's counts, from its op's function body, are in its
// pricing (performerCost, linformerCost, localPooledCost, laraCost, ...).
func (c CostModel) Layer(f Form, n int) LayerCost {
	d := c.Dims
	N, h, H, F := int64(n), int64(d.Hidden), int64(d.Heads), int64(d.FFN)
	lc := LayerCost{Form: f, Length: n, Projections: 4 * N * h * h, FFN: N * h * (F + int64(d.ffnOut()))}
	lc.Largest, lc.LargestName = 4*N*F, "FFN activation n·f"
	switch f {
	case Original:
		lc.Core = 2 * N * N * h
		lc.Exps = H * N * N
		lc.Elementwise = 5 * H * N * N
		lc.keep(4*H*N*N, "scores H·n·n")
	case Fused:
		lc.Core = 2 * N * N * h
		lc.Exps = H * N * N
		lc.Elementwise = 4 * H * N * N
		lc.keep(4*H*N*N, "scores H·n·n")
	case Flash:
		lc.Core = 2 * N * N * h
		lc.Exps = H * N * N
		lc.Elementwise = 2 * H * N * N
	default:
		if cv := conversionOf(f); cv != nil {
			cv.cost.layer(c, n, &lc)
		}
	}
	lc.Total = lc.Projections + lc.Core + lc.FFN
	return lc
}

// FFNText writes the FFN's widths: "3072", or "2304 in, 1152 out" for a
// gated one.
func (d Dims) FFNText() string {
	if d.FFNOut > 0 && d.FFNOut != d.FFN {
		return fmt.Sprintf("%d in, %d out", d.FFN, d.FFNOut)
	}
	return strconv.Itoa(d.FFN)
}

// ffnOut is the width of the FFN's output product: FFNOut, or FFN for a
// plain FFN.
func (d Dims) ffnOut() int {
	if d.FFNOut > 0 {
		return d.FFNOut
	}
	return d.FFN
}

// keep records an intermediate of the given size as the largest when it
// is larger than the largest so far.
func (lc *LayerCost) keep(bytes int64, name string) {
	if bytes > lc.Largest {
		lc.Largest, lc.LargestName = bytes, name
	}
}

// layerMix is how many layers of each priced form a model converted to
// form f has: the baselines price every layer as themselves; a
// conversion prices the window layers as Windowed, the refused ones (and
// the ALiBi ones, unless it keeps ALiBi) as the original and the rest as
// f.
func (c CostModel) layerMix(f Form) []formCount {
	d := c.Dims
	switch f {
	case Original, Fused, Flash:
		return []formCount{{f, d.Layers}}
	case Windowed:
		return []formCount{{Windowed, d.WindowLayers}, {Original, d.Layers - d.WindowLayers}}
	}
	dense := d.DenseLayers
	if conv := conversionOf(f); conv == nil || !conv.KeepsAlibi {
		dense += d.AlibiLayers
	}
	return []formCount{{Windowed, d.WindowLayers}, {Original, dense}, {f, d.Layers - d.WindowLayers - dense}}
}

type formCount struct {
	form  Form
	count int
}

// Total returns the whole-model MACs of form f at length n (all layers,
// each priced as what it becomes: see Dims.WindowLayers).
func (c CostModel) Total(f Form, n int) int64 {
	var t int64
	for _, fc := range c.layerMix(f) {
		if fc.count > 0 {
			t += int64(fc.count) * c.Layer(fc.form, n).Total
		}
	}
	return t
}

// Work is the whole-model cost of form f at length n in MAC-equivalents:
// per layer, the projections' and FFN's MACs, the core's MACs at the
// form's core weight, the elementwise passes, the exponentials, the
// per-token cost of onnxruntime's fused and flash kernels, the shared
// per-token work and the fixed cost at their Weights.
func (c CostModel) Work(f Form, n int) float64 {
	var total float64
	for _, fc := range c.layerMix(f) {
		if fc.count > 0 {
			total += float64(fc.count) * c.layerWork(fc.form, n)
		}
	}
	return total
}

// layerWork is Work for one layer of form f.
func (c CostModel) layerWork(f Form, n int) float64 {
	lc := c.Layer(f, n)
	w := c.Weights
	return float64(lc.Projections+lc.FFN) + w.core(f)*float64(lc.Core) +
		w.Pass*float64(lc.Elementwise) + w.Exp*float64(lc.Exps) +
		(w.Token+w.token(f))*float64(n)*float64(c.Dims.Hidden) + w.Layer
}

// Speedup is the predicted speedup of form f over the original at n.
func (c CostModel) Speedup(f Form, n int) float64 {
	return c.SpeedupOver(Original, f, n)
}

// SpeedupOver is the predicted speedup of form f over the baseline form
// base (Original, Fused or Flash) at n: Work(base) / Work(f).
func (c CostModel) SpeedupOver(base, f Form, n int) float64 {
	return c.Work(base, n) / c.Work(f, n)
}

// PeakBytes estimates the peak memory of a run: weights plus four
// largest intermediates, the buffers onnxruntime keeps alive at once in an
// unfused attention block (scores, scaled scores, masked scores,
// probabilities), or one for the Fused form, whose kernel normalises the
// scores in place.
func (c CostModel) PeakBytes(f Form, n int) int64 {
	var largest int64
	for _, fc := range c.layerMix(f) {
		if fc.count <= 0 {
			continue
		}
		factor := int64(peakFactor)
		if fc.form == Fused {
			factor = fusedPeakFactor
		}
		largest = max(largest, factor*c.Layer(fc.form, n).Largest)
	}
	return c.Dims.WeightBytes + largest
}

// Crossover returns the smallest length n ≥ 1 at which form f costs less
// than the original (CrossoverOver Original). With the zero Weights the
// cores are equal in closed form at n = 2M + M/d (Performer), n = 2k
// (Linformer) and n = 3b + 2k + 2s (local+pooled).
func (c CostModel) Crossover(f Form) int {
	return c.CrossoverOver(Original, f)
}

// CrossoverOver returns the smallest length n ≥ 1 from which form f costs
// less (Work) than the baseline form base, 0 when f is a baseline form
// itself, or −1 when it never does below 2³⁰.
func (c CostModel) CrossoverOver(base, f Form) int {
	if f == Original || f == Fused || f == Flash || f == Windowed && c.Dims.WindowLayers == 0 {
		return 0
	}
	lo, hi := 1, 1
	for c.Work(f, hi) >= c.Work(base, hi) {
		hi *= 2
		if hi > 1<<30 {
			return -1
		}
	}
	for lo < hi {
		mid := (lo + hi) / 2
		if c.Work(f, mid) < c.Work(base, mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// Validate reports dimensions the model cannot price.
func (c CostModel) Validate() error {
	d := c.Dims
	if d.Layers <= 0 || d.Hidden <= 0 || d.Heads <= 0 || d.HeadDim <= 0 || d.FFN <= 0 || d.FFNOut < 0 {
		return fmt.Errorf("convert: cost model: dimensions must be positive: %+v", d)
	}
	if c.Features <= 0 || c.K <= 0 {
		return fmt.Errorf("convert: cost model: features %d and k %d must be positive", c.Features, c.K)
	}
	if c.Landmarks < 0 || c.Samples < 0 {
		return fmt.Errorf("convert: cost model: landmarks %d and samples %d must not be negative", c.Landmarks, c.Samples)
	}
	if c.Block < 0 || c.Segments < 0 || c.Sinks < 0 || c.Sinks > 2 {
		return fmt.Errorf("convert: cost model: block %d, segments %d must not be negative, sinks %d must be 0..2", c.Block, c.Segments, c.Sinks)
	}
	if err := c.Weights.Check(); err != nil {
		return err
	}
	return nil
}

// ModelDims reads a model's dimensions: layers, heads and head size from
// its attention blocks (Detect), the FFN widths from the MatMul weights
// shaped [h, f] and [f′, h] (f, f′ ≠ h; gated when f′ is half of f, or
// when there are two [h, f′] per [f′, h]), the position-table rows from ExtendPositions'
// finder. Notes say what had to be assumed.
func ModelDims(m *onnxpb.ModelProto) (Dims, []string, error) {
	det, err := Detect(m)
	if err != nil {
		return Dims{}, nil, err
	}
	return modelDims(m, det)
}

// modelDims is ModelDims of m, whose attention blocks det are.
func modelDims(m *onnxpb.ModelProto, det *Detection) (Dims, []string, error) {
	var d Dims
	var notes []string
	if len(det.Blocks) == 0 {
		return d, nil, errors.New("convert: cost model: no attention blocks found")
	}
	b := det.Blocks[0]
	d.Layers, d.Heads, d.HeadDim = len(det.Blocks), b.Heads, b.HeadDim
	for _, o := range det.Blocks {
		switch {
		case o.Window != nil:
			d.WindowLayers++
			d.Window = max(d.Window, o.Window.Left, o.Window.Right)
		case o.Alibi != nil:
			d.AlibiLayers++
		case !o.Convertible && !o.Causal:
			d.DenseLayers++
		}
	}
	if d.WindowLayers > 0 || d.DenseLayers > 0 || d.AlibiLayers > 0 {
		notes = append(notes, fmt.Sprintf("%d of %d blocks are sliding-window (band ±%d, priced as WindowAttention in every conversion), %d are global ALiBi (%s), and %d are refused (priced dense)",
			d.WindowLayers, d.Layers, d.Window, d.AlibiLayers, alibiPricing(), d.DenseLayers))
	}
	for _, o := range det.Blocks[1:] {
		if o.Heads != b.Heads || o.HeadDim != b.HeadDim {
			notes = append(notes, fmt.Sprintf("block %d has %d heads of %d, block 0 %d of %d; layer 0's dimensions used", o.Layer, o.Heads, o.HeadDim, b.Heads, b.HeadDim))
			break
		}
	}
	if d.Heads <= 0 || d.HeadDim <= 0 {
		return d, nil, fmt.Errorf("convert: cost model: attention block 0 has unknown heads (%d) or head size (%d)", d.Heads, d.HeadDim)
	}
	d.Hidden = d.Heads * d.HeadDim
	ix := onnx.NewIndex(m.Graph)
	facts := graphfacts.New(ix, onnx.OpsetVersion(m, ""))
	// The FFN's products are MatMuls by weights [h, f] (in) and [f', h]
	// (out), f and f' ≠ h, as written in float, float16 or quantized
	// (weightOf), or computed at run time (LoRA adapters added to a base
	// weight: graphfacts' WeightDims); the widths most weights have are
	// the layers'.
	widths, outs := map[int]int{}, map[int]int{}
	for _, n := range m.Graph.Node {
		if op := n.GetOpType(); op != "MatMul" && op != "MatMulInteger" || len(n.Input) < 2 {
			continue
		}
		var dims []int64
		if tp := weightOf(ix, n.Input[1]); tp != nil {
			dims = tp.Dims
		} else {
			dims = facts.WeightDims(n.Input[1])
		}
		if len(dims) != 2 {
			continue
		}
		r, c := int(dims[0]), int(dims[1])
		switch {
		case r == d.Hidden && c != d.Hidden:
			widths[c]++
		case c == d.Hidden && r != d.Hidden:
			outs[r]++
		}
	}
	best := mostCommon(widths)
	if best == 0 {
		best = 4 * d.Hidden
		notes = append(notes, fmt.Sprintf("no FFN MatMul weight [%d, f] found; assuming f = 4·h = %d", d.Hidden, best))
	}
	d.FFN = best
	// A gated FFN (GeGLU, SwiGLU) has its input and gate products packed
	// in one weight [h, 2f] with Wo [f, h] (ModernBERT, GTE, jina), or in
	// two weights [h, f] per Wo [f, h] (nomic-bert): priced as what its
	// products are, n·h·(2f + f).
	switch out := mostCommon(outs); {
	case out != 0 && best == 2*out && widths[best] >= outs[out]:
		d.FFNOut = out
		notes = append(notes, fmt.Sprintf("the FFN is gated: weights [%d, %d] in, [%d, %d] out, priced n·h·(%d + %d) MACs", d.Hidden, best, out, d.Hidden, best, out))
	case out == best && widths[best] == 2*outs[out]:
		d.FFN, d.FFNOut = 2*best, best
		notes = append(notes, fmt.Sprintf("the FFN is gated: two weights [%d, %d] in per [%d, %d] out, priced n·h·(%d + %d) MACs", d.Hidden, best, out, d.Hidden, 2*best, best))
	}
	if pt, err := findPositionTable(ix); err == nil {
		if tp := ix.Initializers[pt.table]; tp != nil && len(tp.Dims) == 2 {
			d.MaxPositions = int(tp.Dims[0])
		}
	}
	for _, t := range m.Graph.Initializer {
		d.WeightBytes += tensorBytes(t)
	}
	return d, notes, nil
}

// weightOf returns the initializer behind a product's weight operand:
// the initializer itself (float32 or float16 MatMul, MatMulInteger of
// onnxruntime's dynamic quantization), or the one a DequantizeLinear (QDQ)
// or a Cast reads; nil for an activation.
func weightOf(ix *onnx.Index, name string) *onnxpb.TensorProto {
	if tp := ix.Initializers[name]; tp != nil {
		return tp
	}
	if p := ix.Producer[name]; p != nil && len(p.Input) > 0 {
		switch p.GetOpType() {
		case "DequantizeLinear", "Cast":
			return ix.Initializers[p.Input[0]]
		}
	}
	return nil
}

// mostCommon returns the width most weights have (the larger of two
// equally common ones), 0 for none.
func mostCommon(counts map[int]int) int {
	best, count := 0, 0
	for w, k := range counts {
		if k > count || (k == count && w > best) {
			best, count = w, k
		}
	}
	return best
}

func tensorBytes(t *onnxpb.TensorProto) int64 {
	n := int64(1)
	for _, v := range t.Dims {
		n *= v
	}
	es := onnx.ElemSize(onnx.DataType(t.GetDataType()))
	if es <= 0 {
		return int64(len(t.RawData))
	}
	return n * int64(es)
}

// WriteCostTable prints the per-layer and whole-model costs at each length
// and the crossover lengths, as text.
func (c CostModel) WriteCostTable(w io.Writer, lengths []int) error {
	if err := c.Validate(); err != nil {
		return err
	}
	d := c.Dims
	forms := c.Forms()
	var sizes []string
	for _, f := range forms[1:] {
		if cv := conversionOf(f); cv != nil && cv.cost.header != nil {
			sizes = append(sizes, cv.cost.header(c))
		}
	}
	fmt.Fprintf(w, "cost model: %d layers, hidden %d, %d heads × %d, FFN %s; %s; batch 1\n", d.Layers, d.Hidden, d.Heads, d.HeadDim, d.FFNText(), strings.Join(sizes, ", "))
	if c.Weights != (Weights{}) {
		fmt.Fprintf(w, "multiply-accumulates (MACs) per layer and for the model (k/M/G/T = 1e3/1e6/1e9/1e12); speedup and crossover price the work in MAC-equivalents with weights %v\n", c.Weights)
	} else {
		fmt.Fprintln(w, "multiply-accumulates (MACs) per layer and for the model (k/M/G/T = 1e3/1e6/1e9/1e12); exps and elementwise ops not counted")
	}
	if d.WindowLayers > 0 || d.DenseLayers > 0 || d.AlibiLayers > 0 {
		fmt.Fprintf(w, "%d of the %d layers are sliding-window (band ±%d): every conversion makes them WindowAttention (the window form's row); %d are global ALiBi (%s); %d are refused and stay dense; the layer columns price a converted layer, the model column the whole mix\n",
			d.WindowLayers, d.Layers, d.Window, d.AlibiLayers, alibiPricing(), d.DenseLayers)
	}
	fmt.Fprintf(w, "%-8s %-12s %10s %10s %10s %10s %12s %9s  %s\n", "length", "form", "proj", "core", "ffn", "layer", "model", "speedup", "largest intermediate")
	ls := append([]int(nil), lengths...)
	sort.Ints(ls)
	for _, n := range ls {
		for _, f := range forms {
			lc := c.Layer(f, n)
			fmt.Fprintf(w, "%-8d %-12s %10s %10s %10s %10s %12s %8.2fx  %s (%s)\n", n, f,
				giga(lc.Projections), giga(lc.Core), giga(lc.FFN), giga(lc.Total), giga(c.Total(f, n)),
				c.Speedup(f, n), humanBytes(lc.Largest), lc.LargestName)
		}
	}
	what := "less work"
	if c.Weights == (Weights{}) {
		what = "fewer MACs"
	}
	var crossovers []string
	for _, cv := range c.approximate() {
		note := ""
		if cv.cost.note != nil {
			note = cv.cost.note(c)
		}
		if !c.converts(cv.Form()) {
			crossovers = append(crossovers, cv.Name+" none (converts no block)")
			continue
		}
		crossovers = append(crossovers, fmt.Sprintf("%s %s%s", cv.Name, crossoverText(c.Crossover(cv.Form())), note))
	}
	fmt.Fprintf(w, "predicted crossover (first n with %s than the original): %s\n", what, strings.Join(crossovers, ", "))
	if c.Weights != (Weights{}) {
		// The baselines have the original's MACs; only their weights
		// differ, so they are worth a line only when weights count.
		for _, base := range []Form{Fused, Flash} {
			fmt.Fprintf(w, "predicted crossover against onnxruntime's %s attention:", base)
			for i, f := range forms[1:] {
				sep := ","
				if i == 0 {
					sep = ""
				}
				if !c.converts(f) {
					fmt.Fprintf(w, "%s %s none", sep, f)
					continue
				}
				fmt.Fprintf(w, "%s %s %s", sep, f, crossoverText(c.CrossoverOver(base, f)))
			}
			fmt.Fprintln(w)
		}
	}
	return nil
}

// converts reports whether a model converted to form f has any layer
// that is not the original's: its own layers, or window layers.
func (c CostModel) converts(f Form) bool {
	for _, fc := range c.layerMix(f) {
		if fc.form != Original && fc.count > 0 {
			return true
		}
	}
	return false
}

// crossoverText writes a predicted crossover, −1 as "never".
func crossoverText(n int) string {
	if n < 0 {
		return "never"
	}
	return strconv.Itoa(n)
}

// Forms lists the forms the model prices: the original, then every
// conversion it prices (Conversions' order): the window form when the
// model has window layers, Performer and Linformer, local+pooled when
// Segments > 0, hedgehog when MapFeatures > 0 and LARA when Landmarks > 0.
func (c CostModel) Forms() []Form {
	forms := []Form{Original}
	for _, cv := range conversions {
		if cv.cost.priced == nil || cv.cost.priced(c) {
			forms = append(forms, cv.Form())
		}
	}
	return forms
}

// approximate lists the conversions the model prices that approximate
// the attention (all but the exact window form).
func (c CostModel) approximate() []*Conversion {
	var out []*Conversion
	for _, f := range c.Forms()[1:] {
		if cv := conversionOf(f); cv != nil && !cv.Exact {
			out = append(out, cv)
		}
	}
	return out
}

// WriteCoreMACs writes one line: the attention core MACs per token and
// hidden unit of one layer of each approximate conversion priced, at
// length n (`convert inspect --cost` prints it under the table).
func (c CostModel) WriteCoreMACs(w io.Writer, n int) {
	h := int64(c.Dims.Hidden)
	var parts []string
	for _, cv := range c.approximate() {
		parts = append(parts, fmt.Sprintf("%s %d", cv.Name, c.Layer(cv.Form(), n).Core/(int64(n)*h)))
	}
	fmt.Fprintf(w, "attention core MACs per token per hidden unit (per layer): %s (at n = %d)\n", strings.Join(parts, ", "), n)
}

// giga formats a MAC count with an SI suffix.
func giga(v int64) string {
	f := float64(v)
	switch {
	case f >= 1e12:
		return fmt.Sprintf("%.3gT", f/1e12)
	case f >= 1e9:
		return fmt.Sprintf("%.3gG", f/1e9)
	case f >= 1e6:
		return fmt.Sprintf("%.3gM", f/1e6)
	case f >= 1e3:
		return fmt.Sprintf("%.3gk", f/1e3)
	}
	return fmt.Sprintf("%d", v)
}

func humanBytes(b int64) string {
	const k = 1024
	switch {
	case b >= k*k*k:
		return fmt.Sprintf("%.2f GiB", float64(b)/(k*k*k))
	case b >= k*k:
		return fmt.Sprintf("%.1f MiB", float64(b)/(k*k))
	case b >= k:
		return fmt.Sprintf("%.1f KiB", float64(b)/k)
	}
	return fmt.Sprintf("%d B", b)
}

// alibiPricing says how the cost model prices global ALiBi blocks: as
// the conversions that keep the bias make them, dense in the others.
func alibiPricing() string {
	var keep []string
	for _, c := range conversions {
		if c.KeepsAlibi {
			keep = append(keep, c.Name)
		}
	}
	return strings.Join(keep, ", ") + " converts them keeping the bias; the other conversions leave them dense"
}
