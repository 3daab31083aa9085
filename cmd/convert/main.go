// Command convert turns BERT-style ONNX transformers into linear-attention
// models and runs, compares and benchmarks them. Each subcommand lives in
// its own file (cmd_*.go) and registers itself; the work is done by the
// library packages (convert, infer, ops, models).
//
// Exit codes, by the class of the error:
//
//	0 success (and -h/--help);
//	1 usage: the command line is wrong whatever the files it names hold —
//	  an unknown flag, a missing or extra argument, a flag value that is
//	  malformed, out of range or not one of its choices, flags that cannot
//	  be combined, -o naming the input without --overwrite;
//	2 bad input: a file the command line names is missing, unreadable or
//	  invalid (model, input or text file, tokenizer, -o's folder), or the
//	  model does not fit the flags (nothing to convert, a --layers index
//	  past its blocks, an input it does not have), or the native backend
//	  refused a tensor the model asks for beyond the tensor budget
//	  (ops.MaxTensorBytes, $LINEARIZE_MAX_TENSOR_BYTES);
//	3 runtime failure: a backend failed, backends or ops disagree beyond
//	  --tolerance;
//	129, 130, 143 (128 + the signal's number): stopped by SIGHUP, SIGINT
//	  (Ctrl-C) or SIGTERM; the temporary file of an output being written
//	  is removed first, and the output itself is left as it was.
//
// Outputs are written to a temporary file beside them and renamed into
// place (internal/fsutil); one that a kill -9 leaves is removed by the
// next write to the same output.
//
// Every command's --threads is at most maxThreads(): 4 × the CPUs, at
// least 8, at most 256 (more threads only cost memory; 100000 once took
// 6.6 GB before any work).
//
// Commands classify library errors with errors.Is/As on the libraries'
// sentinels (convert.ErrInvalidOption, convert.ErrNothingConverted,
// infer.ErrFeedValue, ...), never by their text.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"reflect"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/internal/benchrun"
	"github.com/linearize/linearize/internal/fsutil"
	"github.com/linearize/linearize/ops"
)

// Exit codes.
const (
	exitOK       = 0
	exitUsage    = 1
	exitBadInput = 2
	exitRuntime  = 3
)

type command struct {
	name    string
	summary string
	usage   string // the synopsis after "convert NAME"
	run     func(args []string, stdout io.Writer) error
	// rewrites marks a command that only reads, rewrites and writes a
	// model: its live memory is the model plus one tensor (see
	// boundMemory).
	rewrites bool
}

var commands = map[string]*command{}

func register(c *command) { commands[c.name] = c }

// exitError carries an exit code with an error.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageError(format string, a ...any) error {
	return &exitError{exitUsage, fmt.Errorf(format, a...)}
}

// optionError gives an error of the convert package its exit code: an
// option error (convert.ErrInvalidOption) is a usage error, worded with
// the flag that set the field (flagOf maps convert.OptionError.Field to
// a flag name; a field it lacks is named as the library names it); any
// other error is bad input (the model does not fit the flags, or
// nothing converted).
func optionError(err error, flagOf map[string]string) error {
	if err == nil {
		return nil
	}
	var oe *convert.OptionError
	if !errors.As(err, &oe) {
		return badInput(err)
	}
	if name := flagOf[oe.Field]; name != "" {
		return usageError("--%s %s", name, oe.Msg)
	}
	return &exitError{exitUsage, err}
}

func badInput(err error) error {
	if err == nil {
		return nil
	}
	return &exitError{exitBadInput, err}
}
func runtimeFailure(err error) error {
	if err == nil {
		return nil
	}
	return &exitError{exitRuntime, err}
}

// parseFlags parses args with fs, allowing flags and positional arguments
// in any order, and returns the positional arguments. On -h/--help it
// prints the usage of the command named fs.Name() to stdout and returns
// flag.ErrHelp.
func parseFlags(fs *flag.FlagSet, args []string, stdout io.Writer) ([]string, error) {
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
				commandUsage(stdout, commands[fs.Name()], fs)
				if helpShown != nil {
					helpShown(fs)
				}
				return nil, err
			}
			return nil, usageError("%s", flagNameInError.ReplaceAllStringFunc(err.Error(), func(m string) string {
				i := strings.LastIndex(m, " -")
				return m[:i+1] + flagSpelling(m[i+2:])
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

// maxThreads bounds every command's --threads: 4 threads per CPU is
// already past any speed-up, and each thread costs memory; at least 8, so
// that a small container accepts what a script written for a laptop asks,
// and at most 256.
func maxThreads() int {
	return min(max(4*runtime.NumCPU(), 8), 256)
}

// vetThreads checks the --threads flag of any command that has one, when
// its flags are parsed: not negative, at most maxThreads().
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
		return usageError("--threads must be non-negative")
	case n > maxThreads():
		return usageError("--threads %d: at most %d (4 per CPU, at least 8, at most 256; this machine has %d CPUs)", n, maxThreads(), runtime.NumCPU())
	}
	return nil
}

// parseModelArg is parseFlags for a command that takes exactly one MODEL
// argument; it returns that argument.
func parseModelArg(fs *flag.FlagSet, args []string, stdout io.Writer) (string, error) {
	pos, err := parseFlags(fs, args, stdout)
	if err != nil {
		return "", err
	}
	if len(pos) != 1 {
		return "", usageError("want exactly one MODEL argument, got %d", len(pos))
	}
	return pos[0], nil
}

// flagNameInError finds the flag in the flag package's parse errors
// ("invalid value "x" for flag -name: ...", "invalid boolean value "x"
// for -name: ...", "flag provided but not defined: -name", "flag needs an
// argument: -name"), which parseFlags spells as the usage texts do.
var flagNameInError = regexp.MustCompile(`(for flag|for|not defined:|an argument:) -[^\s:=]+`)

// helpShown, when set (by tests), sees the flag set of every command
// whose --help is printed.
var helpShown func(*flag.FlagSet)

// multiFlag collects a repeated string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func mainUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: convert COMMAND [flags] ...")
	fmt.Fprintln(w, "\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-18s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'convert COMMAND -h' for a command's flags.")
	fmt.Fprintln(w, exitCodesHelp)
}

