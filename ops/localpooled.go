package ops

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/linearize/linearize/internal/gemm"
	"github.com/linearize/linearize/kernels"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
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
// (floats, one or one per head; default 0), window_left and window_right
// (the band, below), alibi (floats, one slope per head; absent: none).
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
//   - with a band (window_left L ≥ 0 and window_right R ≥ 0, set
//     together), the exact set of query i keeps only the keys j with
//     −L ≤ j − i ≤ R; the band is the exact local part alone (segments 0,
//     sinks none) and lies inside the blocks (b·r ≥ max(L, R)), so the op
//     is softmax(scale·q·kᵀ + band)·v over the valid keys, band 0 inside
//     and −∞ outside: the sliding-window attention of ModernBERT's local
//     layers (L = R = 64) or of a causal window (R = 0), exactly, in
//     O(S·(2r+1)·b); a query with no valid key in its band gives zeros;
//   - cnt_ic is the number of keys of segment c outside that exact set;
//   - the scores are scale·q_i·k_j for j in the exact set and
//     scale·q_i·k̄_c + log cnt_ic + β_h for each segment with cnt_ic > 0,
//     where β_h is head h's far_bias (a gate on the far field: negative
//     values weigh the pooled keys less than the keys they stand for); one
//     softmax over all of them weighs v_j and v̄_c.
//
// ALiBi (jina-embeddings-v2, MPT, BLOOM: a per-head linear distance
// bias, here symmetric as bidirectional encoders use it) with slopes m_h:
//
//   - each exact score (local keys or band, and sinks) of query i and key
//     j gets −m_h·|i − j|, i and j the sequence positions (0-based,
//     padding included: the bias is by position index, as the original
//     model computes it), so a band with alibi is exactly the dense ALiBi
//     attention restricted to the band;
//   - each pooled score gets −m_h·|i − p̄_c|, p̄_c the mean position of
//     all the keys of segment c (as k̄_c is the mean of all its keys):
//     the bias at the segment's mean distance. This approximates the far
//     field's ALiBi (e^(−m·|i−j|) averaged over a segment is not
//     e^(−m·|i−p̄|)); it is exact when every segment holds one key, so with
//     k at least the non-sink valid keys the op is exact dense ALiBi
//     attention.
//
// A segment with cnt_ic keys scores as cnt_ic copies of its mean key would,
// so a distant region weighs as many keys as it stands for. When the
// non-sink valid keys are at most k (each segment then holds one key) or
// every key is in the exact set, the op is exact softmax attention.
// Cost per query: ((2r+1)·b + sinks + k)·(D + Dv) multiply-adds, plus k·(D + Dv)
// per key for the means; memory is linear in S. A sequence with no valid
// key gives zeros.
const localPooledDoc = "LocalPooledAttention: exact block-local and sink attention plus segment-mean pooled keys in one softmax, or exact sliding-window attention in a query-centred band (see github.com/linearize/linearize/ops)."

// LocalPooledOp is the op type of LocalPooledAttention.
const LocalPooledOp = "LocalPooledAttention"

// LocalPooledAttrs are the attributes of LocalPooledAttention.
type LocalPooledAttrs struct {
	// Scale multiplies q·k; zero selects 1/√D.
	Scale float32
	// Block is b, the length of the local blocks; 0 disables the local
	// part (only sinks and segments: what LinformerAttention's pooled
	// mode computes).
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
	// Band selects the query-centred band: query i attends exactly to the
	// valid keys j of its blocks with −WindowLeft ≤ j − i ≤ WindowRight
	// (attributes window_left and window_right; both 0..MaxLocalBlock,
	// WindowRight 0 is a causal window). It needs Segments 0, no sinks and
	// Block·reach ≥ max(WindowLeft, WindowRight). Without Band the two
	// widths are not written (the attributes keep their default NoWindow)
	// and must be 0 or NoWindow (ParseLocalPooledAttrs reads a node
	// without a band as Band false, both widths NoWindow).
	Band                    bool
	WindowLeft, WindowRight int
	// Alibi holds ALiBi's slopes m_h, one per head (attribute alibi; nil:
	// no ALiBi): each score of query i is lowered by m_h·|i − j|, j the
	// key's position (a pooled segment's: the mean position p̄_c of its
	// keys). Each slope is finite, 0..MaxAlibiSlope.
	Alibi []float32
	// Threads bounds the goroutines the Go kernel uses (not an attribute).
	Threads int
}

// Sinks returns the sinks attribute value: "none", "first", "last" or
// "first,last".
func (a LocalPooledAttrs) Sinks() string { return sinksValue(a.SinkFirst, a.SinkLast) }

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

// MaxAlibiSlope bounds an ALiBi slope. Models' slopes are below 1 (the
// geometric 2^(−8(h+1)/H)); the bound keeps every biased score far above
// the function body's mask (−1e30) for any sequence the ops can hold.
// Negative slopes, which would favour distant keys, are refused.
const MaxAlibiSlope = 1e4

// NoReach is the LocalPooledAttrs.Reach that selects r = 0.
const NoReach = -1

// NoWindow is the value of window_left and window_right (their default)
// on a node without a band.
const NoWindow = -1

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

// alibiSlope returns m of head h (0 without ALiBi).
func (a LocalPooledAttrs) alibiSlope(h int) float64 {
	if len(a.Alibi) == 0 {
		return 0
	}
	return float64(a.Alibi[h])
}

// Attribute docs shared with LinformerAttention's pooled mode.
const (
	segmentsDoc = "the valid non-sink keys fall into k contiguous segments (rank r of m in ⌊r·k/m⌋), each scored by its mean key with a log-count correction"
	sinksDoc    = "keys kept exact for every query: the first and/or last valid key"
)

