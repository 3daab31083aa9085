package embed

import (
	"errors"
	"testing"
)

// TestChunksAreTruncatedWindows: chunks mode gives one vector per
// window, each the Truncate embedding of that window's words alone; with
// an overlap the windows start Window−2−Overlap apart; chunk mode's
// vector is their mean weighted by wordpieces.
func TestChunksAreTruncatedWindows(t *testing.T) {
	path := modelDir(t)
	const window = 10 // 8 wordpieces per chunk
	tr := open(t, path, Options{Mode: Truncate, Window: window})
	for _, c := range []struct {
		overlap int
		pieces  []string // the windows' words
		weights []float64
	}{
		{0, []string{text(8, 0), text(5, 8)}, []float64{8, 5}},
		{3, []string{text(8, 0), text(8, 5)}, []float64{8, 8}},
		{6, []string{text(8, 0), text(8, 2), text(8, 4), text(7, 6)}, []float64{8, 8, 8, 7}},
	} {
		want, err := tr.Embed(c.pieces)
		if err != nil {
			t.Fatal(err)
		}
		chs := open(t, path, Options{Mode: Chunks, Window: window, Overlap: c.overlap})
		got, err := chs.EmbedChunks([]string{text(13, 0), text(3, 0)})
		if err != nil {
			t.Fatal(err)
		}
		if len(got[0]) != len(c.pieces) || len(got[1]) != 1 {
			t.Fatalf("overlap %d: %d and %d chunks, want %d and 1", c.overlap, len(got[0]), len(got[1]), len(c.pieces))
		}
		mean := make([]float64, len(want[0]))
		total := 0.0
		for i := range c.pieces {
			near(t, "chunk", got[0][i], toF64(want[i]), 1e-5)
			u := unit(toF64(want[i]))
			for k := range mean {
				mean[k] += c.weights[i] * u[k]
			}
			total += c.weights[i]
		}
		for k := range mean {
			mean[k] /= total
		}
		ch := open(t, path, Options{Mode: Chunk, Window: window, Overlap: c.overlap})
		v, err := ch.Embed([]string{text(13, 0)})
		if err != nil {
			t.Fatal(err)
		}
		near(t, "weighted mean", v[0], unit(mean), 1e-5)
		if _, err := chs.Embed([]string{"x"}); err == nil {
			t.Error("Embed in chunks mode gave one vector per text")
		}
	}
	if _, err := Open(path, Options{Mode: Chunks, Window: window, Overlap: 8, Backend: "native"}); err == nil {
		t.Error("an overlap of a whole window was accepted")
	}
	if _, err := Open(path, Options{Mode: Truncate, Overlap: 2, Backend: "native"}); err == nil {
		t.Error("an overlap in truncate mode was accepted")
	}
}

// chunkFake gives every text two vectors: the document's own and its
// opposite, so that its best chunk is its own vector.
type chunkFake struct{ fakeEncoder }

func (c chunkFake) EmbedChunks(texts []string) ([][][]float32, error) {
	v, _ := c.Embed(texts)
	out := make([][][]float32, len(v))
	for i, x := range v {
		neg := make([]float32, len(x))
		for k := range x {
			neg[k] = -x[k]
		}
		out[i] = [][]float32{neg, x}
	}
	return out, nil
}

// TestEvalMaxSim: a MaxSim system scores a document by its best chunk:
// with the document's vector among its chunks it ranks as the system of
// that vector alone, and it stores two vectors per document.
func TestEvalMaxSim(t *testing.T) {
	fx := newRankFixture(t)
	systems := []System{{Name: "chunk", Encoder: fx.docVec}, {Name: "maxsim", Encoder: chunkFake{fx.docVec}, MaxSim: true}}
	r, err := Evaluate(fx.tok, fx.docs, fx.query, systems, fx.o)
	if err != nil {
		t.Fatal(err)
	}
	if r.Systems[1].All != r.Systems[0].All || r.Systems[1].VectorsPerDoc != 2 || r.Systems[0].VectorsPerDoc != 1 {
		t.Errorf("maxsim %+v (%.1f vectors/doc), chunk %+v", r.Systems[1].All, r.Systems[1].VectorsPerDoc, r.Systems[0].All)
	}
	_, err = Evaluate(fx.tok, fx.docs, fx.query, []System{{Name: "x", Encoder: fx.docVec, MaxSim: true}}, fx.o)
	if !errors.Is(err, ErrEvalOption) {
		t.Errorf("MaxSim on a one-vector encoder: %v", err)
	}
}
