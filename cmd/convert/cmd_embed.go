package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/embed"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/internal/fsutil"
	"github.com/linearize/linearize/internal/progress"
	"github.com/linearize/linearize/internal/rusage"
	"github.com/linearize/linearize/internal/textfile"
	"github.com/linearize/linearize/onnx"
)

// embedMaxDoc bounds one document (a --docs file or a JSON line), and
// embedMaxTotal all the documents of one command, which are read before
// any is embedded.
var embedMaxDoc = 64 << 20 // tests lower it

var embedMaxTotal int64 = 1 << 30 // tests lower it

// embedProgress receives embed's progress lines (tests replace it).
var embedProgress io.Writer = os.Stderr

// embedDoc is one document to embed and its id; bad, when set, says why
// it cannot be embedded (invalid UTF-8 at a byte offset, or empty).
type embedDoc struct{ id, text, bad string }

// Why a document is bad (the summary counts each).
const (
	badUTF8  = "invalid UTF-8"
	badEmpty = "empty"
)

// invalidUTF8 is the byte offset of the first byte of s that is not
// UTF-8, or -1. (A literal U+FFFD is valid.)
func invalidUTF8(s string) int {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, n := utf8.DecodeRuneInString(s[i:]); n == 1 {
				return i
			}
		}
	}
	return -1
}

// checkUTF8 marks d bad when its text is not UTF-8: the tokenizer would
// read each bad byte as U+FFFD and drop it, and a Latin-1 page would
// embed as a quietly different text. where says what the offset counts
// in ("" for the text itself).
func checkUTF8(d *embedDoc, raw, where string) {
	if at := invalidUTF8(raw); at >= 0 {
		if where == "" {
			where = "the text"
		}
		d.bad = fmt.Sprintf("%s: byte %d of %s is not UTF-8 (convert the file to UTF-8, e.g. iconv -f latin1 -t utf-8)", badUTF8, at, where)
	}
}

