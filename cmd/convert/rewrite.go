package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/cmd/internal/cliutil"
	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// rewriteFlags are the flags the conversions' commands share (long has
// its own but shares -o, --json, --overwrite and --inline).
type rewriteFlags struct {
	out, layers, posMethod  string
	seed                    uint64
	json, overwrite, inline bool
	maxPos, posOffset       int
	// seedUsage, set by a command that samples parameters, is the help
	// of its --seed (no --seed when empty: local-pooled samples nothing).
	seedUsage string
}

// inlineUsage is the help of --inline.
const inlineUsage = "write the ops' function bodies into the graph (convert.Inline): standard ops only, no ai.linearize nodes or model-local functions, for runtimes and tools without model-local functions; the Go kernels (convert validate, the native backend's fast path) then no longer see the ops"

func (f *rewriteFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.out, "o", "", "path of the output model `OUT` (required)")
	if f.seedUsage != "" {
		fs.Uint64Var(&f.seed, "seed", cli.DefaultSeed, f.seedUsage)
	}
	fs.StringVar(&f.layers, "layers", "", "`LIST` of block indices to convert, as convert inspect numbers them: comma-separated, ranges like 0-5 (default: all)")
	fs.BoolVar(&f.json, "json", false, "print the report as JSON")
	fs.BoolVar(&f.overwrite, "overwrite", false, "allow -o to be the input model")
	fs.BoolVar(&f.inline, "inline", false, inlineUsage)
	addPositionFlags(fs, &f.maxPos, &f.posMethod, &f.posOffset, "first let the position table read `N` tokens (see extend-positions)")
}

// conversionCommands are the conversions' commands by name, each added
// by its own file (conversionCommand); main lists them in the order of
// convert.Conversions, and a conversion without one is an error there.
var conversionCommands = map[string]*cli.Command{}

// conversionCommand records the command of a conversion (its Name is the
// conversion's), run by runRewrite: flags adds the command's own flags
// and returns its conversion, seedUsage is the help of --seed (none when
// empty).
func conversionCommand(c *cli.Command, seedUsage string, flags func(fs *flag.FlagSet) rewrite) *cli.Command {
	c.Rewrites = true
	c.Run = func(args []string, stdout, stderr io.Writer) error {
		return runRewrite(c.Name, seedUsage, flags, args, stdout, stderr)
	}
	conversionCommands[c.Name] = c
	return c
}

// A rewrite converts the model a conversion's command has loaded, with
// the flags it read into its options; it returns the converted model
// and its report, or an error worded for the command line
// (optionError).
type rewrite func(m *onnxpb.ModelProto, r *rewriteRun) (*onnxpb.ModelProto, *convert.Report, error)

// rewriteRun is what a rewrite is given besides the model: the input
// and what the shared flags say.
type rewriteRun struct {
	in        string                // path of the input model
	layers    []int                 // --layers (nil: all)
	seed      uint64                // --seed
	positions convert.ExtendOptions // --max-positions, --position-method, --position-offset
	stderr    io.Writer             // progress and notes
}

// runRewrite runs a conversion's command: it parses the command's flags
// (flags adds them) and the shared ones, loads the model, converts it
// with the rewrite flags returned and writes it with its report.
func runRewrite(name, seedUsage string, flags func(fs *flag.FlagSet) rewrite, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	conv := flags(fs)
	f := rewriteFlags{seedUsage: seedUsage}
	m, in, layers, err := loadForRewrite(fs, &f, args, stdout)
	if err != nil {
		return err
	}
	out, rep, err := conv(m, &rewriteRun{in: in, layers: layers, seed: f.seed, positions: f.positions(m, in), stderr: stderr})
	if err != nil {
		return err
	}
	return finishRewrite(stdout, stderr, &f, in, out, rep)
}

// addPositionFlags registers the position-table flags of
// extend-positions and the rewriting commands.
func addPositionFlags(fs *flag.FlagSet, maxPos *int, method *string, offset *int, maxPosUsage string) {
	fs.IntVar(maxPos, "max-positions", 0, maxPosUsage)
	fs.StringVar(method, "position-method", "", "how positions grow; a position table: copy (the default: tile the learned rows, as Longformer did) or interpolate (resample linearly); rotary positions: ntk (the default: a larger base θ), dynamic (NTK from each input's length: inputs up to the trained length give the original's outputs), linear (position interpolation) or yarn; the rotary frequencies only sliding-window layers read are kept")
	fs.IntVar(offset, "position-offset", 0, "leading non-position rows kept as they are (default: as found: none for BERT, 2 for RoBERTa's and XLM-R's padding_idx+1 numbering)")
}

