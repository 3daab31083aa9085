package finetune

import (
	"errors"
	"fmt"
	"maps"
	"strconv"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/tokenize"
)

// This file holds the calibrated conversions: a conversion and the fit of
// what it inserted, in one call, as `convert hedgehog`, `convert long
// --learned` and `convert performer --calibration` run them.

// Default calibration windows, in tokens, of TrainHedgehog and TrainLong.
const (
	// DefaultHedgehogSeqLen is a BERT-style model's whole input.
	DefaultHedgehogSeqLen = 512
	// DefaultLongSeqLen is several windows of a long model made from a
	// 512-position encoder, so that the far field has something to learn.
	DefaultLongSeqLen = 2048
)

// WindowOptions says how calibration documents become the rows attention
// transfer learns from (DocumentWindows) and which of them are held out
// (Calibration.HoldOut).
type WindowOptions struct {
	// Tokenizer cuts the documents into tokens (required).
	Tokenizer *tokenize.Tokenizer
	// SeqLen is the window, in tokens, of one row: documents are cut into
	// consecutive windows of SeqLen tokens (0: DefaultHedgehogSeqLen for
	// TrainHedgehog, DefaultLongSeqLen for TrainLong). It may not exceed
	// the model's context limit (convert.ContextLimit).
	SeqLen int
	// MaxWindows keeps at most this many windows, taken evenly across the
	// documents (0: all).
	MaxWindows int
	// HeldOut is the fraction of the documents held out to choose the
	// parameters and stop early (0: DefaultHeldOutFraction; negative: none,
	// and every head then runs all its steps). Fewer than two documents
	// leave nothing to hold out; a note on TransferOptions.Progress says so.
	HeldOut float64
	// ModelPath is the file the model was read from, if any: a config.json
	// beside it may state the model's context limit.
	ModelPath string
	// Inputs are the values of the model's inputs that carry no tokens
	// (jina-embeddings-v3's task_id, which chooses its task adapters), fed
	// unchanged with every batch of rows; the model's other inputs are
	// filled from the documents.
	Inputs map[string]*onnx.Tensor
}

// HedgehogOptions configures TrainHedgehog.
type HedgehogOptions struct {
	Convert  convert.HedgehogOptions // the conversion (convert.ToHedgehog)
	Windows  WindowOptions           // the calibration rows
	Transfer TransferOptions         // the training (Transfer); HeldOut is set from Windows.HeldOut
}

// LongOptions configures TrainLong.
type LongOptions struct {
	Convert  convert.LongOptions // the conversion (convert.ToLong); Learned is implied
	Windows  WindowOptions       // the calibration rows, framed window by window
	Transfer TransferOptions     // the training (Transfer); HeldOut is set from Windows.HeldOut
}

// OptionError is an error about one field of a calibrated conversion's
// options that is wrong for any model. Field names the field
// ("SeqLen", …) so that a caller can name it its own way (a command-line
// flag); Msg says what is wrong, without the field's name.
type OptionError struct {
	Field string
	Msg   string
}

func (e *OptionError) Error() string { return "finetune: " + e.Field + " " + e.Msg }

// LengthError says that calibration windows of SeqLen tokens are longer
// than the model reads (Limit, convert.ContextLimit).
type LengthError struct {
	SeqLen int
	Limit  convert.Limit
}

func (e *LengthError) Error() string {
	return fmt.Sprintf("finetune: calibration windows of %d tokens exceed the model's limit of %d tokens (%s)", e.SeqLen, e.Limit.Tokens, e.Limit.Source)
}

// TrainHedgehog converts m to HedgehogAttention (convert.ToHedgehog) and
// trains the feature maps of the result by attention transfer (Transfer)
// on calibration windows cut from docs, one document per string. It
// returns the trained model, the conversion's report and the training's.
// An error of the conversion is returned as it is (a *convert.OptionError
// for a bad conversion option).
func TrainHedgehog(m *onnxpb.ModelProto, docs []string, o HedgehogOptions) (*onnxpb.ModelProto, *convert.Report, *TransferReport, error) {
	out, rep, err := convert.ToHedgehog(m, o.Convert)
	if err != nil {
		return nil, nil, nil, err
	}
	w := o.Windows
	if w.SeqLen == 0 {
		w.SeqLen = DefaultHedgehogSeqLen
	}
	trained, trep, err := transferOn(out, docs, w, 0, o.Transfer)
	if err != nil {
		return nil, nil, nil, err
	}
	return trained, rep, trep, nil
}

