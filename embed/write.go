package embed

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/linearize/linearize/corpus"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/internal/progress"
)

// DefaultPartSize is the documents per part when WriteOptions.PartSize
// is 0.
const DefaultPartSize = 1000

// BadEmpty begins the reason a document with no wordpieces is bad: it is
// a key of WriteReport.Skipped, as corpus.InvalidUTF8 is.
const BadEmpty = "empty"

// ErrBadInput marks the errors of Write that the input is at fault for
// (errors.Is): a document that cannot be embedded, a corpus that cannot
// be read, a model the texts do not fit, an output begun by a run of
// other settings or input. Its other errors are failures of the run:
// the backend, a vector that is not finite, reading or writing the
// output.
var ErrBadInput = errors.New("embed: bad input")

// inputError marks err as ErrBadInput.
type inputError struct{ err error }

func (e inputError) Error() string   { return e.err.Error() }
func (e inputError) Unwrap() []error { return []error{e.err, ErrBadInput} }

func badInput(err error) error { return inputError{err} }

// maxBuffered is how many batches' worth of documents, bad ones
// included, Write holds before it embeds them.
const maxBuffered = 4

// maxBadListed bounds the bad documents a refusal names one by one.
const maxBadListed = 10

// WriteOptions are the settings of Write beside the embedder's.
type WriteOptions struct {
	// Input names the documents, in messages and in the manifest
	// ("--jsonl FILE"): a run resumes only a folder begun with the same.
	Input string
	// Tool is the version of the program, recorded in the manifest.
	Tool string
	// PartSize is the documents per part (DefaultPartSize when 0): of a
	// folder, and of the hidden folder a file is built in (what a
	// stopped run can lose).
	PartSize int
	// PartFormat is the parts' file format (PartNPY when empty).
	PartFormat PartFormat
	// Shard, "i/n" (ParseShard), embeds only the documents of shard i
	// of n (ShardOf); "" embeds them all.
	Shard string
	// ChunkSpans, in Chunks and Late mode, writes the span of each
	// chunk in its text (Embedder.ChunkSpans) into its id:
	// DOCID#K@START-END, UTF-8 byte offsets in the text as read (a
	// leading byte-order mark removed), instead of DOCID#K.
	ChunkSpans bool
	// SkipBad skips the documents that cannot be embedded (empty: no
	// wordpieces; or not UTF-8) and counts them; else Write refuses
	// them, naming each.
	SkipBad bool
	// Progress receives a line per batch embedded for the first
	// progressFirst batches, then one every progressEvery (and the last
	// batch's when the number of documents is known), and one when a run
	// resumes; nil is silent.
	Progress io.Writer
}

// Progress lines: every batch's for the first progressFirst, then one
// every progressEvery, so that a corpus of millions of documents (a
// batch every few milliseconds) reports a line every few seconds, not
// one every eight documents.
const (
	progressFirst = 10
	progressEvery = 10 * time.Second
)

// WriteReport is what Write did.
type WriteReport struct {
	// Documents and Vectors count what this call embedded (Vectors is
	// more than Documents in Chunks and Late mode).
	Documents, Vectors int
	// Skipped counts the bad documents this call skipped (SkipBad) by
	// reason: BadEmpty, corpus.InvalidUTF8.
	Skipped map[string]int
	// ResumedParts, ResumedDocuments and ResumedVectors are what earlier
	// runs had finished: the call resumed after them.
	ResumedParts, ResumedDocuments, ResumedVectors int
	// Done reports that earlier runs had finished the whole input (the
	// Resumed counts say what): out is a folder that was complete, or a
	// file written from the finished parts of its hidden folder.
	// Nothing was read or embedded.
	Done bool
	// Took is the time spent reading and embedding the documents (not
	// the resume's checks, nor writing the file at the end).
	Took time.Duration
}

// SkippedBad is the number of bad documents skipped and their reasons
// in words: "2 empty, 1 invalid UTF-8".
func (r *WriteReport) SkippedBad() (n int, why string) {
	for _, c := range r.Skipped {
		n += c
	}
	return n, badCounts(r.Skipped)
}

// badCounts words the bad documents by reason: "2 empty, 1 invalid UTF-8".
func badCounts(counts map[string]int) string {
	var parts []string
	for _, why := range []string{BadEmpty, corpus.InvalidUTF8} {
		if counts[why] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[why], why))
		}
	}
	return strings.Join(parts, ", ")
}

