package main

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/embed"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/models"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/tokenize"
)

// feedVocab is feedModel's and embedModel's vocab.txt.
const feedVocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\nman\nis\neating\nfood\n.\nhorse\n##s\n"

// modernBERTModel writes a tiny ModernBERT (rotary positions: no position
// table; no doc string, so that the limit comes from the config alone
// unless doc is set) into a temporary folder with vocab (its vocabulary
// that many ids) and, unless config is "", a config.json of that text
// beside it.
func modernBERTModel(t *testing.T, vocab, config, doc string) (path, dir string) {
	t.Helper()
	dir = t.TempDir()
	cfg := models.ModernBERTTinyConfig()
	cfg.Vocab = strings.Count(vocab, "\n")
	m, err := models.ModernBERT(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.DocString = nil
	if doc != "" {
		m.DocString = &doc
	}
	path = filepath.Join(dir, "mb.onnx")
	if err := onnx.Save(m, path, onnx.SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "vocab.txt"), []byte(vocab), 0o644); err != nil {
		t.Fatal(err)
	}
	if config != "" {
		if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return path, dir
}

// TestFeedFollowsConfigLimit: on a model without a position table whose
// config.json says max_position_embeddings 64, every command that takes
// the input flags bounds its inputs by 64: a longer --text (with a
// --max-len that lets it through) and a --seq-len over it are refused
// with exit 2, naming the limit and the config (and not convert long,
// which cannot lift it); --max-len defaults to 64, random inputs to at
// most 16; a text of 64 tokens runs.
func TestFeedFollowsConfigLimit(t *testing.T) {
	path, dir := modernBERTModel(t, feedVocab, `{"model_type": "modernbert", "max_position_embeddings": 64}`, "")
	cfg := filepath.Join(dir, "config.json")
	src := path + "'s limit, from config.json beside the model (" + cfg + "): max_position_embeddings 64"
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"--text", []string{"--text", words(70), "--max-len", "4096"}, []string{"--text:", "72 tokens"}},
		{"--seq-len", []string{"--random-inputs", "--seq-len", "100"}, []string{"--seq-len:", "100 tokens"}},
		{"--text --seq-len", []string{"--text", "the man", "--seq-len", "65"}, []string{"--seq-len:", "65 tokens"}},
	}
	for _, c := range cases {
		for name, pre := range feedCommands(path, dir) {
			args := append(append([]string(nil), pre...), c.args...)
			if name != "compare-backends" {
				args = append(args, "--backend", "native")
			}
			code, stdout, errOut := runCLI(args...)
			if code != exitBadInput {
				t.Errorf("%s: %s: exit %d, want %d (%s)", c.name, name, code, exitBadInput, errOut)
			}
			for _, w := range append([]string{"the 64 positions", src}, c.want...) {
				if !strings.Contains(errOut, w) {
					t.Errorf("%s: %s: message %q lacks %q", c.name, name, errOut, w)
				}
			}
			if strings.Contains(errOut, "convert long") || stdout != "" || strings.Count(errOut, "\n") != 1 {
				t.Errorf("%s: %s: stdout %q, stderr %q; want one line on stderr, without convert long", c.name, name, stdout, errOut)
			}
		}
	}

	var got *infer.Feed
	stop := errors.New("stop")
	feedBuilt = func(f *infer.Feed) error { got = f; return stop }
	defer func() { feedBuilt = nil }()
	for _, c := range []struct {
		args []string
		seq  int
	}{
		{[]string{"--text", words(200)}, 64},
		{[]string{"--text", words(200), "--max-len", "30"}, 30},
		{[]string{"--random-inputs"}, infer.DefaultFeedSeqLen},
	} {
		for name, pre := range feedCommands(path, dir) {
			got = nil
			code, _, errOut := runCLI(append(append([]string(nil), pre...), c.args...)...)
			if got == nil || !strings.Contains(errOut, "stop") {
				t.Fatalf("%s %.30q: no feed built (exit %d: %s)", name, c.args, code, errOut)
			}
			if got.SeqLen != c.seq {
				t.Errorf("%s %.30q: %d tokens, want %d", name, c.args, got.SeqLen, c.seq)
			}
		}
	}
	feedBuilt = nil
	code, out, errOut := runCLI("run", path, "--backend", "native", "--text", words(62))
	if code != 0 || !strings.Contains(out, "input_ids int64[1 64]") {
		t.Errorf("run on 64 tokens: exit %d: %s%s", code, out, errOut)
	}
}

