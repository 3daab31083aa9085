package embed

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/tokenize"
	"google.golang.org/protobuf/proto"
)

// tinyModel is the bundled BERT (hidden 64, 128 positions).
var tinyModel = filepath.Join("..", "testdata", "bert-tiny.onnx")

// words are single wordpieces of the test vocabulary, so that a text of k
// words is k wordpieces and chunk boundaries are known.
var words = func() []string {
	w := []string{"the", "man", "is", "eating", "food", "horse", "bread", "girl", "baby", "river"}
	for i := 0; i < 40; i++ {
		w = append(w, fmt.Sprintf("w%d", i))
	}
	return w
}()

// modelDir copies the tiny model into a temporary folder with a vocab.txt
// beside it and returns the model's path.
func modelDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	data, err := os.ReadFile(tinyModel)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "bert.onnx")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	vocab := "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n" + strings.Join(words, "\n") + "\n"
	if err := os.WriteFile(filepath.Join(dir, "vocab.txt"), []byte(vocab), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// text is k words of the vocabulary, starting at word off.
func text(k, off int) string {
	s := make([]string, k)
	for i := range s {
		s[i] = words[(off+i)%len(words)]
	}
	return strings.Join(s, " ")
}

func open(t testing.TB, path string, o Options) *Embedder {
	t.Helper()
	o.Backend = "native"
	e, err := Open(path, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// reference runs the model directly (infer.TextInputs, a native session)
// on texts and pools each row's last_hidden_state in float64, as the
// definitions say: mean over the mask, row 0, or max over the mask.
func reference(t *testing.T, path string, texts []string, pooling Pooling) [][]float64 {
	t.Helper()
	m, err := onnx.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenize.LoadForModel(path)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := infer.Open("native", m, infer.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	ti, err := infer.TextInputs(tok, sess.Inputs(), texts, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	res, err := sess.Run(ti.Feed, "last_hidden_state")
	if err != nil {
		t.Fatal(err)
	}
	h := res["last_hidden_state"]
	S, D := h.Shape[1], h.Shape[2]
	x := h.Floats()
	out := make([][]float64, len(texts))
	for b := range texts {
		v := make([]float64, D)
		n := 0
		for s := 0; s < S; s++ {
			if ti.Mask[b*S+s] == 0 {
				continue
			}
			for d := 0; d < D; d++ {
				y := float64(x[(b*S+s)*D+d])
				switch {
				case pooling == PoolCLS:
					if s == 0 {
						v[d] = y
					}
				case pooling == PoolMax:
					if n == 0 || y > v[d] {
						v[d] = y
					}
				default:
					v[d] += y
				}
			}
			n++
		}
		if pooling == PoolMean {
			for d := range v {
				v[d] /= float64(n)
			}
		}
		out[b] = v
	}
	return out
}

func unit(v []float64) []float64 {
	var s float64
	for _, x := range v {
		s += x * x
	}
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = x / math.Sqrt(s)
	}
	return out
}

func norm(v []float32) float64 {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return math.Sqrt(s)
}

// near fails unless got and want agree within tol (absolute, per value).
func near[T float32 | float64](t *testing.T, what string, got []float32, want []T, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if d := math.Abs(float64(got[i]) - float64(want[i])); !(d <= tol) {
			t.Fatalf("%s: value %d is %g, want %g (|Δ| %g > %g)", what, i, got[i], want[i], d, tol)
		}
	}
}

// TestPoolingMatchesDirectRun: each pooling, raw and normalised, equals
// the float64 pooling of a direct run of the model, for texts of
// different lengths batched together (so padding is exercised).
func TestPoolingMatchesDirectRun(t *testing.T) {
	path := modelDir(t)
	texts := []string{"the man is eating food", "horse", text(30, 3), ""}
	for _, p := range []Pooling{PoolMean, PoolCLS, PoolMax} {
		want := reference(t, path, texts, p)
		for _, raw := range []bool{true, false} {
			e := open(t, path, Options{Mode: Truncate, Pooling: p, Raw: raw})
			if e.Pooling() != p || e.Mode() != Truncate || e.Dim() != 64 {
				t.Fatalf("resolved %s %s dim %d", e.Mode(), e.Pooling(), e.Dim())
			}
			got, err := e.Embed(texts)
			if err != nil {
				t.Fatal(err)
			}
			for i := range texts {
				w := want[i]
				if !raw {
					w = unit(w)
					if n := norm(got[i]); math.Abs(n-1) > 1e-5 {
						t.Errorf("%s text %d: norm %g, want 1", p, i, n)
					}
				}
				near(t, fmt.Sprintf("%s raw=%v text %d", p, raw, i), got[i], w, 1e-4)
			}
		}
	}
}

// TestChunkIsMeanOfTruncatedChunks: a text of exactly two chunks embeds
// as normalise((8·normalise(chunk 1) + 5·normalise(chunk 2))/13): the
// chunks' unit vectors weighted by their wordpieces, each chunk embedded
// alone in Truncate mode.
func TestChunkIsMeanOfTruncatedChunks(t *testing.T) {
	path := modelDir(t)
	const window = 10 // 8 wordpieces per chunk
	first, second := text(8, 0), text(5, 8)
	whole := first + " " + second
	for _, pool := range []Pooling{PoolMean, PoolCLS} {
		tr := open(t, path, Options{Mode: Truncate, Window: window, Pooling: pool})
		parts, err := tr.Embed([]string{first, second})
		if err != nil {
			t.Fatal(err)
		}
		// Each chunk's unit vector weighs its wordpieces: 8 and 5.
		want := make([]float64, len(parts[0]))
		for i, p := range parts {
			w := []float64{8, 5}[i] / 13
			u := unit(toF64(p))
			for k := range want {
				want[k] += w * u[k]
			}
		}
		want = unit(want)
		ch := open(t, path, Options{Mode: Chunk, Window: window, Pooling: pool})
		for _, batch := range []int{1, 8} {
			ch.batch = batch
			got, err := ch.Embed([]string{whole, first})
			if err != nil {
				t.Fatal(err)
			}
			near(t, fmt.Sprintf("%s chunk batch %d", pool, batch), got[0], want, 1e-5)
			// A one-chunk text is its Truncate embedding.
			near(t, "one chunk", got[1], parts[0], 1e-5)
		}
		// Truncate reads only the first chunk of the whole text.
		got, err := tr.Embed([]string{whole})
		if err != nil {
			t.Fatal(err)
		}
		near(t, "truncate", got[0], parts[0], 1e-5)
	}
}

func toF64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// TestLongWithinWindowIsTruncate: a text that fits one window is read the
// same way by Long and Truncate.
func TestLongWithinWindowIsTruncate(t *testing.T) {
	path := modelDir(t)
	texts := []string{text(20, 1), text(126, 2), ""}
	tr := open(t, path, Options{Mode: Truncate})
	lo := open(t, path, Options{Mode: Long})
	if tr.Window() != 128 || tr.Limit() != 128 {
		t.Fatalf("window %d, limit %d; want the tiny model's 128 positions", tr.Window(), tr.Limit())
	}
	a, err := tr.Embed(texts)
	if err != nil {
		t.Fatal(err)
	}
	b, err := lo.Embed(texts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range texts {
		near(t, fmt.Sprintf("text %d", i), b[i], toF64(a[i]), 1e-5)
	}
}

// TestLongBeyondLimit: Long mode refuses a text longer than the position
// table, naming the limit and `convert long`, unless MaxTokens caps it;
// with MaxTokens every mode reads the same wordpieces.
func TestLongBeyondLimit(t *testing.T) {
	path := modelDir(t)
	long := text(200, 0)
	lo := open(t, path, Options{Mode: Long})
	_, err := lo.Embed([]string{"the man", long})
	if err == nil {
		t.Fatal("Long mode embedded 202 tokens on a 128-position model")
	}
	for _, want := range []string{"embed: text 1", "200 wordpieces", "admits 128 tokens", "convert long " + path + " -o OUT"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	capped := open(t, path, Options{Mode: Long, MaxTokens: 100})
	got, err := capped.Embed([]string{long})
	if err != nil {
		t.Fatal(err)
	}
	tr := open(t, path, Options{Mode: Truncate, MaxTokens: 100})
	want, err := tr.Embed([]string{text(100, 0)})
	if err != nil {
		t.Fatal(err)
	}
	near(t, "long capped at 100", got[0], toF64(want[0]), 1e-5)
	// Chunk with MaxTokens 100 and window 52: chunks of 50 and 50.
	ch := open(t, path, Options{Mode: Chunk, MaxTokens: 100, Window: 52})
	got, err = ch.Embed([]string{long})
	if err != nil {
		t.Fatal(err)
	}
	tr52 := open(t, path, Options{Mode: Truncate, Window: 52})
	parts, err := tr52.Embed([]string{text(50, 0), text(50, 50)})
	if err != nil {
		t.Fatal(err)
	}
	mean := make([]float64, len(parts[0]))
	for _, p := range parts {
		for k, x := range p {
			mean[k] += float64(x) / 2
		}
	}
	near(t, "chunk capped at 100", got[0], unit(mean), 1e-5)
}

// TestAutoPooling: the sentence-transformers files beside the model set
// the pooling, from the model's folder or the one named like the model;
// without them it is mean; a bad file is an error naming it.
func TestAutoPooling(t *testing.T) {
	modules := `[{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},
{"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"}]`
	cfg := func(cls, mean bool) string {
		return fmt.Sprintf(`{"word_embedding_dimension": 64, "pooling_mode_cls_token": %v, "pooling_mode_mean_tokens": %v, "pooling_mode_max_tokens": false}`, cls, mean)
	}
	write := func(dir, modules, config string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(dir, "1_Pooling"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "modules.json"), []byte(modules), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "1_Pooling", "config.json"), []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	texts := []string{"the man is eating food", text(12, 4)}

	path := modelDir(t)
	if e := open(t, path, Options{}); e.Pooling() != PoolMean || e.Mode() != Chunk {
		t.Errorf("no config: %s; want mode chunk, pooling mean", e)
	}

	write(filepath.Dir(path), modules, cfg(true, false))
	e := open(t, path, Options{Mode: Truncate})
	if e.Pooling() != PoolCLS {
		t.Fatalf("modules.json says cls: got %s", e)
	}
	got, err := e.Embed(texts)
	if err != nil {
		t.Fatal(err)
	}
	want := reference(t, path, texts, PoolCLS)
	for i := range texts {
		near(t, "auto cls", got[i], unit(want[i]), 1e-5)
	}
	if e := open(t, path, Options{Pooling: PoolMax}); e.Pooling() != PoolMax {
		t.Errorf("explicit max: got %s", e.Pooling())
	}

	// The folder named like the model (model.onnx → model/).
	path2 := modelDir(t)
	write(strings.TrimSuffix(path2, ".onnx"), modules, cfg(false, true))
	if e := open(t, path2, Options{}); e.Pooling() != PoolMean || !strings.Contains(e.String(), "modules.json") {
		t.Errorf("modules.json in the model's folder says mean: got %s", e)
	}

	for _, c := range []struct{ modules, config, want string }{
		{"[{", cfg(true, false), "modules.json"},
		{modules, "{nope", filepath.Join("1_Pooling", "config.json")},
		{modules, cfg(true, true), "pooling modes"},
		{modules, cfg(false, false), "no pooling mode"},
	} {
		p := modelDir(t)
		write(filepath.Dir(p), c.modules, c.config)
		_, err := Open(p, Options{Backend: "native"})
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "embed: ") {
			t.Errorf("modules %.20q config %.30q: error %v, want one naming %q", c.modules, c.config, err, c.want)
		}
	}
}

// TestAutoModeLongModel: a model with the "linearize.window" metadata is
// read in Long mode with that window, and "linearize.max_length" is its
// limit.
func TestAutoModeLongModel(t *testing.T) {
	path := modelDir(t)
	m, err := onnx.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	m.MetadataProps = append(m.MetadataProps, &onnxpb.StringStringEntryProto{Key: proto.String(MetaWindow), Value: proto.String("64")})
	long := filepath.Join(filepath.Dir(path), "long.onnx")
	if err := onnx.Save(m, long, onnx.SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	e := open(t, long, Options{})
	if e.Mode() != Long || e.Window() != 64 || e.Limit() != 128 {
		t.Errorf("long model: %s; want mode long, window 64, limit 128 (the position table's)", e)
	}
	m.MetadataProps = append(m.MetadataProps, &onnxpb.StringStringEntryProto{Key: proto.String(MetaMaxLength), Value: proto.String("100")})
	if err := onnx.Save(m, long, onnx.SaveOptions{Overwrite: true}); err != nil {
		t.Fatal(err)
	}
	e = open(t, long, Options{})
	if e.Limit() != 100 {
		t.Errorf("long model with max_length 100: %s", e)
	}
	if _, err := e.Embed([]string{text(99, 0)}); err == nil || !strings.Contains(err.Error(), "admits 100 tokens") {
		t.Errorf("101 tokens on a model of max_length 100: error %v", err)
	}
	m.MetadataProps = m.MetadataProps[:len(m.MetadataProps)-1]
	if e := open(t, long, Options{Mode: Chunk}); e.Mode() != Chunk || e.Window() != 64 {
		t.Errorf("long model, chunk asked: %s", e)
	}
	m.MetadataProps[len(m.MetadataProps)-1].Value = proto.String("x") // the window
	bad := filepath.Join(filepath.Dir(path), "bad.onnx")
	if err := onnx.Save(m, bad, onnx.SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(bad, Options{Backend: "native"}); err == nil || !strings.Contains(err.Error(), MetaWindow) {
		t.Errorf("bad window metadata: error %v", err)
	}
}

// TestEmbedDeterministicAndBatchInvariant: the same texts give the same
// vectors on a second call, and the batch size changes them only by
// padding's rounding.
func TestEmbedDeterministicAndBatchInvariant(t *testing.T) {
	path := modelDir(t)
	texts := []string{text(3, 0), text(40, 5), "", text(17, 9), text(300, 2)}
	e := open(t, path, Options{Window: 32})
	a, err := e.Embed(texts)
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.Embed(texts)
	if err != nil {
		t.Fatal(err)
	}
	one := open(t, path, Options{Window: 32, Batch: 1})
	c, err := one.Embed(texts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range texts {
		near(t, "second call", b[i], toF64(a[i]), 0)
		near(t, "batch 1", c[i], toF64(a[i]), 1e-5)
	}
	if len(a) != len(texts) || len(a[2]) != 64 {
		t.Fatalf("%d vectors of %d", len(a), len(a[2]))
	}
}

func TestOpenErrors(t *testing.T) {
	path := modelDir(t)
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Mode: "sideways"}, "mode"},
		{Options{Pooling: "median"}, "pooling"},
		{Options{Window: 2}, "window 2"},
		{Options{Window: 300}, "admits (128 tokens)"},
		{Options{Output: "nope"}, `no output "nope"`},
		{Options{Vocab: filepath.Join(t.TempDir(), "none")}, "none"},
	} {
		c.o.Backend = "native"
		_, err := Open(path, c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "embed: ") {
			t.Errorf("%+v: error %v, want one saying %q", c.o, err, c.want)
		}
	}
	if _, err := Open(filepath.Join(t.TempDir(), "missing.onnx"), Options{Backend: "native"}); err == nil || !strings.Contains(err.Error(), "missing.onnx") {
		t.Errorf("missing model: %v", err)
	}
	// The pooler output is never the default; named, it is read as the
	// model's own pooled vector, and a pooling asked of it is refused.
	if e := open(t, path, Options{}); e.Output() == "pooler_output" || e.Pooling() != PoolMean {
		t.Errorf("default output %s, pooling %s; want the hidden states, mean", e.Output(), e.Pooling())
	}
	if e := open(t, path, Options{Output: "pooler_output"}); e.Pooling() != PoolOutput {
		t.Errorf("pooler_output read with pooling %s, want %s", e.Pooling(), PoolOutput)
	}
	if _, err := Open(path, Options{Backend: "native", Output: "pooler_output", Pooling: PoolCLS}); err == nil || !strings.Contains(err.Error(), "pooled already") {
		t.Errorf("pooling cls of pooler_output: %v, want a refusal", err)
	}
}

func TestCosine(t *testing.T) {
	for _, c := range []struct {
		a, b []float32
		want float64
	}{
		{[]float32{1, 0}, []float32{0, 1}, 0},
		{[]float32{1, 2, 3}, []float32{2, 4, 6}, 1},
		{[]float32{1, 1}, []float32{-1, -1}, -1},
		{[]float32{3, 4}, []float32{4, 3}, 24.0 / 25},
		{[]float32{0, 0}, []float32{1, 1}, 0},
		{[]float32{1}, []float32{1, 1}, 0},
	} {
		if got := Cosine(c.a, c.b); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("Cosine(%v, %v) = %g, want %g", c.a, c.b, got, c.want)
		}
	}
}
