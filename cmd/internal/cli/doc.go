// Package cli is what the project's two binaries share: the user's CLI
// (cmd/convert) and the lab's (cmd/linlab). Each subcommand of either
// lives in its own file (cmd_*.go) of its binary, whose main package
// registers the table of them (Register); Run dispatches a command line
// to one, which parses its flags with ParseFlags (which prints its usage
// on -h/--help), and turns its error into an exit code.
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
//	  (kernels.MaxTensorBytes, $LINEARIZE_MAX_TENSOR_BYTES);
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
// Every command's --threads is at most MaxThreads(): 4 × the CPUs, at
// least 8, at most 256 (more threads only cost memory; 100000 once took
// 6.6 GB before any work).
//
// Commands classify library errors with errors.Is/As on the libraries'
// sentinels (convert.ErrInvalidOption, convert.ErrNothingConverted,
// infer.ErrFeedValue, ...), never by their text.
package cli
