package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/finetune"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
	"google.golang.org/protobuf/proto"
)

// TestFinetuneCLI fits the tiny BERT's Linformer conversion on seeded
// random inputs and on texts, checks that the fit lowers every layer's
// error, that `compare` on other inputs finds the fitted model closer to
// the original, that two runs write identical files, and the refusals.
func TestFinetuneCLI(t *testing.T) {
	orig, _, lin := tinyModels(t)
	dir := filepath.Dir(orig)
	out := filepath.Join(dir, "fit.onnx")
	args := []string{"finetune", orig, lin, "-o", out, "--random-inputs", "--batch", "8", "--seq-len", "16", "--steps", "80", "--minibatch", "4", "--seed", "3", "--json"}
	code, stdout, errOut := runCLI(args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep finetune.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	if rep.Op != "LinformerAttention" || len(rep.Layers) != 2 {
		t.Fatalf("report %+v", rep)
	}
	for _, l := range rep.Layers {
		if !(l.After < 0.7*l.Before) {
			t.Errorf("layer %d: %.4f → %.4f", l.Layer, l.Before, l.After)
		}
	}
	first, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	// Same flags and seed: byte-identical output.
	out2 := filepath.Join(dir, "fit2.onnx")
	args[4] = out2
	if code, _, errOut := runCLI(args...); code != 0 {
		t.Fatalf("second run: exit %d: %s", code, errOut)
	}
	second, err := os.ReadFile(out2)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, second) {
		t.Error("two runs with the same seed wrote different models")
	}
	// Held-out inputs (another seed): compare ORIGINAL BEFORE AFTER.
	code, stdout, errOut = runCLI("compare", orig, lin, out, "--random-inputs", "--batch", "4", "--seq-len", "16", "--seed", "77", "--json")
	if code != 0 {
		t.Fatalf("compare: exit %d: %s", code, errOut)
	}
	var mc infer.ModelComparison
	if err := json.Unmarshal([]byte(stdout), &mc); err != nil {
		t.Fatal(err)
	}
	rel := map[string]float64{}
	for _, r := range mc.Rows {
		if r.Kind == "layer" {
			rel[filepath.Base(r.Model)] += r.RelErr
		}
	}
	if !(rel["fit.onnx"] < 0.5*rel["lin.onnx"]) {
		t.Errorf("held-out layer error: before %.4f, after %.4f", rel["lin.onnx"], rel["fit.onnx"])
	}
	// Texts through the tokenizer beside the original.
	texts := filepath.Join(dir, "texts.txt")
	if err := os.WriteFile(texts, []byte("the man is eating food .\nthe horses\nthe man is eating\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, stdout, errOut := runCLI("finetune", orig, lin, "-o", filepath.Join(dir, "fit3.onnx"), "--text-file", texts, "--steps", "20"); code != 0 || !strings.Contains(stdout, "3 texts") {
		t.Errorf("text calibration: exit %d: %s%s", code, stdout, errOut)
	}
	if _, err := onnx.Load(filepath.Join(dir, "fit3.onnx")); err != nil {
		t.Error(err)
	}
	// Refusals: overwriting either input, no inputs, an unconverted model.
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"finetune", orig, lin, "-o", lin, "--random-inputs"}, 1},
		{[]string{"finetune", orig, lin, "-o", orig, "--random-inputs"}, 1},
		{[]string{"finetune", orig, lin, "-o", filepath.Join(dir, "x.onnx")}, 2}, // no inputs: as in every command (feed.go)
		{[]string{"finetune", orig, "-o", filepath.Join(dir, "x.onnx"), "--random-inputs"}, 1},
		{[]string{"finetune", orig, orig, "-o", filepath.Join(dir, "x.onnx"), "--random-inputs"}, 2},
		{[]string{"finetune", orig, filepath.Join(dir, "missing.onnx"), "-o", filepath.Join(dir, "x.onnx"), "--random-inputs"}, 2},
	} {
		if code, _, errOut := runCLI(c.args...); code != c.code {
			t.Errorf("%v: exit %d, want %d (%s)", c.args[1:], code, c.code, errOut)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "x.onnx")); err == nil {
		t.Error("a refused run wrote its output")
	}
}