// localPooledSchema is LocalPooledAttention's schema.
var localPooledSchema = newSchema(OpSchema{
	Op: LocalPooledOp, Doc: localPooledDoc, File: "ops/localpooled.go",
	Inputs: qkvInputs(selfQKV, keyBiasInput),
	Output: "[B,H,S,Dv]",
}, func(a *LocalPooledAttrs) *int { return &a.Threads },
	scaleField(scaleDoc, func(a *LocalPooledAttrs) *float32 { return &a.Scale }),
	intField(AttrSchema{Name: "block", Default: int64(0), Min: 0, Max: MaxLocalBlock,
		Doc: "b: a query attends exactly to the keys of its block of b positions and of reach blocks on each side; 0: no local part"}, func(a *LocalPooledAttrs) *int { return &a.Block }),
	intField(AttrSchema{Name: "segments", Default: int64(0), Min: 0, Max: MaxSegments,
		Doc: "k: " + segmentsDoc + "; 0 (only with a block): no pooled far field"}, func(a *LocalPooledAttrs) *int { return &a.Segments }),
	sinksField(sinksDoc, func(a *LocalPooledAttrs) (*bool, *bool) { return &a.SinkFirst, &a.SinkLast }),
	field[LocalPooledAttrs]{
		AttrSchema: AttrSchema{Name: "reach", Type: AttrInt, Default: int64(1), Min: 0, Max: MaxReach,
			Doc: "r: blocks on each side of the query's block attended exactly (0: the block alone)"},
		get: func(a *LocalPooledAttrs) any { return int64(a.reach()) },
		set: func(a *LocalPooledAttrs, v any) {
			a.Reach = int(v.(int64))
			if a.Reach == 0 {
				a.Reach = NoReach
			}
		},
	},
	floatsField(AttrSchema{Name: "far_bias", Doc: "β added to every pooled score: one value, or one per head (absent: 0)"}, func(a *LocalPooledAttrs) *[]float32 { return &a.FarBias }),
	windowField("window_left", "L: with window_right, a query-centred band: query i attends only to keys j with −L ≤ j − i ≤ R (exact sliding-window attention; needs segments 0, sinks none and block·reach ≥ max(L, R)); −1: no band", func(a *LocalPooledAttrs) *int { return &a.WindowLeft }),
	windowField("window_right", "R: the band's right width (0: a causal window); set with window_left; −1: no band", func(a *LocalPooledAttrs) *int { return &a.WindowRight }),
	floatsField(AttrSchema{Name: "alibi", Doc: alibiDoc}, func(a *LocalPooledAttrs) *[]float32 { return &a.Alibi }),
)

// alibiSlopesDoc begins the alibi attribute's doc of LocalPooledAttention
// (alibiDoc) and WindowAttention.
const alibiSlopesDoc = "ALiBi slopes m_h, one per head, each 0..1e4 (absent: no ALiBi)"

// alibiDoc is LocalPooledAttention's alibi attribute.
const alibiDoc = alibiSlopesDoc + ": every exact score of query i gets −m_h·abs(i − j) (j the key's position, padding included); a pooled segment's score gets −m_h·abs(i − p̄_c), p̄_c the mean position of its keys (an approximation, exact for one-key segments)"

// checkAlibi checks the ALiBi slopes of op (the count against the heads
// is checked with the input, localPooled).
func checkAlibi(op string, slopes []float32) error {
	if len(slopes) > MaxSegments {
		return fmt.Errorf("ops: %s: %d alibi slopes, want one per head", op, len(slopes))
	}
	for h, m := range slopes {
		if !(m >= 0 && m <= MaxAlibiSlope) { // NaN fails both
			return fmt.Errorf("ops: %s: alibi slope %g of head %d, want a finite value 0..%g", op, m, h, float64(MaxAlibiSlope))
		}
	}
	return nil
}

// windowField binds window_left or window_right: written only with a
// band; a value ≥ 0 read from a node selects the band.
func windowField(name, doc string, p func(*LocalPooledAttrs) *int) field[LocalPooledAttrs] {
	return field[LocalPooledAttrs]{
		AttrSchema: AttrSchema{Name: name, Type: AttrInt, Default: int64(NoWindow), Min: NoWindow, Max: MaxLocalBlock, Doc: doc},
		get: func(a *LocalPooledAttrs) any {
			if !a.Band {
				return int64(NoWindow)
			}
			return int64(*p(a))
		},
		set: func(a *LocalPooledAttrs, v any) {
			*p(a) = int(v.(int64))
			if *p(a) >= 0 {
				a.Band = true
			}
		},
	}
}

// ParseLocalPooledAttrs reads the attributes of a LocalPooledAttention
// node (the Go kernel and the fine-tuner read them the same way).
func ParseLocalPooledAttrs(n *onnxpb.NodeProto) (LocalPooledAttrs, error) {
	return localPooledSchema.parse(n)
}

func (a LocalPooledAttrs) check() error {
	if err := localPooledSchema.check(&a); err != nil {
		return err
	}
	if a.Segments == 0 && a.Block == 0 {
		return fmt.Errorf("ops: %s: segments %d, want 1..%d (0 only with a block)", LocalPooledOp, a.Segments, MaxSegments)
	}
	if len(a.FarBias) > MaxSegments {
		return fmt.Errorf("ops: %s: %d far_bias values, want one or one per head", LocalPooledOp, len(a.FarBias))
	}
	if err := checkAlibi(LocalPooledOp, a.Alibi); err != nil {
		return err
	}
	return a.checkBand()
}

