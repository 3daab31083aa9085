package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
)

// The variant flags: errors without calibration, and (with the real model
// and onnxruntime) a calibrated conversion that is byte-identical for the
// same flags, carries the variant, and passes validate.
func TestPerformerVariantCLI(t *testing.T) {
	tmp := t.TempDir()
	tiny := filepath.Join("..", "..", "testdata", "bert-tiny.onnx")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"performer", tiny, "-o", filepath.Join(tmp, "x.onnx"), "--features-kind", "aderf"}, exitUsage, "need --calibration"},
		{[]string{"performer", tiny, "-o", filepath.Join(tmp, "x.onnx"), "--balance"}, exitUsage, "need --calibration"},
		{[]string{"performer", tiny, "-o", filepath.Join(tmp, "x.onnx"), "--features-kind", "relu"}, exitUsage, `--features-kind "relu"`},
		{[]string{"performer", tiny, "-o", filepath.Join(tmp, "x.onnx"), "--center", "--kernel", "trig"}, exitUsage, "positive kernel"},
		{[]string{"performer", tiny, "-o", filepath.Join(tmp, "c.onnx"), "--center", "--features-kind", "favor++", "--features", "8"}, 0, "converted"},
	} {
		code, out, errOut := runCLI(c.args...)
		if code != c.code || !strings.Contains(out+errOut, c.want) {
			t.Errorf("%v: exit %d, want %d with %q\nstdout: %s\nstderr: %s", c.args, code, c.code, c.want, out, errOut)
		}
	}
	// Defaults: centring and FAVOR++ for the positive kernel; plain for
	// trig; plain FAVOR+ when asked.
	for _, c := range []struct {
		flags    []string
		center   int64
		features string
	}{
		{nil, 1, "favor++"},
		{[]string{"--kernel", "trig"}, 0, "favor+"},
		{[]string{"--center=false", "--features-kind", "favor+"}, 0, "favor+"},
	} {
		p := filepath.Join(tmp, "d.onnx")
		args := append([]string{"performer", tiny, "-o", p, "--features", "8", "--overwrite"}, c.flags...)
		if code, _, e := runCLI(args...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, e)
		}
		m, err := onnx.Load(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range m.Graph.Node {
			if n.GetOpType() == "PerformerAttention" {
				if onnx.AttrInt(n, "center", 0) != c.center || onnx.AttrString(n, "features", "favor+") != c.features {
					t.Errorf("%v: node attributes %v, want center=%d features=%s", c.flags, n.Attribute, c.center, c.features)
				}
			}
		}
	}

	model := filepath.Join("..", "..", "testdata", "real", "minilm.onnx")
	if _, err := os.Stat(model); err != nil {
		t.Skipf("real model absent (run scripts/real-model.sh): %v", err)
	}
	if err := infer.ORTAvailable(); err != nil {
		t.Skipf("onnxruntime not available (run scripts/setup.sh): %v", err)
	}
	calib := filepath.Join("..", "..", "testdata", "realmodel", "calibration.txt")
	held := filepath.Join("..", "..", "testdata", "realmodel", "heldout.txt")
	write := func(name string) []byte {
		p := filepath.Join(tmp, name)
		// The defaults with --calibration: centring and ADERF.
		args := []string{"performer", model, "-o", p, "--features", "16", "--seed", "3", "--calibration", calib}
		if code, _, e := runCLI(args...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, e)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a, b := write("a.onnx"), write("b.onnx")
	if !bytes.Equal(a, b) {
		t.Error("same flags and calibration, different bytes")
	}
	m, err := onnx.Load(filepath.Join(tmp, "a.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	nodes := 0
	for _, n := range m.Graph.Node {
		if n.GetOpType() == "PerformerAttention" {
			nodes++
			if len(n.Input) != 8 || onnx.AttrInt(n, "center", 0) != 1 || onnx.AttrString(n, "features", "") != "aderf" {
				t.Errorf("node %s: %d inputs, attributes %v", n.GetName(), len(n.Input), n.Attribute)
			}
		}
	}
	if nodes != 6 {
		t.Errorf("%d PerformerAttention nodes, want 6", nodes)
	}
	if code, out, e := runCLI("validate", filepath.Join(tmp, "a.onnx"), "--text-file", held, "--vocab", filepath.Join("..", "..", "testdata", "real", "minilm")); code != 0 {
		t.Errorf("validate: exit %d\n%s\n%s", code, out, e)
	}
}
