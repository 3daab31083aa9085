package benchrun

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/linearize/linearize/convert"
)

// bandResult builds a result of the original and Performer timed at ns,
// repeat times each, where Performer's true speedup is n/500 (so the true
// crossover is 500, and log speedup is linear in log n: interpolation is
// exact) and every time is multiplied by exp(noise·z), z standard normal.
func bandResult(ns []int, repeat int, noise float64, seed uint64) *Result {
	rng := rand.New(rand.NewPCG(seed, 1))
	r := &Result{Repeat: repeat}
	for _, n := range ns {
		for _, v := range []struct {
			form convert.Form
			ms   float64
		}{{convert.Original, 100}, {convert.Performer, 100 * 500 / float64(n)}} {
			m := Measurement{Variant: v.form, Length: n, Status: "ok"}
			for range repeat {
				m.TimesMS = append(m.TimesMS, v.ms*math.Exp(noise*rng.NormFloat64()))
			}
			m.MedianMS = median(m.TimesMS)
			r.Runs = append(r.Runs, m)
		}
	}
	r.Summarize()
	return r
}

func TestBand(t *testing.T) {
	ns := []int{256, 384, 512, 640, 768, 896, 1024}
	for _, tc := range []struct {
		name         string
		repeat       int
		noise        float64
		minLo, maxHi int // the band must lie inside [minLo, maxHi] and hold 500
	}{
		{"exact", 5, 0, 500, 500},
		{"2% noise, 15 repeats", 15, 0.02, 384, 640},
		{"5% noise, 15 repeats", 15, 0.05, 256, 896},
	} {
		r := bandResult(ns, tc.repeat, tc.noise, 7)
		b, ok := r.Band(convert.Performer, convert.Original)
		lo, hi := b.Lo, b.Hi
		if !ok {
			t.Fatalf("%s: no band", tc.name)
		}
		if lo > 500 || hi < 500 || lo < tc.minLo || hi > tc.maxHi {
			t.Errorf("%s: band %d–%d, want one holding 500 inside %d–%d", tc.name, lo, hi, tc.minLo, tc.maxHi)
		}
	}

	// More noise never narrows the band (same draws of z, scaled).
	width := func(noise float64) int {
		b, _ := bandResult(ns, 9, noise, 3).Band(convert.Performer, convert.Original)
		return b.Hi - b.Lo
	}
	if w1, w2 := width(0.01), width(0.04); w1 >= w2 {
		t.Errorf("band width %d at 1%% noise, %d at 4%%: want it to grow", w1, w2)
	}

	// Faster at every length: the band is the bound at the shortest.
	r := bandResult([]int{600, 700, 800}, 5, 0, 1)
	b, _ := r.Band(convert.Performer, convert.Original)
	if b.Lo != 600 || b.Hi != 600 {
		t.Errorf("faster everywhere: band %d–%d, want 600–600", b.Lo, b.Hi)
	}
	if got := b.String(); got != "90 % of resampled runs: ≤ 600" {
		t.Errorf("faster everywhere: %q", got)
	}
	// Slower at every length: Beyond.
	r = bandResult([]int{200, 300, 400}, 5, 0, 1)
	if b, _ := r.Band(convert.Performer, convert.Original); b.Lo != Beyond || b.Hi != Beyond {
		t.Errorf("slower everywhere: band %d–%d, want Beyond", b.Lo, b.Hi)
	}
	// Too few repeats to resample.
	if _, ok := bandResult(ns, 2, 0.02, 1).Band(convert.Performer, convert.Original); ok {
		t.Error("a band from 2 repeats")
	}
	// The same result gives the same band.
	b1, _ := bandResult(ns, 9, 0.05, 11).Band(convert.Performer, convert.Original)
	b2, _ := bandResult(ns, 9, 0.05, 11).Band(convert.Performer, convert.Original)
	if b1 != b2 {
		t.Errorf("band %+v then %+v from the same result", b1, b2)
	}
}

func TestWithin(t *testing.T) {
	const shortest, longest = 256, 1024
	for _, tc := range []struct {
		pred, lo, hi int
		want         bool
	}{
		{500, 400, 600, true},
		{780, 400, 600, true},  // 600·1.3 = 780
		{781, 400, 600, false}, // just past
		{308, 400, 600, true},  // 400/1.3 = 307.7
		{307, 400, 600, false},
		{100, shortest, 600, true}, // lo is the bound "≤ 256"
		{5000, 400, Beyond, true},
		{300, 400, Beyond, false},
		{788, Beyond, Beyond, true}, // past 1024: 1024/1.3 = 787.7
		{787, Beyond, Beyond, false},
		{0, 400, 600, false}, // no prediction
	} {
		b := Band{Lo: tc.lo, Hi: tc.hi, Shortest: shortest, Longest: longest}
		if got := b.Within(tc.pred, 1.3); got != tc.want {
			t.Errorf("Within(%d, %d–%d) = %v, want %v", tc.pred, tc.lo, tc.hi, got, tc.want)
		}
	}
}

// TestBandInTable: the bench table prints the band after the measured
// crossover and says whether the prediction lies within 30 % of it.
func TestBandInTable(t *testing.T) {
	r := bandResult([]int{256, 384, 512, 640, 768, 896, 1024}, 5, 0, 1)
	for _, tc := range []struct {
		pred int
		want string
	}{
		{520, "performer crossover: predicted n = 520, measured n = 500 (predicted/measured 1.04); 90 % of resampled runs: 500, the prediction within 30 % of it"},
		{700, "performer crossover: predicted n = 700, measured n = 500 (predicted/measured 1.40); 90 % of resampled runs: 500, the prediction not within 30 % of it"},
	} {
		r.Crossover = map[convert.Form]int{convert.Performer: tc.pred}
		var b strings.Builder
		WriteTable(&b, r)
		if !strings.Contains(b.String(), tc.want) {
			t.Errorf("table lacks %q:\n%s", tc.want, b.String())
		}
	}
}
