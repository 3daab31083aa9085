package main

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/cmd/internal/cliutil"
	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// feedFlags are the input flags of run, compare, validate, finetune and
// compare-backends; build turns them into a infer.FeedSpec and builds
// it, so that every command takes the same flags with the same defaults,
// checks and exit codes.
type feedFlags struct {
	spec      infer.FeedSpec
	textFiles cli.MultiFlag
	texts     cli.MultiFlag
}

// addFeedFlags registers the input flags on fs.
func addFeedFlags(fs *flag.FlagSet) *feedFlags {
	f := &feedFlags{spec: infer.FeedSpec{Inputs: map[string]string{}}}
	fs.Var((*inputsFlag)(&f.spec.Inputs), "input", "feed the model input NAME from FILE, a .npy or TensorProto .pb file, or a NUMBER for an input of one element, as jina-embeddings-v3's task_id=4 (`NAME=VALUE`, VALUE a FILE or a NUMBER; repeatable)")
	fs.Var(&f.texts, "text", "a `TEXT` to tokenize with the model's tokenizer, one batch row each (repeatable); fills the token-level inputs not given with --input")
	fs.Var(&f.textFiles, "text-file", "a `FILE` with one text per line, tokenized like --text (repeatable)")
	fs.StringVar(&f.spec.Vocab, "vocab", "", "tokenizer `PATH` for --text: a folder, tokenizer.json or vocab.txt (default: found beside the model)")
	fs.BoolVar(&f.spec.Random, "random-inputs", false, "make seeded random values for every input not given with --input (not with --text)")
	f.spec.Batch = infer.DefaultFeedBatch
	fs.Var(&intFlag{&f.spec.Batch, 1}, "batch", "batch size `B` of random inputs")
	fs.Var(&intFlag{&f.spec.SeqLen, 1}, "seq-len", "sequence length `L`, at most the model's limit: texts are padded or truncated to it, random inputs take it (default: for texts the model's fixed length, else the longest text up to --max-len; for random inputs "+strconv.Itoa(infer.DefaultFeedSeqLen)+" or the limit if shorter)")
	fs.Var(&intFlag{&f.spec.MaxLen, 2}, "max-len", "at most `N` tokens per text when --seq-len is not given (default: the model's limit: the rows of its position table, else max_position_embeddings in the config.json beside it or its doc string; "+strconv.Itoa(infer.DefaultFeedMaxLen)+" without one); a longer text is cut to N tokens, and the command says which; an N past the limit is refused")
	fs.Uint64Var(&f.spec.Seed, "seed", cli.DefaultSeed, "seed of the random inputs")
	return f
}

// build makes the inputs of the model at path. Its errors carry exit
// codes: 1 for a flag value out of range or flags that conflict, 2 for an
// input file, a tokenizer or a model that does not fit.
func (f *feedFlags) build(m *onnxpb.ModelProto, path string) (*infer.Feed, error) {
	return f.buildFor([]*onnxpb.ModelProto{m}, []string{path})
}

// buildFor makes inputs that every model of ms (read from paths) runs:
// the tokenizer is the first model's, the sequence length is bounded by
// the shortest limit among them (convert.ContextLimit: the position
// table, else max_position_embeddings in the config.json beside the
// model, else its doc string), which is also the default --max-len. A
// model with no known limit bounds nothing (--max-len then defaults to
// 512). A malformed config.json is bad input.
func (f *feedFlags) buildFor(ms []*onnxpb.ModelProto, paths []string) (*infer.Feed, error) {
	s := f.spec
	s.Texts, s.TextFiles = f.texts, f.textFiles
	limitPath := paths[0]
	var limit convert.Limit
	for i, m := range ms {
		// A model whose position table cannot be told (several
		// candidates) and that says no limit otherwise sets none: the
		// runtime says what it says.
		l, err := convert.ContextLimit(m, paths[i])
		if err != nil {
			return nil, cli.BadInput(err)
		}
		if l.Tokens > 0 && (limit.Tokens == 0 || l.Tokens < limit.Tokens) {
			limit, limitPath = l, paths[i]
		}
	}
	s.Limit = limit.Tokens
	feed, err := s.Build(ms[0], paths[0])
	if err != nil {
		return nil, feedError(err, limitPath, limit)
	}
	if feedBuilt != nil {
		if err := feedBuilt(feed); err != nil {
			return nil, err
		}
	}
	return feed, nil
}

// load loads the one MODEL argument of run, validate and compare-backends
// and builds its inputs; a model that does not load is bad input.
func (f *feedFlags) load(path string) (*onnxpb.ModelProto, *infer.Feed, error) {
	m, err := onnx.Load(path)
	if err != nil {
		return nil, nil, cli.BadInput(err)
	}
	in, err := f.build(m, path)
	if err != nil {
		return nil, nil, err
	}
	return m, in, nil
}

