package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/cmd/internal/cliutil"
	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/corpus"
	"github.com/linearize/linearize/embed"
	"github.com/linearize/linearize/internal/fsutil"
)

// evalSystem is a system of the command line: a model and how it reads.
type evalSystem struct {
	name, path string
	mode       embed.Mode
	// baseline marks the original's truncate and chunk systems: they read
	// windows of at most 512 tokens (embed.LongContext) whatever the
	// original's limit, as chunk-and-mean is done.
	baseline bool
	// auto marks the original read whole when no flag named it: it runs
	// only when the original is a long-context model (its limit above
	// 512 tokens) that reads --max-tokens in one pass.
	auto bool
}

// wholeSystem is the name of the original read whole, in one pass.
const wholeSystem = "whole"

// maxsimSystem is the name of the original read in chunks of at most 512
// tokens, a document scored by its best chunk (one vector per chunk).
const maxsimSystem = "maxsim"

// lateSystem is the name of the original's late chunks (embed.Late): the
// maxsim system's chunks, each pooled from a pass over the document.
const lateSystem = "late"

// evalFlags are evaluate's flags.
type evalFlags struct {
	docs, jsonl, buckets, reference, systems, pooling, vocab string
	jsonOut, mdOut                                           string
	maxTokens, minTokens, perBucket, bootstrap, limitDocs    int
	window                                                   int
	seed                                                     uint64
	asJSON, quiet                                            bool
	inputs, queryInputs                                      map[string]string
	// The prompts of the queries and of the documents (passages).
	queryPrompt, queryPromptName, docPrompt, docPromptName string
	runtimeFlags
	// stderr receives the progress lines and notes, unless -q.
	stderr io.Writer
}

// define declares the flags on fs.
func (f *evalFlags) define(fs *flag.FlagSet) {
	fs.StringVar(&f.docs, "docs", "", "read every *.txt and *.md file in `DIR` as a document (id: the file name)")
	fs.StringVar(&f.jsonl, "jsonl", "", "a `FILE` of JSON lines, one document each ({\"id\": ..., \"text\": ...})")
	fs.IntVar(&f.maxTokens, "max-tokens", 4096, "cut every document to its first `N` wordpieces before anything else; every system reads the same text"+atMost(maxTokensFlag))
	fs.IntVar(&f.minTokens, "min-tokens", 0, "skip documents of fewer than `N` wordpieces (0: the last bucket edge, so that a document fills every bucket)"+atMost(maxTokensFlag))
	fs.StringVar(&f.buckets, "buckets", "", "`LIST` of bucket edges in wordpieces, by the passage's position (default: 0,512,1K,2K,… up to --max-tokens)")
	fs.IntVar(&f.perBucket, "per-bucket", 1, "passages `K` drawn per document and bucket"+atMost(maxPerBucket))
	fs.Uint64Var(&f.seed, "seed", cli.DefaultSeed, "seed of the passages and the bootstrap")
	fs.IntVar(&f.bootstrap, "bootstrap", 1000, "paired bootstrap resamples `B` over documents"+atMost(maxBootstrap))
	fs.StringVar(&f.reference, "reference", "", "the system `NAME` the others are compared with (default: chunk, else the first system)")
	fs.StringVar(&f.systems, "systems", "", "`LIST` of the systems to run, in this order (default: truncate, chunk, whole when the original's own limit is above 512 tokens, then the models' systems; maxsim, the original in chunks with a document scored by its best chunk, and late, the same with late chunks, run when named here)")
	fs.IntVar(&f.window, "window", 0, "tokens `W` per chunk of every system read in chunk, chunks or late mode, [CLS] and [SEP] included (default: each mode's own, at most 512 for the original's systems)"+atMost(maxWindowFlag))
	fs.IntVar(&f.limitDocs, "limit-docs", 0, "read only the first `N` documents (0: all)"+atMost(maxDocs))
	fs.StringVar(&f.pooling, "pooling", "auto", "`POOLING` of every model: mean, cls, max, or auto (each model's sentence-transformers files, else mean)")
	f.runtimeFlags.register(fs)
	fs.StringVar(&f.vocab, "vocab", "", "tokenizer `PATH` of every model: a folder, tokenizer.json or vocab.txt (default: found beside each model)")
	fixedInputsVar(fs, &f.inputs)
	fs.Var((*inputsFlag)(&f.queryInputs), "query-input", "`NAME=VALUE` as --input, for the queries only (jina-embeddings-v3: --input task_id=1 --query-input task_id=0, its retrieval.passage and retrieval.query adapters)")
	promptVars(fs, "query-", "each query", &f.queryPrompt, &f.queryPromptName)
	promptVars(fs, "doc-", "each document", &f.docPrompt, &f.docPromptName)
	fs.BoolVar(&f.asJSON, "json", false, "print the report as JSON instead of the markdown tables")
	fs.StringVar(&f.jsonOut, "json-out", "", "also write the report as JSON to `FILE`")
	fs.StringVar(&f.mdOut, "md-out", "", "also write the markdown tables to `FILE`")
	fs.BoolVar(&f.quiet, "q", false, "no progress lines on stderr")
}

