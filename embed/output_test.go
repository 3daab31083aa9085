package embed

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/onnx"
)

// TestWriteVectors: each format is the same bytes whatever chunks the
// vectors come in; .npy is what onnx.EncodeNPY writes, with its ids
// file; .jsonl is one {"id", "embedding"} per line; a count other than
// the one announced, and another extension, are refused and leave
// nothing.
func TestWriteVectors(t *testing.T) {
	const n, dim = 7, 5
	ids, vecs := parquetVectors(n, dim)
	dir := t.TempDir()
	// chunked hands the vectors in chunks of size k.
	chunked := func(k int) func(func([]string, []float32) error) error {
		return func(yield func([]string, []float32) error) error {
			for i := 0; i < n; i += k {
				j := min(i+k, n)
				if err := yield(ids[i:j], vecs[i*dim:j*dim]); err != nil {
					return err
				}
			}
			return nil
		}
	}
	for _, ext := range []string{".npy", ".jsonl", ".parquet"} {
		var first []byte
		for _, k := range []int{n, 1, 3} {
			out := filepath.Join(dir, fmt.Sprintf("v%d%s", k, ext))
			if err := WriteVectors(out, n, dim, chunked(k)); err != nil {
				t.Fatalf("%s: %v", out, err)
			}
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if first == nil {
				first = b
			} else if !bytes.Equal(b, first) {
				t.Errorf("%s: chunks of %d give other bytes than one chunk", ext, k)
			}
		}
		switch ext {
		case ".npy":
			var want bytes.Buffer
			if err := onnx.EncodeNPY(&want, onnx.NewFloat([]int{n, dim}, vecs)); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(first, want.Bytes()) {
				t.Error(".npy differs from onnx.EncodeNPY's")
			}
			if b, _ := os.ReadFile(IDsPath(filepath.Join(dir, "v1.npy"))); string(b) != strings.Join(ids, "\n")+"\n" {
				t.Errorf("ids file %q", b)
			}
		case ".jsonl":
			lines := strings.Split(strings.TrimSuffix(string(first), "\n"), "\n")
			var rec struct {
				ID        string    `json:"id"`
				Embedding []float32 `json:"embedding"`
			}
			if err := json.Unmarshal([]byte(lines[n-1]), &rec); err != nil || len(lines) != n || rec.ID != ids[n-1] || fmt.Sprint(rec.Embedding) != fmt.Sprint(vecs[(n-1)*dim:]) {
				t.Errorf("jsonl: %d lines, last %+v, %v", len(lines), rec, err)
			}
		}
	}
	for _, c := range []struct {
		out  string
		n    int
		want string
	}{
		{"short.npy", n + 1, "7 vectors, 8 announced"},
		{"long.parquet", n - 1, "more than the 6 vectors announced"},
		{"short.jsonl", n + 1, "7 vectors, 8 announced"},
		{"v.csv", n, "want a file ending in .npy, .jsonl or .parquet"},
	} {
		out := filepath.Join(dir, "bad", c.out)
		os.MkdirAll(filepath.Dir(out), 0o755)
		if err := WriteVectors(out, c.n, dim, chunked(2)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s, %d announced: %v, want %q", c.out, c.n, err, c.want)
		}
		if es, _ := os.ReadDir(filepath.Dir(out)); len(es) > 0 {
			t.Errorf("%s: left %d files", c.out, len(es))
		}
	}
}
