package ops

import (
	"fmt"
	"math"
	"strings"

	"github.com/linearize/linearize/internal/gemm"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// LocalPooledAttention (domain ai.linearize, version 1) attends exactly to
// the keys near each query and to a few sink keys, and to the rest of the
// sequence through segment means, all in one softmax.
//
// Inputs: Q [B,H,S,D], K [B,H,S,D], V [B,H,S,Dv] (self-attention: queries
// and keys are the same positions), key_bias [B or 1,1,1,S or 1] (optional
// in the Go kernel, always passed to the function body). Output [B,H,S,Dv].
// Attributes: scale (float), block b ≥ 0, segments k ≥ 0 (0: no pooled
// far field, only with b > 0), sinks ("none",
// "first", "last" or "first,last"), reach r ≥ 0 (default 1), far_bias
// (floats, one or one per head; default 0).
//
// For one sequence and head, with the valid keys those whose bias is above
// −1e4 (the bias decides validity only; its value is otherwise not
// applied):
//
//   - the sinks are the first and/or last valid key;
//   - the other valid keys, in order, are split into k contiguous segments:
//     the key of rank r among m such keys is in segment ⌊r·k/m⌋, so the
//     segments follow each sequence's actual length, not the maximum;
//     k̄_c and v̄_c are the means of K and V over segment c;
//   - the exact set of query i (at position i, in block ⌊i/b⌋ of b
//     positions) is every non-sink valid key in blocks ⌊i/b⌋−r to
//     ⌊i/b⌋+r, plus the sinks (b = 0: the sinks only); r = 1 (the
//     default) is the block and both neighbours, r = 0 the block alone
//     (aligned windows, as `convert long` uses);
//   - cnt_ic is the number of keys of segment c outside that exact set;
//   - the scores are scale·q_i·k_j for j in the exact set and
//     scale·q_i·k̄_c + log cnt_ic + β_h for each segment with cnt_ic > 0,
//     where β_h is head h's far_bias (a gate on the far field: negative
//     values weigh the pooled keys less than the keys they stand for); one
//     softmax over all of them weighs v_j and v̄_c.
//
// A segment with cnt_ic keys scores as cnt_ic copies of its mean key would,
// so a distant region weighs as many keys as it stands for. When the
// non-sink valid keys are at most k (each segment then holds one key) or
// every key is in the exact set, the op is exact softmax attention.
// Cost per query: ((2r+1)·b + sinks + k)·(D + Dv) multiply-adds, plus k·(D + Dv)
// per key for the means; memory is linear in S. A sequence with no valid
// key gives zeros.
const localPooledDoc = "LocalPooledAttention: exact block-local and sink attention plus segment-mean pooled keys in one softmax (see github.com/linearize/linearize/ops)."

// LocalPooledOp is the op type of LocalPooledAttention.
const LocalPooledOp = "LocalPooledAttention"

// LocalPooledAttrs are the attributes of LocalPooledAttention.
type LocalPooledAttrs struct {
	// Scale multiplies q·k; zero selects 1/√D.
	Scale float32
	// Block is b, the length of the local blocks; 0 disables the local
	// part (only sinks and segments: a run-time pooled Linformer).
	Block int
	// Segments is k, the number of pooled segments (≥ 1; 0 drops the
	// pooled far field, which needs Block > 0).
	Segments int
	// SinkFirst and SinkLast keep the first and the last valid key exact.
	SinkFirst, SinkLast bool
	// Reach is r: a query attends exactly to the blocks within r of its
	// own. The zero value is read as the op's default, 1; NoReach (−1)
	// selects r = 0, the query's block alone.
	Reach int
	// FarBias is β, added to every pooled score: one value for all heads
	// or one per head; nil is 0.
	FarBias []float32
	// Threads bounds the goroutines the Go kernel uses (not an attribute).
	Threads int
}

// Sinks returns the sinks attribute value: "none", "first", "last" or
// "first,last".
func (a LocalPooledAttrs) Sinks() string {
	switch {
	case a.SinkFirst && a.SinkLast:
		return "first,last"
	case a.SinkFirst:
		return "first"
	case a.SinkLast:
		return "last"
	}
	return "none"
}

// ParseSinks reads a sinks value ("none", "first", "last", "first,last" or
// "last,first"; "" means none).
func ParseSinks(s string) (first, last bool, err error) {
	if s == "" || s == "none" {
		return false, false, nil
	}
	for _, f := range strings.Split(s, ",") {
		switch strings.TrimSpace(f) {
		case "first":
			first = true
		case "last":
			last = true
		default:
			return false, false, fmt.Errorf("ops: %s: sinks %q, want none, first, last or first,last", LocalPooledOp, s)
		}
	}
	return first, last, nil
}

// MaxLocalBlock bounds the block length b, MaxSegments the segment count
// k and MaxReach the reach r, so that a corrupt attribute cannot request
// huge buffers.
const (
	MaxLocalBlock = 1 << 16
	MaxSegments   = 1 << 16
	MaxReach      = 64
)

// NoReach is the LocalPooledAttrs.Reach that selects r = 0.
const NoReach = -1

// reach resolves Reach: 0 → 1 (the default), NoReach → 0.
func (a LocalPooledAttrs) reach() int {
	switch a.Reach {
	case 0:
		return 1
	case NoReach:
		return 0
	}
	return a.Reach
}

// farBias returns β of head h.
func (a LocalPooledAttrs) farBias(h int) float64 {
	switch len(a.FarBias) {
	case 0:
		return 0
	case 1:
		return float64(a.FarBias[0])
	}
	return float64(a.FarBias[h])
}

// ParseLocalPooledAttrs reads the attributes of a LocalPooledAttention
// node (the Go kernel and the fine-tuner read them the same way).
func ParseLocalPooledAttrs(n *onnxpb.NodeProto) (LocalPooledAttrs, error) {
	var a LocalPooledAttrs
	a.Scale = onnx.AttrFloat(n, "scale", 0)
	a.Block = int(onnx.AttrInt(n, "block", 0))
	a.Segments = int(onnx.AttrInt(n, "segments", 0))
	switch r := onnx.AttrInt(n, "reach", 1); {
	case r == 0:
		a.Reach = NoReach
	case r < 0 || r > MaxReach:
		return a, fmt.Errorf("ops: %s: reach %d, want 0..%d", LocalPooledOp, r, MaxReach)
	default:
		a.Reach = int(r)
	}
	if at := onnx.Attr(n, "far_bias"); at != nil {
		a.FarBias = append([]float32(nil), at.Floats...)
	}
	var err error
	a.SinkFirst, a.SinkLast, err = ParseSinks(onnx.AttrString(n, "sinks", "none"))
	return a, err
}

func (a LocalPooledAttrs) check() error {
	if a.Block < 0 || a.Block > MaxLocalBlock {
		return fmt.Errorf("ops: %s: block %d, want 0..%d", LocalPooledOp, a.Block, MaxLocalBlock)
	}
	if a.Segments < 0 || a.Segments > MaxSegments || (a.Segments == 0 && a.Block == 0) {
		return fmt.Errorf("ops: %s: segments %d, want 1..%d (0 only with a block)", LocalPooledOp, a.Segments, MaxSegments)
	}
	if math.IsNaN(float64(a.Scale)) || math.IsInf(float64(a.Scale), 0) {
		return fmt.Errorf("ops: %s: scale %g must be finite", LocalPooledOp, a.Scale)
	}
	if a.Reach < NoReach || a.Reach > MaxReach {
		return fmt.Errorf("ops: %s: reach %d, want 0..%d", LocalPooledOp, a.Reach, MaxReach)
	}
	if len(a.FarBias) > MaxSegments {
		return fmt.Errorf("ops: %s: %d far_bias values, want one or one per head", LocalPooledOp, len(a.FarBias))
	}
	for _, f := range a.FarBias {
		if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
			return fmt.Errorf("ops: %s: far_bias %g must be finite", LocalPooledOp, f)
		}
	}
	return nil
}

