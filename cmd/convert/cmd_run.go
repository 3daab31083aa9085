package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/internal/fsutil"
	"github.com/linearize/linearize/onnx"
)

func runRun(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	rf := addRunFlags(fs)
	outDir := fs.String("out-dir", "", "write each output as `DIR`/NAME.npy and DIR/NAME.pb")
	path, err := cli.ParseModelArg(fs, args, stdout)
	if err != nil {
		return err
	}
	m, in, err := rf.load(path)
	if err != nil {
		return err
	}
	feed := in.Tensors
	sess, err := infer.Open(rf.backend, m, infer.Options{Threads: rf.threads})
	if err != nil {
		return cli.RuntimeFailure(oneLine(err))
	}
	defer sess.Close()
	// The files --out-dir will hold, vetted before the run: none may be
	// an input (run --input x=out/y.npy --out-dir out, with an output y).
	bases := map[string]string{}
	if *outDir != "" {
		used := map[string]bool{}
		var files []namedFile
		for _, v := range sess.Outputs() {
			bases[v.Name] = outputFileName(v.Name, used)
			for _, ext := range []string{".npy", ".pb"} {
				files = append(files, namedFile{"--out-dir (output " + v.Name + ")", filepath.Join(*outDir, bases[v.Name]+ext)})
			}
		}
		inputs := []namedFile{{"MODEL", path}, {"--vocab", rf.spec.Vocab}}
		for name, p := range rf.spec.Inputs {
			inputs = append(inputs, namedFile{"--input " + name, p})
		}
		for _, p := range rf.textFiles {
			inputs = append(inputs, namedFile{"--text-file", p})
		}
		if err := checkNotInputs(files, inputs); err != nil {
			return err
		}
	}
	for _, v := range sess.Inputs() {
		t := feed[v.Name]
		fmt.Fprintf(stdout, "input  %s %s\n", v.Name, t)
	}
	if note := in.CutNote(); note != "" {
		fmt.Fprintf(stdout, "note: %s (--seq-len or --max-len sets the length)\n", note)
	}
	outs, err := sess.Run(feed)
	if err != nil {
		return cli.RuntimeFailure(oneLine(err))
	}
	var set []fsutil.SetFile
	var bad []string
	for _, v := range sess.Outputs() {
		t := outs[v.Name]
		fmt.Fprintf(stdout, "output %s %s %s\n", v.Name, t, tensorStats(t))
		if nan, inf := nonFinite(t); nan+inf > 0 {
			bad = append(bad, fmt.Sprintf("%s holds %d NaN and %d Inf of %d values", v.Name, nan, inf, t.Len()))
		}
		if *outDir == "" {
			continue
		}
		base := filepath.Join(*outDir, bases[v.Name])
		if t.DType != onnx.BFloat16 { // numpy has no bfloat16
			set = append(set, fsutil.SetFile{Path: base + ".npy", Fill: func(w io.Writer) error { return onnx.EncodeNPY(w, t) }})
		}
		set = append(set, fsutil.SetFile{Path: base + ".pb", Fill: func(w io.Writer) error { return onnx.EncodeTensorProto(w, v.Name, t) }})
	}
	// A NaN or Inf output is a failed run, whatever else it holds: it is
	// reported, and --out-dir is left as it was.
	if len(bad) > 0 {
		kept := ""
		if *outDir != "" {
			kept = "; nothing written to " + *outDir
		}
		return cli.RuntimeFailure(fmt.Errorf("outputs are not finite: %s%s", strings.Join(bad, "; "), kept))
	}
	if *outDir != "" {
		if err := os.MkdirAll(*outDir, 0o755); err != nil {
			return cli.RuntimeFailure(fmt.Errorf("--out-dir: %v", err))
		}
		// The outputs are one set: all old files or all new ones.
		if err := fsutil.WriteSet(set...); err != nil {
			return cli.RuntimeFailure(fmt.Errorf("--out-dir %s: %v", *outDir, err))
		}
		fmt.Fprintf(stdout, "wrote %d outputs to %s\n", len(sess.Outputs()), *outDir)
	}
	return nil
}

