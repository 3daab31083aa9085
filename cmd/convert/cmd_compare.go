package main

import (
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/embed"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

// modelLabels names models by file name, or by path when names repeat.
func modelLabels(paths []string) []string {
	labels := make([]string, len(paths))
	seen := map[string]int{}
	for i, p := range paths {
		labels[i] = filepath.Base(p)
		seen[labels[i]]++
	}
	for i, p := range paths {
		if seen[labels[i]] > 1 {
			labels[i] = p
		}
	}
	return labels
}

func runCompare(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	rf := addRunFlags(fs)
	layers := fs.Bool("per-layer", true, "also compare each attention block's output (head-merged, token layout) where both models produce it; each model runs its own forward pass, so differences accumulate over layers")
	pooling := fs.String("pooling", "auto", "pool [batch, seq, dim] outputs by `KIND` for the pooled cosines: mean, cls, max, or auto (the reference model's sentence-transformers files, else mean), as embed does")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	pos, err := cli.ParseFlags(fs, args, stdout)
	if err != nil {
		return err
	}
	if len(pos) < 2 {
		return cli.UsageError("want at least two models (the first is the reference), got %d", len(pos))
	}
	if *pooling != "auto" && !slices.Contains(infer.Poolings, *pooling) {
		return cli.UsageError("--pooling %q: want auto, %s", *pooling, strings.Join(infer.Poolings, ", "))
	}
	if err := rf.check(); err != nil {
		return err
	}
	models := make([]*onnxpb.ModelProto, len(pos))
	for i, p := range pos {
		if models[i], err = onnx.Load(p); err != nil {
			return cli.BadInput(err)
		}
	}
	in, err := rf.buildFor(models, pos)
	if err != nil {
		return err
	}
	pool, from, err := comparePooling(pos[0], *pooling)
	if err != nil {
		return err
	}
	opt := infer.ModelCompareOptions{Backend: rf.backend, Threads: rf.threads, Mask: in.Mask, Batch: in.Batch, SeqLen: in.SeqLen, Labels: map[string]string{}, Pooling: pool}
	if *layers {
		opt.Values = layerValues(models, opt.Labels)
	}
	mc, err := infer.CompareModels(models, modelLabels(pos), in.Tensors, opt)
	if err != nil {
		return cli.RuntimeFailure(err)
	}
	mc.Inputs = in.Description
	if from != "option" {
		mc.Pooling += " (" + from + ")"
	}
	if err := writeComparison(stdout, mc, in, *asJSON); err != nil {
		return err
	}
	// A NaN or Inf in any value compared is a failure, never an
	// agreement (even the same NaN in both models).
	if bad := mc.NonFinite(); len(bad) > 0 {
		more := ""
		if len(bad) > 3 {
			more = fmt.Sprintf("; and %d more", len(bad)-3)
			bad = bad[:3]
		}
		return cli.RuntimeFailure(fmt.Errorf("%d compared values are not finite, which is no agreement: %s%s", len(mc.NonFinite()), strings.Join(bad, "; "), more))
	}
	return nil
}

// comparePooling is the pooling of compare's pooled cosines: flag itself,
// or for "auto" the reference model's sentence-transformers pooling
// (embed.ModelPooling), else mean; and where it came from.
func comparePooling(reference, flag string) (pooling, from string, err error) {
	p := embed.Pooling(flag)
	if flag == "auto" {
		p = embed.PoolAuto
	}
	got, from, err := embed.ModelPooling(reference, p)
	if err != nil {
		return "", "", cli.BadInput(err)
	}
	if !slices.Contains(infer.Poolings, string(got)) {
		return "", "", cli.BadInput(fmt.Errorf("%s: pooling %q: compare pools by %s", from, got, strings.Join(infer.Poolings, ", ")))
	}
	return string(got), from, nil
}

// writeComparison prints mc as JSON or as tables (with the side-by-side
// table for three models or more).
func writeComparison(stdout io.Writer, mc *infer.ModelComparison, in *infer.Feed, asJSON bool) error {
	if asJSON {
		return mc.WriteJSON(stdout)
	}
	if err := mc.WriteTable(stdout); err != nil {
		return err
	}
	if note := fullyMaskedNote(in); note != "" {
		fmt.Fprintln(stdout, note)
	}
	if len(mc.Models) < 3 {
		return nil
	}
	return writeSideBySide(stdout, mc)
}

// writeSideBySide prints, for every value compared, its relative error
// and mean pooled cosine against the reference in one column per model,
// so that models compared with one reference (a conversion and its
// fine-tuning, say) read side by side.
func writeSideBySide(w io.Writer, mc *infer.ModelComparison) error {
	models := mc.Models[1:]
	type key struct{ value, model string }
	rows := map[key]infer.ValueComparison{}
	var values []string
	label := map[string]string{}
	for _, r := range mc.Rows {
		k := key{r.Value, r.Model}
		if _, seen := label[r.Value]; !seen {
			values = append(values, r.Value)
			label[r.Value] = r.Value
			if r.Label != "" {
				label[r.Value] = r.Label
			}
		}
		rows[k] = r
	}
	fmt.Fprintf(w, "\nside by side, against %s:\n", mc.Models[0])
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "value\t")
	for _, what := range []string{"rel err", "pooled cos mean"} {
		for _, m := range models {
			fmt.Fprintf(tw, "%s %s\t", what, m)
		}
	}
	fmt.Fprintln(tw)
	for _, v := range values {
		fmt.Fprintf(tw, "%s\t", label[v])
		for _, pooled := range []bool{false, true} {
			for _, m := range models {
				r, ok := rows[key{v, m}]
				switch {
				case !ok:
					fmt.Fprint(tw, "-\t")
				case r.Mismatch != "":
					fmt.Fprint(tw, "mismatch\t")
				case r.NonFinite != "":
					fmt.Fprint(tw, "non-finite\t")
				case !pooled:
					fmt.Fprintf(tw, "%.4g\t", r.RelErr)
				case r.PooledCosMean != nil:
					fmt.Fprintf(tw, "%.5f\t", *r.PooledCosMean)
				default:
					fmt.Fprint(tw, "-\t")
				}
			}
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// layerValues names each attention block's output in token layout: the
// head-merged output of every core convert.Detect finds and of every
// converted (ai.linearize) node, in any of the models. A conversion keeps
// the merge nodes, so the same name exists in the original and converted
// models.
func layerValues(models []*onnxpb.ModelProto, labels map[string]string) []string {
	var values []string
	add := func(m *onnxpb.ModelProto, out string, layer int) {
		v := infer.MergedValue(m, out)
		if _, dup := labels[v]; dup {
			return
		}
		labels[v] = fmt.Sprintf("layer %d attention", layer)
		values = append(values, v)
	}
	for _, m := range models {
		if det, err := convert.Detect(m); err == nil {
			for _, b := range det.Blocks {
				switch {
				case b.Function != "":
				case b.Merged != "": // proved by Detect
					add(m, b.Merged, b.Layer)
				default: // a fused core
					add(m, b.Output, b.Layer)
				}
			}
		}
		layer := 0
		for _, n := range m.GetGraph().GetNode() {
			if n.GetDomain() == ops.Domain && len(n.Output) > 0 {
				add(m, n.Output[0], layer)
				layer++
			}
		}
	}
	return values
}
