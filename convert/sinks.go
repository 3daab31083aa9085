package convert

import (
	"errors"
	"fmt"
	"strings"
)

// Sinks is a set of sink tokens, the keys every query sees exactly: the
// first token ([CLS]), the last valid one ([SEP]), both, or none. The
// zero value is unset: the options' default (DefaultSinks for
// LocalPooledOptions and the pooled Linformer, none for LongOptions);
// NoSinks asks for none explicitly. Its text form is the --sinks flag's:
// "first,last", "first", "last" or "none" ("" unset); it implements
// flag.Value and encoding.TextMarshaler with it.
type Sinks uint8

// The sink tokens.
const (
	SinkFirst Sinks = 1 << iota // the first token ([CLS])
	SinkLast                    // the last valid token ([SEP])
	NoSinks                     // none, set explicitly
	// DefaultSinks is what an unset Sinks of LocalPooledOptions and of
	// the pooled Linformer keeps exact: [CLS] and the last valid token.
	DefaultSinks = SinkFirst | SinkLast
)

// ParseSinks reads a sinks value: "first,last" (or "last,first"),
// "first", "last", "none", or "" (unset).
func ParseSinks(s string) (Sinks, error) {
	switch strings.TrimSpace(s) {
	case "":
		return 0, nil
	case "none":
		return NoSinks, nil
	}
	var out Sinks
	for _, f := range strings.Split(s, ",") {
		switch strings.TrimSpace(f) {
		case "first":
			out |= SinkFirst
		case "last":
			out |= SinkLast
		default:
			return 0, fmt.Errorf("convert: sinks %q: want none, first, last or first,last", s)
		}
	}
	return out, nil
}

// sinksOf is the set of the two flags an op's attributes hold.
func sinksOf(first, last bool) Sinks {
	var s Sinks
	if first {
		s |= SinkFirst
	}
	if last {
		s |= SinkLast
	}
	if s == 0 {
		return NoSinks
	}
	return s
}

// Or returns s, or def when s is unset.
func (s Sinks) Or(def Sinks) Sinks {
	if s == 0 {
		return def
	}
	return s
}

// First and Last report whether the set holds the first or the last
// token.
func (s Sinks) First() bool { return s&SinkFirst != 0 }
func (s Sinks) Last() bool  { return s&SinkLast != 0 }

// Count is the number of sink tokens: 0, 1 or 2 (0 when unset).
func (s Sinks) Count() int {
	n := 0
	for _, on := range []bool{s.First(), s.Last()} {
		if on {
			n++
		}
	}
	return n
}

// valid reports whether s is unset, NoSinks or a non-empty set of first
// and last.
func (s Sinks) valid() bool {
	return s <= DefaultSinks || s == NoSinks
}

// check is the options' check of s: an error naming field Sinks of op's
// options when s is not a valid set.
func (s Sinks) check(op string) error {
	if !s.valid() {
		return optionError(op, "Sinks", fmt.Sprintf("%v: want none, first, last or first,last", s))
	}
	return nil
}

// String writes s as ParseSinks reads it.
func (s Sinks) String() string {
	switch s {
	case 0:
		return ""
	case NoSinks:
		return "none"
	case SinkFirst:
		return "first"
	case SinkLast:
		return "last"
	case DefaultSinks:
		return "first,last"
	}
	return fmt.Sprintf("Sinks(%d)", uint8(s))
}

// Set parses v into s (flag.Value; the flag package names the value and
// the flag in its error).
func (s *Sinks) Set(v string) error {
	p, err := ParseSinks(v)
	if err != nil {
		return errors.New("want none, first, last or first,last")
	}
	*s = p
	return nil
}

// MarshalText writes s as String does.
func (s Sinks) MarshalText() ([]byte, error) {
	if !s.valid() {
		return nil, fmt.Errorf("convert: %v is not a set of sinks", s)
	}
	return []byte(s.String()), nil
}

// UnmarshalText reads s as ParseSinks does.
func (s *Sinks) UnmarshalText(b []byte) error {
	p, err := ParseSinks(string(b))
	if err != nil {
		return err
	}
	*s = p
	return nil
}
