package embed

import (
	"fmt"
	"strings"
	"testing"
)

// TestDim: Options.Dim keeps the first values of each pooled vector
// before normalising, as sentence-transformers' truncate_dim: in
// Truncate mode the vector is the unit vector of the first Dim values of
// the raw (unnormalised) full vector; in Chunk mode the chunks' truncated
// unit vectors are averaged by their wordpieces. A Dim above the model's
// width is refused.
func TestDim(t *testing.T) {
	path := modelDir(t)
	const k = 16
	texts := []string{text(20, 1), text(5, 3)}
	raw, err := open(t, path, Options{Mode: Truncate, Raw: true}).Embed(texts)
	if err != nil {
		t.Fatal(err)
	}
	e := open(t, path, Options{Mode: Truncate, Dim: k})
	got, err := e.Embed(texts)
	if err != nil {
		t.Fatal(err)
	}
	if e.Dim() != k || !strings.Contains(e.String(), fmt.Sprintf("dim %d (the first %d of 64)", k, k)) {
		t.Errorf("Dim %d, String %q", e.Dim(), e.String())
	}
	for i := range texts {
		if len(got[i]) != k {
			t.Fatalf("text %d: %d values, want %d", i, len(got[i]), k)
		}
		near(t, fmt.Sprintf("truncate, text %d", i), got[i], unit(toF64(raw[i][:k])), 1e-6)
	}

	// Chunk mode, window 10: 8 and 5 wordpieces.
	first, second := text(8, 0), text(5, 8)
	parts, err := open(t, path, Options{Mode: Truncate, Window: 10, Raw: true}).Embed([]string{first, second})
	if err != nil {
		t.Fatal(err)
	}
	want := make([]float64, k)
	for i, p := range parts {
		u := unit(toF64(p[:k]))
		for j := range want {
			want[j] += []float64{8, 5}[i] / 13 * u[j]
		}
	}
	ch, err := open(t, path, Options{Mode: Chunk, Window: 10, Dim: k}).Embed([]string{first + " " + second})
	if err != nil {
		t.Fatal(err)
	}
	near(t, "chunk", ch[0], unit(want), 1e-6)

	for _, o := range []Options{{Dim: 65}, {Dim: -1}} {
		o.Backend = "native"
		if e, err := Open(path, o); err == nil {
			e.Close()
			t.Errorf("Dim %d: opened, want an error", o.Dim)
		}
	}
}
