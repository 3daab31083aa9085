//go:build unix

package main

import (
	"bytes"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/linearize/linearize/embed"
	"github.com/linearize/linearize/onnx"
)

// readParquetFile reads a vectors file that embed wrote in Parquet.
func readParquetFile(t *testing.T, path string, dim int) ([]string, []float32) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ids, vecs, err := embed.ReadParquet(bytes.NewReader(data), int64(len(data)), dim, -1)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return ids, vecs
}

// readNPYOut reads an .npy output and its ids file.
func readNPYOut(t *testing.T, out string) ([]string, []float32, int) {
	t.Helper()
	tt, err := onnx.ReadNPY(out)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := os.ReadFile(embed.IDsPath(out))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(ids), "\n"), "\n"), tt.Floats(), tt.Shape[1]
}

// sameBits fails unless the ids are equal and the vectors equal bit for
// bit.
func sameBits(t *testing.T, what string, ids []string, vecs []float32, wantIDs []string, want []float32) {
	t.Helper()
	if strings.Join(ids, "\n") != strings.Join(wantIDs, "\n") {
		t.Fatalf("%s: ids %q, want %q", what, ids, wantIDs)
	}
	if len(vecs) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(vecs), len(want))
	}
	for i := range vecs {
		if math.Float32bits(vecs[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: value %d is %g, want %g", what, i, vecs[i], want[i])
		}
	}
}

// parquetRuns writes the vectors of one corpus (11 documents, batch 1)
// as -o v.npy and v.parquet (3 parts of 4), small.parquet (one part:
// written from memory), a folder of Parquet parts and, by embed-merge,
// merged.parquet; it returns their folder and the .npy output.
func parquetRuns(t *testing.T, extra ...string) (dir, npy string) {
	t.Helper()
	path, dir := embedModel(t)
	jsonl, _ := streamCorpus(t, dir, 11)
	base := append([]string{"embed", path, "--jsonl", jsonl, "--backend", "native", "--window", "16", "--batch", "1"}, extra...)
	npy = filepath.Join(dir, "v.npy")
	for _, args := range [][]string{
		{"-o", npy, "--part-size", "4"},
		{"-o", filepath.Join(dir, "v.parquet"), "--part-size", "4"},
		{"-o", filepath.Join(dir, "small.parquet")},
		{"-o", filepath.Join(dir, "parts") + "/", "--part-size", "4", "--part-format", "parquet"},
	} {
		if code, _, stderr := runCLI(append(base, args...)...); code != exitOK {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
	}
	code, stdout, stderr := runMerge(t, filepath.Join(dir, "parts"), "-o", filepath.Join(dir, "merged.parquet"))
	if code != exitOK || !strings.Contains(stdout, "verified 1 folder") {
		t.Fatalf("embed-merge: exit %d: %s %s", code, stdout, stderr)
	}
	return dir, npy
}

// TestEmbedParquet: -o OUT.parquet holds, row for row, the ids and
// (bit for bit) the vectors of -o OUT.npy of the same run; a file built
// from parts, one written from memory and one merged from a folder of
// Parquet parts are the same bytes; the folder's manifest records the
// part format and no part folder is left beside the files. In chunks
// mode the rows are the chunks (ids DOCID#K).
func TestEmbedParquet(t *testing.T) {
	for _, mode := range []string{"chunk", "chunks"} {
		t.Run(mode, func(t *testing.T) {
			dir, npy := parquetRuns(t, "--mode", mode)
			wantIDs, want, dim := readNPYOut(t, npy)
			ids, vecs := readParquetFile(t, filepath.Join(dir, "v.parquet"), dim)
			sameBits(t, "v.parquet", ids, vecs, wantIDs, want)
			if mode == "chunks" && !strings.Contains(strings.Join(ids, " "), "#1") {
				t.Errorf("chunks mode: ids %q, want DOCID#K", ids)
			}
			whole, err := os.ReadFile(filepath.Join(dir, "v.parquet"))
			if err != nil {
				t.Fatal(err)
			}
			for _, other := range []string{"small.parquet", "merged.parquet"} {
				b, err := os.ReadFile(filepath.Join(dir, other))
				if err != nil || !bytes.Equal(b, whole) {
					t.Errorf("%s (%d bytes, %v) differs from v.parquet (%d bytes)", other, len(b), err, len(whole))
				}
			}
			m, err := embed.ReadManifest(filepath.Join(dir, "parts"))
			if err != nil || m == nil {
				t.Fatalf("manifest %v", err)
			}
			if m.Format != embed.PartsFormatParquet || m.Settings.PartFormat != embed.PartParquet || len(m.Parts) != 3 || !m.Complete {
				t.Errorf("manifest %+v", m)
			}
			got := folderVectors(t, filepath.Join(dir, "parts"))
			for i, id := range wantIDs {
				sameBits(t, "part "+id, []string{id}, got[id], []string{id}, want[i*dim:(i+1)*dim])
			}
			if left, _ := filepath.Glob(filepath.Join(dir, ".*")); len(left) > 0 {
				t.Errorf("left beside the outputs: %q", left)
			}
		})
	}
}

// TestEmbedParquetFlags: --part-format is for folder outputs and names
// npy or parquet; -o needs a known extension.
func TestEmbedParquetFlags(t *testing.T) {
	path, dir := embedModel(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-o", filepath.Join(dir, "v.npy"), "--part-format", "parquet"}, "--part-format needs a folder output"},
		{[]string{"-o", filepath.Join(dir, "v") + "/", "--part-format", "arrow"}, `--part-format "arrow": want npy or parquet`},
		{[]string{"-o", filepath.Join(dir, "v.arrow")}, "want a path ending in .parquet, .npy or .jsonl"},
	} {
		code, _, stderr := runCLI(append([]string{"embed", path, "--backend", "native", "--text", "the man"}, c.args...)...)
		if code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, %q; want exit %d and %q", c.args, code, stderr, exitUsage, c.want)
		}
	}
	if code, _, stderr := runMerge(t, dir, "-o", filepath.Join(dir, "m.arrow")); code != exitUsage || !strings.Contains(stderr, ".parquet, .npy or .jsonl") {
		t.Errorf("embed-merge -o m.arrow: exit %d, %q", code, stderr)
	}
}

