package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/embed"
	"github.com/linearize/linearize/internal/fsutil"
	"github.com/linearize/linearize/onnx"
)

// evalFixture copies the tiny BERT (128 positions) into a folder with a
// vocab.txt beside it, and writes n generated documents of about 400
// wordpieces into a docs folder.
func evalFixture(t *testing.T, n int) (model, docs string) {
	t.Helper()
	dir := t.TempDir()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "bert-tiny.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	model = filepath.Join(dir, "tiny.onnx")
	if err := os.WriteFile(model, b, 0o644); err != nil {
		t.Fatal(err)
	}
	words := strings.Fields("the a river stone cloud paper garden window lamp forest music table bridge winter letter " +
		"candle mirror orange silver harbor engine meadow old new small large red blue green quiet loud near far " +
		"under over between across behind before after with without into from")
	vocab := append([]string{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "."}, words...)
	if err := os.WriteFile(filepath.Join(dir, "vocab.txt"), []byte(strings.Join(vocab, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	docs = filepath.Join(dir, "docs")
	if err := os.Mkdir(docs, 0o755); err != nil {
		t.Fatal(err)
	}
	x := uint64(7)
	next := func(k int) int {
		x = x*6364136223846793005 + 1442695040888963407
		return int((x >> 33) % uint64(k))
	}
	for d := 0; d < n; d++ {
		var sb strings.Builder
		// Each document favours a few words from its 15th sentence on
		// (about 140 wordpieces in), past the first window.
		fav := []string{words[next(len(words))], words[next(len(words))], words[next(len(words))]}
		for s := 0; s < 40; s++ {
			k := 7 + next(5)
			for i := 0; i < k; i++ {
				w := words[next(len(words))]
				if s >= 14 && next(2) == 0 {
					w = fav[next(3)]
				}
				if i > 0 {
					sb.WriteByte(' ')
				}
				sb.WriteString(w)
			}
			sb.WriteString(". ")
		}
		if err := os.WriteFile(filepath.Join(docs, fmt.Sprintf("doc%02d.txt", d)), []byte(sb.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return model, docs
}

// TestEvaluateCLI runs the test on the tiny model with the native backend
// over generated documents: the table has the baselines and a copy of the
// chunk system, which must agree with chunk exactly (ΔMRR 0 with a [0, 0]
// interval); the JSON and markdown files hold the same report; and the
// exit codes of bad command lines and inputs.
func TestEvaluateCLI(t *testing.T) {
	model, docs := evalFixture(t, 6)
	out := t.TempDir()
	jsonPath, mdPath := filepath.Join(out, "r.json"), filepath.Join(out, "r.md")
	args := []string{"evaluate", model, "copy=" + model + ":chunk", "--docs", docs, "--backend", "native", "--max-tokens", "256",
		"--buckets", "0,64,128,256", "--bootstrap", "50", "--json-out", jsonPath, "--md-out", mdPath, "-q"}
	code, stdout, stderr := runCLI(args...)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"| truncate | ", "| chunk | ", "| copy | ", "(reference)", "ΔMRR vs chunk", "MRR 0–64 (6)", "MRR 128–256 (6)",
		"6 documents (0 skipped", "18 queries"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	md, err := os.ReadFile(mdPath)
	if err != nil || string(md) != stdout {
		t.Errorf("--md-out differs from stdout (%v)", err)
	}
	var rep embed.Report
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Documents != 6 || rep.Queries != 18 || len(rep.Systems) != 3 || rep.Reference != "chunk" {
		t.Fatalf("report %+v", rep)
	}
	chunk, cp := rep.Systems[1], rep.Systems[2]
	if cp.Name != "copy" || cp.All != chunk.All || cp.Delta == nil || *cp.Delta != (embed.Interval{}) {
		t.Errorf("the copy of chunk differs from it: %+v vs %+v", cp, chunk)
	}
	for _, s := range rep.Systems {
		if s.All.MRR <= 0 || s.All.MRR > 1 || s.SecondsPerDoc <= 0 || len(s.Buckets) != 3 {
			t.Errorf("system %+v", s)
		}
	}

	// --systems picks and orders; --json prints the report.
	code, stdout, stderr = runCLI("evaluate", model, "--docs", docs, "--backend", "native", "--max-tokens", "256",
		"--buckets", "0,128,256", "--bootstrap", "20", "--systems", "chunk,truncate", "--reference", "truncate", "--json", "-q")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep2 embed.Report
	if err := json.Unmarshal([]byte(stdout), &rep2); err != nil {
		t.Fatalf("--json: %v\n%s", err, stdout)
	}
	if len(rep2.Systems) != 2 || rep2.Systems[0].Name != "chunk" || rep2.Systems[1].Name != "truncate" || rep2.Systems[1].Delta != nil {
		t.Errorf("--systems chunk,truncate --reference truncate: %+v", rep2.Systems)
	}

	// maxsim runs when named: the original in chunks, a document scored
	// by its best chunk, one vector per chunk stored (the tiny model reads
	// 128 tokens: 256 wordpieces are 3 chunks).
	code, stdout, stderr = runCLI("evaluate", model, "--docs", docs, "--backend", "native", "--max-tokens", "256",
		"--buckets", "0,128,256", "--bootstrap", "20", "--systems", "chunk,maxsim", "--json", "-q")
	var rep3 embed.Report
	if code != exitOK || json.Unmarshal([]byte(stdout), &rep3) != nil {
		t.Fatalf("--systems chunk,maxsim: exit %d: %s", code, stderr)
	}
	if len(rep3.Systems) != 2 || rep3.Systems[1].Name != "maxsim" || rep3.Systems[1].VectorsPerDoc < 2 || rep3.Systems[0].VectorsPerDoc != 1 || rep3.Systems[1].All.MRR <= 0 {
		t.Errorf("--systems chunk,maxsim: %+v", rep3.Systems)
	}

	// late runs when named, and as MODEL:late: the maxsim system's chunks
	// (--window 32: 30 wordpieces, at most 9 of 256, fewer once the
	// passages are taken out), each pooled from a pass over the document;
	// the two late systems are one.
	code, stdout, stderr = runCLI("evaluate", model, "lc="+model+":late", "--docs", docs, "--backend", "native", "--max-tokens", "256",
		"--buckets", "0,128,256", "--bootstrap", "20", "--systems", "maxsim,late,lc", "--window", "32", "--json", "-q")
	var rep4 embed.Report
	if code != exitOK || json.Unmarshal([]byte(stdout), &rep4) != nil {
		t.Fatalf("--systems maxsim,late,lc: exit %d: %s", code, stderr)
	}
	if len(rep4.Systems) != 3 || rep4.Systems[1].Name != "late" || rep4.Systems[2].Name != "lc" {
		t.Fatalf("--systems maxsim,late,lc: %+v", rep4.Systems)
	}
	for _, s := range rep4.Systems {
		if s.VectorsPerDoc != rep4.Systems[0].VectorsPerDoc || s.VectorsPerDoc <= 6 || s.VectorsPerDoc > 9 {
			t.Errorf("system %s stores %g vectors a document, want maxsim's %g, 7 to 9", s.Name, s.VectorsPerDoc, rep4.Systems[0].VectorsPerDoc)
		}
	}
	if rep4.Systems[1].All != rep4.Systems[2].All || rep4.Systems[1].All == rep4.Systems[0].All {
		t.Errorf("late %+v, lc %+v, maxsim %+v: want late = lc ≠ maxsim", rep4.Systems[1].All, rep4.Systems[2].All, rep4.Systems[0].All)
	}
	// Chunk systems say whether their best chunk is the passage's own;
	// the others are compared with the first of them.
	if rep3.Systems[0].Located != nil || rep3.Systems[1].Located == nil {
		t.Errorf("located: chunk %+v, maxsim %+v; want only maxsim's", rep3.Systems[0].Located, rep3.Systems[1].Located)
	}
	late, lc, ms := rep4.Systems[1], rep4.Systems[2], rep4.Systems[0]
	if ms.Located == nil || late.Located == nil || *late.Located != *lc.Located || ms.LocatedDelta != nil || late.LocatedDelta == nil ||
		math.Abs(late.LocatedDelta.Diff-(late.Located.R1-ms.Located.R1)) > 1e-9 || late.Located.R1 > late.All.R1 {
		t.Errorf("located: maxsim %+v Δ %+v, late %+v Δ %+v, lc %+v", ms.Located, ms.LocatedDelta, late.Located, late.LocatedDelta, lc.Located)
	}

	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"evaluate", model, "--docs", docs, "--no-such-flag"}, exitUsage, "no-such-flag"},
		{[]string{"evaluate", model}, exitUsage, "--docs or --jsonl"},
		{[]string{"evaluate", model, "--docs", docs, "--jsonl", "x"}, exitUsage, "--docs or --jsonl"},
		{[]string{"evaluate", model, "--docs", docs, "--buckets", "0,512,256"}, exitUsage, "--buckets"},
		{[]string{"evaluate", model, "--docs", docs, "--systems", "nope"}, exitUsage, "nope"},
		{[]string{"evaluate", model, "x=" + model + ":fast", "--docs", docs}, exitUsage, "fast"},
		{[]string{"evaluate", model, "--docs", docs, "--window", "2"}, exitUsage, "--window"},
		{[]string{"evaluate", model, "--docs", docs, "--systems", "late", "--pooling", "cls"}, exitUsage, "pools each chunk's wordpieces by their mean"},
		{[]string{"evaluate", model, "--docs", filepath.Join(out, "missing")}, exitBadInput, "missing"},
		{[]string{"evaluate", filepath.Join(out, "nope.onnx"), "--docs", docs}, exitBadInput, "nope.onnx"},
		// The documents have about 400 wordpieces; the default needs 4096.
		{[]string{"evaluate", model, "--docs", docs, "--backend", "native", "-q"}, exitBadInput, "at least 4096 wordpieces"},
		// The tiny model reads 128 tokens: it cannot read 256 in one pass.
		{[]string{"evaluate", model, "whole=" + model + ":long", "--docs", docs, "--backend", "native", "--max-tokens", "256", "-q"}, exitBadInput, "at most 128 tokens"},
	} {
		code, stdout, stderr := runCLI(c.args...)
		if code != c.code || !strings.Contains(stderr, c.msg) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args[1:], code, stderr, c.code, c.msg)
		}
		if stdout != "" || strings.Count(strings.TrimSuffix(stderr, "\n"), "\n") != 0 {
			t.Errorf("%v: stdout %q, stderr %q; want nothing and a one-line message", c.args[1:], stdout, stderr)
		}
	}
}

// TestEvaluateRefusesNonFinite: a system whose vectors are not finite
// (NaN weights) fails the evaluation with exit 3 naming the system and
// the document, instead of ranking by NaN cosines; no report is written.
func TestEvaluateRefusesNonFinite(t *testing.T) {
	model, docs := evalFixture(t, 4)
	m, err := onnx.Load(model)
	if err != nil {
		t.Fatal(err)
	}
	poison(t, m, "encoder.layer.0.attention.self.query.bias", float32(math.NaN()))
	bad := filepath.Join(filepath.Dir(model), "bad.onnx")
	if err := onnx.Save(m, bad, onnx.SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "r.json")
	code, stdout, stderr := runCLI("evaluate", model, "bad="+bad+":chunk", "--docs", docs, "--backend", "native", "--max-tokens", "256",
		"--buckets", "0,64,128,256", "--bootstrap", "10", "--json-out", out, "-q")
	if code != exitRuntime || !strings.Contains(stderr, "system bad, document doc00.txt: ") || !strings.Contains(stderr, "NaN values") || stdout != "" {
		t.Errorf("exit %d, stdout %q, stderr %q; want %d naming the system and the document", code, stdout, stderr, exitRuntime)
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("a failed evaluation wrote %s", out)
	}
}

// TestEvaluateReportsAreOneSet: --json-out and --md-out are written as
// one set: a failure between the two renames leaves both old reports.
func TestEvaluateReportsAreOneSet(t *testing.T) {
	model, docs := evalFixture(t, 4)
	out := t.TempDir()
	jsonPath, mdPath := filepath.Join(out, "r.json"), filepath.Join(out, "r.md")
	os.WriteFile(jsonPath, []byte("old json"), 0o644)
	os.WriteFile(mdPath, []byte("old md"), 0o644)
	old := folderState(t, out)
	args := []string{"evaluate", model, "--docs", docs, "--backend", "native", "--max-tokens", "256",
		"--buckets", "0,128,256", "--bootstrap", "10", "--json-out", jsonPath, "--md-out", mdPath, "-q"}
	defer func() { fsutil.CommitHook = nil }()
	fsutil.CommitHook = func(step string, i int) error {
		if step == "replace" && i == 1 {
			return errors.New("disk full")
		}
		return nil
	}
	code, _, stderr := runCLI(args...)
	if code != exitRuntime || !strings.Contains(stderr, "disk full") {
		t.Errorf("exit %d, stderr %q; want %d", code, stderr, exitRuntime)
	}
	if now := folderState(t, out); !sameFolder(now, old) {
		t.Errorf("a failure between the renames left %q (json %.20q)", keys(now), now["r.json"])
	}
	fsutil.CommitHook = nil
	if code, _, stderr := runCLI(args...); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if now := folderState(t, out); len(now) != 2 || !strings.HasPrefix(now["r.json"], "{") || !strings.Contains(now["r.md"], "| chunk |") {
		t.Errorf("the reports: %q", keys(now))
	}
}

// TestEvaluateNeverWritesOverAnInput: --json-out or --md-out naming an
// input (the original, a NAME=MODEL, a --docs file, --jsonl), by its
// path, a symlink or a hard link, or both naming one file, is refused
// with exit 1 naming the flag and the file, before any work.
func TestEvaluateNeverWritesOverAnInput(t *testing.T) {
	model, docs := evalFixture(t, 4)
	dir := filepath.Dir(model)
	other := filepath.Join(dir, "other.onnx")
	b, _ := os.ReadFile(model)
	os.WriteFile(other, b, 0o644)
	jsonl := filepath.Join(dir, "docs.jsonl")
	os.WriteFile(jsonl, []byte(`{"id": 1, "text": "the river"}`+"\n"), 0o644)
	link, hard := filepath.Join(dir, "link.json"), filepath.Join(dir, "hard.json")
	if err := os.Symlink(model, link); err != nil {
		t.Skip(err)
	}
	if err := os.Link(model, hard); err != nil {
		t.Skip(err)
	}
	before, docsBefore := folderState(t, dir), folderState(t, docs)
	doc := filepath.Join(docs, "doc00.txt")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--docs", docs, "--json-out", model}, "--json-out " + model + " is the input ORIGINAL " + model},
		{[]string{"--docs", docs, "--md-out", model}, "--md-out " + model + " is the input ORIGINAL"},
		{[]string{"--docs", docs, "x=" + other, "--md-out", other}, "--md-out " + other + " is the input model of system x " + other},
		{[]string{"--docs", docs, "--json-out", link}, "--json-out " + link + " is the input ORIGINAL"},
		{[]string{"--docs", docs, "--json-out", hard}, "--json-out " + hard + " is the input ORIGINAL"},
		{[]string{"--docs", docs, "--md-out", doc}, "--md-out " + doc + " is the input --docs " + doc},
		{[]string{"--jsonl", jsonl, "--json-out", jsonl}, "--json-out " + jsonl + " is the input --jsonl"},
		{[]string{"--docs", docs, "--json-out", filepath.Join(dir, "r"), "--md-out", filepath.Join(dir, ".", "r")}, "are the same file"},
	} {
		code, stdout, stderr := runCLI(append([]string{"evaluate", model, "--backend", "native", "--max-tokens", "256", "--buckets", "0,128,256", "-q"}, c.args...)...)
		if code != exitUsage || !strings.Contains(stderr, c.want) || stdout != "" {
			t.Errorf("%v: exit %d, stdout %.40q, stderr %q; want %d and %q", c.args, code, stdout, stderr, exitUsage, c.want)
		}
	}
	if now := folderState(t, dir); !sameFolder(now, before) {
		t.Errorf("refused runs changed the model's folder: %q → %q", keys(before), keys(now))
	}
	if now := folderState(t, docs); !sameFolder(now, docsBefore) {
		t.Errorf("refused runs changed the documents: %q → %q", keys(docsBefore), keys(now))
	}
}
