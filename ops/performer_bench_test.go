//go:build unix

package ops_test

import (
	"math/rand/v2"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/ops"
	"google.golang.org/protobuf/proto"
)

// BenchmarkPerformerFunctionORT times the PerformerAttention function body
// alone: a one-node model (the node and its model-local function) run by
// onnxruntime at BERT-base head shapes, B = 1, H = 12, n = 4096, D = Dv =
// 64, M = 256, the last 96 keys padded. Besides ns/op (wall) it reports
// cpu-ns/op, the process's user + system CPU time per run (onnxruntime's
// threads included). Threads: $LINEARIZE_BENCH_THREADS (default 2);
// length: $LINEARIZE_BENCH_N (default 4096).
//
//	go test ./ops -run '^$' -bench BenchmarkPerformerFunctionORT -benchtime 20x -count 5
//
// The file uses only API that predates the mixture form of the body, so
// it can be copied into an older checkout to time the earlier body.
func BenchmarkPerformerFunctionORT(b *testing.B) {
	if err := infer.ORTAvailable(); err != nil {
		b.Skipf("onnxruntime not available: %v", err)
	}
	threads := 2
	if s := os.Getenv("LINEARIZE_BENCH_THREADS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("LINEARIZE_BENCH_THREADS=%q: want a positive integer", s)
		}
		threads = n
	}
	const B, H, d, m, pad = 1, 12, 64, 256, 96
	n := 4096
	if s := os.Getenv("LINEARIZE_BENCH_N"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v <= pad {
			b.Fatalf("LINEARIZE_BENCH_N=%q: want an integer above %d", s, pad)
		}
		n = v
	}
	rng := rand.New(rand.NewPCG(13, 4096))
	q := randTensor(rng, 1, B, H, n, d)
	k := randTensor(rng, 1, B, H, n, d)
	v := randTensor(rng, 1, B, H, n, d)
	omega := randTensor(rng, 1, 1, m, d)
	bias := onnx.NewFloat([]int{B, 1, 1, n}, make([]float32, B*n))
	for j := n - pad; j < n; j++ {
		bias.Floats()[j] = -1e4
	}
	// Identity balance (orthogonal, so valid for every feature map) and
	// a constant DERF parameter: the timing does not depend on the values.
	eye := make([]float32, d*d)
	for i := 0; i < d; i++ {
		eye[i*d+i] = 1
	}
	balance := onnx.NewFloat([]int{1, d, d}, eye)
	derfA := make([]float32, H*d)
	for i := range derfA {
		derfA[i] = -0.1
	}
	for _, c := range []struct {
		name string
		v    ops.PerformerVariant
	}{
		{"favor+", ops.PerformerVariant{}},
		{"favor+center", ops.PerformerVariant{Center: true}},
		{"favor++", ops.PerformerVariant{Features: ops.FeaturesFavorPP}},
		{"aderf-center", ops.PerformerVariant{Center: true, Balance: true, Features: ops.FeaturesADERF}},
		{"trig", ops.PerformerVariant{Kernel: ops.KernelTrig}},
	} {
		b.Run(c.name, func(b *testing.B) {
			fn, err := ops.PerformerFunctionFor(c.v, 17)
			if err != nil {
				b.Fatal(err)
			}
			names := []string{"Q", "K", "V", "Omega", "key_bias"}
			feed := map[string]*onnx.Tensor{"Q": q, "K": k, "V": v, "Omega": omega, "key_bias": bias}
			derf := c.v.Features == ops.FeaturesSDERF || c.v.Features == ops.FeaturesADERF
			if c.v.Balance {
				names = append(names, "balance_q", "balance_k")
				feed["balance_q"], feed["balance_k"] = balance, balance
			}
			if derf {
				names = append(names, "derf_a")
				feed["derf_a"] = onnx.NewFloat([]int{H, 1, d}, derfA)
			}
			attrs := ops.PerformerAttrs{Scale: 0.125, Kernel: c.v.Kernel, Center: c.v.Center, Features: c.v.Features}
			node := ops.NewPerformerNode("perf", names, "out", attrs)
			model, err := benchModel(node, fn, feed)
			if err != nil {
				b.Fatal(err)
			}
			s, err := infer.NewORTSession(model, infer.Options{Threads: threads})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			if _, err := s.Run(feed, "out"); err != nil { // warm-up
				b.Fatal(err)
			}
			b.ResetTimer()
			cpu0 := cpuTime()
			for range b.N {
				if _, err := s.Run(feed, "out"); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuTime returns the process's user + system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchModel is oneNodeModel for benchmarks: node as the graph, its inputs
// with symbolic dims, output "out", fn attached, opset 17. Kept apart from
// oneNodeModel so that this file can be copied alone into older checkouts.
func benchModel(node *onnxpb.NodeProto, fn *onnxpb.FunctionProto, inputs map[string]*onnx.Tensor) (*onnxpb.ModelProto, error) {
	g := &onnxpb.GraphProto{Name: proto.String("one_node"), Node: []*onnxpb.NodeProto{node}}
	for _, name := range node.Input {
		dims := make([]onnx.Dim, len(inputs[name].Shape))
		for i := range dims {
			dims[i] = onnx.Dim{Value: -1, Param: name + "_" + string(rune('a'+i))}
		}
		g.Input = append(g.Input, onnx.MakeValueInfo(name, onnx.Float, dims))
	}
	g.Output = []*onnxpb.ValueInfoProto{onnx.MakeValueInfo("out", onnx.Float, nil)}
	m := &onnxpb.ModelProto{
		IrVersion:   proto.Int64(10),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(17)}},
		Graph:       g,
	}
	if err := ops.ImportFunction(m, fn); err != nil {
		return nil, err
	}
	return m, nil
}
