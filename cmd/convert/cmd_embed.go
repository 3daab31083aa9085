package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/corpus"
	"github.com/linearize/linearize/embed"
)

// readBounds bounds the documents and calibration texts every command
// reads (package corpus; the zero value is its defaults): one document,
// and all of them where a command reads them all before it works
// (evaluate, calibration); embed streams its documents and has no total
// bound. Tests lower them.
var readBounds corpus.Options

// maxDimFlag bounds --dim (no encoder's vectors come near it).
const maxDimFlag = 1 << 16

// embedFlags are embed's flags.
type embedFlags struct {
	texts                            cli.MultiFlag
	textFile, docs, jsonl, out, mode string
	pooling, vocab, shard            string
	partFormat                       string
	raw, skipBad, chunkSpans         bool
	maxTokens, window, batch         int
	overlap, partSize, dim           int
	inputs                           map[string]string
	prompt, promptName               string
	runtimeFlags
}

func runEmbed(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("embed", flag.ContinueOnError)
	var f embedFlags
	fs.Var(&f.texts, "text", "a `TEXT` to embed (repeatable; ids text-1, text-2, ...)")
	fs.StringVar(&f.textFile, "text-file", "", "a `FILE` with one text per line (ids: line numbers; blank lines skipped; - is stdin)")
	fs.StringVar(&f.docs, "docs", "", "embed every *.txt and *.md file in `DIR`, sorted (id: the file name)")
	fs.StringVar(&f.jsonl, "jsonl", "", "a `FILE` of JSON lines, one document each ({\"id\": ..., \"text\": ...}; - is stdin)")
	fs.StringVar(&f.out, "o", "", "`OUT`: OUT.npy (float32 [N, dim], ids in OUT.ids.txt), OUT.jsonl (one {\"id\", \"embedding\"} per line) or OUT.parquet (columns id: string, embedding: list<float32>), built in parts in the folder .OUT.parts beside it and written when the input ends; or a folder DIR/ (a path ending in / or a folder that exists) of parts of --part-size documents each (--part-format), written as they are made, and manifest.json. A re-run with the same flags resumes after the parts finished (required)")
	fs.StringVar(&f.mode, "mode", "auto", "read long texts in `MODE`: truncate (first window), chunk (mean over windows, weighted by their wordpieces), chunks (one vector per window, ids DOCID#K), long (one pass, up to the model's limit), late (late chunking: the chunks and ids of chunks mode, each chunk the mean of its wordpieces' hidden states in a pass over the whole text; a text past the model's limit in passes that overlap), auto (long for a convert long model or, without --window, a model whose own limit is above 512 tokens; else chunk)")
	fs.StringVar(&f.pooling, "pooling", "auto", "pool hidden states by `KIND`: mean, cls, max, or auto (the model's sentence-transformers files, else mean)")
	fs.BoolVar(&f.raw, "raw", false, "do not L2-normalise the vectors")
	fs.IntVar(&f.dim, "dim", 0, "keep the first `N` values of each vector, before normalising: a Matryoshka model's smaller vectors, as sentence-transformers' truncate_dim (0: all)"+atMost(maxDimFlag))
	fs.IntVar(&f.maxTokens, "max-tokens", 0, "read at most `N` wordpieces of each text, in every mode (0: all; truncate reads one window)"+atMost(maxTokensFlag))
	fs.IntVar(&f.window, "window", 0, "tokens `W` per pass in truncate and chunk mode, per chunk in late mode, [CLS] and [SEP] included (default: in late mode 512, at most the limit; else the model's window, else its limit: its position table's rows, else max_position_embeddings in the config.json beside it or its doc string; else 512)"+atMost(maxWindowFlag))
	fs.IntVar(&f.overlap, "chunk-overlap", 0, "wordpieces `K` each window of chunk, chunks and late mode shares with the one before (0: none; below the window's wordpieces)")
	fs.IntVar(&f.batch, "batch", embed.DefaultBatch, "`B` texts or chunks per run, at most 4096 tokens of them (long mode: 1)"+atMost(maxBatchFlag))
	f.runtimeFlags.register(fs)
	fs.StringVar(&f.vocab, "vocab", "", "tokenizer `PATH`: a folder, tokenizer.json or vocab.txt (default: found beside the model)")
	fixedInputsVar(fs, &f.inputs)
	promptVars(fs, "", "each text", &f.prompt, &f.promptName)
	fs.BoolVar(&f.chunkSpans, "chunk-spans", false, "ids DOCID#K@START-END in chunks and late mode: each chunk's words as UTF-8 byte offsets in the document's text (a leading byte-order mark removed)")
	fs.BoolVar(&f.skipBad, "skip-bad-docs", false, "skip documents that are empty (no wordpieces) or not UTF-8, and count them in the summary (default: refuse them, exit 2, naming each)")
	fs.IntVar(&f.partSize, "part-size", embed.DefaultPartSize, "documents `N` per part: of a folder output, and of a file output's run (what a stopped run can lose)"+atMost(maxDocs))
	fs.StringVar(&f.partFormat, "part-format", "", "the parts of a folder output are `FORMAT`: npy (part-00000.npy, float32 [vectors, dim], and part-00000.ids.txt, …) or parquet (part-00000.parquet, columns id and embedding, …) (default npy)")
	fs.StringVar(&f.shard, "shard", "", "embed only shard `I/N` of the documents: those whose id hashes to I mod N (FNV-1a); N runs with 0/N … N-1/N split a corpus with no coordination (embed-merge joins them); folder output only")
	path, err := cli.ParseModelArg(fs, args, stdout)
	if err != nil {
		return err
	}
	return f.run(path, stdout, stderr)
}