// exitCodesHelp ends every usage text (see the package comment).
const exitCodesHelp = "Exit codes: 0 ok, 1 usage (unknown flag, bad flag value or argument), 2 bad input (a file, its data, or a model the flags do not fit or that asks for more memory than the tensor budget), 3 runtime failure, 129/130/143 stopped by SIGHUP/SIGINT/SIGTERM."

// shortFlags are the flags written with one dash: -o (output) and -q
// (quiet), as in most tools; every other flag is written --NAME.
var shortFlags = map[string]bool{"o": true, "q": true}

// flagSpelling is how usage texts write the flag name.
func flagSpelling(name string) string {
	if shortFlags[name] {
		return "-" + name
	}
	return "--" + name
}

// commandUsage prints a command's usage: the synopsis (positional
// arguments and required flags, then "[flags]"), the summary, and every
// flag with its value name (the `backquoted` word of its help, else its
// type), help and default.
func commandUsage(w io.Writer, c *command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: convert %s %s\n\n%s\n", c.name, c.usage, c.summary)
	if fs != nil {
		fmt.Fprintln(w, "\nflags:")
		printFlags(w, fs)
	}
	fmt.Fprintf(w, "\n%s\n", exitCodesHelp)
}

// printFlags is flag.PrintDefaults with flags spelled as the usage texts
// spell them (flagSpelling).
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		line := "  " + flagSpelling(f.Name)
		if name != "" {
			line += " " + name
		}
		fmt.Fprintf(w, "%s\n    \t%s", line, strings.ReplaceAll(usage, "\n", "\n    \t"))
		switch def := f.DefValue; {
		case def == "" || def == "0" || def == "false":
		case stringValued(f.Value):
			fmt.Fprintf(w, " (default %q)", def)
		default:
			fmt.Fprintf(w, " (default %s)", def)
		}
		fmt.Fprintln(w)
	})
}

// stringValued reports whether a flag holds a string (its default is
// shown quoted): a flag.String, or a typedVar.
func stringValued(v flag.Value) bool {
	if _, ok := v.(interface{ stringValued() }); ok {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.Elem().Kind() == reflect.String
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		if len(args) == 2 {
			if c, ok := commands[args[1]]; ok {
				return run([]string{c.name, "-h"}, stdout, stderr)
			}
		}
		mainUsage(stdout)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "convert: unknown command %q\n", args[0])
		mainUsage(stderr)
		return exitUsage
	}
	if _, err := ops.DefaultMaxTensorBytes(); err != nil {
		fmt.Fprintf(stderr, "convert %s: %v\n", c.name, err)
		return exitUsage
	}
	inName, inSize := largestFile(args[1:])
	boundMemory(c, inSize)
	start := time.Now()
	err := c.run(args[1:], stdout)
	if printStats {
		reportStats(stderr, c.name, time.Since(start), inName, inSize)
	}
	if err == nil {
		return exitOK
	}
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	// Library errors carry their package prefix; after "convert NAME:" a
	// second "convert:" only stutters.
	fmt.Fprintf(stderr, "convert %s: %s\n", c.name, strings.TrimPrefix(err.Error(), "convert: "))
	var ee *exitError
	switch {
	case errors.Is(err, convert.ErrNothingConverted):
		// A rewrite that converted nothing wrote nothing: the model is
		// not one the command can convert (the message says why).
		return exitBadInput
	case errors.Is(err, ops.ErrTensorBudget):
		// The model asks the native backend for a tensor larger than the
		// tensor budget: the input is at fault, whichever command ran it.
		return exitBadInput
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, convert.ErrInvalidOption):
		return exitUsage
	}
	return exitRuntime
}

func main() {
	if benchChild() {
		os.Exit(exitOK)
	}
	stop := cleanupOnSignal(os.Stderr)
	code := run(os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// stopSignals stop a command; SIGHUP and SIGINT only where they are not
// ignored (nohup, a background job), which Notify would undo.
var stopSignals = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP}

// cleanupOnSignal makes SIGINT, SIGTERM and SIGHUP remove the temporary
// files of the outputs being written (fsutil.AbortWrites) and exit with
// 128 + the signal's number, as a shell reports a process the signal
// killed. stop ends the handling.
func cleanupOnSignal(stderr io.Writer) (stop func()) {
	var sigs []os.Signal
	for _, s := range stopSignals {
		if s == syscall.SIGTERM || !signal.Ignored(s) {
			sigs = append(sigs, s)
		}
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sigs...)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-ch:
			removed := fsutil.AbortWrites()
			msg := "convert: stopped by " + s.String()
			if len(removed) > 0 {
				msg += fmt.Sprintf("; removed the partial output %s", strings.Join(removed, ", "))
			}
			fmt.Fprintln(stderr, msg)
			os.Exit(signalExitCode(s))
		case <-done:
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
	}
}

// signalExitCode is 128 + the signal's number.
func signalExitCode(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return 128 + int(syscall.SIGINT)
}

// benchChild runs the benchmark job and reports true when this process is
// a bench child: this binary re-executed by bench (internal/benchrun) with
// the job in $LINEARIZE_BENCH_CHILD. It is checked before any command is
// dispatched, by main and by the tests' TestMain (the tests' binary is
// the child there).
func benchChild() bool {
	return benchrun.ChildMain(os.Stdout)
}