// nonFinite counts the NaN and the ±Inf values of a floating-point
// tensor (0, 0 for other types).
func nonFinite(t *onnx.Tensor) (nan, inf int) {
	switch t.DType {
	case onnx.Float, onnx.Double, onnx.Float16, onnx.BFloat16:
	default:
		return 0, 0
	}
	v, err := t.AsFloat64s()
	if err != nil {
		return 0, 0
	}
	for _, x := range v {
		switch {
		case math.IsNaN(x):
			nan++
		case math.IsInf(x, 0):
			inf++
		}
	}
	return nan, inf
}

// namedFile is a file a command reads or writes and the flag or
// argument that names it ("MODEL", "--jsonl", "-o").
type namedFile struct{ flag, path string }

// checkOutputs vets the files a command will write, before any work:
// none may be an input or another output (checkNotInputs), and each
// must be writable as -o is (onnx.CheckSavePath: its folder exists, it
// is no directory; bad input otherwise).
func checkOutputs(outputs, inputs []namedFile) error {
	if err := checkNotInputs(outputs, inputs); err != nil {
		return err
	}
	for _, o := range outputs {
		if err := onnx.CheckSavePath(o.path, onnx.SaveOptions{}); err != nil {
			return cli.BadInput(fmt.Errorf("%s: %s", o.flag, strings.TrimPrefix(err.Error(), "onnx: ")))
		}
	}
	return nil
}

// checkNotInputs refuses (a usage error, as -o naming the input is) an
// output that is the same file as an input or as another output: the
// same path, or one file reached through a symlink or a hard link
// (onnx.CheckSavePath's test, which -o of every conversion passes). An
// input is never written over.
func checkNotInputs(outputs, inputs []namedFile) error {
	same := func(a, b string) bool {
		return errors.Is(onnx.CheckSavePath(a, onnx.SaveOptions{Input: b}), onnx.ErrOverwriteInput)
	}
	for i, o := range outputs {
		for _, in := range inputs {
			if in.path != "" && same(o.path, in.path) {
				return cli.UsageError("%s %s is the input %s %s (the same file): an input is never written over; choose another path", o.flag, o.path, in.flag, in.path)
			}
		}
		for _, prev := range outputs[:i] {
			if same(o.path, prev.path) {
				return cli.UsageError("%s %s and %s %s are the same file: choose two paths", prev.flag, prev.path, o.flag, o.path)
			}
		}
	}
	return nil
}

// oneLine folds a multi-line error (onnxruntime's messages can span lines)
// into one line.
func oneLine(err error) error {
	msg := err.Error()
	if !strings.ContainsAny(msg, "\r\n") {
		return err
	}
	return errors.New(strings.Join(strings.Fields(msg), " "))
}

// tensorStats summarizes a numeric tensor as "min … max … mean …". A
// float32 tensor is read in place (a float64 copy would double an output
// that may take a good share of the memory).
func tensorStats(t *onnx.Tensor) string {
	n, at := 0, func(int) float64 { return 0 }
	if f := t.Floats(); f != nil {
		n, at = len(f), func(i int) float64 { return float64(f[i]) }
	} else if v, err := t.AsFloat64s(); err == nil {
		n, at = len(v), func(i int) float64 { return v[i] }
	}
	if n == 0 {
		return ""
	}
	lo, hi, sum := math.Inf(1), math.Inf(-1), 0.0
	nan := 0
	for i := range n {
		x := at(i)
		if math.IsNaN(x) {
			nan++
			continue
		}
		lo, hi, sum = math.Min(lo, x), math.Max(hi, x), sum+x
	}
	s := fmt.Sprintf("min %.6g max %.6g mean %.6g", lo, hi, sum/float64(n-nan))
	if nan > 0 {
		s += fmt.Sprintf(" (%d NaN)", nan)
	}
	return s
}

// outputFileName turns a value name into a unique, safe file name stem.
func outputFileName(name string, used map[string]bool) string {
	b := []byte(name)
	for i, c := range b {
		ok := c == '-' || c == '_' || c == '.' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
		if !ok {
			b[i] = '_'
		}
	}
	s := strings.TrimLeft(string(b), ".")
	if s == "" {
		s = "output"
	}
	base := s
	for i := 2; used[strings.ToLower(s)]; i++ {
		s = fmt.Sprintf("%s_%d", base, i)
	}
	used[strings.ToLower(s)] = true
	return s
}
