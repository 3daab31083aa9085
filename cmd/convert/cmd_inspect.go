package main

import (
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// inspectReport is everything inspect prints, built in one place
// (buildInspect) and printed as JSON or text. New sections are new fields
// here, filled in buildInspect and printed in printInspect.
type inspectReport struct {
	Model string `json:"model"`
	onnx.Summary
	Tokenizer        *tokenizerReport `json:"tokenizer"`      // inspect_tokenizer.go
	Positions        *positionsReport `json:"positions"`      // inspect_positions.go
	Cost             *costReport      `json:"cost,omitempty"` // --cost (inspect_cost.go)
	attentionSection                  // attention blocks (inspect_attention.go)
}

// inspectFlags are the flags buildInspect may consult.
type inspectFlags struct {
	json    bool
	cost    costFlags
	explain bool // inspect_attention.go
}

func runInspect(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	var f inspectFlags
	fs.BoolVar(&f.json, "json", false, "print one JSON object instead of text")
	f.cost.register(fs)
	fs.BoolVar(&f.explain, "explain", false, "say for each Softmax that is not an attention core which check failed, and why each block is or is not convertible")
	path, err := cli.ParseModelArg(fs, args, stdout)
	if err != nil {
		return err
	}
	m, err := onnx.Load(path)
	if err != nil {
		return cli.BadInput(err)
	}
	rep, err := buildInspect(path, m, f)
	if err != nil {
		return err
	}
	if f.json {
		return cli.PrintJSON(stdout, rep)
	}
	printInspect(stdout, rep)
	return nil
}

func buildInspect(path string, m *onnxpb.ModelProto, f inspectFlags) (*inspectReport, error) {
	cost, err := buildCost(m, f.cost)
	if err != nil {
		return nil, err
	}
	att, err := buildAttention(m, f)
	if err != nil {
		return nil, err
	}
	return &inspectReport{Model: path, Summary: onnx.Summarize(m), Tokenizer: buildTokenizer(path, m), Positions: buildPositions(path, m, att.det), Cost: cost, attentionSection: att}, nil
}

func printInspect(w io.Writer, r *inspectReport) {
	s := r.Summary
	fmt.Fprintf(w, "model:        %s\n", r.Model)
	fmt.Fprintf(w, "ir_version:   %d\n", s.IRVersion)
	prod := strings.TrimSpace(s.Producer + " " + s.ProducerVersion)
	if prod == "" {
		prod = "(none)"
	}
	fmt.Fprintf(w, "producer:     %s\n", prod)
	var ops []string
	for _, o := range s.Opsets {
		ops = append(ops, fmt.Sprintf("%s %d", o.Domain, o.Version))
	}
	fmt.Fprintf(w, "opsets:       %s\n", strings.Join(ops, ", "))
	printValues := func(title string, vs []onnx.ValueSummary) {
		fmt.Fprintf(w, "%s:\n", title)
		width := 0
		for _, v := range vs {
			width = max(width, len(v.Name))
		}
		for _, v := range vs {
			shape := "[?...]"
			if v.Shape != nil {
				shape = "[" + strings.Join(v.Shape, " ") + "]"
			}
			fmt.Fprintf(w, "  %-*s  %s%s\n", width, v.Name, v.DType, shape)
		}
	}
	printValues("inputs", s.Inputs)
	printValues("outputs", s.Outputs)
	fmt.Fprintf(w, "initializers: %d (%s)\n", s.Initializers, humanBytes(s.InitializerBytes))
	fmt.Fprintf(w, "nodes:        %d\n", s.NodeCount)
	domains := make([]string, 0, len(s.Ops))
	for d := range s.Ops {
		domains = append(domains, d)
	}
	sort.Strings(domains)
	for _, d := range domains {
		type kv struct {
			op string
			n  int
		}
		var list []kv
		for op, n := range s.Ops[d] {
			list = append(list, kv{op, n})
		}
		sort.Slice(list, func(i, j int) bool {
			if list[i].n != list[j].n {
				return list[i].n > list[j].n
			}
			return list[i].op < list[j].op
		})
		parts := make([]string, len(list))
		for i, e := range list {
			parts[i] = fmt.Sprintf("%s %d", e.op, e.n)
		}
		fmt.Fprintf(w, "  %s: %s\n", d, strings.Join(parts, ", "))
	}
	if s.Functions > 0 {
		fmt.Fprintf(w, "functions:    %d\n", s.Functions)
	}
	printTokenizer(w, r.Tokenizer)
	printPositions(w, r.Positions)
	printAttention(w, r)
	printCost(w, r.Cost)
}

// humanBytes formats a byte count as "1.5 MiB".
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