func runEvaluate(args []string, stdout, stderr io.Writer) error {
	var f evalFlags
	fs := flag.NewFlagSet("evaluate", flag.ContinueOnError)
	f.define(fs)
	pos, err := cli.ParseFlags(fs, args, stdout)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return cli.UsageError("want the ORIGINAL model, then any NAME=MODEL[:MODE] to compare")
	}
	f.stderr = stderr
	return f.evaluate(pos[0], pos[1:], stdout)
}

// evaluate runs the evaluation of the systems of original and models
// (NAME=MODEL[:MODE] arguments) that the flags ask for and writes its
// report.
func (f *evalFlags) evaluate(original string, models []string, stdout io.Writer) error {
	if err := f.runtimeFlags.check(); err != nil {
		return err
	}
	o, eo, err := f.options()
	if err != nil {
		return err
	}
	list, err := f.systemList(original, models)
	if err != nil {
		return err
	}
	if eo.Pooling != "" && eo.Pooling != embed.PoolMean {
		// As embed refuses --pooling with --mode late: the same fault,
		// the same exit code.
		for _, s := range list {
			if s.mode == embed.Late {
				return cli.UsageError("--pooling %s: system %s is read in late mode, which pools each chunk's wordpieces by their mean", f.pooling, s.name)
			}
		}
	}
	o.Reference = f.reference
	documents, err := f.documents(original, list)
	if err != nil {
		return err
	}
	rep, err := f.run(original, list, documents, o, eo)
	if err != nil {
		return err
	}
	return f.write(rep, stdout)
}

// options vets the numeric flags and returns the evaluation's options and
// the encoders'.
func (f *evalFlags) options() (embed.EvalOptions, embed.Options, error) {
	o := embed.EvalOptions{MaxTokens: f.maxTokens, MinTokens: f.minTokens, PerBucket: f.perBucket, Seed: f.seed, Bootstrap: f.bootstrap}
	eo := embed.Options{MaxTokens: f.maxTokens, Backend: f.backend, Threads: f.threads, Vocab: f.vocab, Inputs: f.inputs,
		Prompt: f.docPrompt, PromptName: f.docPromptName}
	if err := promptCheck("query-", f.queryPrompt, f.queryPromptName); err != nil {
		return o, eo, err
	}
	if err := promptCheck("doc-", f.docPrompt, f.docPromptName); err != nil {
		return o, eo, err
	}
	switch {
	case f.maxTokens < 1:
		return o, eo, cli.UsageError("--max-tokens must be at least 1")
	case f.minTokens < 0:
		return o, eo, cli.UsageError("--min-tokens must be non-negative")
	case f.perBucket < 1:
		return o, eo, cli.UsageError("--per-bucket must be at least 1")
	case f.bootstrap < 1:
		return o, eo, cli.UsageError("--bootstrap must be at least 1")
	case f.limitDocs < 0:
		return o, eo, cli.UsageError("--limit-docs must be non-negative")
	case f.window != 0 && f.window < 3:
		return o, eo, cli.UsageError("--window %d: want at least 3 ([CLS], a wordpiece, [SEP])", f.window)
	case (f.docs == "") == (f.jsonl == ""):
		return o, eo, cli.UsageError("give the documents with one of --docs or --jsonl")
	}
	if err := checkCounts(count{"max-tokens", f.maxTokens, maxTokensFlag}, count{"min-tokens", f.minTokens, maxTokensFlag},
		count{"per-bucket", f.perBucket, maxPerBucket}, count{"bootstrap", f.bootstrap, maxBootstrap}, count{"limit-docs", f.limitDocs, maxDocs}, count{"window", f.window, maxWindowFlag}); err != nil {
		return o, eo, err
	}
	if f.buckets != "" {
		var err error
		if o.Buckets, err = cli.Ints("buckets", f.buckets, cliutil.IntList{Min: 0}); err != nil {
			return o, eo, err
		}
	}
	if err := o.Check(); err != nil {
		return o, eo, cli.UsageError("--buckets %s: %s", f.buckets, strings.TrimPrefix(err.Error(), embed.ErrEvalOption.Error()+": "))
	}
	switch p := embed.Pooling(f.pooling); p {
	case "auto":
	case embed.PoolMean, embed.PoolCLS, embed.PoolMax:
		eo.Pooling = p
	default:
		return o, eo, cli.UsageError("--pooling %q: want auto, mean, cls or max", f.pooling)
	}
	return o, eo, nil
}