func runEmbed(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("embed", flag.ContinueOnError)
	var texts cli.MultiFlag
	fs.Var(&texts, "text", "a `TEXT` to embed (repeatable; ids text-1, text-2, ...)")
	textFile := fs.String("text-file", "", "a `FILE` with one text per line (ids: line numbers; blank lines skipped)")
	docs := fs.String("docs", "", "embed every *.txt and *.md file in `DIR`, sorted (id: the file name)")
	jsonl := fs.String("jsonl", "", "a `FILE` of JSON lines {\"id\": ..., \"text\": ...}")
	out := fs.String("o", "", "`OUT`.npy (float32 [N, dim], ids in OUT.ids.txt) or OUT.jsonl, one {\"id\", \"embedding\"} per line (required)")
	mode := fs.String("mode", "auto", "read long texts in `MODE`: truncate (first window), chunk (mean over windows), long (one pass, up to the model's limit), auto (long for a convert long model or, without --window, a model whose own limit is above 512 tokens; else chunk)")
	pooling := fs.String("pooling", "auto", "pool hidden states by `KIND`: mean, cls, max, or auto (the model's sentence-transformers files, else mean)")
	raw := fs.Bool("raw", false, "do not L2-normalise the vectors")
	maxTokens := fs.Int("max-tokens", 0, "read at most `N` wordpieces of each text, in every mode (0: all; truncate reads one window)"+atMost(maxTokensFlag))
	window := fs.Int("window", 0, "tokens `W` per pass in truncate and chunk mode, [CLS] and [SEP] included (default: the model's window, else its limit: its position table's rows, else max_position_embeddings in the config.json beside it or its doc string; else 512)"+atMost(maxWindowFlag))
	batch := fs.Int("batch", embed.DefaultBatch, "`B` texts or chunks per run, at most 4096 tokens of them (long mode: 1)"+atMost(maxBatchFlag))
	threads := fs.Int("threads", 0, "intra-op threads (0: backend default)")
	backend := fs.String("backend", infer.DefaultBackend, "runtime backend: "+strings.Join(infer.Backends(), " or "))
	vocab := fs.String("vocab", "", "tokenizer `PATH`: a folder, tokenizer.json or vocab.txt (default: found beside the model)")
	skipBad := fs.Bool("skip-bad-docs", false, "skip documents that are empty (no wordpieces) or not UTF-8, and count them in the summary (default: refuse them, exit 2, naming each)")
	path, err := cli.ParseModelArg(fs, args, stdout)
	if err != nil {
		return err
	}
	if err := checkBackend(*backend); err != nil {
		return err
	}
	o := embed.Options{Raw: *raw, MaxTokens: *maxTokens, Window: *window, Batch: *batch, Backend: *backend, Threads: *threads, Vocab: *vocab}
	switch m := embed.Mode(*mode); m {
	case "auto":
	case embed.Truncate, embed.Chunk, embed.Long:
		o.Mode = m
	default:
		return cli.UsageError("--mode %q: want auto, truncate, chunk or long", *mode)
	}
	switch p := embed.Pooling(*pooling); p {
	case "auto":
	case embed.PoolMean, embed.PoolCLS, embed.PoolMax:
		o.Pooling = p
	default:
		return cli.UsageError("--pooling %q: want auto, mean, cls or max", *pooling)
	}
	switch {
	case *maxTokens < 0:
		return cli.UsageError("--max-tokens must be non-negative")
	case *window != 0 && *window < 3:
		return cli.UsageError("--window %d: want at least 3 ([CLS], a wordpiece, [SEP])", *window)
	case *batch < 1:
		return cli.UsageError("--batch must be at least 1")
	}
	if err := checkCounts(count{"max-tokens", *maxTokens, maxTokensFlag}, count{"window", *window, maxWindowFlag}, count{"batch", *batch, maxBatchFlag}); err != nil {
		return err
	}
	sources := 0
	for _, set := range []bool{len(texts) > 0, *textFile != "", *docs != "", *jsonl != ""} {
		if set {
			sources++
		}
	}
	if sources != 1 {
		return cli.UsageError("give the texts with one of --text, --text-file, --docs or --jsonl")
	}
	if *out == "" {
		return cli.UsageError("-o is required")
	}
	npy := strings.HasSuffix(*out, ".npy")
	if !npy && !strings.HasSuffix(*out, ".jsonl") {
		return cli.UsageError("-o %s: want a path ending in .npy or .jsonl", *out)
	}
	outputs := []namedFile{{"-o", *out}}
	if npy {
		outputs = append(outputs, namedFile{"the ids file of -o", embedIDsPath(*out)})
	}
	inputs := []namedFile{{"MODEL", path}, {"--text-file", *textFile}, {"--jsonl", *jsonl}, {"--vocab", *vocab}}
	if err := checkOutputs(outputs, inputs); err != nil {
		return err
	}

	var list []embedDoc
	switch {
	case len(texts) > 0:
		for i, s := range texts {
			d := embedDoc{id: "text-" + strconv.Itoa(i+1), text: s}
			checkUTF8(&d, s, "")
			list = append(list, d)
		}
	case *textFile != "":
		list, err = readTextLines("--text-file", *textFile)
	case *docs != "":
		list, err = readDocsDir("--docs", *docs)
	default:
		list, err = readJSONLDocs(*jsonl)
	}
	if err != nil {
		return cli.BadInput(err)
	}
	if *docs != "" {
		// The documents read are inputs too (an ids file ends in .txt).
		for _, d := range list {
			inputs = append(inputs, namedFile{"--docs", filepath.Join(*docs, d.id)})
		}
		if err := checkNotInputs(outputs, inputs); err != nil {
			return err
		}
	}

	e, err := embed.Open(path, o)
	if err != nil {
		return embedError(err)
	}
	defer e.Close()
	list, skipped, err := screenDocs(list, e, *skipBad)
	if err != nil {
		return err
	}
	start := time.Now() // embedding only, not loading the model
	var took time.Duration
	group := max(*batch, 8)
	var pr *progress.Reporter
	if len(list) > 1 {
		pr = progress.New(embedProgress, "embed: batch", (len(list)+group-1)/group)
	}
	vecs := make([][]float32, 0, len(list))
	for lo := 0; lo < len(list); lo += group {
		hi := min(lo+group, len(list))
		batchTexts := make([]string, hi-lo)
		for i := range batchTexts {
			batchTexts[i] = list[lo+i].text
		}
		v, err := e.Embed(batchTexts)
		var nf *embed.NonFiniteError
		if errors.As(err, &nf) && nf.Index < len(batchTexts) {
			// Nothing is written: a vector of NaN would poison every
			// search over the file without a word.
			return cli.RuntimeFailure(fmt.Errorf("document %s: its vector has %s (the model's output is not finite); nothing written, %s left as it was",
				list[lo+nf.Index].id, nf.Values(), *out))
		}
		if err != nil {
			return embedError(fmt.Errorf("documents %s–%s: %w", list[lo].id, list[hi-1].id, err))
		}
		vecs = append(vecs, v...)
		pr.Step("documents %d–%d of %d", lo+1, hi, len(list))
	}
	took = time.Since(start)

	if npy {
		err = writeEmbedNPY(*out, list, vecs, e.Dim())
	} else {
		err = writeEmbedJSONL(*out, list, vecs)
	}
	if err != nil {
		return cli.RuntimeFailure(err)
	}
	fmt.Fprintf(stdout, "embedded %d documents%s (mode %s, pooling %s, window %d, dim %d) in %.2f s (%.3f s each, loading excluded) → %s\n",
		len(list), skipped, e.Mode(), e.Pooling(), e.Window(), e.Dim(), took.Seconds(), took.Seconds()/float64(len(list)), *out)
	return nil
}

