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
	"github.com/linearize/linearize/onnx"
)

func runRun(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	ff := addFeedFlags(fs)
	backend := fs.String("backend", infer.DefaultBackend, "runtime backend: "+strings.Join(infer.Backends(), " or "))
	threads := fs.Int("threads", 0, "intra-op threads (0: backend default)")
	outDir := fs.String("out-dir", "", "write each output as `DIR`/NAME.npy and DIR/NAME.pb")
	path, err := cli.ParseModelArg(fs, args, stdout)
	if err != nil {
		return err
	}
	if err := checkBackend(*backend); err != nil {
		return err
	}
	m, in, err := ff.load(path)
	if err != nil {
		return err
	}
	feed := in.Tensors
	sess, err := infer.Open(*backend, m, infer.Options{Threads: *threads})
	if err != nil {
		return cli.RuntimeFailure(oneLine(err))
	}
	defer sess.Close()
	for _, v := range sess.Inputs() {
		t := feed[v.Name]
		fmt.Fprintf(stdout, "input  %s %s\n", v.Name, t)
	}
	outs, err := sess.Run(feed)
	if err != nil {
		return cli.RuntimeFailure(oneLine(err))
	}
	if *outDir != "" {
		if err := os.MkdirAll(*outDir, 0o755); err != nil {
			return cli.RuntimeFailure(fmt.Errorf("--out-dir: %v", err))
		}
	}
	used := map[string]bool{}
	for _, v := range sess.Outputs() {
		t := outs[v.Name]
		fmt.Fprintf(stdout, "output %s %s %s\n", v.Name, t, tensorStats(t))
		if *outDir == "" {
			continue
		}
		base := outputFileName(v.Name, used)
		if t.DType != onnx.BFloat16 { // numpy has no bfloat16
			if err := onnx.WriteNPY(filepath.Join(*outDir, base+".npy"), t); err != nil {
				return cli.RuntimeFailure(err)
			}
		}
		if err := onnx.WriteTensorProtoFile(filepath.Join(*outDir, base+".pb"), v.Name, t); err != nil {
			return cli.RuntimeFailure(err)
		}
	}
	if *outDir != "" {
		fmt.Fprintf(stdout, "wrote %d outputs to %s\n", len(sess.Outputs()), *outDir)
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
