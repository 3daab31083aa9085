package finetune

import (
	"fmt"
	"strings"

	"github.com/linearize/linearize/internal/progress"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

// Fit fits whatever converted holds: the Linformer projections of its
// LinformerAttention nodes and the Q/K projections feeding its
// PerformerAttention and LocalPooledAttention nodes (in that order when a
// model has several). The
// learning rate, when opt.LR is 0, is each method's default. With
// opt.Progress, the layers of all those fits are counted together.
func Fit(original, converted *onnxpb.ModelProto, feed map[string]*onnx.Tensor, opt Options) (*onnxpb.ModelProto, *Report, error) {
	if converted == nil || converted.Graph == nil || original == nil || original.Graph == nil {
		return nil, nil, fmt.Errorf("finetune: model has no graph")
	}
	count := map[string]int{}
	for _, n := range converted.Graph.Node {
		if n.GetDomain() == ops.Domain {
			count[n.GetOpType()]++
		}
	}
	if count[ops.LinformerOp] == 0 && count[ops.PerformerOp] == 0 && count[ops.LocalPooledOp] == 0 {
		return nil, nil, fmt.Errorf("finetune: the converted model has no %s, %s or %s nodes (convert it first)", ops.LinformerOp, ops.PerformerOp, ops.LocalPooledOp)
	}
	// One count of layers over the fits below.
	shared := progress.New(opt.Progress, progressLabel, count[ops.LinformerOp]+count[ops.PerformerOp]+count[ops.LocalPooledOp])
	m := converted
	var rep *Report
	for _, f := range []struct {
		op  string
		fit func(original, converted *onnxpb.ModelProto, feed map[string]*onnx.Tensor, opt Options, shared *progress.Reporter) (*onnxpb.ModelProto, *Report, error)
	}{{ops.LinformerOp, linformer}, {ops.PerformerOp, performer}, {ops.LocalPooledOp, localPooled}} {
		if count[f.op] == 0 {
			continue
		}
		out, r, err := f.fit(original, m, feed, opt, shared)
		if err != nil {
			return nil, nil, err
		}
		if rep == nil {
			rep = r
		} else {
			rep.Op += "+" + r.Op
			rep.Layers = append(rep.Layers, r.Layers...)
		}
		m = out
	}
	return m, rep, nil
}

// Text renders the report as a table of per-layer relative attention
// error (√ of the fitted loss) before and after fitting.
func (r *Report) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "fitted %s: %d steps per layer, learning rate %g\n", r.Op, r.Steps, r.LR)
	fmt.Fprintf(&b, "%-6s %-40s %12s %12s\n", "layer", "node", "err before", "err after")
	for _, l := range r.Layers {
		fmt.Fprintf(&b, "%-6d %-40s %12.5f %12.5f\n", l.Layer, l.Node, l.Before, l.After)
	}
	return b.String()
}