// systemList returns the systems: the original truncated, chunked and
// read whole (the last run only for a long-context original, see
// dropWhole, unless --systems or --reference names it; left out when a
// model's system takes its name), then the models, or those --systems
// names in its order; --reference must be one of them.
func (f *evalFlags) systemList(original string, models []string) ([]evalSystem, error) {
	list := []evalSystem{{name: "truncate", path: original, mode: embed.Truncate, baseline: true},
		{name: "chunk", path: original, mode: embed.Chunk, baseline: true}}
	for _, arg := range models {
		s, err := parseEvalSystem(arg)
		if err != nil {
			return nil, err
		}
		if slices.ContainsFunc(list, func(prev evalSystem) bool { return prev.name == s.name }) {
			return nil, cli.UsageError("two systems are named %s (name them: NAME=%s)", s.name, arg)
		}
		list = append(list, s)
	}
	at := 2 // where the original's other systems go: after truncate and chunk
	for _, s := range []evalSystem{{name: maxsimSystem, path: original, mode: embed.Chunks, baseline: true}, {name: lateSystem, path: original, mode: embed.Late, baseline: true}} {
		// Run when --systems or --reference names them: they store a
		// vector per chunk.
		named := slices.Contains(cli.StrList(f.systems), s.name) || f.reference == s.name
		if named && !slices.ContainsFunc(list, func(prev evalSystem) bool { return prev.name == s.name }) {
			list = slices.Insert(list, at, s)
			at++
		}
	}
	if !slices.ContainsFunc(list, func(s evalSystem) bool { return s.name == wholeSystem }) {
		whole := evalSystem{name: wholeSystem, path: original, mode: embed.Long, auto: f.systems == "" && f.reference != wholeSystem}
		list = slices.Insert(list, at, whole)
	}
	if f.systems != "" {
		var picked []evalSystem
		for _, name := range cli.StrList(f.systems) {
			i := slices.IndexFunc(list, func(s evalSystem) bool { return s.name == name })
			if i < 0 {
				return nil, cli.UsageError("--systems: no system %q (have %s)", name, evalNames(list))
			}
			if slices.ContainsFunc(picked, func(s evalSystem) bool { return s.name == name }) {
				return nil, cli.UsageError("--systems names %s twice", name)
			}
			picked = append(picked, list[i])
		}
		if len(picked) == 0 {
			return nil, cli.UsageError("--systems: no system named")
		}
		list = picked
	}
	if f.reference != "" && !slices.ContainsFunc(list, func(s evalSystem) bool { return s.name == f.reference }) {
		return nil, cli.UsageError("--reference %s is not among the systems (%s)", f.reference, evalNames(list))
	}
	return list, nil
}

// documents checks the inputs before any model is loaded (the systems'
// models; the outputs: their folders, and that none is an input) and
// reads the documents.
func (f *evalFlags) documents(original string, list []evalSystem) ([]embed.Document, error) {
	for _, s := range list {
		if _, err := os.Stat(s.path); err != nil {
			return nil, cli.BadInput(fmt.Errorf("system %s: %w", s.name, err))
		}
	}
	outputs := f.outputs()
	inputs := append([]namedFile{{"ORIGINAL", original}, {"--jsonl", f.jsonl}, {"--vocab", f.vocab}}, append(inputFiles(f.inputs), inputFiles(f.queryInputs)...)...)
	for _, s := range list {
		if !slices.ContainsFunc(inputs, func(in namedFile) bool { return in.path == s.path }) {
			inputs = append(inputs, namedFile{"model of system " + s.name, s.path})
		}
	}
	if err := checkOutputs(outputs, inputs); err != nil {
		return nil, err
	}
	name, src := "--jsonl", corpus.JSONL(f.jsonl, readBounds)
	if f.docs != "" {
		var err error
		name = "--docs"
		if src, err = corpus.Dir(f.docs, readBounds); err != nil {
			return nil, cli.BadInput(fmt.Errorf("--docs: %w", err))
		}
	}
	read, err := src.ReadAll()
	if err != nil {
		return nil, cli.BadInput(fmt.Errorf("%s: %w", name, err))
	}
	if f.docs != "" {
		for _, p := range src.Paths() {
			inputs = append(inputs, namedFile{"--docs", p})
		}
		if err := checkNotInputs(outputs, inputs); err != nil {
			return nil, err
		}
	}
	if f.limitDocs > 0 && len(read) > f.limitDocs {
		read = read[:f.limitDocs]
	}
	documents := make([]embed.Document, len(read))
	for i, d := range read {
		documents[i] = embed.Document{ID: d.ID, Text: d.Text}
	}
	return documents, nil
}