// TestFeedLimitFromDocString: without a config, the doc string's
// "positions N" is the limit, named as its source; a model that says no
// limit at all keeps the default --max-len of 512.
func TestFeedLimitFromDocString(t *testing.T) {
	path, _ := modernBERTModel(t, feedVocab, "", "ModernBERT: hidden 64, vocab 13, positions 96, window 16")
	code, _, errOut := runCLI("run", path, "--backend", "native", "--text", words(100), "--max-len", "4096")
	if code != exitBadInput || !strings.Contains(errOut, "the 96 positions") || !strings.Contains(errOut, "from the model's doc string: positions 96") {
		t.Errorf("doc string of 96: exit %d: %s", code, errOut)
	}

	bare, _ := modernBERTModel(t, feedVocab, "", "")
	var got *infer.Feed
	stop := errors.New("stop")
	feedBuilt = func(f *infer.Feed) error { got = f; return stop }
	defer func() { feedBuilt = nil }()
	if runCLI("run", bare, "--text", words(600)); got == nil || got.SeqLen != infer.DefaultFeedMaxLen {
		t.Errorf("no limit: feed %+v, want the default %d tokens", got, infer.DefaultFeedMaxLen)
	}
}

// TestCommandsRefuseMalformedConfig: a config.json whose limit is
// malformed makes every command that reads the limit refuse the model with
// exit 2, naming the file.
func TestCommandsRefuseMalformedConfig(t *testing.T) {
	path, dir := modernBERTModel(t, feedVocab, `{"max_position_embeddings": "8192"}`, "")
	cfg := filepath.Join(dir, "config.json")
	cmds := feedCommands(path, dir)
	for name, pre := range cmds {
		args := append(append([]string(nil), pre...), "--text", "the man")
		if name != "compare-backends" {
			args = append(args, "--backend", "native")
		}
		cmds[name] = args
	}
	cmds["embed"] = []string{"embed", path, "--text", "the man", "-o", filepath.Join(dir, "v.npy"), "--backend", "native"}
	for name, args := range cmds {
		code, stdout, errOut := runCLI(args...)
		if code != exitBadInput || !strings.Contains(errOut, cfg) || !strings.Contains(errOut, "max_position_embeddings") || stdout != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 2 naming %s", name, code, stdout, errOut, cfg)
		}
	}
}

