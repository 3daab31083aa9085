//go:build unix

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/embed"
	"github.com/linearize/linearize/internal/fsutil"
)

// fileWriteChildEnv makes the test binary act as the convert command
// with the arguments in the variable ("NAME\targs…", tab-separated) and
// stop while it writes the file NAME (its temporary file written, not
// yet renamed): it prints "STOP" and blocks until killed.
const fileWriteChildEnv = "LINEARIZE_TEST_FILE_WRITE_CHILD"

func init() {
	v := os.Getenv(fileWriteChildEnv)
	if v == "" {
		return
	}
	name, args, _ := strings.Cut(v, "\t")
	fsutil.MidWriteHook = func(tmp string) {
		if strings.HasPrefix(filepath.Base(tmp), "."+name+".tmp-") {
			fmt.Println("STOP")
			select {}
		}
	}
	cli.CleanupOnSignal(os.Stderr)
	os.Exit(cli.Run(strings.Split(args, "\t"), os.Stdout, os.Stderr))
}

// killWhileWriting runs the CLI with args in a child, stops it while it
// writes the file out and kills it (-9).
func killWhileWriting(t *testing.T, out string, args ...string) {
	t.Helper()
	c, _, _ := startChild(t, fileWriteChildEnv+"="+filepath.Base(out)+"\t"+strings.Join(args, "\t"), "STOP", "writing "+out)
	killChild(c)
}

// TestEmbedFileResumesAfterKill: -o OUT.npy, OUT.jsonl and OUT.parquet
// are built in parts in .OUT.parts beside OUT and resume as a folder
// does. A run killed (-9) after its second part, then again between the
// renames of a later part, then again while it writes OUT (and, for
// .npy, between the renames of OUT and OUT.ids.txt) ends, re-run with
// the same flags, with OUT byte for byte the file of an uninterrupted
// run, the part folder removed and nothing else left. Until then OUT
// keeps its old content; a re-run with other flags is refused naming
// the part folder and the difference.
func TestEmbedFileResumesAfterKill(t *testing.T) {
	for _, ext := range []string{".npy", ".jsonl", ".parquet"} {
		t.Run(ext, func(t *testing.T) {
			path, dir := embedModel(t)
			jsonl, _ := streamCorpus(t, dir, 13)
			args := func(out string) []string {
				return []string{"embed", path, "--jsonl", jsonl, "-o", out, "--part-size", "3", "--backend", "native", "--window", "16"}
			}
			outs := filepath.Join(dir, "outs")
			if err := os.Mkdir(outs, 0o755); err != nil {
				t.Fatal(err)
			}
			whole, cut := filepath.Join(outs, "whole"+ext), filepath.Join(outs, "cut"+ext)
			parts := embed.FilePartsDir(cut)
			if code, stdout, stderr := runCLI(args(whole)...); code != exitOK || !strings.Contains(stdout, "embedded 13 documents") {
				t.Fatalf("exit %d: %s %s", code, stdout, stderr)
			}
			// An old output of another run: kept whole until the new one
			// is complete.
			if code, _, stderr := runCLI("embed", path, "--text", "horses", "-o", cut, "--backend", "native"); code != exitOK {
				t.Fatalf("old output: exit %d: %s", code, stderr)
			}
			old := folderState(t, outs)
			keptOld := func(when string) {
				t.Helper()
				now := folderState(t, outs)
				for name, content := range old {
					if now[name] != content {
						t.Errorf("%s: %s changed", when, name)
					}
				}
			}

			killAt(t, 2, "commit", args(cut)...)
			m, err := embed.ReadManifest(parts)
			if err != nil || m == nil || len(m.Parts) != 2 || m.Complete {
				t.Fatalf("after the kill: %+v, %v", m, err)
			}
			keptOld("killed after part 2")
			code, _, stderr := runCLI(append(args(cut), "--mode", "truncate")...)
			if code != exitBadInput || !strings.Contains(stderr, "the unfinished run in "+parts+" was made otherwise: mode: truncate here, chunk in the manifest") ||
				!strings.Contains(stderr, "remove "+parts+" to start anew") {
				t.Errorf("other flags: exit %d, %q", code, stderr)
			}
			// Killed between the renames of its second part (the third),
			// then while it writes OUT: the parts are all finished.
			killAt(t, 2, "replace", args(cut)...)
			keptOld("killed between the renames of part 3")
			killWhileWriting(t, cut, args(cut)...)
			if m, _ = embed.ReadManifest(parts); m == nil || len(m.Parts) != 5 || !m.Complete {
				t.Fatalf("killed while writing %s: manifest %+v", cut, m)
			}
			keptOld("killed while writing " + filepath.Base(cut))
			if ext == ".npy" {
				killAt(t, 1, "replace", args(cut)...)
			}

			code, stdout, stderr := runCLI(args(cut)...)
			if code != exitOK || !strings.Contains(stdout, "wrote 13 documents (13 vectors) from the 5 finished parts of "+parts) {
				t.Fatalf("re-run: exit %d: %s %s", code, stdout, stderr)
			}
			now := folderState(t, outs)
			want := map[string]string{filepath.Base(whole): now[filepath.Base(whole)], filepath.Base(cut): now[filepath.Base(whole)]}
			if ext == ".npy" {
				w, c := filepath.Base(embed.IDsPath(whole)), filepath.Base(embed.IDsPath(cut))
				want[w], want[c] = now[w], now[w]
			}
			if !sameFolder(now, want) {
				t.Errorf("after the re-run the folder holds %q (%d and %d bytes), want %q with the uninterrupted run's bytes",
					keys(now), len(now[filepath.Base(cut)]), len(now[filepath.Base(whole)]), keys(want))
			}
		})
	}
}

