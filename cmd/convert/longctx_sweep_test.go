package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLongContextSweep runs the commands a user of a long-context encoder
// runs on every long-context export form of the fixtures: ModernBERT
// (TorchScript and dynamo), GTE and GTE-v1.5, NomicBERT, jina-v3 with
// its task adapters (float32 and the published float16 and int8 copies,
// task_id given with --input), jina-v2 with its ALiBi computed or held in
// a buffer, and XLM-R (bge-m3's form). Each command must either work
// (exit 0) or refuse the model as bad input (exit 2) with a message, never
// fail at run time (exit 3) or exit with a usage error; and the commands
// every form supports (inspect, local-pooled, which converts ALiBi too,
// compare, validate, embed in late mode, bench, compare-backends) must
// work. The faults this sweep found when it was first run by hand: bench
// fed jina-v3's scalar task_id as a token sequence, performer --balance
// failed on ModernBERT's window blocks and on float16 models (a panic),
// compare-backends failed every float16 model, embed long failed in
// onnxruntime past a buffered ALiBi tensor, and XLM-R's bench failed at
// its table's length.
func TestLongContextSweep(t *testing.T) {
	needORT(t)
	if testing.Short() {
		t.Skip("-short: the sweep runs about 200 commands")
	}
	files := []string{
		"modernbert_sdpa_op17.onnx", "modernbert_eager_dynamo_op18.onnx", "gte_sdpa_op17.onnx",
		"nomicbert_sdpa_op17.onnx", "jinav3lora_eager_op17.onnx", "xlmroberta_sdpa_op17.onnx",
		"published/jinav3lora_eager_op17.fp16_ortx.onnx", "published/jinav3lora_eager_op17.int8_dyn_s8.onnx",
		"longctx/gte_v15.onnx", "longctx/nomic_bert.onnx", "longctx/jina_v2_alibi.onnx",
		"longctx/jina_v2_alibi_buffer.onnx", "longctx/xlmr_long_positions.onnx",
	}
	work := t.TempDir()
	cal := filepath.Join(work, "cal.txt")
	if err := os.WriteFile(cal, []byte(strings.Repeat("the man is eating food . the horses is eating the food of the man .\n", 24)), 0o644); err != nil {
		t.Fatal(err)
	}
	text := strings.Repeat("the man is eating food . ", 6)
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".onnx")
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(work, name)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			m := fixtureWithVocab(t, dir, f)
			var task []string
			if strings.HasPrefix(name, "jinav3lora") {
				task = []string{"--input", "task_id=1"}
			}
			lp := filepath.Join(dir, "lp.onnx")
			for _, c := range []struct {
				must bool // exit 0 required; else 0 or a refusal (2)
				args []string
			}{
				{true, []string{"inspect", m, "--cost"}},
				{true, []string{"local-pooled", m, "-o", lp}},
				{false, []string{"performer", m, "-o", filepath.Join(dir, "pf.onnx")}},
				{false, append([]string{"performer", m, "-o", filepath.Join(dir, "pb.onnx"), "--calibration", cal, "--balance"}, task...)},
				{false, append([]string{"hedgehog", m, "-o", filepath.Join(dir, "hh.onnx"), "--calibration", cal, "--steps", "2", "--seq-len", "16", "--backend", "native"}, task...)},
				{false, []string{"extend-positions", m, "-o", filepath.Join(dir, "ext.onnx"), "--max-positions", "256", "--trained-length", "32"}},
				{true, append([]string{"compare", m, lp, "--random-inputs"}, task...)},
				{true, append([]string{"validate", lp, "--random-inputs"}, task...)},
				{true, append([]string{"embed", lp, "--text", text, "--mode", "late", "--window", "16", "--chunk-spans", "-o", filepath.Join(dir, "late.jsonl")}, task...)},
				{false, append([]string{"embed", m, "--text", strings.Repeat(text, 20), "--mode", "long", "-o", filepath.Join(dir, "long.jsonl")}, task...)},
				{true, append([]string{"bench", m, "--lengths", "32,80", "--repeat", "1", "--threads", "1", "--variants", "original,local-pooled"}, task...)},
				{true, append([]string{"compare-backends", m, "--random-inputs"}, task...)},
			} {
				code, stdout, stderr := runCLI(c.args...)
				switch {
				case code == exitOK:
					if c.args[0] == "bench" && strings.Contains(stdout, " failed ") {
						t.Errorf("%s: a run failed:\n%s", strings.Join(c.args[:2], " "), stdout)
					}
				case code == exitBadInput && !c.must && strings.TrimSpace(stderr) != "":
				default:
					t.Errorf("%s: exit %d, %s", strings.Join(c.args, " "), code, lastLines(stderr, 3))
				}
			}
		})
	}
}

// fixtureWithVocab copies testdata/fixtures/rel into dir, beside a
// vocab.txt of feedVocab (ids below every fixture's vocabulary), and
// returns the copy's path.
func fixtureWithVocab(t *testing.T, dir, rel string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "fixtures", filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, strings.TrimSuffix(filepath.Base(rel), ".onnx")+".onnx")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "vocab.txt"), []byte(feedVocab), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
