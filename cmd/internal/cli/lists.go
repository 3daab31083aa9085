package cli

import (
	"flag"

	"github.com/linearize/linearize/cmd/internal/cliutil"
)

// Ints parses the integer list flag name (cliutil.Ints: K and M suffixes,
// ranges when l allows them); a bad value is a usage error naming the
// flag.
func Ints(name, value string, l cliutil.IntList) ([]int, error) {
	v, err := cliutil.Ints(name, value, l)
	if err != nil {
		return nil, &ExitError{ExitUsage, err}
	}
	return v, nil
}

// StrList splits a comma-separated flag value into its trimmed, non-empty
// items.
func StrList(s string) []string { return cliutil.Strings(s) }

// namedString is a flag.Value for a string type of the library (an
// option such as features.Kind), so the flag sets the typed field directly.
type namedString[T ~string] struct{ p *T }

func (f namedString[T]) String() string {
	if f.p == nil {
		return ""
	}
	return string(*f.p)
}

func (f namedString[T]) Set(s string) error { *f.p = T(s); return nil }

// stringValued marks the flag as holding a string (see printFlags).
func (namedString[T]) stringValued() {}

// TypedVar defines a string flag stored in a field of a named string type.
func TypedVar[T ~string](fs *flag.FlagSet, p *T, name string, value T, usage string) {
	*p = value
	fs.Var(namedString[T]{p}, name, usage)
}

// stringLike is a flag.Value of the library that reads and writes itself
// as a string (convert.Sinks), shown as a string flag is.
type stringLike struct{ flag.Value }

// stringValued marks the flag as holding a string (see printFlags).
func (stringLike) stringValued() {}

// StringLikeVar defines a flag whose value v (a pointer to a library
// type such as *convert.Sinks) parses its own string form; its current
// value is the default, shown quoted as a string flag's.
func StringLikeVar(fs *flag.FlagSet, v flag.Value, name, usage string) {
	fs.Var(stringLike{v}, name, usage)
}

// TypedList converts the items of a comma-separated flag value.
func TypedList[T ~string](s string) []T {
	var out []T
	for _, v := range StrList(s) {
		out = append(out, T(v))
	}
	return out
}
