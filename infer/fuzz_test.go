package infer_test

import (
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/models"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
	"google.golang.org/protobuf/proto"
)

var fuzzSessions struct {
	once sync.Once
	s    []infer.Session
	err  error
}

// nativeFuzzSessions opens native sessions of a one-layer BERT and of its
// Performer and Linformer conversions.
func nativeFuzzSessions(tb testing.TB) []infer.Session {
	fuzzSessions.once.Do(func() {
		m, err := models.BERT(models.Config{Vocab: 20, Hidden: 8, Heads: 2, Layers: 1, Intermediate: 16,
			MaxPositions: 16, TypeVocab: 2, Opset: 17, Seed: 3})
		if err != nil {
			fuzzSessions.err = err
			return
		}
		p, _, err := convert.ToPerformer(m, convert.PerformerOptions{Features: 4, Seed: 1, FeatureMap: ops.FeaturesFavorPlus, Center: convert.CenterOff})
		if err != nil {
			fuzzSessions.err = err
			return
		}
		l, _, err := convert.ToLinformer(m, convert.LinformerOptions{Init: "gaussian", K: 4, MaxLen: 16, Seed: 1})
		if err != nil {
			fuzzSessions.err = err
			return
		}
		for _, x := range []*onnxpb.ModelProto{m, p, l} {
			s, err := infer.NewNativeSession(x, infer.Options{Threads: 1})
			if err != nil {
				fuzzSessions.err = err
				return
			}
			fuzzSessions.s = append(fuzzSessions.s, s)
		}
	})
	if fuzzSessions.err != nil {
		tb.Fatal(fuzzSessions.err)
	}
	return fuzzSessions.s
}

func zeroOne(x *onnx.Tensor) bool {
	d, ok := x.Data.([]int64)
	if !ok {
		return false
	}
	for _, v := range d {
		if v != 0 && v != 1 {
			return false
		}
	}
	return true
}

// FuzzNativeInputs feeds a decoded, arbitrary TensorProto as one input of a
// BERT and its linear-attention conversions, the others being valid. The
// native backend must refuse it with an error or run; with 0/1 values the
// outputs must be finite; a kernel panic (recovered by the session) is a
// failure.
func FuzzNativeInputs(f *testing.F) {
	add := func(which uint8, x *onnx.Tensor) {
		tp, err := onnx.EncodeTensor("x", x)
		if err != nil {
			f.Fatal(err)
		}
		b, _ := proto.Marshal(tp)
		f.Add(which, b)
	}
	add(0, onnx.NewInt64([]int{1, 4}, []int64{1, 5, 7, 2}))
	add(1, onnx.NewInt64([]int{1, 4}, []int64{1, 1, 0, 0}))
	add(2, onnx.NewInt64([]int{1, 4}, []int64{0, 0, 1, 1}))
	add(4, onnx.NewInt64([]int{1, 4}, []int64{0, 0, 0, 0}))
	add(3, onnx.NewInt64([]int{2, 3}, []int64{1, 2, 3, 4, 5, 6}))
	add(6, onnx.NewInt64([]int{1, 17}, make([]int64, 17)))
	add(0, onnx.NewInt64([]int{1, 2}, []int64{-1, 20}))
	add(1, onnx.NewFloat([]int{1, 4}, []float32{1, 1, 1, 1}))
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		tp := &onnxpb.TensorProto{}
		if proto.Unmarshal(data, tp) != nil {
			return
		}
		x, err := onnx.DecodeTensor(tp)
		if err != nil || x.Len() > 1<<12 {
			return
		}
		sessions := nativeFuzzSessions(t)
		s := sessions[int(which/3)%len(sessions)]
		in := s.Inputs()
		feed := map[string]*onnx.Tensor{}
		for _, v := range in {
			feed[v.Name] = onnx.NewInt64([]int{1, 4}, []int64{1, 1, 1, 1})
		}
		feed[in[int(which)%len(in)].Name] = x
		out, err := s.Run(feed)
		if err != nil {
			if strings.Contains(err.Error(), "panicked") {
				t.Fatalf("input %s = %v: %v", in[int(which)%len(in)].Name, x, err)
			}
			return
		}
		// Outputs must be finite for 0/1 values (valid ids, masks and
		// token types). Other mask values are outside the model's contract:
		// HF's (1−mask)·finfo.min overflows to +Inf for a mask of 2, in
		// onnxruntime as well.
		if !zeroOne(x) {
			return
		}
		for name, y := range out {
			d, ok := y.Data.([]float32)
			if !ok {
				continue
			}
			for _, v := range d {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
					t.Fatalf("input %s = %v: output %s holds %v", in[int(which)%len(in)].Name, x, name, v)
				}
			}
		}
	})
}