// run opens the original, truncated, which embeds the queries and is the
// truncate system (every other system is opened for its pass and closed
// after), and evaluates the systems on the documents.
func (f *evalFlags) run(original string, list []evalSystem, documents []embed.Document, o embed.EvalOptions, eo embed.Options) (*embed.Report, error) {
	qo := f.queryOptions(eo)
	query, err := embed.Open(original, qo)
	if err != nil {
		return nil, embedError(err)
	}
	defer query.Close()
	docPrompt, err := embed.PromptFor(original, f.docPrompt, f.docPromptName)
	if err != nil {
		return nil, embedError(err)
	}
	list = f.dropWhole(list, query.ContextLimit(), original, embed.PromptWordpieces(query.Tokenizer(), docPrompt))
	if !f.quiet {
		o.Progress = f.stderr
		fmt.Fprintf(f.stderr, "queries: %s\n", query)
	}
	var systems []embed.System
	for _, s := range list {
		if s.path == original && s.mode == embed.Truncate && f.sameQueries() {
			systems = append(systems, embed.System{Name: s.name, Encoder: query})
			continue
		}
		so := eo
		so.Mode = s.mode
		if s.baseline {
			so.MaxWindow = embed.LongContext
		}
		if s.mode == embed.Chunk || s.mode.PerChunk() {
			so.Window = f.window
		}
		systems = append(systems, embed.System{Name: s.name, MaxSim: s.mode.PerChunk(), Open: func() (embed.Encoder, error) { return f.open(s, so, o.Progress) }})
	}
	rep, err := embed.Evaluate(query.Tokenizer(), documents, query, systems, o)
	var ee *cli.ExitError
	switch {
	case err == nil:
		return rep, nil
	case errors.As(err, &ee):
		return nil, &cli.ExitError{Code: ee.Code, Err: err}
	case errors.Is(err, embed.ErrTooShort):
		return nil, cli.BadInput(fmt.Errorf("%w (lower --min-tokens or --max-tokens, or give longer documents)", err))
	case errors.Is(err, embed.ErrEvalOption):
		return nil, cli.UsageError("%v", err)
	}
	return nil, embedError(err)
}

// queryOptions are the options of the encoder of the queries: the
// original, truncated to at most LongContext tokens, with the query
// prompt and inputs.
func (f *evalFlags) queryOptions(eo embed.Options) embed.Options {
	qo := eo
	qo.Mode = embed.Truncate
	qo.MaxWindow = embed.LongContext
	qo.Prompt, qo.PromptName = f.queryPrompt, f.queryPromptName
	if len(f.queryInputs) > 0 {
		qo.Inputs = maps.Clone(f.inputs)
		if qo.Inputs == nil {
			qo.Inputs = map[string]string{}
		}
		maps.Copy(qo.Inputs, f.queryInputs)
	}
	return qo
}

// sameQueries reports whether the queries are read as the documents are
// (no prompt or input of their own), so that the encoder of the queries
// is the truncate system too.
func (f *evalFlags) sameQueries() bool {
	return f.queryPrompt == f.docPrompt && f.queryPromptName == f.docPromptName && len(f.queryInputs) == 0
}

// dropWhole returns list without the original read whole when no flag
// named that system and the original (whose limit is lim) is not a
// long-context model, or cannot read --max-tokens and the document
// prompt's p wordpieces in one pass (then a note says so on stderr).
func (f *evalFlags) dropWhole(list []evalSystem, lim convert.Limit, original string, p int) []evalSystem {
	return slices.DeleteFunc(list, func(s evalSystem) bool {
		if !s.auto {
			return false
		}
		if lim.Tokens <= embed.LongContext {
			return true
		}
		if lim.Tokens < f.maxTokens+2+p {
			if !f.quiet {
				prompt := ""
				if p > 0 {
					prompt = fmt.Sprintf(" and the document prompt's %d wordpieces", p)
				}
				fmt.Fprintf(f.stderr, "note: system %s (%s read whole) not run: it reads at most %d tokens in one pass (%s), fewer than --max-tokens %d, [CLS], [SEP]%s; --max-tokens %d runs it\n",
					s.name, original, lim.Tokens, lim.Source, f.maxTokens, prompt, lim.Tokens-2-p)
			}
			return true
		}
		return false
	})
}

