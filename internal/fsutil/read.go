package fsutil

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/linearize/linearize/internal/rusage"
)

// WaitingForWriter, when set, is called with the path of a named pipe
// (FIFO) that Open has waited on for a moment: opening a FIFO for
// reading blocks until a program opens it for writing, and a command
// that waits must say so rather than hang in silence. The commands set
// it to print a line on stderr.
var WaitingForWriter func(path string)

// waitNoticeAfter is how long Open waits on a FIFO before it calls
// WaitingForWriter (tests shorten it).
var waitNoticeAfter = 300 * time.Millisecond

// Open opens path for reading, as os.Open does; when path is a FIFO
// whose open has not returned after a moment (no writer yet), it calls
// WaitingForWriter while it goes on waiting. Before the first read in a
// folder, it completes the WriteSet commits that ended writers left
// there (RecoverSets), so that a reader never sees half of a set a kill
// -9 interrupted.
func Open(path string) (*os.File, error) {
	recoverOnce(filepath.Dir(path))
	if WaitingForWriter != nil {
		if st, err := os.Stat(path); err == nil && st.Mode()&os.ModeNamedPipe != 0 {
			notice := WaitingForWriter
			t := time.AfterFunc(waitNoticeAfter, func() { notice(path) })
			defer t.Stop()
		}
	}
	return os.Open(path)
}

// recovered holds the folders RecoverSets has run in for a read.
var recovered sync.Map

// recoverOnce runs RecoverSets in dir the first time this process reads
// there: the journals it finds are those of writers gone before it
// started, and a folder of many parts is read once per file.
func recoverOnce(dir string) {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	if _, done := recovered.LoadOrStore(dir, true); !done {
		RecoverSets(dir)
	}
}

// RecoverSets completes, in dir, the WriteSet commits of writers that no
// longer run (a kill -9 or a power cut mid-commit): back to the old set
// before the commit point, on to the new one after it; it returns the
// journals completed. Writes do this in their folder first; Open before
// the first read in a folder.
func RecoverSets(dir string) []string { return recoverSets(dir) }

// TooLargeError is the error of an input past its bound
// (rusage.ReadBound): Size is its size when known (a regular file,
// refused before any byte is read), else -1 (a pipe or a device, refused
// once more than Bound bytes were read).
type TooLargeError struct {
	Path  string
	Size  int64
	Bound int64
	What  string // the bound in words (rusage.Bound)
}

func (e *TooLargeError) Error() string {
	if e.Size >= 0 {
		return fmt.Sprintf("%s: %d bytes is larger than the bound on this input, %s", e.Path, e.Size, e.What)
	}
	return fmt.Sprintf("%s: longer than the bound on this input, %s; refused without reading further", e.Path, e.What)
}

// ErrTooLarge is matched by errors.Is for a *TooLargeError.
var ErrTooLarge = errors.New("input larger than its bound")

func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }

func tooLarge(path string, size, limit int64) *TooLargeError {
	return &TooLargeError{Path: path, Size: size, Bound: rusage.ReadBound(limit), What: rusage.Bound(limit)}
}

