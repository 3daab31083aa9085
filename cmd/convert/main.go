// Command convert turns BERT-style ONNX transformers into linear-attention
// models and runs, compares and benchmarks them. Each subcommand lives in
// its own file (cmd_*.go) and registers itself; the work is done by the
// library packages (convert, runtime, ops, models).
//
// Exit codes: 0 success, 1 usage error, 2 bad input (unreadable or invalid
// model, input file or flag value), 3 runtime failure.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/internal/benchrun"
	"github.com/linearize/linearize/runtime"
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
		fs.Func("ort-lib", "path of the onnxruntime shared library (default: $"+runtime.LibraryEnv+", beside the executable, the repository's .tools/lib, system library folders)", func(p string) error {
			runtime.SetLibraryPath(p)
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
				return nil, err
			}
			return nil, usageError("%v", err)
		}
		args = fs.Args()
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
	fmt.Fprintln(w, "Exit codes: 0 ok, 1 usage, 2 bad input, 3 runtime failure.")
}

func commandUsage(w io.Writer, c *command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: convert %s %s\n\n%s\n", c.name, c.usage, c.summary)
	if fs != nil {
		fmt.Fprintln(w, "\nflags:")
		fs.SetOutput(w)
		fs.PrintDefaults()
	}
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
	if errors.Is(err, convert.ErrNothingConverted) {
		// A rewrite that converted nothing wrote nothing: the model is
		// not one the command can convert (the message says why).
		return exitBadInput
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return exitRuntime
}

func main() {
	if benchChild() {
		os.Exit(exitOK)
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// benchChild runs the benchmark job and reports true when this process is
// a bench child: this binary re-executed by bench (internal/benchrun) with
// the job in $LINEARIZE_BENCH_CHILD. It is checked before any command is
// dispatched, by main and by the tests' TestMain (the tests' binary is
// the child there).
func benchChild() bool {
	return benchrun.ChildMain(os.Stdout)
}