func init() {
	Register(Domain, LocalPooledOp, 1, halfWidened(localPooledKernel))
}

func localPooledKernel(ctx *Context, in []*onnx.Tensor) ([]*onnx.Tensor, error) {
	bias, err := attentionBias(ctx, LocalPooledOp, in, 3)
	if err != nil {
		return nil, err
	}
	var a LocalPooledAttrs
	if ctx != nil && ctx.Node != nil {
		if a, err = ParseLocalPooledAttrs(ctx.Node); err != nil {
			return nil, fmt.Errorf("%w (%s)", err, nodeName(ctx))
		}
		a.Threads = ctx.Threads
	}
	out, err := LocalPooled(in[0], in[1], in[2], bias, a)
	return attentionOut(ctx, out, err)
}

// LocalPooled computes LocalPooledAttention in float32 with float64 sums
// (see the op's definition above). bias may be nil (every key valid).
func LocalPooled(q, k, v, bias *onnx.Tensor, a LocalPooledAttrs) (*onnx.Tensor, error) {
	const op = LocalPooledOp
	if err := a.check(); err != nil {
		return nil, err
	}
	b, h, sk, d, dv, err := selfAttnDims(op, q, k, v)
	if err != nil {
		return nil, err
	}
	if len(a.FarBias) > 1 && len(a.FarBias) != h {
		return nil, fmt.Errorf("ops: %s: %d far_bias values for %d heads, want one or one per head", op, len(a.FarBias), h)
	}
	n := sk // attnDims bounded the output [b, h, n, dv]
	mask, err := newKeyMask(op, bias, b, n)
	if err != nil {
		return nil, err
	}
	scale := resolveScale(a.Scale, d)
	kk, blk, r := a.Segments, a.Block, a.reach()
	nb := 1
	if blk > 0 {
		nb = (n + blk - 1) / blk
	}
	qd, kd, vd := q.Floats(), k.Floats(), v.Floats()
	out := make([]float32, b*h*n*dv)

	// The layout of keys (validity, sinks, segments) depends on the batch
	// only; compute it once per sequence.
	type layout struct {
		sinks []int   // sink positions, in order first, last
		seg   []int   // segment of each key, −1 for sinks and padding
		total []int   // keys per segment
		block [][]int // [block][segment] non-sink keys of the segment in the block
	}
	lays := make([]layout, b)
	for bi := range lays {
		lay := &lays[bi]
		// finetune/localpooled.go's newLayout repeats this loop (this one is
		// unexported and reads the op's mask); a finetune test checks both agree.
		first, last := -1, -1
		for j := 0; j < n; j++ {
			if _, ok := mask.at(bi, j); ok {
				if first < 0 {
					first = j
				}
				last = j
			}
		}
		if a.SinkFirst && first >= 0 {
			lay.sinks = append(lay.sinks, first)
		}
		if a.SinkLast && last >= 0 && !(a.SinkFirst && last == first) {
			lay.sinks = append(lay.sinks, last)
		}
		lay.seg = make([]int, n)
		m := 0
		for j := 0; j < n; j++ {
			lay.seg[j] = -1
			if _, ok := mask.at(bi, j); ok && !isSink(lay.sinks, j) {
				m++
			}
		}
		lay.total = make([]int, kk)
		r := 0
		for j := 0; j < n; j++ {
			if _, ok := mask.at(bi, j); ok && !isSink(lay.sinks, j) {
				c := 0 // with no segments, 0 only marks a valid non-sink key
				if kk > 0 {
					c = r * kk / m
					lay.total[c]++
				}
				lay.seg[j] = c
				r++
			}
		}
		if blk > 0 {
			lay.block = make([][]int, nb)
			for B := range lay.block {
				lay.block[B] = make([]int, kk)
			}
			for j, c := range lay.seg {
				if c >= 0 && kk > 0 {
					lay.block[j/blk][c]++
				}
			}
		}
	}

	parallel(b*h, a.Threads, func(bh int) {
		bi := bh / h
		beta := a.farBias(bh % h)
		lay := &lays[bi]
		kh := kd[bh*n*d : (bh+1)*n*d]
		vh := vd[bh*n*dv : (bh+1)*n*dv]
		qh := qd[bh*n*d : (bh+1)*n*d]
		oh := out[bh*n*dv : (bh+1)*n*dv]

		// Segment means.
		ksum := make([]float64, kk*d)
		vsum := make([]float64, kk*dv)
		for j, c := range lay.seg {
			if c < 0 || kk == 0 {
				continue
			}
			for t := 0; t < d; t++ {
				ksum[c*d+t] += float64(kh[j*d+t])
			}
			for t := 0; t < dv; t++ {
				vsum[c*dv+t] += float64(vh[j*dv+t])
			}
		}
		kbar := make([]float32, kk*d)
		vbar := make([]float32, kk*dv)
		for c, cnt := range lay.total {
			if cnt == 0 {
				continue
			}
			inv := 1 / float64(cnt)
			for t := 0; t < d; t++ {
				kbar[c*d+t] = float32(ksum[c*d+t] * inv)
			}
			for t := 0; t < dv; t++ {
				vbar[c*dv+t] = float32(vsum[c*dv+t] * inv)
			}
		}
		// Pooled scores of every query: scale·Q·K̄ᵀ [n, k].
		pooled := make([]float32, n*kk)
		if kk > 0 {
			gemm.Sgemm(false, true, n, kk, d, scale, qh, d, kbar, d, 0, pooled, kk, 1)
		}

		ns := len(lay.sinks)
		cnt := make([]int, kk)
		w := (2*r + 1) * blk
		local := make([]float32, max(blk, 1)*w)
		sinkS := make([]float64, ns)
		acc := make([]float64, dv)
		for B := 0; B < nb; B++ {
			i0, i1 := 0, n
			lo, hi := 0, 0
			if blk > 0 {
				i0, i1 = B*blk, min(n, (B+1)*blk)
				lo, hi = max(0, (B-r)*blk), min(n, (B+r+1)*blk)
			}
			for c := range cnt {
				cnt[c] = lay.total[c]
				if blk > 0 {
					for bb := max(0, B-r); bb <= min(nb-1, B+r); bb++ {
						cnt[c] -= lay.block[bb][c]
					}
				}
			}
			if hi > lo {
				gemm.Sgemm(false, true, i1-i0, hi-lo, d, scale, qh[i0*d:], d, kh[lo*d:], d, 0, local, hi-lo, 1)
			}
			for i := i0; i < i1; i++ {
				row := local[(i-i0)*(hi-lo) : (i-i0+1)*(hi-lo)]
				top := math.Inf(-1)
				for j := lo; j < hi; j++ {
					if lay.seg[j] >= 0 {
						top = max(top, float64(row[j-lo]))
					}
				}
				for s, j := range lay.sinks {
					var dot float64
					for t := 0; t < d; t++ {
						dot += float64(qh[i*d+t]) * float64(kh[j*d+t])
					}
					sinkS[s] = float64(scale) * dot
					top = max(top, sinkS[s])
				}
				prow := pooled[i*kk : (i+1)*kk]
				for c := range cnt {
					if cnt[c] > 0 {
						top = max(top, float64(prow[c])+math.Log(float64(cnt[c]))+beta)
					}
				}
				if math.IsInf(top, -1) {
					continue // no valid key: zeros
				}
				clear(acc)
				var den float64
				add := func(e float64, val []float32) {
					den += e
					for t := range acc {
						acc[t] += e * float64(val[t])
					}
				}
				for j := lo; j < hi; j++ {
					if lay.seg[j] >= 0 {
						add(math.Exp(float64(row[j-lo])-top), vh[j*dv:(j+1)*dv])
					}
				}
				for s, j := range lay.sinks {
					add(math.Exp(sinkS[s]-top), vh[j*dv:(j+1)*dv])
				}
				for c := range cnt {
					if cnt[c] > 0 {
						add(math.Exp(float64(prow[c])+math.Log(float64(cnt[c]))+beta-top), vbar[c*dv:(c+1)*dv])
					}
				}
				for t := range acc {
					oh[i*dv+t] = float32(acc[t] / den)
				}
			}
		}
	})
	return onnx.NewFloat([]int{b, h, n, dv}, out), nil
}

