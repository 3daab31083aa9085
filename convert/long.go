package convert

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
	"google.golang.org/protobuf/proto"
)

// Metadata keys ToLong records in the model it writes; embedding code reads
// them to pick the long reading mode and the window of the chunked one.
const (
	// MetaWindow is the window W, in tokens, of a model written by ToLong.
	MetaWindow = "linearize.window"
	// MetaMaxLength is the longest input, in tokens, it reads.
	MetaMaxLength = "linearize.max_length"
)

// DefaultLongMaxLength is LongOptions.MaxLength's default.
const DefaultLongMaxLength = 8192

// LongOptions configures ToLong. The zero value is the recommended
// conversion (the CLI's defaults).
type LongOptions struct {
	// MaxLength is the longest input, in tokens with [CLS] and [SEP], the
	// result reads (default DefaultLongMaxLength).
	MaxLength int
	// Window is W, the tokens of one aligned window; 0 means the model's
	// own position limit (512 for BERT), so that every window sees only
	// the positions the model was trained on.
	Window int
	// Far adds the pooled far field: each query also sees the other
	// windows through Segments segment means, gated by FarBias. It is off
	// by default: zero-shot, it lowered retrieval at every gate measured
	// (docs/long-documents.md).
	Far bool
	// Learned reads the other windows through learned feature maps
	// instead (HedgehogAttention with block W and reach 0, Features per
	// head, maps drawn from Seed): untrained they are noise, so train
	// them with finetune.Transfer on calibration windows of several W.
	// It excludes Far, Overlap and Sinks.
	Learned  bool
	Features int
	Seed     uint64
	// Segments is k, the pooled segments standing for the other windows
	// with Far (default DefaultSegments).
	Segments int
	// FarBias is β, the gate added to every pooled score with Far: 0
	// weighs a pooled segment as the keys it stands for; a negative value
	// weighs the far field less.
	FarBias float32
	// Overlap lets every query also see the half window beside the half
	// it is in (the previous window's second half, or the next window's
	// first half): blocks of W/2 with reach 1. A query still sees its
	// whole window; the cost is 1.5 windows of keys instead of one.
	Overlap bool
	// Sinks are the tokens every query sees exactly besides its window
	// (unset: none, for each window has its own [CLS] and [SEP] when the
	// input is framed per window, as package embed does).
	Sinks Sinks
	// Layers selects blocks by their Detect layer index; nil means all.
	Layers []int
}

// ToLong returns a copy of m, a BERT-style encoder whose absolute position
// table admits W tokens, that reads up to o.MaxLength tokens at a cost
// linear in the length:
//
//   - positions restart every W tokens (the table is tiled, as
//     ExtendPositions' copy method does), so each token sits at a position
//     the model was trained on;
//   - every attention block becomes LocalPooledAttention with block W and
//     reach 0: each query attends exactly to its own aligned window of W
//     tokens and to the sinks, and, with Far, to the other windows
//     through k pooled segment means (gated by FarBias), in one softmax.
//
// An input of at most W tokens lies in one window, so the result is the
// original model exactly there. Without the far field and sinks, an input
// framed per window ([CLS] W−2 tokens [SEP], repeated) is read window by
// window exactly as the original reads each chunk: chunking in one pass. m is not modified. The model records W and
// MaxLength in its metadata (MetaWindow, MetaMaxLength).
func ToLong(m *onnxpb.ModelProto, o LongOptions) (*onnxpb.ModelProto, *Report, error) {
	if m == nil || m.Graph == nil {
		return nil, nil, fmt.Errorf("convert: long: no graph")
	}
	pt, rows, limit, err := positionLimit(onnx.NewIndex(m.Graph))
	if err != nil {
		return nil, nil, fmt.Errorf("convert: long: %w", err)
	}
	if pt == nil {
		return nil, nil, fmt.Errorf("convert: long: the model has no absolute position table (Gather from an initializer indexed by position ids); convert long needs one to restart positions per window")
	}
	offset := rows - limit
	o, first, last, err := o.resolve(limit)
	if err != nil {
		return nil, nil, err
	}
	if o.Window < limit {
		// Positions restart every W tokens: tile the first W learned rows
		// over the table before it is extended (its period, the limit, is
		// a multiple of W, so the extension keeps period W).
		if err := perRowScale(onnx.NewIndex(m.Graph), pt); err != nil {
			return nil, nil, fmt.Errorf("convert: long: %s", strings.TrimPrefix(err.Error(), "convert: extend positions: "))
		}
		if m, err = periodicTable(m, pt.table, offset, o.Window); err != nil {
			return nil, nil, err
		}
	}
	positions := ExtendOptions{MaxPositions: o.MaxLength, Method: "copy", Offset: offset}
	var out *onnxpb.ModelProto
	var rep *Report
	if o.Learned {
		out, rep, err = hedgehogRewriter(ops.HedgehogAttrs{Block: o.Window}, o.Features, o.Seed, o.Layers, positions).run(m)
	} else {
		out, rep, err = localPooledRewriter(longAttrs(o, first, last), o.Layers, positions).run(m)
	}
	if err != nil {
		return nil, nil, err
	}
	setMeta(out, MetaWindow, strconv.Itoa(o.Window))
	setMeta(out, MetaMaxLength, strconv.Itoa(o.MaxLength))
	return out, rep, nil
}