// heldOutErrs runs the model at path on rows rows of feed and returns,
// for its last_hidden_state [rows, S, D] against the original's (at orig)
// over every token (random inputs have no padding), the relative error
// and the mean over rows of the cosine of the token means.
func heldOutErrs(t *testing.T, orig, path string, feed map[string]*onnx.Tensor, rows []int) (relErr, pooledCos float64) {
	t.Helper()
	sub := map[string]*onnx.Tensor{}
	seq := 0
	for name, x := range feed {
		seq = x.Shape[1]
		var data []int64
		for _, r := range rows {
			data = append(data, x.Int64s()[r*seq:(r+1)*seq]...)
		}
		sub[name] = onnx.NewInt64([]int{len(rows), seq}, data)
	}
	out := func(p string) []float32 {
		m, err := onnx.Load(p)
		if err != nil {
			t.Fatal(err)
		}
		s, err := infer.Open("ort", m, infer.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		res, err := s.Run(sub, "last_hidden_state")
		if err != nil {
			t.Fatal(err)
		}
		return res["last_hidden_state"].Floats()
	}
	a, b := out(path), out(orig)
	d := len(a) / (len(rows) * seq)
	var num, den float64
	for r := range rows {
		pa, pb := make([]float64, d), make([]float64, d)
		for i := r * seq * d; i < (r+1)*seq*d; i++ {
			x, y := float64(a[i]), float64(b[i])
			num += (x - y) * (x - y)
			den += y * y
			pa[i%d] += x
			pb[i%d] += y
		}
		var ab, aa, bb float64
		for k := range pa {
			ab, aa, bb = ab+pa[k]*pb[k], aa+pa[k]*pa[k], bb+pb[k]*pb[k]
		}
		pooledCos += ab / math.Sqrt(aa*bb) / float64(len(rows))
	}
	return math.Sqrt(num / den), pooledCos
}

// initializersOf maps the initializer names of the model at path to their
// encoding.
func initializersOf(t *testing.T, path string) map[string]string {
	t.Helper()
	m, err := onnx.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, tp := range m.Graph.Initializer {
		b, err := proto.Marshal(tp)
		if err != nil {
			t.Fatal(err)
		}
		out[tp.GetName()] = string(b)
	}
	return out
}

// TestFinetuneGuardCLI: every finetune is guarded. On seeded random
// documents, a fit that helps (Linformer) and one that overfits (local+pooled
// at a learning rate far too high) each print the held-out line and write
// the better, on the held-out rows, of the converted and the fine-tuned
// model, as recomputed here; --held-out 0 and a single document fit
// unguarded and say so; bad values of the new flags are refused.
func TestFinetuneGuardCLI(t *testing.T) {
	origPath, _, lin := tinyModels(t)
	dir := filepath.Dir(origPath)
	orig, err := onnx.Load(origPath)
	if err != nil {
		t.Fatal(err)
	}
	lpModel, _, err := convert.ToLocalPooled(orig, convert.LocalPooledOptions{Block: 4, Segments: 2})
	if err != nil {
		t.Fatal(err)
	}
	lp := filepath.Join(dir, "lp.onnx")
	if err := onnx.Save(lpModel, lp, onnx.SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	feed, err := infer.RandomInputs(orig, infer.GraphInputs(orig), infer.RandomOptions{Batch: 8, SeqLen: 16, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, conv string
		flags      []string
		kept       string // what the seeded case comes to
	}{
		{"linformer helps", lin, []string{"--steps", "60"}, finetune.KeptFitted},
		{"local+pooled overfits", lp, []string{"--steps", "100", "--lr", "0.1", "--patience", "2"}, finetune.KeptInput},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "fit.onnx")
			args := append([]string{"finetune", origPath, c.conv, "-o", out, "--random-inputs", "--batch", "8", "--seq-len", "16", "--seed", "3"}, c.flags...)
			code, stdout, errOut := runCLI(args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			t.Logf("\n%s", stdout)
			line := ""
			for _, l := range strings.Split(stdout, "\n") {
				if strings.HasPrefix(l, "held-out (2 of 8 calibration rows, last_hidden_state") {
					line = l
				}
			}
			if line == "" || !strings.Contains(stdout, "2 held out") || !strings.Contains(stdout, "wrote "+out) {
				t.Fatalf("no held-out line for 2 of 8 rows:\n%s", stdout)
			}
			// The JSON report says the same, and which rows were held out;
			// the line goes to stderr.
			jargs := append([]string(nil), args...)
			jargs[4] = filepath.Join(t.TempDir(), "j.onnx")
			code, js, errOut := runCLI(append(jargs, "--json")...)
			if code != 0 {
				t.Fatalf("--json: exit %d: %s", code, errOut)
			}
			var rep finetune.Report
			if err := json.Unmarshal([]byte(js), &rep); err != nil {
				t.Fatalf("%v\n%s", err, js)
			}
			if rep.HeldOut == nil || len(rep.HeldOutRows) != 2 || rep.Rows != 8 || rep.Kept != c.kept || !strings.Contains(errOut, "\n"+line+"\n") {
				t.Fatalf("report %+v (held-out %+v), stderr %q; want kept %q and the line %q", rep, rep.HeldOut, errOut, c.kept, line)
			}
			for _, l := range rep.Layers {
				if !(l.HeldOutAfter <= l.HeldOutBefore) || l.StepsRun == 0 {
					t.Errorf("layer %d: held-out %.5f → %.5f after %d steps", l.Layer, l.HeldOutBefore, l.HeldOutAfter, l.StepsRun)
				}
			}
			// Recomputed on the held-out rows: the written model is the
			// better one.
			before, cosBefore := heldOutErrs(t, origPath, c.conv, feed, rep.HeldOutRows)
			written, cosWritten := heldOutErrs(t, origPath, out, feed, rep.HeldOutRows)
			t.Logf("recomputed on the held-out rows: converted %.6g (pooled cosine %.8f), written %.6g (%.8f)", before, cosBefore, written, cosWritten)
			if math.Abs(before-rep.HeldOut.RelErrBefore) > 1e-4*before || math.Abs(cosBefore-*rep.HeldOut.PooledCosBefore) > 1e-9 {
				t.Errorf("reported converted error %.6g, cosine %.8f; recomputed %.6g, %.8f", rep.HeldOut.RelErrBefore, *rep.HeldOut.PooledCosBefore, before, cosBefore)
			}
			convInits, outInits := initializersOf(t, c.conv), initializersOf(t, out)
			same := len(convInits) == len(outInits)
			for name, b := range convInits {
				same = same && outInits[name] == b
			}
			switch c.kept {
			case finetune.KeptFitted:
				if !(written < before) || !(cosWritten >= cosBefore) || same || !strings.HasSuffix(line, "better, kept the fine-tuned parameters") {
					t.Errorf("fine-tuned kept: written %.6g (%.8f) vs converted %.6g (%.8f), parameters unchanged %v, line %q", written, cosWritten, before, cosBefore, same, line)
				}
			case finetune.KeptInput:
				if written != before || cosWritten != cosBefore || !same || !strings.HasSuffix(line, "kept the converted model's parameters") {
					t.Errorf("converted kept: written %.6g vs converted %.6g, parameters unchanged %v, line %q", written, before, same, line)
				}
			}
		})
	}
	// Unguarded fits say so.
	for _, c := range []struct {
		args []string
		line string
		warn bool
	}{
		{[]string{"--random-inputs", "--batch", "4", "--seq-len", "16", "--held-out", "0"}, "held-out: none (unguarded fit asked for)", false},
		{[]string{"--text", "the man is eating food ."}, "held-out: none (a single calibration row (document): nothing to hold out)", true},
	} {
		code, stdout, errOut := runCLI(append([]string{"finetune", origPath, lin, "-o", filepath.Join(t.TempDir(), "u.onnx"), "--steps", "5"}, c.args...)...)
		if code != 0 || !strings.Contains(stdout, c.line) || !strings.Contains(stdout, "calibration rows: ") {
			t.Errorf("%v: exit %d, want the line %q:\n%s%s", c.args, code, c.line, stdout, errOut)
		}
		if got := strings.Contains(errOut, "warning: finetune:") && strings.Contains(errOut, "unguarded"); got != c.warn {
			t.Errorf("%v: warned %v, want %v: %q", c.args, got, c.warn, errOut)
		}
	}
	for _, bad := range [][]string{{"--held-out", "1"}, {"--held-out", "-0.1"}, {"--held-out", "NaN"}, {"--patience", "-1"}} {
		x := filepath.Join(t.TempDir(), "x.onnx")
		if code, _, errOut := runCLI(append([]string{"finetune", origPath, lin, "-o", x, "--random-inputs", "--batch", "4"}, bad...)...); code != exitUsage || !strings.Contains(errOut, bad[0]) {
			t.Errorf("%v: exit %d, want %d naming the flag (%s)", bad, code, exitUsage, errOut)
		}
		if _, err := os.Stat(x); err == nil {
			t.Errorf("%v: a refused run wrote its output", bad)
		}
	}
}
