package benchrun

import (
	"fmt"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// VariantOptions configures the model variants a benchmark compares.
type VariantOptions struct {
	Variants []convert.Form // default original, performer, linformer, local-pooled
	Lengths  []int          // sequence lengths to run
	Features int            // Performer M (default 256)
	K        int            // Linformer k (default 256)
	Seed     uint64         // seeds ω and E/F
	// Block and Segments configure the local-pooled variant (default 64
	// and 64, with both sinks).
	Block, Segments int
	// Landmarks configures the lara variant (default
	// convert.DefaultLaraLandmarks, one sample each); it runs only when asked for
	// in Variants.
	Landmarks int
	// Baselines are other models of the same inputs (onnxruntime's
	// optimized forms of the original, say) timed and measured beside the
	// original and the variants; every run's ratios are reported against
	// each of them too. Check them with LoadBaselines.
	Baselines []Baseline
}

// Variants prepares the models a benchmark runs: the original with its
// position table extended (copy) when it is shorter than the longest
// length, and from it the Performer and Linformer conversions (Linformer's
// projections sized for the longest length). It returns the models by form
// and notes on what was done. m is not modified.
func Variants(m *onnxpb.ModelProto, o VariantOptions) (map[convert.Form]*onnxpb.ModelProto, []string, error) {
	o = o.withDefaults()
	if len(o.Lengths) == 0 {
		return nil, nil, fmt.Errorf("convert: bench: no lengths")
	}
	longest := 0
	for _, n := range o.Lengths {
		if n <= 0 {
			return nil, nil, fmt.Errorf("convert: bench: length %d must be positive", n)
		}
		longest = max(longest, n)
	}
	var notes []string
	base := m
	dims, _, err := convert.ModelDims(m)
	if err != nil {
		return nil, nil, fmt.Errorf("convert: bench: %w", err)
	}
	if dims.MaxPositions > 0 && dims.MaxPositions < longest {
		ext, rep, err := convert.ExtendPositions(m, convert.ExtendOptions{MaxPositions: longest, Method: "copy"})
		if err != nil {
			return nil, nil, fmt.Errorf("convert: bench: %w", err)
		}
		base = ext
		notes = append(notes, "extended "+rep.String())
	}
	out := map[convert.Form]*onnxpb.ModelProto{}
	for _, f := range o.Variants {
		switch f {
		case convert.Original:
			out[f] = base
		case convert.Performer:
			pm, rep, err := convert.ToPerformer(base, convert.PerformerOptions{Features: o.Features, Seed: o.Seed})
			if err != nil {
				return nil, nil, fmt.Errorf("convert: bench: %w", err)
			}
			out[f] = pm
			notes = append(notes, fmt.Sprintf("performer: %d of %d blocks converted, M = %d", len(rep.Converted), rep.Blocks, o.Features))
		case convert.Linformer:
			lm, rep, err := convert.ToLinformer(base, convert.LinformerOptions{K: o.K, MaxLen: longest, Seed: o.Seed})
			if err != nil {
				return nil, nil, fmt.Errorf("convert: bench: %w", err)
			}
			out[f] = lm
			notes = append(notes, fmt.Sprintf("linformer: %d of %d blocks converted, k = %d, N = %d", len(rep.Converted), rep.Blocks, o.K, longest))
		case convert.LocalPooled:
			lp, rep, err := convert.ToLocalPooled(base, convert.LocalPooledOptions{Block: o.Block, Segments: o.Segments})
			if err != nil {
				return nil, nil, fmt.Errorf("convert: bench: %w", err)
			}
			out[f] = lp
			notes = append(notes, fmt.Sprintf("local-pooled: %d of %d blocks converted, b = %d, k = %d, sinks first,last", len(rep.Converted), rep.Blocks, o.Block, o.Segments))
		case convert.Lara:
			lm, rep, err := convert.ToLARA(base, convert.LaraOptions{Landmarks: o.Landmarks, Seed: o.Seed})
			if err != nil {
				return nil, nil, fmt.Errorf("convert: bench: %w", err)
			}
			out[f] = lm
			notes = append(notes, fmt.Sprintf("lara: %d of %d blocks converted, C = %d", len(rep.Converted), rep.Blocks, o.Landmarks))
		default:
			return nil, nil, fmt.Errorf("convert: bench: unknown variant %q (want original, performer, linformer, local-pooled or lara)", f)
		}
	}
	return out, notes, nil
}

func (o VariantOptions) withDefaults() VariantOptions {
	if len(o.Variants) == 0 {
		o.Variants = []convert.Form{convert.Original, convert.Performer, convert.Linformer, convert.LocalPooled}
	}
	if o.Block == 0 {
		o.Block = 64
	}
	if o.Segments == 0 {
		o.Segments = 64
	}
	if o.Landmarks == 0 {
		o.Landmarks = convert.DefaultLaraLandmarks
	}
	if o.Features == 0 {
		o.Features = 256
	}
	if o.K == 0 {
		o.K = 256
	}
	return o
}
