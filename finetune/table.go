package finetune

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/runtime"
)

// Variant is one conversion of the table: exactly one of Performer and
// Linformer is set; Fit also fine-tunes it on the calibration inputs.
type Variant struct {
	Performer *convert.PerformerOptions
	Linformer *convert.LinformerOptions
	Fit       bool
	Steps     int // Adam steps per layer when fitting (0: TableOptions.Fit.Steps)
}

// Name describes the variant in a table row.
func (v Variant) Name() string {
	var s string
	switch {
	case v.Performer != nil:
		o := v.Performer
		s = fmt.Sprintf("Performer M=%d %s %s", o.Features, def(o.Omega, "orthogonal"), def(o.Norms, "chi"))
	case v.Linformer != nil:
		s = fmt.Sprintf("Linformer k=%d", v.Linformer.K)
	}
	if v.Fit {
		return s + ", fine-tuned"
	}
	return s + ", zero-shot"
}

func def(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// Inputs is a batch of model inputs with its padding mask.
type Inputs struct {
	Feed          map[string]*onnx.Tensor
	Mask          []int64 // [Batch, SeqLen], 1 on real tokens; nil: all real
	Batch, SeqLen int
}

// TableOptions configures Table.
type TableOptions struct {
	Variants    []Variant
	Calibration Inputs // fine-tuning inputs
	HeldOut     Inputs // measuring inputs
	Fit         Options
	// Progress, when set, is called after each variant.
	Progress func(row TableRow)
}

// TableRow is the measurement of one variant on the held-out inputs.
type TableRow struct {
	Variant string `json:"variant"`
	// PooledCos is the mean over held-out rows of the cosine between the
	// variant's and the original's mean-pooled embeddings (of the first
	// [B,S,D] output); PooledCosMin its minimum.
	PooledCos    float64 `json:"pooled_cos_mean"`
	PooledCosMin float64 `json:"pooled_cos_min"`
	Output       string  `json:"output"`
	// LayerErr is each attention block's ‖out − exact‖/‖exact‖ on the
	// held-out inputs (unpadded tokens); MeanLayerErr their mean.
	LayerErr     []float64 `json:"layer_rel_err"`
	MeanLayerErr float64   `json:"mean_layer_rel_err"`
	// Validated says whether convert validate's check (every converted
	// node recomputed by its Go kernel) passed on the held-out inputs.
	Validated bool `json:"validated"`
	// FitBefore and FitAfter are the mean per-layer calibration errors of
	// fine-tuning (√L), when the variant is fine-tuned.
	FitBefore float64 `json:"fit_err_before,omitempty"`
	FitAfter  float64 `json:"fit_err_after,omitempty"`
	Seconds   float64 `json:"seconds"`
}

// Table converts original with each variant, fine-tunes those that ask
// for it, and measures every variant against the original on the
// held-out inputs.
func Table(original *onnxpb.ModelProto, opt TableOptions) ([]TableRow, error) {
	det, err := convert.Detect(original)
	if err != nil {
		return nil, fmt.Errorf("finetune: %w", err)
	}
	var values []string
	for _, b := range det.Blocks {
		values = append(values, runtime.MergedValue(original, b.Output))
	}
	var rows []TableRow
	for _, v := range opt.Variants {
		start := time.Now()
		row := TableRow{Variant: v.Name()}
		var m *onnxpb.ModelProto
		switch {
		case v.Performer != nil && v.Linformer == nil:
			m, _, err = convert.ToPerformer(original, *v.Performer)
		case v.Linformer != nil && v.Performer == nil:
			m, _, err = convert.ToLinformer(original, *v.Linformer)
		default:
			err = fmt.Errorf("want exactly one of Performer and Linformer options")
		}
		if err != nil {
			return rows, fmt.Errorf("finetune: %s: %w", row.Variant, err)
		}
		if v.Fit {
			fo := opt.Fit
			if v.Steps > 0 {
				fo.Steps = v.Steps
			}
			fitted, rep, err := Fit(original, m, opt.Calibration.Feed, fo)
			if err != nil {
				return rows, fmt.Errorf("finetune: %s: %w", row.Variant, err)
			}
			m = fitted
			for _, l := range rep.Layers {
				row.FitBefore += l.Before / float64(len(rep.Layers))
				row.FitAfter += l.After / float64(len(rep.Layers))
			}
		}
		h := opt.HeldOut
		mc, err := runtime.CompareModels([]*onnxpb.ModelProto{original, m}, []string{"original", row.Variant}, h.Feed,
			runtime.ModelCompareOptions{Backend: opt.Fit.Backend, Threads: opt.Fit.Threads, Values: values, Mask: h.Mask, Batch: h.Batch, SeqLen: h.SeqLen})
		if err != nil {
			return rows, fmt.Errorf("finetune: %s: %w", row.Variant, err)
		}
		byValue := map[string]runtime.ValueComparison{}
		for _, r := range mc.Rows {
			if r.Model != row.Variant {
				continue
			}
			byValue[r.Value] = r
			if r.Kind == "output" && r.PooledCosMean != nil && row.Output == "" {
				row.Output, row.PooledCos, row.PooledCosMin = r.Value, *r.PooledCosMean, *r.PooledCosMin
			}
		}
		if row.Output == "" {
			return rows, fmt.Errorf("finetune: %s: the model has no [batch, sequence, hidden] output to mean-pool", row.Variant)
		}
		for _, name := range values {
			r, ok := byValue[name]
			e := math.NaN()
			if ok && r.Mismatch == "" {
				e = r.RelErr
			}
			row.LayerErr = append(row.LayerErr, e)
			row.MeanLayerErr += e / float64(len(values))
		}
		val, err := runtime.ValidateOps(m, h.Feed, runtime.ValidateOptions{Backend: opt.Fit.Backend, Threads: opt.Fit.Threads})
		row.Validated = err == nil && val.OK()
		row.Seconds = time.Since(start).Seconds()
		rows = append(rows, row)
		if opt.Progress != nil {
			opt.Progress(row)
		}
	}
	return rows, nil
}

// Markdown renders rows as a markdown table.
func Markdown(rows []TableRow) string {
	var b strings.Builder
	layers := 0
	for _, r := range rows {
		layers = max(layers, len(r.LayerErr))
	}
	b.WriteString("| variant | pooled cos (mean) | pooled cos (min) | mean layer rel err |")
	for l := range layers {
		fmt.Fprintf(&b, " L%d |", l)
	}
	b.WriteString(" fit err before→after | validate |\n|---|---|---|---|")
	for range layers {
		b.WriteString("---|")
	}
	b.WriteString("---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %.4f | %.4f | %.3f |", r.Variant, r.PooledCos, r.PooledCosMin, r.MeanLayerErr)
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