// runtimeFlags are --backend and --threads: the runtime that runs a
// model and its intra-op threads (run, compare, validate, finetune,
// embed, evaluate). check vets --backend; cli.ParseFlags vets --threads.
type runtimeFlags struct {
	backend string
	threads int
}

// register adds --backend and --threads to fs.
func (f *runtimeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.backend, "backend", infer.DefaultBackend, "runtime backend: "+strings.Join(infer.Backends(), " or "))
	fs.IntVar(&f.threads, "threads", 0, "intra-op threads (0: backend default)")
}

// check vets --backend.
func (f *runtimeFlags) check() error {
	return checkBackend(f.backend)
}

// checkBackend vets the name a --backend gives: runtimeFlags' and that
// of the teacher runs of hedgehog and long (transferFlags).
func checkBackend(name string) error {
	if !slices.Contains(infer.Backends(), name) {
		return cli.UsageError("--backend %q: want %s", name, strings.Join(infer.Backends(), " or "))
	}
	return nil
}

// runFlags are the flags of the commands that build inputs and run a
// model on them (run, compare, validate, finetune): the input flags and
// the runtime's.
type runFlags struct {
	*feedFlags
	runtimeFlags
}

// addRunFlags registers the input and runtime flags on fs.
func addRunFlags(fs *flag.FlagSet) *runFlags {
	f := &runFlags{feedFlags: addFeedFlags(fs)}
	f.runtimeFlags.register(fs)
	return f
}

// load vets --backend, then loads the one MODEL argument and builds its
// inputs (feedFlags.load).
func (f *runFlags) load(path string) (*onnxpb.ModelProto, *infer.Feed, error) {
	if err := f.check(); err != nil {
		return nil, nil, err
	}
	return f.feedFlags.load(path)
}

// feedBuilt, when set (by tests), sees every feed a command builds; an
// error it returns stops the command.
var feedBuilt func(*infer.Feed) error

// feedFlagNames are the flags of the FeedSpec fields.
var feedFlagNames = map[string]string{
	"Inputs": "--input", "Texts": "--text", "TextFiles": "--text-file", "Vocab": "--vocab",
	"Random": "--random-inputs", "Batch": "--batch", "SeqLen": "--seq-len", "MaxLen": "--max-len",
}

// feedError words a infer.FeedError in flags and gives it its exit code;
// model is the model whose limit an input exceeds (see infer.ErrTooLong)
// and limit where that limit comes from, named in that error (with the
// commands that lift a position table's limit). A sequence longer than
// the limit is bad input (exit 2) whether texts, an input file or
// --seq-len ask for it: the model does not fit the flags
// (docs/reliability.md), as embed and evaluate say of a --window or
// --max-tokens beyond it.
func feedError(err error, model string, limit convert.Limit) error {
	var fe *infer.FeedError
	if !errors.As(err, &fe) {
		return cli.BadInput(err)
	}
	flagName := feedFlagNames[fe.Field]
	var msg string
	switch {
	case errors.Is(err, infer.ErrFeedConflict):
		msg = fmt.Sprintf("%s cannot be combined with %s", flagName, feedFlagNames[fe.With])
	case errors.Is(err, infer.ErrInputNotGiven):
		msg = fmt.Sprintf("input %q not given: use --input %s=FILE, --text, --text-file or --random-inputs", fe.Input, fe.Input)
	case fe.Field == "Inputs":
		msg = fmt.Sprintf("--input %s: %s", fe.Input, fe.Message())
	case flagName != "":
		msg = flagName + ": " + fe.Message()
	default:
		msg = fe.Message()
	}
	if errors.Is(err, infer.ErrTooLong) {
		msg += tooLongHint(model, limit)
		return cli.BadInput(errors.New(msg))
	}
	if errors.Is(err, infer.ErrFeedValue) || errors.Is(err, infer.ErrFeedConflict) {
		return &cli.ExitError{Code: cli.ExitUsage, Err: errors.New(msg)}
	}
	return cli.BadInput(errors.New(msg))
}

// tooLongHint ends the message of an input longer than the limit of
// model: where the limit comes from and, for a position table, the
// commands that make a model that reads longer inputs. A limit stated by
// a configuration or a doc string is the length the model was trained
// for; no command lifts it.
func tooLongHint(model string, limit convert.Limit) string {
	if limit.Kind == convert.LimitBuffer {
		return fmt.Sprintf(" (%s's %s); convert local-pooled %s -o OUT computes an ALiBi bias in the op and reads longer inputs", model, limit.Source, model)
	}
	if limit.Kind == convert.LimitTable || limit.Kind == convert.LimitNone {
		return fmt.Sprintf(" (%s's position table); convert long %s -o OUT --max-length N reads longer inputs (or convert extend-positions)", model, model)
	}
	return fmt.Sprintf(" (%s's limit, from %s)", model, limit.Source)
}

