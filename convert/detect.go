package convert

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/linearize/linearize/internal/graphfacts"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

// BiasKind says what is added to the attention scores before the softmax.
type BiasKind string

// The bias kinds Detect reports.
const (
	// BiasNone: nothing is added to the scores.
	BiasNone BiasKind = "none"
	// BiasPerKey: a padding mask b_j of shape [B,1,1,S], the one kind a
	// Performer conversion keeps exactly.
	BiasPerKey BiasKind = "per-key"
	// BiasPerQueryKey: a bias that depends on query and key position
	// (relative position, ALiBi, a 3-D mask).
	BiasPerQueryKey BiasKind = "per-query-key"
	// BiasCausal: a triangular (decoder) mask; never converted.
	BiasCausal BiasKind = "causal"
)

// Block is one multi-head self-attention core,
//
//	out = softmax(Scale·Q·Kᵀ + bias)·V,
//
// with Q, K [B,Heads,S,HeadDim] and V [B,Heads,S,Dv].
type Block struct {
	Layer int    `json:"layer"` // 0-based order of the block in the graph
	Form  string `json:"form"`
	// Nodes are the names (or op@index for unnamed nodes) of the nodes of
	// the core that a rewrite replaces.
	Nodes   []string `json:"nodes"`
	Heads   int      `json:"heads"`
	HeadDim int      `json:"head_dim"`
	Scale   float64  `json:"scale"`
	Bias    BiasKind `json:"bias"`
	// BiasValue names the value that carries the per-key bias or mask.
	BiasValue string `json:"bias_value,omitempty"`
	Causal    bool   `json:"causal"`
	// Window is the band of keys of a sliding-window block (Bias
	// BiasWindow): every conversion writes WindowAttention for it, exact.
	Window *Window `json:"window,omitempty"`
	// Alibi are the per-head slopes m_h of an ALiBi bias −m_h·|i − j|
	// read from the graph (with or without a window).
	Alibi []float32 `json:"alibi,omitempty"`
	// Cross: cross-attention, the queries projected from another sequence
	// than the keys and values (a decoder reading the encoder, T5's
	// EncDecAttention): the query and key lengths may differ. Performer
	// and Linformer convert it; the ops that attend within one sequence
	// (local+pooled, LARA, Hedgehog) refuse it (SelfAttentionOnly).
	Cross bool `json:"cross,omitempty"`
	// Convertible is true when the block can be replaced exactly by a
	// linear-attention op; Reason says why not otherwise.
	Convertible bool   `json:"convertible"`
	Reason      string `json:"reason,omitempty"`
	// Q, K and V name the graph values the core reads, as the graph holds
	// them (K may be held transposed; a fused node packs all three).
	Q string `json:"q"`
	K string `json:"k"`
	V string `json:"v"`
	// Output is the value the core produces.
	Output string `json:"output"`
	// What the matcher proved about an unfused core's surroundings: the
	// projections Q, K and V are computed from (through the head split,
	// scalar factors and rotary embeddings), the block's output after the
	// head merge, and the factor applied to the scores after the per-key
	// bias BiasValue was added (the softmax sees BiasFactor·BiasValue).
	QProj      *Projection `json:"q_proj,omitempty"`
	KProj      *Projection `json:"k_proj,omitempty"`
	VProj      *Projection `json:"v_proj,omitempty"`
	Merged     string      `json:"merged,omitempty"`
	BiasFactor float64     `json:"bias_factor,omitempty"`
	// Function is the model-local function ("domain.name") the block was
	// found in, if any; Detect inlines such functions to analyse them,
	// and Nodes then name the inlined copies (call node name + "/").
	Function string `json:"function,omitempty"`

	core  *coreMatch
	fused *fusedMatch
	order int
	// causalOnly: the block was refused for its causal mask and nothing
	// else when the mask was read (see causal.go).
	causalOnly bool
}

// selfAttentionOps attend within one sequence: their queries are the
// keys' own positions (local blocks, segments and sinks over them).
var selfAttentionOps = map[string]bool{ops.LocalPooledOp: true, ops.LaraOp: true, ops.HedgehogOp: true, ops.WindowOp: true}

// SelfAttentionOnly returns why op cannot replace block b, "" when it
// can: a cross-attention block (Block.Cross) for an op that attends
// within one sequence.
func SelfAttentionOnly(op string, b *Block) string {
	if !b.Cross || !selfAttentionOps[op] {
		return ""
	}
	return fmt.Sprintf("cross-attention (queries from another sequence than the keys, whose lengths may differ): %s attends within one sequence (the queries' own positions); Performer and Linformer convert it", op)
}

