package convert

import (
	"fmt"
	"math"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// maskForm is how a fused node receives its padding mask.
type maskForm int

const (
	maskNone    maskForm = iota
	maskLengths          // [B] valid lengths (right padding)
	maskRaw2D            // [B,S] 1 = keep, 0 = pad
)

// fusedMatch is a matched com.microsoft Attention, QAttention or
// MultiHeadAttention.
type fusedMatch struct {
	node       *onnxpb.NodeProto
	mha        bool
	sig        fusedSignature
	input      string // the float hidden states the packed projection reads
	qSize      int64  // Q (and K) projection width
	vSize      int64  // V projection width
	mask       maskForm
	maskValue  string
	maskFilter float64
}

func (mt *matcher) fusedCommon(n *onnxpb.NodeProto, form string) *Block {
	heads := onnx.AttrInt(n, "num_heads", 0)
	b := &Block{Form: form, Nodes: []string{nodeName(n)}, Heads: int(heads), Bias: BiasNone, Convertible: true, Output: n.Output[0]}
	if heads <= 0 {
		b.Convertible = false
		b.Reason = fmt.Sprintf("%s has no num_heads", nodeName(n))
	}
	if onnx.AttrInt(n, "unidirectional", 0) == 1 {
		// Refused at the end of the match (fusedCausal), so that the
		// causal Performer can tell a block refused only for it.
		b.Bias, b.Causal = BiasCausal, true
	}
	return b
}

func optInput(n *onnxpb.NodeProto, i int) string {
	if i < len(n.Input) {
		return inp(n, i)
	}
	return ""
}

// fusedSignature says where a packed fused attention node takes its
// inputs (−1: it has no such input).
type fusedSignature struct {
	weights, bias, mask, past, attentionBias int
	// The quantization of an integer projection: the input's scale and
	// zero point, the weights'.
	inputScale, inputZero, weightScale, weightZero int
}

// fusedSignatures are the packed fused attention ops of com.microsoft:
// Attention(input, weights, bias, mask_index, past, attention_bias,
// past_sequence_length), and QAttention(input, weights, bias,
// input_scale, weight_scale, mask_index, input_zero_point,
// weight_zero_point, past), quantize_dynamic's int8 form of it, whose
// input is the hidden states quantized by DynamicQuantizeLinear.
var fusedSignatures = map[string]fusedSignature{
	"Attention":  {weights: 1, bias: 2, mask: 3, past: 4, attentionBias: 5, inputScale: -1, inputZero: -1, weightScale: -1, weightZero: -1},
	"QAttention": {weights: 1, bias: 2, mask: 5, past: 8, attentionBias: -1, inputScale: 3, inputZero: 6, weightScale: 4, weightZero: 7},
}

// input returns input i of n, "" when i < 0 or n has fewer inputs.
func (sig fusedSignature) input(n *onnxpb.NodeProto, i int) string {
	if i < 0 {
		return ""
	}
	return optInput(n, i)
}

// matchFusedAttention reads a packed fused attention node (Attention or
// QAttention, fusedSignatures).
func (mt *matcher) matchFusedAttention(n *onnxpb.NodeProto) *Block {
	ix := mt.Ix
	sig := fusedSignatures[n.GetOpType()]
	b := mt.fusedCommon(n, "com.microsoft:"+n.GetOpType())
	fm := &fusedMatch{node: n, sig: sig, input: mt.FloatSource(optInput(n, 0)), maskFilter: float64(onnx.AttrFloat(n, "mask_filter_value", -10000))}
	b.fused = fm
	b.Q, b.K, b.V = fm.input, fm.input, fm.input // QAttention's input dequantized: what the rewrite reads
	w, ok := ix.Initializers[sig.input(n, sig.weights)]
	if !ok || len(w.Dims) != 2 {
		b.Convertible, b.Reason = false, "packed QKV weights are not a constant [in, 3·hidden] matrix"
		return b
	}
	sizes := onnx.AttrInts(n, "qkv_hidden_sizes")
	if len(sizes) == 3 {
		if sizes[0] != sizes[1] {
			b.Convertible, b.Reason = false, "Q and K projection widths differ"
		}
		fm.qSize, fm.vSize = sizes[0], sizes[2]
		b.Form += "(qkv_hidden_sizes)"
	} else {
		if w.Dims[1]%3 != 0 {
			b.Convertible, b.Reason = false, "packed QKV width is not divisible by 3"
			return b
		}
		fm.qSize, fm.vSize = w.Dims[1]/3, w.Dims[1]/3
	}
	if fm.qSize+fm.qSize+fm.vSize != w.Dims[1] {
		b.Convertible, b.Reason = false, fmt.Sprintf("qkv_hidden_sizes do not sum to the weight width %d", w.Dims[1])
		return b
	}
	if b.Heads > 0 {
		if fm.qSize%int64(b.Heads) != 0 || fm.vSize%int64(b.Heads) != 0 {
			b.Convertible, b.Reason = false, "projection widths are not divisible by num_heads"
			return b
		}
		b.HeadDim = int(fm.qSize) / b.Heads
	}
	fusedScale(b, n)
	if sig.input(n, sig.past) != "" || (len(n.Output) > 1 && n.Output[1] != "") {
		b.Convertible, b.Reason = false, "uses past/present key-value state"
	}
	if sig.input(n, sig.attentionBias) != "" {
		b.Bias = BiasPerQueryKey
		b.Convertible, b.Reason = false, "attention_bias (per query-key) input is present"
	}
	if onnx.AttrInt(n, "do_rotary", 0) != 0 {
		b.Convertible, b.Reason = false, "rotary embedding inside the fused node"
	}
	if sig.weightScale >= 0 && !mt.ConstDerived(sig.input(n, sig.weightScale)) {
		b.Convertible, b.Reason = false, fmt.Sprintf("%s %s: the weight scale is not a constant", n.GetOpType(), nodeName(n))
	}
	mt.fusedMask(b, fm, sig.input(n, sig.mask))
	fusedCausal(b)
	return b
}

// quantized reports whether the fused node's packed projection is
// integer (QAttention).
func (fm *fusedMatch) quantized() bool { return fm.sig.weightScale >= 0 }

// quantizedProjections unpacks QAttention's packed integer projection as
// it computes it: for each of Q, K and V, MatMulInteger of its quantized
// input (with the input's zero point) and that part's integer weight
// columns (and zero points), made float by Cast and the product of the
// input and weight scales. The bias is added by the caller, as for
// Attention.
func (rw *rewriter) quantizedProjections(fm *fusedMatch, base string, out *[]*onnxpb.NodeProto) (q, k, v string, err error) {
	n, sig := fm.node, fm.sig
	wt, ok := constant(rw.ix, sig.input(n, sig.weights))
	if !ok || len(wt.Shape) != 2 || (wt.DType != onnx.Int8 && wt.DType != onnx.Uint8) {
		return "", "", "", fmt.Errorf("weights %q of %s are not an 8-bit integer constant matrix", sig.input(n, sig.weights), nodeName(n))
	}
	cols := wt.Shape[1]
	ws, err := rw.perColumnSlicer(sig.input(n, sig.weightScale), cols)
	if err != nil {
		return "", "", "", fmt.Errorf("weight scale of %s: %w", nodeName(n), err)
	}
	wz, err := rw.perColumnSlicer(sig.input(n, sig.weightZero), cols)
	if err != nil {
		return "", "", "", fmt.Errorf("weight zero point of %s: %w", nodeName(n), err)
	}
	add := func(nd *onnxpb.NodeProto) string { *out = append(*out, nd); return nd.Output[0] }
	part := func(name string, from, to int64) string {
		wn, _ := rw.addInitNoCount(base+"/W"+name+"_quantized", sliceCols(wt, wt.Shape[0], int(from), int(to)))
		mm := add(rw.node("MatMulInteger", base+"/"+name, []string{optInput(n, 0), wn, sig.input(n, sig.inputZero), wz(base+"/W"+name+"_zero_point", from, to)}))
		f := add(rw.node("Cast", base+"/"+name, []string{mm}, castTo(onnx.Float)))
		scale := add(rw.node("Mul", base+"/"+name, []string{sig.input(n, sig.inputScale), ws(base+"/W"+name+"_scale", from, to)}))
		return add(rw.node("Mul", base+"/"+name, []string{f, scale}))
	}
	return part("q", 0, fm.qSize), part("k", fm.qSize, 2*fm.qSize), part("v", 2*fm.qSize, 2*fm.qSize+fm.vSize), nil
}

// perColumnSlicer returns a function giving a per-tensor quantization
// parameter v itself and a per-column one's columns from..to−1 as a new
// initializer ("" stays "").
func (rw *rewriter) perColumnSlicer(v string, cols int) (func(name string, from, to int64) string, error) {
	if v == "" {
		return func(string, int64, int64) string { return "" }, nil
	}
	t, ok := constant(rw.ix, v)
	if !ok {
		return nil, fmt.Errorf("%q is not a constant", v)
	}
	switch {
	case t.Len() == 1:
		return func(string, int64, int64) string { return v }, nil
	case t.Len() != cols || len(t.Shape) != 1:
		return nil, fmt.Errorf("%q has shape %v for %d columns", v, t.Shape, cols)
	case t.DType != onnx.Float && t.DType != onnx.Int8 && t.DType != onnx.Uint8:
		return nil, fmt.Errorf("%q is %s, not a float32 scale or an 8-bit zero point", v, onnx.TypeName(t.DType))
	}
	return func(name string, from, to int64) string {
		name, _ = rw.addInitNoCount(name, sliceCols(t, 1, int(from), int(to)))
		return name
	}, nil
}

// fusedCausal refuses a causal (unidirectional=1) fused block: with the
// causal reason when nothing else refused it, else with the other reason.
func fusedCausal(b *Block) {
	if b.Causal {
		b.causalOnly = b.Convertible
		b.Convertible = false
		if b.causalOnly {
			b.Reason = reasonUnidirectional
		}
	}
}

// fusedMask classifies the mask input of a fused node.
func (mt *matcher) fusedMask(b *Block, fm *fusedMatch, mask string) {
	if mask == "" {
		return
	}
	fm.maskValue = mask
	b.BiasValue = mask
	rank := mt.rank(mask)
	if p := mt.Ix.Producer[mask]; p != nil && p.GetDomain() == "com.microsoft" && p.GetOpType() == "EmbedLayerNormalization" && len(p.Output) > 1 && p.Output[1] == mask {
		if optInput(p, 7) == "" {
			// No mask reaches EmbedLayerNormalization: its mask_index
			// output is a placeholder and the fused attention is unmasked.
			fm.maskValue, b.BiasValue = "", ""
			b.Form += "(no mask: optimizer dropped it)"
			return
		}
		rank = 1
	}
	switch rank {
	case 1:
		// [B] lengths, or [2B] start/end: tell by a ReduceSum producer or a
		// declared dim equal to the batch.
		fm.mask = maskLengths
		if b.Bias == BiasNone {
			b.Bias = BiasPerKey
		}
		// A 1-D mask_index is either [B] valid lengths or [2B] end/start
		// positions; only a ReduceSum of a [B,S] mask (or the mask_index
		// EmbedLayerNormalization computes the same way) is known to be
		// lengths.
		src := mask
		p := mt.Ix.Producer[src]
		for p != nil && p.GetOpType() == "Cast" {
			src = inp(p, 0)
			p = mt.Ix.Producer[src]
		}
		switch {
		case p != nil && p.GetOpType() == "ReduceSum":
			b.Form += "(mask lengths)"
		case p != nil && p.GetDomain() == "com.microsoft" && p.GetOpType() == "EmbedLayerNormalization":
			b.Form += "(mask lengths from EmbedLayerNormalization)"
		default:
			b.Convertible = false
			b.Reason = fmt.Sprintf("1-D mask_index %q of unknown format ([B] lengths or [2B] end/start positions)", mask)
		}
	case 2:
		fm.mask = maskRaw2D
		if b.Bias == BiasNone {
			b.Bias = BiasPerKey
		}
	default:
		if b.Bias == BiasNone {
			b.Bias = BiasPerQueryKey
		}
		b.Convertible = false
		if rank < 0 {
			b.Reason = fmt.Sprintf("mask_index %q has unknown rank", mask)
		} else {
			b.Reason = fmt.Sprintf("mask_index %q has rank %d (only [B] lengths and [B,S] masks are per-key)", mask, rank)
		}
	}
}

// rank returns v's rank from declared shapes or simple producers, −1 if
// unknown.
func (mt *matcher) rank(v string) int {
	ix := mt.Ix
	for i := 0; i < 6; i++ {
		if vi, ok := ix.ValueInfo[v]; ok {
			if _, sh, ok := onnx.TensorType(vi); ok && sh != nil {
				return len(sh)
			}
		}
		n := ix.Producer[v]
		if n == nil {
			return -1
		}
		switch n.GetOpType() {
		case "Cast", "Identity":
			v = inp(n, 0)
			continue
		case "ReduceSum":
			r := mt.rank(inp(n, 0))
			if r < 0 {
				return -1
			}
			axes := onnx.AttrInts(n, "axes")
			if axes == nil && len(n.Input) > 1 {
				axes, _ = intsOf(ix, inp(n, 1))
			}
			if onnx.AttrInt(n, "keepdims", 1) == 1 {
				return r
			}
			if axes == nil {
				return 0
			}
			return r - len(axes)
		}
		return -1
	}
	return -1
}

// matchFusedMHA reads com.microsoft:MultiHeadAttention(query, key, value,
// bias, key_padding_mask, attention_bias, past_key, past_value) in its
// unpacked 3-D form.
func (mt *matcher) matchFusedMHA(n *onnxpb.NodeProto) *Block {
	ix := mt.Ix
	b := mt.fusedCommon(n, "com.microsoft:MultiHeadAttention")
	fm := &fusedMatch{node: n, mha: true, maskFilter: float64(onnx.AttrFloat(n, "mask_filter_value", -10000))}
	b.fused = fm
	b.Q, b.K, b.V = optInput(n, 0), optInput(n, 1), optInput(n, 2)
	if b.K == "" || b.V == "" {
		b.Convertible, b.Reason = false, "packed QKV or packed KV input form is not supported"
		return b
	}
	if mt.rank(b.Q) != 3 && mt.rank(b.Q) != -1 || mt.rank(b.K) == 4 {
		b.Convertible, b.Reason = false, "query/key are not [B,S,hidden]"
	}
	qw := mt.ProjWidth(b.Q)
	vw := mt.ProjWidth(b.V)
	if bias, ok := ix.Initializers[optInput(n, 3)]; ok && len(bias.Dims) == 1 && qw > 0 && vw > 0 && 2*qw+vw != bias.Dims[0] {
		b.Convertible, b.Reason = false, "bias length does not match the projections"
	}
	if bias, ok := ix.Initializers[optInput(n, 3)]; ok && qw <= 0 && len(bias.Dims) == 1 && bias.Dims[0]%3 == 0 {
		qw, vw = bias.Dims[0]/3, bias.Dims[0]/3
	}
	fm.qSize, fm.vSize = qw, vw
	if b.Heads > 0 && qw > 0 {
		b.HeadDim = int(qw) / b.Heads
		if qw%int64(b.Heads) != 0 || (vw > 0 && vw%int64(b.Heads) != 0) {
			b.Convertible, b.Reason = false, "projection widths are not divisible by num_heads"
		}
	} else {
		b.Convertible, b.Reason = false, "projection width unknown"
	}
	fusedScale(b, n)
	if optInput(n, 6) != "" || optInput(n, 7) != "" || (len(n.Output) > 1 && n.Output[1] != "") {
		b.Convertible, b.Reason = false, "uses past key/value state"
	}
	if optInput(n, 5) != "" {
		b.Bias = BiasPerQueryKey
		b.Convertible, b.Reason = false, "attention_bias (per query-key) input is present"
	}
	mt.fusedMask(b, fm, optInput(n, 4))
	fusedCausal(b)
	return b
}

// fusedScale sets b.Scale from the fused node n's scale attribute (0 or
// absent: 1/√HeadDim) and refuses the block when it is not finite.
func fusedScale(b *Block, n *onnxpb.NodeProto) {
	b.Scale = float64(onnx.AttrFloat(n, "scale", 0))
	if b.Scale == 0 && b.HeadDim > 0 {
		b.Scale = 1 / math.Sqrt(float64(b.HeadDim))
	}
	if math.IsNaN(b.Scale) || math.IsInf(b.Scale, 0) {
		b.Scale = 0 // reports are JSON; the reason says what it was
		b.Convertible, b.Reason = false, "the scale attribute is not a finite number"
	}
}