// options checks the flags and returns the embedder's options.
func (f *embedFlags) options() (embed.Options, error) {
	o := embed.Options{Raw: f.raw, MaxTokens: f.maxTokens, Window: f.window, Batch: f.batch, Backend: f.backend, Threads: f.threads, Vocab: f.vocab, Overlap: f.overlap, Inputs: f.inputs,
		Prompt: f.prompt, PromptName: f.promptName, Dim: f.dim}
	if err := f.runtimeFlags.check(); err != nil {
		return o, err
	}
	if err := promptCheck("", f.prompt, f.promptName); err != nil {
		return o, err
	}
	if f.dim < 0 || f.dim > maxDimFlag {
		return o, cli.UsageError("--dim %d: want 0 (all) to %d", f.dim, maxDimFlag)
	}
	switch m := embed.Mode(f.mode); m {
	case "auto":
	case embed.Truncate, embed.Chunk, embed.Chunks, embed.Long, embed.Late:
		o.Mode = m
	default:
		return o, cli.UsageError("--mode %q: want auto, truncate, chunk, chunks, long or late", f.mode)
	}
	switch p := embed.Pooling(f.pooling); p {
	case "auto":
	case embed.PoolMean, embed.PoolCLS, embed.PoolMax:
		o.Pooling = p
	default:
		return o, cli.UsageError("--pooling %q: want auto, mean, cls or max", f.pooling)
	}
	switch {
	case f.maxTokens < 0:
		return o, cli.UsageError("--max-tokens must be non-negative")
	case f.window != 0 && f.window < 3:
		return o, cli.UsageError("--window %d: want at least 3 ([CLS], a wordpiece, [SEP])", f.window)
	case f.batch < 1:
		return o, cli.UsageError("--batch must be at least 1")
	case f.overlap < 0:
		return o, cli.UsageError("--chunk-overlap must be non-negative")
	case f.overlap > 0 && o.Mode != embed.Chunk && !o.Mode.PerChunk():
		return o, cli.UsageError("--chunk-overlap needs --mode chunk, chunks or late")
	case f.chunkSpans && !o.Mode.PerChunk():
		return o, cli.UsageError("--chunk-spans needs --mode chunks or late")
	case o.Mode == embed.Late && o.Pooling != "" && o.Pooling != embed.PoolMean:
		return o, cli.UsageError("--pooling %s: late mode pools each chunk's wordpieces by their mean", f.pooling)
	case f.overlap > 0 && f.window > 0 && f.overlap >= f.window-2:
		return o, cli.UsageError("--chunk-overlap %d: want fewer than the window's %d wordpieces", f.overlap, f.window-2)
	case f.partSize < 1:
		return o, cli.UsageError("--part-size must be at least 1")
	}
	if err := checkCounts(count{"max-tokens", f.maxTokens, maxTokensFlag}, count{"window", f.window, maxWindowFlag}, count{"batch", f.batch, maxBatchFlag},
		count{"chunk-overlap", f.overlap, maxWindowFlag}, count{"part-size", f.partSize, maxDocs}); err != nil {
		return o, err
	}
	return o, nil
}