// TestEmbedFileResumesEmbedding: a file output killed after its second
// part resumes the embedding after it (it says so) and writes the file
// of an uninterrupted run; a run that ends within its first part makes
// no part folder, and a folder left without a manifest (a run killed
// before its first part was committed) is removed.
func TestEmbedFileResumesEmbedding(t *testing.T) {
	path, dir := embedModel(t)
	jsonl, _ := streamCorpus(t, dir, 10)
	args := func(out string) []string {
		return []string{"embed", path, "--jsonl", jsonl, "-o", out, "--part-size", "4", "--backend", "native", "--window", "16"}
	}
	whole, cut := filepath.Join(dir, "whole.parquet"), filepath.Join(dir, "cut.parquet")
	if code, _, stderr := runCLI(args(whole)...); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	killAt(t, 2, "commit", args(cut)...)
	code, stdout, stderr := runCLI(args(cut)...)
	if code != exitOK || !strings.Contains(stdout, "embedded 2 documents, resumed after 8 documents in 2 parts") ||
		!strings.Contains(stderr, "holds 2 finished parts (8 documents, input records 1–8): resuming after them") {
		t.Fatalf("resume: exit %d: %s %s", code, stdout, stderr)
	}
	a, _ := os.ReadFile(whole)
	b, _ := os.ReadFile(cut)
	if string(a) != string(b) || len(a) == 0 {
		t.Errorf("the resumed file (%d bytes) differs from the uninterrupted one (%d bytes)", len(b), len(a))
	}
	if _, err := os.Stat(embed.FilePartsDir(cut)); !os.IsNotExist(err) {
		t.Errorf("the part folder is left: %v", err)
	}

	small := filepath.Join(dir, "small.jsonl")
	stale := embed.FilePartsDir(small)
	if err := os.Mkdir(stale, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(stale, "part-00000.npy"), []byte("half"), 0o644)
	if code, _, stderr := runCLI(append(args(small), "--part-size", "100")...); code != exitOK {
		t.Fatalf("small: exit %d: %s", code, stderr)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("a part folder without a manifest is left: %v", err)
	}
}
