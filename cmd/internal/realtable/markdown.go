package realtable

import (
	"fmt"
	"strings"
)

// LengthMarkdown renders rows of several lengths as one markdown table:
// a row per method, and per length the mean pooled cosine zero-shot and
// fine-tuned ("–" where the method was not run that way).
func LengthMarkdown(rows []Row) string {
	var lengths []int
	var methods []string
	type key struct {
		method string
		n      int
		fit    bool
	}
	cell := map[key]Row{}
	seenL, seenM := map[int]bool{}, map[string]bool{}
	for _, r := range rows {
		if !seenL[r.Length] {
			seenL[r.Length] = true
			lengths = append(lengths, r.Length)
		}
		if !seenM[r.Method] {
			seenM[r.Method] = true
			methods = append(methods, r.Method)
		}
		cell[key{r.Method, r.Length, r.FineTuned}] = r
	}
	var b strings.Builder
	b.WriteString("| variant |")
	for _, n := range lengths {
		fmt.Fprintf(&b, " %s zero-shot | %s fine-tuned |", lengthLabel(n), lengthLabel(n))
	}
	b.WriteString("\n|---|")
	for range lengths {
		b.WriteString("---|---|")
	}
	b.WriteString("\n")
	for _, m := range methods {
		fmt.Fprintf(&b, "| %s |", m)
		for _, n := range lengths {
			for _, fit := range []bool{false, true} {
				r, ok := cell[key{m, n, fit}]
				if !ok {
					b.WriteString(" – |")
					continue
				}
				mark := ""
				if !r.Validated {
					mark = " (validate FAIL)"
				}
				fmt.Fprintf(&b, " %.3f%s |", r.PooledCos, mark)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

func lengthLabel(n int) string {
	if n <= 0 {
		return "untruncated"
	}
	return fmt.Sprintf("n=%d", n)
}

// Markdown renders rows as a markdown table (with a column n when the
// rows carry lengths).
func Markdown(rows []Row) string {
	var b strings.Builder
	layers := 0
	withLen := false
	for _, r := range rows {
		layers = max(layers, len(r.LayerErr))
		withLen = withLen || r.Length > 0
	}
	b.WriteString("| variant |")
	if withLen {
		b.WriteString(" n |")
	}
	b.WriteString(" pooled cos (mean) | pooled cos (min) | mean layer rel err |")
	for l := range layers {
		fmt.Fprintf(&b, " L%d |", l)
	}
	b.WriteString(" fit err before→after | validate |\n|---|---|---|---|")
	if withLen {
		b.WriteString("---|")
	}
	for range layers {
		b.WriteString("---|")
	}
	b.WriteString("---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s |", r.Variant)
		if withLen {
			fmt.Fprintf(&b, " %d |", r.Length)
		}
		fmt.Fprintf(&b, " %.4f | %.4f | %.3f |", r.PooledCos, r.PooledCosMin, r.MeanLayerErr)
		for l := range layers {
			if l < len(r.LayerErr) {
				fmt.Fprintf(&b, " %.3f |", r.LayerErr[l])
			} else {
				b.WriteString(" |")
			}
		}
		fit := "–"
		if r.FitBefore > 0 {
			fit = fmt.Sprintf("%.3f→%.3f", r.FitBefore, r.FitAfter)
		}
		ok := "pass"
		if !r.Validated {
			ok = "FAIL"
		}
		fmt.Fprintf(&b, " %s | %s |\n", fit, ok)
	}
	return b.String()
}
