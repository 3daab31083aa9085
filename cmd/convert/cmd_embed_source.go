package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"

	"github.com/linearize/linearize/embed"
	"github.com/linearize/linearize/internal/fsutil"
	"github.com/linearize/linearize/internal/rusage"
	"github.com/linearize/linearize/internal/textfile"
)

// docSource hands fn the documents of one input in order, one at a
// time, each with its record number (from 1). The first skip records'
// texts are not read where that can be avoided (a resumed run passes
// over them; their ids still come). A source reads each document when
// fn wants it: memory holds one document, whatever the input's size.
type docSource struct {
	// what names the input ("--jsonl FILE"); total is the number of
	// documents when known before reading (else 0).
	what  string
	total int
	each  func(skip int64, fn func(rec int64, d embedDoc) error) error
	// paths lists the input files read (a --docs folder's documents),
	// for the check that no output is an input.
	paths []string
}

// textsSource is the --text texts (ids text-1, text-2, …).
func textsSource(texts []string) docSource {
	return docSource{what: "--text", total: len(texts), each: func(skip int64, fn func(int64, embedDoc) error) error {
		for i, s := range texts {
			d := embedDoc{id: "text-" + strconv.Itoa(i+1), text: s}
			checkUTF8(&d, s, "")
			if err := fn(int64(i+1), d); err != nil {
				return err
			}
		}
		return nil
	}}
}

// openInput opens path for reading, "-" being stdin.
func openInput(path string) (io.ReadCloser, error) {
	if path == "-" {
		return io.NopCloser(os.Stdin), nil
	}
	return fsutil.Open(path) // a FIFO without a writer is announced
}

// textLinesSource is one text per line of a file (blank lines skipped;
// the id is the line number), read a line at a time; total bounds the
// bytes read (0: no bound but each line's).
func textLinesSource(flag, path string, total int64) docSource {
	return docSource{what: flag + " " + path, each: func(skip int64, fn func(int64, embedDoc) error) error {
		f, err := openInput(path)
		if err != nil {
			return fmt.Errorf("%s: %w", flag, err)
		}
		defer f.Close()
		var rec int64
		err = eachLineBounded(f, path, total, func(n int, line string) error {
			if strings.TrimSpace(line) == "" {
				return nil
			}
			rec++
			d := embedDoc{id: strconv.Itoa(n), text: line}
			checkUTF8(&d, line, "line "+strconv.Itoa(n))
			return fn(rec, d)
		})
		if err != nil {
			return err
		}
		if rec == 0 {
			return fmt.Errorf("%s %s: no texts (one per line)", flag, path)
		}
		return nil
	}}
}

// docsDirSource is every *.txt and *.md regular file of dir, sorted by
// name (the id); each file is read when its turn comes. total bounds
// the bytes of all of them (0: no bound but each file's).
func docsDirSource(flag, dir string, total int64) (docSource, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return docSource{}, fmt.Errorf("%s: %w", flag, err)
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
		return docSource{}, fmt.Errorf("%s %s: no *.txt or *.md files", flag, dir)
	}
	src := docSource{what: flag + " " + dir, total: len(names)}
	for _, name := range names {
		src.paths = append(src.paths, filepath.Join(dir, name))
	}
	src.each = func(skip int64, fn func(int64, embedDoc) error) error {
		var sum int64
		bound := int64(0)
		if total > 0 {
			bound = rusage.ReadBound(total)
		}
		var rec int64
		for _, name := range names {
			if strings.ContainsAny(name, "\r\n") {
				return fmt.Errorf("%s %s: file name %q has a line break (ids are written one per line)", flag, dir, name)
			}
			p := filepath.Join(dir, name)
			st, err := os.Stat(p)
			if err != nil {
				return fmt.Errorf("%s: %w", flag, err)
			}
			if !st.Mode().IsRegular() {
				continue
			}
			rec++
			if rec <= skip {
				if err := fn(rec, embedDoc{id: name}); err != nil {
					return err
				}
				continue
			}
			if st.Size() > int64(embedMaxDoc) {
				return fmt.Errorf("%s: %s: larger than %d bytes", flag, p, embedMaxDoc)
			}
			if sum += st.Size(); bound > 0 && sum > bound {
				return fmt.Errorf("%s %s: more than %s of documents; embed the folder in parts", flag, dir, rusage.Bound(total))
			}
			data, err := fsutil.ReadFile(p, int64(embedMaxDoc))
			if err != nil {
				return fmt.Errorf("%s: %w", flag, err)
			}
			d := embedDoc{id: name, text: string(data)}
			checkUTF8(&d, d.text, "the file")
			if err := fn(rec, d); err != nil {
				return err
			}
		}
		return nil
	}
	return src, nil
}