// Write embeds every document of src with e, in order and a batch at a
// time, into out: a folder of parts (PartWriter), or one vectors file
// (IsVectorsFile: OUT.npy with OUT.ids.txt, OUT.jsonl or OUT.parquet).
// out is a folder when it is not a vectors file's name, or ends in a
// path separator, or is a folder that exists; the folder's parent must
// exist. A file is built as a folder is, in the hidden folder
// FilePartsDir(out), and written from its parts when the input ends (as
// one set: until then out keeps its old content), the folder then
// removed; a run that ends within its first part writes the file from
// memory and makes no folder.
//
// A run that stopped (a failure, a signal, a kill) keeps the parts it
// finished, each committed with the manifest that lists it. Write
// resumes them: it checks the manifest against the embedder's model,
// tokenizer and settings and against o (else an error naming each
// difference), passes over the input records they cover, checks that
// the record where they end is the document they end with (else the
// input changed), and carries on. A batch never spans two parts, so a
// resumed output is byte for byte the output of a run that never
// stopped. A complete folder is left as it is, and a complete hidden
// folder is written to out without reading src (WriteReport.Done).
//
// A document with no wordpieces (it would get the vector of [CLS]
// [SEP]) or that is not UTF-8 (corpus.Doc.Bad) is refused, naming each
// such document of its batch, or with o.SkipBad skipped and counted. A
// vector that is not finite is refused, naming its document; nothing of
// its part is written. An error is ErrBadInput when the input is at
// fault (errors.Is); whatever the error, the parts finished are kept.
func Write(e *Embedder, src *corpus.Source, out string, o WriteOptions) (*WriteReport, error) {
	w := &writeRun{e: e, src: src, o: o, out: out, what: cmp.Or(o.Input, "the input"), rep: &WriteReport{Skipped: map[string]int{}}}
	w.o.PartSize = cmp.Or(o.PartSize, DefaultPartSize)
	w.o.PartFormat = cmp.Or(o.PartFormat, PartNPY)
	if w.o.PartSize < 1 {
		return nil, fmt.Errorf("embed: part size %d: want at least 1", o.PartSize)
	}
	if o.ChunkSpans && !e.Mode().PerChunk() {
		return nil, fmt.Errorf("embed: chunk spans need chunks or late mode, not %s", e.Mode())
	}
	if o.Shard != "" {
		var err error
		if w.shardI, w.shardN, err = ParseShard(o.Shard); err != nil {
			return nil, fmt.Errorf("embed: %w", err)
		}
	}
	w.folder = !IsVectorsFile(out) || strings.HasSuffix(out, "/") || strings.HasSuffix(out, string(filepath.Separator))
	if st, err := os.Stat(out); err == nil && st.IsDir() {
		w.folder = true
	}
	if w.folder {
		if dir := strings.TrimRight(out, `/\`); dir != "" {
			w.out = dir
		}
		w.parts = w.out
	} else {
		w.parts = FilePartsDir(out)
	}
	return w.run()
}

// writeRun is one call of Write.
type writeRun struct {
	e   *Embedder
	src *corpus.Source
	o   WriteOptions
	// out is the output (a folder without its trailing separator),
	// parts the folder of parts: out, or the hidden one a file is built
	// in; what names the input in messages.
	out, parts, what string
	folder           bool
	shardI, shardN   int
	head             *Manifest
	sink             sink
	file             *fileSink // the sink of a file output
	rep              *WriteReport
	progress         *progress.Reporter

	// The documents read and not yet embedded (bad ones included), the
	// good ones among them, and those of the part being filled.
	buf               []corpus.Doc
	pending, partFill int
}

// makeHead is the head of the folder's manifest (made once: it hashes
// the model): the tool, the model's and tokenizer files' SHA-256 and the
// settings as the embedder resolved them.
func (w *writeRun) makeHead() (Manifest, error) {
	if w.head != nil {
		return *w.head, nil
	}
	e := w.e
	sum, err := FileSHA256(e.path)
	if err != nil {
		return Manifest{}, err
	}
	tok, err := TokenizerFiles(e.opts.Vocab, e.path)
	if err != nil {
		return Manifest{}, err
	}
	m := Manifest{Tool: w.o.Tool, Model: FileSum{File: filepath.Base(e.path), SHA256: sum}, Tokenizer: tok,
		Settings: Settings{Input: w.o.Input, Mode: e.Mode(), Pooling: e.Pooling(), Normalised: e.Normalised(), MaxTokens: e.MaxTokens(),
			Window: e.Window(), Overlap: e.Overlap(), Output: e.Output(), Dim: e.Dim(), Backend: e.backend(), SkipBad: w.o.SkipBad,
			PartSize: w.o.PartSize, PartFormat: w.o.PartFormat, Shard: w.o.Shard, Inputs: e.fixedNote(), Prompt: e.Prompt(),
			ChunkSpans: w.o.ChunkSpans}}
	w.head = &m
	return m, nil
}

func (w *writeRun) run() (*WriteReport, error) {
	// A file output resumes the part folder of a run that stopped; one
	// without a manifest holds nothing to resume (a run killed before
	// its first part was committed) and is removed.
	var pw *PartWriter
	resume := w.folder
	if !w.folder {
		m, err := ReadManifest(w.parts)
		if err != nil {
			return nil, err
		}
		if m != nil {
			resume = true
		} else if _, err := os.Lstat(w.parts); err == nil {
			RemoveParts(w.parts)
		}
	}
	var skipTo int64
	var lastID string
	if resume {
		h, err := w.makeHead()
		if err != nil {
			return nil, badInput(err)
		}
		pw, err = OpenParts(w.parts, h)
		var mm *MismatchError
		switch {
		case errors.As(err, &mm) && !w.folder:
			return nil, badInput(fmt.Errorf("%s: the unfinished run in %s was made otherwise: %s (run with the flags and files it was made with to finish it, or remove %s to start anew)",
				w.out, w.parts, strings.Join(mm.Diffs, "; "), w.parts))
		case errors.As(err, &mm):
			return nil, badInput(err)
		case err != nil:
			return nil, err
		}
		var complete bool
		skipTo, lastID, complete = pw.Resume()
		m := pw.Manifest()
		w.rep.ResumedParts, w.rep.ResumedDocuments, w.rep.ResumedVectors = len(m.Parts), m.Documents, m.Vectors
		if complete && !w.folder {
			// Stopped after its last part, before (or while) the file
			// was written.
			if err := Assemble(w.parts, w.out); err != nil {
				return nil, fmt.Errorf("%w (the finished parts are kept in %s: run again to write %s)", err, w.parts, w.out)
			}
		}
		if complete {
			w.rep.Done = true
			return w.rep, nil
		}
		if len(m.Parts) > 0 && w.o.Progress != nil {
			fmt.Fprintf(w.o.Progress, "embed: %s holds %d finished parts (%d documents, input records 1–%d): resuming after them\n", w.parts, len(m.Parts), m.Documents, skipTo)
		}
	}
	w.file = &fileSink{out: w.out, dir: w.parts, partSize: w.o.PartSize, head: w.makeHead, w: pw}
	w.sink = w.file
	if w.folder {
		w.sink = partSink{pw}
	}

	start := time.Now()
	group := w.group()
	if n := w.src.Len(); n > 1 {
		w.progress = progress.New(w.o.Progress, "embed: batch", (n+group-1)/group).Throttle(progressFirst, progressEvery)
	} else if n == 0 {
		w.progress = progress.New(w.o.Progress, "embed: batch", 0).Throttle(progressFirst, progressEvery)
	}
	var lastRec int64
	tok := w.e.Tokenizer()
	err := w.src.Each(skipTo, func(d corpus.Doc) error {
		lastRec = d.Rec
		if d.Rec <= skipTo {
			if d.Rec == skipTo && d.ID != lastID {
				return stopped{badInput(fmt.Errorf("%s: input record %d is document %s, but the last finished part of %s ends with document %s there: the input changed since those parts were made (%s)",
					w.what, d.Rec, d.ID, w.parts, lastID, w.anew()))}
			}
			return nil
		}
		if w.shardN > 0 && ShardOf(d.ID, w.shardN) != w.shardI {
			return nil
		}
		// Screened as it comes: a document with no wordpieces (blank, or
		// only characters the tokenizer drops) would get the vector of
		// [CLS] [SEP] and rank like any other.
		if d.Bad == "" && len(tok.IDsLimit(d.Text, 1)) == 0 {
			d.Bad = BadEmpty + ": no wordpieces (blank, or only characters the tokenizer drops); its vector would be that of [CLS] [SEP]"
		}
		if d.Bad != "" {
			d.Text = "" // never embedded: not kept
		}
		w.buf = append(w.buf, d)
		if d.Bad == "" {
			w.pending++
		}
		// A batch never spans two parts: every part is embedded in the
		// same batches whether the run began with it or resumed there,
		// so a resumed folder (or file) is byte for byte the one an
		// uninterrupted run writes. A run of bad documents is flushed
		// too (a smaller batch when they come between good ones), so
		// that memory holds a bounded number of them.
		if w.pending == group || w.partFill+w.pending == w.o.PartSize || len(w.buf) == maxBuffered*group {
			w.pending = 0
			if err := w.flush(); err != nil {
				return stopped{err}
			}
		}
		return nil
	})
	// The errors of the documents' walk are the input's (a file that
	// cannot be read, a line too long, an id used twice); those of the
	// embedding are as flush classed them.
	var s stopped
	if errors.As(err, &s) {
		err = s.err
	} else if err != nil {
		err = badInput(err)
	}
	if err == nil && lastRec < skipTo {
		err = badInput(fmt.Errorf("%s has %d documents, but the finished parts of %s cover %d: the input changed since they were made (%s)", w.what, lastRec, w.parts, skipTo, w.anew()))
	}
	if err == nil {
		err = w.flush()
	}
	if err != nil {
		return nil, err
	}
	if w.rep.Documents == 0 && w.rep.ResumedParts == 0 {
		if n, why := w.rep.SkippedBad(); n > 0 {
			return nil, badInput(fmt.Errorf("all %d documents are bad (%s); nothing to embed", n, why))
		}
		if !w.folder {
			return nil, badInput(fmt.Errorf("%s: no documents", w.what))
		}
	}
	w.rep.Took = time.Since(start)
	if err := w.sink.finish(w.e.Dim()); err != nil {
		if !w.folder && w.file.w != nil {
			err = fmt.Errorf("%w (%s: run again to write it)", err, w.kept())
		}
		return nil, err
	}
	return w.rep, nil
}

// stopped carries the error that stopped the documents' walk, classed.
type stopped struct{ err error }

func (s stopped) Error() string { return s.err.Error() }
func (s stopped) Unwrap() error { return s.err }

// backend is the name of the embedder's backend.
func (e *Embedder) backend() string { return cmp.Or(e.opts.Backend, infer.DefaultBackend) }

// group is the documents embedded at a time: the embedder's batch as
// asked, and at least 8.
func (w *writeRun) group() int {
	return max(cmp.Or(w.e.opts.Batch, DefaultBatch), 8)
}

// flush embeds the documents read and hands their vectors to the sink.
func (w *writeRun) flush() error {
	buf := w.buf
	if len(buf) == 0 {
		return nil
	}
	defer func() { w.buf = w.buf[:0] }()
	var bad, texts []string
	for _, d := range buf {
		if d.Bad != "" {
			bad = append(bad, fmt.Sprintf("document %s: %s", d.ID, d.Bad))
			w.rep.Skipped[strings.SplitN(d.Bad, ":", 2)[0]]++
			continue
		}
		texts = append(texts, d.Text)
	}
	if len(bad) > 0 && !w.o.SkipBad {
		msg := strings.Join(bad[:min(len(bad), maxBadListed)], "; ")
		if len(bad) > maxBadListed {
			msg += fmt.Sprintf("; and %d more", len(bad)-maxBadListed)
		}
		return badInput(fmt.Errorf("%d of %d documents cannot be embedded (SkipBad, --skip-bad-docs, skips them): %s%s", len(bad), len(buf), msg, w.keptNote()))
	}
	if w.o.Progress != nil {
		for _, b := range bad {
			fmt.Fprintf(w.o.Progress, "embed: skipped %s\n", b)
		}
	}
	vecs, err := w.embed(texts)
	var nf *NonFiniteError
	if errors.As(err, &nf) && nf.Index < len(texts) {
		k := 0
		for _, d := range buf {
			if d.Bad == "" {
				if k == nf.Index {
					// Nothing of it is written: a vector of NaN would poison
					// every search over the file without a word.
					return fmt.Errorf("document %s: its vector has %s (the model's output is not finite); %s", d.ID, nf.Values(), w.notWritten())
				}
				k++
			}
		}
	}
	if err != nil {
		err = fmt.Errorf("documents %s–%s: %w", buf[0].ID, buf[len(buf)-1].ID, err)
		if !errors.Is(err, ErrBackend) && !errors.Is(err, ErrNonFinite) {
			// The model and its files, or the texts, do not fit the
			// settings.
			err = badInput(err)
		}
		return err
	}
	var spans [][]Span
	if w.o.ChunkSpans {
		spans = w.e.ChunkSpans(texts)
	}
	k := 0
	for _, d := range buf {
		if d.Bad != "" {
			w.sink.skip()
			continue
		}
		ids := []string{d.ID}
		if w.e.Mode().PerChunk() {
			ids = make([]string, len(vecs[k]))
			for j := range ids {
				ids[j] = d.ID + "#" + strconv.Itoa(j)
			}
			if spans != nil {
				if len(spans[k]) != len(ids) {
					return fmt.Errorf("document %s: %d chunk spans for %d vectors", d.ID, len(spans[k]), len(ids))
				}
				for j, sp := range spans[k] {
					ids[j] += "@" + strconv.Itoa(sp.Start) + "-" + strconv.Itoa(sp.End)
				}
			}
		}
		if err := w.sink.add(d.Rec, d.ID, ids, vecs[k]); err != nil {
			return err
		}
		w.rep.Documents++
		w.rep.Vectors += len(ids)
		k++
		w.partFill = (w.partFill + 1) % w.o.PartSize
	}
	w.progress.Step("documents %d–%d, %d embedded", buf[0].Rec, buf[len(buf)-1].Rec, w.rep.Documents)
	return nil
}

// embed embeds texts: one vector each, or one per chunk in Chunks and
// Late mode.
func (w *writeRun) embed(texts []string) ([][][]float32, error) {
	if len(texts) == 0 {
		return nil, nil
	}
	if w.e.Mode().PerChunk() {
		return w.e.EmbedChunks(texts)
	}
	v, err := w.e.Embed(texts)
	if err != nil {
		return nil, err
	}
	out := make([][][]float32, len(v))
	for i := range v {
		out[i] = [][]float32{v[i]}
	}
	return out, nil
}

// kept says what a failed run keeps of its output.
func (w *writeRun) kept() string {
	switch {
	case w.folder:
		return "the finished parts of " + w.out + " are kept"
	case w.file.started():
		return "the finished parts are kept in " + w.parts + ", " + w.out + " left as it was"
	}
	return w.out + " left as it was"
}

// notWritten says that the failing document's part is not written, and
// what is kept.
func (w *writeRun) notWritten() string {
	if w.folder || w.file.started() {
		return "its part is not written; " + w.kept()
	}
	return "nothing written, " + w.kept()
}

// keptNote, when parts are kept, says that a run with the input fixed
// resumes.
func (w *writeRun) keptNote() string {
	if w.folder || w.file.started() {
		return " (" + w.kept() + ": fix the input and run again to resume)"
	}
	return ""
}

// anew says how to start over when the parts cannot be resumed.
func (w *writeRun) anew() string {
	if w.folder {
		return "use another folder, or the input they were made from"
	}
	return "remove " + w.parts + " to start anew, or use the input they were made from"
}

// sink receives the vectors of each document in order: a folder of
// parts written as they fill, or a file built in parts and written at
// the end.
type sink interface {
	add(rec int64, docID string, ids []string, vecs [][]float32) error
	skip()
	finish(dim int) error
}

// partSink writes a folder of parts.
type partSink struct{ w *PartWriter }

func (s partSink) add(rec int64, docID string, ids []string, vecs [][]float32) error {
	return s.w.Add(rec, docID, ids, vecs)
}
func (s partSink) skip()            { s.w.Skip() }
func (s partSink) finish(int) error { return s.w.Finish() }

// fileSink builds a vectors file in the hidden folder of parts beside it
// (FilePartsDir), committing a part at a time as a folder output does,
// and assembles the file from them at the end as one set (Assemble), the
// folder then removed. A run that ends before its first part is full
// writes the file from memory and makes no folder.
type fileSink struct {
	out, dir string
	partSize int
	// head makes the folder's manifest head (hashing the model: only
	// when a part is committed).
	head func() (Manifest, error)
	// w writes the folder; nil until the first part is full (or when
	// the run resumes a folder).
	w *PartWriter
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
	w, err := OpenParts(s.dir, head)
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
		return Assemble(s.dir, s.out)
	}
	n := 0
	for _, d := range s.first {
		n += len(d.ids)
	}
	return WriteVectors(s.out, n, dim, func(yield func([]string, []float32) error) error {
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
