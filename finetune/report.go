package finetune

import (
	"fmt"
	"math"
	"strings"

	"github.com/linearize/linearize/internal/progress"
)

// This file holds what the fits report (Report and LayerReport for the
// projection fits, TransferReport and TransferLayer for attention
// transfer), as tables and as progress lines.

// LayerReport is the fit of one converted node. Errors are the square
// roots of the relative loss L (see the package documentation), on the
// rows trained on and on the held-out rows, at the start and at the
// parameters kept.
type LayerReport struct {
	Layer  int     `json:"layer"`
	Node   string  `json:"node"`
	Before float64 `json:"rel_err_before"` // √L on the rows trained on, before fitting
	After  float64 `json:"rel_err_after"`  // … and at the parameters kept
	// On the held-out rows (absent for an unguarded fit).
	HeldOutBefore float64 `json:"heldout_rel_err_before,omitempty"`
	HeldOutAfter  float64 `json:"heldout_rel_err_after,omitempty"`
	StepsRun      int     `json:"steps_run"` // Adam steps run: Steps, or fewer when stopped early
	KeptStep      int     `json:"kept_step"` // the step whose parameters were kept (0: the start)
}

// Report says what fitting did.
type Report struct {
	Op     string        `json:"op"`
	Steps  int           `json:"steps"`
	LR     float64       `json:"lr"`
	Layers []LayerReport `json:"layers"`
	// Rows is the number of calibration batch rows (documents), and
	// HeldOutRows those held out of the fit (indices into the batch;
	// empty for an unguarded fit, when Unguarded says why).
	Rows        int    `json:"rows"`
	HeldOutRows []int  `json:"heldout_rows"`
	Unguarded   string `json:"unguarded,omitempty"`
	// HeldOut compares the converted and the fitted model with the
	// original on the held-out rows (nil for an unguarded fit).
	HeldOut *HeldOutCheck `json:"heldout,omitempty"`
	// Kept is KeptFitted when the fitted parameters were returned, or
	// KeptInput when the fitted model was no better than the converted one
	// on the held-out rows and the converted model's parameters were
	// returned unchanged.
	Kept string `json:"kept"`
}

// Values of Report.Kept.
const (
	KeptFitted = "fitted" // the fitted parameters are returned
	KeptInput  = "input"  // the converted model's parameters are returned unchanged
)

// Text renders the report: a table of per-layer relative attention error
// (√ of the fitted loss) before and after fitting, on the rows trained on
// and on the held-out rows, with the step kept out of the steps run, then
// the held-out comparison of the whole model and what was kept
// (HeldOutLine).
func (r *Report) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "fitted %s: %d steps per layer, learning rate %g\n", r.Op, r.Steps, r.LR)
	guarded := len(r.HeldOutRows) > 0
	if guarded {
		fmt.Fprintf(&b, "calibration rows: %d trained on, %d held out (%s)\n", r.Rows-len(r.HeldOutRows), len(r.HeldOutRows), joinInts(r.HeldOutRows))
		fmt.Fprintf(&b, "%-6s %-40s %12s %12s %12s %12s %9s\n", "layer", "node", "train before", "train after", "held before", "held after", "kept/run")
	} else {
		fmt.Fprintf(&b, "calibration rows: %d, all trained on\n", r.Rows)
		fmt.Fprintf(&b, "%-6s %-40s %12s %12s\n", "layer", "node", "err before", "err after")
	}
	for _, l := range r.Layers {
		if guarded {
			fmt.Fprintf(&b, "%-6d %-40s %12.5f %12.5f %12.5f %12.5f %9s\n", l.Layer, l.Node, l.Before, l.After, l.HeldOutBefore, l.HeldOutAfter, fmt.Sprintf("%d/%d", l.KeptStep, l.StepsRun))
		} else {
			fmt.Fprintf(&b, "%-6d %-40s %12.5f %12.5f\n", l.Layer, l.Node, l.Before, l.After)
		}
	}
	b.WriteString(r.HeldOutLine())
	b.WriteByte('\n')
	return b.String()
}

// HeldOutLine is the one line that says how the fitted model did on the
// held-out rows against the converted one and which parameters the fit
// returned (the last line of Text).
func (r *Report) HeldOutLine() string {
	c := r.HeldOut
	if c == nil {
		why := r.Unguarded
		if why == "" {
			why = "no held-out check"
		}
		return fmt.Sprintf("held-out: none (%s): unguarded fit, the fine-tuned parameters are kept unchecked", why)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "held-out (%d of %d calibration rows, %s against the original's): ", c.Rows, r.Rows, c.Output)
	if c.AfterBroken != "" {
		fmt.Fprintf(&b, "relative error converted %.4g → fine-tuned unusable (%s)", c.RelErrBefore, c.AfterBroken)
	} else {
		fmt.Fprintf(&b, "relative error converted %.4g → fine-tuned %.4g", c.RelErrBefore, c.RelErrAfter)
		if c.PooledCosBefore != nil && c.PooledCosAfter != nil {
			fmt.Fprintf(&b, ", mean-pooled cosine %.4f → %.4f", *c.PooledCosBefore, *c.PooledCosAfter)
		}
	}
	switch {
	case r.Kept == KeptFitted:
		b.WriteString(": better, kept the fine-tuned parameters")
	case c.AfterBroken != "":
		b.WriteString(": worse, kept the converted model's parameters")
	case c.RelErrAfter < c.RelErrBefore:
		b.WriteString(": pooled cosine worse, kept the converted model's parameters")
	case c.RelErrAfter == c.RelErrBefore:
		b.WriteString(": no better, kept the converted model's parameters")
	default:
		b.WriteString(": worse, kept the converted model's parameters")
	}
	return b.String()
}