// isFolderOut reports whether -o names a folder of parts: a path ending
// in a separator, or a folder that exists.
func isFolderOut(out string) bool {
	if strings.HasSuffix(out, "/") || strings.HasSuffix(out, string(filepath.Separator)) {
		return true
	}
	st, err := os.Stat(out)
	return err == nil && st.IsDir()
}

// source returns the one input the flags name, and what names it (in
// messages, and in the manifest: "--jsonl FILE").
func (f *embedFlags) source() (*corpus.Source, string, error) {
	n := 0
	for _, set := range []bool{len(f.texts) > 0, f.textFile != "", f.docs != "", f.jsonl != ""} {
		if set {
			n++
		}
	}
	if n != 1 {
		return nil, "", cli.UsageError("give the texts with one of --text, --text-file, --docs or --jsonl")
	}
	switch {
	case len(f.texts) > 0:
		return corpus.Texts(f.texts), "--text", nil
	case f.textFile != "":
		return corpus.Lines(f.textFile, readBounds), "--text-file " + f.textFile, nil
	case f.docs != "":
		src, err := corpus.Dir(f.docs, readBounds)
		if err != nil {
			return nil, "", cli.BadInput(fmt.Errorf("--docs: %w", err))
		}
		return src, "--docs " + f.docs, nil
	}
	return corpus.JSONL(f.jsonl, readBounds), "--jsonl " + f.jsonl, nil
}

