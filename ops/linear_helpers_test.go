package ops_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/infer/infertest"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
	"google.golang.org/protobuf/proto"
)

// randTensor returns a float32 tensor with N(0, sigma²) entries (finetune's
// tests keep their own: test helpers do not cross packages).
func randTensor(rng *rand.Rand, sigma float64, shape ...int) *onnx.Tensor {
	d := make([]float32, onnx.NumElements(shape))
	for i := range d {
		d[i] = float32(rng.NormFloat64() * sigma)
	}
	return onnx.NewFloat(shape, d)
}

// padBias returns a [B,1,1,S] bias with the last pad[b] keys of batch b
// set to masked.
func padBias(s int, masked float32, pad ...int) *onnx.Tensor {
	d := make([]float32, len(pad)*s)
	for b, p := range pad {
		for j := s - p; j < s; j++ {
			d[b*s+j] = masked
		}
	}
	return onnx.NewFloat([]int{len(pad), 1, 1, s}, d)
}

// exactAttention computes softmax(scale·Q·Kᵀ + bias)·V in float64.
func exactAttention(q, k, v, bias *onnx.Tensor, scale float64) []float64 {
	b, h, sq, d := q.Shape[0], q.Shape[1], q.Shape[2], q.Shape[3]
	sk, dv := k.Shape[2], v.Shape[3]
	qd, kd, vd := q.Floats(), k.Floats(), v.Floats()
	out := make([]float64, b*h*sq*dv)
	p := make([]float64, sk)
	for bh := 0; bh < b*h; bh++ {
		bi := bh / h
		for i := 0; i < sq; i++ {
			for j := 0; j < sk; j++ {
				var dot float64
				for c := 0; c < d; c++ {
					dot += float64(qd[(bh*sq+i)*d+c]) * float64(kd[(bh*sk+j)*d+c])
				}
				p[j] = scale * dot
				if bias != nil {
					bb := bias.Floats()
					bs := bias.Shape[3]
					row := 0
					if bias.Shape[0] > 1 {
						row = bi
					}
					jj := j
					if bs == 1 {
						jj = 0
					}
					p[j] += float64(bb[row*bs+jj])
				}
			}
			softmaxMix(out[(bh*sq+i)*dv:(bh*sq+i+1)*dv], p, func(j, c int) float64 { return float64(vd[(bh*sk+j)*dv+c]) })
		}
	}
	return out
}

// softmaxMix adds Σ_j softmax(l)_j·val(j, c) to out[c] in float64, l
// overwritten. Kept apart from the softmaxes of features/balance.go,
// finetune/linformer.go and cmd/internal/featsweep: the references stay
// independent of the code they check.
func softmaxMix(out, l []float64, val func(j, c int) float64) {
	top := math.Inf(-1)
	for _, x := range l {
		top = math.Max(top, x)
	}
	var sum float64
	for j := range l {
		l[j] = math.Exp(l[j] - top)
		sum += l[j]
	}
	for j := range l {
		w := l[j] / sum
		for c := range out {
			out[c] += w * val(j, c)
		}
	}
}

// maxAbs returns max |x|.
func maxAbs(x []float32) float64 {
	var m float64
	for _, v := range x {
		m = math.Max(m, math.Abs(float64(v)))
	}
	return m
}

// maxDiff returns max |a − b| and fails on NaN or Inf in a.
func maxDiff(t *testing.T, a []float32, b []float64) float64 {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("length %d vs %d", len(a), len(b))
	}
	var m float64
	for i := range a {
		if math.IsNaN(float64(a[i])) || math.IsInf(float64(a[i]), 0) {
			t.Fatalf("non-finite value %v at %d", a[i], i)
		}
		// A NaN reference would make every comparison below false, so the
		// check could not fail: refuse it.
		if math.IsNaN(b[i]) || math.IsInf(b[i], 0) {
			t.Fatalf("non-finite reference value %v at %d", b[i], i)
		}
		m = math.Max(m, math.Abs(float64(a[i])-b[i]))
	}
	return m
}

func widen(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

// requireORT skips the test when onnxruntime is not installed.
func requireORT(t *testing.T) {
	t.Helper()
	if err := infer.ORTAvailable(); err != nil {
		t.Skipf("onnxruntime not available (install it with scripts/setup.sh): %v", err)
	}
}

// oneNodeModel builds a model whose graph is node, with the given float
// inputs (rank-4 or rank-3, all dims symbolic) and one output "out", the
// function fn attached, at default-domain opset.
func oneNodeModel(t *testing.T, node *onnxpb.NodeProto, fn *onnxpb.FunctionProto, opset int64, inputs map[string]*onnx.Tensor) *onnxpb.ModelProto {
	t.Helper()
	g := &onnxpb.GraphProto{Name: proto.String("one_node"), Node: []*onnxpb.NodeProto{node}}
	seen := map[string]bool{}
	for _, name := range node.Input {
		if seen[name] || name == "" { // "": an absent optional input
			continue
		}
		seen[name] = true
		in := inputs[name]
		dims := make([]onnx.Dim, len(in.Shape))
		for i := range dims {
			dims[i] = onnx.Dim{Value: -1, Param: name + "_" + string(rune('a'+i))}
		}
		g.Input = append(g.Input, onnx.MakeValueInfo(name, onnx.Float, dims))
	}
	g.Output = []*onnxpb.ValueInfoProto{onnx.MakeValueInfo("out", onnx.Float, nil)}
	m := &onnxpb.ModelProto{
		IrVersion:   proto.Int64(10),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(opset)}},
		Graph:       g,
	}
	if err := ops.ImportFunction(m, fn); err != nil {
		t.Fatal(err)
	}
	// Round-trip through the wire format, as a converted file would be.
	data, err := onnx.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	m, err = onnx.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// runORT runs the model in onnxruntime and returns "out".
