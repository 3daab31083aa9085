package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/ops"
)

// `convert linformer` without flags writes LinformerAttention nodes in
// the pooled mode (128 segments, first and last tokens exact, no E or F),
// never another op's type; validate checks them against the Go kernel and
// finetune fits them (as the local+pooled op they compute).
func TestLinformerDefaultsCLI(t *testing.T) {
	orig, _, _ := tinyModels(t)
	out := filepath.Join(t.TempDir(), "pool.onnx")
	if code, stdout, errOut := runCLI("linformer", orig, "-o", out); code != 0 {
		t.Fatalf("exit %d: %s%s", code, stdout, errOut)
	}
	m, err := onnx.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	nodes := 0
	for _, n := range m.Graph.Node {
		if n.GetDomain() != ops.Domain {
			continue
		}
		nodes++
		if n.GetOpType() != ops.LinformerOp || !ops.IsPooledLinformer(n) || len(n.Input) != 6 || n.Input[3] != "" || n.Input[4] != "" {
			t.Errorf("node %s: %s with inputs %q, want a pooled %s", n.GetName(), n.GetOpType(), n.Input, ops.LinformerOp)
		}
		if a, _, err := ops.PooledAttrs(n); err != nil || a.Segments != 128 || !a.SinkFirst || !a.SinkLast {
			t.Errorf("node %s: %+v, %v; want 128 segments, sinks first,last", n.GetName(), a, err)
		}
	}
	if nodes == 0 {
		t.Fatal("no converted node")
	}
	for _, f := range m.Functions {
		if f.GetName() != ops.LinformerOp {
			t.Errorf("function %s in a Linformer conversion", f.GetName())
		}
	}
	code, stdout, _ := runCLI("validate", out, "--random-inputs", "--seq-len", "12", "--json")
	var v struct{ OK bool }
	if err := json.Unmarshal([]byte(stdout), &v); code != 0 || err != nil || !v.OK {
		t.Errorf("validate: exit %d, %v\n%s", code, err, stdout)
	}
	fit := filepath.Join(t.TempDir(), "fit.onnx")
	code, stdout, errOut := runCLI("finetune", orig, out, "-o", fit, "--random-inputs", "--batch", "4", "--seq-len", "12", "--steps", "2")
	if code != 0 || !strings.Contains(stdout, "fitted "+ops.LinformerOp) {
		t.Errorf("finetune: exit %d\n%s%s", code, stdout, errOut)
	}
	// Flags of the Gaussian projections are refused with the pooled mode.
	if code, _, errOut := runCLI("linformer", orig, "-o", filepath.Join(t.TempDir(), "x.onnx"), "--max-len", "64"); code != exitUsage || !strings.Contains(errOut, "--max-len") {
		t.Errorf("--max-len with --init pool: exit %d, %s", code, errOut)
	}
}
