package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

// TestHedgehogCLI converts the tiny BERT and trains its maps on a folder
// of documents: the report lists every layer with a lower held-out error,
// the model holds trained maps (not the initial ones), two runs write the
// same bytes, and the refusals name their flag.
func TestHedgehogCLI(t *testing.T) {
	orig, _, _ := tinyModels(t)
	dir := filepath.Dir(orig)
	docs := filepath.Join(dir, "docs")
	if err := os.Mkdir(docs, 0o755); err != nil {
		t.Fatal(err)
	}
	words := strings.Fields("the man is eating food . horse ##s the man")
	for d := 0; d < 6; d++ {
		var b strings.Builder
		for i := 0; i < 60; i++ {
			b.WriteString(words[(i*(d+3)+d)%len(words)] + " ")
		}
		if err := os.WriteFile(filepath.Join(docs, string(rune('a'+d))+".txt"), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, "hh.onnx")
	args := []string{"hedgehog", orig, "-o", out, "--calibration", docs, "--seq-len", "16", "--block", "4", "--steps", "60", "--windows", "4", "--held-out", "0.34", "--json"}
	code, stdout, errOut := runCLI(args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep convert.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	if rep.Op != ops.HedgehogOp || len(rep.Converted) != 2 {
		t.Errorf("report %+v", rep)
	}
	if !strings.Contains(errOut, "attention transfer") || !strings.Contains(errOut, "held out") {
		t.Errorf("no transfer report on stderr:\n%s", errOut)
	}
	m, err := onnx.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	untrained, _, err := convert.ToHedgehog(mustLoad(t, orig), convert.HedgehogOptions{Block: 4, Seed: cli.DefaultSeed})
	if err != nil {
		t.Fatal(err)
	}
	if changedInits(t, untrained, m) == 0 {
		t.Error("no map parameter changed: the maps were not trained")
	}
	first, _ := os.ReadFile(out)
	args[3] = filepath.Join(dir, "hh2.onnx")
	if code, _, errOut := runCLI(args...); code != 0 {
		t.Fatalf("second run: exit %d: %s", code, errOut)
	}
	second, _ := os.ReadFile(args[3])
	if !bytes.Equal(first, second) {
		t.Error("two runs with the same seed wrote different models")
	}
	// A wrong command line exits 1 (usage); a --calibration that cannot
	// be read exits 2 (bad input), as for performer and embed.
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"hedgehog", orig, "-o", filepath.Join(dir, "x.onnx")}, cli.ExitUsage, "--calibration"},
		{[]string{"hedgehog", orig, "-o", filepath.Join(dir, "x.onnx"), "--calibration", docs, "--objective", "kl"}, cli.ExitUsage, "--objective"},
		{[]string{"hedgehog", orig, "-o", filepath.Join(dir, "x.onnx"), "--calibration", docs, "--held-out", "1"}, cli.ExitUsage, "--held-out"},
		{[]string{"hedgehog", orig, "-o", filepath.Join(dir, "x.onnx"), "--calibration", filepath.Join(dir, "missing")}, cli.ExitBadInput, "--calibration"},
		{[]string{"long", orig, "-o", filepath.Join(dir, "x.onnx"), "--learned", "--calibration", filepath.Join(dir, "missing")}, cli.ExitBadInput, "--calibration"},
	} {
		code, _, errOut := runCLI(c.args...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, %q; want exit %d naming %s", c.args[4:], code, errOut, c.code, c.want)
		}
		if _, err := os.Stat(filepath.Join(dir, "x.onnx")); err == nil {
			t.Errorf("%v: wrote an output", c.args[4:])
		}
	}
}

func mustLoad(t *testing.T, p string) *onnxpb.ModelProto {
	t.Helper()
	m, err := onnx.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// changedInits counts the initializers of b whose bytes differ from a's
// initializer of the same name.
func changedInits(t *testing.T, a, b *onnxpb.ModelProto) int {
	t.Helper()
	prev := map[string][]byte{}
	for _, x := range a.Graph.Initializer {
		prev[x.GetName()] = x.GetRawData()
	}
	n := 0
	for _, x := range b.Graph.Initializer {
		if p, ok := prev[x.GetName()]; ok && !bytes.Equal(p, x.GetRawData()) {
			n++
		}
	}
	return n
}