// TrainLong converts m into a long model whose windows read each other
// through learned feature maps (convert.ToLong with Learned) and trains
// those maps by attention transfer (Transfer) on calibration rows cut from
// docs, one document per string. Each row of Windows.SeqLen tokens, a
// multiple of the window, is framed window by window, as package embed
// reads a long model's input. It returns the trained model, the
// conversion's report and the training's. An error of the conversion is
// returned as it is (a *convert.OptionError for a bad conversion option).
func TrainLong(m *onnxpb.ModelProto, docs []string, o LongOptions) (*onnxpb.ModelProto, *convert.Report, *TransferReport, error) {
	o.Convert.Learned = true
	out, rep, err := convert.ToLong(m, o.Convert)
	if err != nil {
		return nil, nil, nil, err
	}
	frame, err := strconv.Atoi(convert.Meta(out, convert.MetaWindow))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("finetune: long: window metadata: %w", err)
	}
	w := o.Windows
	if w.SeqLen == 0 {
		w.SeqLen = DefaultLongSeqLen
	}
	if w.SeqLen%frame != 0 {
		return nil, nil, nil, &OptionError{Field: "SeqLen", Msg: fmt.Sprintf("%d must be a multiple of the window %d", w.SeqLen, frame)}
	}
	trained, trep, err := transferOn(out, docs, w, frame, o.Transfer)
	if err != nil {
		return nil, nil, nil, err
	}
	return trained, rep, trep, nil
}

// transferOn cuts docs into the calibration rows w says (framed every
// frame tokens; 0: the row) for the converted model out and trains its
// HedgehogAttention maps on them.
func transferOn(out *onnxpb.ModelProto, docs []string, w WindowOptions, frame int, t TransferOptions) (*onnxpb.ModelProto, *TransferReport, error) {
	if w.Tokenizer == nil {
		return nil, nil, errors.New("finetune: no tokenizer for the calibration documents")
	}
	limit, err := convert.ContextLimit(out, w.ModelPath)
	if err != nil {
		return nil, nil, err
	}
	if limit.Tokens > 0 && w.SeqLen > limit.Tokens {
		return nil, nil, &LengthError{SeqLen: w.SeqLen, Limit: limit}
	}
	var tokenInputs []infer.Value
	for _, in := range infer.GraphInputs(out) {
		if w.Inputs[in.Name] == nil {
			tokenInputs = append(tokenInputs, in)
		}
	}
	if err := infer.CheckFixedInputs(out, w.Inputs); err != nil {
		return nil, nil, fmt.Errorf("finetune: %w", err)
	}
	cal, err := DocumentWindows(w.Tokenizer, tokenInputs, docs, w.SeqLen, frame, w.MaxWindows)
	if err != nil {
		return nil, nil, err
	}
	maps.Copy(cal.Feed, w.Inputs)
	frac := w.HeldOut
	if frac == 0 {
		frac = DefaultHeldOutFraction
	}
	t.HeldOut = cal.HoldOut(frac)
	if frac > 0 && t.HeldOut == nil && t.Progress != nil {
		fmt.Fprintln(t.Progress, "note: fewer than two calibration documents: nothing is held out, so the parameters are chosen on the training windows")
	}
	if t.HeldOut == nil {
		t.Patience = -1
	}
	return Transfer(out, cal, t)
}

// ErrCalibrationRun is wrapped by the errors of CalibratedPerformer that
// come from measuring the original model on the calibration inputs
// (PerformerMoments), rather than from the conversion.
var ErrCalibrationRun = errors.New("finetune: calibration run failed")

// calibrationRunError is an error of PerformerMoments as it is, which
// also matches ErrCalibrationRun.
type calibrationRunError struct{ err error }

func (e calibrationRunError) Error() string   { return e.err.Error() }
func (e calibrationRunError) Unwrap() []error { return []error{e.err, ErrCalibrationRun} }

// CalibratedPerformer converts m to PerformerAttention (convert.ToPerformer)
// with the statistics its options need (convert.PerformerOptions
// NeedsMoments: the FAVOR# feature maps, the balance) measured on the
// original model's attention over the calibration inputs feed
// (PerformerMoments; every tensor with the batch on its first axis).
// o.Moments is replaced by them; mo.NoCenter is set to match o's centring.
// With an empty feed it is convert.ToPerformer. An error of the
// measurement wraps ErrCalibrationRun; one of the conversion is returned
// as it is (a *convert.OptionError for a bad option).
func CalibratedPerformer(m *onnxpb.ModelProto, feed map[string]*onnx.Tensor, o convert.PerformerOptions, mo MomentOptions) (*onnxpb.ModelProto, *convert.Report, error) {
	if len(feed) > 0 {
		mo.NoCenter = !o.Centered()
		moments, err := PerformerMoments(m, feed, mo)
		if err != nil {
			return nil, nil, calibrationRunError{err}
		}
		o.Moments = moments
	}
	return convert.ToPerformer(m, o)
}
