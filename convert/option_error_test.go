package convert

import (
	"errors"
	"path/filepath"
	"testing"
)

// TestOptionErrors: an option that is wrong whatever the model is an
// *OptionError wrapping ErrInvalidOption and naming its field; an error
// about the model the options are applied to is not.
func TestOptionErrors(t *testing.T) {
	m := loadModel(t, filepath.Join(fixtureDir, "bert_eager_op14.onnx"))
	type conv func() error
	perf := func(o PerformerOptions) conv { return func() error { _, _, err := ToPerformer(m, o); return err } }
	lin := func(o LinformerOptions) conv { return func() error { _, _, err := ToLinformer(m, o); return err } }
	lp := func(o LocalPooledOptions) conv { return func() error { _, _, err := ToLocalPooled(m, o); return err } }
	lara := func(o LaraOptions) conv { return func() error { _, _, err := ToLARA(m, o); return err } }
	for _, c := range []struct {
		name  string
		run   conv
		field string // "" for an error that is not an option error
	}{
		{"features", perf(PerformerOptions{Features: -1}), "Features"},
		{"features too many", perf(PerformerOptions{Features: MaxFeatures + 1}), "Features"},
		{"omega", perf(PerformerOptions{Omega: "cube"}), "Omega"},
		{"norms", perf(PerformerOptions{Norms: "one"}), "Norms"},
		{"kernel", perf(PerformerOptions{Kernel: "cosine"}), "Kernel"},
		{"chunk", perf(PerformerOptions{Chunk: -1}), "Chunk"},
		{"feature map", perf(PerformerOptions{FeatureMap: "relu"}), "FeatureMap"},
		{"center with trig", perf(PerformerOptions{Kernel: "trig", Center: CenterOn}), "Kernel"},
		{"centring", perf(PerformerOptions{Center: "sometimes"}), "Center"},
		{"no moments", perf(PerformerOptions{FeatureMap: "aderf"}), "Moments"},
		{"k", lin(LinformerOptions{K: -1}), "K"},
		{"init", lin(LinformerOptions{Init: "zeros"}), "Init"},
		{"max-len", lin(LinformerOptions{Init: "gaussian", MaxLen: -1}), "MaxLen"},
		{"projection", lin(LinformerOptions{Init: "gaussian", K: 1 << 14, MaxLen: 1 << 14}), "MaxLen"},
		{"share", lin(LinformerOptions{Init: "gaussian", Share: "all"}), "Share"},
		{"pooled segments", lin(LinformerOptions{Init: "pool", K: 1 << 20}), "K"},
		{"pooled max-len", lin(LinformerOptions{MaxLen: 64}), "MaxLen"},
		{"gaussian sinks", lin(LinformerOptions{Init: "gaussian", Sinks: SinkFirst}), "Sinks"},
		{"block", lp(LocalPooledOptions{Block: -1}), "Block"},
		{"sinks", lp(LocalPooledOptions{Sinks: NoSinks | SinkLast}), "Sinks"},
		{"landmarks", lara(LaraOptions{Landmarks: -1}), "Landmarks"},
		{"sigma", lara(LaraOptions{Sigma: -1}), "Sigma"},
		{"position method", lp(LocalPooledOptions{Positions: ExtendOptions{MaxPositions: 4096, Method: "cubic"}}), "Method"},
		{"layer past the blocks", perf(PerformerOptions{Layers: []int{99}}), ""},
		{"position table not grown", lp(LocalPooledOptions{Positions: ExtendOptions{MaxPositions: 2}}), ""},
	} {
		err := c.run()
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		var oe *OptionError
		isOpt := errors.As(err, &oe)
		if isOpt != errors.Is(err, ErrInvalidOption) {
			t.Errorf("%s: errors.As OptionError %v but errors.Is ErrInvalidOption %v", c.name, isOpt, !isOpt)
		}
		switch {
		case c.field == "" && isOpt:
			t.Errorf("%s: %v is an option error; the model is at fault", c.name, err)
		case c.field != "" && !isOpt:
			t.Errorf("%s: %v is not an option error", c.name, err)
		case c.field != "" && oe.Field != c.field:
			t.Errorf("%s: %v names field %q, want %q", c.name, err, oe.Field, c.field)
		}
	}
}
