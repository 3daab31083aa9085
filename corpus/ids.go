package corpus

import (
	"bufio"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/linearize/linearize/internal/fsutil"
	"github.com/linearize/linearize/internal/idset"
)

// idCheck finds the ids of a JSONL input used twice. It keeps an
// 8-byte fingerprint of each id (idset.Set: 11 to 21 bytes an id, off
// Go's heap) and confirms a fingerprint seen before against the ids
// themselves: for a regular file by reading it again up to that line;
// for stdin or a pipe, which cannot be read again, in a spool of every
// id and its line written to a temporary file as they come (removed at
// once where the system allows, so that not even a kill -9 leaves it).
// Where no temporary file can be made, it keeps 16 bytes of each id's
// SHA-256 and its line instead (about 53 bytes an id).
type idCheck struct {
	path    string
	maxLine int
	fps     *idset.Set
	spool   *os.File
	w       *bufio.Writer
	lines   map[[16]byte]int
}

func newIDCheck(path string, maxLine int) *idCheck {
	if st, err := os.Stat(path); path != "-" && err == nil && st.Mode().IsRegular() {
		return &idCheck{path: path, maxLine: maxLine, fps: new(idset.Set)}
	}
	f, err := os.CreateTemp("", "linearize-ids-*")
	if err != nil {
		return &idCheck{path: path, maxLine: maxLine, lines: map[[16]byte]int{}}
	}
	if runtime.GOOS != "windows" {
		os.Remove(f.Name()) // the open file lives on, nameless
	}
	return &idCheck{path: path, maxLine: maxLine, fps: new(idset.Set), spool: f, w: bufio.NewWriterSize(f, 1<<16)}
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
		sc.Buffer(make([]byte, 0, 64<<10), c.maxLine+32)
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
	err = eachLine(f, c.path, c.maxLine, 0, func(k int, line string) error {
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
