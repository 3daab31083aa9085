package infer

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/linearize/linearize/corpus"
	"github.com/linearize/linearize/internal/graphfacts"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/tokenize"
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
			return fmt.Errorf("infer: input %q is missing (%s)", v.Name, describe(v))
		}
		if err := t.Check(); err != nil {
			return fmt.Errorf("infer: input %q: %v", v.Name, err)
		}
		if v.DType != onnx.Undefined && t.DType != v.DType {
			return fmt.Errorf("infer: input %q is %s, the model wants %s", v.Name, t, describe(v))
		}
		if v.Shape != nil {
			if len(t.Shape) != len(v.Shape) {
				return fmt.Errorf("infer: input %q has shape %v, the model wants %s", v.Name, t.Shape, describe(v))
			}
			for i, d := range v.Shape {
				if d.Value >= 0 && int64(t.Shape[i]) != d.Value {
					return fmt.Errorf("infer: input %q has shape %v, the model wants %s", v.Name, t.Shape, describe(v))
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
		return fmt.Errorf("infer: the model has no input %q (inputs: %s)", extra[0], strings.Join(names, ", "))
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
			return nil, fmt.Errorf("infer: input %q has unknown rank; supply it from a file", v.Name)
		}
		shape := make([]int, len(v.Shape))
		for i, d := range v.Shape {
			n, err := dimSize(d, i, o)
			if err != nil {
				return nil, fmt.Errorf("infer: input %q: %v", v.Name, err)
			}
			shape[i] = n
		}
		// Declared sizes come from the model, not from bytes present:
		// bound them before allocating (a hostile [1, 2^40] would
		// otherwise exhaust memory, which Go cannot recover from).
		if n := onnx.NumElements(shape); n < 0 || n > MaxRandomElements {
			return nil, fmt.Errorf("infer: input %q: declared shape %v has more than %d elements; supply it from a file", v.Name, shape, MaxRandomElements)
		}
		t, err := onnx.NewZeros(v.DType, shape)
		if err != nil {
			return nil, fmt.Errorf("infer: input %q: %v", v.Name, err)
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
				return nil, fmt.Errorf("infer: input %q: %v", v.Name, err)
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

// IndexedRows returns the rows of the smallest embedding table that the
// integer input name of m indexes (its vocabulary, for token ids), as
// RandomInputs bounds the values it draws; false when no table is found.
func IndexedRows(m *onnxpb.ModelProto, name string) (int64, bool) {
	if m.GetGraph() == nil {
		return 0, false
	}
	return tableRows(onnx.NewIndex(m.Graph), name)
}

// tableRows follows value name through shape-only nodes to the embedding
// tables it indexes and returns the smallest row count. A table may be
// computed from constants and inputs that carry no tokens (LoRA adapters
// added to it for a task id, as jina-embeddings-v3's export has; the
// table of its adapters, indexed by the task id, is one too).
func tableRows(ix *onnx.Index, name string) (int64, bool) {
	var facts *graphfacts.Facts
	rows := func(table string) (int64, bool) {
		if t, ok := ix.Initializers[table]; ok && len(t.GetDims()) > 0 {
			return t.GetDims()[0], true
		}
		if c, ok := ix.Constant(table); ok && len(c.Shape) > 0 {
			return int64(c.Shape[0]), true
		}
		if facts == nil {
			facts = graphfacts.New(ix, 0)
		}
		if d := facts.WeightDims(table); len(d) > 0 {
			return d[0], true
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

// FeedSpec says where a model's inputs come from, the way convert's
// commands take them: tensor files by input name, texts through the
// model's tokenizer, and seeded random values for whatever is left.
// Build turns it into tensors. The zero value of every size means its
// default (DefaultFeedBatch, DefaultFeedSeqLen, DefaultFeedMaxLen).
type FeedSpec struct {
	// Inputs maps input names to .npy or TensorProto .pb files, or to
	// numbers for inputs of one element (InputValue).
	Inputs map[string]string
	// Texts, then the lines of each of TextFiles (read by corpus.Lines:
	// blank lines skipped, "-" is stdin; at most 65536 texts a file),
	// are tokenized into one batch row each; they fill the token-level
	// inputs (ids, mask, token types; see InputRole) not in Inputs.
	Texts     []string
	TextFiles []string
	// Vocab is the tokenizer (a folder, tokenizer.json or vocab.txt; see
	// tokenize.Load); empty finds it beside the model (see
	// tokenize.Find). Tokenizer, when set, is used instead.
	Vocab     string
	Tokenizer *tokenize.Tokenizer
	// Random makes seeded random values (RandomInputs) for every input
	// not given otherwise. It cannot be combined with texts.
	Random bool
	// Batch sizes the random inputs' batch dimensions.
	Batch int
	// SeqLen is the sequence length: texts are padded or truncated to it
	// (0: the length the model declares, else the longest text, at most
	// MaxLen tokens), random inputs take it for their sequence dimensions
	// (0: DefaultFeedSeqLen).
	SeqLen int
	// MaxLen bounds the longest text when SeqLen is 0 (0: Limit when
	// positive, else DefaultFeedMaxLen).
	MaxLen int
	// Limit, when positive, is the longest sequence the model admits (the
	// rows of its absolute position table, else the length its
	// configuration states; see convert.ContextLimit):
	// Build refuses a SeqLen above it (ErrFeedValue) and texts or input
	// files that make longer sequences, and random inputs default to at
	// most Limit tokens. Those errors match ErrTooLong.
	Limit int
	// Seed seeds the random inputs.
	Seed uint64
}

// FeedSpec defaults.
const (
	DefaultFeedBatch  = 1
	DefaultFeedSeqLen = 16
	DefaultFeedMaxLen = 512
)

// Kinds of FeedSpec.Build errors (FeedError.Kind), for errors.Is.
var (
	// ErrFeedValue: a size is out of range (negative, or MaxLen 1).
	ErrFeedValue = errors.New("infer: bad feed value")
	// ErrFeedConflict: two sources that cannot be combined (FeedError
	// Field and With name them).
	ErrFeedConflict = errors.New("infer: conflicting feed sources")
	// ErrInputNotGiven: nothing supplies a model input (FeedError.Input).
	ErrInputNotGiven = errors.New("infer: input not given")
	// ErrTooLong is matched by the errors of a sequence longer than
	// FeedSpec.Limit: a SeqLen above it (Kind ErrFeedValue, Field
	// "SeqLen"), or texts or input files that make one (Field "Texts",
	// "TextFiles" or "Inputs"; no Kind, as the files are at fault).
	ErrTooLong = errors.New("infer: longer than the model's position limit")
)

// tooLongError says what is longer than the limit; it matches ErrTooLong.
type tooLongError struct {
	what          string
	length, limit int
}

func (e *tooLongError) Error() string {
	return strings.TrimSpace(fmt.Sprintf("%s %d tokens, more than the %d positions the model admits", e.what, e.length, e.limit))
}

func (e *tooLongError) Unwrap() error { return ErrTooLong }

// FeedError is an error of FeedSpec.Build. Kind is one of ErrFeedValue,
// ErrFeedConflict and ErrInputNotGiven, or nil when Err (a file, the
// tokenizer or the model) is the cause. Field names the FeedSpec field at
// fault ("Inputs", "Texts", "TextFiles", "Vocab", "Random", "Batch",
// "SeqLen", "MaxLen"; empty when the fault is in how feed and model
// combine), With the other field of a conflict, Input the model input
// and File the file concerned, if any.
type FeedError struct {
	Kind                     error
	Field, With, Input, File string
	Err                      error
}

func (e *FeedError) Error() string {
	if e.Field != "" && e.Kind != ErrInputNotGiven {
		return "infer: " + e.Field + ": " + e.Message()
	}
	return "infer: " + e.Message()
}

// Message is the error's text without the package prefix and the field,
// for callers that name the field their own way (a command-line flag).
func (e *FeedError) Message() string {
	switch e.Kind {
	case ErrFeedConflict:
		return "cannot be combined with " + e.With
	case ErrInputNotGiven:
		return fmt.Sprintf("input %q not given", e.Input)
	}
	if e.Err == nil {
		return strings.TrimPrefix(e.Kind.Error(), "infer: ")
	}
	return strings.TrimPrefix(e.Err.Error(), "infer: ")
}

func (e *FeedError) Unwrap() []error {
	var errs []error
	for _, err := range []error{e.Kind, e.Err} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// Feed is a built set of model inputs.
type Feed struct {
	Tensors map[string]*onnx.Tensor
	// Batch and SeqLen are the [batch, sequence] layout of the token-level
	// inputs (0 when no input has rank 2).
	Batch, SeqLen int
	// Mask is the [Batch, SeqLen] padding mask, 1 on real tokens: from
	// the texts, or from an input named like a mask; nil otherwise.
	Mask []int64
	// Lengths are the real tokens of each text (texts only).
	Lengths []int
	// Cut marks the texts that were longer than SeqLen and were cut to
	// it (texts only; CutNote says which).
	Cut []bool
	// Description says what the inputs are: "2 texts, 8 tokens each after
	// padding", "batch 1 × 16 (random inputs, seed 1)".
	Description string
}

// Build makes the inputs of model m, read from modelPath (the tokenizer
// is looked for beside it). Every error is a *FeedError.
func (s FeedSpec) Build(m *onnxpb.ModelProto, modelPath string) (*Feed, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	s = s.withDefaults()
	declared := GraphInputs(m)
	f := &Feed{Tensors: map[string]*onnx.Tensor{}}
	if err := s.readInputFiles(declared, f.Tensors); err != nil {
		return nil, err
	}
	texts, err := s.readTexts()
	if err != nil {
		return nil, err
	}
	random, err := s.fillMissing(m, modelPath, f, missingInputs(declared, f.Tensors), texts)
	if err != nil {
		return nil, err
	}
	if err := CheckInputs(declared, f.Tensors); err != nil {
		return nil, &FeedError{Err: err}
	}
	if name, err := checkTokenInputs(m, declared, f.Tensors, s.Inputs); err != nil {
		return nil, s.tokenInputError(name, err, texts)
	}
	if f.Description == "" {
		f.describeInputs(declared)
		if random {
			f.Description += fmt.Sprintf(" (random inputs, seed %d)", s.Seed)
		}
	}
	return f, nil
}

// withDefaults returns s with Batch and MaxLen defaulted.
func (s FeedSpec) withDefaults() FeedSpec {
	if s.Batch == 0 {
		s.Batch = DefaultFeedBatch
	}
	if s.MaxLen == 0 {
		s.MaxLen = DefaultFeedMaxLen
		if s.Limit > 0 {
			s.MaxLen = max(s.Limit, 2)
		}
	}
	return s
}

// readInputFiles reads the input files and numbers of s.Inputs into feed
// (InputValue), in name order: each must name a declared input and hold
// sequences within Limit.
func (s FeedSpec) readInputFiles(declared []Value, feed map[string]*onnx.Tensor) error {
	byName := map[string]Value{}
	for _, v := range declared {
		byName[v.Name] = v
	}
	names := make([]string, 0, len(s.Inputs))
	for n := range s.Inputs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		file := s.Inputs[name]
		if _, known := byName[name]; !known {
			all := make([]string, len(declared))
			for i, v := range declared {
				all[i] = v.Name
			}
			return &FeedError{Field: "Inputs", Input: name, File: file,
				Err: fmt.Errorf("the model has no input %q (inputs: %s)", name, strings.Join(all, ", "))}
		}
		t, err := InputValue(byName[name], file)
		if err != nil {
			return &FeedError{Field: "Inputs", Input: name, File: file, Err: err}
		}
		if n := tokenLength(name, t); s.Limit > 0 && n > s.Limit {
			return &FeedError{Field: "Inputs", Input: name, File: file,
				Err: &tooLongError{"its sequences have", n, s.Limit}}
		}
		feed[name] = t
	}
	return nil
}

// maxFileTexts bounds the texts of one of FeedSpec.TextFiles: they are
// rows of one batch.
const maxFileTexts = 1 << 16

// readTexts returns s.Texts followed by the texts of s.TextFiles, each
// read by corpus.Lines with its bounds.
func (s FeedSpec) readTexts() ([]string, error) {
	texts := append([]string(nil), s.Texts...)
	for _, file := range s.TextFiles {
		docs, err := corpus.Lines(file, corpus.Options{}).ReadAll()
		if err == nil && len(docs) > maxFileTexts {
			err = fmt.Errorf("%s: more than %d texts, the rows of one batch", file, maxFileTexts)
		}
		if err != nil {
			return nil, &FeedError{Field: "TextFiles", File: file, Err: err}
		}
		for _, d := range docs {
			texts = append(texts, d.Text)
		}
	}
	return texts, nil
}

// missingInputs lists the declared inputs feed lacks.
func missingInputs(declared []Value, feed map[string]*onnx.Tensor) []Value {
	var missing []Value
	for _, v := range declared {
		if _, ok := feed[v.Name]; !ok {
			missing = append(missing, v)
		}
	}
	return missing
}

// fillMissing supplies the missing inputs into f: from the texts when
// there are any, else random ones when s.Random asks for them. It reports
// whether the inputs are random.
func (s FeedSpec) fillMissing(m *onnxpb.ModelProto, modelPath string, f *Feed, missing []Value, texts []string) (random bool, err error) {
	switch {
	case len(missing) == 0:
		return false, nil
	case len(texts) > 0:
		return false, s.textFeed(modelPath, f, missing, texts)
	case !s.Random:
		return false, &FeedError{Kind: ErrInputNotGiven, Input: missing[0].Name}
	}
	seq := s.SeqLen
	if seq == 0 {
		seq = DefaultFeedSeqLen
		if s.Limit > 0 {
			seq = min(seq, s.Limit)
		}
	}
	gen, err := RandomInputs(m, missing, RandomOptions{Batch: s.Batch, SeqLen: seq, Seed: s.Seed})
	if err != nil {
		return false, &FeedError{Field: "Random", Err: err}
	}
	maps.Copy(f.Tensors, gen)
	return true, nil
}

// textFeed tokenizes the texts into the missing inputs of f and records
// their layout, mask and lengths.
func (s FeedSpec) textFeed(modelPath string, f *Feed, missing []Value, texts []string) error {
	tok := s.Tokenizer
	if tok == nil {
		var err error
		if tok, err = tokenize.Find(s.Vocab, modelPath); err != nil {
			return &FeedError{Field: "Vocab", File: s.Vocab, Err: err}
		}
	}
	if err := TextFillable(missing, "Inputs"); err != nil {
		return &FeedError{Field: "Texts", Err: err}
	}
	ti, err := TextInputs(tok, missing, texts, s.SeqLen, s.MaxLen)
	if err != nil {
		return &FeedError{Field: "Texts", Err: err}
	}
	if s.Limit > 0 && ti.SeqLen > s.Limit {
		field, what := "Texts", "the longest text has"
		if len(s.Texts) == 0 {
			field = "TextFiles"
		}
		if s.SeqLen == 0 && declaredSeqLen(missing) == ti.SeqLen {
			what = "the model's declared sequence length is"
		}
		return &FeedError{Field: field, Err: &tooLongError{what, ti.SeqLen, s.Limit}}
	}
	maps.Copy(f.Tensors, ti.Feed)
	f.Batch, f.SeqLen, f.Mask, f.Lengths, f.Cut = ti.Batch, ti.SeqLen, ti.Mask, ti.Lengths, ti.Cut
	f.Description = fmt.Sprintf("%d texts, %d tokens each after padding", ti.Batch, ti.SeqLen)
	if c := f.CutNote(); c != "" {
		f.Description += "; " + c
	}
	return nil
}

// CutNote says which texts were cut to fit the sequence length ("text 2
// cut to 512 tokens", "3 of 8 texts cut to 128 tokens: 1, 4, 7"), or ""
// when none was.
func (f *Feed) CutNote() string {
	var rows []string
	for i, c := range f.Cut {
		if c {
			rows = append(rows, strconv.Itoa(i+1))
		}
	}
	switch {
	case len(rows) == 0:
		return ""
	case len(f.Cut) == 1:
		return fmt.Sprintf("the text was cut to %d tokens", f.SeqLen)
	case len(rows) == 1:
		return fmt.Sprintf("text %s of %d cut to %d tokens", rows[0], len(f.Cut), f.SeqLen)
	}
	n := len(rows)
	if n > 10 {
		rows = append(rows[:10], "…")
	}
	return fmt.Sprintf("%d of %d texts cut to %d tokens: %s", n, len(f.Cut), f.SeqLen, strings.Join(rows, ", "))
}

// tokenInputError is the FeedError of checkTokenInputs' finding err about
// input name: from a file, the field (--input NAME) names the input.
func (s FeedSpec) tokenInputError(name string, err error, texts []string) *FeedError {
	fe := &FeedError{Input: name, Err: fmt.Errorf("input %q: %w", name, err)}
	switch {
	case s.Inputs[name] != "":
		fe.Field, fe.File, fe.Err = "Inputs", s.Inputs[name], err
	case len(s.Texts) > 0:
		fe.Field = "Texts"
	case len(texts) > 0:
		fe.Field = "TextFiles"
	}
	return fe
}

// describeInputs finds the [batch, sequence] layout and the padding mask
// of inputs not made from texts, and describes them.
func (f *Feed) describeInputs(declared []Value) {
	for _, v := range declared {
		t := f.Tensors[v.Name]
		if len(t.Shape) != 2 {
			continue
		}
		if f.Batch == 0 {
			f.Batch, f.SeqLen = t.Shape[0], t.Shape[1]
		}
		if InputRole(v.Name) == RoleMask && f.Mask == nil {
			if vals, err := t.AsInt64s(); err == nil {
				f.Mask = vals
				f.Batch, f.SeqLen = t.Shape[0], t.Shape[1]
			}
		}
	}
	switch {
	case f.Batch > 0:
		f.Description = fmt.Sprintf("batch %d × %d", f.Batch, f.SeqLen)
	default:
		f.Description = fmt.Sprintf("%d inputs", len(declared))
	}
}

// ReadFixedInputs reads the values given by name for inputs of m that
// carry no tokens (each a number or a file, InputValue) and checks them
// (CheckFixedInputs); nil for none. The error names the input.
func ReadFixedInputs(m *onnxpb.ModelProto, specs map[string]string) (map[string]*onnx.Tensor, error) {
	if len(specs) == 0 {
		return nil, nil
	}
	declared := GraphInputs(m)
	out := map[string]*onnx.Tensor{}
	for _, name := range slices.Sorted(maps.Keys(specs)) {
		i := slices.IndexFunc(declared, func(v Value) bool { return v.Name == name })
		if i < 0 {
			out[name] = nil // CheckFixedInputs names it
			continue
		}
		t, err := InputValue(declared[i], specs[name])
		if err != nil {
			return nil, fmt.Errorf("infer: input %s: %w", name, err)
		}
		out[name] = t
	}
	if err := CheckFixedInputs(m, out); err != nil {
		return nil, err
	}
	return out, nil
}

// CheckFixedInputs checks values given for inputs of m that carry no
// tokens and are fed unchanged with every batch (a task id choosing
// adapters, as jina-embeddings-v3's task_id): each must name an input of
// m that is not token-level (InputRole ""), have its declared type and
// shape, and index only rows of the tables it indexes. The error names
// the input.
func CheckFixedInputs(m *onnxpb.ModelProto, fixed map[string]*onnx.Tensor) error {
	declared := GraphInputs(m)
	var names []string
	for _, v := range declared {
		names = append(names, v.Name)
	}
	for _, name := range slices.Sorted(maps.Keys(fixed)) {
		i := slices.Index(names, name)
		switch {
		case i < 0:
			return fmt.Errorf("infer: the model has no input %q (inputs: %s)", name, strings.Join(names, ", "))
		case InputRole(name) != "":
			return fmt.Errorf("infer: input %q is filled from the text; only inputs that carry no tokens are given a fixed value", name)
		}
		if err := CheckInputs(declared[i:i+1], map[string]*onnx.Tensor{name: fixed[name]}); err != nil {
			return err
		}
	}
	if name, err := checkTokenInputs(m, declared, fixed, nil); err != nil {
		return fmt.Errorf("infer: input %q: %w", name, err)
	}
	return nil
}

// checkTokenInputs checks what the model's declarations and embedding
// tables say of the inputs before any runtime sees them, so that bad data
// is an input error naming the input rather than a kernel's failure deep
// in the graph: inputs whose declared dimensions share a symbolic name
// (sequence_length) have equal sizes there, and the integer inputs that
// index an embedding table (token ids, token types, positions; found as
// RandomInputs finds them) hold rows of it. It returns the input at fault
// and what is wrong with it; of two that disagree, one given from a file
// (files) is at fault rather than one made to fit the model.
func checkTokenInputs(m *onnxpb.ModelProto, declared []Value, feed map[string]*onnx.Tensor, files map[string]string) (string, error) {
	type binding struct {
		input string
		size  int
	}
	bound := map[string]binding{}
	for _, v := range declared {
		t := feed[v.Name]
		if t == nil || len(v.Shape) != len(t.Shape) {
			continue
		}
		for i, d := range v.Shape {
			if d.Value >= 0 || d.Param == "" {
				continue
			}
			b, ok := bound[d.Param]
			if !ok {
				bound[d.Param] = binding{v.Name, t.Shape[i]}
				continue
			}
			if t.Shape[i] != b.size {
				if files[v.Name] == "" && files[b.input] != "" {
					return b.input, fmt.Errorf("shape %v has %s %d, but input %q has %s %d", feed[b.input].Shape, d.Param, b.size, v.Name, d.Param, t.Shape[i])
				}
				return v.Name, fmt.Errorf("shape %v has %s %d (dimension %d), but input %q has %s %d", t.Shape, d.Param, t.Shape[i], i, b.input, d.Param, b.size)
			}
		}
	}
	if m == nil || m.Graph == nil {
		return "", nil
	}
	var ix *onnx.Index
	for _, v := range declared {
		t := feed[v.Name]
		role := InputRole(v.Name)
		if t == nil || role == RoleMask {
			continue
		}
		vals, err := t.AsInt64s()
		if err != nil || t.DType == onnx.Bool {
			continue // not integer indices
		}
		if ix == nil {
			ix = onnx.NewIndex(m.Graph)
		}
		rows, ok := tableRows(ix, v.Name)
		if !ok {
			continue
		}
		for i, id := range vals {
			if id < 0 || id >= rows {
				what, table := map[string]string{RoleIDs: "token id", RoleTokenType: "token type", RolePosition: "position"}[role], "embedding table"
				if role == "" { // an input that carries no tokens (a task id)
					what, table = "value", "table"
				}
				return v.Name, fmt.Errorf("%s %d (element %d) is outside the %d rows of the %s it indexes (0..%d)", what, id, i, rows, table, rows-1)
			}
		}
	}
	return "", nil
}

// check validates the spec on its own, before any file is read.
func (s FeedSpec) check() error {
	for _, c := range []struct {
		field string
		v     int
	}{{"Batch", s.Batch}, {"SeqLen", s.SeqLen}, {"MaxLen", s.MaxLen}} {
		if c.v < 0 {
			return &FeedError{Kind: ErrFeedValue, Field: c.field, Err: fmt.Errorf("%d is negative", c.v)}
		}
	}
	if s.Limit > 0 && s.SeqLen > s.Limit {
		return &FeedError{Kind: ErrFeedValue, Field: "SeqLen", Err: &tooLongError{"", s.SeqLen, s.Limit}}
	}
	if s.MaxLen == 1 {
		return &FeedError{Kind: ErrFeedValue, Field: "MaxLen", Err: errors.New("1 is too short: a text needs at least 2 tokens ([CLS] and [SEP])")}
	}
	if s.Random && (len(s.Texts) > 0 || len(s.TextFiles) > 0) {
		field := "Texts"
		if len(s.Texts) == 0 {
			field = "TextFiles"
		}
		return &FeedError{Kind: ErrFeedConflict, Field: field, With: "Random"}
	}
	return nil
}

// tokenLength is the sequence length of a [batch, sequence] token-level
// input (ids, mask, token types or positions, by its name), or 0.
func tokenLength(name string, t *onnx.Tensor) int {
	if len(t.Shape) != 2 || InputRole(name) == "" {
		return 0
	}
	return t.Shape[1]
}

// InputValue reads the value of the model input v given as spec: the path
// of a .npy or TensorProto .pb file, or a number, which fills an input of
// one element (rank 0, or rank 1 of size 1) in its declared type, as
// jina-embeddings-v3's export takes the index of its task adapter
// (task_id=4). A spec that parses as a number is one; a file named like a
// number is given as ./4.
func InputValue(v Value, spec string) (*onnx.Tensor, error) {
	if !IsNumber(spec) {
		return onnx.ReadTensorFile(spec)
	}
	shape := []int{}
	switch {
	case len(v.Shape) == 1 && (v.Shape[0].Value == 1 || v.Shape[0].Value < 0):
		shape = []int{1}
	case len(v.Shape) > 0:
		return nil, fmt.Errorf("infer: input %q is %s: a number fills only an input of one element; give a file", v.Name, describe(v))
	}
	switch v.DType {
	case onnx.Int64, onnx.Int32, onnx.Undefined:
		x, err := strconv.ParseInt(spec, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("infer: input %q is %s: %q is not an integer", v.Name, describe(v), spec)
		}
		if v.DType == onnx.Int32 {
			if x != int64(int32(x)) {
				return nil, fmt.Errorf("infer: input %q is %s: %d is out of range", v.Name, describe(v), x)
			}
			return &onnx.Tensor{DType: onnx.Int32, Shape: shape, Data: []int32{int32(x)}}, nil
		}
		return onnx.NewInt64(shape, []int64{x}), nil
	case onnx.Float, onnx.Double:
		x, err := strconv.ParseFloat(spec, 64)
		if err != nil || math.IsInf(x, 0) || math.IsNaN(x) {
			return nil, fmt.Errorf("infer: input %q is %s: %q is not a finite number", v.Name, describe(v), spec)
		}
		if v.DType == onnx.Double {
			return &onnx.Tensor{DType: onnx.Double, Shape: shape, Data: []float64{x}}, nil
		}
		return onnx.NewFloat(shape, []float32{float32(x)}), nil
	}
	return nil, fmt.Errorf("infer: input %q is %s: a number fills only integer and float32/float64 inputs; give a file", v.Name, describe(v))
}

// IsNumber reports whether the spec of an input value (InputValue) is
// written as a number (digits, with a sign, point or exponent), not as a
// path.
func IsNumber(spec string) bool {
	if spec == "" || strings.IndexByte("0123456789+-.", spec[0]) < 0 {
		return false
	}
	_, err := strconv.ParseFloat(spec, 64)
	return err == nil
}