// open opens the encoder of system s for its pass: a long model must read
// --max-tokens and [CLS], [SEP] in one pass.
func (f *evalFlags) open(s evalSystem, so embed.Options, progress io.Writer) (embed.Encoder, error) {
	e, err := embed.Open(s.path, so)
	if err != nil {
		return nil, embedError(err)
	}
	p := embed.PromptWordpieces(e.Tokenizer(), e.Prompt())
	if lim := e.ContextLimit(); e.Mode() == embed.Long && lim.Tokens > 0 && lim.Tokens < f.maxTokens+2+p {
		e.Close()
		hint := "lower --max-tokens"
		switch lim.Kind {
		case convert.LimitTable:
			hint += " or convert it with a larger --max-length"
		case convert.LimitBuffer:
			hint += " or convert it with local-pooled, which needs no bias buffer"
		}
		prompt := ""
		if p > 0 {
			prompt = fmt.Sprintf(" and the prompt's %d wordpieces", p)
		}
		return nil, cli.BadInput(fmt.Errorf("%s reads at most %d tokens in one pass (%s), fewer than --max-tokens %d and [CLS], [SEP]%s; %s", s.path, lim.Tokens, lim.Source, f.maxTokens, prompt, hint))
	}
	if progress != nil {
		fmt.Fprintf(progress, "system %s: %s\n", s.name, e)
	}
	return e, nil
}

// write prints the report (markdown, or JSON with --json) and writes the
// --json-out and --md-out files.
func (f *evalFlags) write(rep *embed.Report, stdout io.Writer) error {
	md := rep.Markdown()
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return cli.RuntimeFailure(err)
	}
	js = append(js, '\n')
	if f.asJSON {
		_, err = stdout.Write(js)
	} else {
		_, err = io.WriteString(stdout, md)
	}
	if err != nil {
		return cli.RuntimeFailure(err)
	}
	// One set: the two reports are both the old ones or both this run's,
	// whatever fails or stops the write.
	var set []fsutil.SetFile
	for _, out := range []struct {
		path string
		data []byte
	}{{f.jsonOut, js}, {f.mdOut, []byte(md)}} {
		if out.path != "" {
			set = append(set, fsutil.FileBytes(out.path, out.data))
		}
	}
	if err := fsutil.WriteSet(set...); err != nil {
		return cli.RuntimeFailure(err)
	}
	return nil
}

// outputs are the files the flags ask evaluate to write.
func (f *evalFlags) outputs() []namedFile {
	var outs []namedFile
	for _, o := range []namedFile{{"--json-out", f.jsonOut}, {"--md-out", f.mdOut}} {
		if o.path != "" {
			outs = append(outs, o)
		}
	}
	return outs
}

// parseEvalSystem reads NAME=MODEL[:MODE] or MODEL[:MODE]; the name
// defaults to the model's file name without its extension, the mode to
// auto (long for a model written by convert long or whose own limit is
// above 512 tokens, else chunk; see embed.Auto).
func parseEvalSystem(arg string) (evalSystem, error) {
	var s evalSystem
	path := arg
	if i := strings.IndexByte(arg, '='); i > 0 && !strings.ContainsAny(arg[:i], `/\`) {
		s.name, path = arg[:i], arg[i+1:]
	}
	if i := strings.LastIndexByte(path, ':'); i >= 0 {
		switch m := path[i+1:]; m {
		case "auto":
			path = path[:i]
		case string(embed.Truncate), string(embed.Chunk), string(embed.Chunks), string(embed.Long), string(embed.Late):
			s.mode, path = embed.Mode(m), path[:i]
		default:
			if !strings.ContainsAny(m, `/\.`) {
				return s, cli.UsageError("%s: mode %q: want truncate, chunk, chunks or late (scored by the best chunk), long or auto", arg, m)
			}
		}
	}
	if path == "" {
		return s, cli.UsageError("%s: no model path", arg)
	}
	s.path = path
	if s.name == "" {
		s.name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	}
	if s.name == "" || strings.ContainsAny(s.name, "|,\n") {
		return s, cli.UsageError("%s: system name %q: want a name without '|', ',' or line breaks", arg, s.name)
	}
	return s, nil
}

func evalNames(list []evalSystem) string {
	names := make([]string, len(list))
	for i, s := range list {
		names[i] = s.name
	}
	return strings.Join(names, ", ")
}
