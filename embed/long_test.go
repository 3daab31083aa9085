package embed

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/onnx"
)

// writeLong converts the model at path with convert.ToLong and saves the
// result beside it (where the tokenizer is).
func writeLong(t *testing.T, path string, o convert.LongOptions) string {
	t.Helper()
	m, err := onnx.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	long, _, err := convert.ToLong(m, o)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(filepath.Dir(path), "long.onnx")
	if err := onnx.Save(long, out, onnx.SaveOptions{Overwrite: true}); err != nil {
		t.Fatal(err)
	}
	return out
}

// Long mode frames every window as [CLS] … [SEP]: on a long model with
// the defaults (no far field, no sinks), every window is then read exactly as the original
// reads that chunk alone, so the long vector is the mean of all the chunks'
// token states — the token-count-weighted mean of the original's raw
// (unnormalised) mean-pooled chunk embeddings, computed here chunk by
// chunk with the original in Truncate mode.
func TestLongFramesWindowsAsChunks(t *testing.T) {
	path := modelDir(t)
	orig := open(t, path, Options{Mode: Truncate, Pooling: PoolMean, Raw: true})
	w := orig.Window() // the position limit, 128
	long := writeLong(t, path, convert.LongOptions{MaxLength: 4 * w})
	e := open(t, long, Options{Pooling: PoolMean})
	if e.Mode() != Long || e.Window() != w {
		t.Fatalf("long model: %s; want mode long, window %d", e, w)
	}
	for _, n := range []int{w - 2, w + 5, 3*(w-2) + 7} {
		txt := text(n, 3)
		got, err := e.Embed([]string{txt})
		if err != nil {
			t.Fatal(err)
		}
		want := make([]float64, e.Dim())
		for lo := 0; lo < n; lo += w - 2 {
			k := min(w-2, n-lo)
			v, err := orig.Embed([]string{text(k, 3+lo)})
			if err != nil {
				t.Fatal(err)
			}
			for i, x := range v[0] {
				want[i] += float64(k+2) * float64(x) // k wordpieces, [CLS], [SEP]
			}
		}
		near(t, "long vector vs chunk-by-chunk original", got[0], unit(want), 1e-5)
	}
	// Past the limit, the framed length (wordpieces plus two per window)
	// is what is checked.
	// and the error names the wordpieces that fit: 4 windows of w−2.
	if _, err := e.Embed([]string{text(4*(w-2)+1, 0)}); err == nil {
		t.Errorf("%d wordpieces (5 windows) on a model of %d tokens: no error", 4*(w-2)+1, 4*w)
	} else if want := fmt.Sprintf("admits %d tokens per pass (metadata linearize.max_length of a model written by convert long), %d wordpieces;", 4*w, 4*(w-2)); !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not say %q", err, want)
	}
	if _, err := e.Embed([]string{text(4*(w-2), 0)}); err != nil {
		t.Errorf("4 full windows on a model of %d tokens: %v", 4*w, err)
	}
}