// jsonlSource is one {"id": ..., "text": ...} object per line (blank
// lines skipped; "-" is stdin), read a line at a time. An id may be a
// string or a number and must be unique (idCheck). total bounds the
// bytes of the texts (0: no bound but each line's).
func jsonlSource(path string, total int64) docSource {
	return docSource{what: "--jsonl " + path, each: func(skip int64, fn func(int64, embedDoc) error) error {
		f, err := openInput(path)
		if err != nil {
			return fmt.Errorf("--jsonl: %w", err)
		}
		defer f.Close()
		var rec, sum int64
		ids := newIDCheck(path)
		defer ids.free()
		err = eachLineBounded(f, path, total, func(n int, line string) error {
			if strings.TrimSpace(line) == "" {
				return nil
			}
			var r struct {
				ID   json.RawMessage `json:"id"`
				Text *string         `json:"text"`
			}
			if err := decodeJSONLine(line, &r); err != nil {
				return fmt.Errorf("%s:%d: %w", path, n, err)
			}
			id, err := jsonID(r.ID)
			if err != nil {
				return fmt.Errorf("%s:%d: %w", path, n, err)
			}
			if r.Text == nil {
				return fmt.Errorf("%s:%d: no \"text\" string", path, n)
			}
			if prev, err := ids.add(id, n); err != nil {
				return fmt.Errorf("%s:%d: %w", path, n, err)
			} else if prev > 0 {
				return fmt.Errorf("%s:%d: id %q was already used on line %d", path, n, id, prev)
			}
			if sum += int64(len(*r.Text)); total > 0 && sum > total {
				return fmt.Errorf("%s:%d: more than %d bytes of documents; embed the file in parts", path, n, total)
			}
			rec++
			d := embedDoc{id: id, text: *r.Text}
			// encoding/json reads a byte that is not UTF-8, and an
			// escaped lone surrogate, as U+FFFD without a word: look at
			// the line as it was.
			checkJSONText(&d, line, "line "+strconv.Itoa(n))
			return fn(rec, d)
		})
		if err != nil {
			return err
		}
		if rec == 0 {
			return fmt.Errorf("--jsonl %s: no documents", path)
		}
		return nil
	}}
}

