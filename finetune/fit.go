package finetune

import (
	"fmt"
	"slices"
	"strings"

	"github.com/linearize/linearize/internal/progress"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

// Fit fits whatever converted holds: the Linformer projections of its
// LinformerAttention nodes and the Q/K projections feeding its
// PerformerAttention and LocalPooledAttention nodes (in that order when a
// model has several). The learning rate, when opt.LR is 0, is each
// method's default. With opt.Progress, the layers of all those fits are
// counted together.
//
// The fit is guarded by held-out rows of feed (Options.HeldOut, by default
// a quarter of the rows): they never contribute to gradients, each layer
// keeps its parameters of lowest held-out loss, and after all layers the
// converted and the fitted model are compared with the original on them
// (Report.HeldOut); when the fitted model is not better, Fit returns the
// converted model's parameters unchanged (Report.Kept is KeptInput).
func Fit(original, converted *onnxpb.ModelProto, feed map[string]*onnx.Tensor, opt Options) (*onnxpb.ModelProto, *Report, error) {
	if converted == nil || converted.Graph == nil || original == nil || original.Graph == nil {
		return nil, nil, fmt.Errorf("finetune: model has no graph")
	}
	var run []opFit
	var names []string
	for _, f := range fits {
		names = append(names, f.op)
		if countOp(converted, f.op) > 0 {
			run = append(run, f)
		}
	}
	if len(run) == 0 {
		last := len(names) - 1
		return nil, nil, fmt.Errorf("finetune: the converted model has no %s or %s nodes (convert it first)", strings.Join(names[:last], ", "), names[last])
	}
	return fitGuarded(original, converted, feed, opt, run)
}

// opFit is the fit of one op's nodes, layer by layer (held-out early
// stopping included), reporting progress on shared; the whole-model
// held-out check is fitGuarded's.
type opFit struct {
	op   string
	rank int // Fit runs the fits of a model with several ops by rank
	fit  func(original, converted *onnxpb.ModelProto, feed map[string]*onnx.Tensor, opt Options, shared *progress.Reporter) (*onnxpb.ModelProto, *Report, error)
}

// fits are the fits Fit runs, by rank: each op's fit is declared in its
// own file (linformer.go, performer.go, localpooled.go) and recorded by
// registerFit.
var fits []opFit

// registerFit records f among the fits Fit runs and returns it.
func registerFit(f opFit) opFit {
	fits = append(fits, f)
	slices.SortStableFunc(fits, func(a, b opFit) int { return a.rank - b.rank })
	return f
}

// countOp counts the nodes of m of the linear-attention op op.
func countOp(m *onnxpb.ModelProto, op string) int {
	n := 0
	for _, nd := range m.GetGraph().GetNode() {
		if fitsAs(nd, op) {
			n++
		}
	}
	return n
}

// fitsAs reports whether node n is fitted as the linear-attention op op:
// the op it computes (ops.ComputedOp: a pooled LinformerAttention node,
// what `convert linformer` writes, is fitted as LocalPooledAttention).
func fitsAs(n *onnxpb.NodeProto, op string) bool {
	return n.GetDomain() == ops.Domain && ops.ComputedOp(n) == op
}

// fitGuarded runs fits one after the other, each on the model the one
// before fitted, then (unless the fit was unguarded) compares the
// converted and the fitted model on the held-out rows and returns the
// fitted model only when it is better there (HeldOutCheck.Better), else a
// copy of the converted one.
func fitGuarded(original, converted *onnxpb.ModelProto, feed map[string]*onnx.Tensor, opt Options, fits []opFit) (*onnxpb.ModelProto, *Report, error) {
	if err := opt.checkGuard(); err != nil {
		return nil, nil, err
	}
	layers := 0
	for _, f := range fits {
		layers += countOp(converted, f.op)
	}
	// One count of layers over the fits below.
	shared := progress.New(opt.Progress, progressLabel, layers)
	m := converted
	var rep *Report
	for _, f := range fits {
		out, r, err := f.fit(original, m, feed, opt, shared)
		if err != nil {
			return nil, nil, err
		}
		if rep == nil {
			rep = r
		} else {
			if r.Rows != rep.Rows || fmt.Sprint(r.HeldOutRows) != fmt.Sprint(rep.HeldOutRows) {
				return nil, nil, fmt.Errorf("finetune: %s and %s fits split the calibration rows differently", rep.Op, r.Op)
			}
			rep.Op += "+" + r.Op
			rep.Layers = append(rep.Layers, r.Layers...)
		}
		m = out
	}
	rep.Kept = KeptFitted
	if len(rep.HeldOutRows) == 0 {
		return m, rep, nil
	}
	c, err := checkHeldOut(original, converted, m, feed, rep.Rows, rep.HeldOutRows, opt)
	if err != nil {
		return nil, nil, err
	}
	rep.HeldOut = c
	if !c.Better() {
		rep.Kept = KeptInput
		return onnx.CloneShared(converted), rep, nil
	}
	return m, rep, nil
}