func isSink(sinks []int, j int) bool {
	for _, s := range sinks {
		if s == j {
			return true
		}
	}
	return false
}

// NewLocalPooledNode returns a LocalPooledAttention node reading inputs
// (Q, K, V, key_bias) and writing output, with every attribute set
// explicitly (Scale must not be zero).
func NewLocalPooledNode(name string, inputs []string, output string, a LocalPooledAttrs) *onnxpb.NodeProto {
	n := &onnxpb.NodeProto{
		Name:   proto.String(name),
		OpType: proto.String(LocalPooledOp),
		Domain: proto.String(Domain),
		Input:  append([]string(nil), inputs...),
		Output: []string{output},
		Attribute: []*onnxpb.AttributeProto{
			attrFloat("scale", a.Scale),
			attrInt("block", int64(a.Block)),
			attrInt("segments", int64(a.Segments)),
			attrString("sinks", a.Sinks()),
			attrInt("reach", int64(a.reach())),
		},
	}
	if len(a.FarBias) > 0 {
		n.Attribute = append(n.Attribute, &onnxpb.AttributeProto{Name: proto.String("far_bias"), Type: onnxpb.AttributeProto_FLOATS.Enum(), Floats: append([]float32(nil), a.FarBias...)})
	}
	return n
}

// LocalPooledFunction returns the FunctionProto that defines
// LocalPooledAttention with standard ops of the default domain at opset
// (11..23). Block, Segments, Reach, FarBias and the sinks of a are built
// into the body (as
// Performer's kernel is): the function serves nodes with those attributes,
// which the node still carries for the Go kernel. Its inputs are Q, K, V,
// key_bias (all required) and its attribute scale is read from the node.
//
// The body keeps memory linear in S: queries are reshaped into blocks of b,
// the keys each block sees are its block and both neighbours concatenated
// ([B,H,S/b,3b,D]); the segment of every key comes from a CumSum of the
// valid non-sink keys, the means from a one-hot [S,k] product, and the
// per-block counts cnt from block sums of the one-hot. Masked entries score
// −1e30 and the softmax maximum is floored at −1e29, so a row without any
// valid entry divides zero by 1e-30 and gives zeros, as the Go kernel does.
func LocalPooledFunction(opset int64, a LocalPooledAttrs) (*onnxpb.FunctionProto, error) {
	if err := checkOpset(LocalPooledOp, opset); err != nil {
		return nil, err
	}
	if err := a.check(); err != nil {
		return nil, err
	}
	b := &fnBuilder{opset: opset}
	kk, blk, r := int64(a.Segments), int64(a.Block), int64(a.reach())
	// The scale multiplies Q once ([S,D]) instead of every score tensor
	// ([S,3b], [S,k], [S,sinks]): one pass over the smallest operand.
	scale := b.constFloatAttr("scale")
	qs := b.op("Mul", []string{"Q", scale})
	masked := b.constFloat(-1e30)
	zero := b.constFloat(0)
	one := b.constFloat(1)
	axis3 := b.constScalarInt(3)

	// Validity over the full key axis: [Bm,1,1,S].
	shapeK := b.op("Shape", []string{"K"})
	sLen := b.op("Slice", []string{shapeK, b.constInts(2), b.constInts(3)})
	dK := b.op("Slice", []string{shapeK, b.constInts(3), b.constInts(4)})
	dV := b.op("Slice", []string{b.op("Shape", []string{"V"}), b.constInts(3), b.constInts(4)})
	bm := b.op("Slice", []string{b.op("Shape", []string{"key_bias"}), b.constInts(0), b.constInts(1)})
	full := b.op("Concat", []string{bm, b.constInts(1, 1), sLen}, attrInt("axis", 0))
	valid := b.op("Expand", []string{b.op("Greater", []string{"key_bias", b.constFloat(maskThreshold)}), full})
	validT := b.transpose(valid, 0, 1, 3, 2) // [Bm,1,S,1]
	km := b.op("Where", []string{validT, "K", zero})
	vm := b.op("Where", []string{validT, "V", zero})
	pos := b.op("CumSum", []string{b.op("Expand", []string{one, full}), axis3}, attrInt("exclusive", 1))

	// Sinks.
	var sinkRows []string
	var isFirst string
	if a.SinkFirst {
		first := b.reduce("ReduceMin", b.op("Where", []string{valid, pos, b.constFloat(1e9)}), 3)
		isFirst = b.op("And", []string{b.op("Equal", []string{pos, first}), valid})
		sinkRows = append(sinkRows, isFirst)
	}
	if a.SinkLast {
		last := b.reduce("ReduceMax", b.op("Where", []string{valid, pos, b.constFloat(-1)}), 3)
		isLast := b.op("And", []string{b.op("Equal", []string{pos, last}), valid})
		if isFirst != "" {
			isLast = b.op("And", []string{isLast, b.op("Not", []string{isFirst})})
		}
		sinkRows = append(sinkRows, isLast)
	}
	ns := valid
	for _, r := range sinkRows {
		ns = b.op("And", []string{ns, b.op("Not", []string{r})})
	}
	nsF := b.op("Cast", []string{ns}, castFloat()) // [Bm,1,1,S]

	// Segments: rank among the non-sink valid keys, segment ⌊r·k/m⌋,
	// one-hot [Bm,1,S,k] and means [B,H,k,D] (none when k = 0).
	var onehot, total, kbarT, vbar string
	if kk > 0 {
		onehot, total, kbarT, vbar = b.segments(a.Segments, nsF, km, vm)
	}
	// logCount is log cnt (+ β) where cnt > 0, else the masked score;
	// β broadcasts over heads along axis 1 of a rank-rank score tensor.
	logCount := func(cnt string, rank int) string {
		lc := b.op("Log", []string{b.op("Max", []string{cnt, one})})
		switch len(a.FarBias) {
		case 0:
		case 1:
			lc = b.op("Add", []string{lc, b.constFloat(a.FarBias[0])})
		default:
			shape := make([]int, rank)
			for i := range shape {
				shape[i] = 1
			}
			shape[1] = len(a.FarBias)
			lc = b.op("Add", []string{lc, b.constFloatTensor(shape, a.FarBias)})
		}
		return b.op("Where", []string{b.op("Greater", []string{cnt, b.constFloat(0.5)}), lc, masked})
	}

	var ks, vs, sinkBias string
	if len(sinkRows) > 0 {
		var rows []string
		for _, r := range sinkRows {
			rows = append(rows, b.op("Cast", []string{r}, castFloat()))
		}
		sr := rows[0]
		if len(rows) > 1 {
			sr = b.op("Concat", rows, attrInt("axis", 2)) // [Bm,1,ns,S]
		}
		ks = b.op("MatMul", []string{sr, km}) // [B,H,ns,D]
		vs = b.op("MatMul", []string{sr, vm}) // [B,H,ns,Dv]
		present := b.op("Greater", []string{b.transpose(b.reduce("ReduceSum", sr, 3), 0, 1, 3, 2), b.constFloat(0.5)})
		sinkBias = b.op("Where", []string{present, zero, masked}) // [Bm,1,1,ns]
	}

	var parts []struct{ scores, values string }
	var anyValid string // with the local part alone: 1 where a block has a valid key
	axis := int64(3)    // the score axis
	if blk == 0 {
		sp := b.op("Add", []string{b.op("MatMul", []string{qs, kbarT}), logCount(total, 4)})
		parts = append(parts, struct{ scores, values string }{sp, vbar})
		if ks != "" {
			ss := b.op("Add", []string{b.op("MatMul", []string{qs, b.transpose(ks, 0, 1, 3, 2)}), sinkBias})
			parts = append(parts, struct{ scores, values string }{ss, vs})
		}
	} else {
		axis = 4
		// Pad S up to a multiple of b.
		bConst := b.constInts(blk)
		nb := b.op("Div", []string{b.op("Add", []string{sLen, b.constInts(blk - 1)}), bConst})
		padAmt := b.op("Sub", []string{b.op("Mul", []string{nb, bConst}), sLen})
		padS := b.op("Concat", []string{b.constInts(0, 0, 0, 0, 0, 0), padAmt, b.constInts(0)}, attrInt("axis", 0)) // axis 2 of rank 4
		padLast := b.op("Concat", []string{b.constInts(0, 0, 0, 0, 0, 0, 0), padAmt}, attrInt("axis", 0))           // axis 3 of rank 4
		blocks := func(x, width string) string {                                                                    // [.., P, W] -> [.., nb, b, W]
			return b.op("Reshape", []string{x, b.op("Concat", []string{b.constInts(0, 0, -1, blk), width}, attrInt("axis", 0))})
		}
		// shifted returns the 2r+1 copies of x (padded by r zeros on both
		// ends of axis) shifted by −r..r blocks along axis.
		shifted := func(x string, rank int, axis int64) []string {
			if r == 0 {
				return []string{x}
			}
			pads := make([]int64, 2*rank)
			pads[axis], pads[rank+int(axis)] = r, r
			p := b.op("Pad", []string{x, b.constInts(pads...)})
			ax := b.constInts(axis)
			var out []string
			for s := int64(0); s <= 2*r; s++ {
				end := s - 2*r
				if end == 0 {
					end = math.MaxInt64
				}
				out = append(out, b.op("Slice", []string{p, b.constInts(s), b.constInts(end), ax}))
			}
			return out
		}
		// window concatenates, along axis, the blocks within r of each
		// block of x (blocked along axis-1), with zeros beyond the ends.
		window := func(x string, rank int, axis int64) string {
			parts := shifted(x, rank, axis-1)
			if len(parts) == 1 {
				return parts[0]
			}
			return b.op("Concat", parts, attrInt("axis", axis))
		}
		qb := blocks(b.op("Pad", []string{qs, padS}), dK)                                                 // [B,H,nb,b,D]
		kwin := window(blocks(b.op("Pad", []string{km, padS}), dK), 5, 3)                                 // [B,H,nb,3b,D]
		vwin := window(blocks(b.op("Pad", []string{vm, padS}), dV), 5, 3)                                 // [B,H,nb,3b,Dv]
		nsb := b.op("Reshape", []string{b.op("Pad", []string{nsF, padLast}), b.constInts(0, 0, -1, blk)}) // [Bm,1,nb,b]
		nswin := b.op("Reshape", []string{window(nsb, 4, 3), b.constInts(0, 0, 0, 1, -1)})                // [Bm,1,nb,1,3b]
		localBias := b.op("Where", []string{b.op("Greater", []string{nswin, b.constFloat(0.5)}), zero, masked})
		if kk == 0 && len(sinkRows) == 0 {
			anyValid = b.reduce("ReduceMax", nswin, 4) // [Bm,1,nb,1,1]
		}
		sl := b.op("Add", []string{b.op("MatMul", []string{qb, b.transpose(kwin, 0, 1, 2, 4, 3)}), localBias})
		parts = append(parts, struct{ scores, values string }{sl, vwin})

		// cnt per query block: total minus the segment's keys in the
		// window (no pooled part when k = 0).
		if kk > 0 {
			ob := b.reduce("ReduceSum", b.op("Reshape", []string{b.op("Pad", []string{onehot, padS}), b.constInts(0, 0, -1, blk, kk)}), 3) // [Bm,1,nb,1,k]
			obr := b.op("Reshape", []string{ob, b.constInts(0, 0, 0, -1)})                                                                 // [Bm,1,nb,k]
			w := sumOf(b, shifted(obr, 4, 2))
			cnt := b.op("Sub", []string{total, w})                                                                               // [Bm,1,nb,k]
			logc := b.op("Reshape", []string{logCount(cnt, 4), b.constInts(0, 0, 0, 1, -1)})                                     // [B',H',nb,1,k]
			kbar5 := b.op("Reshape", []string{kbarT, b.constInts(0, 0, 1, -1, kk)})                                              // [B,H,1,D,k]
			vbar5 := b.op("Reshape", []string{vbar, b.op("Concat", []string{b.constInts(0, 0, 1, kk), dV}, attrInt("axis", 0))}) // [B,H,1,k,Dv]
			sp := b.op("Add", []string{b.op("MatMul", []string{qb, kbar5}), logc})
			parts = append(parts, struct{ scores, values string }{sp, vbar5})
		}
		if ks != "" {
			nsk := int64(len(sinkRows))
			ks5 := b.op("Reshape", []string{b.transpose(ks, 0, 1, 3, 2), b.constInts(0, 0, 1, -1, nsk)})
			vs5 := b.op("Reshape", []string{vs, b.op("Concat", []string{b.constInts(0, 0, 1, nsk), dV}, attrInt("axis", 0))})
			sb5 := b.op("Reshape", []string{sinkBias, b.constInts(0, 0, 1, 1, nsk)})
			ss := b.op("Add", []string{b.op("MatMul", []string{qb, ks5}), sb5})
			parts = append(parts, struct{ scores, values string }{ss, vs5})
		}
	}

	var res string
	if anyValid != "" {
		// The local part alone (convert long's default): onnxruntime's
		// Softmax in one pass over the scores; a block without any valid
		// key gives zeros.
		pr := b.op("Softmax", []string{parts[0].scores}, attrInt("axis", axis))
		res = b.op("Mul", []string{b.op("MatMul", []string{pr, parts[0].values}), anyValid})
	} else {
		res = b.jointSoftmax(parts, axis)
	}
	if blk > 0 {

		flat := b.op("Reshape", []string{res, b.op("Concat", []string{b.constInts(0, 0, -1), dV}, attrInt("axis", 0))})
		b.op("Slice", []string{flat, b.constInts(0), sLen, b.constInts(2)})
	} else {
		b.op("Identity", []string{res})
	}
	b.rename("out")
	return b.function(LocalPooledOp, localPooledDoc,
		[]string{"Q", "K", "V", "key_bias"}, []string{"out"},
		[]string{"scale", "block", "segments", "sinks"}, nil), nil
}

