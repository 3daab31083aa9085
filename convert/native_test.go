package convert

import (
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
)

// runNative runs m in the native Go backend. Every fixture and corpus model
// this package converts runs natively, so any failure (an op the backend
// lacks included) fails the test rather than skipping it.
func runNative(t *testing.T, m *onnxpb.ModelProto, in map[string]*onnx.Tensor) map[string]*onnx.Tensor {
	t.Helper()
	s, err := infer.NewNativeSession(m, infer.Options{Threads: 1})
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

// TestConvertedNativeVsORT: converted corpus models (both ops) give the
// same outputs in onnxruntime (function bodies) and in the native backend
// (Go kernels), within 1e-4 of the output scale.
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
			in := modelFeeds(t, m, c.seq, 1, 4, false)
			cases = append(cases, tc{c.file, m, in})
		}
	}
	// Fixtures: TestNativeFixturesVsORT (every file in the folder).
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pm, _, err := ToPerformer(c.m, PerformerOptions{Features: 64, Seed: 2, FeatureMap: ops.FeaturesFavorPlus, Center: CenterOff})
			if err != nil {
				t.Fatal(err)
			}
			lm, _, err := ToLinformer(c.m, LinformerOptions{Init: "gaussian", K: 4, MaxLen: 16, Seed: 2})
			if err != nil {
				t.Fatal(err)
			}
			for name, m := range map[string]*onnxpb.ModelProto{"performer": pm, "linformer": lm} {
				nat := runNative(t, m, c.in)
				ort := runORT(t, m, c.in)
				for o, want := range ort {
					if d := infer.CompareTensors(nat[o], want); !d.OK(1e-4) {
						t.Errorf("%s output %s: native vs onnxruntime: %v", name, o, d)
					}
				}
			}
		})
	}
}

// TestNativeFixturesVsORT runs every .onnx file in testdata/fixtures (the
// folder, not the manifest, so that a fixture added without a manifest
// entry is covered too) in the native backend and in onnxruntime, the
// original and, where Detect finds convertible blocks, its Performer,
// local + pooled and Linformer conversions, and requires every output to
// agree within 1e-4 of its scale. Nothing is skipped: an op the native
// backend lacks fails the subtest, naming the node.
func TestNativeFixturesVsORT(t *testing.T) {
	needORT(t)
	files, err := filepath.Glob(filepath.Join(fixtureDir, "*.onnx"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures in %s: %v", fixtureDir, err)
	}
	sort.Strings(files)
	manifest := map[string]fixtureEntry{}
	for _, f := range fixtures(t) {
		manifest[f.File] = f
	}
	for _, path := range files {
		base := filepath.Base(path)
		t.Run(base, func(t *testing.T) {
			if _, err := os.Stat(path); err != nil {
				t.Fatal(err) // removed while the test ran
			}
			m := loadModel(t, path)
			in := nativeFixtureFeeds(t, m, manifest, base)
			type variant struct {
				name string
				m    *onnxpb.ModelProto
			}
			variants := []variant{{"original", m}}
			d, err := Detect(m)
			if err != nil {
				t.Fatalf("detect: %v", err)
			}
			conv := 0
			for _, b := range d.Blocks {
				if b.Convertible {
					conv++
				}
			}
			if conv > 0 {
				seq := 8
				if f, ok := manifest[base]; ok && f.Seq > 0 {
					seq = f.Seq
				}
				pm, _, err := ToPerformer(m, PerformerOptions{Features: 16, Seed: 4, FeatureMap: ops.FeaturesFavorPlus, Center: CenterOff})
				if err != nil {
					t.Fatalf("performer: %v", err)
				}
				lp, _, err := ToLocalPooled(m, LocalPooledOptions{Block: 2, Segments: 2})
				if err != nil {
					t.Fatalf("local+pooled: %v", err)
				}
				lm, _, err := ToLinformer(m, LinformerOptions{Init: "gaussian", K: 4, MaxLen: max(16, seq), Seed: 4})
				if err != nil {
					t.Fatalf("linformer: %v", err)
				}
				variants = append(variants, variant{"performer", pm}, variant{"localpooled", lp}, variant{"linformer", lm})
			}
			for _, v := range variants {
				s, err := infer.NewNativeSession(v.m, infer.Options{Threads: 1})
				if err != nil {
					t.Errorf("%s: native session: %v", v.name, err)
					continue
				}
				nat, err := s.Run(in)
				s.Close()
				if err != nil {
					t.Errorf("%s: native run: %v", v.name, err)
					continue
				}
				ort := runORT(t, v.m, in)
				names := make([]string, 0, len(ort))
				for o := range ort {
					names = append(names, o)
				}
				sort.Strings(names)
				for _, o := range names {
					if d := infer.CompareTensors(nat[o], ort[o]); !d.OK(1e-4) || d.N == 0 {
						t.Errorf("%s output %s: native vs onnxruntime: %v", v.name, o, d)
					} else {
						t.Logf("%s output %s: %v", v.name, o, d)
					}
				}
			}
		})
	}
}

// nativeFixtureFeeds returns inputs for a fixture: from its manifest entry
// (batch 2, the second row padded where there is a mask), or, for a file
// the manifest does not list yet, from the model's declared inputs
// (variable lengths 8, a waveform 400 samples).
func nativeFixtureFeeds(t *testing.T, m *onnxpb.ModelProto, manifest map[string]fixtureEntry, base string) map[string]*onnx.Tensor {
	t.Helper()
	if f, ok := manifest[base]; ok && f.Vocab > 2 || ok && len(f.FloatInputs) > 0 {
		seq := f.seqLen()
		return fixtureFeeds(f, 2, seq, []int{seq, seq - 3}, 7)
	}
	s, err := infer.NewORTSession(m, infer.Options{Threads: 1})
	if err != nil {
		t.Fatalf("onnxruntime session: %v", err)
	}
	defer s.Close()
	in := feeds(t, s.Inputs(), 8, 3, 7)
	// A raw waveform [batch, samples] of variable length: long enough for
	// a feature encoder's strided convolutions (8 samples are not).
	for _, v := range s.Inputs() {
		if v.DType == onnx.Float && len(v.Shape) == 2 && v.Shape[1].Value < 0 {
			audio := feeds(t, []infer.Value{v}, 400, 0, 7)
			in[v.Name] = audio[v.Name]
		}
	}
	return in
}
