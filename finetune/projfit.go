package finetune

import (
	"sync"

	"github.com/linearize/linearize/onnx"
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
)

// This file holds what the fits of projections feeding an attention op
// share: gathering mini-batch rows, projecting them, the per-(row, head)
// parallel loop, and the projection gradients.

// allRows returns rows, or every batch row 0..n-1 when rows is nil.
func allRows(rows []int, n int) []int {
	if rows != nil {
		return rows
	}
	rows = make([]int, n)
	for i := range rows {
		rows[i] = i
	}
	return rows
}

// projectRows gathers the batch rows rows of x ([B, s, dm], row-major) and
// returns them ([len(rows)·s, dm]) and their projection xr·w + b
// ([len(rows)·s, out]).
func projectRows(rows []int, x, w, b []float64, s, dm, out int) (xr, y []float64) {
	nr := len(rows)
	xr = make([]float64, nr*s*dm)
	for r, bi := range rows {
		copy(xr[r*s*dm:(r+1)*s*dm], x[bi*s*dm:(bi+1)*s*dm])
	}
	y = make([]float64, nr*s*out)
	blas64.Implementation().Dgemm(blas.NoTrans, blas.NoTrans, nr*s, out, dm, 1, xr, dm, w, out, 0, y, out)
	for i := 0; i < nr*s; i++ {
		for c := 0; c < out; c++ {
			y[i*out+c] += b[c]
		}
	}
	return xr, y
}

// addProjectionGrads adds the gradients of a projection y = xr·w + b with
// respect to w (xrᵀ·dy) and b (the column sums of dy) into gw and gb.
func addProjectionGrads(xr, dy []float64, rows, dm, out int, gw, gb []float64) {
	blas64.Implementation().Dgemm(blas.Trans, blas.NoTrans, dm, out, rows, 1, xr, dm, dy, out, 1, gw, out)
	for i := 0; i < rows; i++ {
		for c := 0; c < out; c++ {
			gb[c] += dy[i*out+c]
		}
	}
}

// rowsNorm is the sum of the target norms of the selected rows.
func rowsNorm(rowNorm []float64, rows []int) float64 {
	var norm float64
	for _, bi := range rows {
		norm += rowNorm[bi]
	}
	return norm
}

// sumHeads runs fn for every (selected row r, head) pair on two goroutines
// (fn writes only the gradient columns of its head) and returns the sum of
// its results. newWorker gives each goroutine its own scratch state.
func sumHeads[W any](nr, h int, newWorker func() W, fn func(w W, r, hi int) float64) float64 {
	losses := make([]float64, nr*h)
	var wg sync.WaitGroup
	work := make(chan int)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := newWorker()
			for job := range work {
				losses[job] = fn(w, job/h, job%h)
			}
		}()
	}
	for job := range nr * h {
		work <- job
	}
	close(work)
	wg.Wait()
	var loss float64
	for _, l := range losses {
		loss += l
	}
	return loss
}

// to32 converts a float64 parameter back to a float32 tensor of shape.
func to32(x []float64, shape []int) *onnx.Tensor {
	d := make([]float32, len(x))
	for i, v := range x {
		d[i] = float32(v)
	}
	return onnx.NewFloat(append([]int(nil), shape...), d)
}
