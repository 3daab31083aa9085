package benchrun

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// Baseline is a model a benchmark compares with, named for the report.
type Baseline struct {
	Name string `json:"name"`
	Path string `json:"path"`
	// Kind is the cost-model form that prices it: convert.Original
	// (unfused softmax attention), convert.Fused or convert.Flash, a
	// linear form for a converted
	// model (its ai.linearize ops, or their bodies inlined by
	// onnxruntime's optimizer), or "" when it holds no attention the model
	// recognises (then nothing is predicted against it). Set by
	// LoadBaselines.
	Kind convert.Form `json:"kind,omitempty"`
}

// ParseBaseline parses a NAME=FILE flag value. NAME is letters, digits,
// '-', '_' and '.', and must not be a variant's name.
func ParseBaseline(s string) (Baseline, error) {
	name, path, ok := strings.Cut(s, "=")
	name, path = strings.TrimSpace(name), strings.TrimSpace(path)
	if !ok || name == "" || path == "" {
		return Baseline{}, badBaseline("convert: baseline %q: want NAME=FILE, e.g. fused=out/bench/fused.onnx", s)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return Baseline{}, badBaseline("convert: baseline %q: NAME %q may hold letters, digits, '-', '_' and '.' only", s, name)
		}
	}
	if isVariant(name) {
		return Baseline{}, badBaseline("convert: baseline %q: NAME %q is a variant's name; choose another", s, name)
	}
	return Baseline{Name: name, Path: path}, nil
}

// ErrBadBaseline is wrapped by the errors of ParseBaseline and
// LoadBaselines (a bad NAME=FILE, a missing or unreadable file, inputs
// that differ from the original's).
var ErrBadBaseline = errors.New("convert: bad baseline")

// baselineError is an error that also wraps ErrBadBaseline.
type baselineError struct{ err error }

func (e baselineError) Error() string   { return e.err.Error() }
func (e baselineError) Unwrap() []error { return []error{e.err, ErrBadBaseline} }

func badBaseline(format string, a ...any) error {
	return baselineError{fmt.Errorf(format, a...)}
}

// LoadBaselines loads and checks the baselines against the original
// model: each file must exist and load, the names must be distinct, and
// every input a baseline reads must be an input of the original with the
// same element type and rank (a baseline may read fewer: onnxruntime's
// optimizer drops an attention mask it was told not to use). It returns
// the baselines with Kind set and the loaded models, in order.
func LoadBaselines(orig *onnxpb.ModelProto, bs []Baseline) ([]Baseline, []*onnxpb.ModelProto, error) {
	if len(bs) == 0 {
		return nil, nil, nil
	}
	if orig == nil || orig.Graph == nil {
		return nil, nil, errors.New("convert: baselines: the original model has no graph")
	}
	want := graphInputs(orig)
	seen := map[string]bool{}
	out := make([]Baseline, len(bs))
	models := make([]*onnxpb.ModelProto, len(bs))
	for i, b := range bs {
		if b.Name == "" || b.Path == "" {
			return nil, nil, badBaseline("convert: baseline %d: want a name and a file", i+1)
		}
		if isVariant(b.Name) {
			return nil, nil, badBaseline("convert: baseline %s: the name is a variant's; choose another", b.Name)
		}
		if seen[b.Name] {
			return nil, nil, badBaseline("convert: baseline %s: name given twice", b.Name)
		}
		seen[b.Name] = true
		st, err := os.Stat(b.Path)
		if err != nil {
			return nil, nil, badBaseline("convert: baseline %s: %w", b.Name, err)
		}
		if st.IsDir() {
			return nil, nil, badBaseline("convert: baseline %s: %s is a directory, not a model file", b.Name, b.Path)
		}
		m, err := onnx.Load(b.Path)
		if err != nil {
			return nil, nil, badBaseline("convert: baseline %s: %w", b.Name, err)
		}
		if err := sameInputs(want, graphInputs(m)); err != nil {
			return nil, nil, badBaseline("convert: baseline %s (%s): %w", b.Name, b.Path, err)
		}
		b.Kind = BaselineKind(m)
		out[i], models[i] = b, m
	}
	return out, models, nil
}

