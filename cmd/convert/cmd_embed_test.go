package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/linearize/linearize/corpus"
	"github.com/linearize/linearize/embed"
	"github.com/linearize/linearize/internal/fsutil"
	"github.com/linearize/linearize/onnx"
)

// embedModel copies the bundled tiny BERT into a temporary folder with a
// vocab.txt beside it.
func embedModel(t *testing.T) (path, dir string) {
	t.Helper()
	dir = t.TempDir()
	data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "bert-tiny.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(dir, "bert.onnx")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	vocab := "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\nman\nis\neating\nfood\n.\nhorse\n##s\n"
	if err := os.WriteFile(filepath.Join(dir, "vocab.txt"), []byte(vocab), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, dir
}

// embedWant embeds texts through the library, as the CLI should.
func embedWant(t *testing.T, path string, o embed.Options, texts []string) [][]float32 {
	t.Helper()
	o.Backend = "native"
	e, err := embed.Open(path, o)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	v, err := e.Embed(texts)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func sameVector(t *testing.T, what string, got []float32, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if math.Abs(float64(got[i])-float64(want[i])) > 1e-6 {
			t.Fatalf("%s: value %d is %g, want %g", what, i, got[i], want[i])
		}
	}
}

func TestEmbedNPY(t *testing.T) {
	path, dir := embedModel(t)
	texts := []string{"the man is eating food.", "horses", "the the the man man man is is is eating eating food food food . . ."}
	file := filepath.Join(dir, "texts.txt")
	if err := os.WriteFile(file, []byte(texts[0]+"\n\n"+texts[1]+"\r\n"+texts[2]+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "vecs.npy")
	code, stdout, stderr := runCLI("embed", path, "--text-file", file, "-o", out, "--backend", "native", "--window", "8")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	// 6 + 1 + 18 wordpieces: every word and "." is one of the test
	// vocabulary.
	for _, want := range []string{"embedded 3 documents (mode chunk, pooling mean, window 8, dim 64) in ", " s each; 25 wordpieces, ", " a second; loading excluded) → " + out} {
		if !strings.Contains(stdout, want) {
			t.Errorf("summary %q does not say %q", stdout, want)
		}
	}
	if !strings.Contains(stderr, "embed: batch 1: documents 1–3, 3 embedded") {
		t.Errorf("no progress on stderr: %q", stderr)
	}
	got, err := onnx.ReadNPY(out)
	if err != nil {
		t.Fatal(err)
	}
	if got.DType != onnx.Float || len(got.Shape) != 2 || got.Shape[0] != 3 || got.Shape[1] != 64 {
		t.Fatalf("npy holds %s, want float32[3 64]", got)
	}
	want := embedWant(t, path, embed.Options{Window: 8}, texts)
	for i := range texts {
		sameVector(t, texts[i], got.Floats()[i*64:(i+1)*64], want[i])
	}
	ids, err := os.ReadFile(filepath.Join(dir, "vecs.ids.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if string(ids) != "1\n3\n4\n" {
		t.Errorf("ids file %q, want the line numbers 1, 3, 4", ids)
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".*tmp*"))
	if len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}

	// --text: ids text-1, text-2; one document prints no progress.
	code, _, stderr = runCLI("embed", path, "--text", "horses", "-o", out, "--backend", "native", "--pooling", "cls", "--raw")
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q: want no progress", code, stderr)
	}
	got, _ = onnx.ReadNPY(out)
	sameVector(t, "--text --pooling cls --raw", got.Floats(), embedWant(t, path, embed.Options{Pooling: embed.PoolCLS, Raw: true}, []string{"horses"})[0])
	if ids, _ := os.ReadFile(filepath.Join(dir, "vecs.ids.txt")); string(ids) != "text-1\n" {
		t.Errorf("ids file %q, want text-1", ids)
	}
}

