package main

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// TestBenchBackendsCLI runs the smallest benchmark (one layer, 8 tokens,
// one timed run) and checks the report's shape and arithmetic.
func TestBenchBackendsCLI(t *testing.T) {
	needORT(t)
	code, out, errOut := runCLI("bench-backends", "--lengths", "8,16", "--num-layers", "1", "--repeat", "1", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep benchBackendsReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(rep.Rows) != 2 || rep.Rows[0].SeqLen != 8 || rep.Rows[1].SeqLen != 16 || rep.GEMM == "" {
		t.Fatalf("report: %+v", rep)
	}
	code, out, errOut = runCLI("bench-backends", "--lengths", "8", "--num-layers", "1", "--repeat", "1", "--profile")
	if code != 0 || !strings.Contains(out, "MatMul") || !strings.Contains(out, "native/ort") {
		t.Errorf("--profile: exit %d: %s\n%s", code, errOut, out)
	}
	for _, r := range rep.Rows {
		if r.NativeMS <= 0 || r.ORTMS <= 0 || r.Ratio <= 0 || math.Abs(r.Ratio-r.NativeMS/r.ORTMS) > 1e-9*r.Ratio {
			t.Errorf("row %+v", r)
		}
	}
}