// TestEmbedParquetReadByPyarrow: pyarrow, an independent reader, reads
// -o OUT.parquet, and the Parquet parts of a folder in order, as the
// documented table (id: string, embedding: list<float>) holding the ids
// and, bit for bit, the vectors of -o OUT.npy of the same run
// (testdata/parquet/read_parquet.py, run by the python of
// .tools/onnx-venv).
func TestEmbedParquetReadByPyarrow(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	py := filepath.Join(root, ".tools", "onnx-venv", "bin", "python")
	script := filepath.Join(root, "testdata", "parquet", "read_parquet.py")
	const setup = "run python3 testdata/spec/check_spec.py --venv (it creates .tools/onnx-venv with the pins of testdata/fixtures/onnx_venv.py, pyarrow among them)"
	if _, err := os.Stat(py); err != nil {
		t.Skipf("the onnx venv is missing (%v): %s", err, setup)
	}
	if out, err := exec.Command(py, "-c", "import pyarrow, numpy").CombinedOutput(); err != nil {
		t.Skipf("pyarrow is missing from the onnx venv (%v: %s): %s", err, bytes.TrimSpace(out), setup)
	}
	// Reading the script makes go test's cache depend on it.
	if _, err := os.ReadFile(script); err != nil {
		t.Fatal(err)
	}
	dir, npy := parquetRuns(t)
	parts, _ := filepath.Glob(filepath.Join(dir, "parts", "part-*.parquet"))
	sort.Strings(parts)
	if len(parts) != 3 {
		t.Fatalf("%d parts, want 3", len(parts))
	}
	for _, files := range [][]string{{filepath.Join(dir, "v.parquet")}, parts} {
		args := append([]string{script, npy, embed.IDsPath(npy)}, files...)
		out, err := exec.Command(py, args...).CombinedOutput()
		t.Logf("%s", out)
		if err != nil || !strings.HasPrefix(string(out), "ok: 11 rows of dimension 64 in ") {
			t.Errorf("%s %s: %v: %s", py, strings.Join(args, " "), err, out)
		}
	}
}
