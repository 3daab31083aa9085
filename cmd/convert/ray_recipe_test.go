//go:build unix

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/linearize/linearize/embed"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/tokenize"
)

// rayCosine is the agreement the Ray recipe must reach with convert
// embed, per document.
const rayCosine = 0.99999

// TestRayRecipe: recipes/ray/embed_ray.py (Ray Data, onnxruntime's Python
// API, the tokenizer and pooling files convert writes beside a model)
// embeds a corpus with a converted real model as `convert embed` does:
//
//   - the same ids in the same order, the same bad documents skipped, and
//     per document the same wordpieces (the Go tokenizer's) and a cosine
//     of at least rayCosine with convert's vector;
//   - a manifest that embed-merge verifies and whose model, tokenizer,
//     settings and parts are those of convert's for the same flags;
//   - a shard (--shard 1/2) that embed-merge joins with convert's shard
//     0/2 into the vectors of the whole corpus.
//
// Three runs: chunk mode with tokenizer.json; truncate mode at the
// window convert resolves by itself, from a companion folder with
// vocab.txt only (the recipe's own WordPiece set-up); the shard. It
// skips, naming the command, when .tools/ray-venv is missing.
func TestRayRecipe(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	py := filepath.Join(root, ".tools", "ray-venv", "bin", "python")
	script := filepath.Join(root, "recipes", "ray", "embed_ray.py")
	if _, err := os.Stat(py); err != nil {
		t.Skipf("the Ray venv is missing (%v): run bash scripts/ray-venv.sh", err)
	}
	// Reading the script makes go test's cache depend on it.
	if _, err := os.ReadFile(script); err != nil {
		t.Fatal(err)
	}
	needORT(t)
	real := filepath.Join(root, "testdata", "real", "minilm.onnx")
	if _, err := os.Stat(real); err != nil {
		t.Skip("testdata/real/minilm.onnx absent: run scripts/setup.sh")
	}
	dir := t.TempDir()

	// A converted model with its companion folder (lp/): local+pooled
	// blocks small enough that a 128-token window reads pooled segments.
	model := filepath.Join(dir, "lp.onnx")
	if code, _, errOut := runCLI("local-pooled", real, "-o", model, "--block", "16", "--segments", "4"); code != exitOK {
		t.Fatalf("local-pooled: exit %d: %s", code, errOut)
	}
	corpus, texts := rayCorpus(t, root, dir)

	// 1. Chunk mode, tokenizer.json, documents longer than --max-tokens,
	// bad ones skipped, several parts.
	chunk := []string{"--jsonl", corpus, "--mode", "chunk", "--window", "128", "--max-tokens", "400", "--skip-bad-docs", "--part-size", "7"}
	goChunk := rayConvertEmbed(t, model, filepath.Join(dir, "go-chunk"), chunk...)
	rayChunk, tokChunk := rayRun(t, py, script, model, filepath.Join(dir, "ray-chunk"), chunk...)
	sameRayFolder(t, "chunk", goChunk, rayChunk)
	goVecs := rayVectors(t, dir, goChunk)
	checkRayVectors(t, "chunk", goVecs, rayVectors(t, dir, rayChunk))
	checkRayTokens(t, "chunk", model, tokChunk, texts, 400)

	// 2. Truncate mode at the window both work out (512, from config.json;
	// the texts cut to 200 wordpieces to keep the runs short), from a
	// companion folder without tokenizer.json.
	vocabModel := vocabOnlyModel(t, model, filepath.Join(dir, "v"))
	trunc := []string{"--jsonl", corpus, "--mode", "truncate", "--max-tokens", "200", "--skip-bad-docs"}
	goTrunc := rayConvertEmbed(t, vocabModel, filepath.Join(dir, "go-trunc"), trunc...)
	rayTrunc, tokTrunc := rayRun(t, py, script, vocabModel, filepath.Join(dir, "ray-trunc"), trunc...)
	sameRayFolder(t, "truncate", goTrunc, rayTrunc)
	checkRayVectors(t, "truncate", rayVectors(t, dir, goTrunc), rayVectors(t, dir, rayTrunc))
	checkRayTokens(t, "truncate", vocabModel, tokTrunc, texts, 200)

	// 3. Shards: convert's 0/2 and the recipe's 1/2 merge into the corpus.
	shard := func(s string) []string { return append(slices.Clone(chunk), "--shard", s) }
	goShard := rayConvertEmbed(t, model, filepath.Join(dir, "go-s0"), shard("0/2")...)
	rayShard, _ := rayRun(t, py, script, model, filepath.Join(dir, "ray-s1"), shard("1/2")...)
	merged := filepath.Join(dir, "merged.npy")
	code, out, errOut := runCLI("embed-merge", goShard, rayShard, "-o", merged)
	if code != exitOK || !strings.Contains(out, "verified 2 shards") {
		t.Fatalf("embed-merge of convert's shard 0/2 and the recipe's 1/2: exit %d: %s%s", code, out, errOut)
	}
	ids, vecs := readRayNPY(t, merged)
	byID := map[string][]float32{}
	for i, id := range ids {
		byID[id] = vecs[i]
	}
	if len(byID) != len(goVecs.ids) {
		t.Errorf("merged shards: %d documents, want %d", len(byID), len(goVecs.ids))
	}
	for i, id := range goVecs.ids {
		if c := embed.Cosine(byID[id], goVecs.vecs[i]); !(c >= rayCosine) {
			t.Errorf("merged shards: document %s: cosine %.7f with the unsharded run", id, c)
		}
	}
}

