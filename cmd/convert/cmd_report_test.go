package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/internal/realtable"
)

func TestReportRealUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--local-pooled", "32/32"},
		{"--local-pooled", "32/32/both"},
		{"--local-pooled", "-1/32/none"},
		{"--fit-local-pooled", "x/32/none"},
		{"--docs", "d", "--calibration", "c.txt"},
		{"--lengths", "1"},
		{"--lengths", "128,x"},
		{"--calibration-texts", "-1"},
	} {
		code, _, errOut := runCLI(append([]string{"report-real", "--model", "/nonexistent.onnx"}, args...)...)
		if code != exitUsage {
			t.Errorf("%v: exit %d, want %d (%s)", args, code, exitUsage, errOut)
		}
	}
	code, _, errOut := runCLI("report-real", "--model", "/nonexistent.onnx", "--docs", t.TempDir())
	if code != exitBadInput || !strings.Contains(errOut, "real-") {
		t.Errorf("absent model: exit %d: %s", code, errOut)
	}
}

// TestReportRealDocs runs document mode on the real model and the real
// documents at two short lengths: rows carry their lengths, and a pooled
// Linformer with at least as many segments as tokens is exact.
func TestReportRealDocs(t *testing.T) {
	needORT(t)
	root := filepath.Join("..", "..", "testdata", "real")
	model := filepath.Join(root, "minilm.onnx")
	docs := filepath.Join(root, "docs")
	for _, p := range []string{model, filepath.Join(docs, "heldout.txt")} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("%s absent: run scripts/real-model.sh", p)
		}
	}
	if testing.Short() {
		t.Skip("short mode")
	}
	code, stdout, errOut := runCLI("report-real", "--model", model, "--docs", docs, "--lengths", "32,64", "--calibration-texts", "4",
		"--features", "", "--fit-performer", "", "--k", "", "--local-pooled", "0/64/none,8/8/sinks", "--fit-local-pooled", "", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rows []realtable.Row
	if err := json.Unmarshal([]byte(stdout), &rows); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	want := []string{"Linformer pooled k=64", "Local+pooled b=8 k=8 sinks"}
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 2 variants × 2 lengths", len(rows))
	}
	for i, r := range rows {
		if r.Method != want[i%2] || r.Length != []int{32, 64}[i/2] || r.FineTuned || !r.Validated || len(r.LayerErr) != 6 {
			t.Errorf("row %d: %+v", i, r)
		}
	}
	for _, i := range []int{0, 2} {
		if rows[i].PooledCos < 1-1e-4 || rows[i].MeanLayerErr > 1e-3 {
			t.Errorf("pooled Linformer k=64 at n=%d is not exact: cos %.6f, layer err %.2g", rows[i].Length, rows[i].PooledCos, rows[i].MeanLayerErr)
		}
	}
	if !(rows[3].PooledCos < 1) {
		t.Errorf("local+pooled b=8 k=8 at n=64 claims exactness: %+v", rows[3])
	}
}
