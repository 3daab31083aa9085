package embed

import (
	"runtime"
	"strings"
	"testing"
)

// TestHugeTextReadOnlyAsFarAsKept: a 64 MiB text in Truncate mode, or
// with MaxTokens in any mode, is tokenized only as far as the
// wordpieces kept (the whole text was tokenized before: 16 such lines
// ended the process with Go's fatal out-of-memory); the vector is that
// of the text cut to them.
func TestHugeTextReadOnlyAsFarAsKept(t *testing.T) {
	path := modelDir(t)
	line := text(len(words), 0) + " "
	huge := strings.Repeat(line, (64<<20)/len(line))
	for _, c := range []struct {
		o    Options
		keep int // wordpieces of the text read
	}{
		{Options{Mode: Truncate, Window: 34}, 32},
		{Options{Mode: Truncate}, 126},
		{Options{Mode: Chunk, MaxTokens: 100, Window: 52}, 100},
		{Options{Mode: Long, MaxTokens: 100}, 100},
	} {
		e := open(t, path, c.o)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		passes, read, err := e.plan([]string{huge})
		runtime.ReadMemStats(&after)
		if err != nil {
			t.Fatalf("%+v: %v", c.o, err)
		}
		n := 0
		for _, p := range passes {
			n += len(p.ids) - 2
		}
		if read != int64(c.keep) {
			t.Errorf("%+v: plan counts %d wordpieces read, want %d", c.o, read, c.keep)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; n != c.keep || alloc > 1<<20 {
			t.Errorf("%+v: %d wordpieces planned, %d bytes allocated to plan a 64 MiB text; want %d, at most 1 MiB", c.o, n, alloc, c.keep)
		}
		got, err := e.Embed([]string{huge})
		if err != nil {
			t.Fatal(err)
		}
		want, err := e.Embed([]string{text(c.keep, 0)})
		if err != nil {
			t.Fatal(err)
		}
		near(t, "huge text vs its first wordpieces", got[0], toF64(want[0]), 1e-5)
		// Two texts embedded, each read up to the same wordpieces.
		if w := e.Wordpieces(); w != 2*int64(c.keep) {
			t.Errorf("%+v: Wordpieces %d after two texts of %d read, want %d", c.o, w, c.keep, 2*c.keep)
		}
	}
}
