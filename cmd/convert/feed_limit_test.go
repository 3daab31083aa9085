package main

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
)

// positionLimit is convert.PositionLimit of the model at path.
func positionLimit(t *testing.T, path string) int {
	t.Helper()
	m, err := onnx.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	n, err := convert.PositionLimit(m)
	if err != nil || n <= 0 {
		t.Fatalf("position limit of %s: %d, %v", path, n, err)
	}
	return n
}

// words is a text of n wordpieces of feedModel's vocabulary.
func words(n int) string {
	return strings.TrimSpace(strings.Repeat("the ", n))
}

// TestFeedPositionLimit: every command that takes the input flags checks
// the sequence length against the model's position table before running:
// a --text longer than it (with a --max-len that lets it through), an
// --input file and a --seq-len over it are bad input (exit 2: the model
// does not fit the flags; the --seq-len before anything is allocated);
// each message names the model, the limit and the commands that read
// longer inputs.
func TestFeedPositionLimit(t *testing.T) {
	path, dir := feedModel(t)
	limit := positionLimit(t, path)
	n := limit + 50
	ids := filepath.Join(dir, "ids.npy")
	if err := onnx.WriteNPY(ids, onnx.NewInt64([]int{1, n}, make([]int64, n))); err != nil {
		t.Fatal(err)
	}
	textFile := filepath.Join(dir, "long.txt")
	os.WriteFile(textFile, []byte(words(n)+"\n"), 0o644)
	cases := []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"--text", []string{"--text", words(n), "--max-len", "4096"}, exitBadInput, []string{"--text:", strconv.Itoa(n+2) + " tokens"}},
		{"--text-file", []string{"--text-file", textFile, "--max-len", "4096"}, exitBadInput, []string{"--text-file:", strconv.Itoa(n+2) + " tokens"}},
		{"--text --seq-len", []string{"--text", "the man", "--seq-len", strconv.Itoa(n)}, exitBadInput, []string{"--seq-len:"}},
		{"--input", []string{"--input", "input_ids=" + ids, "--random-inputs"}, exitBadInput, []string{"--input input_ids:", strconv.Itoa(n) + " tokens"}},
		{"huge --seq-len", []string{"--random-inputs", "--seq-len", "268435456"}, exitBadInput, []string{"--seq-len:", "268435456 tokens"}},
	}
	for _, c := range cases {
		for name, pre := range feedCommands(path, dir) {
			args := append(append([]string(nil), pre...), c.args...)
			if name != "compare-backends" { // runs both backends
				args = append(args, "--backend", "native")
			}
			code, stdout, errOut := runCLI(args...)
			if code != c.code {
				t.Errorf("%s: %s: exit %d, want %d (%s)", c.name, name, code, c.code, errOut)
			}
			want := append([]string{"the " + strconv.Itoa(limit) + " positions", path + "'s position table",
				"convert long " + path + " -o OUT --max-length N reads longer inputs (or convert extend-positions)"}, c.want...)
			for _, w := range want {
				if !strings.Contains(errOut, w) {
					t.Errorf("%s: %s: message %q lacks %q", c.name, name, errOut, w)
				}
			}
			if stdout != "" || strings.Count(errOut, "\n") != 1 {
				t.Errorf("%s: %s: stdout %q, stderr %q; want one line on stderr only", c.name, name, stdout, errOut)
			}
		}
	}
	// Within the limit the same text runs.
	if code, _, errOut := runCLI("run", path, "--backend", "native", "--text", words(limit-2), "--max-len", "4096"); code != 0 {
		t.Errorf("a text of exactly %d tokens: exit %d: %s", limit, code, errOut)
	}
}

// TestFeedMaxLenFollowsModel: without --max-len a text is cut to the
// model's own position limit — the original table's rows, or the rows of
// a table extended with convert.ExtendPositions — not to a fixed 512;
// --max-len still cuts shorter; random inputs are no longer than the
// limit.
func TestFeedMaxLenFollowsModel(t *testing.T) {
	path, dir := feedModel(t)
	limit := positionLimit(t, path)
	m, err := onnx.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	rows := infer.DefaultFeedMaxLen + 2*limit // more than the old fixed default
	ext, _, err := convert.ExtendPositions(m, convert.ExtendOptions{MaxPositions: rows})
	if err != nil {
		t.Fatal(err)
	}
	extPath := filepath.Join(dir, "ext.onnx") // beside vocab.txt
	if err := onnx.Save(ext, extPath, onnx.SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	extLimit := positionLimit(t, extPath)
	if extLimit != rows {
		t.Fatalf("extended limit %d, want %d", extLimit, rows)
	}
	var got *infer.Feed
	stop := errors.New("stop")
	feedBuilt = func(f *infer.Feed) error { got = f; return stop }
	defer func() { feedBuilt = nil }()
	long := words(rows + 100)
	for _, c := range []struct {
		model string
		args  []string
		seq   int
	}{
		{path, []string{"--text", long}, limit},
		{extPath, []string{"--text", long}, extLimit},
		{extPath, []string{"--text", long, "--max-len", "100"}, 100},
		{extPath, []string{"--text", words(infer.DefaultFeedMaxLen + 10)}, infer.DefaultFeedMaxLen + 12},
		{path, []string{"--random-inputs", "--seq-len", strconv.Itoa(limit)}, limit},
	} {
		for name, pre := range feedCommands(c.model, dir) {
			got = nil
			pre[1] = c.model
			code, _, errOut := runCLI(append(append([]string(nil), pre...), c.args...)...)
			if got == nil || !strings.Contains(errOut, "stop") {
				t.Fatalf("%s %s: no feed built (exit %d: %s)", name, filepath.Base(c.model), code, errOut)
			}
			if got.SeqLen != c.seq {
				t.Errorf("%s %s %.40q: %d tokens, want %d", name, filepath.Base(c.model), c.args, got.SeqLen, c.seq)
			}
		}
	}
	feedBuilt = nil
	// The extended model runs a text longer than the old default whole.
	code, out, errOut := runCLI("run", extPath, "--backend", "native", "--text", words(infer.DefaultFeedMaxLen+10))
	if code != 0 || !strings.Contains(out, "input_ids int64[1 "+strconv.Itoa(infer.DefaultFeedMaxLen+12)+"]") {
		t.Errorf("run on the extended model: exit %d: %s%s", code, out, errOut)
	}
}