// Projection is a linear projection X·W (+ B) a block's Q, K or V is
// computed from.
type Projection = graphfacts.Projection

// Unmatched is a Softmax that is not the core of an attention block, with
// the check that failed.
type Unmatched struct {
	Softmax string `json:"softmax"`
	Reason  string `json:"reason"`
}

// LinearNode is linear attention already in the model: a node of domain
// ai.linearize (a converted block), or the body of such an op that an
// optimizer inlined (onnxruntime inlines model-local functions).
type LinearNode struct {
	Node string `json:"node"`
	Op   string `json:"op"`
}

// Detection is what Detect found in a model.
type Detection struct {
	Blocks    []*Block    `json:"attention"`
	Unmatched []Unmatched `json:"unmatched,omitempty"`
	// Linear lists the linear-attention ops already present; a model
	// that has any is converted already, and the rewrites refuse it.
	Linear []LinearNode `json:"linear_attention,omitempty"`
	// Notes say what the analysis decided about the model's declarations:
	// declared shapes (value_info, graph inputs and outputs) that
	// contradict the dims the graph proves from constants and operators,
	// and were ignored.
	Notes []string `json:"notes,omitempty"`
}

// AlreadyConverted reports whether the model holds linear attention
// (ai.linearize nodes, or their inlined bodies).
func (d *Detection) AlreadyConverted() bool { return len(d.Linear) > 0 }

// Count returns the number of blocks found.
func (d *Detection) Count() int { return len(d.Blocks) }

// Convertible returns the blocks that can be rewritten.
func (d *Detection) Convertible() []*Block {
	var out []*Block
	for _, b := range d.Blocks {
		if b.Convertible {
			out = append(out, b)
		}
	}
	return out
}

// Detect finds every multi-head self-attention core in m: unfused cores
// anchored on a Softmax (also inside model-local functions) and
// onnxruntime's fused com.microsoft Attention and MultiHeadAttention
// nodes. Blocks are numbered in graph order.
func Detect(m *onnxpb.ModelProto) (*Detection, error) {
	d, _, err := detect(m)
	return d, err
}

// detect is Detect that also returns the model the blocks refer to: m
// itself, or a copy in which local functions holding attention are
// inlined.
func detect(m *onnxpb.ModelProto) (d *Detection, analysed *onnxpb.ModelProto, err error) {
	defer func() {
		// The matcher guards its reads of the graph; this is the last
		// line of defence against a malformed model it did not foresee.
		if r := recover(); r != nil {
			d, analysed, err = nil, nil, fmt.Errorf("convert: malformed graph: %v", r)
		}
	}()
	if m == nil || m.Graph == nil {
		return nil, nil, errors.New("convert: model has no graph")
	}
	d = &Detection{}
	analysed, fromFunc, ierr := inlineAttention(m)
	if ierr != nil {
		analysed, fromFunc = m, nil
	}
	g := analysed.Graph
	order, err := onnx.TopoSort(g)
	if err != nil {
		return nil, nil, fmt.Errorf("convert: %w", err)
	}
	pos := map[*onnxpb.NodeProto]int{}
	for i, n := range order {
		pos[n] = i
	}
	ix := onnx.NewIndex(g)
	mt := &matcher{Facts: graphfacts.New(ix, onnx.OpsetVersion(analysed, "")), probe: newProber(analysed, ix)}
	for _, n := range order {
		if n.GetDomain() == ops.Domain {
			d.Linear = append(d.Linear, LinearNode{Node: nodeName(n), Op: ops.Domain + ":" + n.GetOpType()})
			continue
		}
		b, reason, anchor := mt.matchAnchor(n)
		if !anchor {
			continue
		}
		if b == nil && mt.linear != "" {
			d.Linear = append(d.Linear, LinearNode{Node: nodeName(n), Op: mt.linear})
		}
		if b == nil {
			d.Unmatched = append(d.Unmatched, Unmatched{Softmax: nodeName(n), Reason: reason})
			continue
		}
		b.Function = fromFunc[n.GetName()]
		b.order = pos[n]
		d.Blocks = append(d.Blocks, b)
	}
	d.markInlined(g, ix) // inlined linear-attention bodies (inlined.go)
	d.detectInFunctions(analysed, mt.Opset, len(order), ierr)
	sort.SliceStable(d.Blocks, func(i, j int) bool { return d.Blocks[i].order < d.Blocks[j].order })
	for i, b := range d.Blocks {
		b.Layer = i
	}
	d.Notes = overruledNotes(mt.Facts)
	return d, analysed, nil
}

