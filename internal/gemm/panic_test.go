package gemm

import "testing"

// An operand shorter than its dimensions say panics; with several worker
// goroutines the panic must reach the caller (which can recover it), not
// kill the process from a worker.
func TestWorkerPanicReachesCaller(t *testing.T) {
	const m, n, k = 256, 256, 64
	a := make([]float32, m*k)
	b := make([]float32, k*n)
	c := make([]float32, m*n/2) // too short
	defer func() {
		if r := recover(); r == nil {
			t.Error("a too-short C did not panic in the caller")
		}
	}()
	Sgemm(false, false, m, n, k, 1, a, k, b, n, 0, c, n, 4)
}
