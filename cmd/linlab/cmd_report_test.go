package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/cmd/internal/realtable"
	"github.com/linearize/linearize/convert"
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
		if code != cli.ExitUsage {
			t.Errorf("%v: exit %d, want %d (%s)", args, code, cli.ExitUsage, errOut)
		}
	}
	code, _, errOut := runCLI("report-real", "--model", "/nonexistent.onnx", "--docs", t.TempDir())
	if code != cli.ExitBadInput || !strings.Contains(errOut, "real-") {
		t.Errorf("absent model: exit %d: %s", code, errOut)
	}
}

// TestReportRealCLI runs a small table on the real model when
// scripts/real-model.sh has built it.
func TestReportRealCLI(t *testing.T) {
	needORT(t)
	model := filepath.Join("..", "..", "testdata", "real", "minilm.onnx")
	if _, err := os.Stat(model); err != nil {
		t.Skip("testdata/real/minilm.onnx absent: run scripts/real-model.sh")
	}
	if testing.Short() {
		t.Skip("short mode")
	}
	calib := filepath.Join("..", "..", "testdata", "realmodel", "calibration.txt")
	held := filepath.Join("..", "..", "testdata", "realmodel", "heldout.txt")
	code, stdout, errOut := runCLI("report-real", "--model", model, "--calibration", calib, "--heldout", held,
		"--features", "64", "--norms", "chi", "--omega", "orthogonal", "--fit-performer", "", "--k", "32", "--steps", "30", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rows []realtable.Row
	if err := json.Unmarshal([]byte(stdout), &rows); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	if len(rows) != 3 {
		t.Fatalf("%d rows, want Performer and Linformer before/after", len(rows))
	}
	for _, r := range rows {
		if !r.Validated || len(r.LayerErr) != 6 || !(r.PooledCos > 0 && r.PooledCos <= 1+1e-9) {
			t.Errorf("row %+v", r)
		}
	}
	if !(rows[2].PooledCos > rows[1].PooledCos) || !(rows[2].MeanLayerErr < rows[1].MeanLayerErr) {
		t.Errorf("fine-tuned Linformer not closer: %+v → %+v", rows[1], rows[2])
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

func TestPerformerVariantList(t *testing.T) {
	got, err := performerVariantList("center+aderf/chi, center+balance+favor+/sqrt-d,favor++,balance+favor++/qmc,sderf")
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		center, balance bool
		feat, norms     string
	}{
		{true, false, "aderf", "chi"}, {true, true, "favor+", "sqrt-d"}, {false, false, "favor++", "chi"},
		{false, true, "favor++", "qmc"}, {false, false, "sderf", "chi"},
	}
	if len(got) != len(want) {
		t.Fatalf("%d variants, want %d", len(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Center == convert.CenterAuto || g.Centered() != w.center || g.Balance != w.balance || string(g.FeatureMap) != w.feat || string(g.Norms) != w.norms {
			t.Errorf("item %d: %+v, want %+v", i, g, w)
		}
	}
	for _, bad := range []string{"centre+aderf", "relu", "center+", "aderf+center"} {
		if _, err := performerVariantList(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
