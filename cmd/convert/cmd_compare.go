package main

import (
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
	"github.com/linearize/linearize/runtime"
)

func init() {
	register(&command{
		name:    "compare",
		summary: "feed the same inputs to several models and compare outputs and per-layer attention outputs with the first",
		usage:   "A B [C ...] [--text T]... [--text-file F] [--vocab PATH] [--input NAME=FILE]... [--random-inputs --batch B --seq-len L --seed S] [--backend ort|native] [--json]",
		run:     runCompare,
	})
}

// feedFlags are the input flags shared by compare and validate: texts
// through the model's tokenizer, tensor files, or seeded random inputs.
type feedFlags struct {
	texts    multiFlag
	textFile string
	vocab    string
	inputs   multiFlag
	random   bool
	batch    int
	seqLen   int
	maxLen   int
	seed     uint64
}

func (f *feedFlags) register(fs *flag.FlagSet) {
	fs.Var(&f.texts, "text", "a text to tokenize with the model's tokenizer (repeatable; one batch row each)")
	fs.StringVar(&f.textFile, "text-file", "", "a file with one text per line")
	fs.StringVar(&f.vocab, "vocab", "", "tokenizer: a folder, tokenizer.json or vocab.txt (default: found beside the model)")
	fs.Var(&f.inputs, "input", "NAME=FILE: feed input NAME from a .npy or TensorProto .pb file (repeatable)")
	fs.BoolVar(&f.random, "random-inputs", false, "make seeded random values for every input not given otherwise")
	fs.IntVar(&f.batch, "batch", 1, "batch size of random inputs")
	fs.IntVar(&f.seqLen, "seq-len", 0, "sequence length: texts are padded/truncated to it (default: longest text); random inputs (default 16)")
	fs.IntVar(&f.maxLen, "max-len", 512, "longest tokenized text when --seq-len is not given")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the random inputs")
}

// modelFeed is a built set of inputs with the padding mask that goes with
// them (nil when every position is real or the layout is unknown).
type modelFeed struct {
	feed          map[string]*onnx.Tensor
	mask          []int64
	batch, seqLen int
	desc          string
}

// build makes the inputs of the model at path.
func (f *feedFlags) build(path string, m *onnxpb.ModelProto) (*modelFeed, error) {
	if f.batch <= 0 || f.seqLen < 0 || f.maxLen < 2 {
		return nil, usageError("--batch must be positive, --seq-len non-negative and --max-len at least 2")
	}
	inputs := runtime.GraphInputs(m)
	texts := append([]string(nil), f.texts...)
	if f.textFile != "" {
		more, err := runtime.ReadTexts(f.textFile)
		if err != nil {
			return nil, badInput(fmt.Errorf("--text-file: %w", err))
		}
		texts = append(texts, more...)
	}
	if len(texts) > 0 {
		if len(f.inputs) > 0 || f.random {
			return nil, usageError("--text/--text-file cannot be combined with --input or --random-inputs")
		}
		tok, err := runtime.FindTokenizer(path, f.vocab)
		if err != nil {
			return nil, badInput(err)
		}
		ti, err := runtime.TextInputs(tok, inputs, texts, f.seqLen, f.maxLen)
		if err != nil {
			return nil, badInput(err)
		}
		return &modelFeed{feed: ti.Feed, mask: ti.Mask, batch: ti.Batch, seqLen: ti.SeqLen,
			desc: fmt.Sprintf("%d texts, %d tokens each after padding", ti.Batch, ti.SeqLen)}, nil
	}
	declared := map[string]bool{}
	for _, v := range inputs {
		declared[v.Name] = true
	}
	mf := &modelFeed{feed: map[string]*onnx.Tensor{}}
	for _, spec := range f.inputs {
		name, file, ok := strings.Cut(spec, "=")
		if !ok || name == "" || file == "" {
			return nil, usageError("--input %q: want NAME=FILE", spec)
		}
		if !declared[name] {
			return nil, badInput(fmt.Errorf("--input %s: %s has no input %q", spec, path, name))
		}
		t, err := onnx.ReadTensorFile(file)
		if err != nil {
			return nil, badInput(fmt.Errorf("--input %s: %w", name, err))
		}
		mf.feed[name] = t
	}
	var missing []runtime.Value
	for _, v := range inputs {
		if _, ok := mf.feed[v.Name]; !ok {
			missing = append(missing, v)
		}
	}
	if len(missing) > 0 {
		if !f.random {
			return nil, usageError("input %q not given: use --text, --text-file, --input %s=FILE or --random-inputs", missing[0].Name, missing[0].Name)
		}
		seq := f.seqLen
		if seq == 0 {
			seq = 16
		}
		gen, err := runtime.RandomInputs(m, missing, runtime.RandomOptions{Batch: f.batch, SeqLen: seq, Seed: f.seed})
		if err != nil {
			return nil, badInput(err)
		}
		for k, v := range gen {
			mf.feed[k] = v
		}
	}
	if err := runtime.CheckInputs(inputs, mf.feed); err != nil {
		return nil, badInput(err)
	}
	// The padding mask and the [batch, sequence] layout, from the inputs.
	for _, v := range inputs {
		t := mf.feed[v.Name]
		if len(t.Shape) != 2 {
			continue
		}
		if mf.batch == 0 {
			mf.batch, mf.seqLen = t.Shape[0], t.Shape[1]
		}
		if runtime.InputRole(v.Name) == runtime.RoleMask && mf.mask == nil {
			if vals, err := t.AsInt64s(); err == nil {
				mf.mask = vals
				mf.batch, mf.seqLen = t.Shape[0], t.Shape[1]
			}
		}
	}
	mf.desc = fmt.Sprintf("batch %d × %d", mf.batch, mf.seqLen)
	if f.random {
		mf.desc += fmt.Sprintf(" (random inputs, seed %d)", f.seed)
	}
	return mf, nil
}

