package embed

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/linearize/linearize/convert"
)

// TestLatePlan: the passes of Late mode for cases worked out by hand from
// the rule latePlan documents, and its promises over a seeded sweep of
// text, chunk and pass lengths: passes of at most m wordpieces inside the
// text, one when the text fits, each chunk whole in the pass it is pooled
// from with m/8 wordpieces of context on each side where the text has
// them and the chunk leaves room, and no pass without a chunk.
func TestLatePlan(t *testing.T) {
	rep := func(k, n int) []int { return slices.Repeat([]int{k}, n) }
	for _, c := range []struct {
		n, size, overlap, m int
		ranges              [][2]int
		owner               []int
	}{
		{0, 10, 0, 126, [][2]int{{0, 0}}, []int{0}},
		{50, 10, 0, 126, [][2]int{{0, 50}}, rep(0, 5)},
		// c = 15: the first pass keeps chunks ending by 111; the next
		// starts 15 before chunk 11 (110), and the last is the text's
		// final 126 wordpieces.
		{300, 10, 0, 126, [][2]int{{0, 126}, {95, 221}, {174, 300}}, slices.Concat(rep(0, 11), rep(1, 9), rep(2, 10))},
		{1000, 100, 0, 400, [][2]int{{0, 400}, {250, 650}, {550, 950}, {600, 1000}}, []int{0, 0, 0, 1, 1, 1, 2, 2, 2, 3}},
		// Overlapping chunks [0,30) [20,50) [40,70) [60,90) [80,100), c = 8.
		{100, 30, 10, 64, [][2]int{{0, 64}, {32, 96}, {36, 100}}, []int{0, 0, 1, 2, 2}},
	} {
		name := fmt.Sprintf("n %d size %d overlap %d m %d", c.n, c.size, c.overlap, c.m)
		ranges, owner := latePlan(cutChunks(c.n, c.size, c.overlap), c.n, c.m)
		if !slices.Equal(ranges, c.ranges) || !slices.Equal(owner, c.owner) {
			t.Errorf("%s: ranges %v owner %v, want %v %v", name, ranges, owner, c.ranges, c.owner)
		}
	}

	rng := rand.New(rand.NewPCG(1, 2))
	for range 3000 {
		m := 3 + rng.IntN(600)
		size := 1 + rng.IntN(m)
		overlap := rng.IntN(size)
		n := rng.IntN(5 * m)
		name := fmt.Sprintf("n %d size %d overlap %d m %d", n, size, overlap, m)
		chunks := cutChunks(n, size, overlap)
		ranges, owner := latePlan(chunks, n, m)
		c := m / lateContext
		if n <= m && (len(ranges) != 1 || ranges[0] != [2]int{0, n}) {
			t.Fatalf("%s: a text that fits one pass has passes %v", name, ranges)
		}
		used := make([]bool, len(ranges))
		for j, ch := range chunks {
			k := owner[j]
			if k < 0 || k >= len(ranges) || j > 0 && k < owner[j-1] {
				t.Fatalf("%s: chunk %d pooled from pass %d of %d (the one before from %d)", name, j, k, len(ranges), owner[max(0, j-1)])
			}
			used[k] = true
			a, b := ranges[k][0], ranges[k][1]
			if a < 0 || b > n || b-a > m || ch[0] < a || ch[1] > b {
				t.Fatalf("%s: chunk %v is not whole in its pass [%d, %d) of at most %d", name, ch, a, b, m)
			}
			if ch[1]-ch[0] <= m-2*c && (ch[0]-a < min(c, ch[0]) || b-ch[1] < min(c, n-ch[1])) {
				t.Fatalf("%s: chunk %v has less than %d wordpieces of context in pass [%d, %d)", name, ch, c, a, b)
			}
		}
		if i := slices.Index(used, false); i >= 0 {
			t.Fatalf("%s: pass %d %v pools no chunk", name, i, ranges[i])
		}
	}
}

// lateReference is a chunk's late vector computed directly: the
// L2-normalised mean of the hidden states of wordpieces [lo, hi) of the
// text words[a:b] (words as text gives them) when the model at path
// reads prompt+those words as one pass, [CLS] … [SEP], prompt holding p
// wordpieces.
func lateReference(t *testing.T, path, prompt string, p, a, b, lo, hi int) []float64 {
	t.Helper()
	h := directHidden(t, path, prompt+text(b-a, a))
	D := h.Shape[2]
	x := h.Floats()
	v := make([]float64, D)
	for s := 1 + p + lo - a; s < 1+p+hi-a; s++ {
		for d := range D {
			v[d] += float64(x[s*D+d]) / float64(hi-lo)
		}
	}
	return unit(v)
}