// run checks the flags and the output's path, opens the model at path
// and embeds the documents of the flags' input into -o (embed.Write),
// then prints the summary.
func (f *embedFlags) run(path string, stdout, stderr io.Writer) error {
	o, err := f.options()
	if err != nil {
		return err
	}
	src, what, err := f.source()
	if err != nil {
		return err
	}
	if f.out == "" {
		return cli.UsageError("-o is required")
	}
	out := f.out // as given: embed.Write reads a trailing / as a folder
	folder := isFolderOut(f.out)
	npy := strings.HasSuffix(f.out, ".npy")
	if !folder && !embed.IsVectorsFile(f.out) {
		return cli.UsageError("-o %s: want a path ending in .parquet, .npy or .jsonl, or a folder (ending in /)", f.out)
	}
	partFormat := embed.PartNPY
	switch f.partFormat {
	case "", string(embed.PartNPY):
	case string(embed.PartParquet):
		partFormat = embed.PartParquet
	default:
		return cli.UsageError("--part-format %q: want npy or parquet", f.partFormat)
	}
	if f.partFormat != "" && !folder {
		return cli.UsageError("--part-format needs a folder output (-o DIR/): a file's format is its extension (.npy, .jsonl or .parquet)")
	}
	if f.shard != "" {
		if !folder {
			return cli.UsageError("--shard needs a folder output (-o DIR/): embed-merge joins the shards")
		}
		if _, _, err := embed.ParseShard(f.shard); err != nil {
			return cli.UsageError("--shard: %s", err)
		}
	}
	inputs := append([]namedFile{{"MODEL", path}, {"--text-file", f.textFile}, {"--jsonl", f.jsonl}, {"--vocab", f.vocab}}, inputFiles(f.inputs)...)
	var outputs []namedFile
	// parts is the folder of parts: -o DIR/, or the hidden one in which
	// a file output is built.
	var parts string
	if folder {
		dir := strings.TrimRight(f.out, `/\`)
		if dir == "" {
			dir = f.out
		}
		f.out, parts = dir, dir
		if parent := filepath.Dir(dir); parent != "" {
			if st, err := os.Stat(parent); err != nil || !st.IsDir() {
				return cli.BadInput(fmt.Errorf("-o %s: the folder %s does not exist", f.out, parent))
			}
		}
		if f.docs != "" && sameDir(f.docs, dir) {
			return cli.UsageError("-o %s is the --docs folder: its parts would be read as documents; choose another folder", f.out)
		}
		outputs = []namedFile{{"-o", filepath.Join(dir, embed.ManifestName)}}
		if err := checkNotInputs(outputs, inputs); err != nil {
			return err
		}
	} else {
		parts = embed.FilePartsDir(f.out)
		outputs = []namedFile{{"-o", f.out}}
		if npy {
			outputs = append(outputs, namedFile{"the ids file of -o", embed.IDsPath(f.out)})
		}
		if err := checkOutputs(outputs, inputs); err != nil {
			return err
		}
		if f.docs != "" && sameDir(f.docs, parts) {
			return cli.UsageError("-o %s: its part folder %s is the --docs folder; choose another path", f.out, parts)
		}
		// The manifest of the part folder is an output too.
		outputs = append(outputs, namedFile{"the part folder of -o", filepath.Join(parts, embed.ManifestName)})
		if err := checkNotInputs(outputs, inputs); err != nil {
			return err
		}
	}
	// The documents read are inputs too (an ids file ends in .txt).
	for _, p := range src.Paths() {
		inputs = append(inputs, namedFile{"--docs", p})
	}
	if len(src.Paths()) > 0 {
		if err := checkNotInputs(outputs, inputs); err != nil {
			return err
		}
	}

	e, err := embed.Open(path, o)
	if err != nil {
		return embedError(err)
	}
	defer e.Close()
	rep, err := embed.Write(e, src, out, embed.WriteOptions{Input: what, Tool: cli.ToolVersion(), PartSize: f.partSize, PartFormat: partFormat,
		Shard: f.shard, SkipBad: f.skipBad, ChunkSpans: f.chunkSpans, Progress: stderr})
	switch {
	case errors.Is(err, embed.ErrBadInput):
		return cli.BadInput(err)
	case err != nil:
		return cli.RuntimeFailure(oneLine(err))
	case rep.Done && folder:
		fmt.Fprintf(stdout, "%s is complete: %d documents (%d vectors) in %d parts; nothing to do\n", f.out, rep.ResumedDocuments, rep.ResumedVectors, rep.ResumedParts)
		return nil
	case rep.Done:
		// Stopped after its last part, before (or while) the file was
		// written.
		fmt.Fprintf(stdout, "wrote %d documents (%d vectors) from the %d finished parts of %s → %s\n", rep.ResumedDocuments, rep.ResumedVectors, rep.ResumedParts, parts, f.out)
		return nil
	}
	var notes string
	if n, why := rep.SkippedBad(); n > 0 {
		notes = fmt.Sprintf(", skipped %d bad (%s)", n, why)
	}
	if f.shard != "" {
		notes += fmt.Sprintf(", shard %s", f.shard)
	}
	if rep.Vectors != rep.Documents {
		notes += fmt.Sprintf(", %d vectors", rep.Vectors)
	}
	if rep.ResumedParts > 0 {
		notes += fmt.Sprintf(", resumed after %d documents in %d parts", rep.ResumedDocuments, rep.ResumedParts)
	}
	if p := e.Prompt(); p != "" {
		notes += fmt.Sprintf(", each after the prompt %q", p)
		if e.PromptUnpooled() {
			notes += " (not pooled: include_prompt false)"
		}
	}
	secs := rep.Took.Seconds()
	fmt.Fprintf(stdout, "embedded %d documents%s (mode %s, pooling %s, window %d, dim %d) in %.2f s (%.3f s each; %d wordpieces, %.0f a second; loading excluded) → %s\n",
		rep.Documents, notes, e.Mode(), e.Pooling(), e.Window(), e.Dim(), secs, secs/float64(max(rep.Documents, 1)),
		e.Wordpieces(), float64(e.Wordpieces())/max(secs, 1e-9), f.out)
	return nil
}

// sameDir reports whether a and b are one folder.
func sameDir(a, b string) bool {
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	if err1 != nil || err2 != nil {
		return filepath.Clean(a) == filepath.Clean(b)
	}
	return os.SameFile(sa, sb)
}

// embedError gives an error of package embed its exit code: a backend
// failure or a vector that is not finite is a runtime failure; anything
// else is bad input (the model, its files or the texts do not fit the
// flags).
func embedError(err error) error {
	if errors.Is(err, embed.ErrBackend) || errors.Is(err, embed.ErrNonFinite) {
		return cli.RuntimeFailure(oneLine(err))
	}
	return cli.BadInput(err)
}