// benchInput is a graph input's element type and rank (−1 when unknown).
type benchInput struct {
	elem int32
	rank int
}

// graphInputs maps the inputs of m that are not initializers to their
// element type and rank (−1 when the model declares no shape).
func graphInputs(m *onnxpb.ModelProto) map[string]benchInput {
	out := map[string]benchInput{}
	for _, v := range infer.GraphInputs(m) {
		in := benchInput{elem: int32(v.DType), rank: -1}
		if v.Shape != nil {
			in.rank = len(v.Shape)
		}
		out[v.Name] = in
	}
	return out
}

// sameInputs checks that every input of got is an input of want with
// the same element type and rank.
func sameInputs(want, got map[string]benchInput) error {
	names := func(m map[string]benchInput) string { return strings.Join(sortedKeys(m), ", ") }
	if len(got) == 0 {
		return fmt.Errorf("the model has no inputs; the original reads %s", names(want))
	}
	var bad []string
	for _, n := range sortedKeys(got) {
		g := got[n]
		w, ok := want[n]
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("input %q is not an input of the original (%s)", n, names(want)))
		case g.elem != w.elem:
			bad = append(bad, fmt.Sprintf("input %q is %s, the original's is %s", n, onnx.TypeName(onnx.DataType(g.elem)), onnx.TypeName(onnx.DataType(w.elem))))
		case g.rank >= 0 && w.rank >= 0 && g.rank != w.rank:
			bad = append(bad, fmt.Sprintf("input %q has rank %d, the original's has rank %d", n, g.rank, w.rank))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("inputs differ from the original's: %s", strings.Join(bad, "; "))
	}
	return nil
}

func sortedKeys(m map[string]benchInput) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// BaselineKind says which cost-model form prices a model: convert.Flash
// when its attention is com.microsoft MultiHeadAttention nodes without a
// key padding mask or attention bias (onnxruntime's CPU flash-attention
// path), convert.Fused when it has com.microsoft Attention or
// MultiHeadAttention otherwise, convert.Original when convert.Detect finds
// unfused softmax attention, and "" when none of these.
func BaselineKind(m *onnxpb.ModelProto) convert.Form {
	if m == nil || m.Graph == nil {
		return ""
	}
	attention, mha, masked := 0, 0, 0
	for _, n := range m.Graph.Node {
		if n.GetDomain() != "com.microsoft" {
			continue
		}
		switch n.GetOpType() {
		case "Attention":
			attention++
		case "MultiHeadAttention":
			mha++
			// Inputs 4 and 5 are key_padding_mask and attention_bias.
			for i := 4; i <= 5 && i < len(n.Input); i++ {
				if n.Input[i] != "" {
					masked++
					break
				}
			}
		}
	}
	switch {
	case mha > 0 && attention == 0 && masked == 0:
		return convert.Flash
	case attention > 0 || mha > 0:
		return convert.Fused
	}
	d, err := convert.Detect(m)
	if err != nil {
		return ""
	}
	if d.AlreadyConverted() {
		// A converted model (onnxruntime's offline optimizer may have
		// inlined its ops): priced as its linear form when it has one.
		// Window blocks are WindowAttention in every conversion (the
		// exact one): the model's form is its other op, or the exact
		// one alone.
		var form, exact convert.Form
		for _, l := range d.Linear {
			c, ok := linearConversion(l.Op)
			switch {
			case ok && c.Exact:
				exact = c.Form()
				continue
			case !ok || (form != "" && c.Form() != form):
				return ""
			}
			form = c.Form()
		}
		if form == "" {
			form = exact
		}
		return form
	}
	if d.Count() > 0 {
		return convert.Original
	}
	return ""
}

// isVariant reports whether name is a variant's: the original or a
// conversion.
func isVariant(name string) bool {
	_, ok := convert.LookupConversion(name)
	return ok || convert.Form(name) == convert.Original
}

// linearConversion is the conversion that writes a linear-attention op
// as Detection.Linear names it ("ai.linearize:PerformerAttention",
// "inlined LocalPooledAttention", ...).
func linearConversion(op string) (convert.Conversion, bool) {
	for _, c := range convert.Conversions() {
		if strings.HasSuffix(op, c.Op) {
			return c, true
		}
	}
	return convert.Conversion{}, false
}
