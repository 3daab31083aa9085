package corpus

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/linearize/linearize/internal/fsutil"
	"github.com/linearize/linearize/internal/rusage"
)

// Doc is one document of a Source.
type Doc struct {
	// Rec is its record number, from 1, in the order of the input
	// (blank lines are not records).
	Rec int64
	// ID is the file name (Dir), the JSON id (JSONL), the line number
	// (Lines) or text-N (Texts).
	ID string
	// Text is the document as read: a line without its line break, or
	// a whole file.
	Text string
	// Bad says why the text is not what was written, "" when it is: it
	// begins with InvalidUTF8 and gives the byte offset of the first
	// bad byte ("invalid UTF-8: byte 5 of line 2 is not UTF-8 …").
	Bad string
}

// InvalidUTF8 begins Doc.Bad for a text with a byte that is not UTF-8,
// or an escaped lone surrogate in JSON.
const InvalidUTF8 = "invalid UTF-8"

// Default bounds (Options).
const (
	// DefaultMaxDoc bounds one document: a file of a folder, or a line.
	DefaultMaxDoc = 64 << 20
	// DefaultMaxTotal bounds all the documents ReadAll reads.
	DefaultMaxTotal = 1 << 30
)

// Options bound what a Source reads; a zero field takes its default.
// Either bound is lowered to half the memory the process may use when
// that is less.
type Options struct {
	// MaxDoc bounds one document in bytes (DefaultMaxDoc).
	MaxDoc int
	// MaxTotal bounds the bytes ReadAll reads (DefaultMaxTotal); Each
	// reads a document at a time and bounds only each one.
	MaxTotal int64
}

func (o Options) maxDoc() int {
	if o.MaxDoc > 0 {
		return o.MaxDoc
	}
	return DefaultMaxDoc
}

func (o Options) maxTotal() int64 {
	if o.MaxTotal > 0 {
		return o.MaxTotal
	}
	return DefaultMaxTotal
}

// Source is the documents of one input, read when they are walked
// (Each) or all at once (ReadAll).
type Source struct {
	o     Options
	n     int
	paths []string
	// each walks the documents; total bounds the bytes read (0: none
	// but each document's).
	each func(skip, total int64, fn func(Doc) error) error
}

// Len is the number of documents when it is known before they are read
// (Texts, Dir), else 0.
func (s *Source) Len() int { return s.n }

// Paths lists the files of a Dir, one per document, for the check that
// no output of a command is one of its inputs; nil for the other forms
// (their one file is the path they were given).
func (s *Source) Paths() []string { return s.paths }

// Each calls fn with every document in order, reading each when its turn
// comes: memory holds one document, whatever the input's size. The
// first skip documents (those a resumed run has done) come with their
// Rec and ID only; a folder's files are not read for them. An error of
// fn stops the walk and is returned as it is.
func (s *Source) Each(skip int64, fn func(Doc) error) error {
	return s.each(skip, 0, fn)
}

