//go:build unix

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/embed"
	"github.com/linearize/linearize/internal/fsutil"
	"github.com/linearize/linearize/onnx"
)

// partsChildEnv makes the test binary act as the convert command with
// the arguments in the variable ("N\tSTEP\targs…", tab-separated) and
// stop at STEP ("commit": just after the commit point; "replace": between
// the renames) of its N-th set of outputs: it prints "STOP" and blocks
// until killed.
const partsChildEnv = "LINEARIZE_TEST_PARTS_CHILD"

func init() {
	v := os.Getenv(partsChildEnv)
	if v == "" {
		return
	}
	n, rest, _ := strings.Cut(v, "\t")
	step, args, _ := strings.Cut(rest, "\t")
	stopAt, _ := strconv.Atoi(n)
	sets := 0
	fsutil.CommitHook = func(s string, i int) error {
		if s == "journal" {
			sets++
		}
		if sets == stopAt && s == step && (step != "replace" || i == 0) {
			fmt.Println("STOP")
			select {}
		}
		return nil
	}
	cli.CleanupOnSignal(os.Stderr)
	os.Exit(cli.Run(strings.Split(args, "\t"), os.Stdout, os.Stderr))
}

// killAt runs the CLI with args in a child, stops it at step of its n-th
// set of outputs, and kills it (-9).
func killAt(t *testing.T, n int, step string, args ...string) {
	t.Helper()
	c, _, _ := startChild(t, partsChildEnv+"="+strconv.Itoa(n)+"\t"+step+"\t"+strings.Join(args, "\t"), "STOP", "set "+strconv.Itoa(n))
	killChild(c)
}

