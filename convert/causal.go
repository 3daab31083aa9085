package convert

import (
	"fmt"
	"math"
	"strings"

	"github.com/linearize/linearize/internal/graphfacts"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

// Causal blocks (decoders: GPT-2, CLIP's text encoder, a BERT used as a
// decoder) are found by Detect and refused there, since a bidirectional
// linear attention would let tokens see the future; Detect's Convertible
// keeps meaning "replaceable by a bidirectional op" (Linformer and
// local + pooled have no causal mode and keep refusing them with Detect's
// reason). ToPerformer converts them with Performer's unidirectional mode
// (PerformerAttention causal=1, see ops/performer_causal.go):
//
//   - only blocks refused for their causal mask alone: a causal block with
//     past key/value state, or with a bias that depends on query and key
//     position besides the mask, stays refused with its reason;
//   - the causal op replaces the triangular mask. A padding mask the graph
//     folds into the same value (HF's combined 4-D mask) is read from its
//     last query row, where the triangular part allows every key: that row
//     is exactly the per-key padding bias, passed as key_bias; a separate
//     per-key term is passed too (the two are added);
//   - a model holds one PerformerAttention function body, so one model is
//     converted either causal or bidirectional: when the selected blocks
//     mix both, the bidirectional ones are converted and the causal ones
//     are skipped with a reason naming --layers;
//   - the causal op is plain FAVOR+ with the positive kernel. Centring and
//     FAVOR++ use statistics over every token (a query would see later
//     tokens), and balance, DERF and trig have no causal body yet, so when
//     the options ask for them (the CLI's default is centred FAVOR++) the
//     causal blocks fall back to plain causal FAVOR+ and the report says
//     so in a note: a user converting a decoder gets a working model
//     rather than a refusal over a default they did not choose.
//
// The report marks converted causal blocks (causal=1) and its text says so
// on each block's line.

// Detect's reasons for causal blocks.
const (
	reasonCausalMask     = "causal (triangular) mask: a bidirectional linear attention would let tokens see the future"
	reasonUnidirectional = "unidirectional=1 (causal); a bidirectional linear attention would let tokens see the future"
)

// causalPlan is what a Performer conversion decided about causal blocks.
type causalPlan struct {
	opts PerformerOptions
	// on: the converted blocks are causal (causal nodes, causal body).
	on     bool
	layers map[int]bool   // causal blocks to convert
	skip   map[int]string // causal blocks refused, with why
}

func newCausalPlan(o PerformerOptions) *causalPlan {
	return &causalPlan{opts: o, layers: map[int]bool{}, skip: map[int]string{}}
}

// prepare decides, once the blocks are known, which causal blocks are
// converted.
func (p *causalPlan) prepare(rw *rewriter, det *Detection, want map[int]bool) {
	if p == nil {
		return
	}
	facts := graphfacts.New(rw.ix, rw.opset)
	selected := func(b *Block) bool { return len(want) == 0 || want[b.Layer] }
	bidirectional := 0
	var causal []int
	for _, b := range det.Blocks {
		if !selected(b) {
			continue
		}
		if b.Convertible {
			bidirectional++
			continue
		}
		if why, ok := causalConvertible(b, facts); ok {
			causal = append(causal, b.Layer)
		} else if why != "" {
			p.skip[b.Layer] = why
		}
	}
	if len(causal) == 0 {
		return
	}
	if bidirectional > 0 {
		why := fmt.Sprintf("causal block in a model whose other selected blocks are bidirectional: a model holds one PerformerAttention body, so the bidirectional blocks were converted; convert the causal ones alone with --layers %s (the bidirectional blocks then stay exact)", layerList(causal))
		for _, l := range causal {
			p.skip[l] = why
		}
		return
	}
	p.on = true
	for _, l := range causal {
		p.layers[l] = true
	}
	rw.report.Options.Causal, rw.report.Options.Chunk = true, p.chunk()
	var dropped []string
	o := p.opts
	if o.Kernel != ops.KernelPositive {
		dropped = append(dropped, "kernel "+string(o.Kernel))
	}
	if o.Center == CenterOn {
		dropped = append(dropped, "center")
	}
	if o.FeatureMap != ops.FeaturesFavorPlus {
		dropped = append(dropped, "feature map "+string(o.FeatureMap))
	}
	if o.Balance {
		dropped = append(dropped, "balance")
	}
	note := fmt.Sprintf("%s causal: converted with causal Performer attention (causal=1, prefix sums; chunk %d), positive kernel and plain FAVOR+ features", layersAre(causal), p.chunk())
	if len(dropped) > 0 {
		note += fmt.Sprintf("; options %s not applied to them (no causal mode: centring and FAVOR++ use statistics over all tokens, which would let a query see later ones)", strings.Join(dropped, ", "))
		ro := &rw.report.Options
		ro.Kernel, ro.Center, ro.Balance, ro.FeatureMap = ops.KernelPositive, false, false, ops.FeaturesFavorPlus
	}
	rw.report.Notes = append(rw.report.Notes, note)
}

// layersAre writes "layer 3 is" or "layers 0-5 are".
func layersAre(ls []int) string {
	if len(ls) == 1 {
		return fmt.Sprintf("layer %d is", ls[0])
	}
	return fmt.Sprintf("layers %s are", layerList(ls))
}

func (p *causalPlan) chunk() int {
	if p.opts.Chunk == 0 {
		return ops.DefaultChunk
	}
	return p.opts.Chunk
}

// converts reports whether b is a causal block the plan converts.
func (p *causalPlan) converts(b *Block) bool {
	return p != nil && p.on && p.layers[b.Layer]
}

// reason is why a refused block is skipped.
func (p *causalPlan) reason(b *Block) string {
	if p != nil {
		if why, ok := p.skip[b.Layer]; ok {
			return why
		}
	}
	return b.Reason
}

// attrs are the causal node's attributes.
func (p *causalPlan) attrs(b *Block) ops.PerformerAttrs {
	return ops.PerformerAttrs{Scale: float32(b.Scale), Kernel: ops.KernelPositive, Causal: true, Chunk: p.chunk()}
}

// function is the causal body.
func (p *causalPlan) function(opset int64) (*onnxpb.FunctionProto, error) {
	return ops.PerformerFunctionFor(ops.PerformerVariant{Kernel: ops.KernelPositive, Causal: true, Chunk: p.chunk()}, opset)
}

// causalConvertible reports whether a block Detect refused can be
// converted by the causal Performer; when it cannot and Detect's reason
// does not say why for the causal op, why says it.
func causalConvertible(b *Block, facts *graphfacts.Facts) (why string, ok bool) {
	if !b.Causal || !b.causalOnly {
		return "", false // refused for another reason (past state, …): Detect's reason stands
	}
	if b.Reason != reasonCausalMask && b.Reason != reasonUnidirectional {
		return "", false // a later check refused it
	}
	if b.fused != nil {
		return "", true // the fused node's mask input is per key; fusedBias reads it
	}
	if b.core.folded {
		return "causal mask on heads folded into the batch ([B·H,S,S] scores): its padding part cannot be read per batch for the causal Performer", false
	}
	if b.core.single {
		return "causal single-head attention ([B,S,S] scores, no head axis): the causal Performer's key bias is read from masks over [B,H,S,S] scores", false
	}
	perKey := 0
	for _, bt := range b.core.biases {
		switch bt.kind {
		case BiasCausal:
			if r := maskRank(facts, bt.value); r > 4 {
				return fmt.Sprintf("causal mask %q of rank %d: the causal Performer reads its padding part from the last query row of a mask of rank 2 to 4", bt.value, r), false
			}
		case BiasPerKey:
			perKey++
			if bt.keyRank != 0 {
				return fmt.Sprintf("causal mask plus a rank-%d per-key mask %q: the causal Performer adds per-key terms to the [B,1,1,S] padding row of the causal mask", bt.keyRank, bt.value), false
			}
			if bt.where && bt.maskedFill() > maskThreshold {
				return fmt.Sprintf("Where %s fills masked scores with %g, not a large negative value; it is not an additive mask", nodeName(bt.node), bt.fill), false
			}
		default:
			return "causal mask plus a bias that depends on query and key position; only a per-key bias [B,1,1,S] is exact under linear attention", false
		}
	}
	if perKey > 1 {
		return "more than one per-key bias term", false
	}
	return "", true
}

// maskRank returns v's rank from its known shape or broadcast pattern, 0
// if unknown.
func maskRank(facts *graphfacts.Facts, v string) int {
	for _, d := range [][]int64{facts.Dims(v), facts.Units(v), facts.Broadcast(v)} {
		if d != nil {
			return len(d)
		}
	}
	return 0
}

// causalKeyBias builds the [B,1,1,S] key bias of a causal unfused core:
// the last query row of each causal term (the triangular part allows every
// key there, so what is left is the padding the graph folded in), plus any
// per-key term, each as coreBias builds a per-key term.
func (rw *rewriter) causalKeyBias(b *Block, base string, out *[]*onnxpb.NodeProto) (string, error) {
	var parts []string
	for _, bt := range b.core.biases {
		nt := bt
		switch bt.kind {
		case BiasCausal:
			// The mask broadcasts against the [B,H,S,S] scores, aligned
			// on the right, whatever its rank (2 to 4; the exporters do
			// not always declare it): take the last query row, left-pad
			// its shape with ones to rank 4, and take head 0.
			row := rw.node("Slice", base+"/causal_key_bias", []string{bt.value, rw.intsConst("last", -1), rw.intsConst("end", math.MaxInt64), rw.intsConst("axis_q", -2)})
			shp := rw.node("Shape", base+"/causal_key_bias", []string{row.Output[0]})
			ones := rw.node("Concat", base+"/causal_key_bias", []string{rw.intsConst("ones4", 1, 1, 1, 1), shp.Output[0]}, intAttr("axis", 0))
			shp4 := rw.node("Slice", base+"/causal_key_bias", []string{ones.Output[0], rw.intsConst("minus4", -4), rw.intsConst("end", math.MaxInt64), rw.intsConst("axis0", 0)})
			r4 := rw.node("Reshape", base+"/causal_key_bias", []string{row.Output[0], shp4.Output[0]})
			n := rw.node("Slice", base+"/causal_key_bias", []string{r4.Output[0], rw.intsConst("zero1", 0), rw.intsConst("one1", 1), rw.intsConst("axis1", 1)})
			*out = append(*out, row, shp, ones, shp4, r4, n)
			nt.kind, nt.keyValue, nt.sliceKey, nt.rebuildWhere = BiasPerKey, n.Output[0], false, nil
		case BiasPerKey:
		default:
			return "", fmt.Errorf("bias %q depends on query and key position", bt.value)
		}
		v, err := rw.coreBias(&Block{core: &coreMatch{biases: []biasTerm{nt}}}, base, out)
		if err != nil {
			return "", err
		}
		parts = append(parts, v)
	}
	if len(parts) == 0 {
		return rw.floatConst("zero_key_bias", []int{1, 1, 1, 1}, 0), nil
	}
	v := parts[0]
	for _, p := range parts[1:] {
		n := rw.node("Add", base+"/causal_key_bias", []string{v, p})
		*out = append(*out, n)
		v = n.Output[0]
	}
	return v, nil
}
