package convert

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
)

// corpusDir returns ../shared/corpus/ort-fusion relative to the repository
// root, skipping the test when it is absent.
func corpusDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join("..", "..", "shared", "corpus", "ort-fusion")
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("corpus not found at %s (CI places shared/ beside the clone): %v", dir, err)
	}
	return dir
}

func loadModel(t *testing.T, path string) *onnxpb.ModelProto {
	t.Helper()
	m, err := onnx.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// needORT skips when the onnxruntime library is missing.
func needORT(t *testing.T) {
	t.Helper()
	if err := infer.ORTAvailable(); err != nil {
		t.Skipf("onnxruntime not available (install it with scripts/setup.sh): %v", err)
	}
}

// feeds makes inputs for a session: symbolic dims become dim (batch 2 for
// the first axis), integer inputs hold ids 0/1 (masks all ones, or with the
// last pad positions of the last row zero), floats are N(0,1).
func feeds(t *testing.T, vals []infer.Value, seq, pad int, seed uint64) map[string]*onnx.Tensor {
	return feedsOpt(t, vals, seq, pad, seed, false)
}

// encodeWith returns a function that converts m with to and the options
// it is given, and returns the converted model's bytes.
func encodeWith[O any](t *testing.T, m *onnxpb.ModelProto, to func(*onnxpb.ModelProto, O) (*onnxpb.ModelProto, *Report, error)) func(O) []byte {
	return func(o O) []byte {
		t.Helper()
		out, _, err := to(m, o)
		if err != nil {
			t.Fatal(err)
		}
		data, err := onnx.Encode(out)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
}

// modelFeeds is feedsOpt over the inputs onnxruntime reports for m.
func modelFeeds(t *testing.T, m *onnxpb.ModelProto, seq, pad int, seed uint64, ones bool) map[string]*onnx.Tensor {
	t.Helper()
	s, err := infer.NewORTSession(m, infer.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	return feedsOpt(t, s.Inputs(), seq, pad, seed, ones)
}

// feedsOpt is feeds; with ones, every integer input is 1 (no padding
// anywhere, whatever the mask input is called).
func feedsOpt(t *testing.T, vals []infer.Value, seq, pad int, seed uint64, ones bool) map[string]*onnx.Tensor {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 7))
	out := map[string]*onnx.Tensor{}
	for _, v := range vals {
		shape := make([]int, len(v.Shape))
		for i, d := range v.Shape {
			switch {
			case d.Value > 0:
				shape[i] = int(d.Value)
			case i == 0:
				shape[i] = 2
			default:
				shape[i] = seq
			}
		}
		n := onnx.NumElements(shape)
		isMask := strings.Contains(strings.ToLower(v.Name), "mask")
		maskVal := func(i int) int64 {
			if ones {
				return 1
			}
			if !isMask {
				return int64(r.IntN(2))
			}
			if len(shape) == 2 && i/shape[1] == shape[0]-1 && i%shape[1] >= shape[1]-pad {
				return 0
			}
			return 1
		}
		switch v.DType {
		case onnx.Float:
			d := make([]float32, n)
			for i := range d {
				d[i] = float32(r.NormFloat64())
				if isMask {
					d[i] = float32(maskVal(i))
				}
			}
			out[v.Name] = onnx.NewFloat(shape, d)
		case onnx.Int64:
			d := make([]int64, n)
			for i := range d {
				d[i] = maskVal(i)
			}
			out[v.Name] = onnx.NewInt64(shape, d)
		case onnx.Int32:
			d := make([]int32, n)
			for i := range d {
				d[i] = int32(maskVal(i))
			}
			out[v.Name] = &onnx.Tensor{DType: onnx.Int32, Shape: shape, Data: d}
		default:
			t.Fatalf("input %s: type %s not handled by the test", v.Name, onnx.TypeName(v.DType))
		}
	}
	return out
}

func runORT(t *testing.T, m *onnxpb.ModelProto, in map[string]*onnx.Tensor) map[string]*onnx.Tensor {
	t.Helper()
	s, err := infer.NewORTSession(m, infer.Options{Threads: 1})
	if err != nil {
		t.Fatalf("onnxruntime session: %v", err)
	}
	defer s.Close()
	out, err := s.Run(in)
	if err != nil {
		t.Fatalf("onnxruntime run: %v", err)
	}
	return out
}
