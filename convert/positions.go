package convert

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// ExtendOptions configures ExtendPositions.
type ExtendOptions struct {
	// MaxPositions is the longest input, in tokens, the model reads
	// afterwards: the position table gets MaxPositions + Offset rows. It
	// must exceed what the table admits now (PositionLimit).
	MaxPositions int
	// Method is, for an absolute position table, "copy" (the default) or
	// "interpolate"; for a rotary model, RotaryNTK (the default),
	// RotaryDynamic, RotaryLinear or RotaryYaRN.
	//
	// copy tiles the learned rows, as Longformer did when it extended
	// RoBERTa from 512 to 4096 positions: new row Offset+i is old row
	// Offset + i mod (old − Offset). Every existing row keeps its value, so
	// inputs shorter than the old table give bit-identical embeddings.
	//
	// interpolate resamples the learned rows linearly over the new length
	// (position interpolation): new row Offset+i lies at old coordinate
	// Offset + i·(old−Offset−1)/(new−Offset−1). The first and last learned
	// rows are kept; the rows between move, so short inputs change too.
	Method string
	// Trained is, for a rotary model, the length L it was trained for,
	// which MaxPositions scales by s = MaxPositions/L; 0 reads it as
	// ContextLimit does without a path (metadata, doc string). The CLI
	// reads max_position_embeddings from the config.json beside the
	// model.
	Trained int
	// Offset is the number of leading rows that are not positions and are
	// copied unchanged; 0 means the rows the model keeps before its first
	// position, as PositionLimit finds them. BERT numbers positions from
	// row 0 (none). RoBERTa-style models (XLM-R, bge-m3) number them from
	// padding_idx+1 = 2, their ids a CumSum over the mask, and keep rows 0
	// and 1 (padding and an unused row): 2 for those, as Longformer's
	// conversion copied rows 2.. only.
	Offset int
}

// ExtendReport says what ExtendPositions changed.
type ExtendReport struct {
	Table       string // the position-table initializer
	OldRows     int
	NewRows     int
	Tokens      int // the longest input the model now reads (ExtendOptions.MaxPositions)
	Hidden      int
	Method      string
	Source      string // how position ids are formed: "slice of buffer", "range", "input", "cumsum"
	PositionIDs string // the constant position_ids buffer extended too, if any
	Notes       []string
	// Rotary is set for a rotary model: each set of frequencies, scaled
	// by Factor = NewRows/OldRows (OldRows: the trained length).
	Rotary []RotaryReport
	Factor float64
}

// String is a one-paragraph summary.
func (r *ExtendReport) String() string {
	if r.Rotary != nil {
		return r.rotaryString()
	}
	s := fmt.Sprintf("position table %s: %d → %d rows, %d tokens (hidden %d, method %s; position ids from %s)",
		r.Table, r.OldRows, r.NewRows, r.Tokens, r.Hidden, r.Method, r.Source)
	if r.PositionIDs != "" {
		s += fmt.Sprintf("; buffer %s extended to %d", r.PositionIDs, r.NewRows)
	}
	for _, n := range r.Notes {
		s += "\nnote: " + n
	}
	return s
}

// posTable is one candidate absolute position-embedding lookup.
type posTable struct {
	gather *onnxpb.NodeProto // Gather(table, ids) or nil for a fused node
	table  string
	source string
	buffer string // constant position_ids buffer feeding a Slice, if any
	// via is the DequantizeLinear or Cast between a stored (int8,
	// float16) table and the Gather, if any.
	via *onnxpb.NodeProto
}

// tableOf returns the initializer a Gather's data comes from: the input
// itself, or the stored table behind one DequantizeLinear (a quantized
// embedding, per-tensor or per-column scale) or Cast.
func tableOf(ix *onnx.Index, v string) (table string, via *onnxpb.NodeProto) {
	if ix.Initializers[v] != nil {
		return v, nil
	}
	p := ix.Producer[v]
	if p == nil || (p.GetDomain() != "" && p.GetDomain() != "ai.onnx") || len(p.Input) == 0 || ix.Initializers[p.Input[0]] == nil {
		return "", nil
	}
	switch p.GetOpType() {
	case "DequantizeLinear", "Cast", "Identity":
		return p.Input[0], p
	}
	return "", nil
}