func TestEmbedJSONLAndDocs(t *testing.T) {
	path, dir := embedModel(t)
	in := filepath.Join(dir, "docs.jsonl")
	lines := `{"id": "a", "text": "the man is eating food."}` + "\n\n" + `{"text": "horses", "id": 7}` + "\n"
	if err := os.WriteFile(in, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "vecs.jsonl")
	code, stdout, stderr := runCLI("embed", path, "--jsonl", in, "-o", out, "--backend", "native", "--mode", "truncate", "--max-tokens", "3")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "embedded 2 documents (mode truncate, pooling mean, window 128, dim 64)") {
		t.Errorf("summary %q", stdout)
	}
	want := embedWant(t, path, embed.Options{Mode: embed.Truncate, MaxTokens: 3}, []string{"the man is eating food.", "horses"})
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	var ids []string
	for i := 0; sc.Scan(); i++ {
		var rec struct {
			ID        string    `json:"id"`
			Embedding []float32 `json:"embedding"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		ids = append(ids, rec.ID)
		if i < len(want) {
			sameVector(t, "jsonl "+rec.ID, rec.Embedding, want[i])
		}
	}
	if strings.Join(ids, ",") != "a,7" {
		t.Errorf("ids %v, want a, 7", ids)
	}

	// --docs: *.txt and *.md, sorted by name.
	docs := filepath.Join(dir, "docs")
	os.Mkdir(docs, 0o755)
	for name, s := range map[string]string{"b.md": "horses", "a.txt": "the man\nis eating", "c.json": "{}"} {
		if err := os.WriteFile(filepath.Join(docs, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	npy := filepath.Join(dir, "docs.npy")
	if code, _, stderr := runCLI("embed", path, "--docs", docs, "-o", npy, "--backend", "native"); code != 0 {
		t.Fatalf("--docs: exit %d: %s", code, stderr)
	}
	if ids, _ := os.ReadFile(filepath.Join(dir, "docs.ids.txt")); string(ids) != "a.txt\nb.md\n" {
		t.Errorf("--docs ids %q", ids)
	}
	got, err := onnx.ReadNPY(npy)
	if err != nil {
		t.Fatal(err)
	}
	w := embedWant(t, path, embed.Options{}, []string{"the man\nis eating", "horses"})
	sameVector(t, "a.txt", got.Floats()[:64], w[0])
	sameVector(t, "b.md", got.Floats()[64:], w[1])
}

func TestEmbedExitCodes(t *testing.T) {
	path, dir := embedModel(t)
	out := filepath.Join(dir, "out.npy")
	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte(`{"id": "x", "text": "the"}`+"\n"+`{"id": "y", "text": 3}`+"\n"), 0o644)
	dup := filepath.Join(dir, "dup.jsonl")
	os.WriteFile(dup, []byte(`{"id": "x", "text": "the"}`+"\n"+`{"id": "x", "text": "man"}`+"\n"), 0o644)
	long := strings.Repeat("the man ", 100)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--docs", filepath.Join(dir, "nope")}, exitBadInput, "nope"},
		{[]string{"--text", "x", "--mode", "sideways"}, exitUsage, "--mode"},
		{[]string{"--text", "x", "--pooling", "median"}, exitUsage, "--pooling"},
		{[]string{"--text", "x", "--batch", "0"}, exitUsage, "--batch"},
		{[]string{"--text", "x", "--window", "2"}, exitUsage, "--window"},
		{[]string{"--text", "x", "--text-file", bad}, exitUsage, "one of"},
		{[]string{}, exitUsage, "one of"},
		{[]string{"--text", "x", "-o", filepath.Join(dir, "out.txt")}, exitUsage, ".npy or .jsonl"},
		{[]string{"--text", "x", "-o", filepath.Join(dir, "no", "out.npy")}, exitBadInput, "no"},
		{[]string{"--jsonl", bad}, exitBadInput, bad + ":2"},
		{[]string{"--jsonl", dup}, exitBadInput, dup + ":2"},
		{[]string{"--text", long, "--mode", "long"}, exitBadInput, "admits 128 tokens"},
		{[]string{"--text", "x", "--window", "300"}, exitBadInput, "128"},
	} {
		args := append([]string{"embed", path, "--backend", "native"}, c.args...)
		if !strings.Contains(strings.Join(c.args, " "), "-o ") {
			args = append(args, "-o", out)
		}
		code, _, stderr := runCLI(args...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, stderr, c.code, c.want)
		}
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("a failed run wrote %s", out)
	}
}

// embed streams its documents: a corpus past readBounds.MaxTotal (the
// bound of the commands that read every document first) is embedded, in
// both readers; evaluate, which holds them all, still refuses it.
func TestEmbedTotalBound(t *testing.T) {
	defer func(o corpus.Options) { readBounds = o }(readBounds)
	readBounds.MaxTotal = 100
	dir := t.TempDir()
	var jsonl strings.Builder
	for i := 0; i < 3; i++ {
		text := strings.Repeat("word ", 12) // 60 bytes
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("d%d.txt", i)), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&jsonl, "{\"id\": %d, \"text\": %q}\n", i, text)
	}
	jf := filepath.Join(t.TempDir(), "docs.jsonl")
	if err := os.WriteFile(jf, []byte(jsonl.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	model, _ := embedModel(t)
	out := filepath.Join(t.TempDir(), "v.npy")
	for _, src := range [][]string{{"--docs", dir}, {"--jsonl", jf}} {
		args := append([]string{"embed", model, "-o", out, "--backend", "native"}, src...)
		code, stdout, stderr := runCLI(args...)
		if code != exitOK || !strings.Contains(stdout, "embedded 3 documents") {
			t.Errorf("embed %v past the old total bound: exit %d, %q %q; want the 3 documents embedded", src, code, stdout, stderr)
		}
		code, _, stderr = runCLI("evaluate", model, src[0], src[1], "--backend", "native", "-q")
		if code != exitBadInput || !strings.Contains(stderr, "100 bytes") {
			t.Errorf("evaluate %v: exit %d, %q; want exit 2 naming the bound", src, code, stderr)
		}
	}
}

// TestEmbedRefusesNonFinite: a document whose vector is not finite (a
// NaN row of the word embeddings: the token "horse") stops embed with
// exit 3 naming the document, and no output is written, in either
// format: the earlier output stays as it was.
func TestEmbedRefusesNonFinite(t *testing.T) {
	path, dir := embedModel(t)
	m, err := onnx.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	poison(t, m, "embeddings.word_embeddings.weight", float32(math.NaN()), 11) // "horse"
	bad := filepath.Join(dir, "nan.onnx")
	if err := onnx.Save(m, bad, onnx.SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(dir, "docs.jsonl")
	if err := os.WriteFile(in, []byte(`{"id": "a", "text": "the man is eating food."}`+"\n"+`{"id": "b", "text": "horses"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{"vecs.npy", "vecs.jsonl"} {
		out = filepath.Join(dir, out)
		// An earlier output, which a refused run must leave alone.
		if code, _, stderr := runCLI("embed", path, "--jsonl", in, "-o", out, "--backend", "native"); code != exitOK {
			t.Fatalf("the finite model: exit %d: %s", code, stderr)
		}
		before := map[string]string{}
		for _, n := range folderNames(t, dir) {
			b, _ := os.ReadFile(filepath.Join(dir, n))
			before[n] = string(b)
		}
		for _, src := range [][]string{{"--jsonl", in}, {"--text", "horses"}} {
			code, stdout, stderr := runCLI(append([]string{"embed", bad, "-o", out, "--backend", "native"}, src...)...)
			want := "document b: its vector has 64 NaN values"
			if src[0] == "--text" {
				want = "document text-1: its vector has 64 NaN values"
			}
			if code != exitRuntime || !strings.Contains(stderr, want) || !strings.Contains(stderr, "nothing written") || stdout != "" {
				t.Errorf("%s %v: exit %d, stdout %q, stderr %q; want %d and %q", filepath.Base(out), src, code, stdout, stderr, exitRuntime, want)
			}
			after := map[string]string{}
			for _, n := range folderNames(t, dir) {
				b, _ := os.ReadFile(filepath.Join(dir, n))
				after[n] = string(b)
			}
			if fmt.Sprint(after) != fmt.Sprint(before) {
				t.Errorf("%s %v: the folder changed from %v to %v", filepath.Base(out), src, keys(before), keys(after))
			}
		}
	}
}

func keys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// folderState maps every file of dir to its content (a directory to
// "dir").
func folderState(t *testing.T, dir string) map[string]string {
	t.Helper()
	s := map[string]string{}
	for _, n := range folderNames(t, dir) {
		p := filepath.Join(dir, n)
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			s[n] = "dir"
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		s[n] = string(b)
	}
	return s
}

func sameFolder(a, b map[string]string) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

// TestEmbedOutputsAreOneSet: -o vecs.npy writes vecs.npy and
// vecs.ids.txt as one set: a failure at any step of the write leaves
// both old files and nothing else; an ids file that is a directory is
// refused before any work, the old vectors kept.
func TestEmbedOutputsAreOneSet(t *testing.T) {
	path, dir := embedModel(t)
	out := filepath.Join(dir, "vecs.npy")
	embedArgs := []string{"embed", path, "--text", "the man", "--text", "horses", "-o", out, "--backend", "native"}
	if code, _, stderr := runCLI(embedArgs...); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	old := folderState(t, dir)
	boom := errors.New("disk full")
	defer func() { fsutil.CommitHook = nil }()
	for _, at := range []struct {
		step string
		i    int
	}{{"prepare", 0}, {"prepare", 1}, {"journal", -1}, {"backup", 0}, {"backup", 1}, {"replace", 0}, {"replace", 1}} {
		reached := false
		fsutil.CommitHook = func(step string, i int) error {
			if step == at.step && i == at.i {
				reached = true
				return boom
			}
			return nil
		}
		code, _, stderr := runCLI(append(embedArgs[:len(embedArgs)-2:len(embedArgs)-2], "--text", "food", "--backend", "native")...)
		if !reached || code != exitRuntime || !strings.Contains(stderr, "disk full") {
			t.Errorf("failure at %s %d: reached %v, exit %d, stderr %q", at.step, at.i, reached, code, stderr)
		}
		if now := folderState(t, dir); !sameFolder(now, old) {
			t.Errorf("failure at %s %d: the folder went from %q to %q", at.step, at.i, keys(old), keys(now))
		}
	}
	fsutil.CommitHook = nil

	// The ids file is a directory: refused before any work (it used to
	// write vecs.npy, fail on the ids, and remove the old vectors).
	ids := filepath.Join(dir, "vecs.ids.txt")
	if err := os.Remove(ids); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(ids, 0o755); err != nil {
		t.Fatal(err)
	}
	old = folderState(t, dir)
	code, stdout, stderr := runCLI(embedArgs...)
	if code != exitBadInput || !strings.Contains(stderr, "the ids file of -o: output "+ids+" is a directory") || stdout != "" {
		t.Errorf("ids file a directory: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if now := folderState(t, dir); !sameFolder(now, old) {
		t.Errorf("ids file a directory: the folder went from %q to %q", keys(old), keys(now))
	}
}

// TestEmbedNeverWritesOverAnInput: an output of embed (-o, or the ids
// file beside an .npy) that is an input (the model, --jsonl,
// --text-file, --vocab, a --docs file), by its path, a symlink or a
// hard link, is refused with exit 1 naming both, and nothing changes.
func TestEmbedNeverWritesOverAnInput(t *testing.T) {
	path, dir := embedModel(t)
	jsonl := filepath.Join(dir, "docs.jsonl")
	os.WriteFile(jsonl, []byte(`{"id": "a", "text": "the man"}`+"\n"), 0o644)
	texts := filepath.Join(dir, "vecs.ids.txt") // the ids file of -o vecs.npy
	os.WriteFile(texts, []byte("the man\nhorses\n"), 0o644)
	docs := filepath.Join(dir, "docs")
	os.Mkdir(docs, 0o755)
	os.WriteFile(filepath.Join(docs, "a.txt"), []byte("the man"), 0o644)
	os.WriteFile(filepath.Join(docs, "v.ids.txt"), []byte("horses"), 0o644)
	modelLink := filepath.Join(dir, "model.npy")
	jsonlLink := filepath.Join(dir, "link.jsonl")
	jsonlHard := filepath.Join(dir, "hard.jsonl")
	if err := os.Symlink(path, modelLink); err != nil {
		t.Skip(err)
	}
	os.Symlink(jsonl, jsonlLink)
	if err := os.Link(jsonl, jsonlHard); err != nil {
		t.Skip(err)
	}
	before := folderState(t, dir)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--jsonl", jsonl, "-o", jsonl}, "-o " + jsonl + " is the input --jsonl " + jsonl},
		{[]string{"--jsonl", jsonl, "-o", filepath.Join(dir, ".", "docs", "..", "docs.jsonl")}, "is the input --jsonl"},
		{[]string{"--jsonl", jsonl, "-o", jsonlLink}, "is the input --jsonl"},
		{[]string{"--jsonl", jsonl, "-o", jsonlHard}, "is the input --jsonl"},
		{[]string{"--text", "x", "-o", modelLink}, "-o " + modelLink + " is the input MODEL " + path},
		{[]string{"--text-file", texts, "-o", filepath.Join(dir, "vecs.npy")}, "the ids file of -o " + texts + " is the input --text-file"},
		{[]string{"--text", "x", "--vocab", texts, "-o", filepath.Join(dir, "vecs.npy")}, "is the input --vocab"},
		{[]string{"--docs", docs, "-o", filepath.Join(docs, "v.npy")}, "the ids file of -o " + filepath.Join(docs, "v.ids.txt") + " is the input --docs"},
	} {
		code, stdout, stderr := runCLI(append([]string{"embed", path, "--backend", "native"}, c.args...)...)
		if code != exitUsage || !strings.Contains(stderr, c.want) || stdout != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit %d and %q", c.args, code, stdout, stderr, exitUsage, c.want)
		}
	}
	if after := folderState(t, dir); !sameFolder(after, before) {
		t.Errorf("refused runs changed the folder: %q → %q", keys(before), keys(after))
	}
	if after, _ := os.ReadFile(filepath.Join(docs, "v.ids.txt")); string(after) != "horses" {
		t.Errorf("a --docs file changed: %q", after)
	}
}