// TestLateChunksReadInContext: Late mode's chunk vectors are each chunk's
// wordpieces averaged in a direct run of the model over the whole text,
// with or without a prompt (whose wordpieces are not pooled); a text
// longer than the tiny model's 128 positions is read in the three
// passes of TestLatePlan's case (300 wordpieces in chunks of 10, passes
// of 126), each chunk from its own. The chunks are Chunks mode's, and
// differ from its vectors: they see the rest of the text.
func TestLateChunksReadInContext(t *testing.T) {
	path := modelDir(t)
	const window = 12 // chunks of 10 wordpieces
	rep := func(k, n int) []int { return slices.Repeat([]int{k}, n) }
	for _, c := range []struct {
		prompt string
		p, n   int
		ranges [][2]int
		owner  []int
	}{
		{"", 0, 95, [][2]int{{0, 95}}, rep(0, 10)},
		{"horse ", 1, 95, [][2]int{{0, 95}}, rep(0, 11)},
		{"", 0, 300, [][2]int{{0, 126}, {95, 221}, {174, 300}}, slices.Concat(rep(0, 11), rep(1, 9), rep(2, 10))},
	} {
		name := fmt.Sprintf("prompt %q, %d wordpieces", c.prompt, c.n)
		e := open(t, path, Options{Mode: Late, Window: window, Prompt: c.prompt})
		got, err := e.EmbedChunks([]string{text(c.n, 0), ""})
		if err != nil {
			t.Fatal(err)
		}
		chs := open(t, path, Options{Mode: Chunks, Window: window, Prompt: c.prompt})
		plain, err := chs.EmbedChunks([]string{text(c.n, 0)})
		if err != nil {
			t.Fatal(err)
		}
		chunks := cutChunks(c.n, window-2-c.p, 0)
		if len(got[0]) != len(c.owner) || len(plain[0]) != len(c.owner) || len(got[1]) != 1 {
			t.Fatalf("%s: %d late and %d chunks-mode vectors, want %d; %d for an empty text, want 1", name, len(got[0]), len(plain[0]), len(c.owner), len(got[1]))
		}
		for j, ch := range chunks {
			r := c.ranges[c.owner[j]]
			near(t, fmt.Sprintf("%s: chunk %d %v of pass %v", name, j, ch, r), got[0][j], lateReference(t, path, c.prompt, c.p, r[0], r[1], ch[0], ch[1]), 1e-5)
			if maxDiff(got[0][j], plain[0][j]) < 1e-3 {
				t.Errorf("%s: chunk %d is its chunks-mode vector: the context changed nothing", name, j)
			}
		}
		near(t, name+": empty text", got[1][0], wholeReference(t, path, c.prompt), 1e-5)
	}
}

// TestLateOnLongModel: a model written by `convert long` (no far field)
// reads each of its windows as the original reads that chunk alone, so
// its late chunks are its windows, each the mean of its wordpieces'
// hidden states in the original run on that chunk alone.
func TestLateOnLongModel(t *testing.T) {
	path := modelDir(t)
	w := 128
	long := writeLong(t, path, convert.LongOptions{MaxLength: 4 * w})
	e := open(t, long, Options{Mode: Late})
	if e.Window() != w || e.Pooling() != PoolMean {
		t.Fatalf("late on a long model: %s; want window %d, mean", e, w)
	}
	n := 2*(w-2) + 40
	got, err := e.EmbedChunks([]string{text(n, 5)})
	if err != nil {
		t.Fatal(err)
	}
	if len(got[0]) != 3 {
		t.Fatalf("%d chunks, want its 3 windows", len(got[0]))
	}
	for j := range 3 {
		lo, hi := j*(w-2), min((j+1)*(w-2), n)
		near(t, fmt.Sprintf("window %d", j), got[0][j], lateReference(t, path, "", 0, 5+lo, 5+hi, 5+lo, 5+hi), 2e-5)
	}
	if _, err := Open(long, Options{Mode: Late, Overlap: 4, Backend: "native"}); err == nil || !strings.Contains(err.Error(), "do not overlap") {
		t.Errorf("late with an overlap on a long model: %v, want a refusal", err)
	}
	// Its windows are the model's: another window would frame the text
	// across them.
	for _, m := range []Mode{Late, Long, Auto} {
		if _, err := Open(long, Options{Mode: m, Window: w / 2, Backend: "native"}); err == nil || !strings.Contains(err.Error(), "the window must be 128") {
			t.Errorf("%q mode with window %d on a long model of windows of %d: %v, want a refusal", m, w/2, w, err)
		}
	}
	if e := open(t, long, Options{Mode: Late, Window: w}); e.Window() != w {
		t.Errorf("late with the model's own window: %s", e)
	}
	if _, err := e.EmbedChunks([]string{text(4*(w-2)+1, 0)}); err == nil || !strings.Contains(err.Error(), "admits 512 tokens") {
		t.Errorf("a text past the long model's 512 tokens: %v, want a refusal naming them", err)
	}
}