// maxBadListed bounds the bad documents a refusal names one by one.
const maxBadListed = 10

// screenDocs finds the documents that cannot be embedded: not UTF-8
// (marked when read) or empty, with no wordpieces (blank, or only
// characters the tokenizer drops), which would get the vector of
// [CLS] [SEP] and rank like any other. Without skip they are refused
// (exit 2), each named with its reason; with skip they are left out,
// named on stderr, and counted in the summary words returned.
func screenDocs(list []embedDoc, e *embed.Embedder, skip bool) ([]embedDoc, string, error) {
	tok := e.Tokenizer()
	var bad []string
	counts := map[string]int{}
	kept := list[:0:0]
	for _, d := range list {
		if d.bad == "" && len(tok.IDsLimit(d.text, 1)) == 0 {
			d.bad = badEmpty + ": no wordpieces (blank, or only characters the tokenizer drops); its vector would be that of [CLS] [SEP]"
		}
		if d.bad == "" {
			kept = append(kept, d)
			continue
		}
		bad = append(bad, fmt.Sprintf("document %s: %s", d.id, d.bad))
		counts[strings.SplitN(d.bad, ":", 2)[0]]++
	}
	if len(bad) == 0 {
		return list, "", nil
	}
	if !skip {
		msg := strings.Join(bad[:min(len(bad), maxBadListed)], "; ")
		if len(bad) > maxBadListed {
			msg += fmt.Sprintf("; and %d more", len(bad)-maxBadListed)
		}
		return nil, "", cli.BadInput(fmt.Errorf("%d of %d documents cannot be embedded (--skip-bad-docs skips them): %s", len(bad), len(list), msg))
	}
	for _, b := range bad {
		fmt.Fprintf(embedProgress, "embed: skipped %s\n", b)
	}
	if len(kept) == 0 {
		return nil, "", cli.BadInput(fmt.Errorf("all %d documents are bad (%s); nothing to embed", len(list), badCounts(counts)))
	}
	return kept, fmt.Sprintf(", skipped %d bad (%s)", len(bad), badCounts(counts)), nil
}

