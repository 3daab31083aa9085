package ops

import (
	"fmt"
	"strings"
)

// The op reference in docs/ops.md is generated from the schemas: go
// generate ./ops runs cmd/internal/opdoc, which replaces the text between
// the two markers by Reference(), and a test fails when the file is stale.
const (
	ReferenceBegin = "<!-- op reference: generated from the schemas in ops/ by `go generate ./ops` (cmd/internal/opdoc); do not edit -->"
	ReferenceEnd   = "<!-- end of the generated op reference -->"
)

// Reference returns the op reference in Markdown: for every custom op its
// doc line, signature, inputs and attributes, from the schemas.
func Reference() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Domain `%s`, version %d. Inputs marked optional may be absent for the Go kernel; a function body cannot test for an absent input, so converters pass every input the body reads. Attributes with a default may be left off a node (converters leave them off).\n", Domain, DomainVersion)
	for _, s := range Schemas() {
		b.WriteString("\n")
		writeOpReference(&b, &s)
	}
	return b.String()
}

func writeOpReference(b *strings.Builder, s *OpSchema) {
	doc := strings.TrimSuffix(strings.TrimPrefix(s.Doc, s.Op+": "), " (see github.com/linearize/linearize/ops).")
	fmt.Fprintf(b, "### %s\n\n%s%s. Go kernel and function body: `%s`.\n\n", s.Op, strings.ToUpper(doc[:1]), doc[1:], s.File)
	var ins, attrs []string
	for _, in := range s.Inputs {
		name := in.Name
		if in.Optional {
			name += "?"
		}
		ins = append(ins, name)
	}
	for _, at := range s.Attrs {
		attrs = append(attrs, at.Name)
	}
	fmt.Fprintf(b, "`%s(%s; %s) → out %s`\n\n", s.Op, strings.Join(ins, ", "), strings.Join(attrs, ", "), s.Output)
	b.WriteString("| input | | |\n|---|---|---|\n")
	for _, in := range s.Inputs {
		need := "required"
		if in.Optional {
			need = "optional"
		}
		fmt.Fprintf(b, "| `%s` | %s | %s |\n", in.Name, need, in.Doc)
	}
	b.WriteString("\n| attribute | type | default | values | |\n|---|---|---|---|---|\n")
	for _, at := range s.Attrs {
		fmt.Fprintf(b, "| `%s` | %s | %s | %s | %s |\n", at.Name, at.Type, at.defaultText(), at.valuesText(), at.Doc)
	}
}

func (a *AttrSchema) defaultText() string {
	switch {
	case a.Required:
		return "required"
	case a.Default == nil && a.Type == AttrFloats:
		return "[] (none)" // the function's attribute_proto (schema.function)
	case a.Default == nil:
		return "—"
	}
	switch v := a.Default.(type) {
	case string:
		return fmt.Sprintf("%q", v)
	case float32:
		return fmt.Sprintf("%g", v)
	}
	return fmt.Sprint(a.Default)
}

func (a *AttrSchema) valuesText() string {
	switch {
	case a.Max > a.Min:
		return fmt.Sprintf("%d..%d", a.Min, a.Max)
	case len(a.Values) > 0:
		q := make([]string, len(a.Values))
		for i, v := range a.Values {
			q[i] = fmt.Sprintf("%q", v)
		}
		return strings.Join(q, ", ")
	case a.Type == AttrFloat || a.Type == AttrFloats:
		return "finite"
	}
	return ""
}

// UpdateReference returns doc with the text between ReferenceBegin and
// ReferenceEnd replaced by Reference().
func UpdateReference(doc string) (string, error) {
	i := strings.Index(doc, ReferenceBegin)
	j := strings.Index(doc, ReferenceEnd)
	if i < 0 || j < i {
		return "", fmt.Errorf("ops: the document has no %q … %q section", ReferenceBegin, ReferenceEnd)
	}
	return doc[:i+len(ReferenceBegin)] + "\n\n" + Reference() + "\n" + doc[j:], nil
}