// joinInts lists xs separated by commas.
func joinInts(xs []int) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprint(x)
	}
	return strings.Join(parts, ", ")
}

// layerReport is the report of one fitted layer from the losses of its
// fit.
func layerReport(layer int, node string, tr adamTrace, guarded bool) LayerReport {
	l := LayerReport{Layer: layer, Node: node, Before: math.Sqrt(tr.trainBefore), After: math.Sqrt(tr.trainAfter), StepsRun: tr.steps, KeptStep: tr.kept}
	if guarded {
		l.HeldOutBefore, l.HeldOutAfter = math.Sqrt(tr.heldBefore), math.Sqrt(tr.heldAfter)
	}
	return l
}

// reportLayer writes the progress line of one fitted layer (with its
// held-out errors when the fit is guarded).
func reportLayer(pr *progress.Reporter, op string, l LayerReport, guarded bool) {
	if !guarded {
		pr.Step("%s block %d (%s): rel err %.4f → %.4f", op, l.Layer, l.Node, l.Before, l.After)
		return
	}
	pr.Step("%s block %d (%s): rel err %.4f → %.4f, held-out %.4f → %.4f, kept step %d/%d", op, l.Layer, l.Node,
		l.Before, l.After, l.HeldOutBefore, l.HeldOutAfter, l.KeptStep, l.StepsRun)
}

// TransferLayer is the transfer of one HedgehogAttention node: the
// relative error of its attention output (√(Σ‖out − y‖²/Σ‖y‖²) against the
// exact softmax attention on the same inputs) before (the maps as given,
// before any search or step) and after, on training and held-out rows,
// and the Adam steps its heads took (mean).
type TransferLayer struct {
	Layer       int     `json:"layer"`
	Node        string  `json:"node"`
	TrainBefore float64 `json:"train_rel_err_before"`
	TrainAfter  float64 `json:"train_rel_err_after"`
	HeldBefore  float64 `json:"heldout_rel_err_before"`
	HeldAfter   float64 `json:"heldout_rel_err_after"`
	Steps       float64 `json:"steps"`
}

// TransferReport says what Transfer did.
type TransferReport struct {
	Rows       int             `json:"rows"`
	HeldRows   int             `json:"heldout_rows"`
	SeqLen     int             `json:"seq_len"`
	Tokens     int             `json:"tokens"`
	HeldTokens int             `json:"heldout_tokens"`
	Objective  Objective       `json:"objective"`
	Steps      int             `json:"steps"`
	LR         float64         `json:"lr"`
	Windows    int             `json:"windows"`
	Seconds    float64         `json:"seconds"`
	Layers     []TransferLayer `json:"layers"`
	// HeldOut compares the whole model before and after training with
	// the exact model on the held-out rows (nil without held-out rows);
	// KeptInput says the trained model was not better there, so Transfer
	// returned the model it was given.
	HeldOut   *HeldOutCheck `json:"heldout,omitempty"`
	KeptInput bool          `json:"kept_input"`
}

// Text renders the report as a table.
func (r *TransferReport) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "attention transfer (%s objective): %d calibration windows of %d tokens (%d tokens), %d held out (%d tokens); up to %d steps of %d windows per head, lr %g; %.0f s\n",
		r.Objective, r.Rows-r.HeldRows, r.SeqLen, r.Tokens-r.HeldTokens, r.HeldRows, r.HeldTokens, r.Steps, r.Windows, r.LR, r.Seconds)
	fmt.Fprintf(&b, "%-6s %-40s %10s %10s %12s %12s %7s\n", "layer", "node", "train", "train", "held-out", "held-out", "steps")
	fmt.Fprintf(&b, "%-6s %-40s %10s %10s %12s %12s %7s\n", "", "", "before", "after", "before", "after", "")
	for _, l := range r.Layers {
		fmt.Fprintf(&b, "%-6d %-40s %10.4f %10.4f %12.4f %12.4f %7.0f\n", l.Layer, l.Node, l.TrainBefore, l.TrainAfter, l.HeldBefore, l.HeldAfter, l.Steps)
	}
	if c := r.HeldOut; c != nil {
		fmt.Fprintf(&b, "whole model on %d held-out windows (%s vs the exact model): rel err %.4f → %.4f", c.Rows, c.Output, c.RelErrBefore, c.RelErrAfter)
		if c.PooledCosBefore != nil && c.PooledCosAfter != nil {
			fmt.Fprintf(&b, ", pooled cosine %.4f → %.4f", *c.PooledCosBefore, *c.PooledCosAfter)
		}
		if r.KeptInput {
			b.WriteString("; not better: the untrained maps are kept")
		}
		b.WriteString("\n")
	}
	return b.String()
}