// checkBand checks the band's widths against the other attributes.
func (a LocalPooledAttrs) checkBand() error {
	L, R := a.WindowLeft, a.WindowRight
	if !a.Band {
		if (L != 0 && L != NoWindow) || (R != 0 && R != NoWindow) {
			return fmt.Errorf("ops: %s: window_left %d and window_right %d without Band (set Band to use a band)", LocalPooledOp, L, R)
		}
		return nil
	}
	switch {
	case L < 0 || R < 0:
		return fmt.Errorf("ops: %s: window_left %d and window_right %d: a band needs both, each 0..%d", LocalPooledOp, L, R, MaxLocalBlock)
	case a.Segments > 0:
		return fmt.Errorf("ops: %s: a band (window_left %d, window_right %d) is the exact local part alone: segments %d, want 0", LocalPooledOp, L, R, a.Segments)
	case a.SinkFirst || a.SinkLast:
		return fmt.Errorf("ops: %s: a band (window_left %d, window_right %d) is the exact local part alone: sinks %q, want none", LocalPooledOp, L, R, a.Sinks())
	case a.Block*a.reach() < max(L, R):
		return fmt.Errorf("ops: %s: block %d × reach %d = %d does not cover the band (window_left %d, window_right %d): want block·reach ≥ %d", LocalPooledOp, a.Block, a.reach(), a.Block*a.reach(), L, R, max(L, R))
	}
	return nil
}

func init() {
	localPooledSchema.register(func(a LocalPooledAttrs, in []*onnx.Tensor) (*onnx.Tensor, error) {
		return LocalPooled(in[0], in[1], in[2], in[3], a)
	})
}

// LocalPooled computes LocalPooledAttention in float32 with float64 sums
// (see the op's definition above). bias may be nil (every key valid).
func LocalPooled(q, k, v, bias *onnx.Tensor, a LocalPooledAttrs) (*onnx.Tensor, error) {
	if err := a.check(); err != nil {
		return nil, err
	}
	return localPooled(LocalPooledOp, q, k, v, bias, a)
}

// localPooled computes a checked LocalPooledAttention for op: the op
// itself, or LinformerAttention's pooled mode (Block 0), whose queries may
// be another sequence than its keys.
func localPooled(op string, q, k, v, bias *onnx.Tensor, a LocalPooledAttrs) (*onnx.Tensor, error) {
	b, h, sq, n, d, dv, err := attnDims(op, q, k, v)
	if err != nil {
		return nil, err
	}
	if sq != n && (op == LocalPooledOp || a.Block > 0) {
		return nil, fmt.Errorf("ops: %s: %d queries and %d keys: the op is self-attention (the same positions)", op, sq, n)
	}
	if len(a.FarBias) > 1 && len(a.FarBias) != h {
		return nil, fmt.Errorf("ops: %s: %d far_bias values for %d heads, want one or one per head", op, len(a.FarBias), h)
	}
	if len(a.Alibi) > 0 && len(a.Alibi) != h {
		return nil, fmt.Errorf("ops: %s: %d alibi slopes for %d heads, want one per head", op, len(a.Alibi), h)
	}
	if len(a.Alibi) > 0 && sq != n {
		return nil, fmt.Errorf("ops: %s: alibi needs self-attention (%d queries, %d keys)", op, sq, n)
	}
	mask, err := newKeyMask(op, bias, b, n)
	if err != nil {
		return nil, err
	}
	scale := resolveScale(a.Scale, d)
	lays := make([]LocalPooledLayout, b)
	valid := make([]bool, n)
	for bi := range lays {
		for j := range valid {
			_, valid[j] = mask.at(bi, j)
		}
		lays[bi] = NewLocalPooledLayout(valid, a)
	}
	qd, kd, vd := q.Floats(), k.Floats(), v.Floats()
	out := make([]float32, b*h*sq*dv)
	kernels.Parallel(b*h, a.Threads, func(bh int) {
		p := lpHead{
			a: &a, lay: &lays[bh/h], beta: a.farBias(bh % h), slope: a.alibiSlope(bh % h), scale: scale, sq: sq, n: n, d: d, dv: dv,
			qh: qd[bh*sq*d : (bh+1)*sq*d], kh: kd[bh*n*d : (bh+1)*n*d], vh: vd[bh*n*dv : (bh+1)*n*dv],
		}
		p.run(out[bh*sq*dv : (bh+1)*sq*dv])
	})
	return onnx.NewFloat([]int{b, h, sq, dv}, out), nil
}

// LocalPooledLayout is how LocalPooledAttention lays out the keys of one
// sequence: what their validity decides (sinks, segments, counts), not
// their values. The Go kernel and the fine-tuner (package finetune) share
// it.
type LocalPooledLayout struct {
	Sinks []int   // sink positions, in order first, last
	Seg   []int   // segment of each key, −1 for sinks and padding
	Total []int   // keys per segment
	Block [][]int // [block][segment] non-sink keys of the segment in the block (nil without blocks or segments)
	// Pos is the mean position p̄_c of each segment's keys (ALiBi's
	// distance to a segment; 0 for an empty segment).
	Pos []float64
}

