package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/cmd/internal/cliutil"
	"github.com/linearize/linearize/embed"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/internal/fsutil"
)

// evalSystem is a system of the command line: a model and how it reads.
type evalSystem struct {
	name, path string
	mode       embed.Mode
}

func runEvaluate(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("evaluate", flag.ContinueOnError)
	docs := fs.String("docs", "", "read every *.txt and *.md file in `DIR` as a document (id: the file name)")
	jsonl := fs.String("jsonl", "", "a `FILE` of JSON lines {\"id\": ..., \"text\": ...}, one document each")
	maxTokens := fs.Int("max-tokens", 4096, "cut every document to its first `N` wordpieces before anything else; every system reads the same text")
	minTokens := fs.Int("min-tokens", 0, "skip documents of fewer than `N` wordpieces (0: the last bucket edge, so that a document fills every bucket)")
	buckets := fs.String("buckets", "", "`LIST` of bucket edges in wordpieces, by the passage's position (default: 0,512,1K,2K,… up to --max-tokens)")
	perBucket := fs.Int("per-bucket", 1, "passages `K` drawn per document and bucket")
	seed := fs.Uint64("seed", cli.DefaultSeed, "seed of the passages and the bootstrap")
	bootstrap := fs.Int("bootstrap", 1000, "paired bootstrap resamples `B` over documents")
	reference := fs.String("reference", "", "the system `NAME` the others are compared with (default: chunk, else the first system)")
	systemsFlag := fs.String("systems", "", "`LIST` of the systems to run, in this order (default: truncate, chunk, then the models' systems)")
	limitDocs := fs.Int("limit-docs", 0, "read only the first `N` documents (0: all)")
	pooling := fs.String("pooling", "auto", "`POOLING` of every model: mean, cls, max, or auto (each model's sentence-transformers files, else mean)")
	threads := fs.Int("threads", 0, "intra-op threads (0: backend default)")
	backend := fs.String("backend", infer.DefaultBackend, "runtime backend: "+strings.Join(infer.Backends(), " or "))
	vocab := fs.String("vocab", "", "tokenizer `PATH` of every model: a folder, tokenizer.json or vocab.txt (default: found beside each model)")
	asJSON := fs.Bool("json", false, "print the report as JSON instead of the markdown tables")
	jsonOut := fs.String("json-out", "", "also write the report as JSON to `FILE`")
	mdOut := fs.String("md-out", "", "also write the markdown tables to `FILE`")
	quiet := fs.Bool("q", false, "no progress lines on stderr")
	pos, err := cli.ParseFlags(fs, args, stdout)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return cli.UsageError("want the ORIGINAL model, then any NAME=MODEL[:MODE] to compare")
	}
	if err := checkBackend(*backend); err != nil {
		return err
	}
	o := embed.EvalOptions{MaxTokens: *maxTokens, MinTokens: *minTokens, PerBucket: *perBucket, Seed: *seed, Bootstrap: *bootstrap}
	switch {
	case *maxTokens < 1:
		return cli.UsageError("--max-tokens must be at least 1")
	case *minTokens < 0:
		return cli.UsageError("--min-tokens must be non-negative")
	case *perBucket < 1:
		return cli.UsageError("--per-bucket must be at least 1")
	case *bootstrap < 1:
		return cli.UsageError("--bootstrap must be at least 1")
	case *limitDocs < 0:
		return cli.UsageError("--limit-docs must be non-negative")
	case (*docs == "") == (*jsonl == ""):
		return cli.UsageError("give the documents with one of --docs or --jsonl")
	}
	if *buckets != "" {
		if o.Buckets, err = cli.Ints("buckets", *buckets, cliutil.IntList{Min: 0}); err != nil {
			return err
		}
	}
	if err := o.Check(); err != nil {
		return cli.UsageError("--buckets %s: %s", *buckets, strings.TrimPrefix(err.Error(), embed.ErrEvalOption.Error()+": "))
	}
	eo := embed.Options{MaxTokens: *maxTokens, Backend: *backend, Threads: *threads, Vocab: *vocab}
	switch p := embed.Pooling(*pooling); p {
	case "auto":
	case embed.PoolMean, embed.PoolCLS, embed.PoolMax:
		eo.Pooling = p
	default:
		return cli.UsageError("--pooling %q: want auto, mean, cls or max", *pooling)
	}

	// The systems: the original truncated and chunked, then the models.
	original := pos[0]
	list := []evalSystem{{"truncate", original, embed.Truncate}, {"chunk", original, embed.Chunk}}
	for _, arg := range pos[1:] {
		s, err := parseEvalSystem(arg)
		if err != nil {
			return err
		}
		for _, prev := range list {
			if prev.name == s.name {
				return cli.UsageError("two systems are named %s (name them: NAME=%s)", s.name, arg)
			}
		}
		list = append(list, s)
	}
	if *systemsFlag != "" {
		var picked []evalSystem
		for _, name := range cli.StrList(*systemsFlag) {
			i := slices.IndexFunc(list, func(s evalSystem) bool { return s.name == name })
			if i < 0 {
				return cli.UsageError("--systems: no system %q (have %s)", name, evalNames(list))
			}
			if slices.ContainsFunc(picked, func(s evalSystem) bool { return s.name == name }) {
				return cli.UsageError("--systems names %s twice", name)
			}
			picked = append(picked, list[i])
		}
		if len(picked) == 0 {
			return cli.UsageError("--systems: no system named")
		}
		list = picked
	}
	if *reference != "" && !slices.ContainsFunc(list, func(s evalSystem) bool { return s.name == *reference }) {
		return cli.UsageError("--reference %s is not among the systems (%s)", *reference, evalNames(list))
	}
	o.Reference = *reference

	// Inputs, before any model is loaded.
	for _, s := range list {
		if _, err := os.Stat(s.path); err != nil {
			return cli.BadInput(fmt.Errorf("system %s: %w", s.name, err))
		}
	}
	for _, out := range []struct{ flag, path string }{{"json-out", *jsonOut}, {"md-out", *mdOut}} {
		if out.path != "" {
			if err := cli.CheckOutput("", out.path, false); err != nil {
				return cli.BadInput(fmt.Errorf("--%s: %s", out.flag, strings.TrimPrefix(err.Error(), "onnx: ")))
			}
		}
	}
	var read []embedDoc
	if *docs != "" {
		read, err = readDocsDir("--docs", *docs)
	} else {
		read, err = readJSONLDocs(*jsonl)
	}
	if err != nil {
		return cli.BadInput(err)
	}
	if *limitDocs > 0 && len(read) > *limitDocs {
		read = read[:*limitDocs]
	}
	documents := make([]embed.Document, len(read))
	for i, d := range read {
		documents[i] = embed.Document{ID: d.id, Text: d.text}
	}

	// The original, truncated, embeds the queries and is the truncate
	// system; every other system is opened for its pass and closed after.
	qo := eo
	qo.Mode = embed.Truncate
	query, err := embed.Open(original, qo)
	if err != nil {
		return embedError(err)
	}
	defer query.Close()
	if !*quiet {
		o.Progress = os.Stderr
		fmt.Fprintf(os.Stderr, "queries: %s\n", query)
	}
	var systems []embed.System
	for _, s := range list {
		if s.path == original && s.mode == embed.Truncate {
			systems = append(systems, embed.System{Name: s.name, Encoder: query})
			continue
		}
		so := eo
		so.Mode = s.mode
		systems = append(systems, embed.System{Name: s.name, Open: func() (embed.Encoder, error) {
			e, err := embed.Open(s.path, so)
			if err != nil {
				return nil, embedError(err)
			}
			if e.Mode() == embed.Long && e.Limit() > 0 && e.Limit() < *maxTokens+2 {
				e.Close()
				return nil, cli.BadInput(fmt.Errorf("%s reads at most %d tokens in one pass, fewer than --max-tokens %d and [CLS], [SEP]; lower --max-tokens or convert it with a larger --max-length", s.path, e.Limit(), *maxTokens))
			}
			if o.Progress != nil {
				fmt.Fprintf(o.Progress, "system %s: %s\n", s.name, e)
			}
			return e, nil
		}})
	}

	rep, err := embed.Evaluate(query.Tokenizer(), documents, query, systems, o)
	var ee *cli.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		return &cli.ExitError{Code: ee.Code, Err: err}
	case errors.Is(err, embed.ErrTooShort):
		return cli.BadInput(fmt.Errorf("%w (lower --min-tokens or --max-tokens, or give longer documents)", err))
	case errors.Is(err, embed.ErrEvalOption):
		return cli.UsageError("%v", err)
	default:
		return embedError(err)
	}

	md := rep.Markdown()
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return cli.RuntimeFailure(err)
	}
	js = append(js, '\n')
	if *asJSON {
		_, err = stdout.Write(js)
	} else {
		_, err = io.WriteString(stdout, md)
	}
	if err != nil {
		return cli.RuntimeFailure(err)
	}
	if *jsonOut != "" {
		if err := fsutil.WriteFileAtomic(*jsonOut, js); err != nil {
			return cli.RuntimeFailure(err)
		}
	}
	if *mdOut != "" {
		if err := fsutil.WriteFileAtomic(*mdOut, []byte(md)); err != nil {
			return cli.RuntimeFailure(err)
		}
	}
	return nil
}

// parseEvalSystem reads NAME=MODEL[:MODE] or MODEL[:MODE]; the name
// defaults to the model's file name without its extension, the mode to
// auto (long for a model written by convert long, else chunk).
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
		case string(embed.Truncate), string(embed.Chunk), string(embed.Long):
			s.mode, path = embed.Mode(m), path[:i]
		default:
			if !strings.ContainsAny(m, `/\.`) {
				return s, cli.UsageError("%s: mode %q: want truncate, chunk, long or auto", arg, m)
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