// segments emits the pooled far field's pieces for k segments: the
// one-hot [Bm,1,S,k] of each non-sink valid key's segment (rank r among m
// such keys → ⌊r·k/m⌋), the segment sizes [Bm,1,1,k], the mean keys
// transposed [B,H,D,k] and the mean values [B,H,k,Dv].
func (b *fnBuilder) segments(k int, nsF, km, vm string) (onehot, total, kbarT, vbar string) {
	one := b.constFloat(1)
	rank := b.op("CumSum", []string{nsF, b.constScalarInt(3)}, attrInt("exclusive", 1))
	mcount := b.op("Max", []string{b.reduce("ReduceSum", nsF, 3), one})
	seg := b.op("Floor", []string{b.op("Div", []string{b.op("Mul", []string{rank, b.constFloat(float32(k))}), mcount})})
	segIDs := make([]float32, k)
	for c := range segIDs {
		segIDs[c] = float32(c)
	}
	onehot = b.op("Mul", []string{
		b.op("Cast", []string{b.op("Equal", []string{b.transpose(seg, 0, 1, 3, 2), b.constFloatTensor([]int{k}, segIDs)})}, castFloat()),
		b.transpose(nsF, 0, 1, 3, 2),
	})
	onehotT := b.transpose(onehot, 0, 1, 3, 2)
	total = b.reduce("ReduceSum", onehot, 2)
	inv := b.op("Div", []string{one, b.op("Max", []string{b.transpose(total, 0, 1, 3, 2), one})})
	kbar := b.op("Mul", []string{b.op("MatMul", []string{onehotT, km}), inv})
	vbar = b.op("Mul", []string{b.op("MatMul", []string{onehotT, vm}), inv})
	return onehot, total, b.transpose(kbar, 0, 1, 3, 2), vbar
}