// dropTypeTables removes, when several tables are indexed by what looks
// like position ids, those that are token-type (segment) tables: two rows
// or fewer, or named so. A sliced all-zero token_type_ids buffer of
// length one reads like a position id.
func dropTypeTables(ix *onnx.Index, found []*posTable) []*posTable {
	distinct := map[string]bool{}
	for _, p := range found {
		distinct[p.table] = true
	}
	if len(distinct) < 2 {
		return found
	}
	var keep []*posTable
	for _, p := range found {
		name := strings.ToLower(p.table)
		tp := ix.Initializers[p.table]
		small := len(tp.GetDims()) == 2 && tp.GetDims()[0] <= 2
		if small || strings.Contains(name, "token_type") || strings.Contains(name, "segment") {
			continue
		}
		keep = append(keep, p)
	}
	return keep
}

// ErrTableTooLarge is matched by errors.Is when a position table
// extended to the length asked for would pass 2^28 elements (1 GiB of
// float32): the model does not fit that length.
var ErrTableTooLarge = errors.New("convert: position table too large")

// ExtendPositions returns a copy of m that reads opts.MaxPositions
// tokens. A model with an absolute position-embedding table gets a table
// of that many rows; a rotary model (no table; ModernBERT, GTE, Nomic,
// jina-v3) gets its rotary frequencies scaled by MaxPositions/Trained
// (RotaryNTK, RotaryLinear, RotaryYaRN), except those that only
// sliding-window blocks read, and the metadata MetaMaxPositions. The table is the initializer a Gather reads with
// position ids, where the ids are a Slice of a constant position_ids
// buffer (Hugging Face exports; the buffer is extended too), a Range over
// the sequence length, a CumSum over the mask (RoBERTa's
// create_position_ids_from_input_ids), or a graph input named like
// "position_ids"; onnxruntime's fused EmbedLayerNormalization is handled
// too. Word, token-type and other tables are left untouched. m is not
// modified.
func ExtendPositions(m *onnxpb.ModelProto, opts ExtendOptions) (*onnxpb.ModelProto, *ExtendReport, error) {
	if m == nil || m.Graph == nil {
		return nil, nil, errors.New("convert: extend positions: no graph")
	}
	if opts.Offset < 0 {
		return nil, nil, optionError("extend positions", "Offset", fmt.Sprintf("%d is negative", opts.Offset))
	}
	if opts.Trained < 0 {
		return nil, nil, optionError("extend positions", "Trained", fmt.Sprintf("%d is negative", opts.Trained))
	}
	out := onnx.CloneShared(m)
	g := out.Graph
	ix := onnx.NewIndex(g)
	pt, err := findPositionTable(ix)
	if errors.Is(err, errNoPositionTable) {
		// No table: a rotary model's frequencies are scaled instead.
		method := opts.Method
		if method == "" {
			method = RotaryNTK
		}
		if opts.Offset != 0 {
			return nil, nil, optionError("extend positions", "Offset", "a rotary model has no table rows to keep")
		}
		rep, err := extendRotary(out, opts, method)
		if err != nil {
			return nil, nil, err
		}
		return out, rep, nil
	}
	if err != nil {
		return nil, nil, err
	}
	method := opts.Method
	if method == "" {
		method = "copy"
	}
	if method != "copy" && method != "interpolate" {
		return nil, nil, optionError("extend positions", "Method", fmt.Sprintf("%q: the model has an absolute position table (%s); want copy or interpolate", opts.Method, pt.table))
	}
	tp := ix.Initializers[pt.table]
	t, err := onnx.DecodeTensor(tp)
	if err != nil {
		return nil, nil, fmt.Errorf("convert: extend positions: table %s: %w", pt.table, err)
	}
	if len(t.Shape) != 2 {
		return nil, nil, fmt.Errorf("convert: extend positions: table %s has shape %v, want a 2-D table", pt.table, t.Shape)
	}
	if err := perRowScale(ix, pt); err != nil {
		return nil, nil, err
	}
	wide, err := tableFloats(t)
	if err != nil {
		return nil, nil, fmt.Errorf("convert: extend positions: table %s: %w", pt.table, err)
	}
	old, hidden := t.Shape[0], t.Shape[1]
	if opts.Offset == 0 {
		opts.Offset = leadRows(pt, old)
	}
	if opts.Offset >= old-1 {
		return nil, nil, fmt.Errorf("convert: extend positions: offset %d leaves fewer than 2 learned rows in %s (%d rows)", opts.Offset, pt.table, old)
	}
	if opts.MaxPositions <= old-opts.Offset {
		lead := ""
		if opts.Offset > 0 {
			lead = fmt.Sprintf(", less the %d before the first position", opts.Offset)
		}
		return nil, nil, fmt.Errorf("convert: extend positions: --max-positions %d must exceed the %d tokens the table admits (%s: %d rows%s)", opts.MaxPositions, old-opts.Offset, pt.table, old, lead)
	}
	if opts.MaxPositions > MaxContextTokens {
		return nil, nil, fmt.Errorf("%w: extend positions: %d tokens (limit %d)", ErrTableTooLarge, opts.MaxPositions, MaxContextTokens)
	}
	n := opts.MaxPositions + opts.Offset
	// 2^28 float32 elements (1 GiB) is hundreds of thousands of positions
	// at BERT-large width; beyond that a mistyped flag would exhaust memory.
	if int64(n)*int64(hidden) > 1<<28 {
		return nil, nil, fmt.Errorf("%w: extend positions: %d × %d table (limit %d elements)", ErrTableTooLarge, n, hidden, 1<<28)
	}
	rows := ExtendTable(wide, old, hidden, n, opts.Offset, method)
	nt, err := onnx.EncodeTensor(pt.table, tableOfType(onnx.NewFloat([]int{n, hidden}, rows), t.DType))
	if err != nil {
		return nil, nil, fmt.Errorf("convert: extend positions: %w", err)
	}
	proto.Reset(tp)
	proto.Merge(tp, nt)
	setDeclaredRows(g, pt.table, n)
	if pt.via != nil {
		setDeclaredRows(g, pt.via.Output[0], n)
	}
	rep := &ExtendReport{Table: pt.table, OldRows: old, NewRows: n, Tokens: opts.MaxPositions, Hidden: hidden, Method: method, Source: pt.source}
	if pt.buffer != "" {
		if err := extendIDBuffer(ix, pt.buffer, n); err != nil {
			return nil, nil, err
		}
		rep.PositionIDs = pt.buffer
	}
	for _, b := range typeBuffers(ix, old, pt.buffer, pt.table) {
		if err := extendIDBuffer(ix, b, n); err != nil {
			return nil, nil, err
		}
		rep.Notes = append(rep.Notes, fmt.Sprintf("buffer %s (token types or position ids read by position) extended to %d", b, n))
	}
	if opts.Offset > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("rows 0..%d kept as non-position rows (offset %d)", opts.Offset-1, opts.Offset))
	}
	for _, vi := range g.Input {
		if ix.Initializers[vi.GetName()] != nil {
			continue
		}
		_, shape, ok := onnx.TensorType(vi)
		if ok && len(shape) >= 2 && shape[len(shape)-1].Value > 0 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("input %s declares a fixed sequence length %d; the model was exported for that length only", vi.GetName(), shape[len(shape)-1].Value))
		}
	}
	return out, rep, nil
}

