package realtable

import (
	"fmt"
	"io"
	"math"
	"reflect"
	"time"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/finetune"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/internal/progress"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// Variant is one conversion of the table: exactly one of Performer,
// Linformer, LocalPooled and Lara is set; Fit also fine-tunes it on the
// calibration inputs (finetune.Fit).
type Variant struct {
	Performer *convert.PerformerOptions
	Linformer *convert.LinformerOptions
	// LocalPooled converts with convert.ToLocalPooled: exact block-local
	// and sink attention plus segment-mean keys; with NoLocal, a pooled
	// Linformer.
	LocalPooled *convert.LocalPooledOptions
	// Lara converts with convert.ToLARA (zero-shot only: Fit is an
	// error).
	Lara  *convert.LaraOptions
	Fit   bool
	Steps int // Adam steps per layer when fitting (0: Options.Fit.Steps)
}

// Method describes the conversion without saying whether it is
// fine-tuned: "Performer M=256 orthogonal chi", "Linformer k=64",
// "Local+pooled b=32 k=32 sinks", "Linformer pooled k=128 sinks".
func (v Variant) Method() string {
	switch {
	case v.Performer != nil:
		o := v.Performer
		if tag := performerTag(*o); tag != "" {
			return fmt.Sprintf("Performer M=%d %s %s %s", o.Features, def(string(o.Omega), "orthogonal"), def(string(o.Norms), "chi"), tag)
		}
		return fmt.Sprintf("Performer M=%d %s %s", o.Features, def(string(o.Omega), "orthogonal"), def(string(o.Norms), "chi"))
	case v.Linformer != nil:
		return fmt.Sprintf("Linformer k=%d", v.Linformer.K)
	case v.LocalPooled != nil:
		// with convert.ToLocalPooled's defaults for the sizes not set
		o := v.LocalPooled
		var sinks string
		switch s := o.Sinks.Or(convert.DefaultSinks); s {
		case convert.DefaultSinks:
			sinks = " sinks"
		case convert.SinkFirst, convert.SinkLast:
			sinks = " sink " + s.String()
		}
		k := o.Segments
		if k == 0 {
			k = convert.DefaultSegments
		}
		if o.NoLocal {
			return fmt.Sprintf("Linformer pooled k=%d%s", k, sinks)
		}
		b := o.Block
		if b == 0 {
			b = convert.DefaultBlock
		}
		return fmt.Sprintf("Local+pooled b=%d k=%d%s", b, k, sinks)
	case v.Lara != nil:
		o := v.Lara
		c := o.Landmarks
		if c == 0 {
			c = convert.DefaultLaraLandmarks
		}
		if o.Samples > 1 {
			return fmt.Sprintf("LARA C=%d S=%d", c, o.Samples)
		}
		return fmt.Sprintf("LARA C=%d", c)
	}
	return "no conversion"
}

// Name describes the variant in a table row: its Method and whether it is
// zero-shot or fine-tuned.
func (v Variant) Name() string {
	if v.Fit {
		return v.Method() + ", fine-tuned"
	}
	return v.Method() + ", zero-shot"
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

// Options configures Table.
type Options struct {
	Variants    []Variant
	Calibration Inputs // fine-tuning inputs
	HeldOut     Inputs // measuring inputs
	Fit         finetune.Options
	// Length, when positive, is recorded in every row: the number of
	// tokens the inputs were truncated to.
	Length int
	// ValidateInputs, when positive, limits the validate check (every
	// converted node recomputed by its Go kernel) to the first that many
	// held-out inputs; the similarity measurements always use all.
	ValidateInputs int
	// Progress, when set, receives one line per variant measured (see
	// internal/progress); nil is silent.
	Progress io.Writer
	// Detail also reports on Progress what each variant is doing
	// (converting, fine-tuning, measuring, validating) and, unless
	// Fit.Progress is set, the layers of its fine-tuning, so that a long
	// run is not silent.
	Detail bool
}

// Row is the measurement of one variant on the held-out inputs.
type Row struct {
	Variant string `json:"variant"`
	// Method is the variant without its mode; FineTuned its mode.
	Method    string `json:"method"`
	FineTuned bool   `json:"fine_tuned"`
	// Length is Options.Length: the tokens per input (0: untruncated).
	Length int `json:"length,omitempty"`
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

// progressLabel starts every progress line.
const progressLabel = "report: variant"

// Table converts original with each variant, fine-tunes those that ask
// for it, and measures every variant against the original on the
// held-out inputs.
func Table(original *onnxpb.ModelProto, opt Options) ([]Row, error) {
	return table(original, opt, progress.New(opt.Progress, progressLabel, len(opt.Variants)))
}

func table(original *onnxpb.ModelProto, opt Options, pr *progress.Reporter) ([]Row, error) {
	det, err := convert.Detect(original)
	if err != nil {
		return nil, fmt.Errorf("realtable: %w", err)
	}
	var values []string
	for _, b := range det.Blocks {
		values = append(values, infer.MergedValue(original, b.Output))
	}
	if opt.Detail && opt.Fit.Progress == nil {
		opt.Fit.Progress = opt.Progress
	}
	var rows []Row
	moments := momentCache{} // Performer balance / FAVOR# statistics, by centring
	for _, v := range opt.Variants {
		start := time.Now()
		row := Row{Variant: v.Name(), Method: v.Method(), FineTuned: v.Fit, Length: opt.Length}
		logf := func(format string, args ...any) {
			if opt.Detail {
				pr.Note("%s%s: "+format, append([]any{lengthTag(opt.Length), row.Variant}, args...)...)
			}
		}
		logf("converting")
		if v, err = moments.withMoments(original, v, opt.Calibration.Feed, opt.Fit); err != nil {
			return rows, fmt.Errorf("realtable: %s: calibration moments: %w", row.Variant, err)
		}
		m, err := convertVariant(original, v)
		if err != nil {
			return rows, fmt.Errorf("realtable: %s: %w", row.Variant, err)
		}
		if v.Fit {
			logf("fine-tuning on %d calibration inputs of %d tokens", opt.Calibration.Batch, opt.Calibration.SeqLen)
			fo := opt.Fit
			if v.Steps > 0 {
				fo.Steps = v.Steps
			}
			fitted, rep, err := finetune.Fit(original, m, opt.Calibration.Feed, fo)
			if err != nil {
				return rows, fmt.Errorf("realtable: %s: %w", row.Variant, err)
			}
			m = fitted
			for _, l := range rep.Layers {
				row.FitBefore += l.Before / float64(len(rep.Layers))
				row.FitAfter += l.After / float64(len(rep.Layers))
			}
		}
		h := opt.HeldOut
		logf("measuring on %d held-out inputs of %d tokens", h.Batch, h.SeqLen)
		mc, err := infer.CompareModels([]*onnxpb.ModelProto{original, m}, []string{"original", row.Variant}, h.Feed,
			infer.ModelCompareOptions{Backend: opt.Fit.Backend, Threads: opt.Fit.Threads, Values: values, Mask: h.Mask, Batch: h.Batch, SeqLen: h.SeqLen})
		if err != nil {
			return rows, fmt.Errorf("realtable: %s: %w", row.Variant, err)
		}
		byValue := map[string]infer.ValueComparison{}
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
			return rows, fmt.Errorf("realtable: %s: the model has no [batch, sequence, hidden] output to mean-pool", row.Variant)
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
		vfeed := h.Feed
		if opt.ValidateInputs > 0 && opt.ValidateInputs < h.Batch {
			vfeed = firstRows(h.Feed, h.Batch, opt.ValidateInputs)
		}
		logf("validating the converted ops")
		val, err := infer.ValidateOps(m, vfeed, infer.ValidateOptions{Backend: opt.Fit.Backend, Threads: opt.Fit.Threads})
		row.Validated = err == nil && val.OK()
		row.Seconds = time.Since(start).Seconds()
		rows = append(rows, row)
		pr.Step("%s%s: pooled cos %.4f, mean layer err %.3f, in %s", lengthTag(opt.Length), row.Variant, row.PooledCos, row.MeanLayerErr, progress.Duration(time.Since(start)))
	}
	return rows, nil
}

// firstRows returns feed with every tensor whose first dimension is batch
// cut to its first n rows (others are kept whole).
func firstRows(feed map[string]*onnx.Tensor, batch, n int) map[string]*onnx.Tensor {
	out := make(map[string]*onnx.Tensor, len(feed))
	for name, t := range feed {
		if len(t.Shape) == 0 || t.Shape[0] != batch {
			out[name] = t
			continue
		}
		shape := append([]int{n}, t.Shape[1:]...)
		data := reflect.ValueOf(t.Data).Slice(0, onnx.NumElements(shape)).Interface()
		out[name] = &onnx.Tensor{DType: t.DType, Shape: shape, Data: data}
	}
	return out
}

// convertVariant converts original as v says.
func convertVariant(original *onnxpb.ModelProto, v Variant) (*onnxpb.ModelProto, error) {
	n := 0
	for _, set := range []bool{v.Performer != nil, v.Linformer != nil, v.LocalPooled != nil, v.Lara != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return nil, fmt.Errorf("want exactly one of Performer, Linformer, LocalPooled and Lara options")
	}
	if v.Lara != nil && v.Fit {
		return nil, fmt.Errorf("LARA is measured zero-shot only (finetune has no LaraAttention fit)")
	}
	var m *onnxpb.ModelProto
	var err error
	switch {
	case v.Performer != nil:
		m, _, err = convert.ToPerformer(original, *v.Performer)
	case v.Linformer != nil:
		m, _, err = convert.ToLinformer(original, *v.Linformer)
	case v.Lara != nil:
		m, _, err = convert.ToLARA(original, *v.Lara)
	default:
		m, _, err = convert.ToLocalPooled(original, *v.LocalPooled)
	}
	return m, err
}

func lengthTag(n int) string {
	if n <= 0 {
		return ""
	}
	return fmt.Sprintf("n=%d ", n)
}

// LengthInputs returns the calibration and held-out inputs truncated to n
// tokens.
type LengthInputs func(n int) (calibration, heldOut Inputs, err error)

// ByLength runs Table once per sequence length, on the inputs that inputs
// returns for it, and returns every row tagged with its length (in the
// order of lengths, then of opt.Variants). Progress counts the variants of
// all lengths.
func ByLength(original *onnxpb.ModelProto, lengths []int, inputs LengthInputs, opt Options) ([]Row, error) {
	pr := progress.New(opt.Progress, progressLabel, len(lengths)*len(opt.Variants))
	var rows []Row
	for _, n := range lengths {
		if n <= 0 {
			return rows, fmt.Errorf("realtable: length %d is not positive", n)
		}
		o := opt
		o.Length = n
		var err error
		if o.Calibration, o.HeldOut, err = inputs(n); err != nil {
			return rows, fmt.Errorf("realtable: length %d: %w", n, err)
		}
		r, err := table(original, o, pr)
		rows = append(rows, r...)
		if err != nil {
			return rows, err
		}
	}
	return rows, nil
}
