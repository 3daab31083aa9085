package convert

import (
	"fmt"

	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

// DefaultBlock is the block length b of LocalPooledOptions and
// HedgehogOptions without one: each query sees its block of 64 positions
// and both neighbours exactly.
const DefaultBlock = 64

// DefaultSegments is the segment count k of LocalPooledOptions (and of
// LongOptions' far field) without one.
const DefaultSegments = 64

// LocalPooledOptions configures ToLocalPooled.
type LocalPooledOptions struct {
	// Block is b: each query attends exactly to the keys of its block of b
	// positions and of both neighbouring blocks (default DefaultBlock). NoLocal
	// turns the local part off (Block is then ignored): only sinks and
	// segments, a pooled Linformer computed at run time.
	Block   int
	NoLocal bool
	// Segments is k, the number of contiguous segments whose mean keys and
	// values stand for the rest of the sequence (default DefaultSegments).
	Segments int
	// Sinks are the keys kept exact for every query (unset:
	// DefaultSinks, [CLS] and the last valid token).
	Sinks Sinks
	// Layers selects blocks by their Detect layer index; nil means all.
	Layers []int
	// Positions, when MaxPositions > 0, first grows the absolute position
	// table (ExtendPositions) so the model accepts longer inputs.
	Positions ExtendOptions
}

// attrs resolves the defaults and checks the options.
func (o LocalPooledOptions) attrs() (ops.LocalPooledAttrs, error) {
	var a ops.LocalPooledAttrs
	if o.Block == 0 && !o.NoLocal {
		o.Block = DefaultBlock
	}
	if o.NoLocal {
		o.Block = 0
	}
	if o.Segments == 0 {
		o.Segments = DefaultSegments
	}
	o.Sinks = o.Sinks.Or(DefaultSinks)
	if o.Block < 0 || o.Block > ops.MaxLocalBlock {
		return a, optionError("local-pooled", "Block", fmt.Sprintf("%d: want 1..%d", o.Block, ops.MaxLocalBlock))
	}
	if o.Segments < 1 || o.Segments > ops.MaxSegments {
		return a, optionError("local-pooled", "Segments", fmt.Sprintf("%d: want 1..%d", o.Segments, ops.MaxSegments))
	}
	if err := o.Sinks.check("local-pooled"); err != nil {
		return a, err
	}
	return ops.LocalPooledAttrs{Block: o.Block, Segments: o.Segments, SinkFirst: o.Sinks.First(), SinkLast: o.Sinks.Last()}, nil
}

// ToLocalPooled returns a copy of m in which every convertible attention
// core (of the selected layers) is a LocalPooledAttention node: exact
// attention to the query's block and its two neighbours and to the sink
// tokens, plus one pooled key per contiguous segment of the rest of the
// sequence, in one softmax. It adds no parameters: the segments follow
// each sequence's actual length at run time, so the converted model has no
// maximum length of its own. m is not modified.
//
// On all-MiniLM-L6-v2 this keeps the model's meaning far better than a
// zero-shot Performer or Linformer at a fraction of their cost per token
// (README, "Which conversion").
func ToLocalPooled(m *onnxpb.ModelProto, o LocalPooledOptions) (*onnxpb.ModelProto, *Report, error) {
	a, err := o.attrs()
	if err != nil {
		return nil, nil, err
	}
	return localPooledRewriter(a, o.Layers, o.Positions).run(m)
}

// localPooledRewriter rewrites the selected blocks into
// LocalPooledAttention nodes with attributes a (ToLocalPooled, ToLong).
func localPooledRewriter(a ops.LocalPooledAttrs, layers []int, positions ExtendOptions) *rewriter {
	rw := &rewriter{op: ops.LocalPooledOp, layers: layers, positions: positions}
	rw.report.Options = ReportOptions{Block: a.Block, Segments: a.Segments, Sinks: sinksOf(a.SinkFirst, a.SinkLast)}
	rw.alibi.ok = true
	rw.core = func(b *Block, q, k, v, bias string) (*onnxpb.NodeProto, error) {
		na := a
		na.Scale, na.Alibi = float32(b.Scale), b.Alibi
		return ops.NewLocalPooledNode(rw.names.Name(fmt.Sprintf("linearize/layer%d/LocalPooledAttention", b.Layer)),
			[]string{q, k, v, bias}, rw.names.Name(fmt.Sprintf("linearize/layer%d/attn", b.Layer)), na), nil
	}
	rw.function = func(opset int64) (*onnxpb.FunctionProto, error) {
		fa := a
		fa.Alibi = rw.alibi.slopes
		return ops.LocalPooledFunction(opset, fa)
	}
	return rw
}

// LocalPooled is the cost-model form of ToLocalPooled.
const LocalPooled Form = "local-pooled"

// blockSize is the block length b of local+pooled and hedgehog, one flag
// of bench and inspect --cost for both.
var blockSize = Size{Flag: "block", Option: "Block", Usage: "local+pooled and hedgehog block length b (the conversions' default)", Default: DefaultBlock,
	field: func(c *CostModel) *int { return &c.Block }}

// localPooledConversion is ToLocalPooled in the registry (registry.go).
var localPooledConversion = Conversion{
	Name:         string(LocalPooled),
	BenchDefault: true,
	KeepsAlibi:   true,
	Op:           ops.LocalPooledOp,
	Sizes: []Size{blockSize, {Flag: "segments", Option: "Segments", Usage: "local+pooled segments k (convert local-pooled's default)", Default: DefaultSegments,
		field: func(c *CostModel) *int { return &c.Segments }}},
	bench: func(m *onnxpb.ModelProto, s Sizes, _ uint64) (*onnxpb.ModelProto, *Report, error) {
		return ToLocalPooled(m, LocalPooledOptions{Block: s.of(blockSize), Segments: s["segments"]})
	},
	describe: func(ro ReportOptions) string {
		return fmt.Sprintf("b = %d, k = %d, sinks %s", ro.Block, ro.Segments, ro.Sinks)
	},
	cost: conversionCost{
		layer:    localPooledCost,
		priced:   func(c CostModel) bool { return c.Segments > 0 },
		defaults: func(c *CostModel) { c.Sinks = DefaultSinks.Count() },
		fromReport: func(c *CostModel, ro ReportOptions) {
			c.Block, c.Segments, c.Sinks = ro.Block, ro.Segments, ro.Sinks.Count()
		},
		header: func(c CostModel) string {
			return fmt.Sprintf("local+pooled b = %d, k = %d, %d sinks", c.Block, c.Segments, c.Sinks)
		},
		note: func(c CostModel) string {
			return fmt.Sprintf(" (cores equal at 3b + 2k + 2s = %d)", 3*c.Block+2*c.Segments+2*c.Sinks)
		},
	},
}

// localPooledCost prices LocalPooledAttention with b = c.Block, k =
// c.Segments and s = c.Sinks:
//
//	core         n·h·(6b + 4k + 4s)  Q·Kᵀ and P·V over the 3b keys of the
//	                                 block window, segment means (one-hot·K,
//	                                 one-hot·V), Q·K̄ᵀ and P·V̄ over k
//	                                 segments, s sinks gathered and scored
//	elementwise  (b > 0) 26·n·h + 7·n·k + 5·H·n·(3b + k)
//	             n·h: scale Mul, K and V masked, Q padded, each of K and V
//	             padded, padded again, sliced three times and concatenated
//	             into 3-block windows (8), the windows' Transpose (3), Sum
//	             of the parts, Div, final Slice; n·k: one-hot Equal, Cast,
//	             Mul, Transpose, ReduceSum, and Pad and ReduceSum of the
//	             block counts; per part (3b local, k pooled): the bias
//	             Add, ReduceMax, Sub, Exp, ReduceSum (the sinks' part,
//	             H·n·s with s ≤ 2, is n times a constant)
//	             (b = 0) 4·n·h + 5·n·k + 5·H·n·k: scale Mul, K and V
//	             masked, Div, the one-hot as above, the pooled part; plus
//	             n·h for the Sum of the parts when s > 0
//
// (the function body of ops/localpooled.go).
func localPooledCost(c CostModel, n int, lc *LayerCost) {
	N, h, H := int64(n), int64(c.Dims.Hidden), int64(c.Dims.Heads)
	b, k, s := int64(c.Block), int64(c.Segments), int64(c.Sinks)
	lc.Core = N * h * (6*b + 4*k + 4*s)
	lc.Exps = H * N * (3*b + k + s)
	if b > 0 {
		lc.Elementwise = 26*N*h + 7*N*k + 5*H*N*(3*b+k)
	} else {
		lc.Elementwise = 4*N*h + 5*N*k + 5*H*N*k
		if s > 0 {
			lc.Elementwise += N * h
		}
	}
	lc.keep(4*H*N*3*b, "local scores H·n·3b")
	lc.keep(4*H*N*k, "pooled scores H·n·k")
}