// tableFloats returns a table's values as float32: float16, bfloat16
// and the integers of a quantized table widen exactly.
func tableFloats(t *onnx.Tensor) ([]float32, error) {
	switch t.DType {
	case onnx.Float:
		return t.Floats(), nil
	case onnx.Float16, onnx.BFloat16, onnx.Int8, onnx.Uint8:
	default:
		return nil, fmt.Errorf("element type %s is not a float, float16, bfloat16, int8 or uint8 table", onnx.TypeName(t.DType))
	}
	return t.AsFloat32s()
}

// tableOfType stores an extended float32 table in the original table's
// type: narrowed for float16/bfloat16, rounded to the nearest stored
// integer (and clamped) for a quantized one, whose scale and zero point
// are unchanged. Copied rows come back bit for bit.
func tableOfType(t *onnx.Tensor, dt onnx.DataType) *onnx.Tensor {
	switch dt {
	case onnx.Float16, onnx.BFloat16:
		return narrow(t, dt)
	case onnx.Int8, onnx.Uint8:
		lo, hi := -128.0, 127.0
		if dt == onnx.Uint8 {
			lo, hi = 0, 255
		}
		src := t.Floats()
		round := func(x float32) float64 { return min(max(math.RoundToEven(float64(x)), lo), hi) }
		if dt == onnx.Int8 {
			d := make([]int8, len(src))
			for i, x := range src {
				d[i] = int8(round(x))
			}
			return &onnx.Tensor{DType: dt, Shape: t.Shape, Data: d}
		}
		d := make([]uint8, len(src))
		for i, x := range src {
			d[i] = uint8(round(x))
		}
		return &onnx.Tensor{DType: dt, Shape: t.Shape, Data: d}
	}
	return t
}