// fusedAnchors are onnxruntime's fused attention nodes (com.microsoft)
// and how each is read.
var fusedAnchors = map[string]func(*matcher, *onnxpb.NodeProto) *Block{
	"Attention":          (*matcher).matchFusedAttention,
	"QAttention":         (*matcher).matchFusedAttention,
	"MultiHeadAttention": (*matcher).matchFusedMHA,
}

// matchAnchor matches the core n anchors: a default-domain Softmax or a
// fused attention node (anchor true), the block or why there is none;
// anchor is false for any other node.
func (mt *matcher) matchAnchor(n *onnxpb.NodeProto) (b *Block, reason string, anchor bool) {
	mt.linear = ""
	softmax := n.GetOpType() == "Softmax" && defaultDomain(n)
	fused := fusedAnchors[n.GetOpType()]
	if n.GetDomain() != "com.microsoft" {
		fused = nil
	}
	if !softmax && fused == nil {
		return nil, "", false
	}
	if len(n.Output) == 0 || n.Output[0] == "" || len(n.Input) == 0 {
		return nil, "node has no input or output", true
	}
	if softmax {
		b, reason = mt.matchSoftmax(n)
		return b, reason, true
	}
	return fused(mt, n), "", true
}

// detectInFunctions finds attention left inside model-local functions
// (inlining failed, with ierr): found and reported, not converted; their
// blocks are ordered after the graph's n nodes.
func (d *Detection) detectInFunctions(analysed *onnxpb.ModelProto, opset int64, n int, ierr error) {
	for _, f := range analysed.Functions {
		if f.GetDomain() == ops.Domain {
			continue // the definition of a linear-attention op
		}
		fg := &onnxpb.GraphProto{Node: f.Node}
		for _, in := range f.Input {
			name := in
			fg.Input = append(fg.Input, &onnxpb.ValueInfoProto{Name: &name})
		}
		for _, out := range f.Output {
			name := out
			fg.Output = append(fg.Output, &onnxpb.ValueInfoProto{Name: &name})
		}
		fm := &matcher{Facts: graphfacts.New(onnx.NewIndex(fg), opset)}
		for i, node := range f.Node {
			if node.GetOpType() != "Softmax" || !defaultDomain(node) || len(node.Output) == 0 || node.Output[0] == "" {
				continue
			}
			b, reason := fm.matchSoftmax(node)
			if b == nil {
				d.Unmatched = append(d.Unmatched, Unmatched{Softmax: f.GetName() + "/" + nodeName(node), Reason: reason})
				continue
			}
			b.Function = f.GetDomain() + "." + f.GetName()
			b.order = n + i
			why := fmt.Sprintf("inside model-local function %s.%s, which could not be inlined", f.GetDomain(), f.GetName())
			if ierr != nil {
				why += ": " + ierr.Error()
			}
			if !b.Convertible && b.Reason != "" {
				why += " (also: " + b.Reason + ")"
			}
			b.Convertible, b.Reason = false, why
			d.Blocks = append(d.Blocks, b)
		}
	}
}

// maxOverruledNotes bounds the declarations Notes lists one by one.
const maxOverruledNotes = 8

// overruledNotes says which declared shapes the analysis ignored because
// the graph proves other dims (graphfacts.Facts.Overruled).
func overruledNotes(f *graphfacts.Facts) []string {
	var notes []string
	ov := f.Overruled()
	for i, o := range ov {
		if i == maxOverruledNotes {
			notes = append(notes, fmt.Sprintf("%d more declared shapes ignored for the same reason", len(ov)-i))
			break
		}
		by := ""
		if n := f.Ix.Producer[o.Value]; n != nil {
			by = " (output of " + n.GetOpType() + " " + nodeName(n) + ")"
		}
		notes = append(notes, fmt.Sprintf("declared shape %s of %s%s contradicts %s, the dims its producers give it from constants and operators; the declaration is ignored",
			fmtDims(o.Declared), o.Value, by, fmtDims(o.Proved)))
	}
	return notes
}

