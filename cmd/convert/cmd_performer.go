package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

func init() {
	register(&command{
		name:    "performer",
		summary: "rewrite every convertible attention block into a PerformerAttention op (FAVOR+, frozen random features) that runs in stock onnxruntime",
		usage:   "MODEL -o OUT [--features M] [--seed S] [--omega orthogonal|iid] [--norms chi|sqrt-d|qmc] [--kernel positive|trig] [--layers LIST] [--max-positions N] [--json]",
		run:     runPerformer,
	})
}

// rewriteFlags are the flags performer and linformer share.
type rewriteFlags struct {
	out, layers, posMethod string
	seed                   uint64
	json, overwrite        bool
	maxPos, posOffset      int
}

func (f *rewriteFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.out, "o", "", "output model path (required)")
	fs.Uint64Var(&f.seed, "seed", 0, "seed of the random features / projections (with the layer index)")
	fs.StringVar(&f.layers, "layers", "", "comma-separated block indices to convert (as `convert inspect` numbers them; ranges like 0-5); default all")
	fs.BoolVar(&f.json, "json", false, "print the report as JSON")
	fs.BoolVar(&f.overwrite, "overwrite", false, "allow -o to be the input model")
	fs.IntVar(&f.maxPos, "max-positions", 0, "first grow the position table to N rows (see extend-positions)")
	fs.StringVar(&f.posMethod, "position-method", "copy", "with --max-positions: copy or interpolate")
	fs.IntVar(&f.posOffset, "position-offset", 0, "with --max-positions: leading non-position rows (2 for RoBERTa)")
}

func (f *rewriteFlags) positions() convert.ExtendOptions {
	return convert.ExtendOptions{MaxPositions: f.maxPos, Method: f.posMethod, Offset: f.posOffset}
}

// parseLayers reads "0,2,5-7".
func parseLayers(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []int
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("--layers: %q is not a block index", part)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("--layers: %q is not a range lo-hi", part)
			}
		}
		for i := a; i <= b; i++ {
			out = append(out, i)
		}
	}
	return out, nil
}

// loadForRewrite parses the shared flags and loads the model.
func loadForRewrite(name string, fs *flag.FlagSet, f *rewriteFlags, args []string, stdout io.Writer) (*onnxpb.ModelProto, string, []int, error) {
	f.register(fs)
	pos, err := parseFlags(fs, args, stdout)
	if err != nil {
		return nil, "", nil, err
	}
	if len(pos) != 1 {
		return nil, "", nil, usageError("want exactly one MODEL argument, got %d", len(pos))
	}
	if f.out == "" {
		return nil, "", nil, usageError("-o OUT is required")
	}
	layers, err := parseLayers(f.layers)
	if err != nil {
		return nil, "", nil, usageError("%v", err)
	}
	if err := checkOutput(pos[0], f.out, f.overwrite); err != nil {
		return nil, "", nil, err
	}
	m, err := onnx.Load(pos[0])
	if err != nil {
		return nil, "", nil, badInput(err)
	}
	return m, pos[0], layers, nil
}

// finishRewrite saves the model and prints the report.
func finishRewrite(stdout io.Writer, f *rewriteFlags, in string, m *onnxpb.ModelProto, rep *convert.Report) error {
	if err := onnx.Save(m, f.out, onnx.SaveOptions{Input: in, Overwrite: f.overwrite}); err != nil {
		return runtimeFailure(err)
	}
	if f.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	fmt.Fprint(stdout, rep.Text())
	fmt.Fprintf(stdout, "wrote %s\n", f.out)
	return nil
}

func runPerformer(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("performer", flag.ContinueOnError)
	var f rewriteFlags
	var o convert.PerformerOptions
	fs.IntVar(&o.Features, "features", 256, "random features M per head")
	fs.StringVar(&o.Omega, "omega", "orthogonal", "orthogonal (blocks from QR of Gaussian matrices) or iid (Gaussian rows)")
	fs.StringVar(&o.Norms, "norms", "chi", "row norms of ω: chi (sampled), sqrt-d (all √D) or qmc (χ_D quantiles, permuted)")
	fs.StringVar(&o.Kernel, "kernel", "positive", "positive (FAVOR+) or trig")
	fs.BoolVar(&o.PerHead, "per-head", false, "sample one ω per head instead of one per layer")
	m, in, layers, err := loadForRewrite("performer", fs, &f, args, stdout)
	if err != nil {
		return err
	}
	o.Seed, o.Layers, o.Positions = f.seed, layers, f.positions()
	out, rep, err := convert.ToPerformer(m, o)
	if err != nil {
		return badInput(err)
	}
	return finishRewrite(stdout, &f, in, out, rep)
}