// perRowScale refuses a table quantized with one scale per row (axis 0):
// its new rows would need scales of their own.
func perRowScale(ix *onnx.Index, pt *posTable) error {
	dq := pt.via
	if dq == nil || dq.GetOpType() != "DequantizeLinear" || len(dq.Input) < 2 {
		return nil
	}
	scale, ok := ix.Constant(dq.Input[1])
	if !ok {
		return fmt.Errorf("convert: extend positions: the scale %s of quantized table %s is not a constant", dq.Input[1], pt.table)
	}
	if scale.Len() > 1 && onnx.AttrInt(dq, "axis", 1) == 0 {
		return fmt.Errorf("convert: extend positions: table %s is quantized with one scale per row (%s, axis 0); extending it would need new scales, which is not supported", pt.table, dq.GetName())
	}
	return nil
}

// ExtendTable returns a [newRows, hidden] table grown from the row-major
// [old, hidden] rows by method "copy" or "interpolate" (see ExtendOptions),
// keeping the first offset rows.
func ExtendTable(rows []float32, old, hidden, newRows, offset int, method string) []float32 {
	out := make([]float32, newRows*hidden)
	copy(out, rows[:offset*hidden])
	learned := old - offset
	span := newRows - offset
	for i := 0; i < span; i++ {
		dst := out[(offset+i)*hidden : (offset+i+1)*hidden]
		if method == "copy" {
			src := offset + i%learned
			copy(dst, rows[src*hidden:(src+1)*hidden])
			continue
		}
		// Exact rational coordinate i·(learned−1)/(span−1), split into an
		// integer row and a fraction so that end points are exact.
		num := i * (learned - 1)
		lo := num / (span - 1)
		frac := float64(num%(span-1)) / float64(span-1)
		a := rows[(offset+lo)*hidden : (offset+lo+1)*hidden]
		if frac == 0 {
			copy(dst, a)
			continue
		}
		b := rows[(offset+lo+1)*hidden : (offset+lo+2)*hidden]
		for j := range dst {
			dst[j] = float32(float64(a[j])*(1-frac) + float64(b[j])*frac)
		}
	}
	return out
}

// errNoPositionTable is findPositionTable's error for a graph without an
// absolute position table.
var errNoPositionTable = errors.New("convert: extend positions: no absolute position-embedding table found (Gather from an initializer indexed by position ids)")

// findPositionTable returns the one absolute position table of the graph.
func findPositionTable(ix *onnx.Index) (*posTable, error) {
	var found []*posTable
	var rejected []string
	for _, n := range ix.Graph.Node {
		switch {
		case n.GetOpType() == "EmbedLayerNormalization" && n.GetDomain() == "com.microsoft":
			if len(n.Input) > 3 && ix.Initializers[n.Input[3]] != nil {
				found = append(found, &posTable{table: n.Input[3], source: "EmbedLayerNormalization"})
			}
		case n.GetOpType() == "Gather" && (n.GetDomain() == "" || n.GetDomain() == "ai.onnx") && len(n.Input) == 2:
			table, via := tableOf(ix, n.Input[0])
			if onnx.AttrInt(n, "axis", 0) != 0 || table == "" {
				continue
			}
			src, buf := positionSource(ix, n.Input[1], 0)
			if src == "" {
				if strings.Contains(strings.ToLower(table), "position") {
					rejected = append(rejected, table)
				}
				continue
			}
			found = append(found, &posTable{gather: n, table: table, via: via, source: src, buffer: buf})
		}
	}
	found = dropTypeTables(ix, found)
	// One table may be read by several Gathers; keep distinct tables.
	uniq := map[string]*posTable{}
	var tables []string
	for _, p := range found {
		if uniq[p.table] == nil {
			uniq[p.table] = p
			tables = append(tables, p.table)
		} else if uniq[p.table].buffer == "" {
			uniq[p.table].buffer = p.buffer
		}
	}
	switch len(tables) {
	case 1:
		return uniq[tables[0]], nil
	case 0:
		if len(rejected) > 0 {
			return nil, fmt.Errorf("convert: extend positions: table %s looks like a position table but its indices come from neither a position_ids buffer, a Range, a CumSum nor a position input", rejected[0])
		}
		return nil, errNoPositionTable
	default:
		return nil, fmt.Errorf("convert: extend positions: %d candidate position tables (%s); expected one", len(tables), strings.Join(tables, ", "))
	}
}

