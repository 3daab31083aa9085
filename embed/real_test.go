package embed

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// realModel is the pretrained all-MiniLM-L6-v2 built by
// scripts/real-model.sh; its sentence-transformers files are in
// testdata/real/minilm/.
var realModel = filepath.Join("..", "testdata", "real", "minilm.onnx")

// TestRealMiniLM: all-MiniLM-L6-v2's modules.json (Pooling: mean,
// Normalize) gives mean pooling and unit vectors equal to a direct run's
// normalised mean; a paraphrase is nearer than an unrelated sentence.
func TestRealMiniLM(t *testing.T) {
	if _, err := os.Stat(realModel); err != nil {
		t.Skipf("real model absent (%v); run scripts/real-model.sh", err)
	}
	st, err := readSTConfig(realModel)
	if err != nil {
		t.Fatal(err)
	}
	if st == nil || st.pooling != PoolMean || !st.normalize {
		t.Fatalf("minilm's sentence-transformers files: %+v; want mean pooling and a Normalize module", st)
	}
	e := open(t, realModel, Options{Mode: Truncate})
	if e.Pooling() != PoolMean || e.Dim() != 384 || e.Limit() != 512 || !strings.Contains(e.String(), "normalise") {
		t.Fatalf("minilm: %s; want pooling mean, dim 384, limit 512, normalise", e)
	}
	texts := []string{"A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby."}
	got, err := e.Embed(texts)
	if err != nil {
		t.Fatal(err)
	}
	want := reference(t, realModel, texts, PoolMean)
	for i := range texts {
		if n := norm(got[i]); math.Abs(n-1) > 1e-5 {
			t.Errorf("text %d: norm %g, want 1", i, n)
		}
		near(t, texts[i], got[i], unit(want[i]), 1e-5)
	}
	if near, far := Cosine(got[0], got[1]), Cosine(got[0], got[2]); !(near > far+0.2) {
		t.Errorf("cosine of a paraphrase %.3f, of an unrelated sentence %.3f: want the paraphrase clearly nearer", near, far)
	}
}