// NewLocalPooledLayout lays out the keys of one sequence for a: valid[j]
// reports whether key j is valid (not padding). Without segments, Seg is 0
// for a valid non-sink key.
func NewLocalPooledLayout(valid []bool, a LocalPooledAttrs) LocalPooledLayout {
	var lay LocalPooledLayout
	n := len(valid)
	first, last := validEnds(valid)
	if a.SinkFirst && first >= 0 {
		lay.Sinks = append(lay.Sinks, first)
	}
	if a.SinkLast && last >= 0 && !(a.SinkFirst && last == first) {
		lay.Sinks = append(lay.Sinks, last)
	}
	kk := a.Segments
	lay.Seg = make([]int, n)
	m := 0
	for j, ok := range valid {
		lay.Seg[j] = -1
		if ok && !slices.Contains(lay.Sinks, j) {
			m++
		}
	}
	lay.Total = make([]int, kk)
	r := 0
	for j, ok := range valid {
		if ok && !slices.Contains(lay.Sinks, j) {
			c := 0 // with no segments, 0 only marks a valid non-sink key
			if kk > 0 {
				c = r * kk / m
				lay.Total[c]++
			}
			lay.Seg[j] = c
			r++
		}
	}
	lay.Pos = make([]float64, kk)
	for j, c := range lay.Seg {
		if c >= 0 && kk > 0 {
			lay.Pos[c] += float64(j)
		}
	}
	for c, n := range lay.Total {
		if n > 0 {
			lay.Pos[c] /= float64(n)
		}
	}
	if blk := a.Block; blk > 0 && kk > 0 {
		lay.Block = make([][]int, (n+blk-1)/blk)
		for B := range lay.Block {
			lay.Block[B] = make([]int, kk)
		}
		for j, c := range lay.Seg {
			if c >= 0 {
				lay.Block[j/blk][c]++
			}
		}
	}
	return lay
}

// validEnds returns the first and the last valid key (−1 when there is
// none).
func validEnds(valid []bool) (first, last int) {
	first, last = -1, -1
	for j, ok := range valid {
		if ok {
			if first < 0 {
				first = j
			}
			last = j
		}
	}
	return first, last
}

// FarCounts sets cnt[c] to the keys of segment c outside the blocks within
// r of block B (all of them without blocks).
func (lay *LocalPooledLayout) FarCounts(B, r int, cnt []int) {
	copy(cnt, lay.Total)
	if lay.Block == nil {
		return
	}
	for bb := max(0, B-r); bb <= min(len(lay.Block)-1, B+r); bb++ {
		for c := range cnt {
			cnt[c] -= lay.Block[bb][c]
		}
	}
}

// lpHead is one (batch, head) of LocalPooledAttention: its queries
// (sq rows), keys and values (n rows), layout and scratch.
type lpHead struct {
	a                *LocalPooledAttrs
	lay              *LocalPooledLayout
	beta, slope      float64 // far_bias β and ALiBi slope m of the head
	scale            float32
	sq, n, d, dv     int
	qh, kh, vh       []float32
	kbar, vbar       []float32 // segment means [k, D], [k, Dv]
	pooled           []float32 // scale·Q·K̄ᵀ [sq, k]
	cnt              []int     // far keys per segment of the current block
	sinkS, acc       []float64
	local            []float32 // exact scores of the current block
	lo, hi           int       // the keys of the current block's window
	blocks, blk, rch int
}

// run writes the head's output [sq, Dv] into oh.
func (p *lpHead) run(oh []float32) {
	kk := p.a.Segments
	p.blk, p.rch = p.a.Block, p.a.reach()
	p.segmentMeans()
	p.pooled = make([]float32, p.sq*kk)
	if kk > 0 {
		gemm.Sgemm(false, true, p.sq, kk, p.d, p.scale, p.qh, p.d, p.kbar, p.d, 0, p.pooled, kk, 1)
	}
	p.cnt = make([]int, kk)
	p.sinkS = make([]float64, len(p.lay.Sinks))
	p.acc = make([]float64, p.dv)
	p.blocks = 1
	if p.blk > 0 {
		p.blocks = (p.n + p.blk - 1) / p.blk
		p.local = make([]float32, p.blk*(2*p.rch+1)*p.blk)
	}
	for B := 0; B < p.blocks; B++ {
		i0, i1 := 0, p.sq
		p.lo, p.hi = 0, 0
		if p.blk > 0 {
			i0, i1 = B*p.blk, min(p.n, (B+1)*p.blk)
			p.lo, p.hi = max(0, (B-p.rch)*p.blk), min(p.n, (B+p.rch+1)*p.blk)
		}
		p.lay.FarCounts(B, p.rch, p.cnt)
		w := p.hi - p.lo
		if w > 0 {
			gemm.Sgemm(false, true, i1-i0, w, p.d, p.scale, p.qh[i0*p.d:], p.d, p.kh[p.lo*p.d:], p.d, 0, p.local, w, 1)
		}
		for i := i0; i < i1; i++ {
			p.row(i, p.local[(i-i0)*w:(i-i0+1)*w], oh[i*p.dv:(i+1)*p.dv])
		}
	}
}

// segmentMeans computes k̄ and v̄ of every segment (float64 sums).
func (p *lpHead) segmentMeans() {
	kk, d, dv := p.a.Segments, p.d, p.dv
	ksum := make([]float64, kk*d)
	vsum := make([]float64, kk*dv)
	for j, c := range p.lay.Seg {
		if c < 0 || kk == 0 {
			continue
		}
		for t := 0; t < d; t++ {
			ksum[c*d+t] += float64(p.kh[j*d+t])
		}
		for t := 0; t < dv; t++ {
			vsum[c*dv+t] += float64(p.vh[j*dv+t])
		}
	}
	p.kbar = make([]float32, kk*d)
	p.vbar = make([]float32, kk*dv)
	for c, cnt := range p.lay.Total {
		if cnt == 0 {
			continue
		}
		inv := 1 / float64(cnt)
		for t := 0; t < d; t++ {
			p.kbar[c*d+t] = float32(ksum[c*d+t] * inv)
		}
		for t := 0; t < dv; t++ {
			p.vbar[c*dv+t] = float32(vsum[c*dv+t] * inv)
		}
	}
}