// TestEmbedLongContextModel: embed on a model without a position table
// whose config.json says 1024 reads a document of 600 wordpieces whole in
// one pass (auto mode is long): its vector is the model's own on the
// whole token sequence, run here through infer; a longer one is refused
// with exit 2 naming the limit and the config.
func TestEmbedLongContextModel(t *testing.T) {
	path, dir := modernBERTModel(t, feedVocab, `{"max_position_embeddings": 1024}`, "")
	cfg := filepath.Join(dir, "config.json")
	doc := strings.Repeat("the man is eating food . ", 100) // 600 wordpieces
	out := filepath.Join(dir, "v.jsonl")
	code, stdout, errOut := runCLI("embed", path, "--text", doc, "-o", out, "--backend", "native")
	if code != 0 || !strings.Contains(stdout, "mode long") || !strings.Contains(stdout, "window 1024") {
		t.Fatalf("exit %d: %s%s", code, stdout, errOut)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var line struct {
		Embedding []float32 `json:"embedding"`
	}
	if err := json.Unmarshal(b, &line); err != nil {
		t.Fatal(err)
	}
	want := wholeVector(t, path, doc)
	if len(line.Embedding) != len(want) {
		t.Fatalf("%d values, want %d", len(line.Embedding), len(want))
	}
	for i := range want {
		if d := math.Abs(float64(line.Embedding[i]) - want[i]); d > 2e-5 {
			t.Fatalf("value %d: %g, want %g (the model on all 602 tokens)", i, line.Embedding[i], want[i])
		}
	}

	long := strings.Repeat("the man is eating food . ", 171) // 1026 wordpieces
	code, stdout, errOut = runCLI("embed", path, "--text", long, "-o", out, "--backend", "native")
	for _, w := range []string{"1026 wordpieces", "admits 1024 tokens per pass (config.json beside the model (" + cfg + "): max_position_embeddings 1024)", "--max-tokens"} {
		if !strings.Contains(errOut, w) {
			t.Errorf("a text of 1028 tokens: message %q lacks %q", errOut, w)
		}
	}
	if code != exitBadInput || stdout != "" {
		t.Errorf("a text of 1028 tokens: exit %d, stdout %q", code, stdout)
	}
	// --max-tokens caps it; --mode chunk reads it in windows of the limit.
	if code, stdout, errOut := runCLI("embed", path, "--text", long, "-o", out, "--backend", "native", "--max-tokens", "1000"); code != 0 {
		t.Errorf("--max-tokens 1000: exit %d: %s%s", code, stdout, errOut)
	}
	if code, stdout, errOut := runCLI("embed", path, "--text", long, "-o", out, "--backend", "native", "--mode", "chunk"); code != 0 || !strings.Contains(stdout, "mode chunk") || !strings.Contains(stdout, "window 1024") {
		t.Errorf("--mode chunk: exit %d: %s%s", code, stdout, errOut)
	}
	// A --window over the limit is refused the same way (exit 2).
	code, _, errOut = runCLI("embed", path, "--text", "the man", "-o", out, "--backend", "native", "--mode", "chunk", "--window", "2048")
	if code != exitBadInput || !strings.Contains(errOut, "window 2048") || !strings.Contains(errOut, cfg) {
		t.Errorf("--window 2048: exit %d: %s", code, errOut)
	}
}

// wholeVector runs the model at path on [CLS] text [SEP] in one pass of
// exactly that many tokens and returns the L2-normalised mean of
// last_hidden_state (the model's sentence-transformers default).
func wholeVector(t *testing.T, path, text string) []float64 {
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
	ids := append(append([]int64{cls}, tok.IDs(text)...), sep)
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
	n, d := h.Shape[1], h.Shape[2]
	if n != len(ids) {
		t.Fatalf("direct run: shape %v for %d tokens", h.Shape, len(ids))
	}
	x := h.Floats()
	v := make([]float64, d)
	for s := range n {
		for j := range d {
			v[j] += float64(x[s*d+j]) / float64(n)
		}
	}
	var ss float64
	for _, y := range v {
		ss += y * y
	}
	for j := range v {
		v[j] /= math.Sqrt(ss)
	}
	return v
}

// TestEvaluateLongContextOriginal: evaluate on an original whose own limit
// is long (a config.json of 1024 beside a model without a position table)
// runs the original read whole beside the baselines, which still read
// 512-token windows (truncate reads the first 510 wordpieces, chunk
// averages 510-wordpiece chunks); with --max-tokens above what it reads
// in one pass the whole system is left out with a note. A short original
// runs no whole system unless named.
func TestEvaluateLongContextOriginal(t *testing.T) {
	bert, docs := evalFixture(t, 4)
	vocab, err := os.ReadFile(filepath.Join(filepath.Dir(bert), "vocab.txt"))
	if err != nil {
		t.Fatal(err)
	}
	// Longer documents than the fixture's: 700 wordpieces or more.
	long := filepath.Join(t.TempDir(), "docs")
	os.Mkdir(long, 0o755)
	entries, err := os.ReadDir(docs)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range entries {
		b, err := os.ReadFile(filepath.Join(docs, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		next, _ := os.ReadFile(filepath.Join(docs, entries[(i+1)%len(entries)].Name()))
		os.WriteFile(filepath.Join(long, e.Name()), append(append(b, ' '), next...), 0o644)
	}
	path, _ := modernBERTModel(t, string(vocab), `{"max_position_embeddings": 1024}`, "")
	args := []string{"evaluate", path, "--docs", long, "--backend", "native", "--max-tokens", "640", "--buckets", "0,256,640", "--bootstrap", "20", "--json"}
	code, stdout, stderr := runCLI(args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep embed.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range rep.Systems {
		names = append(names, s.Name)
	}
	if strings.Join(names, ",") != "truncate,chunk,whole" || rep.Reference != "chunk" || rep.Documents != 4 {
		t.Fatalf("systems %v, reference %s, %d documents; want truncate, chunk, whole against chunk", names, rep.Reference, rep.Documents)
	}
	for _, want := range []string{"queries: " + path + ": mode truncate, pooling mean (default), window 512, limit 1024 (config.json",
		"system chunk: " + path + ": mode chunk, pooling mean (default), window 512, limit 1024",
		"system whole: " + path + ": mode long, pooling mean (default), window 1024, limit 1024"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("progress lacks %q:\n%s", want, stderr)
		}
	}

	// --max-tokens past the limit: whole is left out, with a note.
	code, stdout, stderr = runCLI("evaluate", path, "--docs", long, "--backend", "native", "--max-tokens", "1100", "--buckets", "0,256,512", "--bootstrap", "20", "--json")
	if code != 0 {
		t.Fatalf("--max-tokens 1100: exit %d: %s", code, stderr)
	}
	rep = embed.Report{}
	json.Unmarshal([]byte(stdout), &rep)
	if len(rep.Systems) != 2 || !strings.Contains(stderr, "note: system whole ("+path+" read whole) not run: it reads at most 1024 tokens in one pass (config.json beside the model") ||
		!strings.Contains(stderr, "--max-tokens 1022 runs it") {
		t.Errorf("--max-tokens 1100: %d systems; progress:\n%s", len(rep.Systems), stderr)
	}
	// The document prompt's wordpieces count too: 1020 + 2 + 3 > 1024.
	code, _, stderr = runCLI("evaluate", path, "--docs", long, "--backend", "native", "--max-tokens", "1020", "--buckets", "0,256,512", "--bootstrap", "20",
		"--doc-prompt", "river stone cloud ", "--json")
	if code != 0 || !strings.Contains(stderr, "fewer than --max-tokens 1020, [CLS], [SEP] and the document prompt's 3 wordpieces; --max-tokens 1019 runs it") {
		t.Errorf("--max-tokens 1020 with a 3-wordpiece document prompt: exit %d; progress:\n%s", code, stderr)
	}
	// Named, it runs and fails like any long system that cannot read
	// --max-tokens in one pass.
	code, _, stderr = runCLI("evaluate", path, "--docs", long, "--backend", "native", "--max-tokens", "1100", "--buckets", "0,256,512", "--systems", "chunk,whole", "-q")
	if code != exitBadInput || !strings.Contains(stderr, "reads at most 1024 tokens in one pass (config.json beside the model") || strings.Contains(stderr, "--max-length") {
		t.Errorf("--systems chunk,whole with --max-tokens 1100: exit %d: %s", code, stderr)
	}

	// The tiny BERT (128 positions) runs no whole system by default.
	code, stdout, stderr = runCLI("evaluate", bert, "--docs", docs, "--backend", "native", "--max-tokens", "256", "--buckets", "0,128,256", "--bootstrap", "20", "--json", "-q")
	if code != 0 {
		t.Fatalf("tiny BERT: exit %d: %s", code, stderr)
	}
	rep = embed.Report{}
	json.Unmarshal([]byte(stdout), &rep)
	if len(rep.Systems) != 2 {
		t.Errorf("tiny BERT: systems %+v; want truncate and chunk", rep.Systems)
	}
}

// TestBiasBufferLimitCLI: a jina-embeddings-v2 export whose ALiBi tensor
// is a 64 × 64 buffer reads 64 tokens, whatever its doc string says:
// embed refuses a longer text in long mode (exit 2) naming the buffer and
// local-pooled, which computes the bias and reads on, instead of failing
// in onnxruntime (exit 3); inspect says the same.
func TestBiasBufferLimitCLI(t *testing.T) {
	dir := t.TempDir()
	path := fixtureWithVocab(t, dir, "longctx/jina_v2_alibi_buffer.onnx")
	long := strings.Repeat("the man is eating food . ", 20)
	code, _, stderr := runCLI("embed", path, "--text", long, "--mode", "long", "--backend", "native", "-o", filepath.Join(dir, "v.jsonl"))
	if code != exitBadInput || !strings.Contains(stderr, "admits 64 tokens per pass (attention-bias buffer") || !strings.Contains(stderr, "convert local-pooled") {
		t.Errorf("embed --mode long past the buffer: exit %d, %q; want exit %d naming the buffer and local-pooled", code, stderr, exitBadInput)
	}
	code, stdout, _ := runCLI("inspect", path)
	if code != exitOK || !strings.Contains(stdout, "limit 64 tokens (attention-bias buffer") || !strings.Contains(stdout, "local-pooled computes an ALiBi bias") {
		t.Errorf("inspect: exit %d:\n%s", code, stdout)
	}
}
