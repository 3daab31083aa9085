package embed

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/models"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/tokenize"
)

// testVocab is modelDir's vocab.txt: [PAD] [UNK] [CLS] [SEP] [MASK] and
// the words.
func testVocab() string {
	return "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n" + strings.Join(words, "\n") + "\n"
}

// modernBERTDir writes a tiny ModernBERT (rotary positions, no position
// table; its vocabulary the test vocab's) into a temporary folder with
// the test vocab.txt and, unless config is "", a config.json of that
// text beside it, and returns the model's path.
func modernBERTDir(t testing.TB, config string) string {
	t.Helper()
	dir := t.TempDir()
	cfg := models.ModernBERTTinyConfig()
	cfg.Vocab = 5 + len(words)
	m, err := models.ModernBERT(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.DocString = nil // the limit comes from the config alone
	path := filepath.Join(dir, "mb.onnx")
	if err := onnx.Save(m, path, onnx.SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "vocab.txt"), []byte(testVocab()), 0o644); err != nil {
		t.Fatal(err)
	}
	if config != "" {
		if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// wholeReference runs the model at path on [CLS] text [SEP] directly, in
// one pass of exactly that many tokens (no padding), and returns the
// L2-normalised mean of last_hidden_state.
func wholeReference(t *testing.T, path, txt string) []float64 {
	t.Helper()
	return unit(hiddenRows(directHidden(t, path, txt), PoolMean, 0))
}

// directHidden runs the model at path directly (native backend) on
// [CLS] txt [SEP], exactly that many tokens, and returns its
// last_hidden_state [1, tokens, dim].
func directHidden(t *testing.T, path, txt string) *onnx.Tensor {
	t.Helper()
	m, err := onnx.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenize.LoadForModel(path)
	if err != nil {
		t.Fatal(err)
	}
	cls, _ := tok.ID("[CLS]")
	sep, _ := tok.ID("[SEP]")
	ids := append(append([]int64{cls}, tok.IDs(txt)...), sep)
	mask := make([]int64, len(ids))
	for i := range mask {
		mask[i] = 1
	}
	sess, err := infer.Open("native", m, infer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	feed, err := infer.TokenFeed(sess.Inputs(), 1, len(ids), ids, mask)
	if err != nil {
		t.Fatal(err)
	}
	res, err := sess.Run(feed, "last_hidden_state")
	if err != nil {
		t.Fatal(err)
	}
	h := res["last_hidden_state"]
	if len(h.Shape) != 3 || h.Shape[1] != len(ids) {
		t.Fatalf("direct run: shape %v for %d tokens", h.Shape, len(ids))
	}
	return h
}

// TestLongContextModelReadsWhole: a model without a position table whose
// config.json says max_position_embeddings 1024 is a long-context model:
// Auto mode is Long with that limit, and a document of 700 wordpieces is
// read whole in one pass — its vector is the model's own on the whole
// token sequence —, one past the limit is refused naming the limit and
// the config, and chunk mode reads windows of the limit.
func TestLongContextModelReadsWhole(t *testing.T) {
	path := modernBERTDir(t, `{"model_type": "modernbert", "max_position_embeddings": 1024}`)
	cfg := filepath.Join(filepath.Dir(path), "config.json")
	e := open(t, path, Options{})
	src := "config.json beside the model (" + cfg + "): max_position_embeddings 1024"
	if e.Mode() != Long || e.Limit() != 1024 || e.ContextLimit().Source != src || e.Window() != 1024 {
		t.Fatalf("ModernBERT with a config of 1024: %s; want mode long, limit 1024 from %q", e, src)
	}
	if !strings.Contains(e.String(), "limit 1024 ("+src+")") {
		t.Errorf("String() %q does not name the limit's source", e)
	}
	doc := text(700, 1)
	got, err := e.Embed([]string{doc, "the man"})
	if err != nil {
		t.Fatal(err)
	}
	near(t, "700 wordpieces read whole", got[0], wholeReference(t, path, doc), 2e-5)
	near(t, "a short text", got[1], wholeReference(t, path, "the man"), 2e-5)
	// What this replaced: chunks of 512 tokens give another vector.
	chunked, err := open(t, path, Options{Mode: Chunk, Window: 512}).Embed([]string{doc})
	if err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(chunked[0], got[0]); d < 1e-3 {
		t.Errorf("chunks of 512 and the whole document differ by %g only: the test cannot tell them apart", d)
	}

	// 1022 wordpieces fit; 1023 do not.
	if _, err := e.Embed([]string{text(1023, 0)}); err == nil {
		t.Error("1025 tokens on a model of 1024: no error")
	} else {
		for _, want := range []string{"1023 wordpieces", "admits 1024 tokens per pass (" + src + "), 1022 wordpieces;", "--max-tokens", "--mode chunk"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
		if strings.Contains(err.Error(), "convert long") {
			t.Errorf("error %q offers convert long for a limit no conversion lifts", err)
		}
	}
	// Chunk mode reads windows of the limit.
	if ch := open(t, path, Options{Mode: Chunk}); ch.Window() != 1024 || ch.Limit() != 1024 {
		t.Errorf("chunk mode: %s; want window 1024", ch)
	}
	// A window given keeps Auto at Chunk; MaxWindow bounds the default.
	if w := open(t, path, Options{Window: 256}); w.Mode() != Chunk || w.Window() != 256 {
		t.Errorf("auto with a window of 256: %s; want chunk", w)
	}
	if w := open(t, path, Options{Mode: Truncate, MaxWindow: 512}); w.Window() != 512 || w.Limit() != 1024 {
		t.Errorf("truncate with MaxWindow 512: %s", w)
	}
}

// TestShortConfigLimit: a config.json of 64 bounds every mode: Auto stays
// Chunk (64 is not long) with windows of 64, Long reads up to 64 tokens
// and refuses more naming the config, a window over it is refused.
func TestShortConfigLimit(t *testing.T) {
	path := modernBERTDir(t, `{"max_position_embeddings": 64}`)
	cfg := filepath.Join(filepath.Dir(path), "config.json")
	e := open(t, path, Options{})
	if e.Mode() != Chunk || e.Window() != 64 || e.Limit() != 64 {
		t.Fatalf("config of 64: %s; want chunk, window 64", e)
	}
	lo := open(t, path, Options{Mode: Long})
	doc := text(62, 4)
	got, err := lo.Embed([]string{doc})
	if err != nil {
		t.Fatal(err)
	}
	near(t, "62 wordpieces in long mode", got[0], wholeReference(t, path, doc), 2e-5)
	if _, err := lo.Embed([]string{text(63, 0)}); err == nil || !strings.Contains(err.Error(), "admits 64 tokens per pass (config.json beside the model ("+cfg+")") {
		t.Errorf("65 tokens on a config of 64: error %v", err)
	}
	_, err = Open(path, Options{Backend: "native", Mode: Chunk, Window: 100})
	if err == nil || !strings.Contains(err.Error(), "window 100 is longer") || !strings.Contains(err.Error(), cfg) {
		t.Errorf("window 100 on a config of 64: error %v", err)
	}
}

// TestMalformedConfigRefused: a config.json beside a model without a
// position table whose limit is malformed stops Open, naming the file.
func TestMalformedConfigRefused(t *testing.T) {
	for _, body := range []string{`{"max_position_embeddings": "8192"}`, `{"max_position_embeddings": 0}`, `{"max_position_embeddings": 2097152}`, `{not json`} {
		path := modernBERTDir(t, body)
		cfg := filepath.Join(filepath.Dir(path), "config.json")
		_, err := Open(path, Options{Backend: "native"})
		if err == nil || !strings.Contains(err.Error(), cfg) || !strings.HasPrefix(err.Error(), "embed: ") {
			t.Errorf("config %s: error %v, want one naming %s", body, err, cfg)
		}
	}
}

// TestNoLimitKeepsDefaults: a model that says no limit (no table, no
// config, no doc string) is read as before: Auto is Chunk in windows of
// 512, Long reads any length.
func TestNoLimitKeepsDefaults(t *testing.T) {
	path := modernBERTDir(t, "")
	e := open(t, path, Options{})
	if e.Mode() != Chunk || e.Window() != 512 || e.Limit() != 0 || !strings.Contains(e.String(), "limit none") {
		t.Errorf("no limit: %s; want chunk, window 512, limit none", e)
	}
}

// TestExtendedTableIsLongContext: a BERT whose position table was extended
// past 512 rows is a long-context model too: Auto reads it whole.
func TestExtendedTableIsLongContext(t *testing.T) {
	path := modelDir(t)
	m, err := onnx.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	ext, _, err := convert.ExtendPositions(m, convert.ExtendOptions{MaxPositions: 600})
	if err != nil {
		t.Fatal(err)
	}
	extPath := filepath.Join(filepath.Dir(path), "ext.onnx")
	if err := onnx.Save(ext, extPath, onnx.SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	e := open(t, extPath, Options{})
	if e.Mode() != Long || e.Limit() != 600 || !strings.Contains(e.ContextLimit().Source, "600 rows") {
		t.Errorf("table of 600 rows: %s; want long", e)
	}
	_, err = e.Embed([]string{text(599, 0)})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("convert long %s -o OUT", extPath)) {
		t.Errorf("past a table's limit: error %v, want the convert long hint", err)
	}
}

// maxDiff is the largest |a[i] − b[i]|.
func maxDiff(a, b []float32) float64 {
	var d float64
	for i := range a {
		d = max(d, math.Abs(float64(a[i])-float64(b[i])))
	}
	return d
}

// TestDynamicRotaryPaddedWithinTrained: the dynamic method scales a
// rotary model by the padded length, so a text within the trained length
// is padded no further than it. The tiny ModernBERT trained for 40
// tokens (config.json), extended to 256 by dynamic NTK, gives the
// original's vectors for texts of up to 40 tokens, though embed pads
// such passes to 64 tokens otherwise, and other vectors past 40.
func TestDynamicRotaryPaddedWithinTrained(t *testing.T) {
	path := modernBERTDir(t, `{"max_position_embeddings": 40}`)
	// Weights large enough that the rotation's scale shows in the
	// vectors (at the default 0.02 it moves them by about 1e-6).
	cfg := models.ModernBERTTinyConfig()
	cfg.Vocab, cfg.InitStd, cfg.GlobalRopeTheta = 5+len(words), 0.3, 10000
	m, err := models.ModernBERT(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.DocString = nil
	if err := onnx.Save(m, path, onnx.SaveOptions{Overwrite: true}); err != nil {
		t.Fatal(err)
	}
	ext, _, err := convert.ExtendPositions(m, convert.ExtendOptions{MaxPositions: 256, Method: convert.RotaryDynamic, Trained: 40})
	if err != nil {
		t.Fatal(err)
	}
	extPath := filepath.Join(filepath.Dir(path), "dyn.onnx")
	if err := onnx.Save(ext, extPath, onnx.SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	orig := open(t, path, Options{Mode: Long})
	dyn := open(t, extPath, Options{Mode: Long})
	within := []string{text(38, 0), text(20, 3), text(37, 1)}
	a, err := orig.Embed(within)
	if err != nil {
		t.Fatal(err)
	}
	b, err := dyn.Embed(within)
	if err != nil {
		t.Fatal(err)
	}
	for i := range within {
		if d := maxDiff(a[i], b[i]); d != 0 {
			t.Errorf("text %d within the trained 40 tokens: the dynamic model's vector differs from the original's by %g", i, d)
		}
	}
	long, err := dyn.Embed([]string{text(60, 0)})
	if err != nil {
		t.Fatal(err)
	}
	ref := wholeReference(t, path, text(60, 0))
	d := 0.0
	for k, x := range ref {
		d = max(d, math.Abs(float64(long[0][k])-x))
	}
	if d < 1e-3 {
		t.Errorf("60 tokens past the trained 40: the dynamic model gives the unscaled vector (|Δ| %g)", d)
	}
}
