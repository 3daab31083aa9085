package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// attentionSection is inspect's report of the attention blocks Detect
// finds (always present in --json), and with --explain the Softmax nodes
// that are not attention cores with the check that failed (in text, the
// library's convert.Detection.Explain).
type attentionSection struct {
	Attention      []*convert.Block    `json:"attention"`
	AttentionCount int                 `json:"attention_count"`
	Unmatched      []convert.Unmatched `json:"unmatched_softmax,omitempty"`
	// Linear lists linear attention already in the model (converted).
	Linear  []convert.LinearNode `json:"linear_attention,omitempty"`
	explain string               // --explain: convert.Detection.Explain
	det     *convert.Detection   // what Detect found, for the other sections
}

func buildAttention(m *onnxpb.ModelProto, f inspectFlags) (attentionSection, error) {
	d, err := convert.Detect(m)
	if err != nil {
		return attentionSection{}, cli.BadInput(err)
	}
	s := attentionSection{Attention: d.Blocks, AttentionCount: d.Count(), Linear: d.Linear, det: d}
	if s.Attention == nil {
		s.Attention = []*convert.Block{}
	}
	if f.explain {
		s.Unmatched = d.Unmatched
		s.explain = d.Explain()
	}
	return s, nil
}

func printAttention(w io.Writer, r *inspectReport) {
	s := r.attentionSection
	fmt.Fprintf(w, "attention:    %d blocks\n", s.AttentionCount)
	if len(s.Linear) > 0 && s.explain == "" { // Explain lists them too
		fmt.Fprintf(w, "converted already: %d linear-attention ops\n", len(s.Linear))
		for _, l := range s.Linear {
			fmt.Fprintf(w, "  %s  %s\n", l.Op, l.Node)
		}
	}
	if s.explain != "" {
		// the library's explanation, then the nodes of each block
		for _, line := range strings.Split(strings.TrimRight(s.explain, "\n"), "\n") {
			fmt.Fprintf(w, "  %s\n", line)
		}
		for _, b := range s.Attention {
			fmt.Fprintf(w, "  block %d nodes: %s\n", b.Layer, strings.Join(b.Nodes, ", "))
		}
		return
	}
	for _, b := range s.Attention {
		conv := "convertible"
		switch {
		case b.Window != nil:
			conv = "window " + b.Window.String() + ", exact (WindowAttention)"
			if b.Alibi != nil {
				conv += " with ALiBi"
			}
		case b.Alibi != nil:
			conv = "ALiBi: local-pooled only"
		case !b.Convertible:
			conv = "not convertible"
		}
		fmt.Fprintf(w, "  %2d  %-40s heads %d × %d  scale %.6g  bias %s  %s\n", b.Layer, b.Form, b.Heads, b.HeadDim, b.Scale, b.Bias, conv)
	}
}
