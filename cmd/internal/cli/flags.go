package cli

import (
	"errors"
	"flag"
	"io"
	"reflect"
	"regexp"
	"runtime"
	"strings"

	"github.com/linearize/linearize/infer"
)

// ParseFlags parses args with fs, allowing flags and positional arguments
// in any order, and returns the positional arguments. On -h/--help it
// prints the usage of the command named fs.Name() to stdout and returns
// flag.ErrHelp.
func ParseFlags(fs *flag.FlagSet, args []string, stdout io.Writer) ([]string, error) {
	fs.SetOutput(io.Discard)
	if fs.Lookup("ort-lib") == nil {
		fs.Func("ort-lib", "`PATH` of the onnxruntime shared library (default: $"+infer.LibraryEnv+", beside the executable, the repository's .tools/lib, system library folders)", func(p string) error {
			infer.SetLibraryPath(p)
			return nil
		})
	}
	if fs.Lookup("stats") == nil {
		fs.BoolVar(&printStats, "stats", false, "print wall time and peak memory (max RSS) to stderr when the command ends")
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				commandUsage(stdout, commands[fs.Name()], fs, fullHelp)
				if HelpShown != nil {
					HelpShown(fs)
				}
				return nil, err
			}
			return nil, UsageError("%s", flagNameInError.ReplaceAllStringFunc(err.Error(), func(m string) string {
				i := strings.LastIndex(m, " -")
				return m[:i+1] + FlagSpelling(m[i+2:])
			}))
		}
		args = fs.Args()
		if len(args) == 0 || args[0] == "--" {
			if err := vetThreads(fs); err != nil {
				return nil, err
			}
		}
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// MaxThreads bounds every command's --threads: 4 threads per CPU is
// already past any speed-up, and each thread costs memory; at least 8, so
// that a small container accepts what a script written for a laptop asks,
// and at most 256.
func MaxThreads() int {
	return min(max(4*runtime.NumCPU(), 8), 256)
}

// vetThreads checks the --threads flag of any command that has one, when
// its flags are parsed: not negative, at most MaxThreads().
func vetThreads(fs *flag.FlagSet) error {
	f := fs.Lookup("threads")
	if f == nil {
		return nil
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return nil
	}
	n, ok := g.Get().(int)
	switch {
	case !ok:
		return nil
	case n < 0:
		return UsageError("--threads must be non-negative")
	case n > MaxThreads():
		return UsageError("--threads %d: at most %d (4 per CPU, at least 8, at most 256; this machine has %d CPUs)", n, MaxThreads(), runtime.NumCPU())
	}
	return nil
}

// ParseModelArg is ParseFlags for a command that takes exactly one MODEL
// argument; it returns that argument.
func ParseModelArg(fs *flag.FlagSet, args []string, stdout io.Writer) (string, error) {
	pos, err := ParseFlags(fs, args, stdout)
	if err != nil {
		return "", err
	}
	if len(pos) != 1 {
		return "", UsageError("want exactly one MODEL argument, got %d", len(pos))
	}
	return pos[0], nil
}

// flagNameInError finds the flag in the flag package's parse errors
// ("invalid value "x" for flag -name: ...", "invalid boolean value "x"
// for -name: ...", "flag provided but not defined: -name", "flag needs an
// argument: -name"), which ParseFlags spells as the usage texts do.
var flagNameInError = regexp.MustCompile(`(for flag|for|not defined:|an argument:) -[^\s:=]+`)

// HelpShown, when set (by tests), sees the flag set of every command
// whose --help is printed.
var HelpShown func(*flag.FlagSet)

// MultiFlag collects a repeated string flag.
type MultiFlag []string

func (m *MultiFlag) String() string     { return strings.Join(*m, ",") }
func (m *MultiFlag) Set(v string) error { *m = append(*m, v); return nil }

// shortFlags are the flags written with one dash: -o (output) and -q
// (quiet), as in most tools; every other flag is written --NAME.
var shortFlags = map[string]bool{"o": true, "q": true}

// FlagSpelling is how usage texts write the flag name.
func FlagSpelling(name string) string {
	if shortFlags[name] {
		return "-" + name
	}
	return "--" + name
}

// stringValued reports whether a flag holds a string (its default is
// shown quoted): a flag.String, or a TypedVar.
func stringValued(v flag.Value) bool {
	if _, ok := v.(interface{ stringValued() }); ok {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.Elem().Kind() == reflect.String
}
