package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/corpus"
	"github.com/linearize/linearize/embed"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/internal/progress"
)

// readBounds bounds the documents and calibration texts every command
// reads (package corpus; the zero value is its defaults): one document,
// and all of them where a command reads them all before it works
// (evaluate, calibration); embed streams its documents and has no total
// bound. Tests lower them.
var readBounds corpus.Options

// embedProgress receives embed's progress lines (tests replace it).
var embedProgress io.Writer = os.Stderr

// badEmpty says why a document with no wordpieces is bad (the summary
// counts it, and corpus.InvalidUTF8, by reason).
const badEmpty = "empty"

// embedFlags are embed's flags.
type embedFlags struct {
	texts                             cli.MultiFlag
	textFile, docs, jsonl, out, mode  string
	pooling, backend, vocab, shard    string
	partFormat                        string
	raw, skipBad                      bool
	maxTokens, window, batch, threads int
	overlap, partSize                 int
}

// embedMaxBuffered is how many batches' worth of documents, bad ones
// included, embed holds before it flushes.
const embedMaxBuffered = 4

// embedDefaultPartSize is the documents per part of a folder output
// (and per resumable step of a file output).
const embedDefaultPartSize = 1000

func runEmbed(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("embed", flag.ContinueOnError)
	var f embedFlags
	fs.Var(&f.texts, "text", "a `TEXT` to embed (repeatable; ids text-1, text-2, ...)")
	fs.StringVar(&f.textFile, "text-file", "", "a `FILE` with one text per line (ids: line numbers; blank lines skipped; - is stdin)")
	fs.StringVar(&f.docs, "docs", "", "embed every *.txt and *.md file in `DIR`, sorted (id: the file name)")
	fs.StringVar(&f.jsonl, "jsonl", "", "a `FILE` of JSON lines {\"id\": ..., \"text\": ...} (- is stdin)")
	fs.StringVar(&f.out, "o", "", "`OUT`: OUT.npy (float32 [N, dim], ids in OUT.ids.txt), OUT.jsonl (one {\"id\", \"embedding\"} per line) or OUT.parquet (columns id: string, embedding: list<float32>), built in parts in the folder .OUT.parts beside it and written when the input ends; or a folder DIR/ (a path ending in / or a folder that exists) of parts of --part-size documents each (--part-format), written as they are made, and manifest.json. A re-run with the same flags resumes after the parts finished (required)")
	fs.StringVar(&f.mode, "mode", "auto", "read long texts in `MODE`: truncate (first window), chunk (mean over windows, weighted by their wordpieces), chunks (one vector per window, ids DOCID#K), long (one pass, up to the model's limit), auto (long for a convert long model or, without --window, a model whose own limit is above 512 tokens; else chunk)")
	fs.StringVar(&f.pooling, "pooling", "auto", "pool hidden states by `KIND`: mean, cls, max, or auto (the model's sentence-transformers files, else mean)")
	fs.BoolVar(&f.raw, "raw", false, "do not L2-normalise the vectors")
	fs.IntVar(&f.maxTokens, "max-tokens", 0, "read at most `N` wordpieces of each text, in every mode (0: all; truncate reads one window)"+atMost(maxTokensFlag))
	fs.IntVar(&f.window, "window", 0, "tokens `W` per pass in truncate and chunk mode, [CLS] and [SEP] included (default: the model's window, else its limit: its position table's rows, else max_position_embeddings in the config.json beside it or its doc string; else 512)"+atMost(maxWindowFlag))
	fs.IntVar(&f.overlap, "chunk-overlap", 0, "wordpieces `K` each window of chunk and chunks mode shares with the one before (0: none; below the window's wordpieces)")
	fs.IntVar(&f.batch, "batch", embed.DefaultBatch, "`B` texts or chunks per run, at most 4096 tokens of them (long mode: 1)"+atMost(maxBatchFlag))
	fs.IntVar(&f.threads, "threads", 0, "intra-op threads (0: backend default)")
	fs.StringVar(&f.backend, "backend", infer.DefaultBackend, "runtime backend: "+strings.Join(infer.Backends(), " or "))
	fs.StringVar(&f.vocab, "vocab", "", "tokenizer `PATH`: a folder, tokenizer.json or vocab.txt (default: found beside the model)")
	fs.BoolVar(&f.skipBad, "skip-bad-docs", false, "skip documents that are empty (no wordpieces) or not UTF-8, and count them in the summary (default: refuse them, exit 2, naming each)")
	fs.IntVar(&f.partSize, "part-size", embedDefaultPartSize, "documents `N` per part: of a folder output, and of a file output's run (what a stopped run can lose)"+atMost(maxDocs))
	fs.StringVar(&f.partFormat, "part-format", "", "the parts of a folder output are `FORMAT`: npy (part-00000.npy, float32 [vectors, dim], and part-00000.ids.txt, …) or parquet (part-00000.parquet, columns id and embedding, …) (default npy)")
	fs.StringVar(&f.shard, "shard", "", "embed only shard `I/N` of the documents: those whose id hashes to I mod N (FNV-1a); N runs with 0/N … N-1/N split a corpus with no coordination (embed-merge joins them); folder output only")
	path, err := cli.ParseModelArg(fs, args, stdout)
	if err != nil {
		return err
	}
	return f.run(path, stdout)
}

