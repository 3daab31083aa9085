package main

import (
	"math"
	"path/filepath"
	"strings"
	"testing"
)

// TestEmbedDim: embed --dim N writes N values per text, the unit vector
// of the first N values of the --raw vector; a --dim above the model's
// width exits 2 naming the flag, a negative one exits 1.
func TestEmbedDim(t *testing.T) {
	model, _ := evalFixture(t, 1)
	dir := filepath.Dir(model)
	texts := []string{"--text", "the river under a bridge", "--text", "old silver lamp near the window"}
	run := func(name string, extra ...string) ([]float32, int) {
		t.Helper()
		out := filepath.Join(dir, name+".npy")
		code, _, stderr := runCLI(append(append([]string{"embed", model, "-o", out, "--backend", "native"}, texts...), extra...)...)
		if code != exitOK {
			t.Fatalf("%v: exit %d: %s", extra, code, stderr)
		}
		_, vecs, dim := readNPYOut(t, out)
		return vecs, dim
	}
	raw, full := run("raw", "--raw")
	got, dim := run("dim", "--dim", "16")
	if dim != 16 || full != 64 {
		t.Fatalf("--dim 16 wrote %d values per text (the model's %d)", dim, full)
	}
	for i := 0; i < 2; i++ {
		head := raw[i*full : i*full+16]
		var norm float64
		for _, x := range head {
			norm += float64(x) * float64(x)
		}
		norm = math.Sqrt(norm)
		for j, x := range head {
			if d := math.Abs(float64(got[i*16+j]) - float64(x)/norm); d > 1e-6 {
				t.Fatalf("text %d value %d: %g, want %g", i, j, got[i*16+j], float64(x)/norm)
			}
		}
	}
	for _, c := range []struct {
		dim  string
		code int
		msg  string
	}{
		{"65", exitBadInput, "Dim 65 (--dim) is more than the 64 values"},
		{"-1", exitUsage, "--dim -1"},
	} {
		code, _, stderr := runCLI(append(append([]string{"embed", model, "-o", filepath.Join(dir, "bad.npy"), "--backend", "native"}, texts...), "--dim", c.dim)...)
		if code != c.code || !strings.Contains(stderr, c.msg) {
			t.Errorf("--dim %s: exit %d, %q; want %d and %q", c.dim, code, stderr, c.code, c.msg)
		}
	}
}