func runORT(t *testing.T, m *onnxpb.ModelProto, inputs map[string]*onnx.Tensor) *onnx.Tensor {
	t.Helper()
	s, err := infer.NewORTSession(m, infer.Options{Threads: 1})
	return runOut(t, "onnxruntime", s, err, inputs)
}

// runOut runs an open session (err from opening it) on the inputs it
// declares and returns its output "out"; what names the backend in
// failures.
func runOut(t *testing.T, what string, s infer.Session, err error, inputs map[string]*onnx.Tensor) *onnx.Tensor {
	t.Helper()
	if err != nil {
		t.Fatalf("%s session: %v", what, err)
	}
	defer s.Close()
	feed := map[string]*onnx.Tensor{}
	for _, v := range s.Inputs() {
		feed[v.Name] = inputs[v.Name]
	}
	res, err := s.Run(feed, "out")
	if err != nil {
		t.Fatalf("%s run: %v", what, err)
	}
	return res["out"]
}

// checkClose requires max |got − want| ≤ tol·(output scale max |want|).
func checkClose(t *testing.T, what string, got, want *onnx.Tensor, tol float64) float64 {
	t.Helper()
	if len(got.Shape) != len(want.Shape) {
		t.Fatalf("%s: shape %v, want %v", what, got.Shape, want.Shape)
	}
	for i := range got.Shape {
		if got.Shape[i] != want.Shape[i] {
			t.Fatalf("%s: shape %v, want %v", what, got.Shape, want.Shape)
		}
	}
	scale := math.Max(1e-3, maxAbs(want.Floats()))
	d := maxDiff(t, got.Floats(), widen(want.Floats()))
	if d > tol*scale {
		t.Errorf("%s: max abs error %.3g > %.3g (output scale %.3g)", what, d, tol*scale, scale)
	}
	return d / scale
}

// poisonPadding sets to NaN every row of x ([B,H,S,D]) at positions s and
// beyond: padded keys and values that must never be read.
func poisonPadding(x *onnx.Tensor, s int) {
	n, d := x.Shape[2], x.Shape[3]
	f := x.Floats()
	for i := range f {
		if (i/d)%n >= s {
			f[i] = float32(math.NaN())
		}
	}
}

// checkPaddedBody runs fn as a one-node model at opset 17 and checks its
// outputs at the first s positions against short; without onnxruntime it
// only logs.
func checkPaddedBody(t *testing.T, what string, node *onnxpb.NodeProto, fn *onnxpb.FunctionProto, in map[string]*onnx.Tensor, s int, short *onnx.Tensor, tol float64) {
	t.Helper()
	if !infertest.ORT(t) { // logs the part left out, or fails where CI requires onnxruntime
		return
	}
	got := runORT(t, oneNodeModel(t, node, fn, 17, in), in)
	checkClose(t, what+": padded vs unpadded (function body)", prefix(got, s), short, tol)
}

// randQKV returns Q and K [B,H,S,D] with N(0, sigma²) entries and V
// [B,H,S,Dv] with N(0, 1) entries, drawn in that order.
func randQKV(rng *rand.Rand, sigma float64, b, h, s, d, dv int) (q, k, v *onnx.Tensor) {
	q = randTensor(rng, sigma, b, h, s, d)
	k = randTensor(rng, sigma, b, h, s, d)
	v = randTensor(rng, 1, b, h, s, dv)
	return q, k, v
}

// paramHeads is the leading dim of a per-head parameter: h, or 1 when
// the heads share it.
func paramHeads(perHead bool, h int) int {
	if perHead {
		return h
	}
	return 1
}

// sharedSession returns a check that runs inputs on one onnxruntime
// session, opened on the first call for node and fn at opset 17, and
// compares "out" with want; what names the run in failures.
func sharedSession(t *testing.T, node *onnxpb.NodeProto, fn *onnxpb.FunctionProto) func(what string, in map[string]*onnx.Tensor, want *onnx.Tensor) {
	var sess infer.Session
	t.Cleanup(func() {
		if sess != nil {
			sess.Close()
		}
	})
	return func(what string, in map[string]*onnx.Tensor, want *onnx.Tensor) {
		t.Helper()
		if sess == nil {
			var err error
			sess, err = infer.NewORTSession(oneNodeModel(t, node, fn, 17, in), infer.Options{Threads: 1})
			if err != nil {
				t.Fatal(err)
			}
		}
		res, err := sess.Run(in, "out")
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		checkClose(t, what, res["out"], want, 1e-4)
	}
}
