package progress

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// Reporter writes one line per step of a known number of steps. Its
// methods may be called from several goroutines; a nil *Reporter is
// silent.
type Reporter struct {
	mu    sync.Mutex
	w     io.Writer
	label string
	total int
	done  int
	start time.Time
	now   func() time.Time
	// Throttle's: steps past the first are written when every has
	// passed since the last line written (last), and the last step.
	first int
	every time.Duration
	last  time.Time
}

// Throttle makes r write the lines of its first first steps and then one
// a step only when every has passed since the last line it wrote (and
// the last step's, when the total is known): thousands of quick steps,
// such as the batches of a large corpus, then make a line every few
// seconds. It returns r (nil stays nil).
func (r *Reporter) Throttle(first int, every time.Duration) *Reporter {
	if r != nil {
		r.first, r.every = first, every
	}
	return r
}

// New returns a Reporter of total steps (0 or less: unknown) that writes to
// w, every line starting with label ("finetune: layer"). The clock starts
// now. A nil w gives a nil Reporter.
func New(w io.Writer, label string, total int) *Reporter {
	return newWithClock(w, label, total, time.Now)
}

func newWithClock(w io.Writer, label string, total int, now func() time.Time) *Reporter {
	if w == nil {
		return nil
	}
	return &Reporter{w: w, label: label, total: total, start: now(), now: now}
}

// Step counts one more step done and writes
//
//	LABEL i/N: MESSAGE (ELAPSED elapsed, ETA LEFT)
//
// the message from format and args (omitted when format is empty), and
// the time left estimated from the mean time per step so far. With an
// unknown total the line is "LABEL i: MESSAGE (ELAPSED elapsed)".
func (r *Reporter) Step(format string, args ...any) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done++
	now := r.now()
	if r.every > 0 && r.done > r.first && now.Sub(r.last) < r.every && (r.total <= 0 || r.done < r.total) {
		return
	}
	r.last = now
	elapsed := now.Sub(r.start)
	timing := Duration(elapsed) + " elapsed"
	if r.total > 0 {
		left := time.Duration(float64(elapsed) * float64(max(r.total-r.done, 0)) / float64(r.done))
		timing += ", ETA " + Duration(left)
	}
	r.write(r.done, format, args, timing)
}

// Drop takes n steps that will not run (a skipped item's later rounds)
// out of the total, so that the estimate of the time left stays honest.
func (r *Reporter) Drop(n int) {
	if r == nil || r.total <= 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total = max(r.total-n, r.done)
}

// Note writes a line about the step under way (step i+1 after i done)
// without counting it:
//
//	LABEL i+1/N: MESSAGE (ELAPSED elapsed)
func (r *Reporter) Note(format string, args ...any) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.write(r.done+1, format, args, Duration(r.now().Sub(r.start))+" elapsed")
}

func (r *Reporter) write(step int, format string, args []any, timing string) {
	pos := fmt.Sprint(step)
	if r.total > 0 {
		pos = fmt.Sprintf("%d/%d", step, max(r.total, step))
	}
	if format == "" {
		fmt.Fprintf(r.w, "%s %s (%s)\n", r.label, pos, timing)
		return
	}
	fmt.Fprintf(r.w, "%s %s: %s (%s)\n", r.label, pos, fmt.Sprintf(format, args...), timing)
}

// Duration formats d for a progress line, as precisely as is useful:
// "0.4s", "9.9s", "42s", "3m05s", "1h02m".
func Duration(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	if d < 9950*time.Millisecond { // rounds to less than 10.0s
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	s := int((d + time.Second/2) / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	}
	m := (s + 30) / 60
	return fmt.Sprintf("%dh%02dm", m/60, m%60)
}
