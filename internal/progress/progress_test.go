package progress

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// fakeClock advances only when told.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

// fakeReporter is a Reporter started at start on a fakeClock, writing to
// the returned builder.
func fakeReporter(start time.Time, label string, total int) (*Reporter, *fakeClock, *strings.Builder) {
	clock := &fakeClock{t: start}
	b := &strings.Builder{}
	return newWithClock(b, label, total, clock.now), clock, b
}

func TestReporterETA(t *testing.T) {
	r, clock, b := fakeReporter(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), "fit: layer", 4)
	clock.t = clock.t.Add(30 * time.Second)
	r.Note("fitting %s", "attn_0")
	r.Step("rel err %.2f → %.2f", 0.5, 0.25)
	clock.t = clock.t.Add(90 * time.Second)
	r.Step("") // 2 of 4 done in 2m: 2m left
	clock.t = clock.t.Add(2*time.Hour - 2*time.Minute + 3*time.Second)
	r.Step("third")
	r.Step("last")
	want := "" +
		"fit: layer 1/4: fitting attn_0 (30s elapsed)\n" +
		"fit: layer 1/4: rel err 0.50 → 0.25 (30s elapsed, ETA 1m30s)\n" +
		"fit: layer 2/4 (2m00s elapsed, ETA 2m00s)\n" +
		"fit: layer 3/4: third (2h00m elapsed, ETA 40m01s)\n" +
		"fit: layer 4/4: last (2h00m elapsed, ETA 0.0s)\n"
	if got := b.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// Dropped steps leave the total and the estimate.
func TestReporterDrop(t *testing.T) {
	r, clock, b := fakeReporter(time.Unix(0, 0), "run", 6)
	clock.t = clock.t.Add(10 * time.Second)
	r.Step("skipped")
	r.Drop(2) // its other two rounds
	expectOutput(t, b, "run 1/6: skipped (10s elapsed, ETA 50s)\n")
	r.Step("ok")
	expectOutput(t, b, "run 2/4: ok (10s elapsed, ETA 10s)\n")
	r.Drop(10) // never below the steps done
	r.Note("n")
	expectOutput(t, b, "run 3/3: n (10s elapsed)\n")
}

// expectOutput checks what b holds, then empties it.
func expectOutput(t *testing.T, b *strings.Builder, want string) {
	t.Helper()
	if got := b.String(); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	b.Reset()
}

func TestReporterUnknownTotalAndNil(t *testing.T) {
	r, clock, b := fakeReporter(time.Unix(0, 0), "trial", 0)
	clock.t = clock.t.Add(1500 * time.Millisecond)
	r.Step("done")
	expectOutput(t, b, "trial 1: done (1.5s elapsed)\n")
	var silent *Reporter = New(nil, "x", 3)
	if silent != nil {
		t.Fatal("New(nil, ...) is not nil")
	}
	silent.Step("nothing")
	silent.Note("nothing")
}

func TestDuration(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "0.0s"},
		{0, "0.0s"},
		{420 * time.Millisecond, "0.4s"},
		{9940 * time.Millisecond, "9.9s"},
		{9960 * time.Millisecond, "10s"},
		{42 * time.Second, "42s"},
		{59600 * time.Millisecond, "1m00s"},
		{185 * time.Second, "3m05s"},
		{time.Hour - 200*time.Millisecond, "1h00m"},
		{time.Hour + 2*time.Minute + 29*time.Second, "1h02m"},
		{26 * time.Hour, "26h00m"},
	} {
		if got := Duration(c.d); got != c.want {
			t.Errorf("Duration(%v) = %q, want %q", c.d, got, c.want)
		}
	}
}

// A throttled reporter writes its first steps, then a line every period,
// and the last step's.
func TestReporterThrottle(t *testing.T) {
	r, clock, b := fakeReporter(time.Unix(0, 0), "embed: batch", 100)
	r.Throttle(2, 10*time.Second)
	var lines []string
	for i := 1; i <= 100; i++ {
		clock.t = clock.t.Add(time.Second)
		r.Step("%d", i)
	}
	for _, l := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
		lines = append(lines, l[:len("embed: batch")+strings.Index(l[len("embed: batch"):], ":")])
	}
	// Steps 1 and 2, then 12, 22, …, 92 (10 s after the line before),
	// and 100.
	want := []string{"embed: batch 1/100", "embed: batch 2/100"}
	for i := 12; i <= 92; i += 10 {
		want = append(want, "embed: batch "+strconv.Itoa(i)+"/100")
	}
	want = append(want, "embed: batch 100/100")
	if strings.Join(lines, ",") != strings.Join(want, ",") {
		t.Errorf("lines %v, want %v", lines, want)
	}
	// Unthrottled and nil reporters are unchanged.
	var nilR *Reporter
	if nilR.Throttle(1, time.Second) != nil {
		t.Error("nil reporter throttled into a reporter")
	}
}