// modelLabels names models by file name, or by path when names repeat.
func modelLabels(paths []string) []string {
	labels := make([]string, len(paths))
	seen := map[string]int{}
	for i, p := range paths {
		labels[i] = filepath.Base(p)
		seen[labels[i]]++
	}
	for i, p := range paths {
		if seen[labels[i]] > 1 {
			labels[i] = p
		}
	}
	return labels
}

func runCompare(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	var ff feedFlags
	ff.register(fs)
	backend := fs.String("backend", runtime.DefaultBackend, "runtime backend: "+strings.Join(runtime.Backends(), " or "))
	threads := fs.Int("threads", 0, "intra-op threads (0: backend default)")
	layers := fs.Bool("layers", true, "also compare each attention block's output (head-merged, token layout) where both models produce it; each model runs its own forward pass, so differences accumulate over layers")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	pos, err := parseFlags(fs, args, stdout)
	if err != nil {
		return err
	}
	if len(pos) < 2 {
		return usageError("want at least two models (the first is the reference), got %d", len(pos))
	}
	if !slices.Contains(runtime.Backends(), *backend) {
		return usageError("--backend %q: want %s", *backend, strings.Join(runtime.Backends(), " or "))
	}
	if *threads < 0 {
		return usageError("--threads must be non-negative")
	}
	models := make([]*onnxpb.ModelProto, len(pos))
	for i, p := range pos {
		if models[i], err = onnx.Load(p); err != nil {
			return badInput(err)
		}
	}
	mf, err := ff.build(pos[0], models[0])
	if err != nil {
		return err
	}
	opt := runtime.ModelCompareOptions{Backend: *backend, Threads: *threads, Mask: mf.mask, Batch: mf.batch, SeqLen: mf.seqLen, Labels: map[string]string{}}
	if *layers {
		opt.Values = layerValues(models, opt.Labels)
	}
	mc, err := runtime.CompareModels(models, modelLabels(pos), mf.feed, opt)
	if err != nil {
		return runtimeFailure(err)
	}
	mc.Inputs = mf.desc
	if *asJSON {
		return mc.WriteJSON(stdout)
	}
	return mc.WriteTable(stdout)
}

// addTextInputs tokenizes texts (and the lines of textFile) with the
// tokenizer beside the model (or vocab) and adds the token-level inputs
// not already in feed. seqLen > 0 pads or truncates to that length.
func addTextInputs(feed map[string]*onnx.Tensor, path string, inputs []runtime.Value, texts []string, textFile, vocab string, seqLen int) error {
	texts = append([]string(nil), texts...)
	if textFile != "" {
		more, err := runtime.ReadTexts(textFile)
		if err != nil {
			return badInput(fmt.Errorf("--text-file: %w", err))
		}
		texts = append(texts, more...)
	}
	var want []runtime.Value
	for _, v := range inputs {
		if _, ok := feed[v.Name]; !ok {
			want = append(want, v)
		}
	}
	tok, err := runtime.FindTokenizer(path, vocab)
	if err != nil {
		return badInput(err)
	}
	ti, err := runtime.TextInputs(tok, want, texts, seqLen, 512)
	if err != nil {
		return badInput(err)
	}
	for k, v := range ti.Feed {
		feed[k] = v
	}
	return nil
}

// layerValues names each attention block's output in token layout: the
// head-merged output of every core convert.Detect finds and of every
// converted (ai.linearize) node, in any of the models. A conversion keeps
// the merge nodes, so the same name exists in the original and converted
// models.
func layerValues(models []*onnxpb.ModelProto, labels map[string]string) []string {
	var values []string
	add := func(m *onnxpb.ModelProto, out string, layer int) {
		v := runtime.MergedValue(m, out)
		if _, dup := labels[v]; dup {
			return
		}
		labels[v] = fmt.Sprintf("layer %d attention", layer)
		values = append(values, v)
	}
	for _, m := range models {
		if det, err := convert.Detect(m); err == nil {
			for _, b := range det.Blocks {
				switch {
				case b.Function != "":
				case b.Merged != "": // proved by Detect
					add(m, b.Merged, b.Layer)
				default: // a fused core
					add(m, b.Output, b.Layer)
				}
			}
		}
		layer := 0
		for _, n := range m.GetGraph().GetNode() {
			if n.GetDomain() == ops.Domain && len(n.Output) > 0 {
				add(m, n.Output[0], layer)
				layer++
			}
		}
	}
	return values
}
