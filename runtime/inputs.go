package runtime

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// CheckInputs reports whether feed supplies every declared input with the
// declared element type, rank and fixed dimensions, and nothing else. The
// error names the offending input.
func CheckInputs(declared []Value, feed map[string]*onnx.Tensor) error {
	known := map[string]bool{}
	for _, v := range declared {
		known[v.Name] = true
		t, ok := feed[v.Name]
		if !ok || t == nil {
			return fmt.Errorf("runtime: input %q is missing (%s)", v.Name, describe(v))
		}
		if err := t.Check(); err != nil {
			return fmt.Errorf("runtime: input %q: %v", v.Name, err)
		}
		if v.DType != onnx.Undefined && t.DType != v.DType {
			return fmt.Errorf("runtime: input %q is %s, the model wants %s", v.Name, t, describe(v))
		}
		if v.Shape != nil {
			if len(t.Shape) != len(v.Shape) {
				return fmt.Errorf("runtime: input %q has shape %v, the model wants %s", v.Name, t.Shape, describe(v))
			}
			for i, d := range v.Shape {
				if d.Value >= 0 && int64(t.Shape[i]) != d.Value {
					return fmt.Errorf("runtime: input %q has shape %v, the model wants %s", v.Name, t.Shape, describe(v))
				}
			}
		}
	}
	var extra []string
	for n := range feed {
		if !known[n] {
			extra = append(extra, n)
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		names := make([]string, len(declared))
		for i, v := range declared {
			names[i] = v.Name
		}
		return fmt.Errorf("runtime: the model has no input %q (inputs: %s)", extra[0], strings.Join(names, ", "))
	}
	return nil
}

// describe formats a declared value as "int64[batch 128]".
func describe(v Value) string {
	return onnx.TypeName(v.DType) + FormatDims(v.Shape)
}

// FormatDims formats a declared shape as "[batch 128 ?]"; "[?...]" when the
// rank is unknown.
func FormatDims(shape []onnx.Dim) string {
	if shape == nil {
		return "[?...]"
	}
	parts := make([]string, len(shape))
	for i, d := range shape {
		switch {
		case d.Value >= 0:
			parts[i] = fmt.Sprint(d.Value)
		case d.Param != "":
			parts[i] = d.Param
		default:
			parts[i] = "?"
		}
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// RandomOptions configures RandomInputs.
type RandomOptions struct {
	// Batch and SeqLen size the symbolic dimensions: a dimension whose
	// name mentions "batch" takes Batch, one that mentions "past" takes
	// PastLen, any other named or unknown dimension takes Batch in the
	// first position and SeqLen elsewhere. Sums such as
	// "past_seq_len+seq_len" add up. Zero means 1 for Batch, 8 for SeqLen
	// and 3 for PastLen. Fixed dimensions are always honoured.
	Batch, SeqLen, PastLen int
	// Seed makes the values reproducible: the same model, options and seed
	// give the same tensors.
	Seed uint64
}

// MaxRandomElements bounds the element count of one input RandomInputs
// makes.
const MaxRandomElements = 1 << 28

// RandomInputs makes valid inputs for a BERT-style model from its declared
// inputs:
//
//   - integer inputs named like a mask (…mask…) are ones; like token types
//     (…type…, …segment…) zeros; like positions (…position…) 0, 1, 2, …
//     along the last axis;
//   - other integer inputs are token ids, drawn uniformly below the size of
//     the embedding table they index (found by following the input through
//     Cast/Unsqueeze/Reshape-like nodes to a Gather or
//     EmbedLayerNormalization whose table is an initializer), or from {0, 1}
//     when no table is found;
//   - float inputs are drawn from a seeded standard normal, except masks,
//     which are ones; boolean masks are true, other booleans random.
func RandomInputs(m *onnxpb.ModelProto, inputs []Value, o RandomOptions) (map[string]*onnx.Tensor, error) {
	if o.Batch <= 0 {
		o.Batch = 1
	}
	if o.SeqLen <= 0 {
		o.SeqLen = 8
	}
	if o.PastLen <= 0 {
		o.PastLen = 3
	}
	r := rand.New(rand.NewPCG(o.Seed, 0x6c696e656172697a)) // "linearize"
	var ix *onnx.Index
	if m != nil && m.Graph != nil {
		ix = onnx.NewIndex(m.Graph)
	}
	feed := make(map[string]*onnx.Tensor, len(inputs))
	for _, v := range inputs {
		if v.Shape == nil {
			return nil, fmt.Errorf("runtime: input %q has unknown rank; supply it from a file", v.Name)
		}
		shape := make([]int, len(v.Shape))
		for i, d := range v.Shape {
			n, err := dimSize(d, i, o)
			if err != nil {
				return nil, fmt.Errorf("runtime: input %q: %v", v.Name, err)
			}
			shape[i] = n
		}
		// Declared sizes come from the model, not from bytes present:
		// bound them before allocating (a hostile [1, 2^40] would
		// otherwise exhaust memory, which Go cannot recover from).
		if n := onnx.NumElements(shape); n < 0 || n > MaxRandomElements {
			return nil, fmt.Errorf("runtime: input %q: declared shape %v has more than %d elements; supply it from a file", v.Name, shape, MaxRandomElements)
		}
		t, err := onnx.NewZeros(v.DType, shape)
		if err != nil {
			return nil, fmt.Errorf("runtime: input %q: %v", v.Name, err)
		}
		name := strings.ToLower(v.Name)
		isMask := strings.Contains(name, "mask")
		switch v.DType {
		case onnx.Float, onnx.Double, onnx.Float16, onnx.BFloat16:
			fillFloat(t, func() float64 {
				if isMask {
					return 1
				}
				return r.NormFloat64()
			})
		case onnx.Bool:
			b := t.Bools()
			for i := range b {
				b[i] = isMask || r.IntN(2) == 1
			}
		default:
			kind := "ids"
			switch {
			case isMask:
				kind = "ones"
			case strings.Contains(name, "type") || strings.Contains(name, "segment"):
				kind = "zeros"
			case strings.Contains(name, "position"):
				kind = "positions"
			}
			bound := int64(2)
			if ix != nil {
				if b, ok := tableRows(ix, v.Name); ok {
					bound = b
				}
			}
			last := 1
			if len(shape) > 0 {
				last = max(shape[len(shape)-1], 1)
			}
			vals := make([]int64, t.Len())
			for i := range vals {
				switch kind {
				case "ones":
					vals[i] = 1
				case "zeros":
					vals[i] = 0
				case "positions":
					vals[i] = int64(i%last) % bound
				default:
					vals[i] = r.Int64N(bound)
				}
			}
			if err := setInts(t, vals); err != nil {
				return nil, fmt.Errorf("runtime: input %q: %v", v.Name, err)
			}
		}
		feed[v.Name] = t
	}
	return feed, nil
}

// dimSize picks the size of declared dimension i.
func dimSize(d onnx.Dim, i int, o RandomOptions) (int, error) {
	if d.Value >= 0 {
		return int(d.Value), nil
	}
	if d.Param == "" {
		if i == 0 {
			return o.Batch, nil
		}
		return o.SeqLen, nil
	}
	total := 0
	for _, term := range strings.Split(d.Param, "+") {
		term = strings.TrimSpace(term)
		if n, err := strconv.Atoi(term); err == nil {
			total += n
			continue
		}
		p := strings.ToLower(term)
		switch {
		case strings.Contains(p, "past"):
			total += o.PastLen
		case strings.Contains(p, "batch"):
			total += o.Batch
		case strings.Contains(d.Param, "+") || i > 0:
			total += o.SeqLen
		default:
			total += o.Batch
		}
	}
	return total, nil
}

// tableRows follows value name through shape-only nodes to the embedding
// tables it indexes and returns the smallest row count.
func tableRows(ix *onnx.Index, name string) (int64, bool) {
	rows := func(table string) (int64, bool) {
		if t, ok := ix.Initializers[table]; ok && len(t.GetDims()) > 0 {
			return t.GetDims()[0], true
		}
		if c, ok := ix.Constant(table); ok && len(c.Shape) > 0 {
			return int64(c.Shape[0]), true
		}
		return 0, false
	}
	best, found := int64(0), false
	note := func(n int64, ok bool) {
		if ok && n > 0 && (!found || n < best) {
			best, found = n, true
		}
	}
	seen := map[string]bool{}
	queue := []string{name}
	for len(queue) > 0 {
		v := queue[0]
		queue = queue[1:]
		if seen[v] {
			continue
		}
		seen[v] = true
		for _, n := range ix.Consumers[v] {
			switch n.GetOpType() {
			case "Cast", "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Identity", "Expand", "Transpose":
				if len(n.Input) > 0 && n.Input[0] == v && len(n.Output) > 0 {
					queue = append(queue, n.Output[0])
				}
			case "Gather":
				if len(n.Input) == 2 && n.Input[1] == v && onnx.AttrInt(n, "axis", 0) == 0 {
					note(rows(n.Input[0]))
				}
			case "EmbedLayerNormalization":
				// com.microsoft: input_ids(0) → word_embedding(2),
				// segment_ids(1) → segment_embedding(4),
				// position_ids(8) → position_embedding(3).
				for i, tableAt := range map[int]int{0: 2, 1: 4, 8: 3} {
					if i < len(n.Input) && n.Input[i] == v && tableAt < len(n.Input) {
						note(rows(n.Input[tableAt]))
					}
				}
			}
		}
	}
	return best, found
}

func fillFloat(t *onnx.Tensor, next func() float64) {
	switch d := t.Data.(type) {
	case []float32:
		for i := range d {
			d[i] = float32(next())
		}
	case []float64:
		for i := range d {
			d[i] = next()
		}
	case []uint16:
		for i := range d {
			f := float32(next())
			if t.DType == onnx.Float16 {
				d[i] = onnx.FloatToHalf(f)
			} else {
				d[i] = uint16(math.Float32bits(f) >> 16)
			}
		}
	}
}

func setInts(t *onnx.Tensor, v []int64) error {
	switch d := t.Data.(type) {
	case []int64:
		copy(d, v)
	case []int32:
		for i, x := range v {
			d[i] = int32(x)
		}
	case []int16:
		for i, x := range v {
			d[i] = int16(x)
		}
	case []int8:
		for i, x := range v {
			d[i] = int8(min(x, math.MaxInt8))
		}
	case []uint8:
		for i, x := range v {
			d[i] = uint8(min(x, math.MaxUint8))
		}
	case []uint16:
		for i, x := range v {
			d[i] = uint16(x)
		}
	case []uint32:
		for i, x := range v {
			d[i] = uint32(x)
		}
	case []uint64:
		for i, x := range v {
			d[i] = uint64(x)
		}
	default:
		return fmt.Errorf("cannot make random values of type %s", onnx.TypeName(t.DType))
	}
	return nil
}
