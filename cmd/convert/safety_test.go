package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/linearize/linearize/infer/infertest"
	"github.com/linearize/linearize/models"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// safetyBERT is a one-layer BERT small enough to convert in milliseconds.
func safetyBERT(t *testing.T) *onnxpb.ModelProto {
	t.Helper()
	m, err := models.BERT(models.Config{Vocab: 30, Hidden: 16, Heads: 2, Layers: 1, Intermediate: 32,
		MaxPositions: 16, TypeVocab: 2, Opset: 17, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func writeModel(t *testing.T, m *onnxpb.ModelProto, path string) {
	t.Helper()
	b, err := onnx.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// externalize turns initializer t into external data at location with the
// given offset and length entries.
func externalize(t *onnxpb.TensorProto, location string, offset, length int) {
	loc := onnxpb.TensorProto_EXTERNAL
	t.DataLocation = &loc
	kv := func(k, v string) *onnxpb.StringStringEntryProto {
		return &onnxpb.StringStringEntryProto{Key: &k, Value: &v}
	}
	t.ExternalData = []*onnxpb.StringStringEntryProto{
		kv("location", location), kv("offset", strconv.Itoa(offset)), kv("length", strconv.Itoa(length)),
	}
	t.RawData = nil
}

// fileState is what a test remembers of an input file to show that a
// failed command did not touch it.
type fileState struct {
	data  []byte
	mtime time.Time
}

func stateOf(t *testing.T, path string) *fileState {
	t.Helper()
	st, err := os.Lstat(path)
	if err != nil {
		return nil
	}
	if st.IsDir() {
		return &fileState{mtime: st.ModTime()}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	return &fileState{b, st.ModTime()}
}

func (s *fileState) same(o *fileState) bool {
	if s == nil || o == nil {
		return s == o
	}
	return bytes.Equal(s.data, o.data) && s.mtime.Equal(o.mtime)
}

// safeRun runs the CLI in-process and turns a panic into a test failure
// that names the command.
func safeRun(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("convert %s panicked: %v", strings.Join(args, " "), r)
		}
	}()
	return runCLI(args...)
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// TestRefusesMalformedModels feeds one malformed model per class to
// inspect, performer and linformer. Each must exit 2 with a one-line error
// naming the file and the node or tensor at fault, write nothing (not even
// a temp file) and leave the input as it was.
func TestRefusesMalformedModels(t *testing.T) {
	// setup builds the case in dir/in (dir/outside is outside the model's
	// folder) and returns the model path and the substrings the error must
	// contain besides the model's file name.
	type setupFunc func(t *testing.T, in, outside string) (model string, want []string)
	broken := func(edit func(m *onnxpb.ModelProto) []string) setupFunc {
		return func(t *testing.T, in, outside string) (string, []string) {
			m := safetyBERT(t)
			want := edit(m)
			p := filepath.Join(in, "model.onnx")
			writeModel(t, m, p)
			return p, want
		}
	}
	// external writes the first initializer's data to a file and points
	// the tensor at it through location (made by loc from the folders).
	external := func(loc func(in, outside string) (location string, dataPath string), lengthDelta int) setupFunc {
		return func(t *testing.T, in, outside string) (string, []string) {
			m := safetyBERT(t)
			w := m.Graph.Initializer[0]
			location, dataPath := loc(in, outside)
			if err := os.WriteFile(dataPath, w.RawData, 0o644); err != nil {
				t.Fatal(err)
			}
			externalize(w, location, 0, len(w.RawData)+lengthDelta)
			p := filepath.Join(in, "model.onnx")
			writeModel(t, m, p)
			return p, []string{fmt.Sprintf("tensor %q", w.GetName())}
		}
	}
	cases := []struct {
		name  string
		setup setupFunc
	}{
		{"truncated file", func(t *testing.T, in, _ string) (string, []string) {
			b, _ := onnx.Encode(safetyBERT(t))
			p := filepath.Join(in, "model.onnx")
			os.WriteFile(p, b[:len(b)/2], 0o644)
			return p, []string{"not an ONNX model"}
		}},
		{"non-ONNX file", func(t *testing.T, in, _ string) (string, []string) {
			p := filepath.Join(in, "model.onnx")
			os.WriteFile(p, []byte("<html><body>404 Not Found</body></html>\n"), 0o644)
			return p, []string{"not an ONNX model"}
		}},
		{"empty file", func(t *testing.T, in, _ string) (string, []string) {
			p := filepath.Join(in, "model.onnx")
			os.WriteFile(p, nil, 0o644)
			return p, []string{"not an ONNX model"}
		}},
		{"missing file", func(t *testing.T, in, _ string) (string, []string) {
			return filepath.Join(in, "model.onnx"), []string{"no such file"}
		}},
		{"directory", func(t *testing.T, in, _ string) (string, []string) {
			p := filepath.Join(in, "model.onnx")
			os.Mkdir(p, 0o755)
			return p, []string{"is a directory"}
		}},
		{"cycle", broken(func(m *onnxpb.ModelProto) []string {
			// The first node (Shape of input_ids) now reads the encoder
			// output, which depends on it through the position ids.
			m.Graph.Node[0].Input[0] = m.Graph.Output[0].GetName()
			return []string{"cycle", "node "}
		})},
		{"dangling input", broken(func(m *onnxpb.ModelProto) []string {
			n := m.Graph.Node[5]
			n.Input[0] = "nowhere"
			return []string{fmt.Sprintf("node %q", n.GetName()), `input "nowhere"`}
		})},
		{"duplicate output names", broken(func(m *onnxpb.ModelProto) []string {
			n := m.Graph.Node[3]
			n.Output[0] = m.Graph.Node[1].Output[0]
			return []string{fmt.Sprintf("node %q", n.GetName()), "produced by another node"}
		})},
		{"missing initializer", broken(func(m *onnxpb.ModelProto) []string {
			name := m.Graph.Initializer[0].GetName()
			m.Graph.Initializer = m.Graph.Initializer[1:]
			return []string{fmt.Sprintf("input %q", name), "node "}
		})},
		{"raw_data size mismatch", broken(func(m *onnxpb.ModelProto) []string {
			w := m.Graph.Initializer[1]
			w.RawData = w.RawData[:len(w.RawData)-4]
			return []string{fmt.Sprintf("tensor %q", w.GetName()), "raw_data has"}
		})},
		{"absurd dims", broken(func(m *onnxpb.ModelProto) []string {
			w := m.Graph.Initializer[0]
			w.Dims = []int64{1 << 40, 1 << 40}
			return []string{fmt.Sprintf("tensor %q", w.GetName()), "exceeds"}
		})},
		{"negative dims", broken(func(m *onnxpb.ModelProto) []string {
			w := m.Graph.Initializer[0]
			w.Dims = []int64{-30, -16}
			return []string{fmt.Sprintf("tensor %q", w.GetName()), "negative dimension"}
		})},
		{"missing opset import for a custom domain", broken(func(m *onnxpb.ModelProto) []string {
			n := m.Graph.Node[5]
			d := "com.example.custom"
			n.Domain = &d
			return []string{fmt.Sprintf("node %q", n.GetName()), `domain "com.example.custom"`}
		})},
		{"external data with ../", external(func(in, outside string) (string, string) {
			return "../outside/w.bin", filepath.Join(outside, "w.bin")
		}, 0)},
		{"external data with an absolute path", external(func(in, outside string) (string, string) {
			p := filepath.Join(outside, "w.bin")
			return p, p
		}, 0)},
		{"external data through a symlink escaping the folder", func(t *testing.T, in, outside string) (string, []string) {
			p, want := external(func(in, outside string) (string, string) {
				return "w.bin", filepath.Join(outside, "w.bin")
			}, 0)(t, in, outside)
			if err := os.Symlink(filepath.Join(outside, "w.bin"), filepath.Join(in, "w.bin")); err != nil {
				t.Skipf("cannot make a symlink here: %v", err)
			}
			return p, append(want, "outside the model's folder")
		}},
		{"external data length past EOF", external(func(in, outside string) (string, string) {
			return "w.bin", filepath.Join(in, "w.bin")
		}, 64)},
	}
	type cmdCase struct {
		name string
		args func(model, out string) []string
	}
	cmds := []cmdCase{
		{"inspect", func(model, out string) []string { return []string{"inspect", model} }},
		{"performer", func(model, out string) []string {
			return []string{"performer", model, "-o", out, "--features", "8"}
		}},
		{"linformer", func(model, out string) []string {
			return []string{"linformer", model, "-o", out, "--k", "4"}
		}},
		{"extend-positions", func(model, out string) []string {
			return []string{"extend-positions", model, "-o", out, "--max-positions", "32"}
		}},
	}

	// The unbroken model must pass every command, or the refusals below
	// would prove nothing.
	{
		root := t.TempDir()
		p := filepath.Join(root, "model.onnx")
		writeModel(t, safetyBERT(t), p)
		for _, c := range cmds {
			out := filepath.Join(root, c.name+".onnx")
			if code, _, errOut := safeRun(t, c.args(p, out)...); code != 0 {
				t.Fatalf("%s on the valid model: exit %d: %s", c.name, code, errOut)
			}
			if c.name != "inspect" {
				if _, err := onnx.Load(out); err != nil {
					t.Fatalf("%s wrote an unreadable model: %v", c.name, err)
				}
			}
		}
	}

	for _, tc := range cases {
		for _, c := range cmds {
			t.Run(tc.name+"/"+c.name, func(t *testing.T) {
				root := t.TempDir()
				in, outside, outDir := filepath.Join(root, "in"), filepath.Join(root, "outside"), filepath.Join(root, "out")
				for _, d := range []string{in, outside, outDir} {
					if err := os.Mkdir(d, 0o755); err != nil {
						t.Fatal(err)
					}
				}
				model, want := tc.setup(t, in, outside)
				inBefore, outsideBefore := listDir(t, in), listDir(t, outside)
				before := stateOf(t, model)
				out := filepath.Join(outDir, "converted.onnx")

				code, stdout, stderr := safeRun(t, c.args(model, out)...)
				if code != exitBadInput {
					t.Errorf("exit %d, want %d (bad input); stderr: %s", code, exitBadInput, stderr)
				}
				msg := strings.TrimSuffix(stderr, "\n")
				t.Log(msg)
				if msg == "" || strings.Contains(msg, "\n") {
					t.Errorf("want a one-line error, got %q", stderr)
				}
				for _, w := range append([]string{model}, want...) {
					if !strings.Contains(msg, w) {
						t.Errorf("error %q does not mention %q", msg, w)
					}
				}
				if strings.Contains(stdout, "wrote") {
					t.Errorf("stdout claims a write: %q", stdout)
				}
				if left := listDir(t, outDir); len(left) != 0 {
					t.Errorf("output folder holds %v after a failed run", left)
				}
				if got := listDir(t, in); strings.Join(got, ",") != strings.Join(inBefore, ",") {
					t.Errorf("input folder changed from %v to %v", inBefore, got)
				}
				if got := listDir(t, outside); strings.Join(got, ",") != strings.Join(outsideBefore, ",") {
					t.Errorf("folder outside the model changed from %v to %v", outsideBefore, got)
				}
				if !before.same(stateOf(t, model)) {
					t.Error("the input model changed")
				}
			})
		}
	}
}

// TestOutputSafety covers -o: the input is never replaced without
// --overwrite, a missing output folder or a directory as -o is refused
// before any work, and a conversion that fails leaves nothing behind.
func TestOutputSafety(t *testing.T) {
	root := t.TempDir()
	model := filepath.Join(root, "model.onnx")
	writeModel(t, safetyBERT(t), model)
	subdir := filepath.Join(root, "adir")
	os.Mkdir(subdir, 0o755)
	missing := filepath.Join(root, "no-such-folder", "out.onnx")

	writers := []struct {
		name string
		args []string // -o is appended
	}{
		{"performer", []string{"performer", model, "--features", "8"}},
		{"linformer", []string{"linformer", model, "--k", "4"}},
		{"extend-positions", []string{"extend-positions", model, "--max-positions", "32"}},
	}
	for _, w := range writers {
		t.Run(w.name, func(t *testing.T) {
			before := stateOf(t, model)
			rootBefore := listDir(t, root)
			check := func(label string, wantCode int, wantMsg string, extra ...string) {
				t.Helper()
				args := append(append([]string(nil), w.args...), extra...)
				code, _, stderr := safeRun(t, args...)
				if code != wantCode {
					t.Errorf("%s: exit %d, want %d; stderr: %s", label, code, wantCode, stderr)
				}
				if !strings.Contains(stderr, wantMsg) {
					t.Errorf("%s: error %q does not mention %q", label, stderr, wantMsg)
				}
				if !before.same(stateOf(t, model)) {
					t.Errorf("%s: the input model changed", label)
				}
				if got := listDir(t, root); strings.Join(got, ",") != strings.Join(rootBefore, ",") {
					t.Errorf("%s: folder changed from %v to %v", label, rootBefore, got)
				}
			}
			check("-o INPUT", exitUsage, "--overwrite", "-o", model)
			// The same file under another spelling is still the input.
			check("-o ./INPUT", exitUsage, "--overwrite", "-o", filepath.Join(root, ".", "adir", "..", "model.onnx"))
			check("missing output folder", exitBadInput, "does not exist", "-o", missing)
			check("-o DIRECTORY", exitBadInput, "is a directory", "-o", subdir)
			if left := listDir(t, subdir); len(left) != 0 {
				t.Errorf("directory given as -o now holds %v", left)
			}
		})
	}

	t.Run("failed conversion leaves no file", func(t *testing.T) {
		out := filepath.Join(root, "out.onnx")
		before := stateOf(t, model)
		for _, args := range [][]string{
			{"linformer", model, "-o", out, "--k", "-3"},
			{"performer", model, "-o", out, "--features", "-1"},
			{"performer", model, "-o", out, "--omega", "bogus"},
			{"performer", model, "-o", out, "--features", "100000000"},                                  // would be gigabytes
			{"linformer", model, "-o", out, "--init", "gaussian", "--k", "40000", "--max-len", "40000"}, // would be gigabytes
			{"linformer", model, "-o", out, "--init", "bogus"},
			{"local-pooled", model, "-o", out, "--segments", "1000000"},
			{"local-pooled", model, "-o", out, "--sinks", "middle"},
			{"local-pooled", model, "-o", out, "--block", "0"},
			{"extend-positions", model, "-o", out, "--max-positions", "8"},         // fewer rows than the table has
			{"extend-positions", model, "-o", out, "--max-positions", "100000000"}, // would be gigabytes
		} {
			code, _, stderr := safeRun(t, args...)
			if code == exitOK {
				t.Errorf("%v succeeded", args)
			}
			if _, err := os.Lstat(out); err == nil {
				t.Errorf("%v left %s behind", args, out)
				os.Remove(out)
			}
			if strings.Count(strings.TrimSuffix(stderr, "\n"), "\n") != 0 {
				t.Errorf("%v: error is not one line: %q", args, stderr)
			}
		}
		if !before.same(stateOf(t, model)) {
			t.Error("the input model changed")
		}
		for _, n := range listDir(t, root) {
			if strings.Contains(n, ".tmp-") {
				t.Errorf("temp file %s left behind", n)
			}
		}
	})

	t.Run("--overwrite replaces the input with a valid model", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "m.onnx")
		writeModel(t, safetyBERT(t), p)
		before := stateOf(t, p)
		code, _, stderr := safeRun(t, "performer", p, "-o", p, "--features", "8", "--overwrite")
		if code != exitOK {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		if before.same(stateOf(t, p)) {
			t.Fatal("the model was not replaced")
		}
		m, err := onnx.Load(p)
		if err != nil {
			t.Fatalf("replaced model does not load: %v", err)
		}
		if h := onnx.Summarize(m).Ops; h["ai.linearize"]["PerformerAttention"] == 0 && !strings.Contains(fmt.Sprint(h), "PerformerAttention") {
			t.Errorf("replaced model has no PerformerAttention: %v", h)
		}
	})

	t.Run("bench --json-out/--plot onto the model", func(t *testing.T) {
		before := stateOf(t, model)
		for _, flagName := range []string{"--json-out", "--plot"} {
			code, _, stderr := safeRun(t, "bench", model, flagName, model)
			if code != exitUsage || !strings.Contains(stderr, "input model") {
				t.Errorf("bench %s MODEL: exit %d, stderr %q; want exit %d naming the input model", flagName, code, stderr, exitUsage)
			}
			code, _, stderr = safeRun(t, "bench", model, flagName, missing)
			if code != exitBadInput || !strings.Contains(stderr, "does not exist") {
				t.Errorf("bench %s in a missing folder: exit %d, stderr %q", flagName, code, stderr)
			}
		}
		if !before.same(stateOf(t, model)) {
			t.Error("the input model changed")
		}
	})

	t.Run("unknown flag", func(t *testing.T) {
		for _, c := range []string{"inspect", "performer", "linformer", "extend-positions"} {
			code, _, stderr := safeRun(t, c, model, "--no-such-flag", "-o", filepath.Join(root, "x.onnx"))
			if code != exitUsage {
				t.Errorf("%s --no-such-flag: exit %d, want %d; stderr %s", c, code, exitUsage, stderr)
			}
			if !strings.Contains(stderr, "no-such-flag") {
				t.Errorf("%s: error %q does not name the flag", c, stderr)
			}
		}
		if _, err := os.Lstat(filepath.Join(root, "x.onnx")); err == nil {
			t.Error("a usage error wrote an output")
		}
	})
}

// TestRunRefusesAbsurdDeclaredInputs: `run --random-inputs` sizes inputs
// from the model's declarations, which a hostile model can make absurd; the
// command must refuse (exit 2, naming the input) instead of exhausting
// memory, on both backends.
func TestRunRefusesAbsurdDeclaredInputs(t *testing.T) {
	for _, dims := range [][]onnx.Dim{{{Value: 1}, {Value: 1 << 40}}, {{Value: 1 << 20}, {Value: 1 << 20}}, {{Value: 1 << 31}, {Value: 1 << 31}, {Value: 1 << 31}}} {
		// Y = Identity(X): nothing but the declaration is large.
		x := onnx.MakeValueInfo("X", onnx.Float, dims)
		y := onnx.MakeValueInfo("Y", onnx.Float, dims)
		op, name, ir, ver, dom := "Identity", "id", int64(8), int64(17), ""
		m := &onnxpb.ModelProto{
			IrVersion:   &ir,
			OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: &dom, Version: &ver}},
			Graph: &onnxpb.GraphProto{
				Name:   &name,
				Node:   []*onnxpb.NodeProto{{Name: &name, OpType: &op, Input: []string{"X"}, Output: []string{"Y"}}},
				Input:  []*onnxpb.ValueInfoProto{x},
				Output: []*onnxpb.ValueInfoProto{y},
			},
		}
		p := filepath.Join(t.TempDir(), "huge.onnx")
		writeModel(t, m, p)
		for _, backend := range []string{"native", "ort"} {
			if backend == "ort" && !infertest.ORT(t) {
				continue
			}
			code, _, stderr := safeRun(t, "run", p, "--backend", backend, "--random-inputs")
			if code != exitBadInput {
				t.Errorf("%s, dims %v: exit %d, want %d; stderr: %s", backend, dims, code, exitBadInput, stderr)
			}
			if !strings.Contains(stderr, `input "X"`) {
				t.Errorf("%s: error %q does not name the input", backend, stderr)
			}
		}
	}
}
