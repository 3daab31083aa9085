package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/internal/fsutil"
	"github.com/linearize/linearize/kernels"
)

// Name is the binary's name as usage texts and messages give it
// ("convert", "linlab"); its main package sets it.
var Name = "convert"

// Exit codes.
const (
	ExitOK       = 0
	ExitUsage    = 1
	ExitBadInput = 2
	ExitRuntime  = 3
)

// Command is one subcommand of a binary.
type Command struct {
	Name string
	// Summary says what the command does in one line: the binary's
	// usage lists it beside the name (within 80 columns for convert).
	Summary string
	// Detail, when set, says more; -h prints it under the summary.
	Detail string
	// Example is one command line that uses the command (without the
	// binary's name); -h prints it.
	Example string
	Usage   string // the synopsis after "BINARY NAME"
	// Run runs it: the arguments after its name, its output and its
	// stderr, for notes, warnings and progress.
	Run func(args []string, stdout, stderr io.Writer) error
	// Rewrites marks a command that only reads, rewrites and writes a
	// model: its live memory is the model plus one tensor (see
	// boundMemory).
	Rewrites bool
}

var commands = map[string]*Command{}

// Register adds commands to the binary; its main package calls it from
// its init with the table of its commands.
func Register(cs ...*Command) {
	for _, c := range cs {
		commands[c.Name] = c
	}
}

// Names returns the registered command names, sorted.
func Names() []string {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ExitError carries an exit code with an error.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// UsageError is a usage error (exit 1) with a formatted message.
func UsageError(format string, a ...any) error {
	return &ExitError{ExitUsage, fmt.Errorf(format, a...)}
}

// BadInput gives err the bad-input exit code (2); nil stays nil.
func BadInput(err error) error {
	if err == nil {
		return nil
	}
	return &ExitError{ExitBadInput, err}
}

// RuntimeFailure gives err the runtime-failure exit code (3); nil stays
// nil.
func RuntimeFailure(err error) error {
	if err == nil {
		return nil
	}
	return &ExitError{ExitRuntime, err}
}

// ExitCodesHelp ends every usage text (see the package comment).
const ExitCodesHelp = "Exit codes: 0 ok; 1 usage (the command line is wrong); 2 bad input (a file, or a model the flags do not fit); 3 runtime failure; 128+N stopped by signal N."

// Run runs the command line args (the command's name, then its
// arguments) and returns the exit code.
func Run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && (args[0] == "--version" || args[0] == "version") {
		fmt.Fprintln(stdout, VersionLine())
		return ExitOK
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		if len(args) == 2 {
			if c, ok := commands[args[1]]; ok {
				// help NAME is the full reference: every flag's whole
				// description (-h gives the first clause of each).
				fullHelp = true
				defer func() { fullHelp = false }()
				return Run([]string{c.Name, "-h"}, stdout, stderr)
			}
		}
		mainUsage(stdout)
		if len(args) == 0 {
			return ExitUsage
		}
		return ExitOK
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "%s: unknown command %q\n", Name, args[0])
		mainUsage(stderr)
		return ExitUsage
	}
	if _, err := kernels.DefaultMaxTensorBytes(); err != nil {
		fmt.Fprintf(stderr, "%s %s: %v\n", Name, c.Name, err)
		return ExitUsage
	}
	// Opening a named pipe waits for a writer: say so on stderr rather
	// than hang in silence.
	prevWait := fsutil.WaitingForWriter
	fsutil.WaitingForWriter = func(path string) {
		fmt.Fprintf(stderr, "%s %s: waiting for a writer on the named pipe %s (it is read once a program opens it for writing; Ctrl-C stops)\n", Name, c.Name, path)
	}
	defer func() { fsutil.WaitingForWriter = prevWait }()
	inName, inSize := largestFile(args[1:])
	boundMemory(c, inSize)
	start := time.Now()
	err := c.Run(args[1:], stdout, stderr)
	if printStats {
		reportStats(stderr, c.Name, time.Since(start), inName, inSize)
	}
	if err == nil {
		return ExitOK
	}
	if errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	// Library errors carry their package prefix; after "convert NAME:" a
	// second "convert:" only stutters.
	fmt.Fprintf(stderr, "%s %s: %s\n", Name, c.Name, strings.TrimPrefix(err.Error(), "convert: "))
	var ee *ExitError
	switch {
	case errors.Is(err, convert.ErrNothingConverted):
		// A rewrite that converted nothing wrote nothing: the model is
		// not one the command can convert (the message says why).
		return ExitBadInput
	case errors.Is(err, kernels.ErrTensorBudget):
		// The model asks the native backend for a tensor larger than the
		// tensor budget: the input is at fault, whichever command ran it.
		return ExitBadInput
	case errors.As(err, &ee):
		return ee.Code
	case errors.Is(err, convert.ErrInvalidOption):
		return ExitUsage
	}
	return ExitRuntime
}

// Main runs the process's command line with CleanupOnSignal and returns
// the exit code.
func Main() int {
	stop := CleanupOnSignal(os.Stderr)
	defer stop()
	return recovering(os.Stderr, func() int { return Run(os.Args[1:], os.Stdout, os.Stderr) })
}

// recovering runs run and returns its exit code; a panic, which is a bug,
// removes the temporary files of the outputs being written (so that no
// half-written output stays, as on a signal), is reported on stderr with
// its stack, and exits ExitRuntime rather than with the 2 of a Go panic,
// which is the code of bad input.
func recovering(stderr io.Writer, run func() int) (code int) {
	defer func() {
		if r := recover(); r != nil {
			fsutil.AbortWrites()
			fmt.Fprintf(stderr, "%s: internal error, a bug; please report it with the command line: %v\n%s", Name, r, debug.Stack())
			code = ExitRuntime
		}
	}()
	return run()
}

// stopSignals stop a command; SIGHUP and SIGINT only where they are not
// ignored (nohup, a background job), which Notify would undo.
var stopSignals = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP}

// CleanupOnSignal makes SIGINT, SIGTERM and SIGHUP remove the temporary
// files of the outputs being written (fsutil.AbortWrites) and exit with
// 128 + the signal's number, as a shell reports a process the signal
// killed. stop ends the handling.
func CleanupOnSignal(stderr io.Writer) (stop func()) {
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
			msg := Name + ": stopped by " + s.String()
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
