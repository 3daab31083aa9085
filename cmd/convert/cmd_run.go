package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/runtime"
)

func init() {
	register(&command{
		name:    "run",
		summary: "run a model on inputs from .npy/.pb files or seeded random inputs; print and save the outputs",
		usage:   "MODEL [--backend ort|native] [--input NAME=FILE]... [--text T]... [--text-file F] [--vocab PATH] [--random-inputs] [--batch B] [--seq-len L] [--seed S] [--threads T] [--out-dir DIR]",
		run:     runRun,
	})
}

func runRun(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	backend := fs.String("backend", runtime.DefaultBackend, "runtime backend: "+strings.Join(runtime.Backends(), " or "))
	var inputFiles multiFlag
	fs.Var(&inputFiles, "input", "NAME=FILE: feed input NAME from a .npy or TensorProto .pb file (repeatable)")
	random := fs.Bool("random-inputs", false, "make seeded random values for every input not given with --input")
	batch := fs.Int("batch", 1, "size of symbolic batch dimensions (with --random-inputs)")
	seqLen := fs.Int("seq-len", 8, "size of symbolic sequence dimensions (with --random-inputs)")
	seed := fs.Uint64("seed", 1, "seed of the random inputs")
	threads := fs.Int("threads", 0, "intra-op threads (0: backend default)")
	var texts multiFlag
	fs.Var(&texts, "text", "a text to tokenize with the model's tokenizer (repeatable; one batch row each)")
	textFile := fs.String("text-file", "", "a file with one text per line (tokenized like --text)")
	vocab := fs.String("vocab", "", "tokenizer for --text: a folder, tokenizer.json or vocab.txt (default: found beside the model)")
	outDir := fs.String("out-dir", "", "write each output as DIR/NAME.npy and DIR/NAME.pb")
	pos, err := parseFlags(fs, args, stdout)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError("want exactly one MODEL argument, got %d", len(pos))
	}
	if *batch <= 0 || *seqLen <= 0 || *threads < 0 {
		return usageError("--batch and --seq-len must be positive and --threads non-negative")
	}
	path := pos[0]
	m, err := onnx.Load(path)
	if err != nil {
		return badInput(err)
	}
	sess, err := runtime.Open(*backend, m, runtime.Options{Threads: *threads})
	if err != nil {
		if !slices.Contains(runtime.Backends(), *backend) {
			return usageError("--backend: %v", err)
		}
		return runtimeFailure(oneLine(err))
	}
	defer sess.Close()

	declared := map[string]runtime.Value{}
	for _, v := range sess.Inputs() {
		declared[v.Name] = v
	}
	feed := map[string]*onnx.Tensor{}
	for _, spec := range inputFiles {
		name, file, ok := strings.Cut(spec, "=")
		if !ok || name == "" || file == "" {
			return usageError("--input %q: want NAME=FILE", spec)
		}
		if _, ok := declared[name]; !ok {
			return badInput(fmt.Errorf("--input %s: %s has no input %q (inputs: %s)", spec, path, name, runInputNames(sess.Inputs())))
		}
		t, err := onnx.ReadTensorFile(file)
		if err != nil {
			return badInput(fmt.Errorf("--input %s: %v", name, err))
		}
		feed[name] = t
	}
	if len(texts) > 0 || *textFile != "" {
		fixed := 0 // pad texts to --seq-len only when it is given
		fs.Visit(func(f *flag.Flag) {
			if f.Name == "seq-len" {
				fixed = *seqLen
			}
		})
		if err := addTextInputs(feed, path, sess.Inputs(), texts, *textFile, *vocab, fixed); err != nil {
			return err
		}
	}
	var missing []runtime.Value
	for _, v := range sess.Inputs() {
		if _, ok := feed[v.Name]; !ok {
			missing = append(missing, v)
		}
	}
	if len(missing) > 0 {
		if !*random {
			return badInput(fmt.Errorf("input %q not given: use --input %s=FILE or --random-inputs", missing[0].Name, missing[0].Name))
		}
		gen, err := runtime.RandomInputs(m, missing, runtime.RandomOptions{Batch: *batch, SeqLen: *seqLen, Seed: *seed})
		if err != nil {
			return badInput(err)
		}
		for k, v := range gen {
			feed[k] = v
		}
	}
	if err := runtime.CheckInputs(sess.Inputs(), feed); err != nil {
		return badInput(err)
	}
	for _, v := range sess.Inputs() {
		t := feed[v.Name]
		fmt.Fprintf(stdout, "input  %s %s\n", v.Name, t)
	}
	outs, err := sess.Run(feed)
	if err != nil {
		return runtimeFailure(oneLine(err))
	}
	if *outDir != "" {
		if err := os.MkdirAll(*outDir, 0o755); err != nil {
			return runtimeFailure(fmt.Errorf("--out-dir: %v", err))
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
				return runtimeFailure(err)
			}
		}
		if err := onnx.WriteTensorProtoFile(filepath.Join(*outDir, base+".pb"), v.Name, t); err != nil {
			return runtimeFailure(err)
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

func runInputNames(vs []runtime.Value) string {
	names := make([]string, len(vs))
	for i, v := range vs {
		names[i] = v.Name
	}
	return strings.Join(names, ", ")
}

// tensorStats summarizes a numeric tensor as "min … max … mean …".
func tensorStats(t *onnx.Tensor) string {
	v, err := t.AsFloat64s()
	if err != nil || len(v) == 0 {
		return ""
	}
	lo, hi, sum := math.Inf(1), math.Inf(-1), 0.0
	nan := 0
	for _, x := range v {
		if math.IsNaN(x) {
			nan++
			continue
		}
		lo, hi, sum = math.Min(lo, x), math.Max(hi, x), sum+x
	}
	s := fmt.Sprintf("min %.6g max %.6g mean %.6g", lo, hi, sum/float64(len(v)-nan))
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