// rayCorpus writes the test corpus: passages of the held-out documents
// cut to lengths from a few words to past --max-tokens, and documents
// that try the tokenizers and the JSONL reader (accents, CJK, emoji,
// control characters, a literal [MASK], a word over 100 characters, a
// raw U+2028 inside a text, numeric ids, keys in other cases, a blank
// line); three are bad (empty; not UTF-8; an escaped lone surrogate).
// It returns the path and the texts of the good documents by id, as
// convert reads them.
func rayCorpus(t *testing.T, root, dir string) (string, map[string]string) {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "testdata", "real", "docs", "heldout.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	var docs []string
	for sc.Scan() {
		docs = append(docs, sc.Text())
	}
	var b strings.Builder
	texts := map[string]string{}
	add := func(line, id, text string) {
		b.WriteString(line + "\n")
		texts[id] = text
	}
	bad := func(line string) { b.WriteString(line + "\n") }
	str := func(s string) string {
		j, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		return string(j)
	}
	for i, n := range []int{60, 150, 300, 500, 700, 900, 1200, 1600, 2200, 3000, 4500, 6000, 12000, 20000} {
		text := docs[i%len(docs)]
		for n < len(text) && !utf8.RuneStart(text[n]) {
			n++
		}
		text = text[:min(n, len(text))]
		id := fmt.Sprintf("doc-%02d", i)
		add(fmt.Sprintf(`{"id": %s, "text": %s}`, str(id), str(text)), id, text)
	}
	edge := []struct{ id, text string }{
		{"accents", "Café naïve RÉSUMÉ — Ünïcödé, Ørsted & Ångström; İstanbul ΣΊΣΥΦΟΣ"},
		{"cjk", "東京タワーは高い。한국어 텍스트 and 中文字符 mixed with English"},
		{"special", "the [MASK] token, [CLS] and [SEP] spelled out, [mask] in lower case, [UNK]"},
		{"controls", "tab\there\u00a0nbsp\u200bzero-width\u0001control\u007fdel 😀 emoji " + strings.Repeat("x", 150) + " end"},
	}
	for _, e := range edge {
		add(fmt.Sprintf(`{"id": %s, "text": %s}`, str(e.id), str(e.text)), e.id, e.text)
	}
	// A raw U+2028 (Go's encoder would escape it): a line separator to
	// some line readers, not to JSON Lines.
	add("{\"id\": \"u2028\", \"text\": \"first\u2028second\u2029third\"}", "u2028", "first\u2028second\u2029third")
	add(`{"id": 42, "text": "a numeric id"}`, "42", "a numeric id")
	add(`{"id": 1.50, "text": "a numeric id as written"}`, "1.50", "a numeric id as written")
	add(`{"ID": "keys", "Text": "keys matched whatever their case"}`, "keys", "keys matched whatever their case")
	b.WriteString("   \n")                                                 // blank: not a record
	bad(`{"id": "empty", "text": " \t "}`)                                 // no wordpieces
	bad("{\"id\": \"latin1\", \"text\": \"caf\xe9\"}")                     // not UTF-8
	bad(`{"id": "surrogate", "text": "before \ud800 after \ud83d\ude00"}`) // half a UTF-16 pair
	add(`{"id": "last", "text": "The last document, after the bad ones."}`, "last", "The last document, after the bad ones.")
	path := filepath.Join(dir, "corpus.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, texts
}

// vocabOnlyModel links the model into folder d with a companion folder
// that has vocab.txt and the configuration, not tokenizer.json.
func vocabOnlyModel(t *testing.T, model, d string) string {
	t.Helper()
	src := strings.TrimSuffix(model, ".onnx")
	dst := filepath.Join(d, "lp")
	if err := os.MkdirAll(filepath.Join(dst, "1_Pooling"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(d, "lp.onnx")
	if err := os.Link(model, out); err != nil {
		data, err := os.ReadFile(model)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(out, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range tokenize.Companions {
		if name == "tokenizer.json" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			continue
		}
		if err := os.WriteFile(filepath.Join(dst, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(dst, "vocab.txt")); err != nil {
		t.Fatalf("no vocab.txt beside the converted model: %v", err)
	}
	return out
}

// rayConvertEmbed runs convert embed MODEL ARGS -o OUT/ and returns OUT.
func rayConvertEmbed(t *testing.T, model, out string, args ...string) string {
	t.Helper()
	full := append([]string{"embed", model, "-o", out + "/"}, args...)
	if code, _, errOut := runCLI(full...); code != exitOK {
		t.Fatalf("convert %s: exit %d: %s", strings.Join(full, " "), code, errOut)
	}
	return out
}

// rayRun runs the recipe on a local Ray instance of two CPUs (no
// dashboard, a small object store, its files in a temporary folder) and
// returns the folder it wrote and its dump of wordpieces.
func rayRun(t *testing.T, py, script, model, out string, args ...string) (string, string) {
	t.Helper()
	tokens := out + ".tokens.jsonl"
	full := append([]string{script, model, "-o", out + "/", "--num-cpus", "2", "--threads", "1",
		"--docs-per-call", "4", "--object-store-mb", "128", "--dump-tokens", tokens}, args...)
	// Ray's sockets live under its temporary folder, whose path must stay
	// short (a Unix socket path has at most 107 bytes).
	tmp, err := os.MkdirTemp("", "ray")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, full...)
	cmd.Env = append(os.Environ(), "RAY_TMPDIR="+tmp, "HOME="+tmp, "RAY_USAGE_STATS_ENABLED=0",
		"RAY_DISABLE_DOCKER_CPU_WARNING=1", "OMP_NUM_THREADS=1", "PYTHONDONTWRITEBYTECODE=1")
	// Ray starts its own processes: a timeout ends the whole group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	start := time.Now()
	o, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", py, strings.Join(full, " "), err, o)
	}
	t.Logf("recipe %s: %.1f s; %s", strings.Join(args, " "), time.Since(start).Seconds(), lastLine(string(o)))
	return out, tokens
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// readRayManifest reads DIR/manifest.json.
func readRayManifest(t *testing.T, dir string) *embed.Manifest {
	t.Helper()
	m, err := embed.ReadManifest(dir)
	if err != nil || m == nil {
		t.Fatalf("%s: manifest %v, %v", dir, m, err)
	}
	return m
}

// sameRayFolder: embed-merge verifies the recipe's folder, and its
// manifest is convert's but for the tool (and the parts' SHA-256 when
// the vectors differ in their last bits).
func sameRayFolder(t *testing.T, what, goDir, rayDir string) {
	t.Helper()
	if code, out, errOut := runCLI("embed-merge", rayDir); code != exitOK || !strings.Contains(out, "verified 1 folder") {
		t.Fatalf("%s: embed-merge %s: exit %d: %s%s", what, rayDir, code, out, errOut)
	}
	g, r := readRayManifest(t, goDir), readRayManifest(t, rayDir)
	if d := embed.Diff(r, g); len(d) > 0 {
		t.Errorf("%s: the recipe's manifest differs from convert's: %s", what, strings.Join(d, "; "))
	}
	if g.Format != r.Format || g.Documents != r.Documents || g.Vectors != r.Vectors || g.SkippedBad != r.SkippedBad ||
		g.Records != r.Records || !r.Complete || len(g.Parts) != len(r.Parts) {
		t.Fatalf("%s: manifest totals: recipe %s %d docs %d vectors %d skipped %d records complete %v %d parts; convert %s %d %d %d %d %v %d",
			what, r.Format, r.Documents, r.Vectors, r.SkippedBad, r.Records, r.Complete, len(r.Parts),
			g.Format, g.Documents, g.Vectors, g.SkippedBad, g.Records, g.Complete, len(g.Parts))
	}
	identical := 0
	for i, gp := range g.Parts {
		rp := r.Parts[i]
		if gp.SHA256 == rp.SHA256 {
			identical++
		}
		gp.SHA256, rp.SHA256, gp.IDsSHA256, rp.IDsSHA256 = "", "", "", ""
		if fmt.Sprint(gp) != fmt.Sprint(rp) {
			t.Errorf("%s: part %d: recipe %+v, convert %+v", what, i, rp, gp)
		}
	}
	t.Logf("%s: %d of %d parts byte for byte convert's", what, identical, len(g.Parts))
}

// rayVecs are a folder's vectors in order.
type rayVecs struct {
	ids  []string
	vecs [][]float32
}

// rayVectors merges a verified folder into one .npy and reads it.
func rayVectors(t *testing.T, tmp, dir string) rayVecs {
	t.Helper()
	out := filepath.Join(tmp, filepath.Base(dir)+".merged.npy")
	if code, _, errOut := runCLI("embed-merge", dir, "-o", out); code != exitOK {
		t.Fatalf("embed-merge %s: exit %d: %s", dir, code, errOut)
	}
	ids, vecs := readRayNPY(t, out)
	return rayVecs{ids, vecs}
}

// readRayNPY reads an .npy of vectors and the ids file beside it.
func readRayNPY(t *testing.T, path string) ([]string, [][]float32) {
	t.Helper()
	tt, err := onnx.ReadNPY(path)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(strings.TrimSuffix(path, ".npy") + ".ids.txt")
	if err != nil {
		t.Fatal(err)
	}
	ids := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	dim := tt.Shape[1]
	if len(ids) != tt.Shape[0] {
		t.Fatalf("%s: %d ids for %d vectors", path, len(ids), tt.Shape[0])
	}
	var vecs [][]float32
	for i := range ids {
		vecs = append(vecs, tt.Floats()[i*dim:(i+1)*dim])
	}
	return ids, vecs
}

// checkRayVectors: the same ids in the same order, every cosine at least
// rayCosine.
func checkRayVectors(t *testing.T, what string, g, r rayVecs) {
	t.Helper()
	if strings.Join(g.ids, "\n") != strings.Join(r.ids, "\n") {
		t.Fatalf("%s: ids differ:\nconvert %q\nrecipe  %q", what, g.ids, r.ids)
	}
	worst, maxAbs := 1.0, 0.0
	for i, id := range g.ids {
		c := embed.Cosine(g.vecs[i], r.vecs[i])
		if !(c >= rayCosine) {
			t.Errorf("%s: document %s: cosine %.7f, want at least %g", what, id, c, rayCosine)
		}
		worst = math.Min(worst, c)
		for k := range g.vecs[i] {
			maxAbs = math.Max(maxAbs, math.Abs(float64(g.vecs[i][k]-r.vecs[i][k])))
		}
	}
	t.Logf("%s: %d documents, min cosine %.9f, max |Δ| %.3g", what, len(g.ids), worst, maxAbs)
}

// checkRayTokens: the recipe read every document as the wordpieces the Go
// tokenizer of the model gives (its first keep).
func checkRayTokens(t *testing.T, what, model, dump string, texts map[string]string, keep int) {
	t.Helper()
	tok, err := tokenize.LoadForModel(model)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(dump)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var d struct {
			ID     string  `json:"id"`
			Tokens []int64 `json:"tokens"`
		}
		if err := json.Unmarshal([]byte(line), &d); err != nil {
			t.Fatalf("%s: %v", dump, err)
		}
		want := tok.IDsLimit(texts[d.ID], keep)
		if fmt.Sprint(d.Tokens) != fmt.Sprint(want) {
			t.Errorf("%s: document %s: the recipe's wordpieces differ from Go's:\nrecipe %v\ngo     %v", what, d.ID, d.Tokens, want)
		}
		n++
	}
	if n != len(texts) {
		t.Errorf("%s: wordpieces of %d documents, want %d", what, n, len(texts))
	}
}
