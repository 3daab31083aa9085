package finetune

import (
	"fmt"
	"io"
	"math"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/internal/progress"
)

// This file holds the options of the fits (Options for the projection
// fits, TransferOptions for attention transfer) and their defaults.

// Options configures fitting.
type Options struct {
	Steps   int     // Adam steps per layer (default 200); a guarded layer may stop earlier
	LR      float64 // Adam learning rate (default 0.01 for Linformer, 0.0005 for Performer)
	Batch   int     // calibration batch rows per step, drawn from the rows trained on (0: all)
	Seed    uint64  // seeds the mini-batch draws and the held-out rows
	Backend string  // runs the models (infer.DefaultBackend when empty)
	Threads int
	// FitValues also fits the V projection of LocalPooledAttention layers.
	// Off by default: on all-MiniLM-L6-v2 (16 calibration documents of 512
	// tokens, 60 steps) it cut the calibration error further but lowered
	// the held-out embedding cosine from 0.970 (Q/K only) to 0.947.
	FitValues bool
	// HeldOut marks the calibration batch rows held out of the fit, one
	// entry per row; a row is a document (the command line makes one of
	// each text), so whole documents are held out. Held-out rows never
	// contribute to gradients; every layer keeps the parameters of its
	// lowest loss on them (the start included: no layer ends worse on
	// them) and stops after Patience checkpoints without a lower one; and
	// the whole fitted model is returned only if it beats the converted
	// model on them, else the converted model's parameters are (see
	// Report.Kept and Report.HeldOut). nil: HeldOutFraction of the rows,
	// drawn with Seed. At least one row must be left to train on; no
	// marked row means an unguarded fit.
	HeldOut []bool
	// HeldOutFraction is the fraction of rows held out when HeldOut is nil
	// (0: DefaultHeldOutFraction, 0.25), rounded, at least one row and
	// leaving one to train on. A batch of a single row has nothing to hold
	// out: it is fitted unguarded, and Report.Unguarded says so.
	HeldOutFraction float64
	// Unguarded fits on every row with no held-out check: each layer keeps
	// the parameters of its lowest training loss, runs every step, and the
	// fitted model is returned whatever it does on other inputs.
	Unguarded bool
	// Patience is the number of checkpoints (every CheckpointEvery steps)
	// without a lower held-out loss after which a layer stops (0:
	// DefaultPatience; negative: never stop early).
	Patience int
	// Progress, when set, receives one line per layer fitted: the layer's
	// place among those to fit, its node, its relative error before and
	// after fitting on the rows trained on and on the held-out rows, the
	// step kept, the time elapsed and an estimate of the time left.
	// nil is silent.
	Progress io.Writer
}

func (o *Options) defaults(lr float64) error {
	if o.Steps == 0 {
		o.Steps = 200
	}
	if o.LR == 0 {
		o.LR = lr
	}
	if o.Backend == "" {
		o.Backend = infer.DefaultBackend
	}
	if o.Steps < 0 || !(o.LR > 0) || math.IsInf(o.LR, 0) {
		return fmt.Errorf("finetune: steps %d must be ≥ 0 and learning rate %g positive", o.Steps, o.LR)
	}
	return o.checkGuard()
}

// checkGuard checks the held-out options that do not depend on the batch.
func (o *Options) checkGuard() error {
	f := o.HeldOutFraction
	if math.IsNaN(f) || f < 0 || f >= 1 {
		return fmt.Errorf("finetune: held-out fraction %g must be in [0, 1)", f)
	}
	if o.Unguarded && o.HeldOut != nil {
		for _, h := range o.HeldOut {
			if h {
				return fmt.Errorf("finetune: Unguarded, yet HeldOut marks rows to hold out")
			}
		}
	}
	return nil
}

// patience is the number of checkpoints without improvement after which a
// guarded fit stops (0: never).
func (o *Options) patience() int {
	switch {
	case o.Patience == 0:
		return DefaultPatience
	case o.Patience < 0:
		return 0
	}
	return o.Patience
}

// reporter returns the progress reporter of a fit of n layers: Fit's
// (shared, counting the layers of all its fits), or a new one on
// o.Progress.
func (o *Options) reporter(shared *progress.Reporter, n int) *progress.Reporter {
	if shared != nil {
		return shared
	}
	return progress.New(o.Progress, progressLabel, n)
}

// progressLabel starts every progress line.
const progressLabel = "finetune: layer"