// badCounts words the bad documents by reason: "2 empty, 1 invalid UTF-8".
func badCounts(counts map[string]int) string {
	var parts []string
	for _, why := range []string{badEmpty, badUTF8} {
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

// readTextLines reads one text per line of the file path given with flag;
// blank lines are skipped and the id is the line number.
func readTextLines(flag, path string) ([]embedDoc, error) {
	f, err := fsutil.Open(path) // a FIFO without a writer is announced
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	defer f.Close()
	var list []embedDoc
	err = eachLine(f, path, func(n int, line string) error {
		if strings.TrimSpace(line) != "" {
			d := embedDoc{id: strconv.Itoa(n), text: line}
			checkUTF8(&d, line, "line "+strconv.Itoa(n))
			list = append(list, d)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(list) == 0 {
		return nil, fmt.Errorf("%s %s: no texts (one per line)", flag, path)
	}
	return list, nil
}

// eachLine calls fn with every line of r (numbered from 1, without its
// "\r\n" or "\n"); lines are at most embedMaxDoc bytes, and all of them
// at most embedMaxTotal, or half the memory the process may use when
// that is less (rusage.ReadBound). An error names the file, the line and
// the bound.
func eachLine(r io.Reader, path string, fn func(n int, line string) error) error {
	lr := fsutil.LimitReader(r, path, embedMaxTotal)
	sc := bufio.NewScanner(lr)
	sc.Buffer(make([]byte, 0, min(64<<10, embedMaxDoc)), embedMaxDoc)
	n := 1
	for ; sc.Scan(); n++ {
		if err := fn(n, strings.TrimSuffix(sc.Text(), "\r")); err != nil {
			if lr.Exceeded() != nil {
				break // the line was cut at the bound: say that instead
			}
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return textfile.ScanError(path, n, embedMaxDoc, err)
	}
	return nil
}

// readDocsDir reads every *.txt and *.md regular file of dir, sorted by
// name; the id is the file name.
func readDocsDir(flag, dir string) ([]embedDoc, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	var names []string
	for _, de := range ents {
		ext := strings.ToLower(filepath.Ext(de.Name()))
		if (ext == ".txt" || ext == ".md") && !de.IsDir() {
			names = append(names, de.Name())
		}
	}
	sort.Strings(names)
	if len(names) == 0 {
		return nil, fmt.Errorf("%s %s: no *.txt or *.md files", flag, dir)
	}
	list := make([]embedDoc, 0, len(names))
	var total int64
	bound := rusage.ReadBound(embedMaxTotal)
	for _, name := range names {
		if strings.ContainsAny(name, "\r\n") {
			return nil, fmt.Errorf("%s %s: file name %q has a line break (ids are written one per line)", flag, dir, name)
		}
		p := filepath.Join(dir, name)
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", flag, err)
		}
		if !st.Mode().IsRegular() {
			continue
		}
		if st.Size() > int64(embedMaxDoc) {
			return nil, fmt.Errorf("%s: %s: larger than %d bytes", flag, p, embedMaxDoc)
		}
		if total += st.Size(); total > bound {
			return nil, fmt.Errorf("%s %s: more than %s of documents; embed the folder in parts", flag, dir, rusage.Bound(embedMaxTotal))
		}
		data, err := fsutil.ReadFile(p, int64(embedMaxDoc))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", flag, err)
		}
		d := embedDoc{id: name, text: string(data)}
		checkUTF8(&d, d.text, "the file")
		list = append(list, d)
	}
	return list, nil
}

// readJSONLDocs reads one {"id": ..., "text": ...} object per line (blank
// lines skipped); an id may be a string or a number and must be unique.
func readJSONLDocs(path string) ([]embedDoc, error) {
	f, err := fsutil.Open(path) // a FIFO without a writer is announced
	if err != nil {
		return nil, fmt.Errorf("--jsonl: %w", err)
	}
	defer f.Close()
	var list []embedDoc
	var total int64
	seen := map[string]int{}
	err = eachLine(f, path, func(n int, line string) error {
		if strings.TrimSpace(line) == "" {
			return nil
		}
		var rec struct {
			ID   json.RawMessage `json:"id"`
			Text *string         `json:"text"`
		}
		if err := decodeJSONLine(line, &rec); err != nil {
			return fmt.Errorf("%s:%d: %w", path, n, err)
		}
		id, err := jsonID(rec.ID)
		if err != nil {
			return fmt.Errorf("%s:%d: %w", path, n, err)
		}
		if rec.Text == nil {
			return fmt.Errorf("%s:%d: no \"text\" string", path, n)
		}
		if prev, dup := seen[id]; dup {
			return fmt.Errorf("%s:%d: id %q was already used on line %d", path, n, id, prev)
		}
		seen[id] = n
		if total += int64(len(*rec.Text)); total > embedMaxTotal {
			return fmt.Errorf("%s:%d: more than %d bytes of documents; embed the file in parts", path, n, embedMaxTotal)
		}
		d := embedDoc{id: id, text: *rec.Text}
		// encoding/json reads a byte that is not UTF-8 as U+FFFD without
		// a word: look at the line as it was.
		checkUTF8(&d, line, "line "+strconv.Itoa(n))
		list = append(list, d)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(list) == 0 {
		return nil, fmt.Errorf("--jsonl %s: no documents", path)
	}
	return list, nil
}

// decodeJSONLine decodes the one JSON object of line into v: anything
// but white space after it (`{…} }}}`, a second object) is an error, as
// is a value that is no object; errors give the byte offset in the line.
func decodeJSONLine(line string, v any) error {
	start := len(line) - len(strings.TrimLeft(line, " \t"))
	if start == len(line) || line[start] != '{' {
		return fmt.Errorf("byte %d: want one JSON object {\"id\": ..., \"text\": ...} on the line", start)
	}
	dec := json.NewDecoder(strings.NewReader(line))
	if err := dec.Decode(v); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			return fmt.Errorf("byte %d: %w", se.Offset, err)
		case errors.As(err, &te):
			return fmt.Errorf("byte %d: %w", te.Offset, err)
		case errors.Is(err, io.ErrUnexpectedEOF):
			return fmt.Errorf("byte %d: the JSON object does not end on the line", len(line))
		}
		return err
	}
	end := int(dec.InputOffset())
	if rest := strings.TrimLeft(line[end:], " \t"); rest != "" {
		return fmt.Errorf("byte %d: %q after the JSON object (want exactly one object per line)", len(line)-len(rest), firstRunes(rest, 20))
	}
	return nil
}

// firstRunes is s cut to its first n characters.
func firstRunes(s string, n int) string {
	for i := range s {
		if n == 0 {
			return s[:i] + "…"
		}
		n--
	}
	return s
}

// jsonID is a JSON id as text: a string's value or a number's literal.
func jsonID(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", errors.New(`no "id"`)
	}
	var id string
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &id); err != nil {
			return "", err
		}
	} else {
		var num json.Number
		if err := json.Unmarshal(raw, &num); err != nil {
			return "", fmt.Errorf(`"id" is neither a string nor a number`)
		}
		id = num.String()
	}
	if id == "" || strings.ContainsAny(id, "\r\n") {
		return "", fmt.Errorf("id %q is empty or has a line break (ids are written one per line)", id)
	}
	return id, nil
}

// writeEmbedNPY writes the vectors as a float32 [N, dim] .npy file and
// the ids, one per line, to OUT without .npy plus ".ids.txt", as one
// set (fsutil.WriteSet): whatever fails or stops the write, both files
// are the old ones or both the new ones.
func writeEmbedNPY(out string, list []embedDoc, vecs [][]float32, dim int) error {
	data := make([]float32, 0, len(vecs)*dim)
	for _, v := range vecs {
		data = append(data, v...)
	}
	var ids strings.Builder
	for _, d := range list {
		ids.WriteString(d.id)
		ids.WriteByte('\n')
	}
	t := onnx.NewFloat([]int{len(vecs), dim}, data)
	return fsutil.WriteSet(
		fsutil.SetFile{Path: out, Fill: func(w io.Writer) error { return onnx.EncodeNPY(w, t) }},
		fsutil.FileBytes(embedIDsPath(out), []byte(ids.String())))
}

// embedIDsPath is the ids file beside an .npy output.
func embedIDsPath(out string) string { return strings.TrimSuffix(out, ".npy") + ".ids.txt" }

// writeEmbedJSONL writes one {"id", "embedding"} object per line.
func writeEmbedJSONL(out string, list []embedDoc, vecs [][]float32) error {
	return fsutil.WriteAtomic(out, func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetEscapeHTML(false)
		for i, d := range list {
			rec := struct {
				ID        string    `json:"id"`
				Embedding []float32 `json:"embedding"`
			}{d.id, vecs[i]}
			if err := enc.Encode(rec); err != nil {
				return err
			}
		}
		return nil
	})
}