// row computes query i's output o from its exact scores row (keys
// p.lo..p.hi), the sinks and the far segments: one softmax (o stays zero
// without any valid key). With ALiBi every score is lowered by
// m·|i − j|, a segment's by m·|i − p̄_c|.
func (p *lpHead) row(i int, row []float32, o []float32) {
	lay, d, kk := p.lay, p.d, p.a.Segments
	// The exact keys: the window of blocks, narrowed to the band.
	lo, hi := p.lo, p.hi
	if p.a.Band {
		lo, hi = max(lo, i-p.a.WindowLeft), min(hi, i+p.a.WindowRight+1)
	}
	m, fi := p.slope, float64(i)
	exact := func(j int) float64 { return float64(row[j-p.lo]) - m*math.Abs(fi-float64(j)) }
	prow := p.pooled[i*kk : (i+1)*kk]
	far := func(c, n int) float64 {
		return float64(prow[c]) + math.Log(float64(n)) + p.beta - m*math.Abs(fi-lay.Pos[c])
	}
	top := math.Inf(-1)
	for j := lo; j < hi; j++ {
		if lay.Seg[j] >= 0 {
			top = max(top, exact(j))
		}
	}
	for s, j := range lay.Sinks {
		var dot float64
		for t := 0; t < d; t++ {
			dot += float64(p.qh[i*d+t]) * float64(p.kh[j*d+t])
		}
		p.sinkS[s] = float64(p.scale)*dot - m*math.Abs(fi-float64(j))
		top = max(top, p.sinkS[s])
	}
	for c, n := range p.cnt {
		if n > 0 {
			top = max(top, far(c, n))
		}
	}
	if math.IsInf(top, -1) {
		return // no valid key: zeros
	}
	acc, dv := p.acc, p.dv
	clear(acc)
	var den float64
	add := func(e float64, val []float32) {
		den += e
		for t := range acc {
			acc[t] += e * float64(val[t])
		}
	}
	for j := lo; j < hi; j++ {
		if lay.Seg[j] >= 0 {
			add(math.Exp(exact(j)-top), p.vh[j*dv:(j+1)*dv])
		}
	}
	for s, j := range lay.Sinks {
		add(math.Exp(p.sinkS[s]-top), p.vh[j*dv:(j+1)*dv])
	}
	for c, n := range p.cnt {
		if n > 0 {
			add(math.Exp(far(c, n)-top), p.vbar[c*dv:(c+1)*dv])
		}
	}
	for t := range acc {
		o[t] = float32(acc[t] / den)
	}
}

// NewLocalPooledNode returns a LocalPooledAttention node reading inputs
// (Q, K, V, key_bias) and writing output, with the attributes of a that
// differ from their defaults (Scale is always written and must not be
// zero).
func NewLocalPooledNode(name string, inputs []string, output string, a LocalPooledAttrs) *onnxpb.NodeProto {
	return localPooledSchema.node(name, inputs, output, &a)
}

// LocalPooledFunction returns the FunctionProto that defines
// LocalPooledAttention with standard ops of the default domain at opset
// (11..23). Block, Segments, Reach, FarBias, the sinks, the band
// (WindowLeft, WindowRight) and the ALiBi slopes (Alibi, a [1,H,1,1,1]
// constant: the body serves H heads, as with per-head far_bias) of a are
// built into the body (as Performer's kernel is): the function serves
// nodes with those attributes, which the node still carries for the Go
// kernel. Its inputs are Q, K, V, key_bias (all required) and its
// attribute scale is read from the node.
//
// The body keeps memory linear in S: queries are reshaped into blocks of b,
// the keys each block sees are its block and both neighbours concatenated
// ([B,H,S/b,3b,D]); the segment of every key comes from a CumSum of the
// valid non-sink keys, the means from a one-hot [S,k] product, and the
// per-block counts cnt from block sums of the one-hot. Masked entries score
// −1e30 and the softmax maximum is floored at −1e29, so a row without any
// valid entry divides zero by 1e-30 and gives zeros, as the Go kernel does.
// A band masks the window's scores with a [b,(2r+1)b] mask of j − i built
// by Range (no [S,S] tensor) and zeroes each query without a valid key in
// its band. ALiBi adds −m_h·|j − i| from the same [b,(2r+1)b] offsets to
// the window's scores; the segments' mean positions p̄ come at run time
// from the one-hot segment matrix (positions·one-hot / count, [k]) and
// the sinks' from their one-hot rows, each against the query positions
// ([nb,b,k] and [nb,b,sinks] distances, or [S,k] and [S,sinks] without
// blocks). The body adds the bias in float32 where the Go kernel adds it
// in float64: a query whose every key is Δ positions away or more (one
// far past a long padding run, whose output is discarded) keeps about
// 6e-8·m·Δ relative precision in its weights.
func LocalPooledFunction(opset int64, a LocalPooledAttrs) (*onnxpb.FunctionProto, error) {
	return localPooledFunction(localPooledSchema, localPooledDoc, opset, a.check, a)
}

// localPooledFunction returns the function of the op of s (doc its doc
// line) at opset whose body is LocalPooledAttention's for lp, after
// checking opset and then the op's attributes (check): LocalPooledFunction,
// WindowFunction and the pooled LinformerFunctionFor.
func localPooledFunction[A any](s *schema[A], doc string, opset int64, check func() error, lp LocalPooledAttrs) (*onnxpb.FunctionProto, error) {
	b, err := newFnBuilder(s.Op, opset, check)
	if err != nil {
		return nil, err
	}
	b.localPooledBody(lp)
	return s.function(b, doc, len(s.Inputs)), nil
}

// scoredPart is one part of a joint softmax: scores and the values they
// weigh.
type scoredPart struct{ scores, values string }