// positionSource traces Gather indices back to how position ids are made.
// It returns "" when they are not position ids (e.g. input_ids), and the
// constant buffer name when the ids are a Slice of one.
func positionSource(ix *onnx.Index, v string, depth int) (string, string) {
	if depth > 8 {
		return "", ""
	}
	if ix.GraphInputs[v] {
		if strings.Contains(strings.ToLower(v), "position") {
			return "input", ""
		}
		return "", ""
	}
	p := ix.Producer[v]
	if p == nil || (p.GetDomain() != "" && p.GetDomain() != "ai.onnx") {
		return "", ""
	}
	switch p.GetOpType() {
	case "Range":
		return "range", ""
	case "CumSum":
		return "cumsum", ""
	case "Slice":
		if len(p.Input) > 0 {
			if t, ok := ix.Constant(p.Input[0]); ok && isIntType(t.DType) {
				// A registered token_type_ids buffer (all zeros) is sliced
				// the same way; only an increasing sequence is positions.
				if !increasing(t) {
					return "", ""
				}
				return "slice of buffer", p.Input[0]
			}
			return positionSource(ix, p.Input[0], depth+1)
		}
	case "Cast", "Unsqueeze", "Squeeze", "Reshape", "Expand", "Identity", "Add", "Mul", "Tile":
		if p.GetOpType() == "Mul" && mulByZero(ix, p) {
			// position_ids·0 (GTE's token_type_ids): zeros, no positions.
			return "", ""
		}
		for _, in := range p.Input {
			if in == "" {
				continue
			}
			if _, isConst := ix.Constant(in); isConst {
				continue
			}
			if s, b := positionSource(ix, in, depth+1); s != "" {
				return s, b
			}
		}
	}
	return "", ""
}

// increasing reports whether an integer constant holds a strictly
// increasing sequence (position ids), not a constant one (token types).
func increasing(t *onnx.Tensor) bool {
	ids, err := t.AsInt64s()
	if err != nil || len(ids) < 2 {
		return err == nil && len(ids) == 1 && ids[0] >= 0
	}
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			return false
		}
	}
	return true
}

func isIntType(dt onnx.DataType) bool {
	return dt == onnx.Int64 || dt == onnx.Int32
}

// extendIDBuffer grows a constant [1, P] or [P] arithmetic position_ids
// buffer (an initializer or Constant node) to n entries.
func extendIDBuffer(ix *onnx.Index, name string, n int) error {
	t, _ := ix.Constant(name)
	ids, err := t.AsInt64s()
	if err != nil || len(ids) < 1 {
		return fmt.Errorf("convert: extend positions: position_ids buffer %s: unreadable", name)
	}
	if len(t.Shape) == 0 || len(t.Shape) > 2 || (len(t.Shape) == 2 && t.Shape[0] != 1) {
		return fmt.Errorf("convert: extend positions: position_ids buffer %s has shape %v, want [1, P] or [P]", name, t.Shape)
	}
	step := int64(1)
	if len(ids) > 1 {
		step = ids[1] - ids[0]
	}
	for i := 1; i < len(ids); i++ {
		if ids[i]-ids[i-1] != step {
			return fmt.Errorf("convert: extend positions: position_ids buffer %s is not an arithmetic sequence at entry %d", name, i)
		}
	}
	if n <= len(ids) {
		return nil
	}
	shape := []int{n}
	if len(t.Shape) == 2 {
		shape = []int{1, n}
	}
	var nt *onnx.Tensor
	if t.DType == onnx.Int32 {
		d := make([]int32, n)
		for i := range d {
			d[i] = int32(ids[0] + int64(i)*step)
		}
		nt = &onnx.Tensor{DType: onnx.Int32, Shape: shape, Data: d}
	} else {
		d := make([]int64, n)
		for i := range d {
			d[i] = ids[0] + int64(i)*step
		}
		nt = onnx.NewInt64(shape, d)
	}
	if tp := ix.Initializers[name]; tp != nil {
		enc, err := onnx.EncodeTensor(name, nt)
		if err != nil {
			return fmt.Errorf("convert: extend positions: %w", err)
		}
		proto.Reset(tp)
		proto.Merge(tp, enc)
		setDeclaredRows(ix.Graph, name, -1)
		return nil
	}
	c := ix.Producer[name]
	enc, err := onnx.EncodeTensor("", nt)
	if err != nil {
		return fmt.Errorf("convert: extend positions: %w", err)
	}
	enc.Name = nil
	for _, a := range c.Attribute {
		if a.GetName() == "value" {
			a.T = enc
			return nil
		}
	}
	// value_ints form.
	for _, a := range c.Attribute {
		if a.GetName() == "value_ints" {
			a.Ints = nt.Int64s()
			return nil
		}
	}
	return fmt.Errorf("convert: extend positions: Constant %s holds its values in a form that cannot be extended", name)
}

