package convert

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/runtime"
)

// runNative runs m in the native Go backend. Every fixture and corpus model
// this package converts runs natively, so any failure (an op the backend
// lacks included) fails the test rather than skipping it.
func runNative(t *testing.T, m *onnxpb.ModelProto, in map[string]*onnx.Tensor) map[string]*onnx.Tensor {
	t.Helper()
	s, err := runtime.NewNativeSession(m, runtime.Options{Threads: 1})
	if err != nil {
		t.Fatalf("native session: %v", err)
	}
	defer s.Close()
	out, err := s.Run(in)
	if err != nil {
		t.Fatalf("native run: %v", err)
	}
	return out
}

// TestConvertedNativeVsORT: converted models (both ops) give the same
// outputs in onnxruntime (function bodies) and in the native backend (Go
// kernels), within 1e-4 of the output scale.
func TestConvertedNativeVsORT(t *testing.T) {
	needORT(t)
	type tc struct {
		name string
		m    *onnxpb.ModelProto
		in   map[string]*onnx.Tensor
	}
	var cases []tc
	if dir := filepath.Join("..", "..", "shared", "corpus", "ort-fusion"); true {
		for _, c := range corpusRunnable {
			m, err := onnx.Load(filepath.Join(dir, c.file))
			if err != nil {
				t.Logf("corpus: %v", err)
				break
			}
			s, err := runtime.NewORTSession(m, runtime.Options{Threads: 1})
			if err != nil {
				t.Fatal(err)
			}
			in := feeds(t, s.Inputs(), c.seq, 1, 4)
			s.Close()
			cases = append(cases, tc{c.file, m, in})
		}
	}
	for _, f := range fixtures(t) {
		if f.Convertible == 0 || !(strings.HasSuffix(f.File, "_op14.onnx") || strings.HasSuffix(f.File, "_fused.onnx")) {
			continue
		}
		cases = append(cases, tc{f.File, loadModel(t, filepath.Join(fixtureDir, f.File)), fixtureFeeds(f, 2, 8, []int{8, 5}, 3)})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pm, _, err := ToPerformer(c.m, PerformerOptions{Features: 64, Seed: 2})
			if err != nil {
				t.Fatal(err)
			}
			lm, _, err := ToLinformer(c.m, LinformerOptions{K: 4, MaxLen: 16, Seed: 2})
			if err != nil {
				t.Fatal(err)
			}
			for name, m := range map[string]*onnxpb.ModelProto{"performer": pm, "linformer": lm} {
				nat := runNative(t, m, c.in)
				ort := runORT(t, m, c.in)
				for o, want := range ort {
					if d := runtime.CompareTensors(nat[o], want); !d.OK(1e-4) {
						t.Errorf("%s output %s: native vs onnxruntime: %v", name, o, d)
					}
				}
			}
		})
	}
}
