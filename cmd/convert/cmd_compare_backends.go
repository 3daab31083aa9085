package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/internal/gemm"
	"github.com/linearize/linearize/onnx"
)

// backendsReport is the JSON form of compare-backends.
type backendsReport struct {
	Model     string                `json:"model"`
	Inputs    string                `json:"inputs"`
	Reference string                `json:"reference"`
	Tolerance float64               `json:"tolerance"` // --tolerance; 0: each output's default`
	Outputs   []backendsOutputEntry `json:"outputs"`
	Agree     bool                  `json:"agree"`
}

type backendsOutputEntry struct {
	Shape []int `json:"shape"`
	infer.OutputDiff
	// NonFinite says how many NaN and Inf values either backend gave
	// (then the output fails whatever the figures, which leave them out).
	NonFinite string `json:"non_finite,omitempty"`
	// Tolerance is the one this output was held to: --tolerance, else
	// infer.ModelTolerance of its element type.
	Tolerance float64 `json:"tolerance"`
	OK        bool    `json:"ok"`
}

func runCompareBackends(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("compare-backends", flag.ContinueOnError)
	ff := addFeedFlags(fs)
	threads := fs.Int("threads", 0, "intra-op threads of both backends (0: backend default)")
	tol := fs.Float64("tolerance", 0, fmt.Sprintf("an output agrees when its scaled error (max abs error / max |onnxruntime output|) is at most this (default %g; 16 units in the last place, %g, for a model or output in float16, %g in bfloat16)", infer.DefaultTolerance, infer.ModelTolerance(onnx.Float16), infer.ModelTolerance(onnx.BFloat16)))
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	path, err := cli.ParseModelArg(fs, args, stdout)
	if err != nil {
		return err
	}
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "tolerance" })
	if given {
		if err := checkTolerance(*tol); err != nil {
			return err
		}
	}
	m, in, err := ff.load(path)
	if err != nil {
		return err
	}
	nat, ref, err := cli.OpenBothBackends(m, *threads)
	if err != nil {
		return err
	}
	defer nat.Close()
	defer ref.Close()
	diffs, err := infer.CompareSessions(nat, ref, in.Tensors)
	if err != nil {
		return cli.RuntimeFailure(err)
	}
	outs, err := ref.Run(in.Tensors)
	if err != nil {
		return cli.RuntimeFailure(err)
	}
	rep := backendsReport{Model: path, Inputs: in.Description, Reference: "ort", Tolerance: *tol, Agree: true}
	var nonFinite []string
	precision := infer.ModelPrecision(m)
	for _, d := range diffs {
		e := backendsOutputEntry{OutputDiff: d, NonFinite: d.NonFinite("native", "onnxruntime"), Tolerance: *tol}
		if t := outs[d.Name]; t != nil {
			e.Shape = t.Shape
			if !given {
				// The narrower of the output's type and the weights'.
				e.Tolerance = max(infer.ModelTolerance(t.DType), infer.ModelTolerance(precision))
			}
		}
		if e.Tolerance == 0 {
			e.Tolerance = infer.DefaultTolerance
		}
		e.OK = d.OK(e.Tolerance)
		if e.NonFinite != "" {
			nonFinite = append(nonFinite, d.Name+": "+e.NonFinite)
		}
		rep.Agree = rep.Agree && e.OK
		rep.Outputs = append(rep.Outputs, e)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return cli.RuntimeFailure(err)
		}
	} else {
		fmt.Fprintf(stdout, "model   %s\ninputs  %s\nnative (gemm %s) vs onnxruntime\n"+
			"an output agrees when scaled = max abs / max |onnxruntime output| ≤ its tolerance (--tolerance, else %g, or 16 units in the last place of a float16 or bfloat16 output); max rel (per element, large near zero) does not decide\n\n",
			rep.Model, rep.Inputs, gemm.Kernel(), infer.DefaultTolerance)
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "output\tshape\tmax abs\tmax rel\tmean abs\tscaled\tcosine\ttolerance\tagree\n")
		for _, e := range rep.Outputs {
			if e.Mismatch != "" || e.NonFinite != "" {
				fmt.Fprintf(tw, "%s\t%v\t%s%s\t\t\t\t\t%g\tno\n", e.Name, e.Shape, e.Mismatch, e.NonFinite, e.Tolerance)
				continue
			}
			ok := "yes"
			if !e.OK {
				ok = "no"
			}
			fmt.Fprintf(tw, "%s\t%v\t%.3g\t%.3g\t%.3g\t%.3g\t%.6f\t%g\t%s\n", e.Name, e.Shape, e.MaxAbs, e.MaxRel, e.MeanAbs, e.Scaled, e.Cosine, e.Tolerance, ok)
		}
		tw.Flush()
	}
	if len(nonFinite) > 0 {
		return cli.RuntimeFailure(fmt.Errorf("%s: %d of %d outputs are not finite, which is no agreement: %s", path, len(nonFinite), len(rep.Outputs), strings.Join(nonFinite, ", ")))
	}
	if !rep.Agree {
		var bad []string
		for _, e := range rep.Outputs {
			if !e.OK {
				bad = append(bad, fmt.Sprintf("%s (scaled %.3g > %g)", e.Name, e.Scaled, e.Tolerance))
			}
		}
		return cli.RuntimeFailure(fmt.Errorf("compare-backends: the backends disagree on %s: %s", path, strings.Join(bad, ", ")))
	}
	return nil
}