// fixedInputsVar adds --input to fs for a command that feeds text to a
// model pass after pass (embed, evaluate): the inputs that carry no
// tokens, fed unchanged with every pass, into *m.
func fixedInputsVar(fs *flag.FlagSet, m *map[string]string) {
	fs.Var((*inputsFlag)(m), "input", "`NAME=VALUE` of an input that carries no tokens (a task id), fed with every pass: a NUMBER for an input of one element (jina-embeddings-v3's task adapter: task_id=4, text-matching) or a .npy or TensorProto .pb FILE (repeatable)")
}

// promptVars adds --{who}prompt and --{who}prompt-name to fs for a
// command that embeds texts (embed, evaluate), into *text and *name:
// text that begins every text the model reads (embed.Options.Prompt),
// given itself or by its name among the model's prompts. each says
// which texts ("each text", "each query").
func promptVars(fs *flag.FlagSet, who, each string, text, name *string) {
	fs.StringVar(text, who+"prompt", "", "`TEXT` before "+each+"; as a sentence-transformers prompt (\"search_query: \" for nomic-embed-text, \"query: \" for e5), its wordpieces follow [CLS] in every window")
	fs.StringVar(name, who+"prompt-name", "", "prompt `NAME` before "+each+"; one of the prompts of the model's config_sentence_transformers.json (default: its default_prompt_name, if any)")
}

// promptCheck refuses a prompt given both as text and by name.
func promptCheck(who, text, name string) error {
	if text != "" && name != "" {
		return cli.UsageError("--%sprompt and --%sprompt-name both give the prompt: set one", who, who)
	}
	return nil
}

// inputFiles lists the files among inputs' values (the numbers aside),
// named by their flag, for checkOutputs.
func inputFiles(inputs map[string]string) []namedFile {
	var out []namedFile
	for _, name := range slices.Sorted(maps.Keys(inputs)) {
		if v := inputs[name]; !infer.IsNumber(v) {
			out = append(out, namedFile{"--input " + name, v})
		}
	}
	return out
}

// inputsFlag collects repeated NAME=FILE values.
type inputsFlag map[string]string

func (m *inputsFlag) String() string {
	if m == nil {
		return ""
	}
	var parts []string
	for k, v := range *m {
		parts = append(parts, k+"="+v)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func (m *inputsFlag) Set(v string) error {
	name, file, ok := strings.Cut(v, "=")
	if !ok || name == "" || file == "" {
		return errors.New("want NAME=FILE or NAME=NUMBER")
	}
	if _, dup := (*m)[name]; dup {
		return fmt.Errorf("input %q given twice", name)
	}
	if *m == nil {
		*m = inputsFlag{}
	}
	(*m)[name] = file
	return nil
}

// intFlag is an integer flag of at least min; K and M suffixes (×1024,
// ×1024²) are accepted.
type intFlag struct {
	p   *int
	min int
}

func (f *intFlag) String() string {
	if f == nil || f.p == nil {
		return "0"
	}
	return strconv.Itoa(*f.p)
}

func (f *intFlag) Set(v string) error {
	n, err := cliutil.Int("", v, f.min, 0)
	var fe *cliutil.FlagError
	if errors.As(err, &fe) {
		// the flag package names the flag and the value
		return errors.New(fe.Msg)
	}
	if err != nil {
		return err
	}
	*f.p = n
	return nil
}

// fullyMaskedNote says which batch rows of in have every token masked
// (docs/ops.md, "Rows whose every key is masked"), or returns "" when none
// has or the feed has no mask. validate and compare print it: on such a
// row the original model's attention output is an artifact of its mask
// constant and the converted ops give 0, so the two differ there by
// design.
func fullyMaskedNote(in *infer.Feed) string {
	if in == nil || in.Batch <= 0 || in.SeqLen <= 0 || len(in.Mask) != in.Batch*in.SeqLen {
		return ""
	}
	var rows []string
	for b := range in.Batch {
		masked := true
		for _, v := range in.Mask[b*in.SeqLen : (b+1)*in.SeqLen] {
			if v != 0 {
				masked = false
				break
			}
		}
		if masked {
			rows = append(rows, strconv.Itoa(b))
		}
	}
	if len(rows) == 0 {
		return ""
	}
	return fmt.Sprintf("note: batch row %s has every token masked: there the original's attention averages all keys (with a large negative mask such as float32's minimum; with −10000 it ignores the mask) while the converted ops give 0, so outputs differ on that row by design (docs/ops.md, \"Rows whose every key is masked\")", strings.Join(rows, ", "))
}
