package convert

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/models"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// writeConfig writes a config.json with body into dir (made if needed).
func writeConfig(t *testing.T, dir, body string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "config.json")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func tinyModernBERT(t *testing.T) *onnxpb.ModelProto {
	t.Helper()
	m, err := models.ModernBERT(models.ModernBERTTinyConfig())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestContextLimitOrder: the position table first, then config.json
// beside the model (its folder, then the folder named like it), then the
// doc string, else nothing; Source says which.
func TestContextLimitOrder(t *testing.T) {
	bert, err := models.BERT(models.TinyConfig())
	if err != nil {
		t.Fatal(err)
	}
	mb := tinyModernBERT(t) // no position table; doc string "positions 512"

	dir := t.TempDir()
	path := filepath.Join(dir, "m.onnx")
	cfg := writeConfig(t, dir, `{"model_type": "modernbert", "max_position_embeddings": 64, "hidden_size": 64}`)

	// A table wins over the config beside it.
	l, err := ContextLimit(bert, path)
	if err != nil || l.Tokens != 128 || l.Kind != LimitTable || !strings.Contains(l.Source, "position table") || !strings.Contains(l.Source, "128 rows") {
		t.Errorf("BERT with a config of 64 beside it: %+v, %v; want its table's 128", l, err)
	}
	// No table: the config.
	l, err = ContextLimit(mb, path)
	want := "config.json beside the model (" + cfg + "): max_position_embeddings 64"
	if err != nil || l.Tokens != 64 || l.Kind != LimitConfig || l.Source != want || l.File != cfg {
		t.Errorf("ModernBERT with a config of 64: %+v, %v; want 64 from %q", l, err, want)
	}
	if s := l.String(); s != "64 tokens ("+want+")" {
		t.Errorf("String() = %q", s)
	}
	// The companion folder convert writes beside a converted model.
	dir2 := t.TempDir()
	path2 := filepath.Join(dir2, "conv.onnx")
	cfg2 := writeConfig(t, filepath.Join(dir2, "conv"), `{"max_position_embeddings": 96}`)
	if l, err := ContextLimit(mb, path2); err != nil || l.Tokens != 96 || l.File != cfg2 {
		t.Errorf("config in the companion folder: %+v, %v; want 96 from %s", l, err, cfg2)
	}
	// The model's own folder comes first.
	writeConfig(t, dir2, `{"max_position_embeddings": 80}`)
	if l, err := ContextLimit(mb, path2); err != nil || l.Tokens != 80 {
		t.Errorf("configs in both folders: %+v, %v; want the model folder's 80", l, err)
	}
	// Nomic's key.
	writeConfig(t, dir2, `{"n_positions": 8192, "max_trained_positions": 2048}`)
	if l, err := ContextLimit(mb, path2); err != nil || l.Tokens != 8192 || !strings.HasSuffix(l.Source, "n_positions 8192") {
		t.Errorf("n_positions: %+v, %v", l, err)
	}
	// A config without the key: the doc string.
	writeConfig(t, dir2, `{"model_type": "modernbert"}`)
	l, err = ContextLimit(mb, path2)
	if err != nil || l.Tokens != 512 || l.Kind != LimitDocString || l.Source != "the model's doc string: positions 512" {
		t.Errorf("config without the key: %+v, %v; want the doc string's 512", l, err)
	}
	// No config, no path: the doc string; nothing at all: zero.
	if l, err := ContextLimit(mb, ""); err != nil || l.Tokens != 512 {
		t.Errorf("no path: %+v, %v", l, err)
	}
	bare := proto.Clone(mb).(*onnxpb.ModelProto)
	bare.DocString = nil
	if l, err := ContextLimit(bare, filepath.Join(t.TempDir(), "x.onnx")); err != nil || l != (Limit{}) || l.String() != "unknown" {
		t.Errorf("no table, config or doc string: %+v, %v; want zero", l, err)
	}
	if _, err := ContextLimit(&onnxpb.ModelProto{}, ""); err == nil {
		t.Error("no graph: no error")
	}
}

// TestContextLimitDocString: what a doc string may say, and what is not
// read as a limit.
func TestContextLimitDocString(t *testing.T) {
	for _, c := range []struct {
		doc  string
		want int
		err  bool
	}{
		{"ModernBERT: hidden 64, heads 4, positions 8192, window 128", 8192, false},
		{"positions 300", 300, false},
		{"exported with max_position_embeddings 4096", 4096, false},
		{`{"max_position_embeddings": 2048, "positions": 7}`, 2048, false},
		{"encoder (positions: 1024)", 1024, false},
		{"relative positions 2 apart", 0, false}, // prose, not a field
		{"no limit here", 0, false},
		{"ModernBERT: positions 0", 0, true},
		{"max_position_embeddings 99999999999999999999", 0, true},
		{"positions 1048577", 0, true},
		{"positions 1048576", 1 << 20, false},
	} {
		l, err := docStringLimit(c.doc)
		if (err != nil) != c.err || l.Tokens != c.want {
			t.Errorf("doc %q: %+v, %v; want %d (error %v)", c.doc, l, err, c.want, c.err)
		}
		if err != nil && !strings.Contains(err.Error(), "doc string") {
			t.Errorf("doc %q: error %q does not name the doc string", c.doc, err)
		}
	}
}

// TestContextLimitMalformedConfig: a config.json that is not a JSON
// object, or whose limit is not an integer from 1 to 1<<20, is an error
// naming the file; the doc string is not read instead.
func TestContextLimitMalformedConfig(t *testing.T) {
	mb := tinyModernBERT(t)
	for _, body := range []string{
		`{"max_position_embeddings": 64`,
		`[64]`,
		`null`,
		`{"max_position_embeddings": "8192"}`,
		`{"max_position_embeddings": null}`,
		`{"max_position_embeddings": 0}`,
		`{"max_position_embeddings": -512}`,
		`{"max_position_embeddings": 8192.5}`,
		`{"max_position_embeddings": 1048577}`,
		`{"max_position_embeddings": 1e300}`,
		`{"n_positions": true}`,
	} {
		dir := t.TempDir()
		cfg := writeConfig(t, dir, body)
		l, err := ContextLimit(mb, filepath.Join(dir, "m.onnx"))
		if err == nil || !strings.Contains(err.Error(), cfg) {
			t.Errorf("config %s: %+v, %v; want an error naming %s", body, l, err, cfg)
		}
	}
	// 8192.0 is an integer.
	dir := t.TempDir()
	writeConfig(t, dir, `{"max_position_embeddings": 8192.0}`)
	if l, err := ContextLimit(mb, filepath.Join(dir, "m.onnx")); err != nil || l.Tokens != 8192 {
		t.Errorf("8192.0: %+v, %v", l, err)
	}
	// A folder named config.json is no file.
	dir = t.TempDir()
	os.Mkdir(filepath.Join(dir, "config.json"), 0o755)
	if _, err := ContextLimit(mb, filepath.Join(dir, "m.onnx")); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("a folder named config.json: error %v", err)
	}
}

