package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/infer"
)

func runValidate(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	rf := addRunFlags(fs)
	tol := fs.Float64("tolerance", infer.DefaultTolerance, "floor of the agreement: an op agrees when its scaled error (max abs error / the op output's scale) is at most this; beyond it, when both sides are within float32 rounding of the op's function body evaluated in float64 (a failure then says which side is off); below 2^-24 (6e-8) it is held literally")
	guarded := fs.Float64("max-guarded", infer.DefaultMaxGuarded, "a PerformerAttention node fails when more than this share of its output rows is decided by the denominator guard (the estimator out of its range); 1 allows any")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	pos, err := cli.ParseFlags(fs, args, stdout)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return cli.UsageError("want exactly one CONVERTED model, got %d arguments", len(pos))
	}
	if err := checkTolerance(*tol); err != nil {
		return err
	}
	if !(*guarded > 0 && *guarded <= 1) {
		return cli.UsageError("--max-guarded %g: want a share in (0, 1]", *guarded)
	}
	m, in, err := rf.load(pos[0])
	if err != nil {
		return err
	}
	v, err := infer.ValidateOps(m, in.Tensors, infer.ValidateOptions{Backend: rf.backend, Threads: rf.threads, Tolerance: *tol, MaxGuarded: *guarded})
	if err != nil {
		if errors.Is(err, infer.ErrNotConverted) {
			return cli.BadInput(err)
		}
		return cli.RuntimeFailure(err)
	}
	if *asJSON {
		if err := v.WriteJSON(stdout); err != nil {
			return cli.RuntimeFailure(err)
		}
	} else {
		fmt.Fprintf(stdout, "%s; inputs: %s\n", pos[0], in.Description)
		if err := v.WriteTable(stdout); err != nil {
			return cli.RuntimeFailure(err)
		}
		if note := fullyMaskedNote(in); note != "" {
			fmt.Fprintln(stdout, note)
		}
	}
	if !v.OK() {
		nonFinite := 0
		for _, c := range v.Checks {
			if c.Diff.HasNonFinite() {
				nonFinite++
			}
		}
		if nonFinite > 0 {
			return cli.RuntimeFailure(fmt.Errorf("%d of %d converted ops fail, %d of them with NaN or Inf outputs (non-finite: no agreement)", v.Failed(), len(v.Checks), nonFinite))
		}
		return cli.RuntimeFailure(fmt.Errorf("%d of %d converted ops fail (disagree beyond tolerance %g and beyond float32 rounding, or the estimator's guard decided more than %g of the rows)%s", v.Failed(), len(v.Checks), *tol, *guarded, failureCauses(v)))
	}
	return nil
}

// failureCauses names the cause of the first failing op whose float64
// check says which side is off (": op 9 LaraAttention (node): the function
// body and the Go kernel (the reference) compute different things: ...",
// and how many more), "" when none has one.
func failureCauses(v *infer.Validation) string {
	var causes []string
	more := 0
	for _, c := range v.Checks {
		if c.OK || c.Error != "" || c.Rounding == nil {
			continue
		}
		if len(causes) == 1 {
			more++
			continue
		}
		causes = append(causes, fmt.Sprintf("op %d %s (%s): %s", c.Index, c.Op, c.Node, c.Rounding.Cause(v.Backend, c.Diff.Scaled)))
	}
	if len(causes) == 0 {
		return ""
	}
	s := ": " + strings.Join(causes, "; ")
	if more > 0 {
		s += fmt.Sprintf("; %d more such ops (see the table)", more)
	}
	return s
}

// checkTolerance vets --tolerance (validate, compare-backends): a
// positive, finite number.
func checkTolerance(tol float64) error {
	if !(tol > 0) || math.IsInf(tol, 0) {
		return cli.UsageError("--tolerance %g: want a positive number", tol)
	}
	return nil
}