// resolve fills in the defaults of o for a model of limit positions and
// checks them; it returns the sinks parsed.
func (o LongOptions) resolve(limit int) (_ LongOptions, first, last bool, err error) {
	if o.MaxLength == 0 {
		o.MaxLength = DefaultLongMaxLength
	}
	if o.Window == 0 {
		o.Window = limit
	}
	if o.Segments == 0 {
		o.Segments = DefaultSegments
	}
	if !o.Far {
		o.Segments = 0
	}
	if o.Window < 2 || o.Window > limit {
		return o, false, false, optionError("long", "Window", fmt.Sprintf("%d: want 2..%d (the model's position limit)", o.Window, limit))
	}
	if o.Window != limit && limit%o.Window != 0 {
		return o, false, false, optionError("long", "Window", fmt.Sprintf("%d must divide the model's position limit %d, so windows and restarted positions align", o.Window, limit))
	}
	if o.MaxLength <= limit {
		return o, false, false, optionError("long", "MaxLength", fmt.Sprintf("%d: the model already reads %d tokens; want more", o.MaxLength, limit))
	}
	if o.MaxLength > 1<<20 {
		return o, false, false, optionError("long", "MaxLength", fmt.Sprintf("%d: want at most %d", o.MaxLength, 1<<20))
	}
	if o.Far && (o.Segments < 1 || o.Segments > ops.MaxSegments) {
		return o, false, false, optionError("long", "Segments", fmt.Sprintf("%d: want 1..%d", o.Segments, ops.MaxSegments))
	}
	o.Sinks = o.Sinks.Or(NoSinks)
	if err := o.Sinks.check("long"); err != nil {
		return o, false, false, err
	}
	first, last = o.Sinks.First(), o.Sinks.Last()
	if o.Overlap && o.Window%2 != 0 {
		return o, false, false, optionError("long", "Window", fmt.Sprintf("%d must be even with Overlap (blocks of half a window)", o.Window))
	}
	if o.Learned {
		if o.Far || o.Overlap || (first || last) {
			return o, false, false, optionError("long", "Learned", "excludes Far, Overlap and Sinks")
		}
		if o.Features < 0 || o.Features > MaxHedgehogFeatures {
			return o, false, false, optionError("long", "Features", fmt.Sprintf("%d: want 1..%d (0: the head size)", o.Features, MaxHedgehogFeatures))
		}
	}
	return o, first, last, nil
}

// longAttrs are the LocalPooledAttention attributes of ToLong's default
// conversion.
func longAttrs(o LongOptions, first, last bool) ops.LocalPooledAttrs {
	a := ops.LocalPooledAttrs{Block: o.Window, Segments: o.Segments, SinkFirst: first, SinkLast: last, Reach: ops.NoReach}
	if o.Overlap {
		a.Block, a.Reach = o.Window/2, 1
	}
	if o.Far && o.FarBias != 0 {
		a.FarBias = []float32{o.FarBias}
	}
	return a
}

// periodicTable returns a copy of m whose position table (name, with
// offset leading non-position rows) repeats its first w learned rows.
func periodicTable(m *onnxpb.ModelProto, name string, offset, w int) (*onnxpb.ModelProto, error) {
	out := onnx.CloneShared(m)
	tp := onnx.NewIndex(out.Graph).Initializers[name]
	t, err := onnx.DecodeTensor(tp)
	if err != nil {
		return nil, fmt.Errorf("convert: long: table %s: %w", name, err)
	}
	if len(t.Shape) != 2 {
		return nil, fmt.Errorf("convert: long: table %s is %s %v, want a 2-D table", name, onnx.TypeName(t.DType), t.Shape)
	}
	// A float16 or bfloat16 table (a published half-precision model's) or
	// the integers of a quantized one (one scale, or one per column) are
	// tiled as float32 and stored back in their type: copied rows come
	// back bit for bit.
	vals, err := tableFloats(t)
	if err != nil {
		return nil, fmt.Errorf("convert: long: table %s: %w", name, err)
	}
	rows, hidden := t.Shape[0], t.Shape[1]
	tiled := ExtendTable(vals[:(offset+w)*hidden], offset+w, hidden, rows, offset, "copy")
	nt, err := onnx.EncodeTensor(name, tableOfType(onnx.NewFloat([]int{rows, hidden}, tiled), t.DType))
	if err != nil {
		return nil, fmt.Errorf("convert: long: %w", err)
	}
	proto.Reset(tp)
	proto.Merge(tp, nt)
	return out, nil
}

// setMeta sets one metadata_props entry of m.
func setMeta(m *onnxpb.ModelProto, key, value string) {
	for _, p := range m.MetadataProps {
		if p.GetKey() == key {
			p.Value = proto.String(value)
			return
		}
	}
	m.MetadataProps = append(m.MetadataProps, &onnxpb.StringStringEntryProto{Key: proto.String(key), Value: proto.String(value)})
}

// Meta returns the metadata_props value of key in m, or "".
func Meta(m *onnxpb.ModelProto, key string) string {
	for _, p := range m.GetMetadataProps() {
		if p.GetKey() == key {
			return p.GetValue()
		}
	}
	return ""
}