// jointSoftmax emits one softmax over every part's scores along axis (a
// shared maximum floored at −1e29, exps, sums) weighing each part's
// values, and returns the output.
func (b *fnBuilder) jointSoftmax(parts []struct{ scores, values string }, axis int64) string {
	maxes := []string{b.constFloat(-1e29)}
	for _, pt := range parts {
		maxes = append(maxes, b.reduce("ReduceMax", pt.scores, axis))
	}
	top := b.op("Max", maxes)
	var nums, dens []string
	for _, pt := range parts {
		e := b.op("Exp", []string{b.op("Sub", []string{pt.scores, top})})
		dens = append(dens, b.reduce("ReduceSum", e, axis))
		nums = append(nums, b.op("MatMul", []string{e, pt.values}))
	}
	dens = append(dens, b.constFloat(1e-30))
	return b.op("Div", []string{sumOf(b, nums), b.op("Sum", dens)})
}

func sumOf(b *fnBuilder, xs []string) string {
	if len(xs) == 1 {
		return xs[0]
	}
	return b.op("Sum", xs)
}

func castFloat() *onnxpb.AttributeProto { return attrInt("to", int64(onnx.Float)) }

// constScalarInt emits a rank-0 int64 constant.
func (b *fnBuilder) constScalarInt(v int64) string {
	return b.op("Constant", nil, attrTensor("value", onnx.NewInt64(nil, []int64{v})))
}

// constFloatTensor emits a float32 constant of the given shape.
func (b *fnBuilder) constFloatTensor(shape []int, v []float32) string {
	return b.op("Constant", nil, attrTensor("value", onnx.NewFloat(shape, v)))
}