// collect reads every document of src into memory (evaluate and
// calibration, which need them all at once; the source's total bound
// applies).
func collect(src docSource) ([]embedDoc, error) {
	var list []embedDoc
	err := src.each(0, func(_ int64, d embedDoc) error {
		list = append(list, d)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return list, nil
}

// readTextLines reads one text per line of the file path given with flag;
// blank lines are skipped and the id is the line number. All the lines
// are at most embedMaxTotal bytes (or half the memory the process may
// use).
func readTextLines(flag, path string) ([]embedDoc, error) {
	return collect(textLinesSource(flag, path, embedMaxTotal))
}

// readDocsDir reads every *.txt and *.md regular file of dir, sorted by
// name; the id is the file name. All of them are at most embedMaxTotal
// bytes (or half the memory the process may use).
func readDocsDir(flag, dir string) ([]embedDoc, error) {
	src, err := docsDirSource(flag, dir, embedMaxTotal)
	if err != nil {
		return nil, err
	}
	return collect(src)
}

// readJSONLDocs reads one {"id": ..., "text": ...} object per line (blank
// lines skipped), at most embedMaxTotal bytes of texts.
func readJSONLDocs(path string) ([]embedDoc, error) {
	return collect(jsonlSource(path, embedMaxTotal))
}

// eachLineBounded calls fn with every line of r (numbered from 1, without
// its "\r\n" or "\n"), with a bound of total bytes on all the lines (0:
// none); each line is at most embedMaxDoc bytes, or half the memory the
// process may use when that is less (rusage.ReadBound). An error names
// the file, the line and the bound.
func eachLineBounded(r io.Reader, path string, total int64, fn func(n int, line string) error) error {
	var lr *fsutil.Limited
	if total > 0 {
		lr = fsutil.LimitReader(r, path, total)
		r = lr
	}
	// A line is at most embedMaxDoc bytes, or half the memory the
	// process may use when that is less (streamed, the line is what is
	// held).
	lineMax, memBound := embedMaxDoc, false
	if b := rusage.ReadBound(int64(embedMaxDoc)); b < int64(embedMaxDoc) {
		lineMax, memBound = int(b), true
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, min(64<<10, lineMax)), lineMax)
	n := 1
	for ; sc.Scan(); n++ {
		if err := fn(n, strings.TrimSuffix(sc.Text(), "\r")); err != nil {
			if lr != nil && lr.Exceeded() != nil {
				break // the line was cut at the bound: say that instead
			}
			return err
		}
	}
	if err := sc.Err(); err != nil {
		if memBound && errors.Is(err, bufio.ErrTooLong) {
			return &fsutil.TooLargeError{Path: path, Size: -1, Bound: int64(lineMax), What: rusage.Bound(int64(embedMaxDoc))}
		}
		return textfile.ScanError(path, n, embedMaxDoc, err)
	}
	return nil
}

// checkJSONText marks d bad when the JSON line it was read from is not
// text: a byte that is not UTF-8 (checkUTF8), or an escaped lone
// surrogate ("\ud800" with no low surrogate after it, or a low one with
// no high one before), which is half of a UTF-16 pair and no character;
// the first of them by byte offset is named. Either is refused as
// invalid UTF-8 (the text cannot be written in UTF-8).
func checkJSONText(d *embedDoc, line, where string) {
	bad, sur := invalidUTF8(line), loneSurrogate(line)
	if sur < 0 || bad >= 0 && bad < sur {
		checkUTF8(d, line, where)
		return
	}
	d.bad = fmt.Sprintf("%s: byte %d of %s is %s, an escaped lone surrogate (half of a UTF-16 pair, no character; fix the exporter that wrote it)",
		badUTF8, sur, where, line[sur:sur+6])
}

// loneSurrogate is the byte offset of the first escaped lone surrogate
// (\uD800–\uDFFF not in a high-low pair) in a JSON string of line, or
// -1. line is one JSON value, already decoded without error: its
// strings are well formed.
func loneSurrogate(line string) int {
	// surrogate reads \uXXXX at i: its value when it is one (else -1).
	surrogate := func(i int) rune {
		if i+6 > len(line) || line[i] != '\\' || line[i+1] != 'u' {
			return -1
		}
		v, err := strconv.ParseUint(line[i+2:i+6], 16, 16)
		if err != nil || v < 0xD800 || v > 0xDFFF {
			return -1
		}
		return rune(v)
	}
	in := false
	for i := 0; i < len(line); i++ {
		switch c := line[i]; {
		case c == '"':
			in = !in
		case c == '\\' && in:
			r := surrogate(i)
			switch {
			case r < 0:
				i++ // the escaped character (\" or \\ included)
			case r >= 0xDC00:
				return i // a low surrogate with no high one before
			default:
				if low := surrogate(i + 6); low < 0xDC00 {
					return i // a high surrogate with no low one after
				}
				i += 11
			}
		}
	}
	return -1
}

// idCheck finds the ids of a JSONL input used twice. It keeps an
// 8-byte fingerprint of each id (embed.IDSet: 11 to 21 bytes an id, off
// Go's heap) and confirms a fingerprint seen before against the ids
// themselves: for a regular file by reading it again up to that line;
// for stdin or a pipe, which cannot be read again, in a spool of every
// id and its line written to a temporary file as they come (removed at
// once where the system allows, so that not even a kill -9 leaves it).
// Where no temporary file can be made, it keeps 16 bytes of each id's
// SHA-256 and its line instead (about 53 bytes an id).
type idCheck struct {
	path  string
	fps   *embed.IDSet
	spool *os.File
	w     *bufio.Writer
	lines map[[16]byte]int
}

func newIDCheck(path string) *idCheck {
	if st, err := os.Stat(path); path != "-" && err == nil && st.Mode().IsRegular() {
		return &idCheck{path: path, fps: new(embed.IDSet)}
	}
	f, err := os.CreateTemp("", "linearize-embed-ids-*")
	if err != nil {
		return &idCheck{path: path, lines: map[[16]byte]int{}}
	}
	if runtime.GOOS != "windows" {
		os.Remove(f.Name()) // the open file lives on, nameless
	}
	return &idCheck{path: path, fps: new(embed.IDSet), spool: f, w: bufio.NewWriterSize(f, 1<<16)}
}

// free releases the memory and the spool of the check.
func (c *idCheck) free() {
	if c.fps != nil {
		c.fps.Free()
	}
	if c.spool != nil {
		c.spool.Close()
		os.Remove(c.spool.Name())
	}
	c.lines = nil
}

// add adds the id of line n and returns the line that used it before
// (0 for none).
func (c *idCheck) add(id string, n int) (int, error) {
	if c.fps == nil {
		h := sha256.Sum256([]byte(id))
		var k [16]byte
		copy(k[:], h[:])
		if prev, dup := c.lines[k]; dup {
			return prev, nil
		}
		c.lines[k] = n
		return 0, nil
	}
	seen := c.fps.Add(id)
	prev := 0
	if seen {
		var err error
		if prev, err = c.lineOf(id, n); err != nil || prev > 0 {
			return prev, err
		}
	}
	if c.spool != nil {
		if _, err := fmt.Fprintf(c.w, "%d\t%s\n", n, id); err != nil {
			return 0, fmt.Errorf("spooling the ids: %w", err)
		}
	}
	return 0, nil
}

// lineOf looks for the first line before line n whose id is id (0 for
// none: another id shares its fingerprint), in the file read again or
// in the spool.
func (c *idCheck) lineOf(id string, n int) (int, error) {
	if c.spool != nil {
		if err := c.w.Flush(); err != nil {
			return 0, fmt.Errorf("spooling the ids: %w", err)
		}
		end, err := c.spool.Seek(0, io.SeekCurrent)
		if err != nil {
			return 0, fmt.Errorf("spooling the ids: %w", err)
		}
		sc := bufio.NewScanner(io.NewSectionReader(c.spool, 0, end))
		sc.Buffer(make([]byte, 0, 64<<10), embedMaxDoc+32)
		for sc.Scan() {
			k, other, _ := strings.Cut(sc.Text(), "\t")
			if other == id {
				return strconv.Atoi(k)
			}
		}
		if err := sc.Err(); err != nil {
			return 0, fmt.Errorf("reading the spool of ids: %w", err)
		}
		return 0, nil
	}
	f, err := fsutil.Open(c.path)
	if err != nil {
		return 0, fmt.Errorf("reading it again for id %q: %w", id, err)
	}
	defer f.Close()
	found := 0
	errFound := errors.New("found")
	err = eachLineBounded(f, c.path, 0, func(k int, line string) error {
		if k >= n {
			return io.EOF
		}
		if strings.TrimSpace(line) == "" {
			return nil
		}
		var r struct {
			ID json.RawMessage `json:"id"`
		}
		if decodeJSONLine(line, &r) != nil {
			return nil
		}
		if other, err := jsonID(r.ID); err == nil && other == id {
			found = k
			return errFound
		}
		return nil
	})
	if err != nil && err != io.EOF && err != errFound {
		return 0, fmt.Errorf("reading it again for id %q: %w", id, err)
	}
	return found, nil
}