// lpBody holds what the parts of the local-pooled body share.
type lpBody struct {
	*fnBuilder
	a                 LocalPooledAttrs
	qs                string // scale·Q
	masked, zero, one string
	sLen, dK, dV      string // S, D, Dv as [1]
	km, vm            string // K, V with padded rows zeroed
	nsF               string // [Bm,1,1,S]: 1 for the non-sink valid keys
	sinkRows          []string
	onehot, total     string // segments (see segments)
	kbarT, vbar       string
	ks, vs, sinkBias  string // sinks' keys, values and [Bm,1,1,ns] bias
	padS, padLast     string // blocked form (Block > 0)
	// ALiBi: pos [Bm,1,1,S] is each key's position (float), sinkPos
	// [Bm,1,ns,1] the sinks' positions and pbar [Bm,1,1,k] the segments'
	// mean positions (with Alibi only).
	pos, sinkPos, pbar string
	diff               string // band and ALiBi: [b,(2r+1)b] int64 j − i
}

// localPooledBody emits the body of LocalPooledAttention with the
// attributes a (also LinformerAttention's pooled mode, Block 0), reading
// Q, K, V and key_bias and writing out.
func (b *fnBuilder) localPooledBody(a LocalPooledAttrs) {
	p := &lpBody{fnBuilder: b, a: a}
	// The scale multiplies Q once ([S,D]) instead of every score tensor
	// ([S,3b], [S,k], [S,sinks]): one pass over the smallest operand.
	p.qs = b.op("Mul", []string{"Q", b.constFloatAttr("scale")})
	p.masked = b.constFloat(-1e30)
	p.zero = b.constFloat(0)
	p.one = b.constFloat(1)
	p.keys()
	if a.Segments > 0 {
		p.onehot, p.total, p.kbarT, p.vbar = b.segments(a.Segments, p.nsF, p.km, p.vm)
		if len(a.Alibi) > 0 {
			// p̄_c = Σ_j onehot_jc·j / |c| ([Bm,1,1,k]; 0 when empty).
			p.pbar = b.op("Div", []string{b.op("MatMul", []string{p.pos, p.onehot}), b.op("Max", []string{p.total, p.one})})
		}
	}
	p.sinks()
	if a.Block == 0 {
		// Without blocks (LinformerAttention's pooled mode, which has no
		// ALiBi, or LocalPooledAttention's segments and sinks alone, whose
		// queries are the keys' positions): scores [B,H,S,k] and
		// [B,H,S,ns].
		var qpos string
		if len(a.Alibi) > 0 {
			qpos = b.transpose(p.pos, 0, 1, 3, 2) // [Bm,1,S,1]
		}
		ps := b.op("Add", []string{b.op("MatMul", []string{p.qs, p.kbarT}), p.logCount(p.total, 4)})
		if p.pbar != "" {
			ps = b.op("Add", []string{ps, p.alibiBias(qpos, p.pbar, 4)})
		}
		parts := []scoredPart{{ps, p.vbar}}
		if p.ks != "" {
			ss := b.op("Add", []string{b.op("MatMul", []string{p.qs, b.transpose(p.ks, 0, 1, 3, 2)}), p.sinkBias})
			if p.sinkPos != "" {
				ss = b.op("Add", []string{ss, p.alibiBias(qpos, b.transpose(p.sinkPos, 0, 1, 3, 2), 4)})
			}
			parts = append(parts, scoredPart{ss, p.vs})
		}
		b.op("Identity", []string{b.jointSoftmax(parts, 3)})
	} else {
		flat := b.op("Reshape", []string{p.blocked(), b.op("Concat", []string{b.constInts(0, 0, -1), p.dV}, attrInt("axis", 0))})
		b.op("Slice", []string{flat, b.constInts(0), p.sLen, b.constInts(2)})
	}
	b.rename("out")
}

// keys emits the key validity, the masked K and V, the sinks' rows and the
// non-sink valid keys nsF.
func (p *lpBody) keys() {
	b := p.fnBuilder
	shapeK := b.op("Shape", []string{"K"})
	p.sLen = b.op("Slice", []string{shapeK, b.constInts(2), b.constInts(3)})
	p.dK = b.op("Slice", []string{shapeK, b.constInts(3), b.constInts(4)})
	p.dV = b.op("Slice", []string{b.op("Shape", []string{"V"}), b.constInts(3), b.constInts(4)})
	full := b.biasShape(p.sLen)
	valid := b.op("Expand", []string{b.op("Greater", []string{"key_bias", b.constFloat(maskThreshold)}), full}) // [Bm,1,1,S]
	validT := b.transpose(valid, 0, 1, 3, 2)                                                                    // [Bm,1,S,1]
	p.km = b.op("Where", []string{validT, "K", p.zero})
	p.vm = b.op("Where", []string{validT, "V", p.zero})
	pos := b.op("CumSum", []string{b.op("Expand", []string{p.one, full}), b.constScalarInt(3)}, attrInt("exclusive", 1))
	p.pos = pos
	var isFirst string
	if p.a.SinkFirst {
		first := b.reduce("ReduceMin", b.op("Where", []string{valid, pos, b.constFloat(1e9)}), 3)
		isFirst = b.op("And", []string{b.op("Equal", []string{pos, first}), valid})
		p.sinkRows = append(p.sinkRows, isFirst)
	}
	if p.a.SinkLast {
		last := b.reduce("ReduceMax", b.op("Where", []string{valid, pos, b.constFloat(-1)}), 3)
		isLast := b.op("And", []string{b.op("Equal", []string{pos, last}), valid})
		if isFirst != "" {
			isLast = b.op("And", []string{isLast, b.op("Not", []string{isFirst})})
		}
		p.sinkRows = append(p.sinkRows, isLast)
	}
	ns := valid
	for _, r := range p.sinkRows {
		ns = b.op("And", []string{ns, b.op("Not", []string{r})})
	}
	p.nsF = b.op("Cast", []string{ns}, castFloat())
}