// ReadFile reads the file at path (Open: a FIFO without a writer is
// announced) to its end, at most rusage.ReadBound(limit) bytes: a
// regular file larger than that is refused before any byte is read; a
// pipe or a device (no size to trust) is read in pieces and refused as
// soon as it passes the bound, so that /dev/zero costs the bound, not
// the process. Errors name path; a file past the bound is a
// *TooLargeError.
func ReadFile(path string, limit int64) ([]byte, error) {
	f, st, err := OpenFile(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadAll(f, path, st, limit)
}

// OpenFile opens path with Open and returns the file with its Stat, for
// a read such as ReadFile's: a folder is refused ("PATH is a
// directory"). The caller closes the file.
func OpenFile(path string) (*os.File, os.FileInfo, error) {
	f, st, err := OpenStat(path)
	if err == nil && st.IsDir() {
		f.Close()
		return nil, nil, fmt.Errorf("%s is a directory", path)
	}
	return f, st, err
}

// OpenStat opens path with Open and returns the file with its Stat (the
// file closed again when Stat fails). The caller closes the file.
func OpenStat(path string) (*os.File, os.FileInfo, error) {
	return openStat(Open, path)
}

func openStat(open func(string) (*os.File, error), path string) (*os.File, os.FileInfo, error) {
	f, err := open(path)
	if err != nil {
		return nil, nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, st, nil
}

// ReadAll is ReadFile for a file already open; st is its Stat.
func ReadAll(f io.Reader, path string, st os.FileInfo, limit int64) ([]byte, error) {
	bound := rusage.ReadBound(limit)
	if st != nil && st.Mode().IsRegular() {
		if st.Size() > bound {
			return nil, tooLarge(path, st.Size(), limit)
		}
		// The size is known: one buffer of it (and a byte to see the
		// end), unless the file grew meanwhile.
		buf := make([]byte, st.Size()+1)
		n, err := io.ReadFull(f, buf)
		switch err {
		case io.EOF, io.ErrUnexpectedEOF:
			return buf[:n], nil
		case nil:
			rest, err := readPieces(f, path, limit, bound-int64(n))
			if err != nil {
				var tl *TooLargeError
				if errors.As(err, &tl) {
					tl.Size = -1
				}
				return nil, err
			}
			return append(buf, rest...), nil
		default:
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
	}
	return readPieces(f, path, limit, bound)
}

// readPieces reads r to its end in pieces of at most 4 MiB, failing
// with a *TooLargeError once more than bound bytes came: what a refused
// input costs is the bound and a piece, never more.
func readPieces(r io.Reader, path string, limit, bound int64) ([]byte, error) {
	var pieces [][]byte
	var total int64
	for {
		p := make([]byte, min(4<<20, bound+1-total))
		n, err := io.ReadFull(r, p)
		total += int64(n)
		pieces = append(pieces, p[:n])
		if total > bound {
			return nil, tooLarge(path, -1, limit)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
	}
	if len(pieces) == 1 {
		return pieces[0], nil
	}
	data := make([]byte, 0, total)
	for _, p := range pieces {
		data = append(data, p...)
	}
	return data, nil
}

// ReadRegular reads the regular file at path whole when it holds at most
// limit bytes: a small file beside a model (a configuration). Unlike
// ReadFile, limit is not lowered to a memory bound (rusage) and the file
// is opened with os.Open, not Open. A missing file matches
// fs.ErrNotExist. A path that is not a regular file (a folder, a FIFO, a
// device) and a larger file are refused with an error that says so ("not
// a regular file", "larger than limit bytes") and matches ErrRefused.
func ReadRegular(path string, limit int64) ([]byte, error) {
	f, st, err := openStat(os.Open, path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if !st.Mode().IsRegular() {
		return nil, refusal("not a regular file")
	}
	tooLarge := refusal(fmt.Sprintf("larger than %d bytes", limit))
	if st.Size() > limit {
		return nil, tooLarge
	}
	// The file may have grown since Stat.
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, tooLarge
	}
	return data, nil
}

// ErrRefused is matched by errors.Is for the files ReadRegular refuses.
var ErrRefused = errors.New("file refused")

// refusal is an error of ReadRegular that matches ErrRefused.
type refusal string

func (r refusal) Error() string { return string(r) }

func (refusal) Is(target error) bool { return target == ErrRefused }

// LimitReader reads r, failing with a *TooLargeError for path once more
// than rusage.ReadBound(limit) bytes came: for inputs read a line at a
// time, whose total would otherwise be bounded by nothing.
func LimitReader(r io.Reader, path string, limit int64) *Limited {
	return &Limited{r: r, path: path, limit: limit, left: rusage.ReadBound(limit)}
}

// Limited is the reader LimitReader returns.
type Limited struct {
	r     io.Reader
	path  string
	limit int64
	left  int64
}

// Exceeded is the *TooLargeError once the input passed its bound, else
// nil. (A bufio.Scanner hands on the part of a line read before the
// error as a last line: Exceeded tells its reader the line is cut.)
func (l *Limited) Exceeded() error {
	if l.left < 0 {
		return tooLarge(l.path, -1, l.limit)
	}
	return nil
}

func (l *Limited) Read(p []byte) (int, error) {
	if err := l.Exceeded(); err != nil {
		return 0, err
	}
	if int64(len(p)) > l.left+1 {
		p = p[:l.left+1]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	if err := l.Exceeded(); err != nil {
		// Past the bound: the bytes are not handed on.
		return 0, err
	}
	return n, err
}