// typeBuffers finds the buffers of max_position_embeddings entries that a
// model reading rows tokens slices or gathers by position (the position
// table's rows, or a rotary model's trained length): Hugging Face
// registers token_type_ids as a buffer of zeros, read when no
// token_type_ids input is given (sliced to the sequence length, or
// gathered by the position ids as transformers 5 does for RoBERTa and
// XLM-R), and remote code such as GTE-v1.5's slices a position_ids buffer
// 0, 1, 2, … for its rotary positions and its token types. Such a buffer
// must grow with the positions, or the model fails past its old length.
// A candidate is an integer constant of rows entries ([rows] or [1,
// rows]), all equal or 0, 1, 2, …, other than the values skip names (the
// position table's own buffer, the table), whose values flow (within a
// few nodes) into the indices of a Gather of a table other than those, or
// that a Slice reads. The names are sorted.
func typeBuffers(ix *onnx.Index, rows int, skip ...string) []string {
	var names []string
	for name := range ix.Initializers {
		names = append(names, name)
	}
	for _, n := range ix.Graph.Node {
		if n.GetOpType() == "Constant" && (n.GetDomain() == "" || n.GetDomain() == "ai.onnx") && len(n.Output) == 1 {
			names = append(names, n.Output[0])
		}
	}
	slices.Sort(names)
	var out []string
	for _, name := range names {
		if name == "" || slices.Contains(skip, name) {
			continue
		}
		// Type and shape first, from the proto: decoding every
		// initializer (the weights too) to look would cost the model's
		// size in time and memory.
		dims, dt, ok := constantMeta(ix, name)
		if !ok || (dt != onnx.Int64 && dt != onnx.Int32) {
			continue
		}
		if !(len(dims) == 1 && dims[0] == int64(rows)) && !(len(dims) == 2 && dims[0] == 1 && dims[1] == int64(rows)) {
			continue
		}
		t, ok := ix.Constant(name)
		if !ok {
			continue
		}
		v, err := t.AsInt64s()
		if err != nil || slices.Min(v) != slices.Max(v) && !countsUp(v) {
			continue
		}
		sliced := slices.ContainsFunc(ix.Consumers[name], func(c *onnxpb.NodeProto) bool {
			return c.GetOpType() == "Slice" && c.Input[0] == name
		})
		if sliced || indexesTable(ix, name, skip...) {
			out = append(out, name)
		}
	}
	return out
}

// constantMeta returns the declared dimensions and element type of a
// constant, an initializer or a Constant node's value tensor, without
// decoding its data; ok is false for anything else.
func constantMeta(ix *onnx.Index, name string) (dims []int64, dt onnx.DataType, ok bool) {
	if tp := ix.Initializers[name]; tp != nil {
		return tp.GetDims(), onnx.DataType(tp.GetDataType()), true
	}
	if c := ix.Producer[name]; c != nil && c.GetOpType() == "Constant" && (c.GetDomain() == "" || c.GetDomain() == "ai.onnx") {
		for _, a := range c.GetAttribute() {
			if a.GetName() == "value" && a.GetT() != nil {
				return a.GetT().GetDims(), onnx.DataType(a.GetT().GetDataType()), true
			}
		}
	}
	return nil, 0, false
}