const (
	// DefaultHeldOutFraction is the fraction of calibration rows held out
	// when Options.HeldOut is nil and Options.HeldOutFraction is 0.
	DefaultHeldOutFraction = 0.25
	// DefaultPatience is the number of checkpoints without a lower
	// held-out loss after which a layer stops when Options.Patience is 0.
	DefaultPatience = 5
	// CheckpointEvery is the number of Adam steps between two checkpoints
	// (a held-out evaluation); the last step is always one.
	CheckpointEvery = 10
)

// Objective is what attention transfer minimises.
type Objective string

// The objectives of Transfer.
const (
	// ObjectiveOutput is the relative squared error of each head's
	// attention output against exact softmax attention on the same
	// inputs, Σ‖out − y‖²/Σ‖y‖² (LoLCATs' attention transfer).
	ObjectiveOutput Objective = "output"
	// ObjectiveWeights is the cross-entropy between the exact attention
	// weights and the head's, Σ_i KL(P_i ‖ A_i), over sampled queries
	// (Hedgehog's attention distillation).
	ObjectiveWeights Objective = "weights"
)

// TransferOptions configures Transfer. The zero value is the default.
type TransferOptions struct {
	// Objective drives the gradients (default ObjectiveOutput). The
	// held-out check and the report always measure the output error,
	// which is what the next layer sees.
	Objective Objective
	// Queries is the number of queries per row the weights objective
	// samples at each step (default 64).
	Queries int
	// Steps is the number of Adam steps per head (default 300).
	Steps int
	// LR is Adam's learning rate (default 0.01).
	LR float64
	// Windows is the number of calibration rows per step (default 8).
	Windows int
	// HeldOut marks the calibration rows kept out of training (one per
	// row; whole documents, see Calibration.HoldOut). nil holds out every
	// fourth document. The parameters kept are those of the lowest error
	// on these rows.
	HeldOut []bool
	// CheckEvery is the number of steps between held-out checks (default
	// 25) and Patience the checks without improvement before a head stops
	// early (default 4; negative: never).
	CheckEvery, Patience int
	// EvalRows caps the rows each check evaluates (default 32).
	EvalRows int
	// Seed draws the mini-batches; each head has its own stream, so the
	// result does not depend on Threads.
	Seed    uint64
	Backend string // runs the teacher (infer.DefaultBackend when empty)
	Threads int    // heads trained at once, and the teacher's threads
	// TeacherBatch is the number of rows per teacher run (default 8 rows
	// of 512 tokens, fewer for longer rows: the exact teacher's scores
	// grow with the square of the length).
	TeacherBatch int
	// MaxCapture bounds the bytes of captured teacher values held at once
	// (default 2 GiB): layers are captured together, one teacher pass for
	// as many as fit.
	MaxCapture int64
	// Progress, when set, gets one line per layer (and, from TrainHedgehog
	// and TrainLong, a note when no document can be held out). nil is
	// silent.
	Progress io.Writer
}

func (o *TransferOptions) defaults() error {
	set := func(x *int, v int) {
		if *x == 0 {
			*x = v
		}
	}
	set(&o.Steps, 300)
	set(&o.Windows, 8)
	set(&o.CheckEvery, 25)
	set(&o.Patience, 4)
	set(&o.EvalRows, 32)
	set(&o.Queries, 64)
	switch o.Objective {
	case "":
		o.Objective = ObjectiveOutput
	case ObjectiveOutput, ObjectiveWeights:
	default:
		return fmt.Errorf("finetune: objective %q, want %s or %s", o.Objective, ObjectiveOutput, ObjectiveWeights)
	}
	if o.LR == 0 {
		o.LR = 0.01
	}
	if o.MaxCapture == 0 {
		o.MaxCapture = 2 << 30
	}
	if o.Backend == "" {
		o.Backend = infer.DefaultBackend
	}
	if o.Queries < 0 || o.Steps < 0 || o.Windows < 0 || o.CheckEvery < 0 || o.EvalRows < 0 || o.TeacherBatch < 0 || o.Threads < 0 || !(o.LR > 0) || math.IsInf(o.LR, 0) {
		return fmt.Errorf("finetune: transfer options: steps, windows, check interval, evaluation rows, teacher batch and threads must be ≥ 0 and the learning rate positive")
	}
	if o.Patience < 0 {
		o.Patience = 0
	}
	return nil
}