// ReadAll reads every document into memory, at most Options.MaxTotal
// bytes of them (DefaultMaxTotal, or half the memory the process may
// use when that is less).
func (s *Source) ReadAll() ([]Doc, error) {
	var docs []Doc
	err := s.each(0, s.o.maxTotal(), func(d Doc) error {
		docs = append(docs, d)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return docs, nil
}

// Texts is texts, given as they are: ids text-1, text-2, …
func Texts(texts []string) *Source {
	return &Source{n: len(texts), each: func(skip, _ int64, fn func(Doc) error) error {
		for i, s := range texts {
			d := Doc{Rec: int64(i + 1), ID: "text-" + strconv.Itoa(i+1)}
			if d.Rec > skip {
				d.Text = s
				checkUTF8(&d, s, "the text")
			}
			if err := fn(d); err != nil {
				return err
			}
		}
		return nil
	}}
}

// Open is Dir when path is a folder, else Lines: the documents of a
// --calibration flag.
func Open(path string, o Options) (*Source, error) {
	if path != "-" {
		st, err := os.Stat(path)
		if err != nil {
			return nil, fmt.Errorf("corpus: %w", err)
		}
		if st.IsDir() {
			return Dir(path, o)
		}
	}
	return Lines(path, o), nil
}

// openInput opens path for reading, "-" being stdin.
func openInput(path string) (io.ReadCloser, error) {
	if path == "-" {
		return io.NopCloser(os.Stdin), nil
	}
	f, err := fsutil.Open(path) // a FIFO without a writer is announced
	if err != nil {
		return nil, fmt.Errorf("corpus: %w", err)
	}
	return f, nil
}

// eachText calls fn with each line of the file at path ("-": stdin) that
// is not blank, and its line number, as eachLine reads them; a file with
// no such line is an error that it holds no texts, "no " + what.
func eachText(path string, maxDoc int, total int64, what string, fn func(n int, line string) error) error {
	f, err := openInput(path)
	if err != nil {
		return err
	}
	defer f.Close()
	texts := false
	err = eachLine(f, path, maxDoc, total, func(n int, line string) error {
		if strings.TrimSpace(line) == "" {
			return nil
		}
		texts = true
		return fn(n, line)
	})
	if err != nil {
		return err
	}
	if !texts {
		return fmt.Errorf("corpus: %s: no %s", path, what)
	}
	return nil
}

// Lines is one text per line of the file at path ("-": stdin), read a
// line at a time; the id is the line number. A file with no text is an
// error.
func Lines(path string, o Options) *Source {
	s := &Source{o: o}
	s.each = func(skip, total int64, fn func(Doc) error) error {
		var rec int64
		return eachText(path, o.maxDoc(), total, "texts (one per line)", func(n int, line string) error {
			rec++
			d := Doc{Rec: rec, ID: strconv.Itoa(n)}
			if rec > skip {
				d.Text = line
				checkUTF8(&d, line, "line "+strconv.Itoa(n))
			}
			return fn(d)
		})
	}
	return s
}

// Dir is every *.txt and *.md regular file of the folder at path,
// sorted by name (the id), one document each; a file is read when its
// turn comes. A folder with no such file is an error, as is a file name
// with a line break (ids are written one per line).
func Dir(path string, o Options) (*Source, error) {
	ents, err := os.ReadDir(path)
	if err != nil {
		return nil, fmt.Errorf("corpus: %w", err)
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
		return nil, fmt.Errorf("corpus: %s: no *.txt or *.md files", path)
	}
	s := &Source{o: o, n: len(names)}
	for _, name := range names {
		s.paths = append(s.paths, filepath.Join(path, name))
	}
	maxDoc := o.maxDoc()
	s.each = func(skip, total int64, fn func(Doc) error) error {
		var sum, bound int64
		if total > 0 {
			bound = rusage.ReadBound(total)
		}
		var rec int64
		for _, name := range names {
			if strings.ContainsAny(name, "\r\n") {
				return fmt.Errorf("corpus: %s: file name %q has a line break (ids are written one per line)", path, name)
			}
			p := filepath.Join(path, name)
			st, err := os.Stat(p)
			if err != nil {
				return fmt.Errorf("corpus: %w", err)
			}
			if !st.Mode().IsRegular() {
				continue
			}
			rec++
			d := Doc{Rec: rec, ID: name}
			if rec <= skip {
				if err := fn(d); err != nil {
					return err
				}
				continue
			}
			if st.Size() > int64(maxDoc) {
				return fmt.Errorf("corpus: %s: larger than %d bytes, the bound on one document", p, maxDoc)
			}
			if sum += st.Size(); bound > 0 && sum > bound {
				return fmt.Errorf("corpus: %s: more than %s of documents, the bound on documents read at once", path, rusage.Bound(total))
			}
			data, err := fsutil.ReadFile(p, int64(maxDoc))
			if err != nil {
				return fmt.Errorf("corpus: %w", err)
			}
			text := string(data)
			checkUTF8(&d, text, "the file") // the offset counts in the file
			d.Text = strings.TrimPrefix(text, bom)
			if err := fn(d); err != nil {
				return err
			}
		}
		return nil
	}
	return s, nil
}

// JSONL is one {"id": ..., "text": ...} object per line of the file at
// path ("-": stdin), read a line at a time. An id is a string or a
// number (its literal), not empty, with no line break, and unique in
// the file: an id used twice is an error naming both lines. A line that
// is not exactly one such object is an error naming the line and the
// byte, as is a file with no document.
func JSONL(path string, o Options) *Source {
	s := &Source{o: o}
	s.each = func(skip, total int64, fn func(Doc) error) error {
		var rec, sum int64
		bound := int64(0)
		if total > 0 {
			bound = rusage.ReadBound(total)
		}
		ids := newIDCheck(path, o.maxDoc())
		defer ids.free()
		return eachText(path, o.maxDoc(), total, "documents", func(n int, line string) error {
			var r struct {
				ID   json.RawMessage `json:"id"`
				Text *string         `json:"text"`
			}
			if err := decodeJSONLine(line, &r); err != nil {
				return fmt.Errorf("corpus: %s:%d: %w", path, n, err)
			}
			id, err := jsonID(r.ID)
			if err != nil {
				return fmt.Errorf("corpus: %s:%d: %w", path, n, err)
			}
			if r.Text == nil {
				return fmt.Errorf("corpus: %s:%d: no \"text\" string", path, n)
			}
			if prev, err := ids.add(id, n); err != nil {
				return fmt.Errorf("corpus: %s:%d: %w", path, n, err)
			} else if prev > 0 {
				return fmt.Errorf("corpus: %s:%d: id %q was already used on line %d", path, n, id, prev)
			}
			if sum += int64(len(*r.Text)); bound > 0 && sum > bound {
				return fmt.Errorf("corpus: %s:%d: more than %s of documents, the bound on documents read at once", path, n, rusage.Bound(total))
			}
			rec++
			d := Doc{Rec: rec, ID: id}
			if rec > skip {
				d.Text = *r.Text
				// encoding/json reads a byte that is not UTF-8, and an
				// escaped lone surrogate, as U+FFFD without a word: look
				// at the line as it was.
				checkJSONText(&d, line, "line "+strconv.Itoa(n))
			}
			return fn(d)
		})
	}
	return s
}

// errFound stops a walk that found what it looked for.
var errFound = errors.New("found")
