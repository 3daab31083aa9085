// Package cliutil holds the parsing that every command of both binaries
// (convert, linlab) shares:
// comma-separated integer lists with K/M suffixes and ranges, and string
// lists.
//
// Its errors are *FlagError values. Unlike the library packages they
// start with the flag's name (--seq-lens "4X": ...) rather than a
// package prefix: they are shown to the person who typed the flag, after
// the command's own "convert NAME:" (or "linlab NAME:") prefix.
package cliutil

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// FlagError is a flag value that does not parse or is out of bounds.
type FlagError struct {
	Flag  string // the flag's name without dashes, e.g. "seq-lens"
	Value string // the offending item, or the whole value
	Msg   string
}

func (e *FlagError) Error() string {
	return fmt.Sprintf("--%s %q: %s", e.Flag, e.Value, e.Msg)
}

// IntList says what an integer list flag accepts.
type IntList struct {
	// Min and Max bound every element (inclusive). Max 0 means
	// math.MaxInt32.
	Min, Max int
	// Ranges accepts LO-HI items (both ends included), expanded in order.
	Ranges bool
	// MaxItems bounds the number of elements after expansion, checked
	// before a range is expanded; 0 means 1<<16.
	MaxItems int
	// Empty accepts a value with no items (the result is nil).
	Empty bool
}

// DefaultMaxItems is the default IntList.MaxItems.
const DefaultMaxItems = 1 << 16

// Ints parses the value of flag name (without dashes): comma-separated
// items, each an integer with an optional K (×1024) or M (×1024²) suffix,
// upper or lower case, or with l.Ranges a range LO-HI of such integers.
// Blank items are skipped. Every element is checked against l's bounds
// before anything is expanded, so that a typo such as 0-50000000 costs
// nothing.
func Ints(name, value string, l IntList) ([]int, error) {
	maxV := l.Max
	if maxV == 0 {
		maxV = math.MaxInt32
	}
	maxItems := l.MaxItems
	if maxItems <= 0 {
		maxItems = DefaultMaxItems
	}
	bad := func(item, format string, a ...any) error {
		return &FlagError{Flag: name, Value: item, Msg: fmt.Sprintf(format, a...)}
	}
	want := l.describe(maxV)
	var out []int
	for _, item := range strings.Split(value, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		lo, hi := item, ""
		isRange := false
		if l.Ranges {
			// A leading '-' is a sign, not a range.
			if i := strings.Index(item[1:], "-"); i >= 0 {
				lo, hi, isRange = item[:i+1], item[i+2:], true
			}
		}
		a, ok := parseInt(lo)
		if !ok {
			return nil, bad(item, "want %s", want)
		}
		b := a
		if isRange {
			if b, ok = parseInt(hi); !ok {
				return nil, bad(item, "want %s", want)
			}
			if b < a {
				return nil, bad(item, "range %d-%d is empty (want LO-HI with LO ≤ HI)", a, b)
			}
		}
		if a < l.Min || b > maxV {
			n := a
			if a >= l.Min {
				n = b
			}
			return nil, bad(item, "%d is out of bounds (want %s)", n, want)
		}
		if b-a >= maxItems-len(out) {
			return nil, bad(item, "more than %d items", maxItems)
		}
		for v := a; v <= b; v++ {
			out = append(out, v)
		}
	}
	if len(out) == 0 && !l.Empty {
		return nil, bad(value, "no items (want %s)", want)
	}
	return out, nil
}

// Int parses one integer value of flag name with an optional K or M
// suffix, between min and max inclusive (max 0: math.MaxInt32).
func Int(name, value string, min, max int) (int, error) {
	if max == 0 {
		max = math.MaxInt32
	}
	want := fmt.Sprintf("want an integer ≥ %d such as 512 or 4K", min)
	if max != math.MaxInt32 {
		want = fmt.Sprintf("want an integer in %d..%d", min, max)
	}
	n, ok := parseInt(strings.TrimSpace(value))
	if !ok || n < min || n > max {
		return 0, &FlagError{Flag: name, Value: value, Msg: want}
	}
	return n, nil
}

// describe says what l accepts, for messages.
func (l IntList) describe(maxV int) string {
	var s string
	switch {
	case l.Min == 1 && maxV == math.MaxInt32:
		s = "positive integers"
	case l.Min == 0 && maxV == math.MaxInt32:
		s = "non-negative integers"
	default:
		s = fmt.Sprintf("integers in %d..%d", l.Min, maxV)
	}
	s += " such as 512,4K"
	if l.Ranges {
		s += " or ranges LO-HI"
	}
	return s + ", separated by commas"
}

// parseInt reads an integer with an optional K or M suffix; it refuses
// values that overflow an int32 once multiplied.
func parseInt(s string) (int, bool) {
	mul := int64(1)
	switch {
	case strings.HasSuffix(s, "k") || strings.HasSuffix(s, "K"):
		mul, s = 1<<10, s[:len(s)-1]
	case strings.HasSuffix(s, "m") || strings.HasSuffix(s, "M"):
		mul, s = 1<<20, s[:len(s)-1]
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v > math.MaxInt32/mul || v < math.MinInt32/mul {
		return 0, false
	}
	return int(v * mul), true
}

// Strings splits a comma-separated flag value into its trimmed, non-empty
// items.
func Strings(value string) []string {
	var out []string
	for _, f := range strings.Split(value, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