// streamCorpus writes n documents (ids d1…dn, of growing length) as
// JSONL beside the model.
func streamCorpus(t *testing.T, dir string, n int) (path string, texts map[string]string) {
	t.Helper()
	words := []string{"the", "man", "is", "eating", "food", ".", "horses"}
	texts = map[string]string{}
	var b strings.Builder
	for i := 1; i <= n; i++ {
		var w []string
		for k := 0; k < 3+i*7%40; k++ {
			w = append(w, words[(i+k)%len(words)])
		}
		id := fmt.Sprint("d", i)
		texts[id] = strings.Join(w, " ")
		fmt.Fprintf(&b, "{\"id\": %q, \"text\": %q}\n", id, texts[id])
	}
	path = filepath.Join(dir, "docs.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, texts
}

// folderVectors reads a folder of parts (verified) or an .npy output:
// vector by id.
func folderVectors(t *testing.T, out string) map[string][]float32 {
	t.Helper()
	got := map[string][]float32{}
	if strings.HasSuffix(out, ".npy") {
		tt, err := onnx.ReadNPY(out)
		if err != nil {
			t.Fatal(err)
		}
		ids, _ := os.ReadFile(embed.IDsPath(out))
		dim := tt.Shape[1]
		for i, id := range strings.Fields(string(ids)) {
			got[id] = tt.Floats()[i*dim : (i+1)*dim]
		}
		return got
	}
	m, err := embed.ReadManifest(out)
	if err != nil || m == nil {
		t.Fatalf("%s: manifest %v", out, err)
	}
	for _, p := range m.Parts {
		ids, vecs, err := m.ReadPart(out, p)
		if err != nil {
			t.Fatal(err)
		}
		for i, id := range ids {
			got[id] = vecs[i*m.Settings.Dim : (i+1)*m.Settings.Dim]
		}
	}
	return got
}

// TestEmbedFolderStreams: -o DIR/ writes parts of --part-size documents
// and a manifest (model and tokenizer SHA-256, settings, parts); every
// vector is the library's for its document alone; stdin (--jsonl -)
// gives the same folder.
func TestEmbedFolderStreams(t *testing.T) {
	path, dir := embedModel(t)
	jsonl, texts := streamCorpus(t, dir, 11)
	out := filepath.Join(dir, "vecs")
	code, stdout, stderr := runCLI("embed", path, "--jsonl", jsonl, "-o", out+"/", "--part-size", "4", "--backend", "native", "--window", "16")
	if code != exitOK || !strings.Contains(stdout, "embedded 11 documents") {
		t.Fatalf("exit %d: %s %s", code, stdout, stderr)
	}
	m, err := embed.ReadManifest(out)
	if err != nil {
		t.Fatal(err)
	}
	sum, _ := embed.FileSHA256(path)
	if !m.Complete || m.Documents != 11 || len(m.Parts) != 3 || m.Parts[2].Documents != 3 || m.Model.SHA256 != sum ||
		len(m.Tokenizer) != 1 || m.Tokenizer[0].File != "vocab.txt" || m.Settings.Mode != embed.Chunk || m.Settings.Window != 16 ||
		m.Tool == "" || m.Parts[1].FirstID != "d5" || m.Parts[1].LastID != "d8" {
		t.Errorf("manifest %+v", m)
	}
	got := folderVectors(t, out)
	for id, text := range texts {
		want := embedWant(t, path, embed.Options{Window: 16}, []string{text})
		sameVector(t, id, got[id], want[0])
	}

	// The same from stdin.
	f, err := os.Open(jsonl)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	stdin := os.Stdin
	os.Stdin = f
	code, _, stderr = runCLI("embed", path, "--jsonl", "-", "-o", filepath.Join(dir, "fromstdin")+"/", "--part-size", "4", "--backend", "native", "--window", "16")
	os.Stdin = stdin
	if code != exitOK {
		t.Fatalf("--jsonl -: exit %d: %s", code, stderr)
	}
	a, b := folderVectors(t, out), folderVectors(t, filepath.Join(dir, "fromstdin"))
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Error("stdin gave other vectors than the file")
	}

	// Chunks mode: one vector per window, ids d#k.
	code, _, stderr = runCLI("embed", path, "--jsonl", jsonl, "-o", filepath.Join(dir, "chunks")+"/", "--mode", "chunks", "--window", "8", "--chunk-overlap", "2", "--backend", "native")
	if code != exitOK {
		t.Fatalf("chunks: exit %d: %s", code, stderr)
	}
	ch := folderVectors(t, filepath.Join(dir, "chunks"))
	e, err := embed.Open(path, embed.Options{Mode: embed.Chunks, Window: 8, Overlap: 2, Backend: "native"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	want, err := e.EmbedChunks([]string{texts["d9"]})
	if err != nil {
		t.Fatal(err)
	}
	if len(want[0]) < 2 {
		t.Fatalf("d9 has %d chunks: the test shows nothing", len(want[0]))
	}
	for k, v := range want[0] {
		sameVector(t, fmt.Sprintf("d9#%d", k), ch[fmt.Sprintf("d9#%d", k)], v)
	}

	// Late mode: the same ids, each chunk pooled from a pass over the
	// whole document, as the library gives them.
	code, _, stderr = runCLI("embed", path, "--jsonl", jsonl, "-o", filepath.Join(dir, "late")+"/", "--mode", "late", "--window", "8", "--chunk-overlap", "2", "--backend", "native")
	if code != exitOK {
		t.Fatalf("late: exit %d: %s", code, stderr)
	}
	late := folderVectors(t, filepath.Join(dir, "late"))
	if !slices.Equal(slices.Sorted(maps.Keys(late)), slices.Sorted(maps.Keys(ch))) {
		t.Fatalf("late ids %v, want the chunks' %v", slices.Sorted(maps.Keys(late)), slices.Sorted(maps.Keys(ch)))
	}
	le, err := embed.Open(path, embed.Options{Mode: embed.Late, Window: 8, Overlap: 2, Backend: "native"})
	if err != nil {
		t.Fatal(err)
	}
	defer le.Close()
	lwant, err := le.EmbedChunks([]string{texts["d9"]})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range lwant[0] {
		id := fmt.Sprintf("d9#%d", k)
		sameVector(t, "late "+id, late[id], v)
		if fmt.Sprint(late[id]) == fmt.Sprint(ch[id]) {
			t.Errorf("late %s is its chunks-mode vector", id)
		}
	}
	if code, _, stderr := runCLI("embed", path, "--jsonl", jsonl, "-o", filepath.Join(dir, "late-cls")+"/", "--mode", "late", "--pooling", "cls", "--backend", "native"); code != exitUsage || !strings.Contains(stderr, "mean") {
		t.Errorf("late with --pooling cls: exit %d: %s; want %d naming the mean", code, stderr, exitUsage)
	}

	// --chunk-spans: ids DOCID#K@START-END, the library's spans, the
	// same vectors; a folder begun without it is not resumed with it.
	spansArgs := []string{"embed", path, "--jsonl", jsonl, "-o", filepath.Join(dir, "late") + "/", "--mode", "late", "--window", "8", "--chunk-overlap", "2", "--backend", "native", "--chunk-spans"}
	if code, _, stderr := runCLI(spansArgs...); code != exitBadInput || !strings.Contains(stderr, "chunk_spans") {
		t.Errorf("--chunk-spans on a folder begun without: exit %d: %s; want %d naming chunk_spans", code, stderr, exitBadInput)
	}
	spansArgs[5] = filepath.Join(dir, "late-spans") + "/"
	if code, _, stderr := runCLI(spansArgs...); code != exitOK {
		t.Fatalf("--chunk-spans: exit %d: %s", code, stderr)
	}
	withSpans := folderVectors(t, filepath.Join(dir, "late-spans"))
	sp := le.ChunkSpans([]string{texts["d9"]})[0]
	for k, v := range lwant[0] {
		id := fmt.Sprintf("d9#%d@%d-%d", k, sp[k].Start, sp[k].End)
		sameVector(t, "late "+id, withSpans[id], v)
	}
	if len(withSpans) != len(late) {
		t.Errorf("%d vectors with spans, %d without", len(withSpans), len(late))
	}
	if code, _, stderr := runCLI("embed", path, "--jsonl", jsonl, "-o", filepath.Join(dir, "spans-chunk")+"/", "--chunk-spans", "--backend", "native"); code != exitUsage || !strings.Contains(stderr, "--chunk-spans") {
		t.Errorf("--chunk-spans in chunk mode: exit %d: %s; want %d", code, stderr, exitUsage)
	}
}

// TestEmbedResumesAfterKill: a run killed (-9) after its second part,
// and again between the renames of a later part, is resumed by the same
// command and ends byte for byte as an uninterrupted run; a re-run of a
// complete folder does nothing; other flags on it are refused naming
// what differs.
func TestEmbedResumesAfterKill(t *testing.T) {
	path, dir := embedModel(t)
	jsonl, _ := streamCorpus(t, dir, 13)
	args := func(out string) []string {
		return []string{"embed", path, "--jsonl", jsonl, "-o", out + "/", "--part-size", "3", "--backend", "native", "--window", "16"}
	}
	whole, cut := filepath.Join(dir, "whole"), filepath.Join(dir, "cut")
	if code, _, stderr := runCLI(args(whole)...); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	killAt(t, 2, "commit", args(cut)...)
	m, _ := embed.ReadManifest(cut)
	if m == nil || len(m.Parts) != 2 || m.Complete {
		t.Fatalf("after the kill: %+v", m)
	}
	// Killed again between the renames of the part after: the next run
	// rolls that set back, then resumes after part 3.
	killAt(t, 2, "replace", args(cut)...)
	code, stdout, stderr := runCLI(args(cut)...)
	if code != exitOK || !strings.Contains(stdout, "resumed after") {
		t.Fatalf("resume: exit %d: %s %s", code, stdout, stderr)
	}
	a, b := folderState(t, whole), folderState(t, cut)
	if !sameFolder(a, b) || len(a) != 11 {
		t.Errorf("the resumed folder (%q) differs from the uninterrupted one (%q)", keys(b), keys(a))
	}
	code, stdout, _ = runCLI(args(cut)...)
	if code != exitOK || !strings.Contains(stdout, "complete") || !sameFolder(folderState(t, cut), a) {
		t.Errorf("re-run of a complete folder: exit %d, %q", code, stdout)
	}
	code, _, stderr = runCLI(append(args(cut), "--mode", "truncate")...)
	if code != exitBadInput || !strings.Contains(stderr, "mode: truncate here, chunk in the manifest") {
		t.Errorf("other flags: exit %d, %q", code, stderr)
	}
}

// runMerge runs embed-merge with args as the CLI would: exit code,
// stdout, stderr (its registration in main.go's table is the parent's).
func runMerge(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut strings.Builder
	err := runEmbedMerge(args, &out, &errOut)
	if err == nil {
		return exitOK, out.String(), errOut.String()
	}
	var ee *cli.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("embed-merge %v: an error without an exit code: %v", args, err)
	}
	return ee.Code, out.String(), errOut.String() + "convert embed-merge: " + err.Error() + "\n"
}

// TestEmbedShardsMerge: two shards (--shard 0/2, 1/2) merged by
// embed-merge hold every document once, with exactly the vectors of one
// unsharded run (batch 1: each document alone in its pass; with batches
// the vectors differ only by padding's rounding); a missing shard and a
// shard of other settings are refused.
func TestEmbedShardsMerge(t *testing.T) {
	path, dir := embedModel(t)
	jsonl, texts := streamCorpus(t, dir, 12)
	for _, batch := range []string{"1", "8"} {
		base := []string{"embed", path, "--jsonl", jsonl, "--part-size", "2", "--backend", "native", "--window", "16", "--batch", batch}
		one := filepath.Join(dir, "one"+batch+".npy")
		if code, _, stderr := runCLI(append(base, "-o", one)...); code != exitOK {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		var shards []string
		for i := range 2 {
			s := filepath.Join(dir, fmt.Sprintf("s%d-%s", i, batch))
			shards = append(shards, s)
			if code, _, stderr := runCLI(append(base, "-o", s+"/", "--shard", fmt.Sprintf("%d/2", i))...); code != exitOK {
				t.Fatalf("shard %d: exit %d: %s", i, code, stderr)
			}
		}
		merged := filepath.Join(dir, "merged"+batch+".npy")
		code, stdout, stderr := runMerge(t, shards[0], shards[1], "-o", merged)
		if code != exitOK || !strings.Contains(stdout, "verified 2 shards: 12 documents") {
			t.Fatalf("merge: exit %d: %s %s", code, stdout, stderr)
		}
		a, b := folderVectors(t, one), folderVectors(t, merged)
		if len(a) != len(texts) || len(b) != len(texts) {
			t.Fatalf("%d and %d vectors for %d documents", len(a), len(b), len(texts))
		}
		for id := range texts {
			if batch == "1" && fmt.Sprint(a[id]) != fmt.Sprint(b[id]) {
				t.Errorf("batch 1: %s merged differs from one run", id)
			}
			sameVector(t, id, b[id], a[id])
		}
		if batch == "1" {
			if code, _, stderr := runMerge(t, shards[0]); code != exitBadInput || !strings.Contains(stderr, "shards missing: 1/2") {
				t.Errorf("one shard: exit %d, %q", code, stderr)
			}
			other := filepath.Join(dir, "other")
			runCLI("embed", path, "--jsonl", jsonl, "-o", other+"/", "--backend", "native", "--window", "16", "--mode", "truncate", "--shard", "1/2")
			if code, _, stderr := runMerge(t, shards[0], other); code != exitBadInput || !strings.Contains(stderr, "mode: truncate") {
				t.Errorf("a shard of other settings: exit %d, %q", code, stderr)
			}
		}
	}
	var m embed.Manifest
	b, _ := os.ReadFile(filepath.Join(dir, "s0-1", embed.ManifestName))
	if err := json.Unmarshal(b, &m); err != nil || m.Settings.Shard != "0/2" {
		t.Errorf("shard manifest %+v, %v", m.Settings, err)
	}
}