// TestLateRefusals: Late mode gives vectors per chunk, pools by the mean
// alone, and needs hidden states; its default window is 512 tokens within
// the model's limit, and the model's own pooling gives way to the mean.
func TestLateRefusals(t *testing.T) {
	path := modelDir(t)
	e := open(t, path, Options{Mode: Late})
	if e.Window() != 128 {
		t.Errorf("late window on a 128-position model: %d, want 128", e.Window())
	}
	if _, err := e.Embed([]string{"horse"}); err == nil || !strings.Contains(err.Error(), "EmbedChunks") {
		t.Errorf("Embed in late mode: %v, want a refusal naming EmbedChunks", err)
	}
	if _, err := Open(path, Options{Mode: Late, Pooling: PoolCLS, Backend: "native"}); err == nil || !strings.Contains(err.Error(), "mean") {
		t.Errorf("late with cls pooling: %v, want a refusal", err)
	}
	if _, err := Open(path, Options{Mode: Late, Window: 12, Overlap: 10, Backend: "native"}); err == nil {
		t.Error("an overlap of a whole chunk was accepted")
	}

	mb := modernBERTDir(t, `{"max_position_embeddings": 1024}`)
	if e := open(t, mb, Options{Mode: Late}); e.Window() != LateWindow {
		t.Errorf("late window on a 1024-token model: %d, want %d", e.Window(), LateWindow)
	}

	writeModules(t, path, false)
	cls := `{"word_embedding_dimension": 64, "pooling_mode_cls_token": true}`
	if err := os.WriteFile(filepath.Join(filepath.Dir(path), "1_Pooling", "config.json"), []byte(cls), 0o644); err != nil {
		t.Fatal(err)
	}
	if e := open(t, path, Options{Mode: Late}); e.Pooling() != PoolMean || !strings.Contains(e.String(), "not the model's cls") {
		t.Errorf("late on a cls-pooled model: %s; want mean, saying so", e)
	}

	heads := modelDir(t)
	threeHeads(t, heads, true)
	if _, err := Open(heads, Options{Mode: Late, Backend: "native"}); err == nil || !strings.Contains(err.Error(), "one vector per text") {
		t.Errorf("late on a model whose output is pooled: %v, want a refusal", err)
	}
}

// TestLocated: a passage is located when its best chunk among every
// document's is one of its own document's chunks nearest the place it
// was taken from: one whose span holds that place (both, at a shared
// edge), else the nearest across a gap.
func TestLocated(t *testing.T) {
	unitVec := func(i int) []float32 { v := make([]float32, 4); v[i] = 1; return v }
	dv := [][][]float32{{unitVec(0), unitVec(1), unitVec(2)}, {unitVec(3)}}
	spans := [][]Span{{{0, 10}, {10, 20}, {25, 30}}, {{0, 5}}}
	for _, c := range []struct {
		q    int // the query is unit vector q: its best chunk
		doc  int
		at   int
		want float64
	}{
		{1, 0, 15, 1}, // inside chunk 1
		{0, 0, 15, 0}, // chunk 0 is not the one around 15
		{1, 0, 22, 1}, // in the gap 20–25: chunk 1 is 2 bytes away, chunk 2 3
		{1, 0, 23, 0}, // chunk 2 is nearer now
		{0, 0, 10, 1}, // the edge chunks 0 and 1 share
		{1, 0, 10, 1},
		{3, 0, 15, 0}, // the best chunk is another document's
		{3, 1, 3, 1},
	} {
		got := located([][]float32{unitVec(c.q)}, dv, spans, []Query{{Doc: c.doc, At: c.at}})
		if got[0] != c.want {
			t.Errorf("query %d of document %d taken out at %d: located %g, want %g", c.q, c.doc, c.at, got[0], c.want)
		}
	}
}
