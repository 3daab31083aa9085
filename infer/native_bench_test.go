package infer

import (
	"fmt"
	"testing"
	"time"

	"github.com/linearize/linearize/models"
	"github.com/linearize/linearize/onnx"
)

// BenchmarkBackends times the native backend against onnxruntime on a
// BERT-base-width model (hidden 768, 12 heads, FFN 3072, 2 layers) at
// sequence lengths 128 and 512, batch 1, 2 threads. Each iteration runs
// both backends once, in turn; the metrics are the mean milliseconds per
// run of each and their ratio (the target: ratio ≤ 3), and the
// ratio of process CPU time, which depends far less on other load on the
// machine (onnxruntime's spinning worker threads count as CPU time).
//
//	go test ./infer -run XXX -bench Backends -benchtime 5x
func BenchmarkBackends(b *testing.B) {
	if err := ORTAvailable(); err != nil {
		b.Skipf("onnxruntime unavailable (run scripts/setup.sh): %v", err)
	}
	m, err := models.BERT(models.BaseConfig(2, 512))
	if err != nil {
		b.Fatal(err)
	}
	const threads = 2
	nat, err := NewNativeSession(m, Options{Threads: threads})
	if err != nil {
		b.Fatal(err)
	}
	ref, err := NewORTSession(m, Options{Threads: threads})
	if err != nil {
		b.Fatal(err)
	}
	defer ref.Close()
	for _, seq := range []int{128, 512} {
		feeds := bertInputs(1, seq, 30522, 1)
		diffs, err := CompareSessions(nat, ref, feeds)
		if err != nil {
			b.Fatal(err)
		}
		for _, d := range diffs {
			if !d.OK(1e-4) {
				b.Fatalf("seq %d: output %s: backends disagree: %v", seq, d.Name, d.Diff)
			}
		}
		b.Run(fmt.Sprintf("seq=%d", seq), func(b *testing.B) {
			var tn, to, cn, co time.Duration
			for _, s := range []Session{nat, ref} { // warm up
				if _, err := s.Run(feeds); err != nil {
					b.Fatal(err)
				}
			}
			for b.Loop() {
				c0 := processCPU()
				tn += timeRun(b, nat, feeds)
				c1 := processCPU()
				to += timeRun(b, ref, feeds)
				cn += c1 - c0
				co += processCPU() - c1
			}
			n := float64(b.N)
			b.ReportMetric(float64(tn.Milliseconds())/n, "native-ms")
			b.ReportMetric(float64(to.Milliseconds())/n, "ort-ms")
			b.ReportMetric(float64(tn)/float64(to), "ratio")
			if co > 0 {
				b.ReportMetric(float64(cn)/float64(co), "cpu-ratio")
			}
		})
	}
}

func timeRun(b *testing.B, s Session, feeds map[string]*onnx.Tensor) time.Duration {
	t0 := time.Now()
	if _, err := s.Run(feeds); err != nil {
		b.Fatal(err)
	}
	return time.Since(t0)
}