// fmtDims writes dims with ? for an unknown one: [? ? 4 8].
func fmtDims(d []int64) string {
	parts := make([]string, len(d))
	for i, x := range d {
		if x < 0 {
			parts[i] = "?"
		} else {
			parts[i] = fmt.Sprint(x)
		}
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// nodeName names a node in messages: its name, else op(first output).
func nodeName(n *onnxpb.NodeProto) string {
	if n.GetName() != "" {
		return n.GetName()
	}
	out := ""
	if len(n.Output) > 0 {
		out = n.Output[0]
	}
	return n.GetOpType() + "(" + out + ")"
}

// Explain writes one line per block and per unmatched Softmax, and the
// notes.
func (d *Detection) Explain() string {
	var sb strings.Builder
	for _, b := range d.Blocks {
		fmt.Fprintf(&sb, "block %d: %s heads=%d head_dim=%d scale=%.6g bias=%s", b.Layer, b.Form, b.Heads, b.HeadDim, b.Scale, b.Bias)
		if b.Convertible {
			sb.WriteString(" convertible\n")
		} else {
			fmt.Fprintf(&sb, " not convertible: %s\n", b.Reason)
		}
	}
	for _, u := range d.Unmatched {
		fmt.Fprintf(&sb, "softmax %s: not attention: %s\n", u.Softmax, u.Reason)
	}
	for _, l := range d.Linear {
		fmt.Fprintf(&sb, "linear attention %s: %s (the model is converted already)\n", l.Node, l.Op)
	}
	for _, n := range d.Notes {
		fmt.Fprintf(&sb, "note: %s\n", n)
	}
	return sb.String()
}

// ErrNothingConverted is wrapped by the error ToPerformer, ToLinformer,
// ToLocalPooled and ToLARA return when they rewrite no block (no attention found, every block
// refused or unselected, or the model converted already); the message
// says why, block by block. They return the report with it and no model.
var ErrNothingConverted = errors.New("convert: nothing converted")

// nothingConverted builds the ErrNothingConverted error for a detection
// whose blocks were all skipped, grouping the layers by reason.
func nothingConverted(d *Detection, skipped []BlockReport) error {
	if d.Count() == 0 {
		msg := "no attention block found"
		if len(d.Unmatched) > 0 {
			u := d.Unmatched[0]
			msg += fmt.Sprintf(" (%d Softmax not an attention core; %s: %s)", len(d.Unmatched), u.Softmax, u.Reason)
		}
		return fmt.Errorf("%w: %s", ErrNothingConverted, msg)
	}
	var reasons []string
	layers := map[string][]int{}
	for _, b := range skipped {
		if _, ok := layers[b.Reason]; !ok {
			reasons = append(reasons, b.Reason)
		}
		layers[b.Reason] = append(layers[b.Reason], b.Layer)
	}
	parts := make([]string, 0, len(reasons))
	for _, r := range reasons {
		ls := layers[r]
		sort.Ints(ls)
		word := "layer"
		if len(ls) > 1 {
			word = "layers"
		}
		parts = append(parts, fmt.Sprintf("%s %s: %s", word, layerList(ls), r))
	}
	return fmt.Errorf("%w: %d attention blocks, none converted: %s", ErrNothingConverted, d.Count(), strings.Join(parts, "; "))
}

// layerList writes sorted layer indices compactly: 0-3,7.
func layerList(ls []int) string {
	var sb strings.Builder
	for i := 0; i < len(ls); {
		j := i
		for j+1 < len(ls) && ls[j+1] == ls[j]+1 {
			j++
		}
		if sb.Len() > 0 {
			sb.WriteString(",")
		}
		if j > i {
			fmt.Fprintf(&sb, "%d-%d", ls[i], ls[j])
		} else {
			fmt.Fprintf(&sb, "%d", ls[i])
		}
		i = j + 1
	}
	return sb.String()
}

// linearSummary names the linear-attention ops found: "2 × ai.linearize:PerformerAttention".
func linearSummary(ls []LinearNode) string {
	var ops []string
	count := map[string]int{}
	for _, l := range ls {
		if count[l.Op] == 0 {
			ops = append(ops, l.Op)
		}
		count[l.Op]++
	}
	parts := make([]string, len(ops))
	for i, op := range ops {
		parts[i] = fmt.Sprintf("%d × %s", count[op], op)
	}
	return "it holds " + strings.Join(parts, ", ")
}