// positionFlagOf names the flags of convert.ExtendOptions' fields.
var positionFlagOf = map[string]string{"MaxPositions": "max-positions", "Method": "position-method", "Offset": "position-offset"}

// flagsOf maps convert.OptionError fields to flag names: the position
// flags and the given pairs (field, flag, field, flag, ...).
func flagsOf(pairs ...string) map[string]string {
	m := maps.Clone(positionFlagOf)
	for i := 0; i+1 < len(pairs); i += 2 {
		m[pairs[i]] = pairs[i+1]
	}
	return m
}

func (f *rewriteFlags) positions(m *onnxpb.ModelProto, path string) convert.ExtendOptions {
	return convert.ExtendOptions{MaxPositions: f.maxPos, Method: f.posMethod, Offset: f.posOffset, Trained: trainedLength(m, path, f.maxPos)}
}

// trainedLength is the length a rotary model was trained for, as the
// config.json beside it or its doc string says (convert.ContextLimit),
// when positions are to grow (maxPos > 0); 0 otherwise, and for a model
// whose limit its position table or metadata sets.
func trainedLength(m *onnxpb.ModelProto, path string, maxPos int) int {
	if maxPos <= 0 {
		return 0
	}
	lim, err := convert.ContextLimit(m, path)
	if err != nil || (lim.Kind != convert.LimitConfig && lim.Kind != convert.LimitDocString) {
		return 0
	}
	return lim.Tokens
}

// maxLayerIndex bounds --layers before it is expanded.
const maxLayerIndex = 1 << 16

// loadForRewrite parses the shared flags and loads the model.
func loadForRewrite(fs *flag.FlagSet, f *rewriteFlags, args []string, stdout io.Writer) (*onnxpb.ModelProto, string, []int, error) {
	f.register(fs)
	path, err := cli.ParseModelArg(fs, args, stdout)
	if err != nil {
		return nil, "", nil, err
	}
	if f.out == "" {
		return nil, "", nil, cli.UsageError("-o OUT is required")
	}
	if f.maxPos < 0 {
		return nil, "", nil, cli.UsageError("--max-positions %d must not be negative", f.maxPos)
	}
	// Block indices are checked against the model later; the bound here
	// keeps a typo such as 0-50000000 from being expanded first.
	layers, err := cli.Ints("layers", f.layers, cliutil.IntList{Max: maxLayerIndex, Ranges: true, MaxItems: maxLayerIndex, Empty: true})
	if err != nil {
		return nil, "", nil, err
	}
	if err := cli.CheckOutput(path, f.out, f.overwrite); err != nil {
		return nil, "", nil, err
	}
	// The files the other flags read (--calibration, --vocab, ...) are
	// inputs too: -o never writes over one of them.
	var others []namedFile
	fs.Visit(func(fl *flag.Flag) {
		if fl.Name == "o" {
			return
		}
		if st, err := os.Stat(fl.Value.String()); err == nil && st.Mode().IsRegular() {
			others = append(others, namedFile{"--" + fl.Name, fl.Value.String()})
		}
	})
	if err := checkNotInputs([]namedFile{{"-o", f.out}}, others); err != nil {
		return nil, "", nil, err
	}
	m, err := onnx.Load(path)
	if err != nil {
		return nil, "", nil, cli.BadInput(err)
	}
	return m, path, layers, nil
}

// finishRewrite inlines the ops' bodies with --inline, saves the model
// and prints the report; notes go to stderr (and the "copied" line
// beside --json).
func finishRewrite(stdout, stderr io.Writer, f *rewriteFlags, in string, m *onnxpb.ModelProto, rep *convert.Report) error {
	if f.inline {
		inl, err := convert.Inline(m)
		if err != nil {
			return err
		}
		m = inl
		rep.Notes = append(rep.Notes, "--inline: the ops' function bodies are written into the graph (standard ops only)")
	}
	w := stdout
	if f.json {
		w = stderr // stdout is the JSON report only
	}
	if err := saveModel(w, stderr, m, f.out, in, f.overwrite); err != nil {
		return err
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
