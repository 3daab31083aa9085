package convert

import (
	"fmt"
	"math"

	"github.com/linearize/linearize/internal/graphfacts"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// The additive terms of the scores: the bias forms (biasForms) that
// say a term is a padding mask, causal, a per-query-key bias or
// ALiBi, and the checks that a block's terms are ones the ops take.

// checkBias classifies every bias term (see biasForms); a causal or
// per-query-key bias, or a Where that does not mask, refuses the block.
func checkBias(mt *matcher, c *coreMatch, b *Block) string {
	for i := range c.biases {
		bt := &c.biases[i]
		// A mask quantized and dequantized (quantize_static's QDQ pair)
		// is read, and rebuilt by the rewrite, as the float mask.
		bt.value = mt.FloatSource(bt.value)
		switch {
		case c.single:
			bt.kind, bt.keyValue = mt.classifySingle(bt)
		case c.folded && c.foldedTerm(bt):
			bt.kind, bt.keyValue = mt.classifyFolded(bt)
		default:
			bt.kind, bt.keyValue = mt.classifyBias(bt)
		}
		if bt.kind == BiasPerKey && bt.keyRank == 3 && !c.single {
			c.form = append(c.form, "rank3-mask")
		}
		if bt.kind == BiasPerKey && bt.keyRank == 0 && !queryFree(mt.Units(bt.keyValue)) {
			bt.sliceKey = true
		}
		switch {
		case bt.kind == BiasCausal:
			b.Bias, b.Causal = BiasCausal, true
		case bt.kind == BiasPerQueryKey && b.Bias != BiasCausal:
			b.Bias = BiasPerQueryKey
		case bt.kind == BiasPerKey && b.Bias == BiasNone:
			b.Bias = BiasPerKey
			b.BiasValue, b.BiasFactor = bt.value, bt.factor
		}
		if bt.where && bt.kind == BiasPerKey && bt.maskedFill() > maskThreshold {
			b.Convertible = false
			b.Reason = fmt.Sprintf("Where %s fills masked scores with %g, not a large negative value; it is not an additive mask", nodeName(bt.node), bt.fill)
		}
		if !bt.where && bt.kind == BiasPerKey && bt.factor < 0 {
			// scores − m (sub-bias): the rewrite builds an added key bias
			// from m itself, and decides padding by m ≤ −1e4.
			b.Convertible = false
			b.Reason = fmt.Sprintf("per-key mask subtracted from the scores by %s %s: the ops take a key bias that is added, and the rewrite does not negate it", bt.node.GetOpType(), nodeName(bt.node))
		}
	}
	if (b.Bias == BiasPerQueryKey || b.Bias == BiasCausal) && b.Convertible {
		mt.readWindow(c, b)
		if b.Window != nil {
			return ""
		}
	}
	switch b.Bias {
	case BiasCausal:
		b.causalOnly = b.Convertible // the causal Performer may take it (causal.go)
		b.Convertible = false
		b.Reason = reasonCausalMask
		for _, bt := range c.biases {
			if bt.kind == BiasPerQueryKey {
				// A causal mask and a bias by query and key position
				// (ALiBi): the causal Performer cannot take it either.
				b.causalOnly = false
				b.Reason = reasonCausalMask + "; also " + mt.queryKeyReason(c) + "bias depends on query and key position; only a per-key bias [B,1,1,S] is exact under linear attention"
				break
			}
		}
	case BiasPerQueryKey:
		b.Convertible = false
		b.Reason = "bias depends on query and key position; only a per-key bias [B,1,1,S] is exact under linear attention"
		b.Reason = mt.queryKeyReason(c) + b.Reason
	}
	return ""
}

// queryKeyBias names a kind of per-query-key bias, for the refusal: the
// first row any of the block's per-query-key terms matches prefixes the
// reason with its text.
type queryKeyBias struct {
	name   string
	match  func(mt *matcher, v string) bool
	reason string
}

var queryKeyBiases = []queryKeyBias{
	// DeBERTa: Q·(position keys)ᵀ and (position queries)·Kᵀ products,
	// gathered by relative distance (GatherElements), added to the scores.
	{"disentangled", func(mt *matcher, v string) bool {
		return mt.biasReaches(v, func(n *onnxpb.NodeProto) bool {
			if n.GetOpType() != "GatherElements" {
				return false
			}
			p := mt.Ix.Producer[inp(n, 0)]
			for p != nil && (p.GetOpType() == "Transpose" || p.GetOpType() == "Reshape") {
				p = mt.Ix.Producer[inp(p, 0)]
			}
			return p != nil && p.GetOpType() == "MatMul"
		})
	}, "disentangled attention (DeBERTa's relative-position terms c2p and p2c: content·position products gathered by relative distance i−j and added to the scores, which also depend on the query's content): "},
	// WavLM: a bucketed relative-position bias times a per-query gate,
	// sigmoid of a projection of the hidden states.
	// (The dynamo exporter folds the buckets of a fixed length into a
	// constant: the gate, a Sigmoid of non-constant values, is the mark.)
	{"gated", func(mt *matcher, v string) bool {
		return mt.biasReaches(v, func(n *onnxpb.NodeProto) bool {
			return n.GetOpType() == "Sigmoid" && !mt.ConstDerived(inp(n, 0))
		})
	}, "gated relative position bias (WavLM: a relative-position bias by distance bucket, scaled per query by a sigmoid gate of the hidden states, added to the scores): "},
	// T5, MPNet: a learned bias per relative-distance bucket, looked up
	// (Gather from a constant [buckets, heads] table) by indices built
	// from positions (Range).
	{"relative-position", func(mt *matcher, v string) bool {
		return mt.biasReaches(v, func(n *onnxpb.NodeProto) bool {
			return n.GetOpType() == "Gather" && mt.ConstDerived(inp(n, 0)) && len(mt.Dims(inp(n, 0))) == 2 &&
				mt.biasReaches(inp(n, 1), func(r *onnxpb.NodeProto) bool { return r.GetOpType() == "Range" })
		})
	}, "relative position bias (a learned bias per relative-distance bucket, looked up from query and key positions): "},
	// ALiBi (BLOOM, MPT, Falcon): per-head slopes m_h (a constant of
	// several values) times token positions (a Range, or the cumulative
	// sum of the padding mask), added to the scores: with the causal
	// mask the softmax sees −m_h·(i−j).
	{"alibi", func(mt *matcher, v string) bool {
		return mt.biasReaches(v, func(n *onnxpb.NodeProto) bool {
			if n.GetOpType() != "Mul" {
				return false
			}
			for i := 0; i < 2; i++ {
				if mt.slopes(inp(n, i)) && mt.biasReaches(inp(n, 1-i), func(p *onnxpb.NodeProto) bool {
					return p.GetOpType() == "Range" || p.GetOpType() == "CumSum"
				}) {
					return true
				}
			}
			return false
		})
	}, "ALiBi (attention with linear biases: a per-head linear distance bias −m_h·|i−j|, slopes m_h times token positions, added to the scores): "},
	// ModernBERT's local layers: a band mask |i−j| ≤ w.
	{"sliding-window", (*matcher).slidingWindow,
		"sliding-window (local) attention: each query sees only the keys within a band |i−j| ≤ w of it; "},
}

// slopes reports whether v is a constant of several distinct positive
// values (ALiBi's per-head slopes, 2^(−8h/H)).
func (mt *matcher) slopes(v string) bool {
	t, ok := constant(mt.Ix, v)
	if !ok || t.Len() < 2 || t.Len() > 1024 {
		return false
	}
	vals, err := t.AsFloat64s()
	if err != nil {
		return false
	}
	distinct := map[float64]bool{}
	for _, x := range vals {
		if !(x > 0) || math.IsInf(x, 0) {
			return false
		}
		distinct[x] = true
	}
	return len(distinct) > 1
}

// queryKeyReason returns the text of the first queryKeyBiases row a
// per-query-key term of c matches, or "".
func (mt *matcher) queryKeyReason(c *coreMatch) string {
	for _, row := range queryKeyBiases {
		for _, bt := range c.biases {
			if bt.kind == BiasPerQueryKey && row.match(mt, bt.value) {
				return row.reason
			}
		}
	}
	return ""
}

// biasReaches reports whether a node satisfying is computes part of v:
// a bounded walk back over the producers of v (not into Shape or Size,
// which say nothing of the values).
func (mt *matcher) biasReaches(v string, is func(*onnxpb.NodeProto) bool) bool {
	return mt.walkBack(v, 256, func(_ string, n *onnxpb.NodeProto) (bool, bool) {
		if n == nil || !defaultDomain(n) {
			return false, false
		}
		return is(n), true
	})
}

// checkPastState: keys or values concatenated with a graph input (past
// key/value state of incremental decoding) refuse the block.
func checkPastState(mt *matcher, c *coreMatch, b *Block) string {
	if mt.pastState(c.k) || mt.pastState(c.v) {
		b.Convertible = false
		b.Reason = "keys/values are concatenated with past state (incremental decoding)"
		if b.Causal {
			b.Reason = "causal with past key/value state (incremental decoding): a bidirectional op cannot replace it"
		}
	}
	return ""
}

// checkOneKeyBias: the ops take one per-key bias.
func checkOneKeyBias(mt *matcher, c *coreMatch, b *Block) string {
	n := 0
	for _, bt := range c.biases {
		if bt.kind == BiasPerKey {
			n++
		}
	}
	if b.Convertible && n > 1 {
		b.Convertible = false
		b.Reason = "more than one per-key bias term"
	}
	return ""
}

// biasForm reads one term added to (or masking) the scores: the kind of
// bias it is and, for a per-key one, the value of shape [B,1,1,S] (or one
// constant along heads and queries) the op's key bias is built from. ok
// false means the form does not apply; a term no form reads depends on
// query and key position.
type biasForm struct {
	name  string
	where bool // reads Where-mask conditions (true) or additive biases
	read  func(mt *matcher, bt *biasTerm) (kind BiasKind, key string, ok bool)
}

var biasForms = []biasForm{
	// A triangular mask (Trilu, a triangular constant, Range indices
	// compared): causal, for either kind of term.
	{"causal", false, readCausal},
	{"causal", true, readCausal},
	// DistilBERT: Where(Expand(Reshape(mask == 0)), min, scores): the
	// Expand's input holds the per-key condition.
	// XLM (TorchScript) casts the expanded condition to bool:
	// Where(Cast(Expand(Reshape(mask == 0))), min, scores).
	{"expanded-condition", true, readExpandedPerKey(true)},
	{"per-key-condition", true, readPerKey},
	// A per-key bias expanded to the score shape (bias.expand_as(scores),
	// Expand to [B,H,S,S]): the unexpanded value is the key bias, so the
	// rewrite does not keep the scores alive for their shape.
	{"expanded-per-key", false, readExpandedPerKey(false)},
	// (1 − m)·c from a [B,S] mask, or any value constant along heads and
	// queries.
	{"per-key", false, readPerKey},
	// A rank-3 mask [B,1,S] (mask.unsqueeze(1): one unit axis missing),
	// directly or expanded to [B,1,S,S], for either kind of term. From
	// the right its batch axis meets the scores' heads, so the graph runs
	// as written at batch 1 (a TorchScript export traced there), where it
	// is per key; the rewrite lifts it to [B,1,1,S].
	{"rank3-per-key", false, readRank3PerKey},
	{"rank3-per-key", true, readRank3PerKey},
	// HF transformers ≥ 4.48: bias = Where(Expand(mask[B,1,1,S]), 0, min):
	// the values are per key, broadcast over queries; the rewrite rebuilds
	// the Where on the unexpanded condition.
	{"where-of-constants", false, func(mt *matcher, bt *biasTerm) (BiasKind, string, bool) {
		n := mt.Ix.Producer[bt.value]
		if n == nil || n.GetOpType() != "Where" || !defaultDomain(n) {
			return "", "", false
		}
		c := inp(n, 0)
		if e := mt.Ix.Producer[c]; e != nil && e.GetOpType() == "Expand" {
			c = inp(e, 0)
		}
		_, okA := mt.Scalar(inp(n, 1))
		_, okB := mt.Scalar(inp(n, 2))
		if okA && okB && queryFree(mt.Broadcast(c)) {
			bt.rebuildWhere = n
			return BiasPerKey, c, true
		}
		return "", "", false
	}},
}

// unexpanded returns x when v is Expand(x) (for a condition, through a
// Cast to bool of a bool x, as the rewrite rebuilds the Where on x), ""
// otherwise.
func (mt *matcher) unexpanded(v string, cond bool) string {
	n := mt.Ix.Producer[v]
	cast := false
	if cond && n != nil && n.GetOpType() == "Cast" && defaultDomain(n) && onnx.AttrInt(n, "to", 0) == int64(onnx.Bool) {
		n, cast = mt.Ix.Producer[inp(n, 0)], true
	}
	if n == nil || n.GetOpType() != "Expand" || !defaultDomain(n) {
		return ""
	}
	x := inp(n, 0)
	if cast && newElemTypes(mt.Ix).of(x) != onnx.Bool {
		return ""
	}
	return x
}

// classifyFolded reads a bias term added to scores whose heads are folded
// into the batch, [B·H,Sq,Sk]: a causal mask; a per-key one when it is a
// [B,1,1,S] value expanded over the heads and folded the same way
// (torch's multi_head_attention_forward: key_padding_mask.view(B,1,1,S)
// .expand(-1,H,-1,-1).reshape(B·H,1,S), scalar factors allowed, which
// the term's factor takes); anything else depends on the head, or on
// query and key position.
func (mt *matcher) classifyFolded(bt *biasTerm) (BiasKind, string) {
	if mt.causal(bt.value) {
		return BiasCausal, ""
	}
	v, f, _ := mt.stripScale(bt.value)
	for i := 0; i < 4; i++ {
		n := mt.Ix.Producer[v]
		if n == nil || !defaultDomain(n) {
			break
		}
		if op := n.GetOpType(); op == "Identity" || graphfacts.FloatCast(n) {
			v = inp(n, 0)
			continue
		}
		break
	}
	r := mt.Ix.Producer[v]
	if r == nil || r.GetOpType() != "Reshape" || !defaultDomain(r) || len(mt.ShapeValue(inp(r, 1))) != 3 {
		return BiasPerQueryKey, ""
	}
	x := mt.unexpanded(inp(r, 0), false)
	if x == "" || !mt.isPerKey(x) {
		return BiasPerQueryKey, ""
	}
	// The reshape folds the batch and head axes of [B,H,q,S] together:
	// its query axis is the value's.
	d, out := mt.Dims(inp(r, 0)), mt.Dims(r.Output[0])
	if len(d) != 4 || len(out) != 3 || !(out[1] == 1 || d[2] > 0 && out[1] == d[2]) {
		return BiasPerQueryKey, ""
	}
	bt.factor *= f
	return BiasPerKey, x
}

func readRank3PerKey(mt *matcher, bt *biasTerm) (BiasKind, string, bool) {
	v := bt.value
	if n := mt.Ix.Producer[v]; n != nil && n.GetOpType() == "Expand" && defaultDomain(n) {
		v = inp(n, 0)
	}
	if u, bc := mt.Units(v), mt.Broadcast(v); len(u) == 3 && len(bc) == 3 && queryFree3(u) && queryFree3(bc) {
		bt.keyRank = 3
		return BiasPerKey, v, true
	}
	return "", "", false
}

func readCausal(mt *matcher, bt *biasTerm) (BiasKind, string, bool) {
	if mt.causal(bt.value) {
		return BiasCausal, "", true
	}
	return "", "", false
}

// readPerKey reads a per-key term (isPerKey) as it is.
func readPerKey(mt *matcher, bt *biasTerm) (BiasKind, string, bool) {
	if mt.isPerKey(bt.value) {
		return BiasPerKey, bt.value, true
	}
	return "", "", false
}

// readExpandedPerKey returns the reader of a per-key term expanded to the
// scores' shape, whose key bias is the unexpanded value; cond: the term is
// a Where condition, which may be cast to bool (unexpanded).
func readExpandedPerKey(cond bool) func(mt *matcher, bt *biasTerm) (BiasKind, string, bool) {
	return func(mt *matcher, bt *biasTerm) (BiasKind, string, bool) {
		if x := mt.unexpanded(bt.value, cond); x != "" && mt.isPerKey(x) {
			return BiasPerKey, x, true
		}
		return "", "", false
	}
}

// isPerKey reports whether v is a per-key bias or condition: [B,1,1,S] by
// construction, or constant along the head and query axes.
func (mt *matcher) isPerKey(v string) bool {
	return mt.perKey(v, 0) || queryFree(mt.Broadcast(v))
}

// classifyBias reads one bias term with the first bias form that applies.
func (mt *matcher) classifyBias(bt *biasTerm) (BiasKind, string) {
	for _, f := range biasForms {
		if f.where != bt.where {
			continue
		}
		if kind, key, ok := f.read(mt, bt); ok {
			return kind, key
		}
	}
	return BiasPerQueryKey, ""
}