// sinks emits the sinks' keys [B,H,ns,D], values [B,H,ns,Dv] and bias
// [Bm,1,1,ns] (0 where the sink exists, masked where not).
func (p *lpBody) sinks() {
	if len(p.sinkRows) == 0 {
		return
	}
	b := p.fnBuilder
	var rows []string
	for _, r := range p.sinkRows {
		rows = append(rows, b.op("Cast", []string{r}, castFloat()))
	}
	sr := rows[0]
	if len(rows) > 1 {
		sr = b.op("Concat", rows, attrInt("axis", 2)) // [Bm,1,ns,S]
	}
	p.ks = b.op("MatMul", []string{sr, p.km})
	p.vs = b.op("MatMul", []string{sr, p.vm})
	if len(p.a.Alibi) > 0 {
		p.sinkPos = b.op("MatMul", []string{sr, b.transpose(p.pos, 0, 1, 3, 2)}) // [Bm,1,ns,1]
	}
	present := b.op("Greater", []string{b.transpose(b.reduce("ReduceSum", sr, 3), 0, 1, 3, 2), b.constFloat(0.5)})
	p.sinkBias = b.op("Where", []string{present, p.zero, p.masked})
}

// logCount is log cnt (+ β) where cnt > 0, else the masked score; β
// broadcasts over heads along axis 1 of a rank-rank score tensor.
func (p *lpBody) logCount(cnt string, rank int) string {
	b := p.fnBuilder
	lc := b.op("Log", []string{b.op("Max", []string{cnt, p.one})})
	switch len(p.a.FarBias) {
	case 0:
	case 1:
		lc = b.op("Add", []string{lc, b.constFloat(p.a.FarBias[0])})
	default:
		shape := make([]int, rank)
		for i := range shape {
			shape[i] = 1
		}
		shape[1] = len(p.a.FarBias)
		lc = b.op("Add", []string{lc, b.constFloatTensor(shape, p.a.FarBias)})
	}
	return b.op("Where", []string{b.op("Greater", []string{cnt, b.constFloat(0.5)}), lc, p.masked})
}

// blocked emits the body with local blocks: S padded to nb·b positions,
// queries [B,H,nb,b,D], each block's window of 2r+1 blocks of keys, the
// far segments counted per block, and returns [B,H,nb,b,Dv].
func (p *lpBody) blocked() string {
	b := p.fnBuilder
	kk, blk, r := int64(p.a.Segments), int64(p.a.Block), int64(p.a.reach())
	bConst := b.constInts(blk)
	nb := b.op("Div", []string{b.op("Add", []string{p.sLen, b.constInts(blk - 1)}), bConst})
	p.padS, p.padLast = b.padSpecs(b.op("Sub", []string{b.op("Mul", []string{nb, bConst}), p.sLen}))
	blocks := func(x, width string) string { // [.., P, W] -> [.., nb, b, W]
		return b.op("Reshape", []string{x, b.op("Concat", []string{b.constInts(0, 0, -1, blk), width}, attrInt("axis", 0))})
	}
	qb := blocks(b.op("Pad", []string{p.qs, p.padS}), p.dK)                                               // [B,H,nb,b,D]
	kwin := b.window(blocks(b.op("Pad", []string{p.km, p.padS}), p.dK), 5, r, r)                          // [B,H,nb,(2r+1)b,D]
	vwin := b.window(blocks(b.op("Pad", []string{p.vm, p.padS}), p.dV), 5, r, r)                          // [B,H,nb,(2r+1)b,Dv]
	nsb := b.op("Reshape", []string{b.op("Pad", []string{p.nsF, p.padLast}), b.constInts(0, 0, -1, blk)}) // [Bm,1,nb,b]
	nswin := b.op("Reshape", []string{b.window(nsb, 4, r, r), b.constInts(0, 0, 0, 1, -1)})               // [Bm,1,nb,1,(2r+1)b]
	// valid is 1 for the keys each query may see: the valid non-sink keys
	// of its window ([Bm,1,nb,1,(2r+1)b]) or, with a band (segments 0 and
	// no sinks, which check requires), those of them inside the band
	// ([Bm,1,nb,b,(2r+1)b]).
	valid := nswin
	if p.a.Band {
		valid = b.op("Mul", []string{nswin, b.op("Cast", []string{p.band(blk, r)}, castFloat())})
	}
	localBias := b.op("Where", []string{b.op("Greater", []string{valid, b.constFloat(0.5)}), p.zero, p.masked})
	sl := b.op("Add", []string{b.op("MatMul", []string{qb, b.transpose(kwin, 0, 1, 2, 4, 3)}), localBias})
	// ALiBi: the window's distances |j − i| depend on the offsets alone
	// ([b,(2r+1)b], as the band), the sinks' and the segments' on the
	// query's position qpos [Bm,1,nb,b,1] (padded queries: 0, discarded).
	var qpos string
	if len(p.a.Alibi) > 0 {
		dist := b.op("Abs", []string{b.op("Cast", []string{p.offsets(blk, r)}, castFloat())})
		sl = b.op("Add", []string{sl, b.op("Mul", []string{dist, p.negSlopes(5)})})
		qpos = b.op("Reshape", []string{b.op("Pad", []string{p.pos, p.padLast}), b.constInts(0, 0, -1, blk, 1)})
	}
	if kk == 0 && p.ks == "" {
		// The local part alone (convert long's default, and the band):
		// onnxruntime's Softmax in one pass over the scores; a block
		// (with a band, a query) without any valid key gives zeros.
		anyValid := b.reduce("ReduceMax", valid, 4) // [Bm,1,nb,1 or b,1]
		pr := b.op("Softmax", []string{sl}, attrInt("axis", 4))
		return b.op("Mul", []string{b.op("MatMul", []string{pr, vwin}), anyValid})
	}
	parts := []scoredPart{{sl, vwin}}
	if kk > 0 {
		// cnt per query block: total minus the segment's keys in the
		// window.
		ob := b.reduce("ReduceSum", b.op("Reshape", []string{b.op("Pad", []string{p.onehot, p.padS}), b.constInts(0, 0, -1, blk, kk)}), 3) // [Bm,1,nb,1,k]
		obr := b.op("Reshape", []string{ob, b.constInts(0, 0, 0, -1)})                                                                     // [Bm,1,nb,k]
		cnt := b.op("Sub", []string{p.total, sumOf(b, b.shiftedBlocks(obr, 4, 2, r, r))})                                                  // [Bm,1,nb,k]
		logc := b.op("Reshape", []string{p.logCount(cnt, 4), b.constInts(0, 0, 0, 1, -1)})                                                 // [B',H',nb,1,k]
		kbar5 := b.op("Reshape", []string{p.kbarT, b.constInts(0, 0, 1, -1, kk)})                                                          // [B,H,1,D,k]
		vbar5 := b.op("Reshape", []string{p.vbar, b.op("Concat", []string{b.constInts(0, 0, 1, kk), p.dV}, attrInt("axis", 0))})           // [B,H,1,k,Dv]
		ps := b.op("Add", []string{b.op("MatMul", []string{qb, kbar5}), logc})
		if qpos != "" {
			ps = b.op("Add", []string{ps, p.alibiBias(qpos, b.op("Reshape", []string{p.pbar, b.constInts(0, 0, 1, 1, kk)}), 5)})
		}
		parts = append(parts, scoredPart{ps, vbar5})
	}
	if p.ks != "" {
		nsk := int64(len(p.sinkRows))
		ks5 := b.op("Reshape", []string{b.transpose(p.ks, 0, 1, 3, 2), b.constInts(0, 0, 1, -1, nsk)})
		vs5 := b.op("Reshape", []string{p.vs, b.op("Concat", []string{b.constInts(0, 0, 1, nsk), p.dV}, attrInt("axis", 0))})
		sb5 := b.op("Reshape", []string{p.sinkBias, b.constInts(0, 0, 1, 1, nsk)})
		ss := b.op("Add", []string{b.op("MatMul", []string{qb, ks5}), sb5})
		if qpos != "" {
			ss = b.op("Add", []string{ss, p.alibiBias(qpos, b.op("Reshape", []string{p.sinkPos, b.constInts(0, 0, 1, 1, nsk)}), 5)})
		}
		parts = append(parts, scoredPart{ss, vs5})
	}
	return b.jointSoftmax(parts, 4)
}

