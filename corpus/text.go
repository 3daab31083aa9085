package corpus

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/linearize/linearize/internal/fsutil"
	"github.com/linearize/linearize/internal/rusage"
)

// bom is the UTF-8 byte order mark, dropped at the start of a file.
const bom = "\uFEFF"

// eachLine calls fn with every line of r (numbered from 1, without its
// "\r\n" or "\n", line 1 without a byte order mark), with a bound of
// total bytes on all of them (0: none); each line is at most maxLine
// bytes, or half the memory the process may use when that is less. An
// error names path, the line and the bound.
func eachLine(r io.Reader, path string, maxLine int, total int64, fn func(n int, line string) error) error {
	var lr *fsutil.Limited
	if total > 0 {
		lr = fsutil.LimitReader(r, path, total)
		r = lr
	}
	// Streamed, the line is what is held: half the memory the process
	// may use bounds it too.
	lineMax, memBound := maxLine, false
	if b := rusage.ReadBound(int64(maxLine)); b < int64(maxLine) {
		lineMax, memBound = int(b), true
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, min(64<<10, lineMax)), lineMax)
	n := 1
	for ; sc.Scan(); n++ {
		line := strings.TrimSuffix(sc.Text(), "\r")
		if n == 1 {
			line = strings.TrimPrefix(line, bom)
		}
		if err := fn(n, line); err != nil {
			if lr != nil && lr.Exceeded() != nil {
				break // the line was cut at the bound: say that instead
			}
			return err
		}
	}
	if err := sc.Err(); err != nil {
		if memBound && errors.Is(err, bufio.ErrTooLong) {
			err = &fsutil.TooLargeError{Path: path, Size: -1, Bound: int64(lineMax), What: rusage.Bound(int64(maxLine))}
			return fmt.Errorf("corpus: %w (at line %d)", err, n)
		}
		return scanError(path, n, maxLine, err)
	}
	return nil
}

// scanError words an error of a bufio.Scanner reading path at line
// line: a line over maxLine bytes names the line and the bound (bufio's
// own message names neither); an input past its bound
// (fsutil.LimitReader) says so itself.
func scanError(path string, line, maxLine int, err error) error {
	if errors.Is(err, bufio.ErrTooLong) {
		return fmt.Errorf("corpus: %s:%d: line longer than %d bytes, the bound on one line", path, line, maxLine)
	}
	if errors.Is(err, fsutil.ErrTooLarge) {
		return fmt.Errorf("corpus: %w (at line %d)", err, line)
	}
	return fmt.Errorf("corpus: %s:%d: %w", path, line, err)
}

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

// checkUTF8 marks d bad when raw, the text as read, is not UTF-8: a
// tokenizer would read each bad byte as U+FFFD and drop it, and a
// Latin-1 page would embed as a quietly different text. where says what
// the offset counts in.
func checkUTF8(d *Doc, raw, where string) {
	if at := invalidUTF8(raw); at >= 0 {
		d.Bad = fmt.Sprintf("%s: byte %d of %s is not UTF-8 (convert the file to UTF-8, e.g. iconv -f latin1 -t utf-8)", InvalidUTF8, at, where)
	}
}

// checkJSONText marks d bad when the JSON line it was read from is not
// text: a byte that is not UTF-8 (checkUTF8), or an escaped lone
// surrogate ("\ud800" with no low surrogate after it, or a low one with
// no high one before), which is half of a UTF-16 pair and no character;
// the first of them by byte offset is named. Either is invalid UTF-8
// (the text cannot be written in UTF-8).
func checkJSONText(d *Doc, line, where string) {
	bad, sur := invalidUTF8(line), loneSurrogate(line)
	if sur < 0 || bad >= 0 && bad < sur {
		checkUTF8(d, line, where)
		return
	}
	d.Bad = fmt.Sprintf("%s: byte %d of %s is %s, an escaped lone surrogate (half of a UTF-16 pair, no character; fix the exporter that wrote it)",
		InvalidUTF8, sur, where, line[sur:sur+6])
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
