package convert

import (
	"fmt"
	"math"
	"slices"

	"github.com/linearize/linearize/internal/graphfacts"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// The checks on how a core splits and merges heads: the head-split
// forms (headSplits), heads folded into the batch, and the head count
// and size a block reads from the graph.

// headSplit is a layout a rank-4 Reshape splits the heads into (its axes
// named by B, H, S, D), with when it applies, judged from the value
// reshaped; the first row that applies is the split's layout.
type headSplit struct {
	name    string
	layout  string
	form    string // added to Block.Form ("" adds none)
	applies func(mt *matcher, reshape *onnxpb.NodeProto) bool
}

var headSplits = []headSplit{
	// Channels-first [B,C,S] from a pointwise Conv projection
	// (SqueezeBERT): C split into heads, [B,H,D,S]; Q and V are then
	// transposed by [0,1,3,2] and K is used as it is (already Kᵀ).
	{"[B,H,D,S] (channels-first)", "BHDS", "channels-first", func(mt *matcher, n *onnxpb.NodeProto) bool {
		return mt.ChannelsFirst(inp(n, 0))
	}},
	// Token-major [B,S,H·D]: [B,S,H,D].
	{"[B,S,H,D]", "BSHD", "", func(*matcher, *onnxpb.NodeProto) bool { return true }},
}

// headSplitOf returns the layout of the head split reshape n.
func (mt *matcher) headSplitOf(n *onnxpb.NodeProto) headSplit {
	for _, hs := range headSplits {
		if hs.applies(mt, n) {
			return hs
		}
	}
	return headSplits[len(headSplits)-1]
}

// formFolded names the forms of a core whose heads are folded into the
// batch; a probs form of that name also marks the walk's state folded.
const formFolded = "folded-heads"

// checkFolded: a product of rank-3 operands [B·H,S,D] (the heads folded
// into the batch, as DeBERTa's bmm, BLOOM, fairseq and torch's
// multi_head_attention_forward write it) is found; K is read from Kᵀ
// [B·H,D,S]. Its terms added to the folded scores are read by
// classifyFolded, and checkFoldedOutput decides whether it converts.
func checkFolded(mt *matcher, c *coreMatch, b *Block) string {
	if mt.singleHead(c) {
		c.single = true
		c.kPerm = []int{0, 2, 1} // Kᵀ [B,D,S] → [B,S,D]
		c.form = append(c.form, formSingleHead)
		return ""
	}
	if !c.folded {
		for _, v := range []string{c.q, c.k, c.v} {
			if len(mt.Dims(v)) == 3 {
				c.folded = true
			}
		}
	}
	if !c.folded {
		return ""
	}
	for _, v := range []string{c.q, c.k, c.v} {
		if d := mt.Dims(v); d != nil && len(d) != 3 {
			return fmt.Sprintf("the scores are [B·H,S,S] but %q has rank %d, not a [B·H,S,D] operand", v, len(d))
		}
	}
	c.form = append(c.form, formFolded)
	if c.qk.GetOpType() == "MatMul" {
		c.kPerm = []int{0, 2, 1} // Kᵀ [B·H,D,S] → [B·H,S,D]
	}
	return ""
}

// reasonFolded refuses a folded core whose output is not unfolded.
const reasonFolded = "heads folded into the batch ([B·H,S,D] operands of a batched MatMul) and the output [B·H,S,Dv] not unfolded by a reshape to [B,H,S,Dv] or a transpose to [S,B·H,Dv] that a reshape reads: the linear-attention ops take and give [B,H,S,D]"

// checkFoldedOutput: a convertible core whose heads are folded into the
// batch is rewritten as the op over the unfolded operands (liftRanks
// views [B·H,S,D] as [B,H,S,D]); its output [B,H,S,Dv] replaces the node
// that unfolds the product's [B·H,S,Dv] (unfoldedOutput), which joins
// the core. A core whose output is not unfolded so is refused.
func checkFoldedOutput(mt *matcher, c *coreMatch, b *Block) string {
	if !c.folded || !b.Convertible {
		return ""
	}
	ext, perm := mt.unfoldedOutput(c, b)
	if ext == nil {
		b.Convertible, b.Reason = false, reasonFolded
		return ""
	}
	c.nodes = append(c.nodes, c.av)
	c.av, c.outPerm = ext, perm
	b.Output = ext.Output[0]
	b.Nodes = append(b.Nodes, nodeName(ext))
	return ""
}

// unfoldedOutput returns the one consumer of a folded core's product
// [B·H,Sq,Dv] that unfolds it, and the perm that takes the op's
// [B,H,Sq,Dv] to that consumer's output: a Reshape to [B,H,Sq,Dv]
// (DeBERTa's, BLOOM's context.view(B,H,S,D)), nil perm; or the Transpose
// [1,0,2] to [Sq,B·H,Dv] of torch's multi_head_attention_forward and
// fairseq, read only by Reshapes (which see the same elements in
// [Sq,B,H,Dv]), perm [2,0,1,3]. nil when there is none.
func (mt *matcher) unfoldedOutput(c *coreMatch, b *Block) (*onnxpb.NodeProto, []int) {
	o := c.av.Output[0]
	cs := mt.Ix.Consumers[o]
	if mt.Ix.GraphOutputs[o] || len(cs) != 1 || !defaultDomain(cs[0]) || len(cs[0].Output) != 1 || mt.Ix.GraphOutputs[cs[0].Output[0]] {
		return nil, nil
	}
	n := cs[0]
	switch n.GetOpType() {
	case "Reshape":
		s, d := mt.ShapeValue(inp(n, 1)), mt.Dims(n.Output[0])
		if len(s) == 4 && len(d) == 4 && d[1] == int64(b.Heads) && (d[3] < 0 || d[3] == mt.valueWidth(c)) {
			return n, nil
		}
	case "Transpose":
		p := onnx.AttrInts(n, "perm")
		if len(p) != 3 || p[0] != 1 || p[1] != 0 || p[2] != 2 {
			return nil, nil
		}
		users := mt.Ix.Consumers[n.Output[0]]
		if len(users) == 0 {
			return nil, nil
		}
		for _, u := range users {
			if u.GetOpType() != "Reshape" || !defaultDomain(u) || inp(u, 0) != n.Output[0] {
				return nil, nil
			}
			s := mt.ShapeValue(inp(u, 1))
			if s == nil || slices.Contains(s, 0) {
				return nil, nil // a 0 would copy an axis of the rank-4 value
			}
		}
		return n, []int{2, 0, 1, 3}
	}
	return nil, nil
}

// valueWidth is V's head size of a folded core ([B·H,S,Dv]), −1 unknown.
func (mt *matcher) valueWidth(c *coreMatch) int64 {
	if d := mt.Dims(c.v); len(d) == 3 && d[2] > 0 {
		return d[2]
	}
	return -1
}

// checkHeads: the number of heads and the head size, from the shapes of Q
// and K (graph layout → [B,H,S,D]) and the projection width H·D.
func checkHeads(mt *matcher, c *coreMatch, b *Block) string {
	if c.single {
		return singleHeadDims(mt, c, b)
	}
	qd := mt.Dims(c.q)
	if c.qPerm != nil && qd != nil {
		qd = graphfacts.Permute(qd, c.qPerm)
	}
	kd := mt.Dims(c.k)
	if c.kPerm != nil && kd != nil {
		kd = graphfacts.Permute(kd, c.kPerm)
	}
	h, d := int64(-1), int64(-1)
	if len(qd) == 4 {
		h, d = qd[1], qd[3]
	}
	if c.folded {
		h, d = mt.foldedHeads(c, h, d)
	}
	if len(kd) == 4 {
		if h <= 0 {
			h = kd[1]
		}
		if d <= 0 {
			d = kd[3]
		}
	}
	hidden := mt.ProjWidth(c.q)
	if hidden <= 0 {
		hidden = mt.ProjWidth(c.k)
	}
	if h > 0 && d <= 0 && hidden > 0 && hidden%h == 0 {
		d = hidden / h
	}
	if d > 0 && h <= 0 && hidden > 0 && hidden%d == 0 {
		h = hidden / d
	}
	if h <= 0 && b.Merged != c.av.Output[0] {
		h = mt.mergedHeads(c, b)
	}
	b.Heads, b.HeadDim = int(h), int(d)
	if h > 0 && d > 0 && hidden > 0 && h*d != hidden {
		return fmt.Sprintf("heads·head_dim = %d·%d ≠ projection width %d", h, d, hidden)
	}
	if h <= 0 || d <= 0 {
		b.Convertible = false
		b.Reason = "number of heads or head size not known from constants or shapes"
	}
	return ""
}

// foldedHeads reads the heads h and head size d of a core whose heads are
// folded into the batch, [B·H,S,D] (those already known kept): the head
// size is Q's (or V's) last axis, and the head split [B,S,H,D] the folded
// operand was viewed from, or the view that folds it, gives the heads.
func (mt *matcher) foldedHeads(c *coreMatch, h, d int64) (int64, int64) {
	for _, v := range []string{c.q, c.v} {
		if x := mt.Dims(v); len(x) == 3 && x[2] > 0 && d <= 0 {
			d = x[2]
		}
	}
	if sd := mt.splitDims(c.q); len(sd) == 4 {
		if sd[2] > 0 {
			h = sd[2]
		}
		if d <= 0 && sd[3] > 0 {
			d = sd[3]
		}
	}
	if h <= 0 {
		h = mt.foldedHeadCount(c.q)
	}
	return h, d
}

// mergedHeads reads the heads of a head split that leaves their count to
// the reshape (ModernBERT's packed qkv.view(B, S, 3, -1, D)): the merged
// output [B,S,H·Dv] (or the rows of the weight that reads it) over V's
// head size Dv; −1 if unknown.
func (mt *matcher) mergedHeads(c *coreMatch, b *Block) int64 {
	vd := mt.Dims(c.v)
	if c.vPerm != nil && vd != nil {
		vd = graphfacts.Permute(vd, c.vPerm)
	}
	width := int64(-1)
	if md := mt.Dims(b.Merged); len(md) == 3 {
		width = md[2]
	}
	if width <= 0 {
		// merged·Wo contracts the merged width with Wo's rows.
		width = mt.InputWidth(b.Merged)
	}
	if len(vd) == 4 && width > 0 && vd[3] > 0 && width%vd[3] == 0 {
		return width / vd[3]
	}
	return -1
}

// splitDims returns the dims of the token-major head split [B,S,H,D]
// behind v (a rank-4 Reshape reached back through Transposes, Reshapes
// and scalar factors), or nil.
func (mt *matcher) splitDims(v string) []int64 {
	for i := 0; i < 8; i++ {
		n := mt.Ix.Producer[v]
		if n == nil || !defaultDomain(n) {
			return nil
		}
		switch n.GetOpType() {
		case "Reshape":
			if d := mt.Dims(n.Output[0]); len(d) == 4 && mt.headSplitOf(n).layout == "BSHD" {
				return d
			}
		case "Transpose", "Identity":
		case "Mul", "Div":
			if _, ok := mt.Scalar(inp(n, 1)); !ok {
				return nil
			}
		default:
			return nil
		}
		v = inp(n, 0)
	}
	return nil
}

// foldedHeadCount reads H from the view that folds the heads into the
// batch (torch's multi_head_attention_forward: q.view(S, B·H, D)): the
// rank-3 Reshape behind v with a shape entry B·H written Mul(size, H)
// for a constant H. −1 if none.
func (mt *matcher) foldedHeadCount(v string) int64 {
	for i := 0; i < 8; i++ {
		n := mt.Ix.Producer[v]
		if n == nil || !defaultDomain(n) {
			return -1
		}
		switch n.GetOpType() {
		case "Reshape":
			shape := mt.Ix.Producer[inp(n, 1)]
			if shape == nil || shape.GetOpType() != "Concat" || len(shape.Input) != 3 {
				return -1
			}
			for _, piece := range shape.Input {
				m := mt.Ix.Producer[piece]
				for m != nil && (m.GetOpType() == "Unsqueeze" || m.GetOpType() == "Cast") {
					m = mt.Ix.Producer[inp(m, 0)]
				}
				if m == nil || m.GetOpType() != "Mul" {
					continue
				}
				for j := 0; j < 2; j++ {
					if c, ok := mt.Scalar(inp(m, j)); ok && c >= 1 && c == math.Trunc(c) {
						if _, dyn := mt.Scalar(inp(m, 1-j)); !dyn {
							return int64(c)
						}
					}
				}
			}
			return -1
		case "Transpose", "Identity":
		case "Mul", "Div":
			if _, ok := mt.Scalar(inp(n, 1)); !ok {
				return -1
			}
		default:
			return -1
		}
		v = inp(n, 0)
	}
	return -1
}
