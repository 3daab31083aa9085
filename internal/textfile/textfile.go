package textfile

import (
	"bufio"
	"errors"
	"fmt"
	"strings"

	"github.com/linearize/linearize/internal/fsutil"
)

// MaxTexts bounds the texts of one file.
const MaxTexts = 1 << 16

// MaxLine bounds one line (one text).
const MaxLine = 1 << 20

// MaxBytes bounds a whole file, together with half the memory the
// process may use (rusage.ReadBound): 65536 lines of 1 MiB would be 64
// GiB.
const MaxBytes = 1 << 30

// Read reads one text per line from path: a trailing "\r" is dropped and
// blank lines are skipped; a file without texts, or with more than
// MaxTexts, a line over MaxLine bytes or more than MaxBytes in all (less
// when the process may use less memory: rusage.ReadBound) is an error. A
// FIFO without a writer is announced (fsutil.Open). Errors name path,
// and the line and the bound at fault.
func Read(path string) ([]string, error) {
	f, err := fsutil.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(fsutil.LimitReader(f, path, MaxBytes))
	sc.Buffer(make([]byte, 0, 64<<10), MaxLine)
	var texts []string
	n := 0
	for sc.Scan() {
		n++
		s := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(s) == "" {
			continue
		}
		if len(texts) == MaxTexts {
			return nil, fmt.Errorf("%s: more than %d texts", path, MaxTexts)
		}
		texts = append(texts, s)
	}
	if err := sc.Err(); err != nil {
		return nil, ScanError(path, n+1, MaxLine, err)
	}
	if len(texts) == 0 {
		return nil, fmt.Errorf("%s: no texts (one per line)", path)
	}
	return texts, nil
}

// ScanError words an error of a bufio.Scanner reading path, whose line
// line it was reading: a line over maxLine bytes names the line and the
// bound (bufio's own message names neither); an input past its bound
// (fsutil.LimitReader) says so itself.
func ScanError(path string, line, maxLine int, err error) error {
	if errors.Is(err, bufio.ErrTooLong) {
		return fmt.Errorf("%s:%d: line longer than %d bytes, the bound on one line", path, line, maxLine)
	}
	if errors.Is(err, fsutil.ErrTooLarge) {
		return fmt.Errorf("%w (at line %d)", err, line)
	}
	return fmt.Errorf("%s:%d: %w", path, line, err)
}
