package kernels

import (
	"fmt"
	"sync"
)

// The kernels' parallel loops, one implementation: a fixed set of worker
// goroutines takes items from a queue; a panic in any worker is kept and
// re-raised in the calling goroutine, where the native backend's recover
// turns it into an error naming the node (a panic in a worker goroutine
// would otherwise kill the process).

// ParallelWith runs work(i) for i in [0, n) on up to threads goroutines;
// each goroutine gets its own work function from newWorker (for per-worker
// scratch buffers). threads ≤ 1 or n ≤ 1 runs in the caller.
func ParallelWith(n, threads int, newWorker func() func(i int)) {
	if n <= 0 {
		return
	}
	if threads <= 1 || n == 1 {
		work := newWorker()
		for i := 0; i < n; i++ {
			work(i)
		}
		return
	}
	threads = min(threads, n)
	next := make(chan int, n)
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	var wp workerPanic
	for range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer wp.catch()
			work := newWorker()
			for i := range next {
				work(i)
			}
		}()
	}
	wg.Wait()
	wp.rethrow()
}

// Parallel runs fn(i) for i in [0, n) on up to threads goroutines.
func Parallel(n, threads int, fn func(i int)) {
	ParallelWith(n, threads, func() func(int) { return fn })
}

// parallelFor splits [0, n) into contiguous chunks of at least grain
// elements over up to threads goroutines and waits for them.
func parallelFor(n, threads, grain int, f func(lo, hi int)) {
	chunks := min(threads, n/max(grain, 1))
	if chunks <= 1 {
		f(0, n)
		return
	}
	Parallel(chunks, chunks, func(c int) { f(n*c/chunks, n*(c+1)/chunks) })
}

// workerPanic keeps the first panic of a worker goroutine so that the
// goroutine that started the workers can raise it again once they are all
// done: a panic left in a worker would kill the process, while in the
// caller's goroutine the native backend's recover turns it into an error
// naming the node.
type workerPanic struct {
	mu sync.Mutex
	v  any
}

// catch is deferred by a worker.
func (w *workerPanic) catch() {
	if r := recover(); r != nil {
		w.mu.Lock()
		if w.v == nil {
			w.v = fmt.Errorf("in a worker goroutine: %v", r)
		}
		w.mu.Unlock()
	}
}

// rethrow panics with the kept value, if any.
func (w *workerPanic) rethrow() {
	if w.v != nil {
		panic(w.v)
	}
}
