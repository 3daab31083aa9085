package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// positionsReport is what inspect says of how long an input the model
// reads and how its positions are encoded: the limit and its source
// (convert.ContextLimit), the rotary embeddings if any, and how to read
// past the limit.
type positionsReport struct {
	Limit  int                    `json:"limit"`
	Kind   convert.LimitKind      `json:"kind,omitempty"`
	Source string                 `json:"source,omitempty"`
	Rotary []convert.RotaryReport `json:"rotary,omitempty"`
	Error  string                 `json:"error,omitempty"`
}

// buildPositions reads the model's limit and rotary embeddings (det: the
// attention blocks inspect found).
func buildPositions(path string, m *onnxpb.ModelProto, det *convert.Detection) *positionsReport {
	r := &positionsReport{Rotary: convert.RotaryEmbeddings(m, det)}
	lim, err := convert.ContextLimit(m, path)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	r.Limit, r.Kind, r.Source = lim.Tokens, lim.Kind, lim.Source
	return r
}

// printPositions writes the positions lines.
func printPositions(w io.Writer, r *positionsReport) {
	if r == nil {
		return
	}
	switch {
	case r.Error != "":
		fmt.Fprintf(w, "positions:    limit unreadable: %s\n", r.Error)
	case r.Limit > 0:
		fmt.Fprintf(w, "positions:    limit %d tokens (%s)\n", r.Limit, r.Source)
	default:
		fmt.Fprintln(w, "positions:    limit unknown (no position table, config.json or doc string says it)")
	}
	if len(r.Rotary) > 0 {
		parts := make([]string, len(r.Rotary))
		for i, f := range r.Rotary {
			parts[i] = f.String()
		}
		fmt.Fprintf(w, "              rotary: %s\n", strings.Join(parts, "; "))
	}
	switch {
	case r.Kind == convert.LimitMetadata:
	case len(r.Rotary) > 0:
		fmt.Fprintln(w, "              extend-positions --max-positions N scales the rotary frequencies to read N (ntk, dynamic, linear or yarn)")
	case r.Kind == convert.LimitTable:
		fmt.Fprintln(w, "              extend-positions --max-positions N grows the table; long reads long inputs by windows")
	case r.Kind == convert.LimitBuffer:
		fmt.Fprintln(w, "              local-pooled computes an ALiBi bias in the op, without the buffer: its model reads longer inputs")
	}
}