// band emits the [b,(2r+1)b] bool mask of the band: true where key
// offset q in the window of blocks B−r..B+r and query offset p in block B
// have −L ≤ j − i = (q − r·b) − p ≤ R. It is built with Range at run time
// rather than stored: a constant would hold b²(2r+1) values (200 MB for a
// 4096-key window).
func (p *lpBody) band(blk, r int64) string {
	b := p.fnBuilder
	diff := p.offsets(blk, r)
	left := b.op("Greater", []string{diff, b.constScalarInt(-int64(p.a.WindowLeft) - 1)})
	right := b.op("Less", []string{diff, b.constScalarInt(int64(p.a.WindowRight) + 1)})
	return b.op("And", []string{left, right})
}

// offsets emits (once) the [b,(2r+1)b] int64 j − i of key offset q in
// the window of blocks B−r..B+r and query offset p in block B:
// (q − r·b) − p, whatever B.
func (p *lpBody) offsets(blk, r int64) string {
	if p.diff != "" {
		return p.diff
	}
	b := p.fnBuilder
	rng := func(start, limit int64) string {
		return b.op("Range", []string{b.constScalarInt(start), b.constScalarInt(limit), b.constScalarInt(1)})
	}
	qOff := rng(-r*blk, (r+1)*blk)                                     // [(2r+1)b]: j − (block start)
	pOff := b.op("Reshape", []string{rng(0, blk), b.constInts(-1, 1)}) // [b,1]: i − (block start)
	p.diff = b.op("Sub", []string{qOff, pOff})                         // [b,(2r+1)b]: j − i
	return p.diff
}

// negSlopes emits −m as a [1,H,1,…] float constant of rank rank.
func (p *lpBody) negSlopes(rank int) string {
	shape := make([]int, rank)
	for i := range shape {
		shape[i] = 1
	}
	shape[1] = len(p.a.Alibi)
	neg := make([]float32, len(p.a.Alibi))
	for h, m := range p.a.Alibi {
		neg[h] = -m
	}
	return p.constFloatTensor(shape, neg)
}

// alibiBias emits −m_h·|qpos − kpos| of rank rank: the query positions
// qpos ([..,1] in the last axis) against the key positions kpos ([..,1,n]
// in the last two), heads along axis 1.
func (p *lpBody) alibiBias(qpos, kpos string, rank int) string {
	b := p.fnBuilder
	dist := b.op("Abs", []string{b.op("Sub", []string{qpos, kpos})})
	return b.op("Mul", []string{dist, p.negSlopes(rank)})
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
func (b *fnBuilder) jointSoftmax(parts []scoredPart, axis int64) string {
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