// countsUp reports whether v is 0, 1, 2, …
func countsUp(v []int64) bool {
	for i, x := range v {
		if x != int64(i) {
			return false
		}
	}
	return true
}

// indexesTable reports whether the value v flows, through at most six
// nodes, into the indices of a Gather whose data is a table (tableOf)
// other than those skip names.
func indexesTable(ix *onnx.Index, v string, skip ...string) bool {
	frontier := []string{v}
	seen := map[string]bool{v: true}
	for range 6 {
		var next []string
		for _, x := range frontier {
			for _, c := range ix.Consumers[x] {
				if c.GetOpType() == "Gather" && len(c.Input) == 2 && c.Input[1] == x {
					if tb, _ := tableOf(ix, c.Input[0]); tb != "" && !slices.Contains(skip, tb) {
						return true
					}
				}
				for _, o := range c.Output {
					if !seen[o] {
						seen[o] = true
						next = append(next, o)
					}
				}
			}
		}
		frontier = next
	}
	return false
}

// setDeclaredRows updates a declared shape of name (graph input or
// value_info, as old IR versions list initializers as inputs): rows ≥ 0
// sets the first dimension, −1 drops the declared shape.
func setDeclaredRows(g *onnxpb.GraphProto, name string, rows int) {
	fix := func(vis []*onnxpb.ValueInfoProto) {
		for _, vi := range vis {
			if vi.GetName() != name {
				continue
			}
			tt := vi.GetType().GetTensorType()
			if tt == nil || tt.Shape == nil || len(tt.Shape.Dim) == 0 {
				continue
			}
			if rows < 0 {
				tt.Shape = nil
				continue
			}
			tt.Shape.Dim[0].Value = &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: int64(rows)}
		}
	}
	fix(g.Input)
	fix(g.ValueInfo)
}

// PositionLimit returns the longest input, in tokens including [CLS] and
// [SEP], that m's absolute position table admits: the table's rows, less
// the two rows RoBERTa-style models keep before the first position when
// their ids come from a CumSum over the mask (padding_idx+1 numbering).
// It returns 0 and no error when m has no absolute position table
// (relative or rotary positions set no limit of their own); ContextLimit
// then reads the limit from the configuration beside the model or its
// doc string.
func PositionLimit(m *onnxpb.ModelProto) (int, error) {
	if m == nil || m.Graph == nil {
		return 0, errors.New("convert: position limit: no graph")
	}
	_, _, limit, err := positionLimit(onnx.NewIndex(m.Graph))
	return limit, err
}

// positionLimit finds the position table and returns it, its rows and the
// limit PositionLimit describes; a nil table and no error when there is
// none.
func positionLimit(ix *onnx.Index) (*posTable, int, int, error) {
	pt, err := findPositionTable(ix)
	if err != nil {
		if errors.Is(err, errNoPositionTable) {
			return nil, 0, 0, nil
		}
		return nil, 0, 0, err
	}
	tp := ix.Initializers[pt.table]
	if tp == nil || len(tp.Dims) != 2 {
		return nil, 0, 0, fmt.Errorf("convert: position limit: table %s is not a 2-D initializer", pt.table)
	}
	rows := int(tp.Dims[0])
	return pt, rows, rows - leadRows(pt, rows), nil
}

// leadRows is the number of rows of a position table of rows rows that
// come before its first position: 2 when the ids come from a CumSum over
// the mask (RoBERTa's padding_idx+1 numbering), else 0.
func leadRows(pt *posTable, rows int) int {
	if pt.source == "cumsum" && rows > 2 {
		return 2
	}
	return 0
}

// mulByZero reports whether Mul p has a constant input whose values are
// all zero.
func mulByZero(ix *onnx.Index, p *onnxpb.NodeProto) bool {
	for _, in := range p.Input {
		t, ok := ix.Constant(in)
		if !ok {
			continue
		}
		v, err := t.AsFloat64s()
		if err != nil || len(v) == 0 {
			continue
		}
		zero := true
		for _, x := range v {
			zero = zero && x == 0
		}
		if zero {
			return true
		}
	}
	return false
}