// TestContextLimitBiasBuffer: jina-embeddings-v2 exported with its ALiBi
// tensor as a registered buffer ([1, H, 64, 64] in the fixture, sliced to
// the sequence length) runs at 64 tokens and no more in onnxruntime,
// though its doc string says 512: ContextLimit says 64 and names the
// buffer. The ALiBi form computed in the graph has no such limit, and
// neither has the model local-pooled writes from the buffered one (the op
// computes the bias), which reads 200 tokens.
func TestContextLimitBiasBuffer(t *testing.T) {
	needORT(t)
	dir := filepath.Join("..", "testdata", "fixtures", "longctx")
	buf, err := onnx.Load(filepath.Join(dir, "jina_v2_alibi_buffer.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := ContextLimit(buf, "")
	if err != nil || l.Tokens != 64 || l.Kind != LimitBuffer || !strings.Contains(l.Source, "(64 × 64) sliced to the sequence length") || !strings.Contains(l.Source, "512") {
		t.Fatalf("buffered ALiBi: %+v, %v; want 64 tokens from the bias buffer, shorter than the doc string's 512", l, err)
	}
	runs := func(m *onnxpb.ModelProto, n int) error {
		feed, err := infer.RandomInputs(m, infer.GraphInputs(m), infer.RandomOptions{Batch: 1, SeqLen: n, Seed: 2})
		if err != nil {
			return err
		}
		s, err := infer.Open("ort", m, infer.Options{Threads: 1})
		if err != nil {
			return err
		}
		defer s.Close()
		_, err = s.Run(feed)
		return err
	}
	if err := runs(buf, 64); err != nil {
		t.Errorf("64 tokens: %v", err)
	}
	if err := runs(buf, 65); err == nil {
		t.Errorf("onnxruntime ran 65 tokens past the 64 × 64 buffer")
	}
	plain, err := onnx.Load(filepath.Join(dir, "jina_v2_alibi.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	if l, err := ContextLimit(plain, ""); err != nil || l.Kind == LimitBuffer {
		t.Errorf("ALiBi computed in the graph: %+v, %v; want no buffer limit", l, err)
	}
	lp, _, err := ToLocalPooled(buf, LocalPooledOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l, err := ContextLimit(lp, ""); err != nil || l.Kind == LimitBuffer {
		t.Errorf("local-pooled from the buffered model: %+v, %v; want no buffer limit", l, err)
	}
	if err := runs(lp, 200); err != nil {
		t.Errorf("local-pooled model on 200 tokens: %v", err)
	}
}