// options checks the flags and returns the embedder's options.
func (f *embedFlags) options() (embed.Options, error) {
	o := embed.Options{Raw: f.raw, MaxTokens: f.maxTokens, Window: f.window, Batch: f.batch, Backend: f.backend, Threads: f.threads, Vocab: f.vocab, Overlap: f.overlap}
	if err := checkBackend(f.backend); err != nil {
		return o, err
	}
	switch m := embed.Mode(f.mode); m {
	case "auto":
	case embed.Truncate, embed.Chunk, embed.Chunks, embed.Long:
		o.Mode = m
	default:
		return o, cli.UsageError("--mode %q: want auto, truncate, chunk, chunks or long", f.mode)
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
	case f.overlap > 0 && o.Mode != embed.Chunk && o.Mode != embed.Chunks:
		return o, cli.UsageError("--chunk-overlap needs --mode chunk or chunks")
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

// embedSink receives the vectors of each document in order: a single
// file built in parts and written at the end, or a folder of parts
// written as they fill.
type embedSink interface {
	add(rec int64, docID string, ids []string, vecs [][]float32) error
	skip()
	finish(dim int) error
}

// fileSink builds a vectors file (-o OUT.npy, .jsonl or .parquet) in
// the hidden folder of parts beside it (embed.FilePartsDir), committing
// a part at a time as a folder output does, and assembles the file from
// them at the end as one set (embed.Assemble), the folder then removed.
// A run that ends before its first part is full writes the file from
// memory and makes no folder.
type fileSink struct {
	out, dir string
	partSize int
	// head makes the folder's manifest head (hashing the model: only
	// when a part is committed).
	head func() (embed.Manifest, error)
	// w writes the folder; nil until the first part is full (or when
	// the run resumes a folder).
	w *embed.PartWriter
	// The documents of the first part, and the bad documents skipped
	// among them, while w is nil.
	first   []fileDoc
	skipped int
}

// fileDoc is a document's vectors kept for the first part.
type fileDoc struct {
	rec   int64
	docID string
	ids   []string
	vecs  [][]float32
}

func (s *fileSink) add(rec int64, docID string, ids []string, vecs [][]float32) error {
	if s.w != nil {
		return s.w.Add(rec, docID, ids, vecs)
	}
	s.first = append(s.first, fileDoc{rec, docID, ids, vecs})
	if len(s.first) < s.partSize {
		return nil
	}
	head, err := s.head()
	if err != nil {
		return err
	}
	w, err := embed.OpenParts(s.dir, head)
	if err != nil {
		return err
	}
	for range s.skipped {
		w.Skip()
	}
	for _, d := range s.first {
		if err := w.Add(d.rec, d.docID, d.ids, d.vecs); err != nil {
			return err
		}
	}
	s.w, s.first, s.skipped = w, nil, 0
	return nil
}

func (s *fileSink) skip() {
	if s.w != nil {
		s.w.Skip()
		return
	}
	s.skipped++
}

func (s *fileSink) finish(dim int) error {
	if s.w != nil {
		if err := s.w.Finish(); err != nil {
			return err
		}
		return embed.Assemble(s.dir, s.out)
	}
	n := 0
	for _, d := range s.first {
		n += len(d.ids)
	}
	return embed.WriteVectors(s.out, n, dim, func(yield func([]string, []float32) error) error {
		for _, d := range s.first {
			if err := yield(d.ids, slices.Concat(d.vecs...)); err != nil {
				return err
			}
		}
		return nil
	})
}

// started reports whether the hidden folder of parts holds parts.
func (s *fileSink) started() bool { return s.w != nil && len(s.w.Manifest().Parts) > 0 }

// partSink writes a folder of parts (embed.PartWriter).
type partSink struct{ w *embed.PartWriter }

func (s partSink) add(rec int64, docID string, ids []string, vecs [][]float32) error {
	return s.w.Add(rec, docID, ids, vecs)
}
func (s partSink) skip()            { s.w.Skip() }
func (s partSink) finish(int) error { return s.w.Finish() }

// run embeds the documents of the flags' input with the model at path,
// a batch at a time, and hands the vectors to the output as they come.
func (f *embedFlags) run(path string, stdout io.Writer) error {
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
	var shardI, shardN int
	if f.shard != "" {
		if !folder {
			return cli.UsageError("--shard needs a folder output (-o DIR/): embed-merge joins the shards")
		}
		if shardI, shardN, err = embed.ParseShard(f.shard); err != nil {
			return cli.UsageError("--shard: %s", err)
		}
	}
	inputs := []namedFile{{"MODEL", path}, {"--text-file", f.textFile}, {"--jsonl", f.jsonl}, {"--vocab", f.vocab}}
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
			outputs = append(outputs, namedFile{"the ids file of -o", embedIDsPath(f.out)})
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

	var head *embed.Manifest
	makeHead := func() (embed.Manifest, error) {
		if head == nil {
			h, err := f.manifest(path, what, e, partFormat)
			if err != nil {
				return h, err
			}
			head = &h
		}
		return *head, nil
	}
	// A file output resumes the part folder of a run that stopped; one
	// without a manifest holds nothing to resume (a run killed before
	// its first part was committed) and is removed.
	var w *embed.PartWriter
	resume := folder
	if !folder {
		m, err := embed.ReadManifest(parts)
		if err != nil {
			return cli.RuntimeFailure(err)
		}
		if m != nil {
			resume = true
		} else if _, err := os.Lstat(parts); err == nil {
			embed.RemoveParts(parts)
		}
	}
	var skipTo int64
	var lastID, resumed string
	if resume {
		h, err := makeHead()
		if err != nil {
			return err
		}
		w, err = embed.OpenParts(parts, h)
		var mm *embed.MismatchError
		switch {
		case errors.As(err, &mm) && !folder:
			return cli.BadInput(fmt.Errorf("-o %s: the unfinished run in %s was made otherwise: %s (run with the flags and files it was made with to finish it, or remove %s to start anew)",
				f.out, parts, strings.Join(mm.Diffs, "; "), parts))
		case errors.As(err, &mm):
			return cli.BadInput(err)
		case err != nil:
			return cli.RuntimeFailure(err)
		}
		var complete bool
		skipTo, lastID, complete = w.Resume()
		m := w.Manifest()
		if complete && folder {
			fmt.Fprintf(stdout, "%s is complete: %d documents (%d vectors) in %d parts; nothing to do\n", f.out, m.Documents, m.Vectors, len(m.Parts))
			return nil
		}
		if complete {
			// Stopped after its last part, before (or while) the file
			// was written.
			if err := embed.Assemble(parts, f.out); err != nil {
				return cli.RuntimeFailure(fmt.Errorf("%w (the finished parts are kept in %s: run again to write %s)", err, parts, f.out))
			}
			fmt.Fprintf(stdout, "wrote %d documents (%d vectors) from the %d finished parts of %s → %s\n", m.Documents, m.Vectors, len(m.Parts), parts, f.out)
			return nil
		}
		if len(m.Parts) > 0 {
			resumed = fmt.Sprintf(", resumed after %d documents in %d parts", m.Documents, len(m.Parts))
			fmt.Fprintf(embedProgress, "embed: %s holds %d finished parts (%d documents, input records 1–%d): resuming after them\n", parts, len(m.Parts), m.Documents, skipTo)
		}
	}
	var sink embedSink
	fsink := &fileSink{out: f.out, dir: parts, partSize: f.partSize, head: makeHead, w: w}
	if folder {
		sink = partSink{w}
	} else {
		sink = fsink
	}
	// kept says what a failed run keeps of its output; notWritten adds
	// that the failing document's part is not written; keptNote, when
	// parts are kept, that a run with the input fixed resumes; anew how
	// to start over when the parts cannot be resumed.
	kept := func() string {
		switch {
		case folder:
			return "the finished parts of " + f.out + " are kept"
		case fsink.started():
			return "the finished parts are kept in " + parts + ", " + f.out + " left as it was"
		}
		return f.out + " left as it was"
	}
	notWritten := func() string {
		if folder || fsink.started() {
			return "its part is not written; " + kept()
		}
		return "nothing written, " + kept()
	}
	keptNote := func() string {
		if folder || fsink.started() {
			return " (" + kept() + ": fix the input and run again to resume)"
		}
		return ""
	}
	anew := func() string {
		if folder {
			return "use another folder, or the input they were made from"
		}
		return "remove " + parts + " to start anew, or use the input they were made from"
	}

	start := time.Now() // embedding only, not loading the model
	group := max(f.batch, 8)
	var pr *progress.Reporter
	if n := src.Len(); n > 1 {
		pr = progress.New(embedProgress, "embed: batch", (n+group-1)/group)
	} else if n == 0 {
		pr = progress.New(embedProgress, "embed: batch", 0)
	}
	var buf []corpus.Doc
	var lastRec int64
	pending, partFill := 0, 0 // documents to embed in buf; in the part being filled
	tok := e.Tokenizer()
	embedded, vectors, skippedBad := 0, 0, 0
	counts := map[string]int{}
	flush := func() error {
		if len(buf) == 0 {
			return nil
		}
		defer func() { buf = buf[:0] }()
		var bad []string
		var texts []string
		for _, d := range buf {
			if d.Bad != "" {
				bad = append(bad, fmt.Sprintf("document %s: %s", d.ID, d.Bad))
				counts[strings.SplitN(d.Bad, ":", 2)[0]]++
				continue
			}
			texts = append(texts, d.Text)
		}
		if len(bad) > 0 && !f.skipBad {
			msg := strings.Join(bad[:min(len(bad), maxBadListed)], "; ")
			if len(bad) > maxBadListed {
				msg += fmt.Sprintf("; and %d more", len(bad)-maxBadListed)
			}
			return cli.BadInput(fmt.Errorf("%d of %d documents cannot be embedded (--skip-bad-docs skips them): %s%s", len(bad), len(buf), msg, keptNote()))
		}
		for _, b := range bad {
			fmt.Fprintf(embedProgress, "embed: skipped %s\n", b)
		}
		vecs, err := f.embedBatch(e, texts)
		var nf *embed.NonFiniteError
		if errors.As(err, &nf) && nf.Index < len(texts) {
			k := 0
			for _, d := range buf {
				if d.Bad == "" {
					if k == nf.Index {
						// Nothing of it is written: a vector of NaN would poison
						// every search over the file without a word.
						return cli.RuntimeFailure(fmt.Errorf("document %s: its vector has %s (the model's output is not finite); %s",
							d.ID, nf.Values(), notWritten()))
					}
					k++
				}
			}
		}
		if err != nil {
			return embedError(fmt.Errorf("documents %s–%s: %w", buf[0].ID, buf[len(buf)-1].ID, err))
		}
		k := 0
		for _, d := range buf {
			if d.Bad != "" {
				sink.skip()
				skippedBad++
				continue
			}
			ids := []string{d.ID}
			if e.Mode() == embed.Chunks {
				ids = make([]string, len(vecs[k]))
				for j := range ids {
					ids[j] = d.ID + "#" + strconv.Itoa(j)
				}
			}
			if err := sink.add(d.Rec, d.ID, ids, vecs[k]); err != nil {
				return cli.RuntimeFailure(err)
			}
			embedded++
			vectors += len(ids)
			k++
			partFill = (partFill + 1) % f.partSize
		}
		pr.Step("documents %d–%d, %d embedded", buf[0].Rec, buf[len(buf)-1].Rec, embedded)
		return nil
	}
	err = src.Each(skipTo, func(d corpus.Doc) error {
		lastRec = d.Rec
		if d.Rec <= skipTo {
			if d.Rec == skipTo && d.ID != lastID {
				return cli.BadInput(fmt.Errorf("%s: input record %d is document %s, but the last finished part of %s ends with document %s there: the input changed since those parts were made (%s)",
					what, d.Rec, d.ID, parts, lastID, anew()))
			}
			return nil
		}
		if shardN > 0 && embed.ShardOf(d.ID, shardN) != shardI {
			return nil
		}
		// Screened as it comes: a document with no wordpieces (blank, or
		// only characters the tokenizer drops) would get the vector of
		// [CLS] [SEP] and rank like any other.
		if d.Bad == "" && len(tok.IDsLimit(d.Text, 1)) == 0 {
			d.Bad = badEmpty + ": no wordpieces (blank, or only characters the tokenizer drops); its vector would be that of [CLS] [SEP]"
		}
		if d.Bad != "" {
			d.Text = "" // never embedded: not kept
		}
		buf = append(buf, d)
		if d.Bad == "" {
			pending++
		}
		// A batch never spans two parts: every part is embedded in the
		// same batches whether the run began with it or resumed there,
		// so a resumed folder (or file) is byte for byte the one an
		// uninterrupted run writes. A run of bad documents is flushed
		// too (a smaller batch when they come between good ones), so
		// that memory holds a bounded number of them.
		if pending == group || partFill+pending == f.partSize || len(buf) == embedMaxBuffered*group {
			pending = 0
			return flush()
		}
		return nil
	})
	if err == nil && lastRec < skipTo {
		err = cli.BadInput(fmt.Errorf("%s has %d documents, but the finished parts of %s cover %d: the input changed since they were made (%s)", what, lastRec, parts, skipTo, anew()))
	}
	if err == nil {
		err = flush()
	}
	if err != nil {
		var ee *cli.ExitError
		if errors.As(err, &ee) {
			return err
		}
		return cli.BadInput(err)
	}
	if embedded == 0 && resumed == "" {
		if skippedBad > 0 {
			return cli.BadInput(fmt.Errorf("all %d documents are bad (%s); nothing to embed", skippedBad, badCounts(counts)))
		}
		if !folder {
			return cli.BadInput(fmt.Errorf("%s: no documents", what))
		}
	}
	took := time.Since(start)
	if err := sink.finish(e.Dim()); err != nil {
		if !folder && fsink.w != nil {
			err = fmt.Errorf("%w (%s: run again to write it)", err, kept())
		}
		return cli.RuntimeFailure(err)
	}
	skipped := ""
	if skippedBad > 0 {
		skipped = fmt.Sprintf(", skipped %d bad (%s)", skippedBad, badCounts(counts))
	}
	if f.shard != "" {
		skipped += fmt.Sprintf(", shard %s", f.shard)
	}
	if vectors != embedded {
		skipped += fmt.Sprintf(", %d vectors", vectors)
	}
	secs := took.Seconds()
	fmt.Fprintf(stdout, "embedded %d documents%s%s (mode %s, pooling %s, window %d, dim %d) in %.2f s (%.3f s each; %d wordpieces, %.0f a second; loading excluded) → %s\n",
		embedded, skipped, resumed, e.Mode(), e.Pooling(), e.Window(), e.Dim(), secs, secs/float64(max(embedded, 1)),
		e.Wordpieces(), float64(e.Wordpieces())/max(secs, 1e-9), f.out)
	return nil
}

// embedBatch embeds texts: one vector each, or one per chunk in chunks
// mode.
func (f *embedFlags) embedBatch(e *embed.Embedder, texts []string) ([][][]float32, error) {
	if len(texts) == 0 {
		return nil, nil
	}
	if e.Mode() == embed.Chunks {
		return e.EmbedChunks(texts)
	}
	v, err := e.Embed(texts)
	if err != nil {
		return nil, err
	}
	out := make([][][]float32, len(v))
	for i := range v {
		out[i] = [][]float32{v[i]}
	}
	return out, nil
}

// manifest is the head of a folder output's manifest: the tool, the
// model's and tokenizer files' SHA-256 and the settings (as resolved by
// the embedder).
func (f *embedFlags) manifest(path, what string, e *embed.Embedder, format embed.PartFormat) (embed.Manifest, error) {
	var m embed.Manifest
	sum, err := embed.FileSHA256(path)
	if err != nil {
		return m, cli.BadInput(err)
	}
	tok, err := embed.TokenizerFiles(f.vocab, path)
	if err != nil {
		return m, cli.BadInput(err)
	}
	backend := f.backend
	if backend == "" {
		backend = infer.DefaultBackend
	}
	m = embed.Manifest{Tool: cli.ToolVersion(), Model: embed.FileSum{File: filepath.Base(path), SHA256: sum}, Tokenizer: tok,
		Settings: embed.Settings{Input: what, Mode: e.Mode(), Pooling: e.Pooling(), Normalised: e.Normalised(), MaxTokens: e.MaxTokens(),
			Window: e.Window(), Overlap: e.Overlap(), Output: e.Output(), Dim: e.Dim(), Backend: backend, SkipBad: f.skipBad,
			PartSize: f.partSize, PartFormat: format, Shard: f.shard}}
	return m, nil
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

// maxBadListed bounds the bad documents a refusal names one by one.
const maxBadListed = 10

// badCounts words the bad documents by reason: "2 empty, 1 invalid UTF-8".
func badCounts(counts map[string]int) string {
	var parts []string
	for _, why := range []string{badEmpty, corpus.InvalidUTF8} {
		if counts[why] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[why], why))
		}
	}
	return strings.Join(parts, ", ")
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

// embedIDsPath is the ids file beside an .npy output.
func embedIDsPath(out string) string { return embed.IDsPath(out) }
